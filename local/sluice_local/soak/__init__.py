"""``make soak``: seeded fault schedules through the real wiring, checked on the whole history (issue 11).

For each seed: the messages of both example queue workloads, orders (``Orders``, examples/orders) and
refunds (``Refunds``, examples/refunds, whose refund ids take the seed's order ids' values), go through
the deployed template (each workload's consumer, DLQ and redrive; the shared poison queue and long
delays) while :mod:`sluice_local.emulation.faults` breaks AWS calls and invocations as the seed decides;
the run drains to quiescence; the checker then reads the ledger (every side effect the example
processors performed, one item per performance) and the queues, and reports for each workload on its
own, like Jepsen's total-queue checker and one step beyond it:

- **lost**: sent, never processed, not in the poison queue or a dead-letter queue;
- **duplicated side effects**: more than one ledger item for one message's guarded effect (an order's
  ``<id>#charge``, a refund's ``refund:<id>#repay``), except where the injector saw the invocation that
  performed it die, or its guard's commit fail, right after it (the at-least-once window no guard can
  close: reported apart, as ``at_least_once``);
- **unexpected**: processed but never sent to that workload;
- **misrouted**: among others, a message found in the other workload's DLQ, or isolated in the shared
  poison queue or delay DLQ with an envelope or body naming the other workload, or an effect keyed in
  the other workload's ledger namespace;
- the workload's conservation line ``sent = processed + poison + dead-lettered``.

The report has one line per workload, and a run fails when any workload has a violation or a broken
line (:mod:`.result`, :mod:`.summary`). ``--workload``: ``all`` (orders, refunds and job rows),
``queues`` (orders and refunds), or ``orders``, ``refunds``, ``jobs`` alone.

With a PostgreSQL (``SLUICE_DATABASE_URL``, else 127.0.0.1:5432) the stack has the job store and each
seed also creates job rows (two-phase charges, one sent twice, a single-UPDATE thumbnail, a charge that
fails once, an invalid one) and sends their ids, while the injector also drops the job store's
connection before statements and after them (committed, response lost). Checked on the rows and the
ledger: every job ends completed or dead (``jobs sent = completed + dead``), a charge is performed once
(outside the at-least-once window), a completed charge was performed, an invalid one never. Without a
PostgreSQL the job part is skipped and the report says why.

Seeds run one after another on one stack per process (a seed's business ids are ``s<seed>-<n>``);
``python -m sluice_local soak`` runs a range of them in worker processes, one per RedriveMode.

Modules: :mod:`.options` (what a run breaks), :mod:`.workload` (what a seed sends), :mod:`.runner`
(the stacks, the seeds, the workers), :mod:`.checker` (the queue workloads) and :mod:`.jobcheck` (the
job rows), :mod:`.result` (a seed's tallies), :mod:`.summary` (the report), :mod:`.db_faults` (the job
store's database boundary, plugged into the fault injector).

Time scale: the workloads' work queues', the delay and job queues' visibility timeouts are set to
:data:`~sluice_local.soak.runner.VISIBILITY_SECONDS` after deploy (the consumer's
``SLUICE_VISIBILITY_TIMEOUT_SECONDS`` with it), so a batch lost with a failed invocation is back in
seconds instead of minutes; everything else is the ``--fast`` stack.
"""
