"""The people and programs around a stack, as IAM principals: a producer and an operator.

In AWS a producer sends with its own role, and the delay queue admits it only when the stack lists it
in ``TrustedSenderArns``; an operator runs the CLI with a role listed in ``OperatorArns``, which alone
may isolate into the poison queue and send long backoffs to the delay queue. Locally the demo, the
tests and ``up`` act the same way: :class:`Principals` creates the two roles in the embedded AWS before
the deploy (an attachment), names them in those parameters (after any the caller gave), and hands out
clients and credentials of each (an STS session, as ``aws sts assume-role`` would), so a missing
listing or permission fails here as it would there. What is not a producer's or an operator's doing
(looking at the ledger, queue depths, logs) is done with the default credentials: the administrator.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sluice_local.emulation.cloud import LocalCloud
    from sluice_local.emulation.functions import Handler

__all__ = ["OPERATOR", "PRODUCER", "Principals", "Who"]

HARNESS_PATH = "/sluice-local/"
"""Their IAM path (:data:`sluice_local.emulation.iam.report.HARNESS_PATH`): not the stack's roles."""

Who = Literal["producer", "operator"]
PRODUCER: Who = "producer"
OPERATOR: Who = "operator"

_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::{account}:root"}, "Action": "sts:AssumeRole"}
    ],
}


def _policies(who: Who, stack: str, account: str) -> dict[str, Any]:
    """What each may do, scoped to the stack's resources by name (a team would scope it the same way)."""
    queues = f"arn:aws:sqs:*:{account}:{stack}-*"
    buckets = [f"arn:aws:s3:::{stack.lower()}-*", f"arn:aws:s3:::{stack.lower()}-*/*"]
    secrets = f"arn:aws:secretsmanager:*:{account}:secret:*"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "SendToTheStacksQueues",
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
            "Resource": queues,
        },
        {
            "Sid": "OffloadLargeBodies",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject"],
            "Resource": buckets,
        },
        {
            "Sid": "SealTheEnvelope",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": secrets,
        },
    ]
    if who == OPERATOR:  # what docs/operations.md#permissions lists, scoped to the stack
        statements += [
            {
                "Sid": "OperateTheStacksQueues",
                "Effect": "Allow",
                "Action": [
                    "sqs:GetQueueAttributes",
                    "sqs:ReceiveMessage",
                    "sqs:ChangeMessageVisibility",
                    "sqs:DeleteMessage",
                    "sqs:PurgeQueue",
                    "sqs:SendMessage",
                    "sqs:ListDeadLetterSourceQueues",
                    "sqs:StartMessageMoveTask",
                    "sqs:ListMessageMoveTasks",
                    "sqs:CancelMessageMoveTask",
                ],
                "Resource": queues,
            },
            {"Sid": "ListQueues", "Effect": "Allow", "Action": "sqs:ListQueues", "Resource": "*"},
            {
                "Sid": "ReadTheStack",
                "Effect": "Allow",
                "Action": ["cloudformation:DescribeStacks", "cloudformation:ListStackResources"],
                "Resource": f"arn:aws:cloudformation:*:{account}:stack/{stack}*",
            },
            {
                "Sid": "ReadTheRedriveSettings",
                "Effect": "Allow",
                "Action": "lambda:GetFunctionConfiguration",
                "Resource": f"arn:aws:lambda:*:{account}:function:{stack}-*",
            },
            {
                "Sid": "BreakerAndRunLease",
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                "Resource": f"arn:aws:dynamodb:*:{account}:table/{stack}-*",
            },
            {
                "Sid": "RunTheRedrive",
                "Effect": "Allow",
                "Action": ["states:StartExecution", "states:DescribeExecution", "states:ListExecutions"],
                "Resource": [
                    f"arn:aws:states:*:{account}:stateMachine:{stack}-*",
                    f"arn:aws:states:*:{account}:execution:{stack}-*",
                ],
            },
        ]
    return {"Version": "2012-10-17", "Statement": statements}


class Principals:
    """An attachment: the producer and operator roles of a local stack."""

    def __init__(self) -> None:
        self._cloud: LocalCloud | None = None
        self.arns: dict[Who, str] = {}
        self._clients: dict[tuple[Who, str], Any] = {}
        self._credentials: dict[Who, dict[str, str]] = {}
        self._lock = threading.Lock()

    def attach(self, cloud: LocalCloud) -> None:
        from sluice_local.emulation.cloud import ACCOUNT  # noqa: PLC0415 - cloud imports app modules lazily

        self._cloud = cloud
        iam = cloud.client("iam")
        for who, parameter in ((PRODUCER, "TrustedSenderArns"), (OPERATOR, "OperatorArns")):
            name = f"{cloud.stack_name}-local-{who}"[:64]
            trust = json.dumps(_TRUST).replace("{account}", ACCOUNT)
            role = iam.create_role(RoleName=name, Path=HARNESS_PATH, AssumeRolePolicyDocument=trust)["Role"]
            iam.put_role_policy(
                RoleName=name,
                PolicyName=who,
                PolicyDocument=json.dumps(_policies(who, cloud.stack_name, ACCOUNT)),
            )
            self.arns[who] = str(role["Arn"])
            listed = [a for a in cloud.parameters.get(parameter, "").split(",") if a]
            cloud.parameters[parameter] = ",".join([*listed, self.arns[who]])

    def environment_dropped(self, handler: Handler) -> None:
        """Nothing of theirs lives in a function's environment."""

    def detach(self) -> None:
        self._clients.clear()
        self._credentials.clear()

    def credentials(self, who: Who) -> dict[str, str]:
        """An STS session of ``who``'s role, as ``AWS_*`` environment variables (for the CLI)."""
        with self._lock:
            if who not in self._credentials:
                if self._cloud is None:
                    raise RuntimeError("the stack is not started")
                session = self._cloud.client("sts").assume_role(
                    RoleArn=self.arns[who], RoleSessionName=f"local-{who}"
                )
                creds = session["Credentials"]
                self._credentials[who] = {
                    "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
                    "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                    "AWS_SESSION_TOKEN": creds["SessionToken"],
                }
            return dict(self._credentials[who])

    def client(self, who: Who, service: str) -> Any:
        """A client acting as ``who`` (one per service, thread-safe)."""
        from sluice_local.emulation.endpoint import endpoint_client  # noqa: PLC0415 - it imports boto3

        if self._cloud is None:
            raise RuntimeError("the stack is not started")
        key = (who, service)
        with self._lock:
            found = self._clients.get(key)
        if found is not None:
            return found
        made = endpoint_client(service, self._cloud.endpoint, self._cloud.region, self.credentials(who))
        with self._lock:
            return self._clients.setdefault(key, made)
