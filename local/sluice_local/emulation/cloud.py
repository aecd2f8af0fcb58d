"""The whole stack on a laptop: the real template.yaml deployed into embedded AWS (moto), live.

``LocalCloud`` starts moto as a real HTTP endpoint on a free loopback port (Step Functions execution
on, Lambda's Docker off), points boto3 at it, translates template.yaml with samtranslator, creates
the stack through the CloudFormation API, and then runs the stack's functions in-process: Lambda
Invoke API calls (from boto3, Step Functions tasks, SNS or EventBridge) land in
:class:`~sluice_local.emulation.functions.FunctionHost`, and SQS event source mappings are polled
by :class:`~sluice_local.emulation.pollers.SqsPoller`. Resources, names, environment variables and
policies all come from the template, so a wiring mistake there fails here as it would in AWS.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sluice_local.emulation import emf, moto_adapter, recursion
from sluice_local.emulation.alarms import Alarms
from sluice_local.emulation.deliveries import Deliveries
from sluice_local.emulation.deployed import deployed_functions
from sluice_local.emulation.emulated import Resolver, Schedules, Ticker
from sluice_local.emulation.endpoint import endpoint_client, free_port
from sluice_local.emulation.functions import FunctionHost, Handler
from sluice_local.emulation.iam import enforce as iam
from sluice_local.emulation.language_extensions import LanguageExtensionError, MappingError
from sluice_local.emulation.nested import publish_outputs
from sluice_local.emulation.pollers import MappingSpec, SqsPoller
from sluice_local.emulation.resource_rules import resource_problems
from sluice_local.emulation.template import (
    ARTIFACT_BUCKET,
    ParameterError,
    Translated,
    translate,
    without_unemulated,
)

log = logging.getLogger("sluice_local")
ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"
DEPTHS = moto_adapter.DEPTH_METRICS


class DeployError(RuntimeError):
    """The stack could not be created; the message lists the failed resources and reasons."""


class Attachment(Protocol):
    """What a stack is deployed with beyond its template (a database and the secret naming it, ...),
    plugged in by whoever starts the stack: the emulation knows nothing about it."""

    def attach(self, cloud: LocalCloud) -> None:
        """The endpoint is up, nothing deployed yet: create what the stack needs and set the parameters
        that name it in ``cloud.parameters``; raise :class:`DeployError` when it cannot be."""

    def environment_dropped(self, handler: Handler) -> None:
        """An execution environment of one of the stack's functions is gone (it crashed or timed out):
        free what its process held, as its end does in AWS."""

    def detach(self) -> None:
        """The stack stopped (also after a failed start): remove what :meth:`attach` created."""


class LocalCloud:
    def __init__(
        self,
        project: Path = ROOT,
        *,
        template: Path | None = None,
        parameters: dict[str, str] | None = None,
        stack_name: str = "sluice-local",
        region: str = "us-east-1",
        port: int | None = None,
        attachments: Sequence[Attachment] = (),
        beside: LocalCloud | None = None,
    ) -> None:
        """``parameters``: the stack's parameter values, as ``sam deploy`` is given them;
        ``attachments``: what the stack is deployed with beyond its template (:class:`Attachment`);
        ``beside``: a started stack whose embedded AWS this one is deployed into (one account and
        region, two stacks: each its own functions, pollers, schedules and alarms). Stop it first."""
        if beside is not None and beside.region != region:
            raise ValueError(f"a stack beside {beside.stack_name} is in its region, {beside.region}")
        self.project = project
        self.attachments = tuple(attachments)
        self.template_path = template or project / "template.yaml"
        self.parameters = dict(parameters or {})
        self.stack_name: str = stack_name
        self.region: str = region
        self.port: int = beside.port if beside is not None else port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.outputs: dict[str, str] = {}
        self.resources: dict[str, str] = {}
        self.functions: dict[str, FunctionHost] = {}
        self.pollers: list[SqsPoller] = []
        self.schedules = Schedules(region, ACCOUNT)
        self.alarms: Alarms | None = None
        self._tickers: list[Ticker] = []
        self._server: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._unpatch: list[Any] = []
        self.translated: Translated | None = None
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._beside = beside
        self._peers: list[LocalCloud] = beside._peers if beside is not None else []
        """The stacks deployed into this embedded AWS: an invocation or event reaches its function."""
        self.feed: emf.Feed = beside.feed if beside is not None else emf.Feed()
        """The EMF datapoints the functions of this embedded AWS print (every stack beside it shares it)."""
        self.iam: iam.Enforcer = (
            beside.iam if beside is not None else iam.Enforcer(ACCOUNT, iam.mode_from_env())
        )
        """Authorizes every request to this embedded AWS (``SLUICE_LOCAL_IAM``: enforce, record, off) and
        records what each principal did (:mod:`sluice_local.emulation.iam`)."""
        self.deliveries = Deliveries(self._host_for, self.client, self.iam, region, ACCOUNT)
        """What EventBridge and EventBridge Scheduler call on the stack's behalf."""
        self._metrics: emf.Subscription | None = None
        self._metric_cursor = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LocalCloud:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCloud:
        if self._beside is not None and self._beside not in self._peers:
            raise RuntimeError(f"stack {self._beside.stack_name} is not running")
        try:
            if self._beside is None:
                self._start_server()
            self._peers.append(self)
            recursion.install()  # the SDK's part of Lambda's recursive loop detection (once per process)
            for attachment in self.attachments:
                attachment.attach(self)
            self._deploy()
            self._start_pollers()
            self._start_emulation()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the stack; the stack owning the embedded AWS stops the stacks beside it first."""
        if self._beside is None:
            for peer in reversed([p for p in self._peers if p is not self]):
                peer.stop()
        self._stop_emulation()
        self._stop_server()
        for host in self.functions.values():  # after the last request in flight: none starts another
            host.retire()  # the stack's environments end with it (their job-store connections closed)
        for attachment in reversed(self.attachments):
            try:
                attachment.detach()
            except Exception:  # stopping must finish; what was left is in the log
                log.warning("could not detach %r", attachment, exc_info=True)

    def _stop_emulation(self) -> None:
        for ticker in self._tickers:
            ticker.stop()
        self._tickers.clear()
        for poller in self.pollers:
            poller.stop()
        self.pollers.clear()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self in self._peers:
            self._peers.remove(self)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            # The server stops accepting at once; let requests already in flight finish.
            for thread in threading.enumerate():
                if "process_request_thread" in thread.name:
                    thread.join(timeout=10)
        for undo in reversed(self._unpatch):
            undo()
        self._unpatch.clear()
        for key, value in self._saved_env.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
        self._saved_env.clear()

    def client(self, service: str) -> Any:
        """One client per service (boto3 clients are thread-safe), not one per call."""
        with self._clients_lock:
            if service not in self._clients:
                self._clients[service] = endpoint_client(service, self.endpoint, self.region)
            return self._clients[service]

    # --- steps -------------------------------------------------------------------------------

    def _set_env(self, **values: str) -> None:
        for key, value in values.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def _start_server(self) -> None:
        self._set_env(
            MOTO_PORT=str(self.port),
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=self.region,
            AWS_REGION=self.region,
            POWERTOOLS_TRACE_DISABLED="true",
        )
        os.environ.pop("AWS_SESSION_TOKEN", None)
        os.environ.pop("AWS_PROFILE", None)
        for problem in moto_adapter.problems():
            log.warning("%s (see tests/unit/test_moto_adapter.py)", problem)
        if emf_problem := emf.capture_problem():
            log.warning("%s: alarms on EMF metrics stay silent locally", emf_problem)
        self._unpatch.append(moto_adapter.configure())
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
        self._unpatch.append(moto_adapter.install_quiet())  # moto's per-resource notices: one line instead
        self._unpatch.append(moto_adapter.install_layer_version_refs())  # Ref of a layer version: its ARN
        self._unpatch.append(moto_adapter.install_invoke(self._invoke))
        self._unpatch.append(moto_adapter.install_sqs_rules())  # moto accepts what SQS refuses
        self._unpatch.append(moto_adapter.install_dead_letter_sources())  # moto's moves don't say from where
        self._unpatch.append(moto_adapter.install_sqs_locks())  # no message lost or resurrected
        self._unpatch.append(moto_adapter.install_message_groups()[1])  # dedup window, fair-queue order
        self._unpatch.append(moto_adapter.install_execution_names())
        self._unpatch.append(moto_adapter.install_cloudformation_secrets())
        self._unpatch.append(moto_adapter.install_cloudformation_policies())  # moto skips the three types
        self._unpatch.append(moto_adapter.install_role_managed_policies())  # moto drops ManagedPolicyArns
        self._unpatch += [moto_adapter.install_module_list_once(), moto_adapter.install_parse_once()]
        self._unpatch.append(emf.install_capture(self.feed.put))  # CloudWatch Logs extracts EMF in AWS
        self._unpatch.append(iam.install(self.iam))  # IAM and resource policies, as AWS decides them
        self._server = moto_adapter.start_server(self.port)
        # moto's backends are process-wide: a stack started earlier in this process must not leak in.
        moto_adapter.reset()

    def _invoke(
        self, function_name: str, body: Any, request_headers: Any, response_headers: dict[str, Any]
    ) -> bytes:
        """Every Lambda invocation moto receives runs in-process (``Event``: on its own thread)."""
        host = self._host_for(function_name)
        if request_headers.get("X-Amz-Invocation-Type") == "Event":
            threading.Thread(target=host.invoke_payload, args=(body, {}), daemon=True).start()
            return b""
        return host.invoke_payload(body, response_headers)

    def _host_for(self, name_or_arn: str) -> FunctionHost:
        """The function of any stack in this embedded AWS (an invocation may come from another's)."""
        for cloud in [self, *(peer for peer in self._peers if peer is not self)]:
            try:
                return cloud._own_host_for(name_or_arn)
            except KeyError:
                continue
        raise KeyError(f"function {name_or_arn} is not part of any stack deployed here")

    def _own_host_for(self, name_or_arn: str) -> FunctionHost:
        name = name_or_arn.rsplit(":function:", maxsplit=1)[-1].split(":", maxsplit=1)[0]
        if hosts := [host for host in self.functions.values() if host.spec.name == name]:
            return hosts[0]
        raise KeyError(f"function {name} is not part of stack {self.stack_name}")

    def _deploy(self) -> None:
        try:
            translated, artifacts = translate(self.template_path, self.parameters, self.region)
        except ParameterError as exc:  # CloudFormation refuses the stack before creating anything
            raise DeployError(f"ValidationError: {exc}") from exc
        except (LanguageExtensionError, MappingError) as exc:  # the transform fails: nothing is created
            raise DeployError(f"Transform failed: {exc}") from exc
        self.translated = translated
        # names and batching AWS refuses and moto accepts: the stack would fail there (CREATE_FAILED)
        refused = resource_problems(
            {**translated.template["Resources"], **translated.emulated}, self._parameter_values()
        )
        if refused:
            raise DeployError(f"stack {self.stack_name} would fail in AWS: " + "; ".join(refused))
        s3 = self.client("s3")
        s3.create_bucket(Bucket=ARTIFACT_BUCKET)
        for key, blob in artifacts.items():
            s3.put_object(Bucket=ARTIFACT_BUCKET, Key=key, Body=blob)
        cfn = self.client("cloudformation")
        declared = translated.template.get("Parameters", {})
        # moto reads a CommaDelimitedList's Default as one text (a Join of it joins its characters), a
        # given value as the list CloudFormation makes of either: each such default is given explicitly
        lists = {
            name: str(spec["Default"])
            for name, spec in declared.items()
            if spec.get("Type") == "CommaDelimitedList" and "Default" in spec and name not in self.parameters
        }
        try:
            deployable, notes = without_unemulated(translated.template)
        except ParameterError as exc:
            raise DeployError(f"ValidationError: {exc}") from exc
        for note in notes:
            log.warning(note)
        types = moto_adapter.not_created(r.get("Type", "") for r in deployable.get("Resources", {}).values())
        if types:
            log.info(
                "not created locally (moto): %s", ", ".join(f"{t} x{n}" for t, n in sorted(types.items()))
            )
        cfn.create_stack(
            StackName=self.stack_name,
            TemplateBody=json.dumps(deployable),
            Parameters=[
                {"ParameterKey": k, "ParameterValue": v}
                for k, v in {**lists, **self.parameters}.items()
                if k in declared
            ],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        if refused := moto_adapter.refused_roles():  # CREATE_FAILED in AWS
            raise DeployError(f"stack {self.stack_name} would fail in AWS: " + "; ".join(refused))
        stack = cfn.describe_stacks(StackName=self.stack_name)["Stacks"][0]
        if stack["StackStatus"] != "CREATE_COMPLETE":
            events = cfn.describe_stack_events(StackName=self.stack_name)["StackEvents"]
            failed = [
                f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}"
                for e in events
                if "FAILED" in e["ResourceStatus"]
            ]
            raise DeployError(f"stack {self.stack_name} is {stack['StackStatus']}: " + "; ".join(failed))
        # every stack's outputs in one place, for the local tools (the operator CLI reads a nested
        # stack's from its own stack, as in AWS)
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        self.outputs = publish_outputs(cfn, self.stack_name, outputs)
        for res in cfn.list_stack_resources(StackName=self.stack_name)["StackResourceSummaries"]:
            self.resources[res["LogicalResourceId"]] = res.get("PhysicalResourceId", "")
        self.functions.update(
            deployed_functions(
                self.client("lambda"),
                translated,
                self.resources,
                [attachment.environment_dropped for attachment in self.attachments],
            )
        )
        self._sync_state_machines()
        self._check_trust()

    def _check_trust(self) -> None:
        """Lambda and Step Functions refuse a role whose trust policy does not let them assume it (the
        create fails: "The role defined for the function cannot be assumed by Lambda")."""
        refused = [
            why
            for host in self.functions.values()
            if host.spec.role_arn
            and (why := self.iam.trusts(host.spec.role_arn, "lambda.amazonaws.com", self.region))
        ]
        sfn = self.client("stepfunctions")
        for machine in sfn.list_state_machines()["stateMachines"]:
            role = sfn.describe_state_machine(stateMachineArn=machine["stateMachineArn"]).get("roleArn")
            if role and (why := self.iam.trusts(role, "states.amazonaws.com", self.region)):
                refused.append(why)
        if refused and self.iam.mode == "enforce":
            raise DeployError(f"stack {self.stack_name} would fail in AWS: " + "; ".join(refused))

    def _sync_state_machines(self) -> None:
        try:
            moto_adapter.hand_over_state_machines(ACCOUNT, self.region)
        except ValueError as exc:
            raise DeployError(str(exc)) from exc

    def _start_pollers(self) -> None:
        lam = self.client("lambda")
        sqs = self.client("sqs")
        for mapping in lam.list_event_source_mappings()["EventSourceMappings"]:
            source = mapping.get("EventSourceArn", "")
            if ":sqs:" not in source:
                continue
            try:
                host = self._own_host_for(mapping["FunctionArn"])
            except KeyError:
                continue  # not this stack's function
            queue_name = source.rsplit(":", 1)[-1]
            moto_adapter.detach_sqs_invoke(ACCOUNT, self.region, queue_name)  # the poller replaces it
            spec = MappingSpec(
                uuid=mapping["UUID"],
                queue_arn=source,
                queue_url=sqs.get_queue_url(QueueName=queue_name)["QueueUrl"],
                function=host,
                # Read back through the Lambda API, as the real mapping is; AWS defaults otherwise.
                batch_size=int(mapping.get("BatchSize") or 10),
                window=float(mapping.get("MaximumBatchingWindowInSeconds") or 0),
                max_concurrency=int((mapping.get("ScalingConfig") or {}).get("MaximumConcurrency") or 2),
                report_failures="ReportBatchItemFailures" in (mapping.get("FunctionResponseTypes") or []),
            )
            account, queue_name = spec.queue_arn.split(":")[4:6]
            poller = SqsPoller(
                endpoint_client("sqs", self.endpoint, self.region),  # own connection pool
                spec,
                quiet=functools.partial(moto_adapter.wait_while_empty, account, self.region, queue_name),
            )
            poller.start()
            self.pollers.append(poller)

    def _parameter_values(self) -> dict[str, Any]:
        """Parameters, as CloudFormation resolves them, and the pseudo-parameters."""
        if self.translated is None:
            raise RuntimeError("not deployed")
        values = {k: v.get("Default") for k, v in self.translated.template.get("Parameters", {}).items()}
        values.update(self.parameters)
        values.update(
            {
                "AWS::StackName": self.stack_name,
                "AWS::Region": self.region,
                "AWS::AccountId": ACCOUNT,
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
            }
        )
        return values

    # --- what moto does not do: event delivery, schedules, alarms -------------------------------

    def invoke_async(self, name_or_arn: str, payload: Any, source_arn: str | None = None) -> None:
        """An asynchronous invocation (:meth:`Deliveries.invoke_async`)."""
        self.deliveries.invoke_async(name_or_arn, payload, source_arn)

    def _start_emulation(self) -> None:
        if self.translated is None:
            raise RuntimeError("not deployed")
        if self._beside is None:  # once per embedded AWS; they reach every stack's functions
            self._unpatch.append(
                moto_adapter.install_event_delivery(self.invoke_async, self.deliveries.start_execution)
            )
            self._unpatch.append(moto_adapter.install_aws_sdk_casing(self.region))
        by_physical = {physical: logical for logical, physical in self.resources.items()}
        for rule in moto_adapter.event_rules(ACCOUNT, self.region):
            own = by_physical.get(rule.name) or by_physical.get(rule.arn)
            if own is not None:  # the account's other stacks fire their own
                self.schedules.add_rule(rule, self.translated.local_rates.get(own))
        resolve = Resolver(self.resources, self._parameter_values(), self._arns())
        self._metrics = self.feed.subscribe()
        _, self._metric_cursor = moto_adapter.metric_data_since(ACCOUNT, self.region, 0)
        self.alarms = Alarms(
            region=self.region,
            account=ACCOUNT,
            metric=functools.partial(moto_adapter.queue_metric, ACCOUNT, self.region),
            arrived=self._arrived,
            cloudwatch=self.client("cloudwatch"),
            sns=self.client("sns"),
            events=self.client("events"),
        )
        for logical_id, resource in self.translated.emulated.items():
            props = resolve(resource.get("Properties", {}))
            if resource["Type"] == "AWS::CloudWatch::Alarm":
                self.alarms.add(logical_id, props, self.stack_name)
            elif resource["Type"] == "AWS::SNS::Subscription":
                self.client("sns").subscribe(
                    TopicArn=props["TopicArn"], Protocol=props["Protocol"], Endpoint=props["Endpoint"]
                )
            elif resource["Type"].startswith("AWS::Scheduler::"):  # a rate schedule, a group's one-time ones
                self.schedules.add_resource(logical_id, resource["Type"], props, self.deliveries)
        if self.alarms.silent:
            log.info(
                "%d alarms evaluated locally (SQS queue metrics, EMF and PutMetricData); %d stay silent "
                "(Lambda, Step Functions, metric math: AWS evaluates them): %s",
                len(self.alarms.alarms),
                len(self.alarms.silent),
                ", ".join(sorted(self.alarms.silent)),
            )
        self._tickers = [
            Ticker("schedules", 0.25, self.schedules.tick),
            Ticker("alarms", 1.0, self.alarms.tick),
        ]
        for ticker in self._tickers:
            ticker.start()

    def _arns(self) -> dict[str, str]:
        arns = {host.spec.logical_id: host.spec.arn for host in self.functions.values()}
        if self.translated is not None:
            for logical_id, resource in self.translated.template["Resources"].items():
                physical = self.resources.get(logical_id, "")
                if resource["Type"] == "AWS::SQS::Queue":
                    arns[logical_id] = f"arn:aws:sqs:{self.region}:{ACCOUNT}:{physical.rsplit('/', 1)[-1]}"
                elif resource["Type"] == "AWS::IAM::Role" and physical:  # a schedule's target role, say
                    arns[logical_id] = str(self.client("iam").get_role(RoleName=physical)["Role"]["Arn"])
                elif physical.startswith("arn:"):
                    arns[logical_id] = physical
        return arns

    def queue_depth(self, queue_url: str) -> dict[str, int]:
        """A queue's visible, in-flight and delayed counts, read from the emulation (no request to poll)."""
        name = queue_url.rsplit("/", 1)[-1]
        return {m: int(moto_adapter.queue_metric(ACCOUNT, self.region, name, m) or 0) for m in DEPTHS}

    def _arrived(self) -> list[emf.Datapoint]:
        """The datapoints put since the last call: extracted from EMF, and put with PutMetricData."""
        put, self._metric_cursor = moto_adapter.metric_data_since(ACCOUNT, self.region, self._metric_cursor)
        extracted = self._metrics.drain() if self._metrics is not None else []
        return extracted + [emf.Datapoint(ns, name, dims, (value,), None) for ns, name, dims, value in put]
