"""What every command gets: clients, the stack's resources, the redrive settings, the output."""

from __future__ import annotations

from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from sluice.envelope import Seal
from sluice.errors import ConfigurationError
from sluice.redrive.breaker import Breaker
from sluice.redrive.settings import RedriveSettings
from sluice.sealing import load_seal
from sluice_cli import PARTIAL_FAILURE, CliError
from sluice_cli.clients import Clients
from sluice_cli.messages import QueueScan
from sluice_cli.output import Output
from sluice_cli.resources import LoadedSettings, Resources, redrive_settings, stack_outputs


@dataclass
class Context:
    clients: Clients
    out: Output
    stack_name: str
    workload: str | None = None
    """``--workload``: which of the stack's workloads the commands act on (needed when it runs several)."""
    receive_wait_seconds: int | None = None
    """``--receive-wait``: long-poll seconds of a receive (None: 1 for scans, the setting for redrive)."""
    given_resources: Resources | None = None
    _resources: Resources | None = field(default=None, init=False, repr=False)
    _settings: LoadedSettings | None = field(default=None, init=False, repr=False)
    _seal: Seal | str | None = field(default=None, init=False, repr=False)

    @property
    def scan_wait_seconds(self) -> int:
        return 1 if self.receive_wait_seconds is None else self.receive_wait_seconds

    @property
    def resources(self) -> Resources:
        """The given resources, else the stack's outputs (read once)."""
        if self._resources is None:
            self._resources = self.given_resources or Resources.from_outputs(
                self.stack_name, stack_outputs(self.clients.cloudformation, self.stack_name), self.workload
            )
        return self._resources

    def settings(self) -> LoadedSettings:
        """The deployed redriver's settings (read once); a fallback is announced on stderr."""
        if self._settings is None:
            self._settings = redrive_settings(self.resources, self.clients.lambda_)
            if self._settings.note:
                self.out.warn(self._settings.note)
        return self._settings

    def seal(self, *, required: bool) -> Seal | None:
        """The stack's envelope key (read once). Without it envelopes are shown unverified, with a
        warning; a command that writes envelopes (``required``) cannot run."""
        if self._seal is None:
            # the stack's output names the key every workload shares; else the deployed settings do
            secret = self.resources.envelope_key_secret or self.settings().settings.envelope_key_secret
            try:
                self._seal = load_seal(secret, client=self.clients.secretsmanager)
            except (ConfigurationError, ClientError, BotoCoreError, LookupError) as exc:
                self._seal = f"cannot read the envelope key ({exc})"
                if not required:
                    self.out.warn(f"{self._seal}: envelopes are shown unverified")
        if isinstance(self._seal, str):
            if required:
                raise CliError(f"{self._seal}: a replayed message would lose its history", PARTIAL_FAILURE)
            return None
        return self._seal

    def scan(
        self, url: str, *, visibility_seconds: int, limit: int | None = None, writes: bool = False
    ) -> QueueScan:
        """A scan of ``url`` whose envelopes are checked with the stack's key (required when
        ``writes``: the messages are sent on)."""
        return QueueScan(
            self.clients.sqs,
            url,
            visibility_seconds=visibility_seconds,
            wait_seconds=self.scan_wait_seconds,
            limit=limit,
            seal=self.seal(required=writes),
        )

    def released(self, scan: QueueScan) -> None:
        """Warn about messages a scan could not make visible again."""
        for failure in scan.release_failures:
            self.out.warn(
                f"could not make a message visible again (it reappears after its timeout): {failure}"
            )

    def breaker(self, settings: RedriveSettings | None = None) -> Breaker:
        """The redrive breaker; with ``settings``, under the deployed policy."""
        if settings is None:
            return Breaker(
                self.clients.dynamodb,
                self.resources.require("breaker_table"),
                name=self.resources.breaker_name,
            )
        return Breaker.from_settings(settings, self.clients.dynamodb)
