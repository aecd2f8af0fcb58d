"""The test tiers: every marker the README names is registered, every e2e test lands in the stack tier, and
the defaults the README states are the Makefile's."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def registered_markers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {m.split(":", 1)[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}


def readme_tiers() -> dict[str, str]:
    """marker → 'yes'/'no' (in make check) from the README's tier table."""
    rows = re.findall(r"^\| `(\w+)` \| .* \| (yes|no) \|$", README, flags=re.MULTILINE)
    return dict(rows)


def make_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*\?=\s*(\S+)", MAKEFILE, flags=re.MULTILINE)
    assert match, f"{name} is not set in the Makefile"
    return match.group(1)


def test_every_tier_the_readme_names_is_a_registered_marker():
    tiers = readme_tiers()
    assert set(tiers) == {"pg", "slow", "subprocess", "browser", "bench", "stack", "soak", "library"}
    assert set(tiers) <= registered_markers()


def test_make_check_leaves_out_exactly_the_tiers_the_readme_says():
    recipe = re.search(r"^check-tests:.*\n\t(.+)$", MAKEFILE, flags=re.MULTILINE)
    assert recipe, "no check-tests recipe"
    excluded = set(re.findall(r"not (\w+)", recipe.group(1)))
    # soak tests are stack tests too: leaving out the stack tier leaves them out
    assert {name for name, in_check in readme_tiers().items() if in_check == "no"} == excluded | {"soak"}


def test_the_library_tests_exist_and_make_test_runs_them_at_both_ends_instead_of_in_the_dev_environment():
    from tests.conftest import LIBRARY_TESTS  # noqa: PLC0415

    assert LIBRARY_TESTS
    assert [path for path in LIBRARY_TESTS if not (ROOT / path).is_file()] == []
    parts = re.search(r"^TEST_PARTS\s*\?=\s*(.+)$", MAKEFILE, flags=re.MULTILINE)
    assert parts
    assert "library" in parts.group(1).split()
    assert 'TESTS_MARK="not library"' in MAKEFILE


@pytest.mark.parametrize("name", ["CHECK_WORKERS", "TEST_WORKERS"])
def test_the_worker_counts_the_readme_states_are_the_makefiles(name):
    assert f"`{name}={make_variable(name)}`" in README


SHOW_ITEMS = """
def pytest_collection_finish(session):
    for item in session.items:
        marker = item.get_closest_marker("timeout")
        names = ",".join(sorted({m.name for m in item.iter_markers()}))
        print("ITEM", item.nodeid, names or "-", marker.args[0] if marker else None, sep="\\t")
"""


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], str]]:
    """Every test of the suite as pytest collects it (conftest's markers included), in one fresh run:
    node id → (its marker names, its timeout marker's value or 'None'). Under pytest-xdist the tests using
    it may land on different workers: the first collects, under a lock, the others read its output."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # one id per xdist run, shared by its workers
    if run is None:
        stdout = _collect(tmp_path_factory)
    else:
        shared = tmp_path_factory.getbasetemp().parent / f"collected-{run}.txt"
        with shared.with_suffix(".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not shared.exists():
                shared.write_text(_collect(tmp_path_factory))
            stdout = shared.read_text()
    items: dict[str, tuple[set[str], str]] = {}
    for line in stdout.splitlines():
        if line.startswith("ITEM\t"):
            _, nodeid, names, timeout = line.split("\t")
            items[nodeid] = (set(names.split(",")) - {"-"}, timeout)
    assert len(items) > 1000, stdout[-3000:]
    return items


def _collect(tmp_path_factory: pytest.TempPathFactory) -> str:
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "show_items.py").write_text(SHOW_ITEMS)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "show_items", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def files(items: dict[str, tuple[set[str], str]], prefix: str) -> dict[str, tuple[set[str], str]]:
    return {nodeid: v for nodeid, v in items.items() if nodeid.startswith(prefix)}


@pytest.mark.subprocess
def test_every_e2e_test_is_in_the_stack_tier_and_every_soak_test_in_the_soak_tier(collected):
    e2e = files(collected, "tests/e2e/")
    soak = files(collected, "tests/e2e/test_soak.py::")
    assert [nodeid for nodeid, (names, _) in e2e.items() if "stack" not in names] == []
    assert [nodeid for nodeid, (names, _) in soak.items() if "soak" not in names] == []
    assert len(soak) >= 5
    rest = {**files(collected, "tests/unit/"), **files(collected, "tests/functional/")}
    assert rest
    assert [nodeid for nodeid, (names, _) in rest.items() if "stack" in names] == []


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("target", "parts"), [("check", "CHECK_PARTS=check-tests"), ("test", "TEST_PARTS=tests")]
)
@pytest.mark.parametrize("pytest_exit", [0, 1])
def test_make_check_and_make_test_exit_with_the_tests_status(tmp_path, target, parts, pytest_exit):
    # Given a pytest that exits with pytest_exit (a stand-in for the venv's, so nothing real runs)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pytest").write_text(f'#!/bin/sh\necho fake pytest "$@"\nexit {pytest_exit}\n')
    (fake / "pytest").chmod(0o755)
    (fake / "python").write_text("#!/bin/sh\nexit 0\n")  # the bytecode step's
    (fake / "python").chmod(0o755)
    # When make runs the target with only its tests part
    done = subprocess.run(
        [shutil.which("make") or "make", "--no-print-directory", target, f"BIN={fake}", "STAMP=", parts],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # Then make's own status is the tests' (CI goes red on a failing test), and it says so
    assert "fake pytest" in done.stdout, done.stdout + done.stderr
    assert (done.returncode == 0) == (pytest_exit == 0), done.stdout + done.stderr
    assert f"exit {2 if pytest_exit else 0}" in done.stdout, done.stdout


def test_the_stack_tests_share_one_group_each_soak_run_has_its_own_and_the_rest_none():
    from tests.conftest import tier_group  # noqa: PLC0415

    assert tier_group("tests/e2e/test_redrive.py::test_breaker[lambda]") == "stack-redrive"
    assert tier_group("tests/e2e/test_traces.py::test_a_trace") == "stack-redrive"
    assert tier_group("tests/e2e/test_iam.py::test_iam") == "stack"
    assert tier_group("tests/e2e/test_adopt_doc.py::test_the_walkthrough") == "stack-own"
    assert tier_group("tests/e2e/test_demo_output.py::test_the_demo") == "stack-own"
    assert tier_group("tests/e2e/test_jobs.py::test_job_scenario[dead]") == "stack"
    soak = "tests/e2e/test_soak.py::test_the_"
    assert tier_group(soak + "short_soak_loses_nothing_and_duplicates_no_side_effect") == "soak-orders"
    assert tier_group(soak + "job_soak_loses_no_job_and_repeats_no_two_phase_side_effect") == "soak-jobs"
    assert tier_group(soak + "test_a_seed_that_found_a_bug_passes[5104]") == "soak-small"
    assert tier_group("tests/functional/test_consumer.py::test_x") is None
    assert tier_group("tests/unit/test_fit.py::test_y[e2e]") is None


def test_make_test_has_a_worker_for_every_long_group():
    from tests.conftest import GROUP_ORDER  # noqa: PLC0415

    # xdist hands each worker two units at the start: with fewer workers than groups, a long group would
    # queue behind another on one worker
    assert int(make_variable("TEST_WORKERS")) >= len(GROUP_ORDER)


@pytest.mark.subprocess
def test_a_stack_test_without_a_timeout_of_its_own_gets_the_stack_timeout(collected):
    """A stack group's first test pays for the session stack's start and its module's scenarios: the
    default 120 s would assume an idle CPU (a loaded run timed out in setup)."""
    from tests.conftest import STACK_TIMEOUT  # noqa: PLC0415

    def timeouts(path: str) -> set[str]:
        return {timeout for _, timeout in files(collected, path + "::").values()}

    assert timeouts("tests/e2e/test_bad_input_battery.py") == {str(STACK_TIMEOUT)}
    assert timeouts("tests/e2e/test_soak.py") == {"900"}  # the soak's own
    assert timeouts("tests/unit/test_log_keys.py") == {"None"}  # pyproject's default
