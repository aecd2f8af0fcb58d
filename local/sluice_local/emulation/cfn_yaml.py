"""A CloudFormation template's YAML read as ``sam deploy`` reads it: samtranslator's own reading (its
``yaml_parse``: short-form intrinsics such as ``!Ref`` become their long forms), with libyaml's scanner
and parser where PyYAML has them. The pure-Python ones took about a sixth of a stack's start, and the
tests start many stacks; what they build is the same (the constructors are PyYAML's and samtranslator's
either way, tests/unit/test_cfn_yaml.py)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml
from samtranslator.yaml_helper import intrinsics_multi_constructor

__all__ = ["parse"]

_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it


class _Loader(_BASE):  # type: ignore[misc]
    """A safe loader of its own (samtranslator adds its constructor to PyYAML's shared SafeLoader)."""


_Loader.add_multi_constructor("!", intrinsics_multi_constructor)


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (SafeLoader's constructors)


def parse(text: str) -> Any:
    """``text`` parsed; a fresh copy each call (the same text is read once per process)."""
    return copy.deepcopy(_parsed(text))
