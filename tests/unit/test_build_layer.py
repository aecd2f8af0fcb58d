"""layers/common/build_layer.py: one python/ folder for both architectures, and the variant without what
AWS's Powertools layer provides. The built layer itself is checked in tests/functional/test_packaging.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_layer", ROOT / "layers" / "common" / "build_layer.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_layer", module)
    spec.loader.exec_module(module)
    return module


build_layer = _load()


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def test_given_two_architectures_wheels_when_merged_then_each_keeps_its_compiled_files(
    tmp_path: Path,
) -> None:
    arm = _tree(tmp_path / "arm64", {
        "wrapt/__init__.py": b"shared",
        "wrapt/_wrappers.cpython-313-aarch64-linux-gnu.so": b"arm",
        "wrapt-2.5.2.dist-info/WHEEL": b"Tag: cp313-cp313-manylinux2014_aarch64",
    })  # fmt: skip
    x86 = _tree(tmp_path / "x86_64", {
        "wrapt/__init__.py": b"shared",
        "wrapt/_wrappers.cpython-313-x86_64-linux-gnu.so": b"x86",
        "wrapt-2.5.2.dist-info/WHEEL": b"Tag: cp313-cp313-manylinux2014_x86_64",
    })  # fmt: skip
    out = tmp_path / "python"

    differing = build_layer.merge([arm, x86], out)

    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "wrapt-2.5.2.dist-info/WHEEL",
        "wrapt/__init__.py",
        "wrapt/_wrappers.cpython-313-aarch64-linux-gnu.so",
        "wrapt/_wrappers.cpython-313-x86_64-linux-gnu.so",
    ]
    assert (out / "wrapt/_wrappers.cpython-313-x86_64-linux-gnu.so").read_bytes() == b"x86"
    # wheel metadata differs per architecture: the first one's is kept, and said
    assert differing == ["wrapt-2.5.2.dist-info/WHEEL"]
    assert (out / "wrapt-2.5.2.dist-info/WHEEL").read_bytes().endswith(b"aarch64")


def test_given_one_module_path_with_different_bytes_when_merged_then_the_build_stops(tmp_path: Path) -> None:
    # an architecture-neutral name holding compiled code would serve one architecture the other's
    arm = _tree(tmp_path / "arm64", {"pkg/_speedups.abi3.so": b"arm"})
    x86 = _tree(tmp_path / "x86_64", {"pkg/_speedups.abi3.so": b"x86"})

    with pytest.raises(build_layer.CollisionError, match=r"pkg/_speedups\.abi3\.so differs"):
        build_layer.merge([arm, x86], tmp_path / "python")


def test_given_the_layer_requirements_then_the_variant_ships_only_what_powertools_layer_lacks() -> None:
    everything = {
        build_layer.requirement_name(line) for line in build_layer.requirements(without_powertools=False)
    }
    variant = {
        build_layer.requirement_name(line) for line in build_layer.requirements(without_powertools=True)
    }

    # every name the Powertools layer is said to provide is one the layer pins (a stale name would hide a gap)
    assert everything >= build_layer.POWERTOOLS_LAYER_PROVIDES
    assert variant == everything - build_layer.POWERTOOLS_LAYER_PROVIDES
    assert variant == {"psycopg", "psycopg-binary"}


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("pydantic_core==2.46.5", "pydantic-core"),
        ("psycopg-binary==3.3.6", "psycopg-binary"),
        ("Wrapt", "wrapt"),
    ],
)
def test_given_a_requirement_line_then_its_name_is_normalized(line: str, name: str) -> None:
    assert build_layer.requirement_name(line) == name
