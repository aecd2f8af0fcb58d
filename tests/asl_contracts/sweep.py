"""Every path-bearing field of a state, so that none the walk does not follow can pass silently.

A state's JSONPaths live in keys ending ``Path`` (``InputPath``, ``TimeoutSecondsPath``,
``Catch[0].ResultPath``, a Choice rule's ``StringEqualsPath``, ...) and in payload-template keys ending
``.$`` (``Parameters.QueueUrl.$``, ``ItemReader.Parameters.Bucket.$``, ...). The walk records each
field it resolves; :func:`path_fields` lists them all, named as the walk names them, and whatever the
walk did not record is reported as not checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

WALKED_ELSEWHERE = frozenset({"States", "ItemProcessor", "Iterator", "Branches"})
"""Keys of a state whose own states are walked as graphs of their own (and swept there)."""


def is_path_key(key: str) -> bool:
    return key.endswith(("Path", ".$"))


def path_fields(state: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(name, value) of every ``*Path`` / ``.$`` key anywhere in ``state`` (not in its inner graphs),
    named ``Parameters.a.b.$``, ``Catch[0].ResultPath``, ``Choices[1].And[0].StringEqualsPath``."""
    for key, value in state.items():
        if key in WALKED_ELSEWHERE:
            continue
        yield from _fields(key, value, key)


def _fields(key: str, value: Any, name: str) -> Iterator[tuple[str, Any]]:
    if is_path_key(key):
        yield name, value
    if isinstance(value, Mapping):
        for inner, inner_value in value.items():
            yield from _fields(str(inner), inner_value, f"{name}.{inner}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _fields("", item, f"{name}[{i}]")
