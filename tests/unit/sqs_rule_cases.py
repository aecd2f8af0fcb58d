"""Cases for every rule of the SQS rule table (sluice_local.emulation.sqs_rules_table), each generated
from its limit.

At the limit, just inside and just outside it; ``refused`` is the table's verdict. Used by
``test_sqs_rules_table.py``, which holds the layer and the local runtime to them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice_local.emulation.sqs_rules_table import RULES, Rule


@dataclass(frozen=True)
class Case:
    rule: str
    label: str
    refused: bool
    """The table's verdict: refused under ``rule`` (with its code), or accepted."""
    request: dict[str, Any] = field(default_factory=dict)
    """check_entry's arguments (``body``, ``attributes``, options), or ``entries`` of a batch."""


def number(rule: Rule) -> int:
    assert isinstance(rule.limit, int), rule.id
    return rule.limit


def items(rule: Rule) -> list[Any]:
    assert isinstance(rule.limit, tuple), rule.id
    return list(rule.limit)


def s(value: str, data_type: str = "String") -> dict[str, Any]:
    return {"DataType": data_type, "StringValue": value}


def entry(**request: Any) -> dict[str, Any]:
    return {"body": "{}", **request}


def attribute(name: str = "k", value: Any = None) -> dict[str, Any]:
    return entry(attributes={name: s("v") if value is None else value})


def batch(*bodies: str, ids: list[str] | None = None) -> dict[str, Any]:
    names = ids if ids is not None else [f"e{i}" for i in range(len(bodies))]
    return {"entries": [{"Id": n, "MessageBody": b} for n, b in zip(names, bodies, strict=True)]}


# --- cases, each generated from its rule's limit --------------------------------------------------


def outside(ranges: Any) -> list[int]:
    """The code points next to each allowed range that no range allows."""
    allowed = [range(lo, hi + 1) for lo, hi in ranges]
    near = sorted({c for lo, hi in ranges for c in (lo - 1, hi + 1) if 0 <= c <= 0x10FFFF})
    return [c for c in near if not any(c in r for r in allowed)]


def character_cases(rule: Rule, make: Callable[[str], dict[str, Any]]) -> list[Case]:
    edges = sorted({c for pair in items(rule) for c in pair})
    return [Case(rule.id, f"#x{c:X} allowed", False, make(chr(c))) for c in edges] + [
        Case(rule.id, f"#x{c:X} refused", True, make(chr(c))) for c in outside(items(rule))
    ]


def size_cases(rule: Rule) -> list[Case]:
    n = number(rule)
    with_attribute = n - len("k") - len("String") - len("v")
    return [
        Case(rule.id, "body at the limit", False, {"body": "x" * n}),
        Case(rule.id, "body 1 byte over", True, {"body": "x" * (n + 1)}),
        Case(rule.id, "2-byte characters at the limit", False, {"body": "é" * (n // 2)}),
        Case(rule.id, "2-byte characters 1 byte over", True, {"body": "é" * (n // 2) + "x"}),
        Case(rule.id, "with an attribute at the limit", False, {"body": "x" * with_attribute, **attribute()}),
        Case(rule.id, "attribute makes it 1 over", True, {**attribute(), "body": "x" * (with_attribute + 1)}),
    ]


def logical_cases(rule: Rule) -> list[Case]:
    value = {
        "String": s("v"),
        "Number": s("1", "Number"),
        "Binary": {"DataType": "Binary", "BinaryValue": b"\1"},
    }
    out = []
    for logical in items(rule):
        typed = value[str(logical)]
        out += [
            Case(rule.id, f"{logical}", False, attribute(value={**typed, "DataType": logical})),
            Case(
                rule.id,
                f"{logical}.int label",
                False,
                attribute(value={**typed, "DataType": f"{logical}.int"}),
            ),
            Case(
                rule.id,
                f"{logical} label with a space",
                False,
                attribute(value={**typed, "DataType": f"{logical}.a b"}),
            ),
            Case(
                rule.id,
                f"{logical} label image/png",
                False,
                attribute(value={**typed, "DataType": f"{logical}.image/png"}),
            ),
            Case(
                rule.id,
                f"{logical} label with NUL",
                True,
                attribute(value={**typed, "DataType": f"{logical}.a\0"}),
            ),
            Case(
                rule.id,
                f"{logical} in lower case",
                True,
                attribute(value={**typed, "DataType": str(logical).lower()}),
            ),
            Case(
                rule.id,
                f"{logical} without the period",
                True,
                attribute(value={**typed, "DataType": f"{logical}x"}),
            ),
        ]
    return [*out, Case(rule.id, "Text", True, attribute(value=s("v", "Text")))]


def number_range_cases(rule: Rule) -> list[Case]:
    low, high = items(rule)
    accepted = [f"1e{high}", f"-1e{high}", f"1e{low}", f"-1e{low}", "0"]
    refused = [f"1.1e{high}", f"2e{high}", f"1e{high + 1}", f"9.9e{low - 1}", f"-1e{low - 1}"]
    return [Case(rule.id, n, False, attribute(value=s(n, "Number"))) for n in accepted] + [
        Case(rule.id, n, True, attribute(value=s(n, "Number"))) for n in refused
    ]


def traced(header: Any, name: str = "AWSTraceHeader", data_type: str = "String") -> dict[str, Any]:
    """A message sent with one system attribute (``MessageSystemAttributes``)."""
    value = header if isinstance(header, dict) else {"DataType": data_type, "StringValue": header}
    return entry(system_attributes={name: value})


HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def system_attribute_cases(rule: Rule) -> list[Case]:
    name, data_type = map(str, items(rule))
    return [
        Case(rule.id, f"{name} of type {data_type}", False, traced(HEADER, name, data_type)),
        Case(rule.id, "another name", True, traced(HEADER, "TraceHeader", data_type)),
        Case(
            rule.id,
            f"{name.lower()} (names are case-sensitive)",
            True,
            traced(HEADER, name.lower(), data_type),
        ),
        Case(rule.id, "type Number", True, traced("1", name, "Number")),
        Case(rule.id, f"type {data_type}.label", True, traced(HEADER, name, f"{data_type}.label")),
        Case(rule.id, "a binary value", True, traced({"DataType": "Binary", "BinaryValue": HEADER.encode()})),
    ]


def trace_header_cases(rule: Rule) -> list[Case]:
    version, time_digits, id_digits = map(int, items(rule))

    def root(v: int = version, t: int = time_digits, n: int = id_digits, digit: str = "a") -> str:
        return f"Root={v}-{'5' * t}-{digit * n}"

    accepted = {
        "Root, Parent and Sampled": HEADER,
        "Root alone": root(),
        "Parent before Root": f"Parent=53995c3f42cd8ad8;{root()}",
        "Sampled undecided": f"{root()};Sampled=?",
    }
    refused = {
        f"version {version + 1}": root(v=version + 1),
        f"{time_digits - 1} digits of time": root(t=time_digits - 1),
        f"{time_digits + 1} digits of time": root(t=time_digits + 1),
        f"{id_digits - 1} digits of identifier": root(n=id_digits - 1),
        f"{id_digits + 1} digits of identifier": root(n=id_digits + 1),
        "an identifier that is not hexadecimal": root(digit="g"),
        "no Root": "Parent=53995c3f42cd8ad8;Sampled=1",
        "Root inside another field's name": f"X{root()}",
        "empty": "",
        "a trailing newline": f"{root()}\n",
        "a space": f"{root()}; Sampled=1",
    }
    return [Case(rule.id, label, False, traced(h)) for label, h in accepted.items()] + [
        Case(rule.id, label, True, traced(h)) for label, h in refused.items()
    ]


def fifo(**request: Any) -> dict[str, Any]:
    return entry(fifo=True, **{"group_id": "g", "deduplication_id": "d", **request})


GENERATORS: dict[str, Callable[[Rule], list[Case]]] = {
    "body.required": lambda r: [
        Case(r.id, "one character", False, {"body": "x" * number(r)}),
        Case(r.id, "empty", True, {"body": ""}),
    ],
    "body.characters": lambda r: character_cases(r, lambda c: {"body": f"a{c}b"}),
    "message.max-bytes": size_cases,
    "attributes.max-count": lambda r: [
        Case(r.id, f"{n} attributes", n > number(r), entry(attributes={f"a{i}": s("v") for i in range(n)}))
        for n in (number(r) - 1, number(r), number(r) + 1)
    ],
    "attribute.name.characters": lambda r: [
        Case(r.id, "every allowed character", False, attribute(str(r.limit).replace(".", "") + ".x")),
        *(
            Case(r.id, f"name with {c!r}", True, attribute(f"a{c}b"))
            for c in " /:@$é\t"
            if c not in str(r.limit)
        ),
        Case(r.id, "empty name", True, attribute("")),
    ],
    "attribute.name.max-length": lambda r: [
        Case(r.id, "at the limit", False, attribute("k" * number(r))),
        Case(r.id, "1 over", True, attribute("k" * (number(r) + 1))),
    ],
    "attribute.name.reserved-prefixes": lambda r: [
        case
        for p in map(str, items(r))
        for case in (
            Case(r.id, p, True, attribute(f"{p}x")),
            Case(r.id, p.upper(), True, attribute(f"{p.upper()}x")),
            Case(r.id, p.lower(), True, attribute(f"{p.lower()}x")),
            Case(r.id, f"{p} without its period", False, attribute(f"{p[:-1]}x")),
            Case(r.id, f"{p} inside the name", False, attribute(f"x{p}y")),
        )
    ],
    "attribute.name.periods": lambda r: [
        Case(r.id, "period inside", False, attribute("a.b")),
        Case(r.id, "leading period", True, attribute(".a")),
        Case(r.id, "trailing period", True, attribute("a.")),
        Case(r.id, "periods in succession", True, attribute("a..b")),
    ],
    "attribute.type.required": lambda r: [
        Case(r.id, "a type", False, attribute(value=s("v"))),
        Case(r.id, "empty type", True, attribute(value=s("v", ""))),
        Case(r.id, "no type", True, attribute(value={"StringValue": "v"})),
    ],
    "attribute.type.logical": logical_cases,
    "attribute.type.max-length": lambda r: [
        Case(r.id, "at the limit", False, attribute(value=s("v", "String." + "x" * (number(r) - 7)))),
        Case(r.id, "1 over", True, attribute(value=s("v", "String." + "x" * (number(r) - 6)))),
    ],
    "attribute.value.required": lambda r: [
        Case(r.id, "empty string", True, attribute(value=s(""))),
        Case(r.id, "empty binary", True, attribute(value={"DataType": "Binary", "BinaryValue": b""})),
        Case(r.id, "number as binary", True, attribute(value={"DataType": "Number", "BinaryValue": b"1"})),
        Case(r.id, "binary as string", True, attribute(value=s("x", "Binary"))),
        Case(
            r.id, "a NUL byte in binary", False, attribute(value={"DataType": "Binary", "BinaryValue": b"\0"})
        ),
    ],
    "attribute.value.characters": lambda r: character_cases(r, lambda c: attribute(value=s(f"a{c}b"))),
    "attribute.number.numeric": lambda r: [
        *(Case(r.id, n, False, attribute(value=s(n, "Number"))) for n in ("1", "-1.5", "1.5e10", "0.25")),
        *(
            Case(r.id, n, True, attribute(value=s(n, "Number")))
            for n in (
                "12abc",
                "NaN",
                "Infinity",
                "one",
                "1_000",
                "\u0661",  # ARABIC-INDIC DIGIT ONE: a digit to Python's \\d, not a number to SQS
                "1\u0660",
                "\uff11",  # FULLWIDTH DIGIT ONE
                "1e99999999999999999999",  # an exponent no decimal context holds
                "1e-99999999999999999999",
            )
        ),
    ],
    "attribute.number.precision": lambda r: (
        [
            Case(r.id, f"{n} digits", n > number(r), attribute(value=s("1" * n, "Number")))
            for n in (number(r), number(r) + 1)
        ]
        + [
            Case(
                r.id,
                "at the limit after a point",
                False,
                attribute(value=s("1." + "1" * (number(r) - 1), "Number")),
            ),
            Case(r.id, "1 over after a point", True, attribute(value=s("1." + "1" * number(r), "Number"))),
            Case(
                r.id,
                "trailing zeroes trimmed",
                False,
                attribute(value=s("1" * number(r) + "0" * 9, "Number")),
            ),
            Case(
                r.id,
                "leading zeroes trimmed",
                False,
                attribute(value=s("0.000" + "1" * number(r), "Number")),
            ),
        ]
    ),
    "attribute.number.range": number_range_cases,
    "message.system-attributes": system_attribute_cases,
    "message.system-attributes.trace-header": trace_header_cases,
    "batch.entries.min": lambda r: [
        Case(r.id, "no entry", True, batch()),
        Case(r.id, "one", False, batch("x")),
    ],
    "batch.entries.max": lambda r: [
        Case(r.id, f"{n} entries", n > number(r), batch(*["x"] * n)) for n in (number(r), number(r) + 1)
    ],
    "batch.id.max-length": lambda r: [
        Case(r.id, "at the limit", False, batch("x", ids=["i" * number(r)])),
        Case(r.id, "1 over", True, batch("x", ids=["i" * (number(r) + 1)])),
        Case(r.id, "empty", True, batch("x", ids=[""])),
    ],
    "batch.id.characters": lambda r: [
        Case(r.id, "every allowed character", False, batch("x", ids=[str(r.limit)])),
        *(
            Case(r.id, f"id with {c!r}", True, batch("x", ids=[f"a{c}b"]))
            for c in " .é/:"
            if c not in str(r.limit)
        ),
    ],
    "batch.id.distinct": lambda r: [
        Case(r.id, "distinct", False, batch("x", "y", ids=["a", "b"])),
        Case(r.id, "repeated", True, batch("x", "y", ids=["a", "a"])),
    ],
    "batch.max-bytes": lambda r: [
        Case(r.id, "at the limit", False, batch("x" * (number(r) // 2), "x" * (number(r) // 2))),
        Case(r.id, "1 byte over", True, batch("x" * (number(r) // 2), "x" * (number(r) // 2 + 1))),
    ],
    "message.delay-seconds": lambda r: [
        Case(r.id, f"{d} s", not items(r)[0] <= d <= items(r)[1], entry(delay_seconds=d))
        for d in (items(r)[0] - 1, items(r)[0], items(r)[1], items(r)[1] + 1)
    ],
    "fifo.delay-seconds": lambda r: [
        Case(r.id, "no per-message delay", False, fifo()),
        Case(r.id, "a per-message delay", True, fifo(delay_seconds=1)),
    ],
    "fifo.group-id.required": lambda r: [
        Case(r.id, "a group", False, fifo()),
        Case(r.id, "no group", True, fifo(group_id=None)),
    ],
    "fifo.deduplication-id.required": lambda r: [
        Case(r.id, "no id, no content-based deduplication", True, fifo(deduplication_id=None)),
        Case(
            r.id,
            "no id, content-based deduplication",
            False,
            fifo(deduplication_id=None, content_based_deduplication=True),
        ),
    ],
    "fifo.ids.max-length": lambda r: [
        Case(r.id, f"{key} of {n}", n > number(r), fifo(**{key: "i" * n}))
        for key in ("group_id", "deduplication_id")
        for n in (number(r), number(r) + 1)
    ],
    "fifo.ids.characters": lambda r: [
        Case(
            r.id, "every allowed character", False, fifo(group_id=str(r.limit), deduplication_id=str(r.limit))
        ),
        *(Case(r.id, f"group id with {c!r}", True, fifo(group_id=f"a{c}b")) for c in " é\t"),
    ],
}

CASES = [case for rule in RULES for case in GENERATORS.get(rule.id, lambda _: [])(rule)]
