"""samconfig.toml, read in one place: by the operator CLI, the local runtime and ``make deploy``.

``python -m sluice_cli.samconfig ENV KEY`` prints one deploy setting (``stack_name``, ``region``) of an
environment, for the Makefile.
"""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["deploy_settings", "parameter_overrides", "parse_overrides"]

SETTINGS = ("stack_name", "region")


def _environment(path: Path, env: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    found = data.get(env) or {}
    return found if isinstance(found, dict) else {}


def _parameters(environment: dict[str, Any], section: str) -> dict[str, Any]:
    params = (environment.get(section) or {}).get("parameters") or {}
    return params if isinstance(params, dict) else {}


def deploy_settings(path: Path, env: str) -> dict[str, str]:
    """``stack_name`` and ``region`` of ``env`` (the deploy section's win over global's, as in sam)."""
    environment = _environment(path, env)
    found: dict[str, str] = {}
    for section in ("global", "deploy"):
        params = _parameters(environment, section)
        found.update(
            {key: params[key] for key in SETTINGS if isinstance(params.get(key), str) and params[key]}
        )
    return found


def parameter_overrides(path: Path, env: str) -> dict[str, str]:
    """The deploy section's ``parameter_overrides`` of ``env`` as a dict."""
    raw = _parameters(_environment(path, env), "deploy").get("parameter_overrides", "")
    items = raw if isinstance(raw, list) else shlex.split(str(raw))
    return parse_overrides(items, where=f"{path.name} [{env}] parameter_overrides")


def parse_overrides(items: list[str], *, where: str) -> dict[str, str]:
    """``["Key=Value", ...]`` → dict; anything else is an error naming ``where``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{where}: {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in SETTINGS:
        print(f"usage: python -m sluice_cli.samconfig ENV {{{'|'.join(SETTINGS)}}}", file=sys.stderr)
        return 2
    value = deploy_settings(Path("samconfig.toml"), argv[0]).get(argv[1])
    if value is None:
        print(f"samconfig.toml [{argv[0]}] has no {argv[1]}", file=sys.stderr)
        return 1
    print(value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
