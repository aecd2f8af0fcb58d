"""A sluice stack deployed locally, as ``sam deploy`` would deploy it from this repository.

The emulation deploys whatever template and parameters it is given; this is where the app's own
choices come in: samconfig.toml's ``parameter_overrides`` (read by the operator CLI's reader, the one
place samconfig.toml is read) beneath the caller's, and the job store attached when a PostgreSQL is.
The example workloads configure themselves in template.yaml's ``Mappings.Workloads``, as a team's do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice_cli.samconfig import parameter_overrides
from sluice_local.app.jobstore import JobStoreAttachment
from sluice_local.emulation.cloud import ROOT, Attachment, LocalCloud
from sluice_local.emulation.existing import ExistingQueue

__all__ = ["local_cloud", "samconfig_parameters"]


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
) -> LocalCloud:
    """The stack (not started): the example's parameters, overridden by samconfig.toml's of
    ``config_env``, overridden by ``parameters``; with ``database_url``, the job store in that
    PostgreSQL (:class:`JobStoreAttachment`); ``beside``: a running stack whose embedded AWS (account
    and region) this one is deployed into; ``existing_queues``: created in it before the deploy."""
    attachments: list[Attachment] = [*existing_queues]
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
