"""The consumer's scenarios: a workload's queue → its event source mapping → its consumer → the examples."""

from __future__ import annotations

import json
from collections import Counter

from sluice import claimcheck
from sluice.logevents import LogEvent
from sluice_local.app.messages import ORDERS, REFUNDS, claim_check, order
from sluice_local.app.observer import Stack, envelope_of, origin_ids
from sluice_local.app.principals import PRODUCER
from sluice_local.demo.scenarios.runner import Scenario

REPAY = "repay"
"""The refunds example's side effect (examples/refunds/processor.py), as its ledger items name it."""


class Normal(Scenario):
    name = "normal"
    count = 10
    expected = f"{count} orders each charged exactly once"
    patience = 30.0  # each order charged is progress (a CI run on a slow, loaded machine charged 8 in 60 s)

    def start(self, stack: Stack) -> None:
        for i in range(self.count):
            self.send(stack, order(f"{self.prefix}{i}"))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        self.progress = len(charges)
        ok = len(charges) == self.count and set(charges.values()) == {1}
        return ok, f"{len(charges)} orders charged, max {max(charges.values(), default=0)} time(s) each"


class Duplicates(Scenario):
    name = "duplicates"
    count = 5
    expected = f"{count} orders sent twice each → charged once each, {count} duplicates skipped"

    def start(self, stack: Stack) -> None:
        self.sent: set[str] = set()
        for _ in range(2):
            for i in range(self.count):
                self.sent.add(self.send(stack, order(f"{self.prefix}{i}")))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        skipped = sum(1 for e in stack.logged(LogEvent.DUPLICATE_SKIPPED) if e.get("message_id") in self.sent)
        ok = len(charges) == self.count and set(charges.values()) == {1} and skipped == self.count
        return (
            ok,
            f"{len(charges)} orders charged (max {max(charges.values(), default=0)}x), "
            f"{skipped} duplicates skipped",
        )


class TwoWorkloads(Scenario):
    name = "two-workloads"
    count = 5
    expected = (
        f"{count} orders and {count} refunds with the same ids, each in its own workload → each order "
        "charged once, each refund repaid once, none taken for the other's duplicate"
    )

    def start(self, stack: Stack) -> None:
        self.sent: set[str] = set()
        for i in range(self.count):
            same = f"{self.prefix}{i}"
            self.sent.add(self.send(stack, order(same)))
            refund = {"refund_id": same, "order_id": same, "amount_cents": 500, "currency": "EUR"}
            self.sent.add(self.send(stack, refund, workload=REFUNDS))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        repaid = Counter(e.order_id for e in stack.side_effects(self.prefix, REPAY))
        skipped = sum(1 for e in stack.logged(LogEvent.DUPLICATE_SKIPPED) if e.get("message_id") in self.sent)
        ok = charges.keys() == repaid.keys() and len(charges) == self.count and skipped == 0
        ok = ok and set(charges.values()) == set(repaid.values()) == {1}
        return (
            ok,
            f"{len(charges)} orders charged (max {max(charges.values(), default=0)}x), {len(repaid)} refunds "
            f"repaid (max {max(repaid.values(), default=0)}x), {skipped} taken for duplicates",
        )


class Poison(Scenario):
    name = "poison"
    expected = "bad JSON and an over-limit order → PoisonPillQueue with reasons, never charged"

    def start(self, stack: Stack) -> None:
        self.bad_json = self.send(stack, '{"order_id": "' + self.prefix + 'bad", "amount_cents": 12')
        self.over_limit = self.send(stack, order(f"{self.prefix}big", amount_cents=50_000_000))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        mine = {}
        for m in stack.every_message("PoisonPillQueueUrl"):  # nothing consumes it: all of it, held briefly
            env = envelope_of(m)
            if env is not None and env.origin_id in {self.bad_json, self.over_limit}:
                mine[env.origin_id] = env
        charged = stack.charges(self.prefix)
        reasons = sorted((e.last_error.type if e.last_error else "?") for e in mine.values())
        ok = len(mine) == 2 and not charged and all(e.last_error and e.attempts == 1 for e in mine.values())
        where = "" if mine else elsewhere(stack, {self.bad_json, self.over_limit})
        return (
            ok,
            f"{len(mine)} in PoisonPillQueue ({', '.join(reasons) or '-'}), {len(charged)} charged{where}",
        )


class TransientThenSuccess(Scenario):
    name = "transient"
    expected = "payload not in S3 yet (NoSuchKey) → retried with backoff → charged once after it appears"

    def start(self, stack: Stack) -> None:
        self.key = f"{stack.outputs['ClaimCheckPrefix']}{self.prefix}late"
        self.message_id = self.send(stack, claim_check(stack.outputs["ClaimCheckBucketName"], self.key))
        self.uploaded = False

    def observe(self, stack: Stack) -> tuple[bool, str]:
        retries = [e for e in stack.logged(LogEvent.RECORD_RETRIED) if e.get("message_id") == self.message_id]
        if retries and not self.uploaded:  # the object appears only after the consumer has failed once
            body = json.dumps(order(f"{self.prefix}late")).encode()
            stack.client("s3", PRODUCER).put_object(
                Bucket=stack.outputs["ClaimCheckBucketName"], Key=self.key, Body=body
            )
            self.uploaded = True
        charges = stack.charges(self.prefix)
        delays = [e.get("retry_in_seconds") for e in retries]
        ok = self.uploaded and sum(charges.values()) == 1 and len(retries) >= 1
        return (
            ok,
            f"{len(retries)} transient failure(s) (backoff {delays} s), charged {sum(charges.values())}x",
        )


class LargePayload(Scenario):
    name = "claim-check"
    size = 300_000
    expected = f"{size // 1000} KB order offloaded to S3 by the producer → resolved and charged once"

    def start(self, stack: Stack) -> None:
        body = json.dumps(order(f"{self.prefix}large", note="x" * self.size))
        claimcheck.send(
            stack.client("sqs", PRODUCER),
            stack.client("s3", PRODUCER),
            queue_url=stack.outputs[ORDERS + "QueueUrl"],
            body=body,
            bucket=stack.outputs["ClaimCheckBucketName"],
            prefix=stack.outputs["ClaimCheckPrefix"],
            threshold=int(stack.outputs["ClaimCheckThresholdBytes"]),
        )

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        return sum(charges.values()) == 1, f"charged {sum(charges.values())}x"


def elsewhere(stack: Stack, ids: set[str]) -> str:
    """Where poison messages went instead (a wiring error shows up here)."""
    found = []
    # Never peek the work queue: a receive there would count against the messages' maxReceiveCount.
    for output in (ORDERS + "DeadLetterQueueUrl",):
        if output in stack.outputs and origin_ids(stack.peek(output)) & ids:
            found.append(output.removesuffix("Url"))
    return f"; found instead in {', '.join(found)}" if found else ""


def consumer_scenarios() -> list[Scenario]:
    return [
        Normal(),
        Duplicates(),
        TwoWorkloads(),
        Poison(),
        TransientThenSuccess(),
        LargePayload(),
    ]
