"""The local runtime's IAM evaluator against the evaluation examples of AWS's IAM User Guide (and the KMS
Developer Guide's key policies): each test names the page its example comes from. Pure: no moto."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sluice_local.emulation.iam import Decision, Policy, PolicyError, Principal, Request, evaluate, parse_date

ACCOUNT = "123456789012"
OTHER = "999999999999"


def identity(*statements: dict[str, Any], version: str | None = "2012-10-17", source: str = "id") -> Policy:
    document: dict[str, Any] = {"Statement": list(statements)}
    if version is not None:
        document["Version"] = version
    return Policy.parse(document, source=source, kind="identity")


def on_resource(*statements: dict[str, Any], version: str | None = "2012-10-17") -> Policy:
    document: dict[str, Any] = {"Statement": list(statements)}
    if version is not None:
        document["Version"] = version
    return Policy.parse(document, source="resource policy", kind="resource")


def user(name: str, account: str = ACCOUNT) -> Principal:
    return Principal.user(f"arn:aws:iam::{account}:user/{name}")


def role_session(name: str, session: str = "session", account: str = ACCOUNT) -> Principal:
    return Principal.role_session(f"arn:aws:iam::{account}:role/{name}", session)


def ask(
    who: Principal,
    action: str,
    resource: str,
    policies: tuple[Policy, ...] = (),
    attached: Policy | None = None,
    context: dict[str, Any] | None = None,
    *,
    kms: bool = False,
) -> Decision:
    request = Request(who, action, resource, context or {})
    return evaluate(request, policies, attached, resource_required=kms)


def sids(statements: tuple[Any, ...]) -> list[str | None]:
    return [s.sid for s in statements]


# --- Policy evaluation logic ------------------------------------------------------------------------

CARLOS_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "AllowS3ListRead",
            "Effect": "Allow",
            "Action": [
                "s3:GetBucketLocation",
                "s3:GetAccountPublicAccessBlock",
                "s3:ListAccessPoints",
                "s3:ListAllMyBuckets",
            ],
            "Resource": "arn:aws:s3:::*",
        },
        {
            "Sid": "AllowS3Self",
            "Effect": "Allow",
            "Action": "s3:*",
            "Resource": ["arn:aws:s3:::carlossalazar/*", "arn:aws:s3:::carlossalazar"],
        },
        {"Sid": "DenyS3Logs", "Effect": "Deny", "Action": "s3:*", "Resource": "arn:aws:s3:::*log*"},
    ],
}
CARLOS_BUCKET_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/carlossalazar"},
            "Action": "s3:*",
            "Resource": ["arn:aws:s3:::carlossalazar/*", "arn:aws:s3:::carlossalazar"],
        }
    ],
}


def test_carlos_saving_to_his_logs_bucket_is_denied_by_the_explicit_deny():
    """Policy evaluation logic: "Example identity-based and resource-based policy evaluation" — Carlos
    saves a file to the carlossalazar-logs bucket: the DenyS3Logs statement denies him."""
    # Given Carlos's identity-based policy
    carlos = user("carlossalazar")
    mine = Policy.parse(CARLOS_POLICY, source="user carlossalazar", kind="identity")
    # When he puts an object into carlossalazar-logs (the bucket policy is on the other bucket)
    decision = ask(carlos, "s3:PutObject", "arn:aws:s3:::carlossalazar-logs/report.txt", (mine,))
    # Then the explicit deny in his identity-based policy decides
    assert not decision.allowed
    assert decision.reason == "with an explicit deny in an identity-based policy"
    assert sids(decision.denied_by) == ["DenyS3Logs"]


def test_carlos_saving_to_his_own_bucket_is_allowed_by_both_policies():
    """Policy evaluation logic: "Example identity-based and resource-based policy evaluation" — saved to
    the carlossalazar bucket instead, both the identity-based and the bucket policy allow it."""
    # Given Carlos's policy and the carlossalazar bucket's policy naming him
    carlos = user("carlossalazar")
    mine = Policy.parse(CARLOS_POLICY, source="user carlossalazar", kind="identity")
    bucket = Policy.parse(json.dumps(CARLOS_BUCKET_POLICY), source="bucket carlossalazar", kind="resource")
    # When he puts an object into his bucket
    decision = ask(carlos, "s3:PutObject", "arn:aws:s3:::carlossalazar/report.txt", (mine,), bucket)
    # Then it is allowed, and both Allow statements are recorded
    assert decision.allowed
    assert decision.reason == ""
    assert [s.policy.source for s in decision.granted_by] == ["user carlossalazar", "bucket carlossalazar"]
    assert sids(decision.granted_by) == ["AllowS3Self", None]


@pytest.mark.parametrize("which", ["identity", "resource"])
def test_one_policy_type_allowing_is_enough_within_one_account(which):
    """Policy evaluation logic: "If one of the policy types allows the request and the other doesn't,
    the request is still allowed" (within the same account)."""
    # Given only the identity-based policy, or only the bucket policy naming Carlos
    carlos = user("carlossalazar")
    mine = Policy.parse(CARLOS_POLICY, source="user", kind="identity")
    bucket = Policy.parse(CARLOS_BUCKET_POLICY, source="bucket", kind="resource")
    policies, attached = ((mine,), None) if which == "identity" else ((), bucket)
    # When he reads an object of his bucket
    decision = ask(carlos, "s3:GetObject", "arn:aws:s3:::carlossalazar/a.txt", policies, attached)
    # Then it is allowed
    assert decision.allowed


EXPLICIT_IMPLICIT = identity(
    {"Sid": "AllowGetList", "Effect": "Allow", "Action": ["iam:Get*", "iam:List*"], "Resource": "*"},
    {"Sid": "DenyReports", "Effect": "Deny", "Action": "iam:*Report", "Resource": "*"},
)


@pytest.mark.parametrize(
    ("action", "allowed", "reason"),
    [
        ("iam:GetUser", True, ""),
        ("iam:ListRoles", True, ""),
        ("iam:CreatePolicy", False, "because no identity-based policy allows the iam:CreatePolicy action"),
        ("iam:GetOrganizationsAccessReport", False, "with an explicit deny in an identity-based policy"),
    ],
)
def test_allowed_implicitly_denied_and_explicitly_denied_actions(action, allowed, reason):
    """Policy evaluation logic: "The difference between explicit and implicit denies" — AllowGetList
    allows Get*/List*, iam:CreatePolicy is implicitly denied, DenyReports explicitly denies *Report."""
    # Given the AllowGetList / DenyReports policy
    # When the user calls the action
    decision = ask(user("ana"), action, "*", (EXPLICIT_IMPLICIT,))
    # Then the decision and its wording are AWS's
    assert (decision.allowed, decision.reason) == (allowed, reason)


def test_another_policy_granting_reports_does_not_override_the_explicit_deny():
    """Policy evaluation logic: "If someone adds another policy to this principal to grant them access to
    IAM reports, such as iam:GenerateCredentialReport, report-related requests are still denied"."""
    # Given the DenyReports policy and another policy allowing iam:GenerateCredentialReport
    grant = identity({"Effect": "Allow", "Action": "iam:GenerateCredentialReport", "Resource": "*"})
    # When the user generates a credential report
    decision = ask(user("ana"), "iam:GenerateCredentialReport", "*", (EXPLICIT_IMPLICIT, grant))
    # Then the explicit deny wins
    assert not decision.allowed
    assert sids(decision.denied_by) == ["DenyReports"]


def test_an_explicit_deny_in_a_resource_policy_overrides_an_identity_allow():
    """Identity-based policies and resource-based policies: Carlos's identity-based policy allows him
    Resource Z, but Resource Z's resource-based policy denies him: "An explicit Deny overrides an Allow"."""
    # Given Carlos allowed everything on Resource Z by his identity policy, and Z's policy denying him
    carlos = user("CarlosSalazar")
    mine = identity(
        {"Effect": "Allow", "Action": "sqs:*", "Resource": "arn:aws:sqs:us-east-1:123456789012:Z"}
    )
    z = on_resource(
        {"Effect": "Deny", "Principal": {"AWS": carlos.arn}, "Action": "sqs:*", "Resource": "*"},
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/ZhangWei"}, "Action": "sqs:*"},
    )
    # When he reads from Z
    decision = ask(carlos, "sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:Z", (mine,), z)
    # Then the resource-based deny decides
    assert not decision.allowed
    assert decision.reason == "with an explicit deny in a resource-based policy"


def test_a_resource_policy_alone_grants_a_user_without_identity_policies():
    """Identity-based policies and resource-based policies: "Zhang has no identity-based policies, but
    the Resource Z resource-based policy allows him full access to the resource"."""
    # Given Zhang, with no identity-based policy, named by Z's resource-based policy
    zhang = user("ZhangWei")
    z = on_resource({"Effect": "Allow", "Principal": {"AWS": zhang.arn}, "Action": "sqs:*"})
    # When he sends to Z, and when Mary (not named) does
    zhang_sends = ask(zhang, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Z", (), z)
    mary_sends = ask(user("MaryMajor"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Z", (), z)
    # Then Zhang is allowed by the resource policy, and Mary is implicitly denied
    assert zhang_sends.allowed
    assert not mary_sends.allowed
    assert mary_sends.reason == "because no identity-based policy allows the sqs:SendMessage action"


@pytest.mark.parametrize("named", ["session", "role"])
def test_a_resource_policy_naming_the_role_or_its_session_grants_directly(named):
    """Policy evaluation logic: resource-based policies that grant an IAM role session ARN (or, with no
    boundary or session policy, the role ARN) allow despite an implicit deny in identity-based policies."""
    # Given a role session with no identity-based policy, and a queue policy naming the session or the role
    caller = role_session("ConsumerRole", "fn-session")
    name = caller.arn if named == "session" else caller.principal_arn
    queue = on_resource({"Effect": "Allow", "Principal": {"AWS": name}, "Action": "sqs:ReceiveMessage"})
    # When it receives from the queue
    decision = ask(caller, "sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:q", (), queue)
    # Then it is allowed
    assert decision.allowed
    assert caller.arn == f"arn:aws:sts::{ACCOUNT}:assumed-role/ConsumerRole/fn-session"


# --- Principal, NotPrincipal ------------------------------------------------------------------------


@pytest.mark.parametrize("account", [ACCOUNT, f"arn:aws:iam::{ACCOUNT}:root"])
def test_an_account_principal_delegates_and_grants_nothing_alone(account):
    """AWS JSON policy elements: Principal — "The account ARN and the shortened account ID behave the same
    way. Both delegate permissions to the account" (an identity in the account must still be granted)."""
    # Given a queue policy allowing the account
    queue = on_resource({"Effect": "Allow", "Principal": {"AWS": account}, "Action": "sqs:*"})
    allow = identity({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"})
    target = "arn:aws:sqs:us-east-1:123456789012:q"
    # When a user without identity policies sends, and one with an allowing policy sends
    alone = ask(user("u"), "sqs:SendMessage", target, (), queue)
    granted = ask(user("u"), "sqs:SendMessage", target, (allow,), queue)
    # Then the account statement alone grants nothing; with the identity allow the user is allowed
    assert not alone.allowed
    assert alone.reason == "because no identity-based policy allows the sqs:SendMessage action"
    assert granted.allowed


def test_a_deny_naming_the_account_applies_to_every_principal_of_the_account():
    """AWS JSON policy elements: Principal — an account principal stands for the account's identities,
    so a Deny naming it denies them all (and never the root of another account)."""
    # Given a queue policy denying the account, and a role allowed by its identity policy
    queue = on_resource({"Effect": "Deny", "Principal": {"AWS": ACCOUNT}, "Action": "sqs:DeleteQueue"})
    allow = identity({"Effect": "Allow", "Action": "sqs:*", "Resource": "*"})
    target = "arn:aws:sqs:us-east-1:123456789012:q"
    # When the role deletes the queue
    decision = ask(role_session("Admin"), "sqs:DeleteQueue", target, (allow,), queue)
    # Then the resource-based deny applies
    assert decision.reason == "with an explicit deny in a resource-based policy"
    assert ask(role_session("Admin"), "sqs:SendMessage", target, (allow,), queue).allowed


@pytest.mark.parametrize("principal", ["*", {"AWS": "*"}])
def test_everyone_includes_users_roles_and_services(principal):
    """AWS JSON policy elements: Principal — "All principals": "*" and {"AWS": "*"} name everyone."""
    # Given a topic policy allowing everyone to publish
    topic = on_resource({"Effect": "Allow", "Principal": principal, "Action": "sns:Publish", "Resource": "*"})
    target = "arn:aws:sns:us-east-1:123456789012:t"
    # When a user, a role session and a service publish, Then each is allowed
    for who in (user("u"), role_session("R"), Principal.aws_service("events.amazonaws.com")):
        assert ask(who, "sns:Publish", target, (), topic).allowed


@pytest.mark.parametrize("services", ["sns.amazonaws.com", ["events.amazonaws.com", "sns.amazonaws.com"]])
def test_a_service_principal_matches_only_that_service(services):
    """AWS JSON policy elements: Principal — "AWS services": {"Service": name} (one or a list) names the
    service, with aws:SourceArn telling which resource it acts for (Condition operators, ArnEquals)."""
    # Given a queue policy allowing SNS to send on behalf of one topic
    topic = "arn:aws:sns:us-east-1:123456789012:orders"
    queue = on_resource(
        {
            "Effect": "Allow",
            "Principal": {"Service": services},
            "Action": "sqs:SendMessage",
            "Resource": "arn:aws:sqs:us-east-1:123456789012:q",
            "Condition": {"ArnEquals": {"aws:SourceArn": topic}},
        }
    )
    target = "arn:aws:sqs:us-east-1:123456789012:q"
    sns = Principal.aws_service("sns.amazonaws.com")
    # When SNS delivers for that topic, for another topic, and when another service or a user sends
    for_topic = ask(sns, "sqs:SendMessage", target, (), queue, {"aws:SourceArn": topic})
    for_other = ask(sns, "sqs:SendMessage", target, (), queue, {"aws:SourceArn": topic + "2"})
    lambda_ = ask(Principal.aws_service("lambda.amazonaws.com"), "sqs:SendMessage", target, (), queue)
    someone = ask(user("u"), "sqs:SendMessage", target, (), queue, {"aws:SourceArn": topic})
    # Then only SNS for that topic is allowed, and a service is told no resource-based policy allows it
    assert for_topic.allowed
    assert not for_other.allowed
    assert for_other.reason == "because no resource-based policy allows the sqs:SendMessage action"
    assert not lambda_.allowed
    assert not someone.allowed


def test_a_service_principal_has_no_identity_based_policies():
    """Policy evaluation logic: identity-based policies are attached to IAM identities; a service
    principal has none, so only the resource-based policy can allow it."""
    # Given an identity policy allowing everything (passed by mistake for a service)
    everything = identity({"Effect": "Allow", "Action": "*", "Resource": "*"})
    # When SNS sends to a queue without a policy
    decision = ask(
        Principal.aws_service("sns.amazonaws.com"), "sqs:SendMessage", "arn:aws:sqs:::q", (everything,)
    )
    # Then it is denied
    assert not decision.allowed


BOB = f"arn:aws:iam::{ACCOUNT}:user/Bob"


def test_not_principal_with_deny_spares_the_listed_user_and_account():
    """AWS JSON policy elements: NotPrincipal — "all principals except the user named Bob ... are
    explicitly denied"; the example lists Bob's ARN and his account's; "this example by itself does not
    grant access to Bob"."""
    # Given a bucket policy denying everyone but Bob (and his account)
    bucket = on_resource(
        {
            "Effect": "Deny",
            "NotPrincipal": {"AWS": [BOB, f"arn:aws:iam::{ACCOUNT}:root"]},
            "Action": "s3:*",
            "Resource": ["arn:aws:s3:::BUCKETNAME", "arn:aws:s3:::BUCKETNAME/*"],
        }
    )
    everything = identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*"})
    # When Bob and Alice (both allowed by identity policies) read, and Bob without identity policies
    bob = ask(Principal.user(BOB), "s3:GetObject", "arn:aws:s3:::BUCKETNAME/k", (everything,), bucket)
    alice = ask(user("Alice"), "s3:GetObject", "arn:aws:s3:::BUCKETNAME/k", (everything,), bucket)
    bob_alone = ask(Principal.user(BOB), "s3:GetObject", "arn:aws:s3:::BUCKETNAME/k", (), bucket)
    # Then Bob is allowed, Alice explicitly denied, and the Deny grants Bob nothing
    assert bob.allowed
    assert alice.reason == "with an explicit deny in a resource-based policy"
    assert not bob_alone.allowed
    assert bob_alone.denied_by == ()


def test_not_principal_without_the_account_may_deny_the_listed_user_too():
    """AWS JSON policy elements: NotPrincipal — "If the NotPrincipal element contained only Bob's ARN, the
    effect of the policy might be to explicitly deny access to the AWS account that contains the user
    Bob": the runtime takes the stricter reading."""
    # Given a Deny sparing only Bob's user ARN
    bucket = on_resource({"Effect": "Deny", "NotPrincipal": {"AWS": BOB}, "Action": "s3:*", "Resource": "*"})
    # When Bob reads
    decision = ask(Principal.user(BOB), "s3:GetObject", "arn:aws:s3:::b/k", (), bucket)
    # Then the deny applies to him through his account
    assert decision.reason == "with an explicit deny in a resource-based policy"


@pytest.mark.parametrize(("with_role", "denied"), [(True, False), (False, True)])
def test_not_principal_for_a_role_session_lists_session_role_and_account(with_role, denied):
    """AWS JSON policy elements: NotPrincipal — the assumed-role example lists the session, the role and
    the account; "If the NotPrincipal element was missing the ARN of the role, the effect of the policy
    might be to explicitly deny access to the role"."""
    # Given a Deny sparing the session and the account, with or without the role's ARN
    caller = role_session("cross-account-read-only-role", "cross-account-audit-app")
    names = [caller.arn, f"arn:aws:iam::{ACCOUNT}:root"] + ([caller.principal_arn] if with_role else [])
    bucket = on_resource(
        {"Effect": "Deny", "NotPrincipal": {"AWS": names}, "Action": "s3:*", "Resource": "*"}
    )
    # When the session reads
    decision = ask(caller, "s3:GetObject", "arn:aws:s3:::Bucket_AccountAudit/k", (), bucket)
    # Then it is spared only when every level is listed
    assert bool(decision.denied_by) is denied


def test_not_principal_with_allow_grants_everyone_else():
    """AWS JSON policy elements: NotPrincipal — "NotPrincipal With Allow ... allows all principals except
    the one named in the NotPrincipal element"."""
    # Given an Allow to everyone but Bob
    bucket = on_resource({"Effect": "Allow", "NotPrincipal": {"AWS": BOB}, "Action": "s3:GetObject"})
    # When Alice and Bob read
    alice = ask(user("Alice"), "s3:GetObject", "arn:aws:s3:::b/k", (), bucket)
    bob = ask(Principal.user(BOB), "s3:GetObject", "arn:aws:s3:::b/k", (), bucket)
    # Then Alice is allowed and Bob is not
    assert alice.allowed
    assert not bob.allowed


# --- NotAction, NotResource, Action and Resource matching -------------------------------------------


@pytest.mark.parametrize(
    ("action", "resource", "allowed"),
    [
        ("s3:GetObject", "arn:aws:s3:::bucket/key", True),
        ("s3:PutBucketPolicy", "arn:aws:s3:::bucket", True),
        ("s3:DeleteBucket", "arn:aws:s3:::bucket", False),
        ("s3:ListAllMyBuckets", "*", False),  # "that action requires the "*" resource"
        ("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q", False),
    ],
)
def test_not_action_with_allow_scoped_by_resource(action, resource, allowed):
    """IAM JSON policy elements: NotAction — "NotAction": "s3:DeleteBucket" with "Resource":
    "arn:aws:s3:::*" allows all S3 actions on S3 resources except deleting a bucket, not ListAllMyBuckets,
    and no other service's actions."""
    # Given the NotAction Allow
    policy = identity({"Effect": "Allow", "NotAction": "s3:DeleteBucket", "Resource": "arn:aws:s3:::*"})
    # When the user calls the action, Then it is allowed or not as documented
    assert ask(user("u"), action, resource, (policy,)).allowed is allowed


def test_not_action_allows_every_service_but_iam():
    """IAM JSON policy elements: NotAction — "allows users to access every action in every AWS service
    except for IAM"."""
    # Given NotAction iam:* on every resource
    policy = identity({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})
    # When the user sends a message and creates a user, Then only the first is allowed
    assert ask(user("u"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q", (policy,)).allowed
    assert not ask(user("u"), "iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/x", (policy,)).allowed


@pytest.mark.parametrize(
    ("action", "mfa", "denied"),
    [
        ("sqs:SendMessage", None, True),
        ("sqs:SendMessage", "false", True),
        ("sqs:SendMessage", "true", False),
        ("iam:ChangePassword", None, False),
    ],
)
def test_not_action_with_deny_unless_signed_in_with_mfa(action, mfa, denied):
    """IAM JSON policy elements: NotAction — DenyAllUsersNotUsingMFA: Deny NotAction iam:* with
    BoolIfExists aws:MultiFactorAuthPresent "false" denies non-IAM actions without MFA."""
    # Given the MFA deny and an allow of everything
    deny = identity(
        {
            "Sid": "DenyAllUsersNotUsingMFA",
            "Effect": "Deny",
            "NotAction": "iam:*",
            "Resource": "*",
            "Condition": {"BoolIfExists": {"aws:MultiFactorAuthPresent": "false"}},
        }
    )
    everything = identity({"Effect": "Allow", "Action": "*", "Resource": "*"})
    context = {} if mfa is None else {"aws:MultiFactorAuthPresent": mfa}
    # When the user calls the action with or without MFA
    decision = ask(user("u"), action, "*", (deny, everything), None, context)
    # Then the deny applies to non-IAM actions unless MFA is present
    assert bool(decision.denied_by) is denied
    assert decision.allowed is not denied


@pytest.mark.parametrize(
    ("resource", "allowed"),
    [
        ("arn:aws:s3:::HRBucket/Payroll", True),
        ("arn:aws:s3:::HRBucket/Payroll/2024/june.csv", True),
        ("arn:aws:s3:::HRBucket/Benefits/plan.pdf", False),
        ("arn:aws:s3:::OtherBucket", False),
    ],
)
def test_not_resource_with_deny_keeps_the_payroll_folder_only(resource, allowed):
    """IAM JSON policy elements: NotResource — HRPayroll members may access no S3 resource except the
    Payroll folder in HRBucket (the Deny grants nothing: an Allow is added)."""
    # Given the NotResource Deny and an Allow of s3:*
    policy = identity(
        {
            "Effect": "Deny",
            "Action": "s3:*",
            "NotResource": ["arn:aws:s3:::HRBucket/Payroll", "arn:aws:s3:::HRBucket/Payroll/*"],
        },
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
    )
    # When a member reads the resource, Then only the Payroll folder is allowed
    assert ask(user("hr"), "s3:GetObject", resource, (policy,)).allowed is allowed


def test_action_matching_ignores_case_and_resource_matching_does_not():
    """IAM JSON policy elements: Action ("Action": "SQS:SendMessage" in the Condition operators page's
    queue policy) is case-insensitive; Resource ARNs are case-sensitive."""
    # Given a policy written with a capitalised service prefix
    policy = identity({"Effect": "Allow", "Action": "SQS:sendmessage", "Resource": "arn:aws:sqs:*:*:Orders"})
    # When the action is asked in another case, and the resource in another case
    same = ask(user("u"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Orders", (policy,))
    other_case = ask(user("u"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:orders", (policy,))
    # Then the action matches and the resource does not
    assert same.allowed
    assert not other_case.allowed


@pytest.mark.parametrize(
    ("pattern", "resource", "matches"),
    [
        ("arn:aws:s3:::*log*", "arn:aws:s3:::carlossalazar-logs/2024/01/x.txt", True),  # * spans / and :
        ("arn:aws:sqs:*", "arn:aws:sqs:us-east-1:123456789012:q", True),
        ("arn:aws:sqs:us-east-?:*:q", "arn:aws:sqs:us-east-1:123456789012:q", True),
        ("arn:aws:sqs:us-east-?:*:q", "arn:aws:sqs:us-west-1:123456789012:q", False),
        ("arn:aws:sqs:*:*:q", "arn:aws:sqs:us-east-1:123456789012:q-dlq", False),
        ("*", "*", True),
        ("arn:aws:sqs:*", "*", False),
    ],
)
def test_resource_wildcards(pattern, resource, matches):
    """IAM JSON policy elements: Resource — "*" matches any run of characters (across "/" and ":"), "?"
    one character; an action without a resource is asked with "*" and needs "Resource": "*"."""
    # Given a policy on the pattern, When the resource is asked, Then it matches as documented
    policy = identity({"Effect": "Allow", "Action": "sqs:*", "Resource": pattern})
    assert ask(user("u"), "sqs:SendMessage", resource, (policy,)).allowed is matches


# --- Condition operators ----------------------------------------------------------------------------


def condition(block: dict[str, Any], action: str = "iam:*AccessKey*") -> Policy:
    return identity({"Effect": "Allow", "Action": action, "Resource": "*", "Condition": block})


def holds(block: dict[str, Any], context: dict[str, Any], who: Principal | None = None) -> bool:
    """Whether an Allow statement with this Condition block allows a request with this context."""
    return ask(who or user("u"), "iam:CreateAccessKey", "*", (condition(block),), None, context).allowed


def test_string_equals_on_a_principal_tag():
    """IAM JSON policy elements: Condition operators — StringEquals aws:PrincipalTag/job-category
    "iamuser-admin": "If a user without the tag attempts to view or edit an access key, the condition
    returns false and the request is implicitly denied"."""
    block = {"StringEquals": {"aws:PrincipalTag/job-category": "iamuser-admin"}}
    assert holds(block, {"aws:PrincipalTag/job-category": "iamuser-admin"})
    assert not holds(block, {"aws:PrincipalTag/job-category": "IAMuser-admin"})
    assert not holds(block, {})


def test_condition_key_names_are_case_insensitive_and_values_follow_the_operator():
    """IAM JSON policy elements: Condition — "Condition key names are not case-sensitive"; StringEquals
    aws:username "johndoe" does not match JohnDoe, StringEqualsIgnoreCase does."""
    assert holds({"StringEquals": {"AWS:USERNAME": "johndoe"}}, {}, user("johndoe"))
    assert not holds({"StringEquals": {"aws:username": "johndoe"}}, {}, user("JohnDoe"))
    assert holds({"StringEqualsIgnoreCase": {"aws:username": "johndoe"}}, {}, user("JohnDoe"))
    assert not holds({"StringNotEqualsIgnoreCase": {"aws:username": "johndoe"}}, {}, user("JohnDoe"))
    assert holds(
        {"DateGreaterThan": {"aws:CurrentTime": "2013-12-15T12:00:00Z"}},
        {"AWS:currenttime": "2014-01-01T00:00:00Z"},
    )


HOME = identity(
    {
        "Effect": "Allow",
        "Action": ["s3:ListAllMyBuckets", "s3:GetBucketLocation"],
        "Resource": "arn:aws:s3:::*",
    },
    {
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": "arn:aws:s3:::BUCKET-NAME",
        "Condition": {"StringLike": {"s3:prefix": ["", "home/", "home/${aws:username}/"]}},
    },
    {
        "Effect": "Allow",
        "Action": "s3:*",
        "Resource": [
            "arn:aws:s3:::BUCKET-NAME/home/${aws:username}",
            "arn:aws:s3:::BUCKET-NAME/home/${aws:username}/*",
        ],
    },
)


@pytest.mark.parametrize(
    ("action", "resource", "prefix", "allowed"),
    [
        ("s3:ListBucket", "arn:aws:s3:::BUCKET-NAME", "", True),
        ("s3:ListBucket", "arn:aws:s3:::BUCKET-NAME", "home/", True),
        ("s3:ListBucket", "arn:aws:s3:::BUCKET-NAME", "home/David/", True),
        ("s3:ListBucket", "arn:aws:s3:::BUCKET-NAME", "home/Adele/", False),
        ("s3:PutObject", "arn:aws:s3:::BUCKET-NAME/home/David/notes.txt", None, True),
        ("s3:PutObject", "arn:aws:s3:::BUCKET-NAME/home/Adele/notes.txt", None, False),
    ],
)
def test_string_like_with_a_policy_variable_gives_each_user_a_home_directory(
    action, resource, prefix, allowed
):
    """IAM JSON policy elements: Condition operators — StringLike s3:prefix ["", "home/",
    "home/${aws:username}/"] and Resource home/${aws:username}/*: each user manages their own folder."""
    # Given the home-directory policy, When David lists or writes, Then only his folder is his
    context = {} if prefix is None else {"s3:prefix": prefix}
    assert ask(user("David"), action, resource, (HOME,), None, context).allowed is allowed


@pytest.mark.parametrize(("max_keys", "allowed"), [("10", True), ("3", True), ("11", False), (None, False)])
def test_numeric_less_than_equals(max_keys, allowed):
    """IAM JSON policy elements: Condition operators — NumericLessThanEquals s3:max-keys "10": list up to
    10 objects at a time; without the key the values do not match."""
    policy = condition({"NumericLessThanEquals": {"s3:max-keys": "10"}}, action="s3:ListBucket")
    context = {} if max_keys is None else {"s3:max-keys": max_keys}
    assert ask(user("u"), "s3:ListBucket", "*", (policy,), None, context).allowed is allowed


@pytest.mark.parametrize(
    ("issued", "allowed"),
    [("2020-06-01T08:00:00Z", True), ("2019-12-31T23:59:59Z", False), ("1591000000", True), (None, False)],
)
def test_date_greater_than_on_token_issue_time(issued, allowed):
    """IAM JSON policy elements: Condition operators — DateGreaterThan aws:TokenIssueTime
    "2020-01-01T00:00:01Z"; dates in ISO 8601 or epoch time; "if an IAM user attempts to view or edit an
    access key, the request is denied" (no temporary credentials, no key)."""
    block = {"DateGreaterThan": {"aws:TokenIssueTime": "2020-01-01T00:00:01Z"}}
    assert holds(block, {} if issued is None else {"aws:TokenIssueTime": issued}) is allowed


def test_dates_in_the_w3c_formats_and_epoch():
    """IAM JSON policy elements: Condition operators — "W3C implementations of the ISO 8601 date formats
    or in epoch (UNIX) time"."""
    assert parse_date("2020-01-01T00:00:01Z") == 1577836801.0
    assert parse_date("2020-01-01T01:00:01+01:00") == 1577836801.0
    assert parse_date("2020-01-01") == parse_date("2020-01") == 1577836800.0
    assert parse_date("2020-01-01T00:00:01.5Z") == 1577836801.5
    assert parse_date("1577836801") == 1577836801.0
    assert parse_date("2020-13-01") is None
    assert parse_date("yesterday") is None


@pytest.mark.parametrize(("secure", "denied"), [("false", True), ("true", False), ("False", True)])
def test_bool_denies_requests_not_over_ssl(secure, denied):
    """IAM JSON policy elements: Condition operators — BooleanExample: Deny s3:* when Bool
    aws:SecureTransport "false" (the policy allows nothing by itself)."""
    deny = identity(
        {
            "Sid": "BooleanExample",
            "Action": "s3:*",
            "Effect": "Deny",
            "Resource": ["arn:aws:s3:::DOC-EXAMPLE-BUCKET", "arn:aws:s3:::DOC-EXAMPLE-BUCKET/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    )
    context = {"aws:SecureTransport": secure}
    decision = ask(user("u"), "s3:GetObject", "arn:aws:s3:::DOC-EXAMPLE-BUCKET/k", (deny,), None, context)
    assert bool(decision.denied_by) is denied
    assert not decision.allowed


def test_bool_accepts_a_json_boolean():
    """IAM JSON policy elements: Condition operators — Bool compares a key to "true" or "false"."""
    assert holds({"Bool": {"aws:SecureTransport": True}}, {"aws:SecureTransport": "true"})
    assert not holds({"Bool": {"aws:SecureTransport": True}}, {"aws:SecureTransport": "false"})


def test_binary_equals_compares_base64_values():
    """IAM JSON policy elements: Condition operators — BinaryEquals compares byte for byte against the
    base-64 encoded value in the policy."""
    block = {"BinaryEquals": {"key": "QmluYXJ5VmFsdWVJbkJhc2U2NA=="}}
    assert holds(block, {"key": "QmluYXJ5VmFsdWVJbkJhc2U2NA=="})
    assert not holds(block, {"key": "QmluYXJ5"})
    assert not holds(block, {})


@pytest.mark.parametrize(
    ("source_ip", "allowed"),
    [
        ("203.0.113.7", True),
        ("203.0.113.255", True),
        ("203.0.114.1", False),
        ("2001:db8:1234:5678::1", True),
        ("2001:db8:1234:5679::1", False),
        ("not-an-ip", False),
        (None, False),
    ],
)
def test_ip_address_with_ipv4_and_ipv6_ranges(source_ip, allowed):
    """IAM JSON policy elements: Condition operators — IpAddress aws:SourceIp ["203.0.113.0/24",
    "2001:DB8:1234:5678::/64"] covers the organization's IPv4 and IPv6 addresses."""
    block = {"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:DB8:1234:5678::/64"]}}
    assert holds(block, {} if source_ip is None else {"aws:SourceIp": source_ip}) is allowed


def test_an_address_without_a_prefix_is_a_32_bit_range_and_not_ip_address_negates():
    """IAM JSON policy elements: Condition operators — "If you specify an IP address without the
    associated routing prefix, IAM uses the default prefix value of /32"; NotIpAddress: all others."""
    assert holds({"IpAddress": {"aws:SourceIp": "203.0.113.9"}}, {"aws:SourceIp": "203.0.113.9"})
    assert not holds({"IpAddress": {"aws:SourceIp": "203.0.113.9"}}, {"aws:SourceIp": "203.0.113.10"})
    assert holds({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "198.51.100.1"})
    assert not holds({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "203.0.113.1"})


def test_arn_like_matches_each_colon_delimited_part_where_string_like_spans_them():
    """IAM JSON policy elements: Condition operators — pattern arn:aws:someservice:*:111122223333:finance/*
    against arn:aws:someservice:us-east-2:999999999999:store/abc:111122223333:finance/document.txt:
    StringLike matches, ArnLike fails (its first asterisk matches only us-east-2)."""
    pattern = "arn:aws:someservice:*:111122223333:finance/*"
    value = "arn:aws:someservice:us-east-2:999999999999:store/abc:111122223333:finance/document.txt"
    assert holds({"StringLike": {"aws:SourceArn": pattern}}, {"aws:SourceArn": value})
    assert not holds({"ArnLike": {"aws:SourceArn": pattern}}, {"aws:SourceArn": value})
    assert not holds({"ArnEquals": {"aws:SourceArn": pattern}}, {"aws:SourceArn": value})
    assert holds({"ArnNotLike": {"aws:SourceArn": pattern}}, {"aws:SourceArn": value})


@pytest.mark.parametrize(
    ("value", "matches"),
    [
        ("arn:aws:lambda:us-east-1:123456789012:function:worker", True),
        (
            "arn:aws:lambda:us-east-1:123456789012:function:worker:live",
            True,
        ),  # the resource part may hold ":"
        ("arn:aws:lambda:us-east-1:123456789012:function:other", False),
        ("arn:aws:lambda:us-east-1:123456789012", False),  # fewer than six parts
        ("arn:aws:lambda:us-east-1:123456789012:function:worker".upper(), False),  # case-sensitive
    ],
)
def test_arn_like_wildcards_within_parts(value, matches):
    """IAM JSON policy elements: Condition operators — ArnEquals/ArnLike: "Case-sensitive matching of the
    ARN. Each of the six colon-delimited components of the ARN is checked separately and each can include
    multi-character match wildcards (*) or single-character match wildcards (?)"."""
    block = {"ArnLike": {"aws:SourceArn": "arn:aws:lambda:us-east-?:*:function:worker*"}}
    assert holds(block, {"aws:SourceArn": value}) is matches


def test_the_account_principal_queue_policy_is_false_for_a_user_acting_directly():
    """IAM JSON policy elements: Condition operators — the queue policy allowing SNS:SendMessage with
    ArnEquals aws:SourceArn: "If an IAM user attempts to perform this operation directly, the condition
    returns false and the request is implicitly denied by this statement"."""
    queue = on_resource(
        {
            "Effect": "Allow",
            "Principal": {"AWS": ACCOUNT},
            "Action": "SQS:SendMessage",
            "Resource": "arn:aws:sqs:us-east-1:123456789012:QUEUE-ID",
            "Condition": {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:123456789012:TOPIC-ID"}},
        }
    )
    decision = ask(user("u"), "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:QUEUE-ID", (), queue)
    assert not decision.allowed
    assert decision.reason == "because no identity-based policy allows the sqs:SendMessage action"


@pytest.mark.parametrize(
    ("instance_type", "if_exists", "allowed"),
    [
        (None, False, False),
        (None, True, True),
        ("t2.micro", True, True),
        ("m5.large", True, False),
        ("t2.micro", False, True),
    ],
)
def test_if_exists_ignores_a_key_the_resource_does_not_have(instance_type, if_exists, allowed):
    """IAM JSON policy elements: Condition operators — THISPOLICYDOESNOTWORK (StringLike ec2:InstanceType)
    fails for the resources without that key; StringLikeIfExists checks the key only where it exists."""
    operator = "StringLikeIfExists" if if_exists else "StringLike"
    policy = identity(
        {
            "Sid": "RunInstance",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": "*",
            "Condition": {operator: {"ec2:InstanceType": ["t1.*", "t2.*", "m3.*"]}},
        }
    )
    context = {} if instance_type is None else {"ec2:InstanceType": instance_type}
    resource = (
        "arn:aws:ec2:us-east-1::image/ami-1"
        if instance_type is None
        else "arn:aws:ec2:us-east-1:1:instance/*"
    )
    assert ask(user("u"), "ec2:RunInstances", resource, (policy,), None, context).allowed is allowed


def test_a_deny_with_a_negated_if_exists_operator_still_denies_when_the_key_is_missing():
    """IAM JSON policy elements: Condition operators — "If you are using an "Effect": "Deny" element with a
    negated condition operator like StringNotEqualsIfExists, the request is still denied even if the tag
    is missing"."""
    deny = identity(
        {
            "Effect": "Deny",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"StringNotEqualsIfExists": {"aws:ResourceTag/team": "payments"}},
        }
    )
    target = "arn:aws:sqs:us-east-1:123456789012:q"
    assert ask(user("u"), "sqs:SendMessage", target, (deny,)).denied_by
    assert ask(user("u"), "sqs:SendMessage", target, (deny,), None, {"aws:ResourceTag/team": "ops"}).denied_by
    assert not ask(
        user("u"), "sqs:SendMessage", target, (deny,), None, {"aws:ResourceTag/team": "payments"}
    ).denied_by


def test_a_negated_operator_holds_when_the_key_is_absent():
    """IAM JSON policy elements: Condition operators — "If the policy condition requires that the key is
    not matched, such as StringNotLike or ArnNotLike, and the right key is not present, the condition is
    true"."""
    assert holds({"StringNotLike": {"aws:SourceArn": "arn:aws:sns:*"}}, {})
    assert holds({"ArnNotLike": {"aws:SourceArn": "arn:aws:sns:*:*:*"}}, {})
    assert not holds({"StringLike": {"aws:SourceArn": "*"}}, {})


@pytest.mark.parametrize(("who", "allowed"), [(user("u"), True), (role_session("R"), False)])
def test_null_checks_that_temporary_credentials_are_not_used(who, allowed):
    """IAM JSON policy elements: Condition operators — Null aws:TokenIssueTime "true": "the user must not
    be using temporary credentials (the key must not exist)"."""
    policy = identity(
        {
            "Action": "ec2:*",
            "Effect": "Allow",
            "Resource": "*",
            "Condition": {"Null": {"aws:TokenIssueTime": "true"}},
        }
    )
    context = {} if who.arn.endswith("/u") else {"aws:TokenIssueTime": "2024-05-01T00:00:00Z"}
    assert ask(who, "ec2:DescribeInstances", "*", (policy,), None, context).allowed is allowed
    # And Null "false" asks for the key's presence
    assert holds({"Null": {"aws:TokenIssueTime": "false"}}, context) is not allowed


# --- Conditions with multiple context keys or values --------------------------------------------------


def test_operators_and_keys_are_anded_and_values_ored():
    """Conditions with multiple context keys or values — "multiple condition operators ... logical AND",
    "multiple context keys attached to a single condition operator ... AND", "multiple values for a
    context key ... OR"."""
    block = {
        "StringEquals": {
            "aws:PrincipalTag/department": ["finance", "hr", "legal"],
            "aws:PrincipalTag/role": ["audit", "security"],
        },
        "ArnLike": {"aws:PrincipalArn": [f"arn:aws:iam::{ACCOUNT}:user/*", f"arn:aws:iam::{ACCOUNT}:role/*"]},
    }
    tags = {"aws:PrincipalTag/department": "hr", "aws:PrincipalTag/role": "audit"}
    assert holds(block, tags)
    assert not holds(block, {**tags, "aws:PrincipalTag/role": "dev"})
    assert not holds(block, {"aws:PrincipalTag/department": "hr"})
    assert not holds(block, tags, Principal.aws_service("sns.amazonaws.com"))


@pytest.mark.parametrize(("role", "result"), [("audit", False), ("security", False), ("dev", True)])
def test_a_negated_operator_with_several_values_is_a_nor(role, result):
    """Conditions with multiple context keys or values — "If a single negated matching condition operator
    includes multiple values for a context key, those values are evaluated using a logical NOR"."""
    block = {"StringNotEquals": {"aws:PrincipalTag/role": ["audit", "security"]}}
    assert holds(block, {"aws:PrincipalTag/role": role}) is result


THREAD = "arn:aws:dynamodb:us-east-1:123456789012:table/Thread"


@pytest.mark.parametrize(
    ("attributes", "allowed"),
    [(["PostDateTime", "Message"], True), (["PostDateTime", "UserName"], False), (["ID"], False), ([], True)],
)
def test_for_all_values_allows_only_listed_attributes(attributes, allowed):
    """Creating a condition that tests multiple key values (set operations) — ForAllValues:StringLike
    dynamodb:requestedAttributes [PostDateTime, Message, Tags]; "If the key values in the request resolve
    to an empty data set ... ForAllValues returns true"."""
    policy = identity(
        {
            "Effect": "Allow",
            "Action": "dynamodb:GetItem",
            "Resource": THREAD,
            "Condition": {
                "ForAllValues:StringLike": {
                    "dynamodb:requestedAttributes": ["PostDateTime", "Message", "Tags"]
                }
            },
        }
    )
    context = {"dynamodb:requestedAttributes": attributes}
    assert ask(user("u"), "dynamodb:GetItem", THREAD, (policy,), None, context).allowed is allowed


@pytest.mark.parametrize(
    ("attributes", "denied"),
    [
        (["PostDateTime", "Message"], True),
        (["UserName", "Message", "PostDateTime"], True),
        (["UserName"], False),
        ([], False),
        (None, False),
    ],
)
def test_for_any_value_denies_updates_to_listed_attributes(attributes, denied):
    """Creating a condition that tests multiple key values (set operations) — Deny PutItem with
    ForAnyValue:StringLike [ID, PostDateTime]; an empty data set makes ForAnyValue false."""
    policy = identity(
        {
            "Effect": "Deny",
            "Action": "dynamodb:PutItem",
            "Resource": THREAD,
            "Condition": {"ForAnyValue:StringLike": {"dynamodb:requestedAttributes": ["ID", "PostDateTime"]}},
        }
    )
    context = {} if attributes is None else {"dynamodb:requestedAttributes": attributes}
    decision = ask(user("u"), "dynamodb:PutItem", THREAD, (policy,), None, context)
    assert bool(decision.denied_by) is denied
    assert not decision.allowed  # not denied by this policy, but nothing allows it


def test_set_operators_with_a_missing_key_or_an_empty_string():
    """Single-valued vs. multivalued context keys — ForAllValues "also returns true if there are no context
    keys in the request"; an empty string is an empty data set (Creating a condition that tests multiple
    key values)."""
    every = {"ForAllValues:StringEquals": {"aws:TagKeys": ["env", "team"]}}
    some = {"ForAnyValue:StringEquals": {"aws:TagKeys": ["env", "team"]}}
    assert holds(every, {})
    assert holds(every, {"aws:TagKeys": ""})
    assert not holds(some, {})
    assert not holds(some, {"aws:TagKeys": ""})
    assert holds(some, {"aws:TagKeys": ["owner", "team"]})
    assert not holds(every, {"aws:TagKeys": ["owner", "team"]})


def test_set_operators_with_a_negated_operator():
    """Single-valued vs. multivalued context keys — ForAllValues:StringNotEquals holds when no request
    value is among the policy's; ForAnyValue:StringNotEquals when at least one is not."""
    none_of = {"ForAllValues:StringNotEquals": {"aws:TagKeys": ["secret", "owner"]}}
    one_not = {"ForAnyValue:StringNotEquals": {"aws:TagKeys": ["env", "team"]}}
    assert holds(none_of, {"aws:TagKeys": ["env", "team"]})
    assert not holds(none_of, {"aws:TagKeys": ["env", "owner"]})
    assert holds(one_not, {"aws:TagKeys": ["env", "owner"]})
    assert not holds(one_not, {"aws:TagKeys": ["env", "team"]})


# --- Policy variables -------------------------------------------------------------------------------


def test_a_variable_in_the_resource_gives_each_user_their_own_queue():
    """IAM policy elements: Variables and tags — sqs:* on arn:aws:sqs:us-east-2:*:${aws:username}-queue
    lets each user of the group use the queue that has their name."""
    policy = identity(
        {"Sid": "ListForConsole", "Effect": "Allow", "Action": "sqs:ListQueues", "Resource": "*"},
        {
            "Sid": "AllQueueActions",
            "Effect": "Allow",
            "Action": "sqs:*",
            "Resource": "arn:aws:sqs:us-east-2:*:${aws:username}-queue",
        },
    )
    mine = ask(user("Adele"), "sqs:SendMessage", f"arn:aws:sqs:us-east-2:{ACCOUNT}:Adele-queue", (policy,))
    theirs = ask(user("Adele"), "sqs:SendMessage", f"arn:aws:sqs:us-east-2:{ACCOUNT}:David-queue", (policy,))
    region = ask(user("Adele"), "sqs:SendMessage", f"arn:aws:sqs:us-east-1:{ACCOUNT}:Adele-queue", (policy,))
    assert mine.allowed
    assert not theirs.allowed
    assert not region.allowed
    assert sids(mine.granted_by) == ["AllQueueActions"]
    # And a role session has no aws:username: the statement matches nothing for it
    assert not ask(
        role_session("Adele"), "sqs:SendMessage", f"arn:aws:sqs:us-east-2:{ACCOUNT}:Adele-queue", (policy,)
    ).allowed


def test_a_principal_tag_as_a_variable():
    """IAM policy elements: Variables and tags — "Resource":
    ["arn:aws:s3:::bucket/${aws:PrincipalTag/department}"] refers to the bucket named as the requesting
    user's department tag."""
    policy = identity(
        {
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::bucket/${aws:PrincipalTag/department}",
        }
    )
    tagged = {"aws:principaltag/department": "finance"}
    assert ask(user("u"), "s3:GetObject", "arn:aws:s3:::bucket/finance", (policy,), None, tagged).allowed
    assert not ask(user("u"), "s3:GetObject", "arn:aws:s3:::bucket/hr", (policy,), None, tagged).allowed
    assert not ask(user("u"), "s3:GetObject", "arn:aws:s3:::bucket/finance", (policy,)).allowed


def test_a_variable_in_a_condition_value():
    """IAM policy elements: Variables and tags — StringLike sns:endpoint "https://example.com/${aws:username}/"
    with StringEquals sns:Protocol "https" (here in an identity-based policy)."""
    block = {
        "StringLike": {"sns:endpoint": "https://example.com/${aws:username}/"},
        "StringEquals": {"sns:Protocol": "https"},
    }
    context = {"sns:Endpoint": "https://example.com/David/", "sns:Protocol": "https"}
    assert holds(block, context, user("David"))
    assert not holds(block, context, user("Adele"))
    assert not holds(block, {**context, "sns:Protocol": "http"}, user("David"))


@pytest.mark.parametrize(
    ("operator", "value", "request_value", "matches"),
    [
        ("StringEquals", "a${*}b", "a*b", True),
        ("StringLike", "a${*}b", "axxb", False),
        ("StringLike", "a${*}b", "a*b", True),
        ("StringLike", "a*b", "axxb", True),
        ("StringLike", "what${?}", "what?", True),
        ("StringLike", "what${?}", "whatx", False),
        ("StringEquals", "cost${$}", "cost$", True),
    ],
)
def test_special_characters_as_predefined_variables(operator, value, request_value, matches):
    """IAM policy elements: Variables and tags — "${*} - use where you need an * (asterisk) character",
    ${?} for a question mark, ${$} for a dollar sign."""
    assert (
        holds({operator: {"aws:RequestTag/name": value}}, {"aws:RequestTag/name": request_value}) is matches
    )


def test_a_default_value_for_a_variable_the_request_does_not_have():
    """IAM policy elements: Variables and tags — "Specifying default values": ${aws:userid, 'anonymous'}
    stands for "anonymous" when the request has no aws:userid."""
    block = {"StringEquals": {"aws:Resource": "arn:aws:s3:::/bucket/${aws:userid, 'anonymous'}"}}
    assert holds(block, {"aws:Resource": "arn:aws:s3:::/bucket/anonymous"})
    assert holds(block, {"aws:Resource": "arn:aws:s3:::/bucket/AIDA1", "aws:userid": "AIDA1"})
    assert not holds(block, {"aws:Resource": "arn:aws:s3:::/bucket/anonymous", "aws:userid": "AIDA1"})


def test_variables_need_version_2012_10_17():
    """IAM policy elements: Variables and tags — "If you don't include the Version element and set it to
    an appropriate version date, variables like ${aws:username} are treated as literal strings"."""
    for version in (None, "2008-10-17"):
        policy = identity(
            {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::b/${aws:username}/*"},
            version=version,
        )
        assert not ask(user("David"), "s3:GetObject", "arn:aws:s3:::b/David/x", (policy,)).allowed
        assert ask(user("David"), "s3:GetObject", "arn:aws:s3:::b/${aws:username}/x", (policy,)).allowed


def test_an_unresolved_variable_matches_nothing():
    """IAM policy elements: Variables and tags — "If AWS cannot resolve a variable, this might cause the
    entire statement to be invalid": the runtime lets that value match nothing."""
    policy = identity(
        {
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::b/${aws:PrincipalTag/team}/*",
        },
    )
    assert not ask(user("u"), "s3:GetObject", "arn:aws:s3:::b//x", (policy,)).allowed
    assert not ask(user("u"), "s3:GetObject", "arn:aws:s3:::b/${aws:PrincipalTag/team}/x", (policy,)).allowed


def test_the_principal_brings_its_own_global_keys():
    """AWS global condition context keys — aws:PrincipalArn (the role's ARN for a role session),
    aws:PrincipalAccount, aws:PrincipalType, aws:PrincipalServiceName: the evaluator adds them."""
    session = role_session("Worker", "s1")
    assert holds({"ArnEquals": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/Worker"}}, {}, session)
    assert holds(
        {"StringEquals": {"aws:PrincipalAccount": ACCOUNT, "aws:PrincipalType": "AssumedRole"}}, {}, session
    )
    assert holds({"StringEquals": {"aws:PrincipalType": "User", "aws:username": "u"}}, {}, user("u"))
    assert holds({"Null": {"aws:username": "true"}}, {}, session)
    sns = Principal.aws_service("sns.amazonaws.com")
    topic = on_resource(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sns:Publish",
            "Condition": {
                "StringEquals": {"aws:PrincipalServiceName": "sns.amazonaws.com"},
                "Bool": {"aws:PrincipalIsAWSService": "true"},
            },
        }
    )
    assert ask(sns, "sns:Publish", "arn:aws:sns:us-east-1:123456789012:t", (), topic).allowed
    assert not ask(session, "sns:Publish", "arn:aws:sns:us-east-1:123456789012:t", (), topic).allowed


# --- Key policies in AWS KMS ------------------------------------------------------------------------

KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ENABLE_IAM = {
    "Sid": "Enable IAM User Permissions",
    "Effect": "Allow",
    "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
    "Action": "kms:*",
    "Resource": "*",
}
DECRYPT = identity({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY}, source="role policy")


def test_the_default_key_policy_enables_iam_policies():
    """Key policies in AWS KMS — "The default key policy enables IAM policies": with the account root
    statement, an identity-based policy allowing kms:Decrypt allows it; without one it is denied."""
    key = on_resource(ENABLE_IAM)
    caller = role_session("ConsumerRole")
    allowed = ask(caller, "kms:Decrypt", KEY, (DECRYPT,), key, kms=True)
    without = ask(caller, "kms:Decrypt", KEY, (), key, kms=True)
    assert allowed.allowed
    assert [s.sid for s in allowed.granted_by] == [None, "Enable IAM User Permissions"]
    assert not without.allowed
    assert without.reason == "because no identity-based policy allows the kms:Decrypt action"


def test_without_the_key_policys_permission_iam_policies_have_no_effect():
    """Key policies in AWS KMS — "Unless the key policy explicitly allows it, you cannot use IAM policies
    to allow access to a KMS key. Without permission from the key policy, IAM policies that allow
    permissions have no effect"."""
    key = on_resource(
        {
            "Sid": "Admins",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/KeyAdmin"},
            "Action": "kms:Describe*",
            "Resource": "*",
        }
    )
    decision = ask(role_session("ConsumerRole"), "kms:Decrypt", KEY, (DECRYPT,), key, kms=True)
    assert not decision.allowed
    assert decision.reason == "because no resource-based policy allows the kms:Decrypt action"
    assert not ask(role_session("ConsumerRole"), "kms:Decrypt", KEY, (DECRYPT,), None, kms=True).allowed


def test_a_key_policy_naming_the_role_allows_without_an_iam_policy():
    """Key policies in AWS KMS — the statements in the key policy determine who has permission to use the
    key: a key user statement naming the role allows it by itself."""
    key = on_resource(
        ENABLE_IAM,
        {
            "Sid": "Allow use of the key",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/ConsumerRole"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
        },
    )
    decision = ask(role_session("ConsumerRole"), "kms:GenerateDataKey", KEY, (), key, kms=True)
    assert decision.allowed
    assert sids(decision.granted_by) == ["Allow use of the key"]


def test_an_iam_policy_can_deny_without_the_key_policys_permission():
    """Key policies in AWS KMS — "You can use an IAM policy to deny a permission to a KMS key without
    permission from a key policy"."""
    key = on_resource(
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:role/ConsumerRole"},
            "Action": "kms:*",
            "Resource": "*",
        }
    )
    deny = identity({"Effect": "Deny", "Action": "kms:Decrypt", "Resource": "*"})
    decision = ask(role_session("ConsumerRole"), "kms:Decrypt", KEY, (deny,), key, kms=True)
    assert decision.reason == "with an explicit deny in an identity-based policy"


def test_a_key_policy_allowing_a_service_with_a_via_service_condition():
    """Key policies in AWS KMS — a service principal (SNS delivering to an encrypted queue) is allowed by a
    key policy statement naming it; kms:ViaService limits the account's principals to use through SQS."""
    key = on_resource(
        {
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
            "Resource": "*",
        },
        {**ENABLE_IAM, "Condition": {"StringEquals": {"kms:ViaService": "sqs.us-east-1.amazonaws.com"}}},
    )
    sns = Principal.aws_service("sns.amazonaws.com")
    assert ask(sns, "kms:GenerateDataKey", KEY, (), key, kms=True).allowed
    assert not ask(
        Principal.aws_service("events.amazonaws.com"), "kms:Decrypt", KEY, (), key, kms=True
    ).allowed
    via_sqs = {"kms:ViaService": "sqs.us-east-1.amazonaws.com"}
    assert ask(role_session("ConsumerRole"), "kms:Decrypt", KEY, (DECRYPT,), key, via_sqs, kms=True).allowed
    assert not ask(role_session("ConsumerRole"), "kms:Decrypt", KEY, (DECRYPT,), key, kms=True).allowed


def test_the_root_user_has_full_access_except_to_a_key_its_key_policy_does_not_allow():
    """Policy evaluation logic — "all requests are implicitly denied with the exception of the AWS account
    root user, which has full access"; Key policies in AWS KMS — "No AWS principal, including the account
    root user ... has any permissions to a KMS key unless they are explicitly allowed"."""
    root = Principal.root(ACCOUNT)
    assert ask(root, "sqs:DeleteQueue", "arn:aws:sqs:us-east-1:123456789012:q").allowed
    assert ask(root, "kms:Decrypt", KEY, (), on_resource(ENABLE_IAM), kms=True).allowed
    assert not ask(
        root, "kms:Decrypt", KEY, (), on_resource({**ENABLE_IAM, "Principal": {"AWS": OTHER}}), kms=True
    ).allowed
    deny = on_resource({"Effect": "Deny", "Principal": "*", "Action": "sqs:DeleteQueue"})
    assert not ask(root, "sqs:DeleteQueue", "arn:aws:sqs:us-east-1:123456789012:q", (), deny).allowed


# --- Parsing ----------------------------------------------------------------------------------------


def test_parsing_accepts_what_aws_accepts():
    """IAM JSON policy elements reference — Statement as an object or a list, elements as a string or a
    list, Version optional, a JSON string or an object."""
    single = Policy.parse(
        '{"Statement": {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}}',
        source="s",
        kind="identity",
    )
    assert len(single.statements) == 1
    assert single.version is None
    assert single.statements[0].index == 0
    assert single.statements[0].label == "s #0"
    listed = identity({"Sid": "A", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]})
    assert listed.statements[0].label == "id statement 'A'"
    assert listed.statements[0].policy is listed
    # A resource-based statement without Resource applies to the resource the policy is on
    topic = on_resource(
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/u"}, "Action": "sns:*"}
    )
    assert ask(user("u"), "sns:Publish", "arn:aws:sns:us-east-1:123456789012:t", (), topic).allowed


@pytest.mark.parametrize(
    ("document", "kind", "says"),
    [
        ("{not json", "identity", "not JSON"),
        ("[]", "identity", "a JSON object"),
        ({"Version": "2012-10-17"}, "identity", "Statement must be"),
        ({"Statement": []}, "identity", "Statement must be"),
        ({"Version": "2024-01-01", "Statement": {}}, "identity", "Version must be"),
        ({"Statement": {}, "Extra": 1}, "identity", "unknown policy element"),
        ({"Statement": {"Action": "s3:*", "Resource": "*"}}, "identity", "Effect must be"),
        ({"Statement": {"Effect": "allow", "Action": "s3:*", "Resource": "*"}}, "identity", "Effect must be"),
        ({"Statement": {"Effect": "Allow", "Resource": "*"}}, "identity", "needs Action or NotAction"),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "NotAction": "s3:Get*", "Resource": "*"}},
            "identity",
            "not both",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": "GetItem", "Resource": "*"}},
            "identity",
            "prefaced by a vendor",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": [], "Resource": "*"}},
            "identity",
            "non-empty list of strings",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": ["s3:*", 3], "Resource": "*"}},
            "identity",
            "list of strings",
        ),
        ({"Statement": {"Effect": "Allow", "Action": "s3:*"}}, "identity", "needs Resource or NotResource"),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "bucket"}},
            "identity",
            "ARN format",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Principal": "*"}},
            "identity",
            "cannot have Principal",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}},
            "resource",
            "needs Principal",
        ),
        (
            {
                "Statement": {
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Principal": {"AWS": "arn:aws:iam::1:user/*"},
                }
            },
            "resource",
            "wildcard",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "Principal": {"Group": "g"}}},
            "resource",
            "principal type",
        ),
        (
            {"Statement": {"Effect": "Allow", "Action": "s3:*", "Principal": "everyone"}},
            "resource",
            "Principal must be",
        ),
        (
            {"Statement": {"Effect": "Allow", "Actions": "s3:*", "Resource": "*"}},
            "identity",
            "unknown statement element",
        ),
        (
            {"Statement": [{"Sid": "A", "Effect": "Allow", "Action": "s3:*", "Resource": "*"}] * 2},
            "identity",
            "unique",
        ),
        ({"Statement": ["Allow"]}, "identity", "must be an object"),
    ],
)
def test_malformed_documents_are_refused_with_a_clear_message(document, kind, says):
    """IAM JSON policy elements reference — what AWS refuses, refused at parse time (PolicyError)."""
    with pytest.raises(PolicyError, match=re.escape(says)):
        Policy.parse(document, source="the policy", kind=kind)


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ({"StringEqualz": {"k": "v"}}, "unknown condition operator"),
        ({"NullIfExists": {"k": "true"}}, "IfExists cannot be added to the Null operator"),
        ({"Null": {"k": "maybe"}}, "Null takes"),
        ({"Bool": {"k": "yes"}}, "Bool takes"),
        ({"NumericLessThan": {"k": "ten"}}, "not a number"),
        ({"DateLessThan": {"k": "tomorrow"}}, "not a date"),
        ({"IpAddress": {"k": "300.1.1.1/8"}}, "not an IP address"),
        ({"BinaryEquals": {"k": "***"}}, "base64"),
        ({"StringEquals": {"k": []}}, "at least one value"),
        ({"StringEquals": {"k": {"nested": 1}}}, "a condition value must be"),
        ({"StringEquals": "k"}, "non-empty object of condition key"),
        ({"StringEquals": {"k": "${aws:username, anonymous}"}}, "malformed policy variable"),
        ([], "non-empty object of operator"),
    ],
)
def test_malformed_conditions_are_refused(block, says):
    """IAM JSON policy elements: Condition operators — an unknown operator, IfExists on Null ("You can add
    IfExists to the end of any condition operator name except the Null condition"), malformed values."""
    with pytest.raises(PolicyError, match=re.escape(says)):
        identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Condition": block})


def test_operator_names_take_if_exists_and_set_qualifiers_together():
    """IAM JSON policy elements: Condition operators — ...IfExists on any operator but Null, combined with
    ForAllValues:/ForAnyValue: (Creating a condition that tests multiple key values)."""
    block = {"ForAnyValue:StringLikeIfExists": {"aws:TagKeys": ["env*"]}}
    assert holds(block, {})
    assert holds(block, {"aws:TagKeys": ["team", "environment"]})
    assert not holds(block, {"aws:TagKeys": ["team"]})


# --- Speed: parsed once, nothing compiled per call --------------------------------------------------


def test_evaluation_compiles_nothing_once_a_request_has_been_seen(monkeypatch):
    """The soak makes tens of thousands of calls: a parsed policy is evaluated without compiling a
    regular expression (static patterns are compiled at parse time, variable ones cached)."""
    # Given policies with static wildcards and with a policy variable, each asked once
    static = identity(
        {"Effect": "Allow", "Action": ["sqs:Send*", "sqs:Receive*"], "Resource": "arn:aws:sqs:*:*:orders-*"}
    )
    dynamic = identity({"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::b/${aws:username}/*"})
    queue = on_resource(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "sqs:*",
            "Condition": {"ArnLike": {"aws:SourceArn": "arn:aws:sns:*:*:t*"}},
        }
    )
    david = user("David")
    first = [
        ask(
            david,
            "sqs:SendMessage",
            "arn:aws:sqs:us-east-1:1:orders-eu",
            (static,),
            queue,
            {"aws:SourceArn": "arn:aws:sns:x:1:t1"},
        ),
        ask(david, "s3:GetObject", "arn:aws:s3:::b/David/k", (dynamic,)),
    ]

    def compile_(*_args, **_kwargs):
        raise AssertionError("a regular expression was compiled during evaluation")

    monkeypatch.setattr(re, "compile", compile_)
    # When they are asked again many times
    for _ in range(2000):
        again = [
            ask(
                david,
                "sqs:SendMessage",
                "arn:aws:sqs:us-east-1:1:orders-eu",
                (static,),
                queue,
                {"aws:SourceArn": "arn:aws:sns:x:1:t1"},
            ),
            ask(david, "s3:GetObject", "arn:aws:s3:::b/David/k", (dynamic,)),
        ]
        # Then the answers are the same, and nothing was compiled
        assert [d.allowed for d in again] == [d.allowed for d in first] == [True, True]


def test_the_denial_message_follows_aws():
    """Policy evaluation logic — AccessDenied: "User: <arn> is not authorized to perform: <action> on
    resource: <arn> because no identity-based policy allows the <action> action"."""
    caller = role_session("ConsumerRole", "fn")
    request = Request(caller, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q")
    decision = evaluate(request, (), None)
    assert decision.message(request) == (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/ConsumerRole/fn is not authorized to perform: "
        "sqs:SendMessage on resource: arn:aws:sqs:us-east-1:123456789012:q "
        "because no identity-based policy allows the sqs:SendMessage action"
    )


def test_policies_passed_in_the_wrong_place_are_refused():
    """The evaluator's own contract: identity-based policies first, the resource's policy second."""
    with pytest.raises(ValueError, match="passed as identity-based"):
        evaluate(
            Request(user("u"), "s3:GetObject", "*"),
            (on_resource({"Effect": "Allow", "Principal": "*", "Action": "s3:*"}),),
            None,
        )
    with pytest.raises(ValueError, match="passed as resource-based"):
        evaluate(
            Request(user("u"), "s3:GetObject", "*"),
            (),
            identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
        )
    with pytest.raises(ValueError, match="not a role ARN"):
        Principal.role_session("arn:aws:iam::1:user/u", "s")
