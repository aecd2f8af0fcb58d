"""IAM enforced in the local runtime (issue 26): AWS's policy evaluation logic, for one account.

:mod:`.policy` parses identity-based and resource-based policies once and decides each request
(:func:`~sluice_local.emulation.iam.policy.evaluate`); :mod:`.conditions` holds the condition operators
and policy variables. Cross-account requests, permissions boundaries, SCPs and session policies are
not modelled (:mod:`.policy` says what is).
"""

from sluice_local.emulation.iam.conditions import Condition, Patterns, PolicyError, Template, parse_date
from sluice_local.emulation.iam.policy import Decision, Policy, Principal, Request, Statement, evaluate

__all__ = [
    "Condition",
    "Decision",
    "Patterns",
    "Policy",
    "PolicyError",
    "Principal",
    "Request",
    "Statement",
    "Template",
    "evaluate",
    "parse_date",
]
