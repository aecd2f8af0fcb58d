"""Everything the local runtime does to moto beyond its public API, in one place: written for moto 5.2.5.

- **Settings**: Step Functions executes state machines; Lambda runs without Docker.
- **Patches** (:data:`PATCHED`, each undone by the function that installs it): moto's server lists
  its backends once, not on every request; Lambda invocations
  land in the runtime's in-process functions; EventBridge rules deliver to Lambda and Step Functions
  targets; ``aws-sdk:sfn`` tasks get Step Functions' PascalCase naming; SQS refuses what AWS refuses
  (sizes in bytes with attributes, characters, attribute rules); a message a redrive policy moves
  carries ``DeadLetterQueueSourceArn``, as in SQS; a delete holds the queue's lock (no message lost or
  resurrected by concurrent calls); an unnamed execution gets a name;
  CloudFormation creates ``AWS::SecretsManager::Secret`` (with ``GenerateSecretString``) and queue,
  bucket and topic policies; FIFO deduplication keeps an id 5 minutes after its first send, deleted or
  not, and a standard queue's messages are delivered in the fair-queue order (:mod:`.message_groups`).
- **Backend access**: switch off moto's own SQS→Lambda invoke-on-send, hand state machines created
  through CloudFormation to the executing backend, read queue metrics and what ``PutMetricData`` put
  for alarms, list EventBridge rules for schedules, reset every backend.

Modules: :mod:`.attributes` (what it relies on, and the check), :mod:`.delivery` (invocations and
event delivery), :mod:`.sqs_rules`, :mod:`.dead_letter`, :mod:`.sqs_lock`, :mod:`.cfn_secrets`,
:mod:`.cfn_policies`, :mod:`.message_groups`, :mod:`.backends` (server, settings, backend reads and
writes), :mod:`.speed` (work moto repeats, done once).

``tests/unit/test_moto_adapter.py`` checks each assumption against the installed moto (its version,
every attribute used or replaced, with its signature), so a moto upgrade fails there, naming what
changed, rather than somewhere in a scenario. :func:`problems` is that check; the runtime logs its
findings at start.
"""

from sluice_local.emulation.moto_adapter.attributes import (
    ASL_PARSE,
    AWS_SDK_PARAMETERS,
    AWS_SDK_RESPONSE,
    CFN_PARSE_TEMPLATE,
    CFN_RESOURCE_CLASS,
    LAMBDA_BACKEND_INVOKE,
    LAMBDA_FUNCTION_INVOKE,
    MODULE_LIST,
    PATCHED,
    ROLE_FROM_CFN,
    RULE_SEND_TO_TARGETS,
    S3_BUCKET_PERMISSION,
    SERVER_APP,
    SETTINGS,
    SFN_START_EXECUTION,
    SQS_ADD_MESSAGE,
    SQS_DELETE_MESSAGE,
    SQS_RECEIVE_MESSAGE,
    SQS_RECEIVE_RESPONSE,
    SQS_SEND_MESSAGE,
    SQS_SEND_MESSAGE_BATCH,
    USED,
    WRITTEN_FOR,
    Attribute,
    Undo,
    attribute_problem,
    installed_version,
    problems,
)  # fmt: skip
from sluice_local.emulation.moto_adapter.backends import (
    DEPTH_METRICS,
    configure,
    detach_sqs_invoke,
    event_rules,
    hand_over_state_machines,
    install_module_list_once,
    metric_data_since,
    queue_metric,
    reset,
    start_server,
    wait_while_empty,
)  # fmt: skip
from sluice_local.emulation.moto_adapter.cfn_policies import (
    MANAGED_ARNS,
    install_cloudformation_policies,
    install_role_managed_policies,
    refused_roles,
)
from sluice_local.emulation.moto_adapter.cfn_secrets import install_cloudformation_secrets
from sluice_local.emulation.moto_adapter.dead_letter import DEAD_LETTER_SOURCE, install_dead_letter_sources
from sluice_local.emulation.moto_adapter.delivery import (
    InvokeFn,
    install_aws_sdk_casing,
    install_event_delivery,
    install_execution_names,
    install_invoke,
)  # fmt: skip
from sluice_local.emulation.moto_adapter.message_groups import MessageGroups, install_message_groups
from sluice_local.emulation.moto_adapter.quiet import install_layer_version_refs, install_quiet, not_created
from sluice_local.emulation.moto_adapter.speed import install_parse_once
from sluice_local.emulation.moto_adapter.sqs_lock import install_sqs_locks
from sluice_local.emulation.moto_adapter.sqs_rules import install_sqs_rules, wire_attributes

__all__ = [
    "ASL_PARSE",
    "AWS_SDK_PARAMETERS",
    "AWS_SDK_RESPONSE",
    "CFN_PARSE_TEMPLATE",
    "CFN_RESOURCE_CLASS",
    "DEAD_LETTER_SOURCE",
    "DEPTH_METRICS",
    "LAMBDA_BACKEND_INVOKE",
    "LAMBDA_FUNCTION_INVOKE",
    "MANAGED_ARNS",
    "MODULE_LIST",
    "PATCHED",
    "ROLE_FROM_CFN",
    "RULE_SEND_TO_TARGETS",
    "S3_BUCKET_PERMISSION",
    "SERVER_APP",
    "SETTINGS",
    "SFN_START_EXECUTION",
    "SQS_ADD_MESSAGE",
    "SQS_DELETE_MESSAGE",
    "SQS_RECEIVE_MESSAGE",
    "SQS_RECEIVE_RESPONSE",
    "SQS_SEND_MESSAGE",
    "SQS_SEND_MESSAGE_BATCH",
    "USED",
    "WRITTEN_FOR",
    "Attribute",
    "InvokeFn",
    "MessageGroups",
    "Undo",
    "attribute_problem",
    "configure",
    "detach_sqs_invoke",
    "event_rules",
    "hand_over_state_machines",
    "install_aws_sdk_casing",
    "install_cloudformation_policies",
    "install_cloudformation_secrets",
    "install_dead_letter_sources",
    "install_event_delivery",
    "install_execution_names",
    "install_invoke",
    "install_layer_version_refs",
    "install_message_groups",
    "install_module_list_once",
    "install_parse_once",
    "install_quiet",
    "install_role_managed_policies",
    "install_sqs_locks",
    "install_sqs_rules",
    "installed_version",
    "metric_data_since",
    "not_created",
    "problems",
    "queue_metric",
    "refused_roles",
    "reset",
    "start_server",
    "wait_while_empty",
    "wire_attributes",
]  # fmt: skip
