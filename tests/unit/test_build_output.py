"""tests/build_output.py's readers, on made-up build output and layer folders."""

from __future__ import annotations

from pathlib import Path

from tests.build_output import architecture_gaps, build_warnings, extension_modules


def test_given_a_build_output_then_the_warning_lines_are_the_ones_found() -> None:
    output = (
        "Building codeuri: /src/functions/redriver runtime: python3.13 architecture: arm64\n"
        "requirements.txt file not found. Continuing the build without dependencies.\n"
        " Running PythonPipBuilder:CopySource\n"
        "WARNING: Location 'file:///opt/pypi/simple/x/' is ignored\n"
        "Build Succeeded\n"
    )
    assert build_warnings(output) == [
        "requirements.txt file not found. Continuing the build without dependencies.",
        "WARNING: Location 'file:///opt/pypi/simple/x/' is ignored",
    ]


def _elf(machine: int) -> bytes:
    return b"\x7fELF" + bytes(14) + machine.to_bytes(2, "little") + bytes(8)


def test_given_a_layer_with_one_architecture_missing_then_each_gap_is_named(tmp_path: Path) -> None:
    files = {
        "wrapt/_wrappers.cpython-313-aarch64-linux-gnu.so": _elf(0xB7),  # no x86_64 twin
        "core/_core.cpython-313-aarch64-linux-gnu.so": _elf(0xB7),
        "core/_core.cpython-313-x86_64-linux-gnu.so": _elf(0xB7),  # named x86_64, built for aarch64
        "pkg.libs/libpq-1a2b.so.5": _elf(0xB7),  # bundled libraries of one architecture only
        "pkg/__init__.py": b"",
    }
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)

    assert architecture_gaps(tmp_path) == [
        "core/_core.cpython-313-x86_64-linux-gnu.so holds aarch64 code",
        "wrapt/_wrappers.cpython-313-aarch64-linux-gnu.so has no x86_64 twin",
        "pkg.libs/ holds ['aarch64'] libraries only",
    ]
    assert extension_modules(tmp_path) == {"wrapt/_wrappers.cpython-313", "core/_core.cpython-313"}
