"""What AWS services call on a stack's behalf, made by the local runtime as those services would.

EventBridge invokes a rule's function target as its service principal (the function's resource policy
must let it, for that rule) and starts a state machine target as the target's role (whose trust policy
must let EventBridge in); EventBridge Scheduler calls its target as the schedule's role (required).
Each is authorized by the stack's IAM enforcement (:mod:`sluice_local.emulation.iam`); a refused
delivery is logged and dropped, as the service drops it.
"""

from __future__ import annotations

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

    def _authorized(self, acting: Acting, service: str, operation: str, resource: str) -> bool:
        """A delivery decided as AWS decides the service's call; a refused one is logged and dropped."""
        call = iam_actions.Call(service, operation, f"{service}:{operation}", resource, {})
        denied = self._iam.authorize(acting, [call], self._region)
        if denied is not None:
            log.error("delivery dropped: %s", denied)
        return denied is None
