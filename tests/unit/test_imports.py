"""Import rules of the layer: a small shared core, one subpackage per capability.

- the layer never imports the local runtime (``sluice_local``) or the operator CLI (``sluice_cli``);
- the core (the modules at the top of ``sluice``) imports no capability;
- a capability imports only the core, itself and the capabilities its ``REQUIRES`` declares;
- importing a capability (or one of its modules) loads none of its siblings, in a fresh interpreter;
- every name a subpackage's ``__all__`` lists resolves.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "layers" / "common" / "sluice"
CAPABILITIES = sorted(p.name for p in LAYER.iterdir() if (p / "__init__.py").is_file())
FORBIDDEN = ("sluice_local", "sluice_cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(LAYER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names (``from a import b`` gives a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import; the layer uses absolute imports")
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _capability_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "sluice" and parts[1] in CAPABILITIES else None


def _requires(capability: str) -> tuple[str, ...]:
    tree = ast.parse((LAYER / capability / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "REQUIRES"
        ):
            assert node.value is not None
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple)
            return value
    raise AssertionError(f"sluice.{capability} declares no REQUIRES")


MODULES = sorted(LAYER.rglob("*.py"))


def test_the_layer_has_capability_subpackages_and_a_core():
    assert {"consumer", "delay", "redrive"} <= set(CAPABILITIES)
    core = {p.stem for p in LAYER.glob("*.py")}
    assert {"errors", "envelope", "sqs", "limits", "metrics", "settings"} <= core


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_no_layer_module_imports_the_local_runtime_or_the_cli(path):
    bad = sorted(m for m in _imports(path) if m.split(".")[0] in FORBIDDEN)
    assert not bad, f"{_module_name(path)} imports {bad}: the layer is deployed, local/ and cli/ are not"


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_each_module_imports_only_the_core_and_the_capabilities_it_may(path):
    # Given the module's own capability (None for the core) and what that capability declares
    name = _module_name(path)
    own = _capability_of(name)
    allowed = set() if own is None else {own, *_requires(own)}
    # When its imports are read, Then every capability it names is allowed
    used = {cap for module in _imports(path) if (cap := _capability_of(module)) is not None}
    assert used <= allowed, f"{name} imports capabilities {sorted(used - allowed)}; " + (
        "the core imports no capability" if own is None else f"declare them in sluice.{own}.REQUIRES"
    )


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_declared_requirements_name_other_capabilities(capability):
    required = _requires(capability)
    assert capability not in required
    assert set(required) <= set(CAPABILITIES)


def _loaded_after(statement: str) -> list[str]:
    listing = "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sluice'))))"
    code = f"import json, sys\n{statement}\n{listing}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if _capability_of(_module_name(p))],
    ids=_module_name,
)
def test_importing_a_capability_module_loads_no_sibling_capability(path):
    # Given a fresh interpreter, When one module of a capability is imported
    name = _module_name(path)
    own = _capability_of(name)
    assert own is not None
    loaded = _loaded_after(f"import {name}")
    # Then no other capability's modules were loaded (beyond what it declares)
    allowed = {own, *_requires(own)}
    siblings = sorted(m for m in loaded if (cap := _capability_of(m)) is not None and cap not in allowed)
    assert not siblings, f"importing {name} loaded {siblings}"


@pytest.mark.subprocess
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_importing_a_subpackage_loads_only_its_init_until_a_name_is_used(capability):
    # Given a fresh interpreter, When the subpackage itself is imported
    loaded = _loaded_after(f"import sluice.{capability}")
    # Then none of its modules is loaded yet: the re-exports are lazy (cold start)
    assert [m for m in loaded if m.startswith(f"sluice.{capability}.")] == []


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_every_exported_name_resolves(capability):
    package = importlib.import_module(f"sluice.{capability}")
    exported = package.__all__
    assert exported == sorted(set(exported)), "keep __all__ sorted and unique"
    for name in exported:
        assert getattr(package, name) is not None, f"sluice.{capability}.{name}"
    assert set(exported) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = package.nope


DISTRIBUTIONS = {"layers/common": "sluice", "cli": "sluice_cli", "local": "sluice_local"}
"""Each distribution's folder (its own pyproject.toml) and the import package it ships."""


@pytest.mark.parametrize(("folder", "package"), sorted(DISTRIBUTIONS.items()))
def test_every_package_folder_is_shipped_by_its_distribution(folder, package):
    # Given a distribution's pyproject.toml and its import package's folders on disk
    import fnmatch  # noqa: PLC0415
    import tomllib  # noqa: PLC0415

    base = LAYER.parents[2] / folder
    config = tomllib.loads((base / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    on_disk = {
        ".".join(path.parent.relative_to(base).parts)
        for path in (base / package).rglob("*")
        if path.name == "__init__.py" or path.suffix == ".sql"
    }
    # Then setuptools ships each one (listed, or found by an include pattern), so a wheel holds them all
    found = config.get("packages", {}).get("find", {}) if isinstance(config.get("packages"), dict) else {}
    if found:
        missing = {p for p in on_disk if not any(fnmatch.fnmatch(p, g) for g in found["include"])}
    else:
        missing = on_disk - set(config["packages"])
    assert on_disk
    assert missing == set()


@pytest.mark.subprocess
def test_given_no_psycopg_when_the_job_store_is_imported_then_the_error_names_the_jobs_extra():
    # Given an interpreter where psycopg cannot be imported (the library installed without its jobs extra)
    code = "import sys\nsys.modules['psycopg'] = None\nfrom sluice.jobs import JobStore"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60,
        env={"PYTHONPATH": str(LAYER.parent), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    # Then importing the job store fails naming the extra that brings its driver
    assert done.returncode == 1
    assert "ModuleNotFoundError: sluice.jobs.JobStore needs psycopg" in done.stderr, done.stderr
    assert "sluice-sqs[jobs]" in done.stderr
