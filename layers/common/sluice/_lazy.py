"""Lazy re-exports for the capability subpackages (PEP 562).

``from sluice.redrive import Breaker`` imports only ``sluice.redrive.breaker``: a Lambda that needs one
piece of a capability does not pay, at cold start, for the modules beside it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``exports`` maps a public name to its module."""

    def __getattr__(name: str) -> object:  # noqa: N807 - the module-level hook's own name
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # found once, then a plain attribute
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*exports, *vars(sys.modules[package])})

    return __getattr__, __dir__
