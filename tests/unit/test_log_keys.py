"""Per-message log keys are appended per thread. Execution environments of one function are processes in
AWS, but threads of one process in the local runtime, where every environment's Powertools logger shares
one formatter: a process-wide ``append_keys`` there is overwritten, and ``inject_lambda_context(clear_state=
True)`` wipes it, whenever another invocation starts (a job's rejection line once lost its ``message_id``
that way). ``thread_safe_append_keys`` keeps each invocation's keys its own, in AWS and here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [
        *(ROOT / "layers" / "common" / "sluice").rglob("*.py"),
        *(ROOT / "functions").rglob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
    ]
)
PROCESS_WIDE = {"append_keys", "remove_keys"}


def process_wide_key_calls(path: Path) -> list[int]:
    """Lines of ``path`` that call ``<something>.append_keys`` or ``.remove_keys``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in PROCESS_WIDE
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_given_a_layer_module_or_handler_then_it_appends_log_keys_per_thread(path: Path) -> None:
    assert process_wide_key_calls(path) == [], (
        f"{path}: use thread_safe_append_keys / thread_safe_remove_keys"
    )


def test_given_a_process_wide_append_then_the_check_notices(tmp_path: Path) -> None:
    source = tmp_path / "app.py"
    source.write_text("logger.thread_safe_append_keys(a=1)\nlogger.append_keys(message_id=m)\n")
    assert process_wide_key_calls(source) == [2]
