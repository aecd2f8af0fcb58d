"""A function whose cold start raises answers its invocation as Lambda does: the error reported with its
type and message (``FunctionError: Unhandled``), not a failure of the runtime itself; the next
invocation runs the init again."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_local.emulation.functions import FunctionError, FunctionHost, FunctionSpec


@pytest.fixture(autouse=True)
def _forget_the_module() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("_sluice_fn_") or name == "settings_check":
            del sys.modules[name]


def host(folder: Path) -> FunctionHost:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(
        "import os\n\n"
        "if os.path.exists(os.environ['REFUSE_IF']):\n"
        "    raise ValueError('source queue q: VisibilityTimeout is 5 s, the consumer needs 60 s')\n\n"
        "def lambda_handler(event, context):\n    return 'ran'\n"
    )
    spec = FunctionSpec(
        logical_id="InvoicesConsumerFunction", name="invoices",
        arn="arn:aws:lambda:us-east-1:1:function:invoices",
        code_dir=folder, handler="app.lambda_handler", environment={"REFUSE_IF": str(folder / "refuse")},
        timeout=10, memory=128,
    )  # fmt: skip
    return FunctionHost(spec)


def test_given_a_cold_start_that_raises_when_invoked_then_the_error_is_the_invocations_and_init_runs_again(
    tmp_path,
):
    # Given a function whose module refuses to load (as a consumer does on a misconfigured queue)
    function = host(tmp_path / "invoices")
    (tmp_path / "invoices" / "refuse").touch()
    # When it is invoked, Then the invocation fails with the init's error, its type and message
    with pytest.raises(FunctionError) as failed:
        function.invoke({})
    assert failed.value.payload["errorType"] == "ValueError"
    assert "VisibilityTimeout is 5 s" in failed.value.payload["errorMessage"]
    headers: dict[str, str] = {}
    answer = json.loads(function.invoke_payload(b"{}", headers))
    assert headers == {"x-amz-function-error": "Unhandled"}
    assert answer["errorType"] == "ValueError"
    assert function.cold_starts == 0
    # When the cause is gone, Then the next invocation runs the init again, and the handler
    (tmp_path / "invoices" / "refuse").unlink()
    assert function.invoke({}) == "ran"
    assert function.cold_starts == 1
