"""Log event names: the ``event`` key of every log line that tools select on.

The local runtime's demo observer and soak (and tests) find a function's log lines by their
``event`` field, never by their message text: the message is for people and may be reworded, the
event name is the interface. Powertools' logger writes it as a top-level key::

    logger.info("message re-driven", extra={"event": LogEvent.MESSAGE_REDRIVEN, ...})
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EVENT", "LogEvent"]

EVENT = "event"
"""The log line's key that holds its :class:`LogEvent`."""


class LogEvent(StrEnum):
    # every hop that reads an envelope (consumer, batch delay, rehydrator, redriver, Plan step, job
    # consumer): bookkeeping that was unreadable or failed its seal check, ignored (``EnvelopesCorrupt``)
    ENVELOPE_CORRUPT = "envelope.corrupt"
    # the consumer (sluice.consumer.batch)
    DUPLICATE_SKIPPED = "consumer.duplicate_skipped"
    # the configured key path found nothing in a body (``IdempotencyKeyMissing``); ``outcome`` says
    # what was done about it (SLUICE_IDEMPOTENCY_KEY_MISSING)
    IDEMPOTENCY_KEY_MISSING = "consumer.idempotency_key_missing"
    # DEBUG: a record the processor ran to success (with its message_id and correlation_id); off in
    # production (LogLevel INFO), on in sluice_local.testing's stacks, which wait for it
    RECORD_PROCESSED = "consumer.record_processed"
    RECORD_RETRIED = "consumer.record_retried"
    RECORD_DEFERRED = "consumer.record_deferred"
    RECORD_DEAD_LETTERED = "consumer.record_dead_lettered"
    RECORD_ISOLATED = "consumer.record_isolated"
    BATCH_DONE = "consumer.batch_done"
    # the redriver (sluice.redrive.runner, RedriveMode=lambda)
    MESSAGE_REDRIVEN = "redrive.message_redriven"
    MESSAGE_ISOLATED = "redrive.message_isolated"
    RUN_FINISHED = "redrive.run_finished"
    # another run holds the workload's run lease: this one ended at once (``RedriveRunsSkipped``);
    # ``holder`` and ``lease_expires`` name that run (sluice.redrive.lease)
    RUN_SKIPPED = "redrive.run_skipped"
    # another run took this one's lease over (it stalled past it, or the clocks disagree): it stops
    LEASE_LOST = "redrive.lease_lost"
    BREAKER_HALF_OPEN = "redrive.breaker_half_open"  # ``probe``: this batch is the probe, or judged
    # the redrive state machine's Lambdas (sluice.redrive.steps, the poison isolator)
    REDRIVE_PLANNED = "redrive.planned"
    PLAN_ISOLATED = "redrive.plan_isolated"
    # the source queue refused a re-driven message (the redriver: stays in the DLQ; the Plan step's
    # Redrive step: isolated)
    SEND_REFUSED = "redrive.send_refused"
    # the delay functions (sluice.delay.parker, sluice.delay.rehydrator): a message its target refused
    DELAYED_ISOLATED = "delay.message_isolated"
    PARKED_ISOLATED = "delay.parked_message_isolated"
    # the job consumer (sluice.jobs.worker)
    JOB_MESSAGE_REJECTED = "jobs.message_rejected"
    JOB_DEAD = "jobs.job_dead"
    JOB_BATCH_DONE = "jobs.batch_done"
