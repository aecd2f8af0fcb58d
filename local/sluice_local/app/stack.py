"""A sluice stack deployed locally, as ``sam deploy`` would deploy it from this repository.

The emulation deploys whatever template and parameters it is given; this is where the app's own
choices come in: samconfig.toml's ``parameter_overrides`` (read by the operator CLI's reader, the one
place samconfig.toml is read) beneath the caller's, and the job store attached when a PostgreSQL is.
The example workloads configure themselves in workloads.yaml's ``Mappings.Workloads``, as a team's do;
the demo and the soak, which are about the examples, deploy them alone (``examples``), whatever a
team's fork lists beside them (an existing queue of its own would not even exist in embedded AWS).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice_cli.samconfig import parameter_overrides
from sluice_local.app.jobstore import JobStoreAttachment
from sluice_local.app.principals import OPERATOR, PRODUCER, Principals
from sluice_local.emulation.cloud import ROOT, Attachment, LocalCloud
from sluice_local.emulation.existing import ExistingQueue
from sluice_local.testing.project import with_examples

__all__ = ["acting_credentials", "local_cloud", "principals", "samconfig_parameters"]


def samconfig_parameters(project: Path = ROOT, env: str = "default") -> dict[str, str]:
    """``parameter_overrides`` of samconfig.toml's environment (deploy section) as a dict."""
    return parameter_overrides(project / "samconfig.toml", env)


def local_cloud(
    parameters: Mapping[str, str] | None = None,
    *,
    project: Path = ROOT,
    template: Path | None = None,
    stack_name: str = "sluice-local",
    port: int | None = None,
    config_env: str = "default",
    database_url: str | None = None,
    beside: LocalCloud | None = None,
    existing_queues: Sequence[ExistingQueue] = (),
    examples: bool = False,
) -> LocalCloud:
    """The stack (not started): the example's parameters, overridden by samconfig.toml's of
    ``config_env``, overridden by ``parameters``; with ``database_url``, the job store in that
    PostgreSQL (:class:`JobStoreAttachment`); ``beside``: a running stack whose embedded AWS (account
    and region) this one is deployed into; ``existing_queues``: created in it before the deploy;
    ``examples``: the project's examples alone (:func:`examples_project`). A producer and an operator
    role are created beside it and listed in ``TrustedSenderArns`` and ``OperatorArns``
    (:class:`~sluice_local.app.principals.Principals`, :func:`principals`)."""
    if examples:
        template = examples_project(project, template, stack_name)
    attachments: list[Attachment] = [Principals(), *existing_queues]
    if database_url is not None:
        attachments.append(JobStoreAttachment(database_url))
    return LocalCloud(
        project,
        template=template,
        parameters={
            **samconfig_parameters(project, config_env),
            **(parameters or {}),
        },
        stack_name=stack_name,
        port=port,
        attachments=attachments,
        beside=beside,
    )


def principals(cloud: LocalCloud) -> Principals:
    """The producer and operator of a stack :func:`local_cloud` made."""
    for attachment in cloud.attachments:
        if isinstance(attachment, Principals):
            return attachment
    raise LookupError(f"stack {cloud.stack_name} was not made by local_cloud: it has no principals")


def acting_credentials(cloud: LocalCloud) -> dict[str, dict[str, str]]:
    """The producer's and the operator's sessions (listed in TrustedSenderArns and OperatorArns), as
    ``AWS_*`` variables: what :class:`~sluice_local.app.observer.Stack` and ``up`` hand out."""
    found = principals(cloud)
    return {who: found.credentials(who) for who in (PRODUCER, OPERATOR)}


def examples_project(project: Path, template: Path | None, stack_name: str) -> Path:
    """The template of a copy of ``project`` whose workloads.yaml runs the examples alone, as sluice
    ships them: what the demo and the soak deploy, so a team's own workloads, added or removed, change
    neither. The copy is this process's (``.sluice-local/projects/<stack_name>-<pid>``: the soak's
    workers deploy stacks of one name side by side); copies of processes no longer running are removed."""
    projects = project / ".sluice-local" / "projects"
    for old in projects.glob("*-*"):
        pid = old.name.rsplit("-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            shutil.rmtree(old, ignore_errors=True)  # its links are unlinked, never followed
    into = projects / f"{stack_name}-{os.getpid()}"
    shutil.rmtree(into, ignore_errors=True)
    return with_examples(template or project / "template.yaml", into)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
