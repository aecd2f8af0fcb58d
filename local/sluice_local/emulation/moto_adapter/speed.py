"""Work moto repeats that gives the same result every time, done once while a stack runs. Each was a large
share of the tests' CPU, which share two cores: moto's CloudFormation read a template body (JSON, as the
runtime sends it) with PyYAML's pure-Python loader, about a tenth of a stack's start; its Step Functions
parsed a state machine's definition with ANTLR at every execution, 40 % of an idle stack's CPU in
``RedriveMode=stepfunctions`` (the redrive backstop starts an execution every few seconds)."""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import (
    ASL_PARSE,
    CFN_PARSE_TEMPLATE,
    Undo,
    replace,
    undo_all,
)

__all__ = ["install_parse_once"]


def install_parse_once() -> Undo:
    """A JSON template body read as JSON (any other body by moto's own parser), and each state machine
    definition parsed once per process (see :func:`_parse_definitions_once`)."""
    return undo_all([_json_templates(), _parse_definitions_once()])


def _json_templates() -> Undo:
    owner = CFN_PARSE_TEMPLATE.owner_class()
    original = getattr(owner, CFN_PARSE_TEMPLATE.name)

    def parse_template(template: str) -> dict[str, Any]:
        try:
            parsed = json.loads(template)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else dict(original(template))

    return replace(owner, CFN_PARSE_TEMPLATE.name, staticmethod(parse_template))


def _parse_definitions_once() -> Undo:
    """moto's parse of a definition builds a tree of evaluation components that keep no state of an
    execution (that lives in the execution's environment), except a key each component draws lazily the
    first time it is asked for it (its slot in an environment's heap). The tree is built once per
    definition and every key drawn before it is shared, so two executions starting together can never
    draw two keys for one component. A definition that does not parse raises, as before, every time."""
    owner = ASL_PARSE.owner_class()
    original = getattr(owner, ASL_PARSE.name)
    lock = threading.Lock()

    @functools.lru_cache(maxsize=64)
    def parsed(definition: str) -> Any:
        program, tree = original(definition)
        _draw_keys(program)
        return program, tree

    def parse(definition: str) -> Any:
        with lock:
            return parsed(definition)

    return replace(owner, ASL_PARSE.name, staticmethod(parse))


def _draw_keys(root: Any) -> None:
    """Ask every evaluation component reachable from ``root`` (through the parser's objects) for its key."""
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent  # noqa: PLC0415

    seen: set[int] = set()
    stack = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, EvalComponent):
            _ = item.heap_key
        if hasattr(item, "__dict__") and type(item).__module__.startswith("moto.stepfunctions.parser.asl"):
            stack.extend(vars(item).values())  # components hold components, directly or in declarations
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
