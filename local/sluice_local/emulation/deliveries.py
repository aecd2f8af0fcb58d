"""What AWS services call on a stack's behalf, made by the local runtime as those services would.

EventBridge invokes a rule's function target as its service principal (the function's resource policy
must let it, for that rule) and starts a state machine target as the target's role (whose trust policy
must let EventBridge in); EventBridge Scheduler calls its target as the schedule's role (required).
Each is authorized by the stack's IAM enforcement (:mod:`sluice_local.emulation.iam`); a refused
delivery is logged and dropped, as the service drops it.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from sluice_local.emulation.functions import FunctionHost
from sluice_local.emulation.iam import actions as iam_actions
from sluice_local.emulation.iam.acting import Acting, acting_as
from sluice_local.emulation.iam.enforce import Enforcer

__all__ = ["Deliveries"]

log = logging.getLogger("sluice_local")
SQS_SEND = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
SQS_SEND_BATCH = "arn:aws:scheduler:::aws-sdk:sqs:sendMessageBatch"
"""The universal targets sluice's delay schedules use (sluice.delay.scheduler), emulated."""


class Deliveries:
    def __init__(
        self,
        host_for: Callable[[str], FunctionHost],
        client: Callable[[str], Any],
        iam: Enforcer,
        region: str,
        account: str,
    ) -> None:
        self._host_for = host_for
        self._client = client
        self._iam = iam
        self._region = region
        self._account = account

    def invoke_async(self, name_or_arn: str, payload: Any, source_arn: str | None = None) -> None:
        """An asynchronous invocation by EventBridge for the rule ``source_arn`` (allowed by the
        function's resource policy, as in AWS), or by the runtime itself (``source_arn`` None)."""
        host = self._host_for(name_or_arn)
        if source_arn is not None:
            events = Acting.service_principal(
                "events.amazonaws.com", source_arn=source_arn, account=self._account
            )
            if not self._authorized(events, "lambda", "InvokeFunction", host.spec.arn):
                return
        threading.Thread(target=host.invoke_payload, args=(json.dumps(payload), {}), daemon=True).start()

    def start_execution(
        self, arn: str, payload: str, role_arn: str | None = None, service: str = "events.amazonaws.com"
    ) -> None:
        """A state machine target started as its role, with a generated name (moto would use "None")."""
        name = str(uuid.uuid4())
        if not role_arn:  # EventBridge needs a role to start an execution; it has none to act as
            log.error("execution of %s not started: its target has no RoleArn", arn)
            return
        if why := self._iam.trusts(role_arn, service, self._region):
            log.error("execution of %s not started: %s", arn, why)
            return
        with acting_as(Acting.role_session(role_arn, name)):
            try:
                self._client("stepfunctions").start_execution(stateMachineArn=arn, input=payload, name=name)
            except Exception as exc:  # noqa: BLE001 - AccessDenied among them: the delivery fails, as in AWS
                log.error("execution of %s not started: %s", arn, exc)  # noqa: TRY400 - the error says why

    def schedule_target(self, props: dict[str, Any]) -> Callable[[], None]:
        """What an ``AWS::Scheduler::Schedule`` does when it fires: call its target as its role."""
        target = props.get("Target", {})
        arn = str(target.get("Arn", ""))
        payload = json.loads(target["Input"]) if target.get("Input") else {}
        role = target.get("RoleArn")

        def fire() -> None:
            if not role or (why := self._iam.trusts(str(role), "scheduler.amazonaws.com", self._region)):
                log.error("schedule target %s not called: %s", arn, "no RoleArn" if not role else why)
                return
            if ":lambda:" in arn:
                acting = Acting.role_session(str(role), "scheduler")
                if self._authorized(acting, "lambda", "InvokeFunction", arn):
                    self.invoke_async(arn, payload)
            elif ":states:" in arn:
                self.start_execution(arn, json.dumps(payload), str(role), "scheduler.amazonaws.com")
            else:
                log.warning("schedule target %s is not emulated locally", arn)

        return fire

    def schedule_call(self, target: dict[str, Any]) -> str | None:  # noqa: PLR0911 - one return per outcome
        """One invocation of a schedule's target (an API-created one-time schedule,
        :mod:`sluice_local.emulation.one_time`) as its role; why it failed, or None."""
        arn, role = str(target.get("Arn", "")), str(target.get("RoleArn") or "")
        if not role:
            return "ValidationException: the target has no RoleArn"
        context = {"aws:SourceAccount": self._account}
        if why := self._iam.trusts(role, "scheduler.amazonaws.com", self._region, context):
            return f"AccessDeniedException: {why}"
        payload = json.loads(target["Input"]) if target.get("Input") else {}
        acting = Acting.role_session(role, "scheduler")
        try:
            if ":lambda:" in arn:
                if not self._authorized(acting, "lambda", "InvokeFunction", arn):
                    return f"AccessDeniedException: {role} may not lambda:InvokeFunction {arn}"
                self.invoke_async(arn, payload)  # accepted: the function's own failures are Lambda's
                return None
            operation = {SQS_SEND: "send_message", SQS_SEND_BATCH: "send_message_batch"}.get(arn)
            if operation is None:
                return f"ValidationException: target {arn} is not emulated locally"
            for entry in payload.get("Entries", [payload]):  # binary values travel base64 in JSON
                for value in (entry.get("MessageAttributes") or {}).values():
                    if isinstance(value.get("BinaryValue"), str):
                        value["BinaryValue"] = base64.b64decode(value["BinaryValue"])
            with acting_as(acting):
                getattr(self._client("sqs"), operation)(**payload)
        except Exception as exc:  # noqa: BLE001 - the target's error is the invocation's failure
            return f"{type(exc).__name__}: {exc}"
        return None

    def dead_letter(self, queue_arn: str, role: str, body: str, attributes: dict[str, str]) -> str | None:
        """A failed schedule's input sent to its dead-letter queue as its role; why not, or None."""
        sqs = self._client("sqs")
        try:
            with acting_as(Acting.role_session(role, "scheduler")):
                sqs.send_message(
                    QueueUrl="/".join([sqs.meta.endpoint_url.rstrip("/"), *queue_arn.split(":")[4:6]]),
                    MessageBody=body,
                    MessageAttributes={
                        key: {"DataType": "String", "StringValue": value} for key, value in attributes.items()
                    },
                )
        except Exception as exc:  # noqa: BLE001 - logged by the caller
            return f"{type(exc).__name__}: {exc}"
        return None

    def _authorized(self, acting: Acting, service: str, operation: str, resource: str) -> bool:
        """A delivery decided as AWS decides the service's call; a refused one is logged and dropped."""
        call = iam_actions.Call(service, operation, f"{service}:{operation}", resource, {})
        denied = self._iam.authorize(acting, [call], self._region)
        if denied is not None:
            log.error("delivery dropped: %s", denied)
        return denied is None
