"""statemachines/redrive.asl.json executed by moto's Step Functions interpreter (Given / When / Then).

The definition runs as written, with its ``${...}`` DefinitionSubstitutions filled in the way the
template fills them, retriers included (moto's retrier sleeps each interval: the ``retry_backoffs``
fixture records it instead), except that the test copy cuts FetchBatch's long poll to 0 s (moto
really waits it out on an empty queue, once per execution; its short poll returns every visible
message, so an empty answer still means an empty DLQ). Backoffs draw the floor, 0 s, unless a
test sets a larger one (a 600 s backoff goes out at once as DelaySeconds; a 902 s one is held in the
DLQ, waited 2 s and sent with DelaySeconds 900).

Queues, the breaker table and the three Lambda functions exist in moto; ``LambdaSimpleBackend.invoke``
is patched to run the layer code each function runs (``Breaker.check``,
``sluice.redrive.steps.plan_step``, ``sluice.redrive.isolator.isolate_request``) in-process, against the
same moto account.

Three moto differences the test allows for (see statemachines/README.md):

- moto's ``aws-sdk`` integration passes Parameters to boto3 as written and returns boto3's answer as
  it is. Step Functions names every parameter and result field in PascalCase, even for APIs whose
  wire names are camelCase (Step Functions' own). SQS is PascalCase on the wire, so only the
  ``sfn:listExecutions`` guard is affected: the ``aws_sdk_casing`` fixture applies Step Functions'
  naming to ``sfn`` calls with moto's own (otherwise unused) request/response normalisers.
- moto hands ``aws-sdk`` results to the next state as boto3 objects, so a binary message attribute
  arrives as bytes, not as the base64 text Step Functions passes. The messages here carry string
  attributes; binary values are covered by tests/unit/test_redrive_sfn.py.
- moto names every failed ``sqs:sendMessage`` ``SQS.SdkClientException`` with SQS's bare message as
  the cause. Step Functions reports an SQS service error as ``SQS.AmazonSQSException`` with the
  cause ``"<message> (Service: AmazonSQS; Status Code: 400; Error Code: <code>; Request ID: ...)"``
  (as recorded against AWS in LocalStack's Step Functions SQS error-handling snapshots): the
  ``sqs_task_errors`` fixture gives moto that naming, which the SendRefused choice reads.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sqs import (
    StateTaskServiceSqs,
)
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo, utcnow
from sluice.redrive.breaker import Breaker, BreakerState
from sluice.redrive.isolator import isolate_request
from sluice.redrive.plan import REFUSED
from sluice.redrive.settings import RedriveSettings
from sluice.redrive.steps import FETCH_VISIBILITY_SECONDS, SEND_REFUSALS, plan_step, refusal_step
from sluice.sqs import queue_url_from_arn
from sluice_local.emulation.language_extensions import with_nested
from sluice_local.emulation.moto_adapter import install_aws_sdk_casing
from tests.conftest import create_task_role, envelope_key_secret
from tests.doubles import RecordingMetrics, envelope_of, sealed
from tests.waiting import finished_execution, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "statemachines" / "redrive.asl.json"
TEMPLATE = ROOT / "template.yaml"
REGION = "us-east-1"
ACCOUNT = "123456789012"
BREAKER_TABLE = "sluice-test-breaker"

# Every ${...} the definition may use (the template substitutes exactly these).
PLACEHOLDERS = {
    "CircuitBreakerFunctionArn",
    "RedrivePlanFunctionArn",
    "PoisonIsolatorFunctionArn",
    "DeadLetterQueueUrl",
    "MapConcurrency",
    "PaceSeconds",
    "MetricsService",
}

MAX_ATTEMPTS = 3
MAP_CONCURRENCY = 2
EXECUTION_TIMEOUT = 40.0
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
# moto sleeps every Retry interval: recorded instead (see the fixture), so no test waits them out
pytestmark = pytest.mark.usefixtures("retry_backoffs")


def load_definition(substitutions: dict[str, str], *, fast: bool = False) -> dict[str, Any]:
    text = DEFINITION.read_text()
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", value)
    definition = json.loads(text)
    if fast:
        definition["States"]["FetchBatch"]["Parameters"]["WaitTimeSeconds"] = 0
    return definition


def all_states(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state, those inside Map iterators included."""
    found: dict[str, dict[str, Any]] = {}
    for name, state in definition["States"].items():
        found[name] = state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            found.update(all_states(processor))
    return found


def lambda_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


# --- moto: Step Functions' PascalCase naming for aws-sdk:sfn ---------------------------------------


@pytest.fixture
def aws_sdk_casing() -> Iterator[None]:
    """Step Functions' PascalCase for ``aws-sdk:sfn:*`` tasks, which moto 5.2 leaves out (the same
    patch the local runtime installs; see sluice_local.emulation.moto_adapter.install_aws_sdk_casing)."""
    undo = install_aws_sdk_casing(REGION)
    yield
    undo()


@pytest.fixture
def sqs_task_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step Functions' naming of a failed optimized ``sqs:*`` task (see the module docstring)."""
    original = StateTaskServiceSqs._from_error

    def from_error(self: StateTaskServiceSqs, env: Any, ex: Exception) -> FailureEvent:
        if not isinstance(ex, ClientError):
            return original(self, env, ex)
        error = "SQS.AmazonSQSException"
        meta = ex.response.get("ResponseMetadata", {})
        status, code = meta.get("HTTPStatusCode", 400), ex.response["Error"].get("Code")
        cause = (
            f"{ex.response['Error'].get('Message', '')} (Service: AmazonSQS; Status Code: {status}; "
            f"Error Code: {code}; Request ID: {meta.get('RequestId', '')}; Proxy: null)"
        )
        return FailureEvent(
            env=env,
            error_name=CustomErrorName(error),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(  # type: ignore[typeddict-item]  # moto's TypedDict names every kind
                taskFailedEventDetails=TaskFailedEventDetails(
                    error=error,
                    cause=cause,
                    resource=self._get_sfn_resource(),
                    resourceType=self._get_sfn_resource_type(),
                )
            ),
        )

    monkeypatch.setattr(StateTaskServiceSqs, "_from_error", from_error)


# --- the three functions, in-process --------------------------------------------------------------


class SerialObservations:
    """The breaker, its observations one at a time: moto's DynamoDB applies an ``ADD`` as a
    read-modify-write in Python, so two threads adding at once can lose an increment (DynamoDB
    itself adds atomically)."""

    def __init__(self, breaker: Breaker, lock: threading.Lock) -> None:
        self._breaker = breaker
        self._lock = lock
        self.policy = breaker.policy

    def observe(self, *, seen: int, bouncing: int, fresh: int = 0, latest_due: float | None = None) -> None:
        with self._lock:
            self._breaker.observe(seen=seen, bouncing=bouncing, fresh=fresh, latest_due=latest_due)


@dataclass
class Functions:
    """The Lambda functions the state machine invokes, run in-process with the layer's code."""

    settings: RedriveSettings
    breaker: Breaker
    sqs: Any
    plan_delay: float = 0.0
    plan_rendezvous: int = 0
    """When set, each Plan first waits (up to 10 s) until this many have been running at once: plans that
    may overlap do, however a loaded machine schedules the Map's threads."""
    plan_gate: threading.Event | None = None
    """When set, every Plan waits for it (after ``plan_delay``): keeps an execution busy until the test
    lets it go, however late a loaded machine runs the test's own steps."""
    uniform: Callable[[float, float], float] = lambda low, high: low
    """The backoff's draw: the floor (0 s) unless a test wants the largest."""
    failing: set[str] = field(default_factory=set)
    calls: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"breaker": [], "plan": [], "isolate": []}
    )
    plan_windows: list[tuple[float, float]] = field(default_factory=list)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running_plans: int = 0
    max_running_plans: int = 0
    _overlap: threading.Condition = field(default_factory=threading.Condition)

    def invoke(self, function_name: str, body: Any, response_headers: dict[str, str]) -> bytes:
        payload = json.loads(body) if body else {}
        kind = function_name.rsplit(":", 1)[-1].removeprefix("sluice-test-")
        with self._lock:
            self.calls[kind].append(payload)
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "breaker": self._check,
            "plan": self._plan,
            "isolate": self._isolate,
        }
        handler = self._down if kind in self.failing else handlers[kind]
        try:
            result = handler(payload)
        except Exception as exc:  # noqa: BLE001 - the Lambda runtime reports any exception as a function error
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()
        return json.dumps(result).encode()

    @staticmethod
    def _down(_: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the function keeps failing")

    def _check(self, _: dict[str, Any]) -> dict[str, Any]:
        return dict(self.breaker.check().to_dict())

    def _plan(self, event: dict[str, Any]) -> dict[str, Any]:
        if "refused" in event:  # the Refuse step (functions/redrive_plan/app.py dispatches alike)
            return dict(
                refusal_step(
                    event["refused"],
                    settings=self.settings,
                    now=utcnow(),
                    logger=Logger(service="sluice-test"),
                    seal=None,
                )
            )
        started = time.monotonic()
        with self._lock:
            self._running_plans += 1
            self.max_running_plans = max(self.max_running_plans, self._running_plans)
        try:
            with self._overlap:
                self._overlap.notify_all()
                if self.plan_rendezvous:
                    self._overlap.wait_for(lambda: self.max_running_plans >= self.plan_rendezvous, timeout=10)
            time.sleep(self.plan_delay)
            if self.plan_gate is not None and not self.plan_gate.wait(timeout=EXECUTION_TIMEOUT):
                raise RuntimeError("the test never opened the plan gate")
            plan = plan_step(
                event,
                settings=self.settings,
                breaker=SerialObservations(self.breaker, self._lock),  # type: ignore[arg-type]
                url_of=lambda arn: queue_url_from_arn(arn, endpoint=self.sqs.meta.endpoint_url),
                now=utcnow(),
                logger=Logger(service="sluice-test"),
                metrics_sink=self.metrics,
                uniform=self.uniform,
                seal=None,
            )
            return dict(plan)
        finally:
            with self._lock:
                self._running_plans -= 1
                self.plan_windows.append((started, time.monotonic()))

    def _isolate(self, plan: dict[str, Any]) -> dict[str, Any]:
        poison_id, envelope, _ = isolate_request(
            self.sqs, poison_queue_url=self.settings.poison_queue_url, request=plan, seal=None
        )
        return {"poisonMessageId": poison_id, "attempts": envelope.attempts}


@dataclass
class RedriveMachine:
    sfn: Any
    sqs: Any
    arn: str
    definition: dict[str, Any]
    functions: Functions
    dlq_url: str
    work_url: str
    work_arn: str
    poison_url: str
    cloudwatch: Any

    def start(self, name: str) -> str:
        return self.sfn.start_execution(stateMachineArn=self.arn, name=name, input="{}")["executionArn"]

    def finish(self, execution_arn: str, timeout: float = EXECUTION_TIMEOUT) -> dict[str, Any]:
        return finished_execution(self.sfn, execution_arn, timeout)

    def run(self, name: str = "redrive-1") -> dict[str, Any]:
        return self.finish(self.start(name))

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        return self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]

    def entered(self, execution_arn: str, state: str) -> list[dict[str, Any]]:
        """The input of every entry into ``state``, with its time as ``"_at"`` (epoch seconds)."""
        return [
            {**json.loads(e["stateEnteredEventDetails"]["input"]), "_at": e["timestamp"].timestamp()}
            for e in self.history(execution_arn)
            if e["type"].endswith("StateEntered") and e["stateEnteredEventDetails"]["name"] == state
        ]

    def path(self, execution_arn: str) -> list[str]:
        """The names of the states entered, in order."""
        return [
            e["stateEnteredEventDetails"]["name"]
            for e in self.history(execution_arn)
            if e["type"].endswith("StateEntered")
        ]

    def sends(self, execution_arn: str) -> list[dict[str, Any]]:
        """The parameters of every ``sqs:sendMessage`` task scheduled (retries included)."""
        return [
            json.loads(e["taskScheduledEventDetails"]["parameters"])
            for e in self.history(execution_arn)
            if e["type"] == "TaskScheduled"
            and e["taskScheduledEventDetails"]["resourceType"] == "sqs"
            and e["taskScheduledEventDetails"]["resource"] == "sendMessage"
        ]

    def metric(self, name: str) -> float:
        """The sum of a metric the state machine put (namespace Sluice, service = its MetricsService)."""
        now = utcnow()
        points = self.cloudwatch.get_metric_statistics(
            Namespace="Sluice",
            MetricName=name,
            Dimensions=[{"Name": "service", "Value": "sluice"}],
            StartTime=now - timedelta(minutes=10),
            EndTime=now + timedelta(minutes=1),
            Period=60,
            Statistics=["Sum"],
        )["Datapoints"]
        return sum(p["Sum"] for p in points)

    def dead_letter(
        self, body: Any, envelope: Envelope | None = None, *, group: str | None = None, **attributes: str
    ) -> str:
        """A message as it sits in the DLQ. With an ``envelope``: as the consumer forwards it itself
        (SendMessage: no ``DeadLetterQueueSourceArn``; the envelope records its source). Without one:
        dead-lettered on its first hop, received from the work queue as often as its redrive policy
        allows and moved by it, with ``DeadLetterQueueSourceArn`` as SQS sets it (tests/conftest.py)."""
        message_attributes = {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()}
        text = body if isinstance(body, str) else json.dumps(body)
        if envelope is not None:
            message_attributes[ATTRIBUTE] = {"DataType": "String", "StringValue": sealed(envelope, text)}
            return self.sqs.send_message(
                QueueUrl=self.dlq_url, MessageBody=text, MessageAttributes=message_attributes
            )["MessageId"]
        assert self.counts(self.work_url) == (0, 0), "a first hop is moved through an empty work queue"
        grouped = {"MessageGroupId": group} if group else {}  # a fair queue's tenant
        message_id = self.sqs.send_message(
            QueueUrl=self.work_url, MessageBody=text, MessageAttributes=message_attributes, **grouped
        )["MessageId"]
        self.sqs.receive_message(QueueUrl=self.work_url, VisibilityTimeout=0, WaitTimeSeconds=0)
        moved = self.sqs.receive_message(QueueUrl=self.work_url, WaitTimeSeconds=0).get("Messages", [])
        assert moved == [], "the work queue's redrive policy moves a message past its receives"
        return str(message_id)

    def drain(self, url: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                AttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not got:
                return messages
            messages.extend(got)

    def counts(self, url: str) -> tuple[int, int]:
        """(visible, in flight) messages of a queue."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )

    def delayed(self, url: str) -> int:
        """Messages of a queue sent with a DelaySeconds that has not run out yet."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessagesDelayed"])

    def backoff(self, seconds: int) -> None:
        """Every backoff from now on: exactly ``seconds`` (base = cap = seconds, the largest draw)."""
        self.functions.settings = self.functions.settings.model_copy(
            update={"redrive_base_seconds": seconds, "redrive_cap_seconds": seconds}
        )
        self.functions.uniform = lambda low, high: high


def outcomes(result: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(result["output"])["lastBatch"]


@pytest.fixture
def machine(aws_sdk_casing, sqs_task_errors, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedriveMachine]:
    holder: dict[str, Functions] = {}

    def backend_invoke(  # moto's signature
        backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        return holder["functions"].invoke(function_name, body, response_headers)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", backend_invoke)
    with mock_aws(config=MOTO_CONFIG):
        sqs = boto3.client("sqs", region_name=REGION)
        ddb = boto3.client("dynamodb", region_name=REGION)
        iam = boto3.client("iam", region_name=REGION)
        lam = boto3.client("lambda", region_name=REGION)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        dlq_url = sqs.create_queue(QueueName="work-dlq")["QueueUrl"]
        work_url = sqs.create_queue(  # a first hop's message is moved after its first receive
            QueueName="work",
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:work-dlq", "maxReceiveCount": 1}
                )
            },
        )["QueueUrl"]
        poison_url = sqs.create_queue(QueueName="poison")["QueueUrl"]
        work_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:work"
        ddb.create_table(
            TableName=BREAKER_TABLE,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        settings = RedriveSettings.from_env(
            {
                "SLUICE_BREAKER_TABLE": BREAKER_TABLE,
                "SLUICE_BREAKER_COOLDOWN_SECONDS": "300",
                "SLUICE_DEAD_LETTER_QUEUE_URL": dlq_url,
                "SLUICE_POISON_QUEUE_URL": poison_url,
                "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
                "SLUICE_SOURCE_QUEUE_ARN": work_arn,
                "SLUICE_REDRIVE_SOURCES": f"arn:aws:sqs:{REGION}:{ACCOUNT}:gone",
                "SLUICE_REDRIVE_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
                "SLUICE_REDRIVE_BASE_SECONDS": "1",
                "SLUICE_REDRIVE_CAP_SECONDS": "1",
                "SLUICE_REDRIVE_FLOOR_SECONDS": "0",
            }
        )
        functions = Functions(settings, Breaker.from_settings(settings, ddb), sqs)
        holder["functions"] = functions
        role = create_task_role(iam, "redrive-test")
        arns = {
            kind: lam.create_function(
                FunctionName=f"sluice-test-{kind}",
                Runtime="python3.13",
                Role=role,
                Handler="app.handler",
                Code={"ZipFile": lambda_zip()},
            )["FunctionArn"]
            for kind in ("breaker", "plan", "isolate")
        }
        definition = load_definition(
            {
                "CircuitBreakerFunctionArn": arns["breaker"],
                "RedrivePlanFunctionArn": arns["plan"],
                "PoisonIsolatorFunctionArn": arns["isolate"],
                "DeadLetterQueueUrl": dlq_url,
                "MapConcurrency": str(MAP_CONCURRENCY),
                "PaceSeconds": "1",
                "MetricsService": "sluice",
            },
            fast=True,
        )
        arn = sfn.create_state_machine(
            name="sluice-test-redrive", definition=json.dumps(definition), roleArn=role, type="STANDARD"
        )["stateMachineArn"]
        cloudwatch = boto3.client("cloudwatch", region_name=REGION)
        yield RedriveMachine(
            sfn, sqs, arn, definition, functions, dlq_url, work_url, work_arn, poison_url, cloudwatch
        )
        # Never leave an execution thread behind that outlives the mock.
        for execution in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
            sfn.stop_execution(executionArn=execution["executionArn"])


# --- the definition and its substitutions ---------------------------------------------------------


def test_given_the_definition_when_listing_its_placeholders_then_each_one_has_a_known_substitution():
    # Given the definition as committed
    text = DEFINITION.read_text()
    # When its ${...} placeholders are listed
    found = set(re.findall(r"\$\{([^}]*)\}", text))
    # Then each is one the template substitutes, all of them are used, and none is left over
    assert found == PLACEHOLDERS
    assert "${" not in json.dumps(load_definition(dict.fromkeys(PLACEHOLDERS, "1")))


def test_given_the_definition_when_read_then_every_task_retries_and_numbers_come_from_placeholders():
    # Given the definition with numbers substituted as the template substitutes them
    definition = load_definition(dict.fromkeys(PLACEHOLDERS, "7"))
    states = all_states(definition)
    # Then every Task state declares a Retry
    tasks = {name for name, s in states.items() if s["Type"] == "Task"}
    assert tasks >= {
        "Guard",
        "CheckCircuitBreaker",
        "FetchBatch",
        "Plan",
        "Hold",
        "Redrive",
        "Refuse",
        "Isolate",
        "Delete",
        "DeleteIsolated",
        "ReportBatch",
    }
    assert all(states[name].get("Retry") for name in tasks)
    # ... the Map's concurrency and the pace are parsed from their (string) placeholders at run time
    configure = definition["States"]["Configure"]["Parameters"]["config"]
    assert configure["mapConcurrency.$"] == "States.StringToJson('7')"
    assert configure["paceSeconds.$"] == "States.StringToJson('7')"
    assert definition["States"]["PlanBatch"]["MaxConcurrencyPath"] == "$.config.mapConcurrency"
    assert definition["States"]["Pace"]["SecondsPath"] == "$.config.paceSeconds"
    # ... and a batch is received with the visibility the Plan step caps holds by
    fetch = definition["States"]["FetchBatch"]["Parameters"]
    assert fetch["VisibilityTimeout"] == FETCH_VISIBILITY_SECONDS
    assert fetch["MaxNumberOfMessages"] == 10


def test_given_the_definition_when_read_then_state_names_are_unique_across_its_maps():
    # Given every state of the definition, those inside the Maps included
    def names(states: dict[str, Any]) -> list[str]:
        out: list[str] = []
        for name, state in states.items():
            out.append(name)
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if processor:
                out += names(processor["States"])
        return out

    found = names(json.loads(DEFINITION.read_text())["States"])
    # Then no name is used twice (Step Functions requires names unique in the whole state machine)
    assert len(found) == len(set(found))


def test_given_the_send_refusal_choice_when_read_then_it_isolates_exactly_the_sqs_codes_the_plan_step_knows():
    # Given the choice after a send failed for good
    choice = all_states(json.loads(DEFINITION.read_text()))["SendRefused"]
    [rule] = choice["Choices"]
    # Then it matches each refusal code in the cause (optimized integration) and in the error name
    # (aws-sdk integration), and nothing else; anything else leaves the message in the DLQ
    patterns = {(r["Variable"], r["StringMatches"]) for r in rule["Or"]}
    assert patterns == {
        (v, f"*{code}*") for code in SEND_REFUSALS for v in ("$.error.Cause", "$.error.Error")
    }
    assert rule["Next"] == "Refuse"
    assert choice["Default"] == "RedriveFailed"


def test_given_the_batch_report_when_read_then_it_writes_what_the_redrive_failures_alarm_reads():
    # Given the ReportBatch task and the template's RedriveFailuresAlarm
    # (a workload's: the loop's copy for the example workload Orders)
    template = with_nested(TEMPLATE, {})  # the workloads' nested template in it
    alarm = template["Resources"]["OrdersRedriveFailuresAlarm"]["Properties"]
    substitutions = template["Resources"]["OrdersRedriveStateMachine"]["Properties"][
        "DefinitionSubstitutions"
    ]
    definition = json.loads(DEFINITION.read_text())
    report = definition["States"]["ReportBatch"]
    # (the dimension's value as the template substitutes it: the stack's name, as the alarm's)
    for metric in report["Parameters"]["MetricData"]:
        for dimension in metric["Dimensions"]:
            assert dimension["Value"] == "${MetricsService}"
            dimension["Value"] = substitutions["MetricsService"]
    # Then it puts RedriveFailures (and SuccessfulRedrives) in the alarm's namespace, with its dimensions
    assert report["Resource"] == "arn:aws:states:::aws-sdk:cloudwatch:putMetricData"
    parameters = report["Parameters"]
    assert parameters["Namespace"] == alarm["Namespace"]
    by_name = {m["MetricName"]: m for m in parameters["MetricData"]}
    assert set(by_name) == {"RedriveFailures", "SuccessfulRedrives"}
    assert by_name[alarm["MetricName"]]["Dimensions"] == alarm["Dimensions"]
    assert by_name["SuccessfulRedrives"]["Dimensions"] == alarm["Dimensions"]
    # ... and a metrics failure never stops the redrive
    assert report["Catch"][0]["Next"] == report["Next"] == "MoreBatches"


# --- CheckCircuitBreaker --------------------------------------------------------------------------


def test_given_an_open_breaker_when_the_execution_runs_then_it_fails_and_nothing_moves(machine):
    # Given a message in the DLQ and a breaker an operator opened
    machine.dead_letter({"order_id": "ord-1"}, tenant="acme")
    machine.functions.breaker.open("payments API down (INC-42)")
    # When the execution runs
    result = machine.run()
    # Then it fails with CircuitBreakerOpen and the breaker's reason ...
    assert result["status"] == "FAILED"
    assert result["error"] == "CircuitBreakerOpen"
    assert result["cause"] == "payments API down (INC-42)"
    # ... no message was received, planned or moved
    assert machine.functions.calls["plan"] == []
    assert machine.counts(machine.dlq_url) == (1, 0)
    assert machine.counts(machine.work_url) == (0, 0)
    assert machine.counts(machine.poison_url) == (0, 0)


def test_given_a_half_open_breaker_when_the_probe_batch_went_through_then_the_next_check_stops_the_run(
    machine,
):
    # Given a breaker half-open after its cooldown, and 15 messages of which 12 sluice re-drove a
    # minute ago and are back: any batch of 10 is mostly bouncing
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.put_item(
        TableName=BREAKER_TABLE,
        Item={
            "id": {"S": "redrive"},
            "state": {"S": BreakerState.HALF_OPEN.value},
            "reason": {"S": "cooldown over"},
            "opened_by": {"S": "auto"},
            "since": {"N": str(time.time())},
            "seen": {"N": "0"},
            "bouncing": {"N": "0"},
            "version": {"N": "3"},
        },
    )
    recently = utcnow() - timedelta(minutes=1)
    for n in range(12):
        machine.dead_letter(
            {"order_id": f"ord-b{n}"},
            Envelope(origin_id=f"orig-{n}", attempts=1, redriven_at=recently, source=machine.work_arn),
        )
    for n in range(3):
        machine.dead_letter({"order_id": f"ord-q{n}"})
    # When the execution runs
    result = machine.run()
    # Then exactly one probe batch goes through; the loop checks the breaker again, which settles the
    # probe and answers open, and the run stops there
    assert result["status"] == "FAILED"
    assert result["error"] == "CircuitBreakerOpen"
    assert "probe" in result["cause"]
    assert len(machine.functions.calls["breaker"]) == 2
    assert len(machine.functions.calls["plan"]) == 10
    assert machine.functions.breaker.check().is_open
    # ... and the messages after the probe batch never left the DLQ
    visible, _ = machine.counts(machine.dlq_url)
    assert visible == 5


def test_given_a_half_open_breaker_past_its_hold_when_the_next_batch_failed_after_the_probe_then_it_reopens(
    machine,
):
    # Given a breaker half-open whose probe went out 15 minutes ago and was due 5 minutes later (past
    # the hold: the probe's due time plus the 300 s cooldown), and 12 messages of which 10 come first
    # that failed again a minute ago: after the probe, so the downstream still fails
    now = time.time()
    probe_at = now - 900
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.put_item(
        TableName=BREAKER_TABLE,
        Item={
            "id": {"S": "redrive"},
            "state": {"S": BreakerState.HALF_OPEN.value},
            "reason": {"S": "probe out"},
            "opened_by": {"S": "auto"},
            "since": {"N": str(probe_at)},
            "probe_at": {"N": str(probe_at)},
            "probe_due": {"N": str(probe_at + 300)},
            "seen": {"N": "0"},
            "bouncing": {"N": "0"},
            "version": {"N": "7"},
        },
    )
    due = utcnow() - timedelta(minutes=10)
    again = ErrorInfo(type="TransientError", message="gateway timeout", at=utcnow() - timedelta(minutes=1))
    for n in range(12):
        machine.dead_letter(
            {"order_id": f"ord-f{n}"},
            Envelope(
                origin_id=f"orig-f{n}", attempts=1, redriven_at=due, last_error=again, source=machine.work_arn
            ),
        )
    # When the execution runs
    result = machine.run()
    # Then every Plan of the judged batch was told the probe's time ...
    plans = machine.functions.calls["plan"]
    assert len(plans) == 10
    assert all(p["probeAt"] == pytest.approx(probe_at, abs=0.01) for p in plans)
    # ... so the breaker counted their failures as fresh, and the next check opened it again
    assert result["status"] == "FAILED"
    assert result["error"] == "CircuitBreakerOpen"
    assert "did not pass" in result["cause"]
    assert machine.functions.breaker.check().is_open


# --- Guard ----------------------------------------------------------------------------------------


def test_given_a_running_execution_when_a_second_one_starts_then_it_ends_already_running(machine):
    # Given an execution busy with a batch (its plans held until the second execution has ended)
    for n in range(4):
        machine.dead_letter({"order_id": f"ord-{n}"})
    gate = machine.functions.plan_gate = threading.Event()
    first = machine.start("redrive-first")
    deadline = time.monotonic() + EXECUTION_TIMEOUT
    try:
        while not machine.functions.calls["plan"]:
            assert time.monotonic() < deadline, "the first execution never planned"
            time.sleep(0.05)
        # When a second execution starts meanwhile
        second = machine.finish(machine.start("redrive-second"))
    finally:
        gate.set()
    # Then the second sees an older running execution and stops at once, touching nothing
    assert second["status"] == "SUCCEEDED"
    names = machine.path(second["executionArn"])
    assert names[-1] == "AlreadyRunning"
    assert "CheckCircuitBreaker" not in names
    # ... while the first carries on and redrives every message exactly once
    assert machine.finish(first)["status"] == "SUCCEEDED"
    arrived = machine.drain(machine.work_url)
    assert sorted(json.loads(m["Body"])["order_id"] for m in arrived) == [f"ord-{n}" for n in range(4)]
    assert len(machine.functions.calls["plan"]) == 4


# --- PlanBatch / DeliverBatch ---------------------------------------------------------------------


def test_given_a_first_time_dead_letter_when_redriven_then_it_is_back_on_its_source_and_gone_from_the_dlq(
    machine,
):
    # Given a message dead-lettered on its first hop (no envelope yet), with a user attribute
    dlq_id = machine.dead_letter({"order_id": "ord-7"}, tenant="acme")
    before = utcnow()
    # When the execution runs
    result = machine.run()
    # Then it succeeds, the batch's message was redriven ...
    assert result["status"] == "SUCCEEDED"
    [outcome] = outcomes(result)
    assert outcome["outcome"] == "redriven"
    assert outcome["attempt"] == 1
    # ... it is on the source queue with its body, its user attribute untouched and the envelope updated
    [arrived] = machine.drain(machine.work_url)
    assert outcome["sentMessageId"] == arrived["MessageId"]
    assert json.loads(arrived["Body"]) == {"order_id": "ord-7"}
    assert arrived["MessageAttributes"]["tenant"] == {"StringValue": "acme", "DataType": "String"}
    envelope = envelope_of(arrived)
    assert envelope.attempts == 1
    assert envelope.origin_id == dlq_id
    assert envelope.redriven_at is not None
    assert envelope.redriven_at >= before - timedelta(seconds=1)
    assert envelope.source == machine.work_arn
    # ... and it was deleted from the DLQ (neither visible nor held)
    assert machine.counts(machine.dlq_url) == (0, 0)
    assert machine.counts(machine.poison_url) == (0, 0)
    # ... and the batch was counted in CloudWatch
    assert machine.metric("SuccessfulRedrives") == 1
    assert machine.metric("RedriveFailures") == 0


def test_given_a_backoff_within_900_seconds_when_redriven_then_it_is_sent_at_once_with_delay_seconds(machine):
    # Given a message whose backoff is 600 s (SQS's DelaySeconds can carry up to 900 s)
    machine.dead_letter({"order_id": "ord-d"})
    machine.backoff(600)
    # When the execution runs
    started = time.monotonic()
    result = machine.run()
    # Then it ends without waiting out the backoff: nothing was held or waited
    assert result["status"] == "SUCCEEDED"
    assert time.monotonic() - started < 60  # a tenth of the backoff, whatever the machine's load
    names = machine.path(result["executionArn"])
    assert "Hold" not in names
    assert "Wait" not in names
    # ... the message was sent once with DelaySeconds = its backoff and deleted from the DLQ
    [sent] = machine.sends(result["executionArn"])
    assert sent["DelaySeconds"] == 600
    [outcome] = outcomes(result)
    assert outcome["outcome"] == "redriven"
    assert outcome["delaySeconds"] == 600
    assert machine.counts(machine.dlq_url) == (0, 0)
    # ... and it is on its source queue, delayed: not visible before its backoff is over
    assert machine.counts(machine.work_url) == (0, 0)
    assert machine.delayed(machine.work_url) == 1


def test_given_a_tenant_s_dead_letter_when_redriven_then_it_is_sent_back_with_its_group_id(machine):
    # Given a message of tenant-a (its MessageGroupId on a fair queue) moved to the DLQ
    machine.dead_letter({"order_id": "ord-g"}, group="tenant-a")
    machine.backoff(1)
    # When the execution runs
    result = machine.run()
    # Then the plan named its group, the grouped send task sent it with it, and its source has it again
    assert result["status"] == "SUCCEEDED"
    execution = result["executionArn"]
    assert "RedriveInGroup" in machine.path(execution)
    assert "Redrive" not in machine.path(execution)
    [sent] = machine.sends(execution)
    assert sent["MessageGroupId"] == "tenant-a"
    assert [o["outcome"] for o in outcomes(result)] == ["redriven"]
    arrived = wait_for(
        lambda: machine.drain(machine.work_url), "the redriven message on its source", timeout=30
    )
    assert [m["Attributes"]["MessageGroupId"] for m in arrived] == ["tenant-a"]
    assert envelope_of(arrived[0]).group == "tenant-a"


def test_given_a_backoff_beyond_900_seconds_when_redriven_then_it_is_held_waited_and_sent_with_900(machine):
    # Given a message whose backoff is 902 s: 900 s of it can be SQS's DelaySeconds, 2 s cannot
    machine.dead_letter({"order_id": "ord-w"})
    machine.backoff(902)
    # When the execution runs
    result = machine.run()
    # Then the message was held in the DLQ for the 2 s wait plus the margin, the execution waited 2 s ...
    assert result["status"] == "SUCCEEDED"
    execution = result["executionArn"]
    [held] = machine.entered(execution, "Hold")
    assert held["holdSeconds"] == 2 + 300
    [waited] = machine.entered(execution, "Wait")
    [redriven] = machine.entered(execution, "Redrive")
    assert waited["plan"]["waitSeconds"] == 2
    assert redriven["_at"] - waited["_at"] >= 2.0
    # ... then sent with the rest of the backoff as DelaySeconds and deleted from the DLQ
    [sent] = machine.sends(execution)
    assert sent["DelaySeconds"] == 900
    assert [o["outcome"] for o in outcomes(result)] == ["redriven"]
    assert machine.counts(machine.dlq_url) == (0, 0)
    assert machine.delayed(machine.work_url) == 1


def test_given_a_message_at_max_attempts_when_planned_then_it_is_isolated_with_its_envelope_and_deleted(
    machine,
):
    # Given a message sluice already re-drove MAX_ATTEMPTS times, still failing
    last = ErrorInfo(type="TransientError", message="gateway timeout", at=utcnow() - timedelta(hours=2))
    envelope = Envelope(
        origin_id="orig-9",
        attempts=MAX_ATTEMPTS,
        last_error=last,
        redriven_at=utcnow() - timedelta(hours=3),
        source=machine.work_arn,
    )
    machine.dead_letter({"order_id": "ord-9"}, envelope, tenant="acme")
    # When the execution runs
    result = machine.run()
    # Then it is isolated, not redriven
    assert result["status"] == "SUCCEEDED"
    [outcome] = outcomes(result)
    assert outcome["outcome"] == "isolated"
    assert "still failing after" in outcome["reason"]
    [poisoned] = machine.drain(machine.poison_url)
    assert outcome["poisonMessageId"] == poisoned["MessageId"]
    # ... with its body, its user attribute and an envelope that tells why
    assert json.loads(poisoned["Body"]) == {"order_id": "ord-9"}
    assert poisoned["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    isolated = envelope_of(poisoned)
    assert isolated.origin_id == "orig-9"
    assert isolated.attempts == MAX_ATTEMPTS + 1
    assert isolated.last_error is not None
    assert isolated.last_error.type == "TransientError"
    # ... and deleted from the DLQ; nothing went back to the source
    assert machine.counts(machine.dlq_url) == (0, 0)
    assert machine.counts(machine.work_url) == (0, 0)


def test_given_the_isolator_keeps_failing_when_retries_run_out_then_the_poison_pill_stays_in_the_dlq(
    machine, retry_backoffs
):
    # Given a message at max attempts, and a poison isolator that fails on every call
    envelope = Envelope(origin_id="orig-p", attempts=MAX_ATTEMPTS, source=machine.work_arn)
    machine.dead_letter({"order_id": "ord-p"}, envelope)
    machine.functions.failing.add("isolate")
    # When the execution runs
    result = machine.run()
    # Then the batch completes with the message marked failed at Isolate, after the retries
    assert result["status"] == "SUCCEEDED"
    [outcome] = outcomes(result)
    assert outcome == {
        "messageId": outcome["messageId"],
        "outcome": "failed",
        "failedAt": "Isolate",
        "error": "RuntimeError",
    }
    retrier = all_states(machine.definition)["Isolate"]["Retry"][-1]
    assert len(machine.functions.calls["isolate"]) == 1 + retrier["MaxAttempts"]
    # ... each retry after the deployed backoff (1 s, 2 s: recorded, not slept)
    assert retry_backoffs == [
        retrier["IntervalSeconds"] * retrier["BackoffRate"] ** n for n in range(retrier["MaxAttempts"])
    ]
    # ... and it was not deleted: still in the DLQ (in flight until the receive's visibility ends)
    assert machine.counts(machine.dlq_url) == (0, 1)
    assert machine.counts(machine.poison_url) == (0, 0)
    assert machine.counts(machine.work_url) == (0, 0)
    # ... counted as a redrive failure for RedriveFailuresAlarm
    assert machine.metric("RedriveFailures") == 1


def test_given_a_send_that_keeps_failing_when_retries_run_out_then_it_stays_in_the_dlq_and_is_counted(
    machine, retry_backoffs
):
    # Given a message whose (allowlisted) source queue no longer exists, and one that is fine
    machine.dead_letter(
        {"order_id": "ord-lost"}, Envelope(origin_id="orig-l", source=f"arn:aws:sqs:{REGION}:{ACCOUNT}:gone")
    )
    machine.dead_letter({"order_id": "ord-ok"})
    # When the execution runs
    result = machine.run()
    # Then the batch still completes: the good message is redriven, the other marked failed at Redrive
    assert result["status"] == "SUCCEEDED"
    by_outcome = {o["outcome"]: o for o in outcomes(result)}
    assert set(by_outcome) == {"redriven", "failed"}
    assert by_outcome["failed"]["failedAt"] == "Redrive"
    assert by_outcome["failed"]["error"] == "SQS.AmazonSQSException"
    # ... after every retry (a missing queue is no refusal of the message: it is not isolated)
    retrier = all_states(machine.definition)["Redrive"]["Retry"][0]
    sends = [p for p in machine.sends(result["executionArn"]) if "gone" in p["QueueUrl"]]
    assert len(sends) == 1 + retrier["MaxAttempts"]
    # ... each after a full-jitter backoff within the deployed cap (recorded, not slept)
    assert len(retry_backoffs) == retrier["MaxAttempts"]
    assert all(0 <= wait <= retrier["MaxDelaySeconds"] for wait in retry_backoffs)
    assert machine.functions.calls["isolate"] == []
    # ... and it was not deleted: it is still in the DLQ (in flight until the receive's visibility ends)
    assert machine.counts(machine.dlq_url) == (0, 1)
    assert [json.loads(m["Body"])["order_id"] for m in machine.drain(machine.work_url)] == ["ord-ok"]
    # ... and CloudWatch has the failure (RedriveFailuresAlarm's metric) and the success
    assert machine.metric("RedriveFailures") == 1
    assert machine.metric("SuccessfulRedrives") == 1


def test_given_a_message_its_source_refuses_as_malformed_when_sent_then_it_is_isolated_with_the_reason(
    machine,
):
    # Given a source queue that takes messages of at most 1 KiB, and a dead-lettered 2 KiB message
    machine.sqs.set_queue_attributes(QueueUrl=machine.work_url, Attributes={"MaximumMessageSize": "1024"})
    envelope = Envelope(origin_id="orig-big", attempts=1, source=machine.work_arn)
    machine.dead_letter({"order_id": "ord-big", "note": "x" * 2048}, envelope, tenant="acme")
    # When the execution runs
    result = machine.run()
    # Then SQS refused the send (InvalidParameterValue), and the message was isolated, not left to loop
    assert result["status"] == "SUCCEEDED"
    assert "Refuse" in machine.path(result["executionArn"])
    [outcome] = outcomes(result)
    assert outcome["outcome"] == "isolated"
    assert outcome["reason"].startswith("the source queue refused the message: InvalidParameterValue: ")
    # ... the poison queue has it, intact, with an envelope that tells who refused it and why
    [poisoned] = machine.drain(machine.poison_url)
    assert outcome["poisonMessageId"] == poisoned["MessageId"]
    assert json.loads(poisoned["Body"])["order_id"] == "ord-big"
    assert poisoned["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    isolated = envelope_of(poisoned)
    assert isolated.origin_id == "orig-big"
    assert isolated.attempts == 2
    assert isolated.last_error is not None
    assert isolated.last_error.type == REFUSED
    assert isolated.last_error.message.startswith(
        f"{machine.work_url} refused the message: InvalidParameterValue"
    )
    # ... it left the DLQ and never reached the source
    assert machine.counts(machine.dlq_url) == (0, 0)
    assert machine.counts(machine.work_url) == (0, 0)
    assert machine.metric("RedriveFailures") == 0


def test_given_more_messages_than_the_concurrency_when_planned_then_at_most_map_concurrency_run_at_once(
    machine,
):
    # Given 8 messages and plans that take a while, so that they would overlap if allowed to (the first
    # ones wait for MapConcurrency of them to be running, so they overlap whenever they may)
    for n in range(8):
        machine.dead_letter({"order_id": f"ord-{n}"})
    machine.functions.plan_delay = 0.3
    machine.functions.plan_rendezvous = MAP_CONCURRENCY
    # When the execution runs
    result = machine.run()
    # Then never more than MapConcurrency plans ran at the same time, and they did run side by side
    assert result["status"] == "SUCCEEDED"
    assert len(machine.functions.calls["plan"]) == 8
    assert machine.functions.max_running_plans == MAP_CONCURRENCY
    # ... and every message was redriven
    assert len(machine.drain(machine.work_url)) == 8


# --- the loop -------------------------------------------------------------------------------------


def test_given_more_than_one_batch_when_the_execution_runs_then_it_loops_until_the_dlq_is_empty(machine):
    # Given 13 messages: more than one batch of 10
    for n in range(13):
        machine.dead_letter({"order_id": f"ord-{n}"})
    # When the execution runs
    result = machine.run()
    # Then it succeeds once the DLQ is drained, after at least two batches
    assert result["status"] == "SUCCEEDED"
    output = json.loads(result["output"])
    assert output["batches"] >= 2
    names = machine.path(result["executionArn"])
    assert names[-1] == "Drained"
    # ... checking the breaker and paced before each further batch
    assert names.count("CheckCircuitBreaker") == output["batches"] + 1
    assert names.count("Pace") == output["batches"]
    paced = machine.entered(result["executionArn"], "Pace")[0]["_at"]
    checked_again = machine.entered(result["executionArn"], "CheckCircuitBreaker")[1]["_at"]
    assert checked_again - paced >= 1.0  # PaceSeconds
    # ... and every message is on its source queue once, none left in the DLQ
    arrived = machine.drain(machine.work_url)
    assert sorted(json.loads(m["Body"])["order_id"] for m in arrived) == sorted(f"ord-{n}" for n in range(13))
    assert machine.counts(machine.dlq_url) == (0, 0)
    assert machine.functions.breaker.status().seen == 13
    # ... each batch counted in CloudWatch
    assert machine.metric("SuccessfulRedrives") == 13
    assert machine.metric("RedriveFailures") == 0


def test_given_an_empty_dlq_when_the_execution_runs_then_it_succeeds_drained_without_planning(machine):
    # Given an empty DLQ
    # When the execution runs
    result = machine.run()
    # Then it checks the breaker, finds nothing and ends Drained
    assert result["status"] == "SUCCEEDED"
    names = machine.path(result["executionArn"])
    assert names[-1] == "Drained"
    assert machine.functions.calls["plan"] == []
