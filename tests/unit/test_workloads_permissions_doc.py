"""docs/workloads.md "Permissions for your own resources": its snippet attaches a policy to the role the
workloads' loop creates, and names the variable the consumer really gets."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    pass


def _tag(loader: yaml.SafeLoader, tag: str, node: yaml.Node) -> dict[str, object]:
    """A CloudFormation short form (``!Ref X``) as its long form's key and value."""
    if isinstance(node, yaml.ScalarNode):
        value: object = loader.construct_scalar(node)
    else:
        assert isinstance(node, yaml.SequenceNode), node
        value = loader.construct_sequence(node)
    return {"Ref" if tag == "Ref" else f"Fn::{tag}": value}


_Loader.add_multi_constructor("!", _tag)


def _snippet() -> dict[str, dict[str, dict[str, object]]]:
    text = (ROOT / "docs" / "workloads.md").read_text()
    section = text.split("### Permissions for your own resources", 1)[1]
    found = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert found, "no yaml snippet in the section"
    return yaml.load(found.group(1), Loader=_Loader)  # noqa: S506


def test_the_snippet_attaches_its_policy_to_the_consumer_role_the_loop_creates() -> None:
    snippet = _snippet()
    workloads = (ROOT / "workloads.yaml").read_text()
    assert "${Name}ConsumerRole:" in workloads  # the role the loop makes for each workload
    assert re.search(r"Path: !Sub \"/\$\{StackName\}/\"", workloads)  # on the stack's path
    assert snippet["PayoutsWriter"]["Properties"]["Roles"] == [{"Ref": "PayoutsConsumerRole"}]
    assert snippet["PayoutsTable"]["Properties"]["TableName"] == {"Fn::Sub": "${StackName}-payouts"}


def test_the_service_name_the_docs_point_to_holds_the_stack_name_first() -> None:
    assert 'POWERTOOLS_SERVICE_NAME: !Sub "${StackName}/${Name}"' in (ROOT / "workloads.yaml").read_text()
