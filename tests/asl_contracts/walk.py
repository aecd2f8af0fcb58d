"""The walk of a definition's states, from the execution input to every final state."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from tests.asl_contracts.paths import NUMBER, STRING, ProblemError, evaluate, parse_path, resolve
from tests.asl_contracts.shapes import (
    ANY,
    TASK_ERROR,
    Arr,
    Leaf,
    Obj,
    Shape,
    Union,
    alternatives,
    aws_api,
    describe,
    from_type,
    from_value,
    mismatches,
    union,
)
from tests.asl_contracts.sources import Handler
from tests.asl_contracts.sweep import path_fields

# --- the walk -------------------------------------------------------------------------------------

_STR, _NUM, _BOOL = frozenset({"str"}), frozenset({"number"}), frozenset({"bool"})
_OPERAND_KINDS = {"String": _STR, "Numeric": _NUM, "Boolean": _BOOL, "Timestamp": _STR}
_NARROWING = ("StringEquals", "NumericEquals", "BooleanEquals")
_CHECKED_TYPES = frozenset({"Choice", "Wait", "Succeed", "Fail", "Pass", "Task", "Map"})
MAX_SHAPES_PER_STATE = 64


def _obj(name: str, **fields: Shape) -> Obj:
    return Obj(name, tuple((k, v, True) for k, v in fields.items()))


def context_object(execution_input: Shape, item: Shape | None = None) -> Obj:
    """``$$``: the context object (with ``Map.Item`` inside a Map's ItemSelector)."""
    fields = {
        "Execution": _obj(
            "$$.Execution",
            Id=STRING,
            Input=execution_input,
            Name=STRING,
            RoleArn=STRING,
            StartTime=STRING,
            RedriveCount=NUMBER,
        ),
        "State": _obj("$$.State", EnteredTime=STRING, Name=STRING, RetryCount=NUMBER),
        "StateMachine": _obj("$$.StateMachine", Id=STRING, Name=STRING),
        "Task": _obj("$$.Task", Token=STRING),
    }
    if item is not None:
        fields["Map"] = _obj("$$.Map", Item=_obj("$$.Map.Item", Index=NUMBER, Value=item))
    return _obj("$$", **fields)


def _lambda_result(payload: Shape) -> Obj:
    return _obj(
        "lambda:invoke result",
        Payload=payload,
        StatusCode=NUMBER,
        ExecutedVersion=STRING,
        SdkHttpMetadata=ANY,
        SdkResponseMetadata=ANY,
    )


def _could_equal(value: Shape, operand: Any) -> bool:
    return any(
        not isinstance(option, Leaf) or option.values is None or operand in option.values
        for option in alternatives(value)
    )


def _kinds(value: Shape) -> frozenset[str] | None:
    """The primitive kinds ``value`` can be (None: it could be anything, or an object)."""
    kinds: set[str] = set()
    for option in alternatives(value):
        if not isinstance(option, Leaf) or "any" in option.kinds:
            return None
        kinds |= option.kinds
    return frozenset(kinds - {"null"})


class Walk:
    """One definition's walk; :attr:`problems` when done."""

    def __init__(
        self,
        machine: str,
        *,
        execution_input: Any,
        handlers: Mapping[str, Handler],
        replace: Mapping[Any, Any] | None = None,
    ) -> None:
        self.machine = machine
        self.handlers = handlers
        self.replace = replace or {}
        self.execution_input = from_type(execution_input, self.replace)
        self.problems: list[str] = []
        self._maybe: dict[tuple[str, str, str], list[str]] = {}
        self._found: set[tuple[str, str, str]] = set()
        self._handled: set[tuple[str, str]] = set()  # (state, field) of every path the walk followed
        self._visited: dict[str, Mapping[str, Any]] = {}

    def run(self, definition: Mapping[str, Any]) -> list[str]:
        context = context_object(self.execution_input)
        self.graph(definition, self.execution_input, "", context)
        for key, problems in self._maybe.items():
            if key not in self._found:
                self.report(key[0], key[1], f"{key[2]!r}: " + "; ".join(dict.fromkeys(problems)))
        for where, state in self._visited.items():  # a path the walk does not follow never passes
            for field, value in path_fields(state):
                if (where, field) not in self._handled:
                    self.report(where, field, f"{value!r} is not checked (the walk does not follow it)")
        return self.problems

    def report(self, where: str, field: str, message: str) -> None:
        line = f"{self.machine}: {where}: {field}: {message}"
        if line not in self.problems:
            self.problems.append(line)

    # --- a graph of states -----------------------------------------------------------------------

    def graph(self, block: Mapping[str, Any], start_input: Shape, prefix: str, context: Obj) -> Shape:
        """Walk ``block`` (a definition or a Map's ItemProcessor); the union of its final outputs."""
        states: Mapping[str, Any] = block["States"]
        if block.get("QueryLanguage") == "JSONata":
            self.report(prefix.rstrip("/") or "(definition)", "QueryLanguage", "JSONata is not checked")
        done: set[tuple[str, Shape]] = set()
        pending: list[tuple[str, Shape]] = [(block["StartAt"], start_input)]
        finals: list[Shape] = []
        counts: dict[str, int] = {}
        while pending:
            name, shape = pending.pop(0)
            for alternative in alternatives(shape):
                if (name, alternative) in done:
                    continue
                done.add((name, alternative))
                counts[name] = counts.get(name, 0) + 1
                if counts[name] > MAX_SHAPES_PER_STATE:
                    self.report(prefix + name, "(input)", f"more than {MAX_SHAPES_PER_STATE} input shapes")
                    continue
                if name not in states:
                    self.report(prefix.rstrip("/") or "(definition)", "Next", f"no state {name!r}")
                    continue
                for target, out in self.state(states[name], prefix + name, alternative, context):
                    if target is None:
                        finals.append(out)
                    else:
                        pending.append((target, out))
        return union(finals) if finals else ANY

    def state(
        self, state: Mapping[str, Any], where: str, raw: Shape, context: Obj
    ) -> list[tuple[str | None, Shape]]:
        """(next state or None for the end, its input) for every way out of ``state``."""
        if state.get("QueryLanguage") == "JSONata":
            self.report(where, "QueryLanguage", "JSONata is not checked")
            return []
        kind = state["Type"]
        if kind not in _CHECKED_TYPES:
            self.report(where, "Type", f"{kind} states are not checked")
            return []
        self._visited[where] = state  # its path fields are swept when the walk is done
        effective = self.filter(state, "InputPath", raw, where)
        if kind == "Choice":
            return self.choice(state, where, effective)
        if kind in ("Wait", "Succeed", "Fail"):
            return self.flow(state, where, effective)
        if kind == "Pass" and "Parameters" in state:
            result = self.template(state["Parameters"], effective, where, "Parameters", context)
        elif kind == "Pass":
            result = from_value(state["Result"]) if "Result" in state else effective
        elif kind == "Task":
            result = self.task(state, where, effective, context)
        else:
            result = self.map(state, where, effective, context)
        if "ResultSelector" in state:
            result = self.template(state["ResultSelector"], result, where, "ResultSelector", context)
        merged = self.merge(raw, state.get("ResultPath", "$"), result, where, "ResultPath")
        out = [(None if state.get("End") else state["Next"], self.filter(state, "OutputPath", merged, where))]
        for i, catcher in enumerate(state.get("Catch", [])):  # on the state's raw input, as Step Functions
            caught = self.merge(
                raw, catcher.get("ResultPath", "$"), TASK_ERROR, where, f"Catch[{i}].ResultPath"
            )
            out.append((catcher["Next"], caught))
        return out

    def flow(self, state: Mapping[str, Any], where: str, effective: Shape) -> list[tuple[str | None, Shape]]:
        """Wait, Succeed and Fail: their paths checked, the input passed on."""
        for field, kinds in (
            ("SecondsPath", _NUM),
            ("TimestampPath", _STR),
            ("CausePath", _STR),
            ("ErrorPath", _STR),
        ):
            if field in state:
                self.typed(self.path(effective, state[field], where, field), kinds, where, field)
        if state["Type"] == "Fail":
            return []
        out = self.filter(state, "OutputPath", effective, where)
        return [(None if state["Type"] == "Succeed" or state.get("End") else state["Next"], out)]

    # --- Task and Map ----------------------------------------------------------------------------

    def task(self, state: Mapping[str, Any], where: str, effective: Shape, context: Obj) -> Shape:
        for field in ("TimeoutSecondsPath", "HeartbeatSecondsPath"):
            if field in state:
                self.typed(self.path(effective, state[field], where, field), _NUM, where, field)
        resource = str(state["Resource"])
        params = state.get("Parameters")
        given = (
            effective if params is None else self.template(params, effective, where, "Parameters", context)
        )
        if resource == "arn:aws:states:::lambda:invoke":
            function = str((params or {}).get("FunctionName", ""))
            found = re.fullmatch(r"\$\{(\w+)\}", function)
            handler = self.handlers.get(found.group(1)) if found else None
            if handler is None:
                self.report(
                    where, "Parameters.FunctionName", f"{function!r} names no function of the template"
                )
                return ANY
            wanted = from_type(handler.event, self.replace)
            payload = given.get("Payload") if isinstance(given, Obj) else None
            sent = payload[0] if payload else Obj("(no Payload)", (), closed=True)
            for problem in mismatches(sent, wanted):
                self.report(
                    where, "Parameters.Payload", f"{problem} ({handler.function} takes {describe(wanted)})"
                )
            return _lambda_result(from_type(handler.result, self.replace))
        found = re.fullmatch(r"arn:aws:states:::(aws-sdk:)?([\w-]+):(\w+)", resource)
        if found is None:
            self.report(where, "Resource", f"no contract known for {resource!r}")
            return ANY
        try:
            request, response = aws_api(found.group(2), found.group(3), pascal=bool(found.group(1)))
        except Exception as exc:  # noqa: BLE001 - an unknown service or action is the finding
            self.report(where, "Resource", f"no AWS API {found.group(2)}:{found.group(3)} ({exc})")
            return ANY
        for problem in mismatches(given, request):
            self.report(where, "Parameters", problem)
        return response

    def map(self, state: Mapping[str, Any], where: str, effective: Shape, context: Obj) -> Shape:
        reader, writer = state.get("ItemReader"), state.get("ResultWriter")
        if reader is not None:  # the items are read from S3: their shape is not the input's
            self.template(reader.get("Parameters", {}), effective, where, "ItemReader.Parameters", context)
            item: Shape = ANY
        else:
            items = self.path(effective, state.get("ItemsPath", "$"), where, "ItemsPath")
            lists = [a for a in alternatives(items) if isinstance(a, Arr)]
            if items != ANY and len(lists) != len(alternatives(items)):
                self.report(
                    where, "ItemsPath", f"{state.get('ItemsPath', '$')!r} is {describe(items)}, not a list"
                )
            item = union(a.item for a in lists) if lists else ANY
        for field in (
            "MaxConcurrencyPath", "ToleratedFailureCountPath", "ToleratedFailurePercentagePath",
            "ItemReader.ReaderConfig.MaxItemsPath", "ItemBatcher.MaxItemsPerBatchPath",
            "ItemBatcher.MaxInputBytesPerBatchPath",
        ):  # fmt: skip
            value: Any = state
            for key in field.split("."):
                value = value.get(key) if isinstance(value, Mapping) else None
            if value is not None:
                self.typed(self.path(effective, str(value), where, field), _NUM, where, field)
        selector_field = "ItemSelector" if "ItemSelector" in state else "Parameters"
        if selector_field in state:
            inner = context_object(self.execution_input, item)
            item = self.template(state[selector_field], effective, where, selector_field, inner)
        batcher = state.get("ItemBatcher")
        if batcher is not None:  # each iteration gets {"Items": [...], "BatchInput": ...}
            fields: dict[str, Shape] = {"Items": Arr(item)}
            if "BatchInput" in batcher:
                field = "ItemBatcher.BatchInput"
                fields["BatchInput"] = self.template(batcher["BatchInput"], effective, where, field, context)
            item = _obj(f"ItemBatcher batch of {where}", **fields)
        if writer is not None:  # the results go to S3; the Map's result describes where
            self.template(writer.get("Parameters", {}), effective, where, "ResultWriter.Parameters", context)
        processor = state.get("ItemProcessor") or state["Iterator"]
        out = Arr(self.graph(processor, item, where + "/", context))
        return ANY if writer is not None else out

    # --- Choice ------------------------------------------------------------------------------------

    def choice(
        self, state: Mapping[str, Any], where: str, effective: Shape
    ) -> list[tuple[str | None, Shape]]:
        out: list[tuple[str | None, Shape]] = []
        for i, rule in enumerate(state["Choices"]):
            narrowed = self.condition(rule, effective, where, f"Choices[{i}]")
            if narrowed is not None:
                out.append((rule["Next"], self.filter(state, "OutputPath", narrowed, where)))
        if "Default" in state:
            out.append((state["Default"], self.filter(state, "OutputPath", effective, where)))
        return out

    def condition(self, rule: Mapping[str, Any], shape: Shape, where: str, field: str) -> Shape | None:
        """``shape`` narrowed by ``rule`` (None: it can never match), its paths checked."""
        if "And" in rule:
            narrowed: Shape | None = shape
            for i, sub in enumerate(rule["And"]):
                narrowed = self.condition(sub, narrowed, where, f"{field}.And[{i}]") if narrowed else None
            return narrowed
        if "Or" in rule:
            matches = [
                self.condition(sub, shape, where, f"{field}.Or[{i}]") for i, sub in enumerate(rule["Or"])
            ]
            kept = [m for m in matches if m is not None]
            return union(kept) if kept else None
        if "Not" in rule:
            self.condition(rule["Not"], shape, where, f"{field}.Not")
            return shape
        return self.comparison(rule, shape, where, field)

    def comparison(self, rule: Mapping[str, Any], shape: Shape, where: str, field: str) -> Shape | None:
        """One ``Variable`` test, its paths checked; None when ``shape`` can never pass it."""
        presence = "IsPresent" in rule
        value = self.path(shape, rule["Variable"], where, f"{field}.Variable", deferred=presence)
        for key, operand in rule.items():
            if key.endswith("Path"):
                self.path(shape, operand, where, f"{field}.{key}")
        if presence:
            try:
                resolve(shape, parse_path(rule["Variable"])[1])
            except ProblemError:
                return None if rule["IsPresent"] else shape
            return shape
        for prefix, kinds in _OPERAND_KINDS.items():
            if any(key.startswith(prefix) for key in rule):
                self.typed(value, kinds, where, f"{field}.Variable {rule['Variable']!r}")
        for key in _NARROWING:
            if key in rule and not _could_equal(value, rule[key]):
                return None
        return shape

    # --- paths ----------------------------------------------------------------------------------

    def path(
        self,
        shape: Shape,
        path: str,
        where: str,
        field: str,
        *,
        context: Obj | None = None,
        deferred: bool = False,
    ) -> Shape:
        """The shape at ``path``; reports it when it does not resolve (``deferred``: only when it
        resolves in no shape that reaches this state, as for ``IsPresent``)."""
        self._handled.add((where, field))
        try:
            root, steps = parse_path(path)
        except ValueError as exc:
            self.report(where, field, str(exc))
            return ANY
        if root == "$$" and context is None:
            context = context_object(self.execution_input)
        try:
            found = resolve(context if root == "$$" else shape, steps)  # type: ignore[arg-type]
        except ProblemError as exc:
            if deferred:
                self._maybe.setdefault((where, field, path), []).append(str(exc))
            else:
                self.report(where, field, f"{path!r}: {exc}")
            return ANY
        if deferred:
            self._found.add((where, field, path))
        return found

    def typed(self, value: Shape, kinds: frozenset[str], where: str, field: str) -> None:
        actual = _kinds(value)
        if actual is not None and actual and not actual <= kinds:
            self.report(where, field, f"is {describe(value)}, where {'|'.join(sorted(kinds))} is needed")

    def filter(self, state: Mapping[str, Any], field: str, shape: Shape, where: str) -> Shape:
        """InputPath / OutputPath."""
        if field in state:
            self._handled.add((where, field))
        if field not in state or state[field] == "$":
            return shape
        if state[field] is None:
            return Obj("{}", ())
        return self.path(shape, state[field], where, field)

    def template(self, template: Any, data: Shape, where: str, field: str, context: Obj) -> Shape:
        """A payload template (Parameters, ItemSelector, ResultSelector) filled from ``data``."""
        if isinstance(template, dict):
            fields = []
            for key, value in template.items():
                at = f"{field}.{key}"
                if key.endswith(".$"):
                    self._handled.add((where, at))
                    try:
                        shape = evaluate(str(value), functools.partial(self._at, data, where, at, context))
                    except ProblemError as exc:
                        self.report(where, at, str(exc))
                        shape = ANY
                    fields.append((key[:-2], shape, True))
                else:
                    fields.append((key, self.template(value, data, where, at, context), True))
            return Obj(f"{field} of {where}", tuple(fields), closed=True)
        if isinstance(template, list):
            shapes = [self.template(v, data, where, f"{field}[{i}]", context) for i, v in enumerate(template)]
            return Arr(union(shapes) if shapes else ANY)
        return from_value(template)

    def _at(self, data: Shape, where: str, field: str, context: Obj, path: str) -> Shape:
        return self.path(data, path, where, field, context=context)

    def merge(self, raw: Shape, result_path: str | None, result: Shape, where: str, field: str) -> Shape:
        """ResultPath: ``result`` put into the state's input."""
        self._handled.add((where, field))
        if result_path is None:
            return raw
        try:
            root, steps = parse_path(result_path)
        except ValueError as exc:
            self.report(where, field, str(exc))
            return ANY
        if root != "$" or any(not isinstance(s, str) for s in steps):
            self.report(where, field, f"{result_path!r}: a ResultPath names fields of $ only")
            return ANY
        return _put(raw, [str(s) for s in steps], result)


def _put(shape: Shape, steps: list[str], value: Shape) -> Shape:
    if not steps:
        return value
    if isinstance(shape, Union):
        return union(_put(o, steps, value) for o in shape.options)
    if not isinstance(shape, Obj):
        shape = Obj("(object)", ())
    current = shape.get(steps[0])
    return shape.with_field(steps[0], _put(current[0] if current else Obj("(object)", ()), steps[1:], value))


def check(
    definition: Mapping[str, Any],
    *,
    machine: str,
    execution_input: Any,
    handlers: Mapping[str, Handler],
    replace: Mapping[Any, Any] | None = None,
) -> list[str]:
    """Every JSONPath of ``definition`` that does not resolve in its contract, and every Task input
    that does not match its function's (``replace``: contracts swapped for others, everywhere)."""
    walk = Walk(machine, execution_input=execution_input, handlers=handlers, replace=replace)
    return walk.run(definition)
