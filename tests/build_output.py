"""Reading what `sam build` printed and built: its warnings, and whether a layer's compiled files serve
both Lambda architectures (file names and ELF headers only, nothing imported)."""

from __future__ import annotations

import re
from pathlib import Path

WARNING = re.compile(r"warn|not found|deprecat", re.IGNORECASE)
ELF_MACHINES = {0xB7: "aarch64", 0x3E: "x86_64"}
ARCHITECTURES = frozenset(ELF_MACHINES.values())
_TAGGED = re.compile(r"-(aarch64|x86_64)-linux-gnu\.so$")


def build_warnings(output: str) -> list[str]:
    """The lines of ``sam build``'s output that warn (SAM CLI's, pip's, make's)."""
    return [line for line in output.splitlines() if WARNING.search(line)]


def elf_machine(path: Path) -> str | None:
    """The architecture an ELF file is built for (its header's e_machine), None for any other file."""
    with path.open("rb") as file:
        head = file.read(20)
    if len(head) < 20 or not head.startswith(b"\x7fELF"):
        return None
    return ELF_MACHINES.get(int.from_bytes(head[18:20], "little"), f"e_machine {head[18:20].hex()}")


def architecture_gaps(python: Path) -> list[str]:
    """What keeps a layer's ``python/`` folder from serving arm64 and x86_64 functions alike: an extension
    module (``*.cpython-313-<arch>-linux-gnu.so``) without its other-architecture twin or whose code is not
    the architecture its name says, a folder of bundled libraries (``psycopg_binary.libs``) with one
    architecture's only."""
    gaps: list[str] = []
    untagged: dict[Path, set[str]] = {}
    for path in sorted(p for p in python.rglob("*") if p.is_file()):
        machine = elf_machine(path)
        if machine is None:
            continue
        where = path.relative_to(python).as_posix()
        tag = _TAGGED.search(path.name)
        if tag is None:
            untagged.setdefault(path.parent, set()).add(machine)
            continue
        if machine != tag[1]:
            gaps.append(f"{where} holds {machine} code")
        (other,) = ARCHITECTURES - {tag[1]}
        if not path.with_name(path.name.replace(f"-{tag[1]}-", f"-{other}-")).is_file():
            gaps.append(f"{where} has no {other} twin")
    for folder, machines in sorted(untagged.items()):
        if machines != ARCHITECTURES:
            gaps.append(f"{folder.relative_to(python).as_posix()}/ holds {sorted(machines)} libraries only")
    return gaps


def extension_modules(python: Path) -> set[str]:
    """Each architecture-tagged extension module, its architecture taken out of the name."""
    return {
        _TAGGED.sub("", p.relative_to(python).as_posix())
        for p in python.rglob("*.so")
        if _TAGGED.search(p.name)
    }
