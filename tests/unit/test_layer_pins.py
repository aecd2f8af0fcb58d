"""The common layer ships exactly the pinned runtime dependencies the dev environment declares (the root
pyproject.toml), and those pins lie inside the ranges the library declares (layers/common/pyproject.toml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "layers" / "common" / "requirements.txt"
PYPROJECT = ROOT / "pyproject.toml"
LIBRARY = ROOT / "layers" / "common" / "pyproject.toml"
OWN = {"sluice-sqs", "sluice-sqs-cli", "sluice-sqs-local"}
"""This repository's distributions: the dev environment installs them from their folders, unpinned."""

# Provided by the Lambda Python runtime, so declared for development but never bundled in the layer.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "urllib3"}

_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>.*)$")


def normalize(name: str) -> str:
    """PEP 503 name: lowercase, runs of '-', '_' and '.' become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(line: str) -> tuple[str, str]:
    """``name[extras] <spec>`` → (normalized name, spec without spaces or environment marker)."""
    requirement = line.split(";", 1)[0].strip()
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"unreadable requirement {line!r}")
    return normalize(match["name"]), re.sub(r"\s+", "", match["spec"])


def pinned_version(spec: str) -> str | None:
    """The version of an exact ``==`` pin, else None (ranges, wildcards, several clauses)."""
    match = re.fullmatch(r"==([A-Za-z0-9.+!-]+)", spec)
    return match[1] if match else None


def layer_requirements() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def project_dependencies(path: Path = PYPROJECT) -> dict[str, str]:
    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    return {name: spec for name, spec in map(parse, project["dependencies"]) if name not in OWN}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("aws-lambda-powertools[tracer]==3.37.0", ("aws-lambda-powertools", "==3.37.0")),
        ("Typing_Extensions == 4.16.0", ("typing-extensions", "==4.16.0")),
        ("zope.interface>=6 ; python_version > '3.8'", ("zope-interface", ">=6")),
        ("boto3", ("boto3", "")),
    ],
)
def test_given_requirement_lines_when_parsed_then_names_are_normalized_and_extras_dropped(
    line: str, expected: tuple[str, str]
) -> None:
    assert parse(line) == expected


@pytest.mark.parametrize(
    ("spec", "version"), [("==1.2.3", "1.2.3"), (">=1.2", None), ("==1.*", None), ("", None)]
)
def test_given_a_specifier_when_read_then_only_an_exact_pin_has_a_version(
    spec: str, version: str | None
) -> None:
    assert pinned_version(spec) == version


def test_given_the_layer_requirements_when_read_then_every_package_is_pinned_exactly() -> None:
    unpinned = [line for line in layer_requirements() if pinned_version(parse(line)[1]) is None]

    assert layer_requirements()
    assert unpinned == []


def test_given_the_layer_requirements_when_read_then_no_package_is_listed_twice() -> None:
    names = [parse(line)[0] for line in layer_requirements()]

    assert len(names) == len(set(names))


def test_given_both_files_when_compared_then_the_layer_pins_the_versions_pyproject_declares() -> None:
    declared = project_dependencies()
    layer = dict(parse(line) for line in layer_requirements())

    assert layer == {name: declared.get(name, "(not in [project.dependencies])") for name in layer}


def test_given_both_files_when_compared_then_every_pinned_runtime_dependency_is_in_the_layer() -> None:
    declared = project_dependencies()
    layer = {parse(line)[0] for line in layer_requirements()}

    missing = sorted(
        name for name, spec in declared.items() if name not in RUNTIME_PROVIDED and name not in layer
    )

    assert missing == []
    assert all(pinned_version(spec) for name, spec in declared.items() if name not in RUNTIME_PROVIDED)


def test_given_the_layer_requirements_when_read_then_nothing_the_runtime_provides_is_bundled() -> None:
    assert {parse(line)[0] for line in layer_requirements()} & RUNTIME_PROVIDED == set()


def test_given_the_library_ranges_when_compared_then_every_pin_the_layer_ships_lies_inside_them() -> None:
    from packaging.specifiers import SpecifierSet  # noqa: PLC0415

    layer = {name: pinned_version(spec) or "" for name, spec in map(parse, layer_requirements())}
    extras = tomllib.loads(LIBRARY.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    ranges = project_dependencies(LIBRARY) | dict(map(parse, extras["jobs"]))

    outside = {
        name: (layer[name], spec)
        for name, spec in ranges.items()
        if name in layer and layer[name] not in SpecifierSet(spec)
    }
    assert set(ranges) - RUNTIME_PROVIDED <= set(layer), "the layer ships every dependency of the library"
    assert outside == {}
