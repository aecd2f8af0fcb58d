"""Queues an account already has before a stack is deployed (``up --existing-queue NAME[:VISIBILITY]``): a
template that consumes a queue it does not create (an event source mapping on its ARN) needs it to
exist at deploy, as CloudFormation does."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice_local.emulation.cloud import LocalCloud
    from sluice_local.emulation.functions import Handler

__all__ = ["ExistingQueue"]

_NAME = r"[A-Za-z0-9_-]{1,80}"
_SPEC = re.compile(rf"^(?P<name>{_NAME})(?::(?P<visibility>\d+))?$")
MAX_VISIBILITY_SECONDS = 43_200  # SQS's limit, read from its docs here: the runtime never asks sluice's code


class ExistingQueue:
    """An :class:`~sluice_local.emulation.cloud.Attachment`: the standard queue ``name``, created in the
    embedded account before the deploy with SQS's defaults, or the visibility timeout given. Nothing
    else is set on it (no redrive policy): it is the team's queue, configured by the team."""

    def __init__(self, name: str, visibility: int | None = None) -> None:
        bad_visibility = visibility is not None and not 0 <= visibility <= MAX_VISIBILITY_SECONDS
        if bad_visibility or not re.fullmatch(_NAME, name):
            raise ValueError(f"not a queue name and visibility: {name!r}, {visibility!r}")
        self.name, self.visibility, self.url = name, visibility, ""

    @classmethod
    def parse(cls, spec: str) -> ExistingQueue:
        """``NAME`` or ``NAME:VISIBILITY`` (seconds, 0-43200), as ``up --existing-queue`` takes it."""
        found = _SPEC.match(spec)
        visibility = found["visibility"] if found else None
        if found is None or (visibility is not None and int(visibility) > MAX_VISIBILITY_SECONDS):
            raise ValueError(
                f"--existing-queue {spec!r}: NAME or NAME:VISIBILITY (a queue name of up to 80 letters, "
                "digits, hyphens and underscores; the visibility timeout in seconds, 0-43200)"
            )
        return cls(found["name"], int(visibility) if visibility is not None else None)

    def __repr__(self) -> str:
        return f"ExistingQueue({self.name!r}, visibility={self.visibility!r})"

    def attach(self, cloud: LocalCloud) -> None:
        attributes = {} if self.visibility is None else {"VisibilityTimeout": str(self.visibility)}
        self.url = cloud.client("sqs").create_queue(QueueName=self.name, Attributes=attributes)["QueueUrl"]

    def environment_dropped(self, handler: Handler) -> None:
        pass  # the queue holds nothing of an execution environment

    def detach(self) -> None:
        pass  # it goes with the embedded account, as everything in it
