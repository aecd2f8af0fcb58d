"""A workload's extra environment variables: its block's ``Environment`` in workloads.yaml.

CloudFormation cannot turn a mapping's entry into a map of variables, so the template hands the
consumer the workload's ``NAME=value`` entries as one variable, ``SLUICE_WORKLOAD_ENVIRONMENT`` (one
entry a line), and :func:`apply` puts them in the environment at cold start (``Consumer.from_env``
calls it; a handler module whose own code reads a variable before that calls it first).

An entry never overrides a variable silently: a name of sluice's (``SLUICE_*``), Powertools'
(``POWERTOOLS_*``) or Lambda's (``AWS_*``, ``LAMBDA_*``, ``_*``, ``PATH``, ``TZ``, ...), or of any
variable already set with another value (``LOG_LEVEL``, ``LEDGER_TABLE_NAME``, ...), is refused with a
:class:`~sluice.errors.ConfigurationError` naming it: the consumer does not start. So are variables
taking more than :data:`MAX_BYTES` (Lambda refuses a function's beyond 4 KB in all).
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping

from sluice.errors import ConfigurationError

__all__ = ["MAX_BYTES", "RESERVED_NAMES", "RESERVED_PREFIXES", "VARIABLE", "apply", "parse"]

VARIABLE = "SLUICE_WORKLOAD_ENVIRONMENT"
RESERVED_PREFIXES = ("SLUICE_", "POWERTOOLS_", "AWS_", "LAMBDA_", "_")
"""sluice's settings, Powertools', and those Lambda reserves or sets itself."""
RESERVED_NAMES = frozenset({"LANG", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_PATH", "TZ"})
"""The variables Lambda's Python runtime sets beside the reserved prefixes (AWS Lambda's "Defined
runtime environment variables")."""
MAX_BYTES = 2048
"""The most a workload's variables may take (names and values): Lambda refuses a function whose
variables exceed 4 KB in all, and the consumer's own take about 1.3 KB with a 30-character stack name
(up to about 2 KB with a 128-character one)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(text: str) -> dict[str, str]:
    """The ``NAME=value`` lines of ``text`` as variables (blank lines skipped; a value may hold ``=``).

    Raises :class:`ConfigurationError` naming the entry for a malformed one, a reserved name or a name
    given twice."""
    variables: dict[str, str] = {}
    problems: list[str] = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not _NAME.fullmatch(name):
            problems.append(f"{line!r} is not NAME=value with NAME letters, digits and _")
        elif name.upper().startswith(RESERVED_PREFIXES) or name.upper() in RESERVED_NAMES:
            reserved = ", ".join(RESERVED_PREFIXES)
            problems.append(f"{name} is reserved (a name starting {reserved} is not a workload's)")
        elif name in variables:
            problems.append(f"{name} is given twice")
        else:
            variables[name] = value
    size = sum(len(k.encode()) + len(v.encode()) for k, v in variables.items())
    if size > MAX_BYTES:
        problems.append(f"its variables take {size} bytes, more than {MAX_BYTES} (Lambda's 4 KB in all)")
    if problems:
        raise ConfigurationError(f"{VARIABLE} (the workload's Environment): " + "; ".join(problems))
    return variables


def apply(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Put the workload's variables (``environ[VARIABLE]``) in ``environ``; returns them.

    A variable already set to the same value is left as it is (calling this twice is harmless); one
    already set to another value is refused, none applied."""
    variables = parse(environ.get(VARIABLE, ""))
    clashes = sorted(name for name, value in variables.items() if environ.get(name, value) != value)
    if clashes:
        raise ConfigurationError(
            f"{VARIABLE} (the workload's Environment) would override {', '.join(clashes)}, "
            "already set in the function's environment"
        )
    environ.update(variables)
    return variables
