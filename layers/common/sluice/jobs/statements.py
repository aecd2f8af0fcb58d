"""The job store's SQL: one statement per transition or query of the ``jobs`` table (docs/jobs.md).

``{jobs}`` is the schema-qualified table, filled in by :class:`sluice.jobs.store.JobStore`. Every
transition is one ``UPDATE … WHERE status = …``; a claimed one matches ``claim_token`` too.
"""

from __future__ import annotations

__all__ = ["COLUMNS", "STATEMENTS"]

COLUMNS = (
    "id, kind, payload, status, attempt, max_attempts, errors, result, claim_token, claimed_by,"
    " claimed_at, next_attempt_at, unique_key, created_at, updated_at, completed_at"
)
_J_COLUMNS = ", ".join(f"j.{name.strip()}" for name in COLUMNS.split(","))
"""The same columns of the row aliased ``j`` (the batch statements join the row with their arrays)."""

STATEMENTS: dict[str, str] = {
    "insert": "INSERT INTO {jobs} (id, kind, payload, max_attempts, unique_key, trace)"
    " VALUES (%(id)s, %(kind)s, %(payload)s, %(max_attempts)s, %(unique_key)s, %(trace)s)"
    " ON CONFLICT DO NOTHING RETURNING id",
    "by_unique_key": "SELECT id FROM {jobs} WHERE unique_key = %(unique_key)s",
    "get": f"SELECT {COLUMNS} FROM {{jobs}} WHERE id = %(id)s",  # noqa: S608 - constants only
    "state": "SELECT status, claim_token FROM {jobs} WHERE id = %(id)s",
    "complete_if_pending": "UPDATE {jobs} SET status = 'completed', result = %(result)s,"
    " attempt = attempt + 1, completed_at = now(), updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'pending' RETURNING attempt",
    "fail_if_pending": "UPDATE {jobs} SET attempt = attempt + 1,"
    " status = CASE WHEN %(dead)s OR attempt + 1 >= max_attempts THEN 'dead' ELSE 'error' END,"
    " next_attempt_at = CASE WHEN %(dead)s OR attempt + 1 >= max_attempts THEN NULL"
    "   ELSE now() + make_interval(secs => %(delay)s) END,"
    " errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt + 1, 'at', now(),"
    "   'error', %(error)s::text, 'worker', %(worker)s::text)),"
    " updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'pending' RETURNING status, attempt, next_attempt_at",
    "claim": "UPDATE {jobs} SET status = 'processing', attempt = attempt + 1, claim_token = %(token)s,"  # noqa: S608
    " claimed_at = now(), claimed_by = %(worker)s, updated_at = now(), trace = coalesce(trace, %(trace)s)"
    f" WHERE id = %(id)s AND status = 'pending' RETURNING {COLUMNS}",
    # One round trip for a delivery: start the run of a pending row of a known kind — a two-phase kind is
    # claimed (processing, new token, attempt + 1); a single-UPDATE kind stays pending with the run marked
    # in flight (claimed_at, token), so the reaper can count a run that never finishes. A mark already
    # there is kept, not refreshed: redeliveries of a run that keeps dying must not keep it young. Any
    # other row is only read.
    # The second SELECT sees the statement's snapshot, so a row another worker claimed meanwhile may read
    # as pending there: callers treat a row that was not started as taken.
    "start": "WITH started AS (UPDATE {jobs} SET updated_at = now(), trace = coalesce(trace, %(trace)s),"  # noqa: S608
    " claim_token = CASE WHEN kind = ANY(%(two_phase)s::text[]) OR claimed_at IS NULL"
    "   THEN %(token)s ELSE claim_token END,"
    " claimed_at = CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN now()"
    "   ELSE coalesce(claimed_at, now()) END,"
    " claimed_by = CASE WHEN kind = ANY(%(two_phase)s::text[]) OR claimed_at IS NULL"
    "   THEN %(worker)s ELSE claimed_by END,"
    " attempt = attempt + CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN 1 ELSE 0 END,"
    " status = CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN 'processing' ELSE status END"
    f" WHERE id = %(id)s AND status = 'pending' AND kind = ANY(%(known)s::text[]) RETURNING {COLUMNS})"
    " SELECT true AS started, * FROM started"
    f" UNION ALL SELECT false, {COLUMNS} FROM {{jobs}}"
    " WHERE id = %(id)s AND NOT EXISTS (SELECT FROM started)",
    # A batch's deliveries in one round trip: ``start`` for each id, each pending row of a two-phase kind
    # claimed under its OWN token (tokens[i] for ids[i]); ids are distinct (the store removes repeats: an
    # UPDATE … FROM updates a row once whatever it joins). Rows come back as tuples: ``started``, then
    # COLUMNS. A row another worker holds comes back unstarted; an id with no row does not come back.
    "start_batch": "WITH d AS MATERIALIZED (SELECT * FROM"  # noqa: S608 - constants only
    " unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(traces)s::text[]) AS d(id, token, trace)),"
    " started AS (UPDATE {jobs} AS j SET updated_at = now(), trace = coalesce(j.trace, d.trace),"
    " claim_token = CASE WHEN j.kind = ANY(%(two_phase)s::text[]) OR j.claimed_at IS NULL"
    "   THEN d.token ELSE j.claim_token END,"
    " claimed_at = CASE WHEN j.kind = ANY(%(two_phase)s::text[]) THEN now()"
    "   ELSE coalesce(j.claimed_at, now()) END,"
    " claimed_by = CASE WHEN j.kind = ANY(%(two_phase)s::text[]) OR j.claimed_at IS NULL"
    "   THEN %(worker)s ELSE j.claimed_by END,"
    " attempt = j.attempt + CASE WHEN j.kind = ANY(%(two_phase)s::text[]) THEN 1 ELSE 0 END,"
    " status = CASE WHEN j.kind = ANY(%(two_phase)s::text[]) THEN 'processing' ELSE j.status END"
    " FROM d WHERE j.id = d.id AND j.status = 'pending' AND j.kind = ANY(%(known)s::text[])"
    f" RETURNING {_J_COLUMNS})"
    " SELECT true, * FROM started"
    f" UNION ALL SELECT false, {_J_COLUMNS} FROM {{jobs}} AS j JOIN d ON j.id = d.id"
    " WHERE NOT EXISTS (SELECT FROM started WHERE started.id = j.id)",
    # The successes of a batch in one statement, each row matched on its own token (the fence of
    # "commit", row by row): a row whose claim was reaped, or reaped and claimed again, is not touched
    # and does not come back. Results travel as JSON text, serialized once.
    "commit_batch": "UPDATE {jobs} AS j SET status = 'completed', result = c.result::jsonb,"
    " completed_at = now(), updated_at = now()"
    " FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(results)s::text[]) AS c(id, token, result)"
    " WHERE j.id = c.id AND j.status = 'processing' AND j.claim_token = c.token RETURNING j.id",
    # Runs of a batch whose handlers never started (the invocation ran out of time), under their own tokens
    # only: a two-phase claim back to pending as before it (attempt - 1), a single-UPDATE run's mark
    # cleared (a mark an earlier delivery left has its token, not ours, and stays). Their messages go
    # back to SQS.
    "release_batch": "UPDATE {jobs} AS j SET status = 'pending',"
    " attempt = j.attempt - (j.status = 'processing')::int,"
    " claim_token = NULL, claimed_at = NULL, claimed_by = NULL, updated_at = now()"
    " FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS c(id, token)"
    " WHERE j.id = c.id AND j.status IN ('processing', 'pending') AND j.claim_token = c.token"
    " RETURNING j.id",
    "states": "SELECT id, status, claim_token FROM {jobs} WHERE id = ANY(%(ids)s::uuid[])",
    "commit": "UPDATE {jobs} SET status = 'completed', result = %(result)s, completed_at = now(),"
    " updated_at = now()"
    " WHERE id = %(id)s AND status = 'processing' AND claim_token = %(token)s RETURNING attempt",
    "fail": "UPDATE {jobs} SET"
    " status = CASE WHEN %(dead)s OR attempt >= max_attempts THEN 'dead' ELSE 'error' END,"
    " next_attempt_at = CASE WHEN %(dead)s OR attempt >= max_attempts THEN NULL"
    "   ELSE now() + make_interval(secs => %(delay)s) END,"
    " errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(),"
    "   'error', %(error)s::text, 'worker', claimed_by)),"
    " updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'processing' AND claim_token = %(token)s"
    " RETURNING status, attempt, next_attempt_at",
    "expired_claims": "SELECT id, claim_token FROM {jobs}"
    " WHERE status IN ('processing', 'pending') AND claimed_at IS NOT NULL"
    " AND claimed_at < now() - make_interval(secs => %(lease)s)"
    " ORDER BY claimed_at LIMIT %(limit)s",
    # A two-phase claim older than the lease goes back to pending (its attempt was counted at the claim);
    # a single-UPDATE run started that long ago never finished: it counts as an attempt now.
    "reap": "UPDATE {jobs} AS j SET"
    " status = CASE WHEN j.attempt + (j.status = 'pending')::int >= j.max_attempts"
    "   THEN 'dead' ELSE 'pending' END,"
    " attempt = j.attempt + (j.status = 'pending')::int,"
    " errors = j.errors || jsonb_build_array(jsonb_build_object("
    "   'attempt', j.attempt + (j.status = 'pending')::int, 'at', now(),"
    "   'error', CASE WHEN j.status = 'pending' THEN 'run never finished within the ' ELSE"
    "     'claim expired: no commit within the ' END || %(lease)s::text || ' s lease',"
    "   'worker', j.claimed_by)),"
    " claimed_at = NULL, claimed_by = NULL, claim_token = NULL, updated_at = now()"
    " FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS c(id, token)"
    " WHERE j.id = c.id AND j.claim_token = c.token AND j.status IN ('processing', 'pending')"
    "   AND j.claimed_at < now() - make_interval(secs => %(lease)s)"
    " RETURNING j.id, j.status, j.trace",
    # The sweeps pick their rows once (a MATERIALIZED CTE), then update them: under `id IN (SELECT ...
    # LIMIT n FOR UPDATE SKIP LOCKED)` PostgreSQL may run the picking subquery again for each row it
    # updates, and a sweep with a limit of 3 took every row due (tests/functional/test_job_store.py).
    "due_for_retry": "WITH picked AS MATERIALIZED (SELECT id FROM {jobs}"
    "   WHERE status = 'error' AND next_attempt_at <= now()"
    "   ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " UPDATE {jobs} AS j SET status = 'pending', next_attempt_at = NULL, updated_at = now(),"
    " claimed_at = NULL"
    " FROM picked WHERE j.id = picked.id AND j.status = 'error'"
    " RETURNING j.id, j.trace",
    "stats": "SELECT status, count(*) AS jobs, min(claimed_at) AS oldest_claim,"
    " min(next_attempt_at) AS next_retry, min(updated_at) AS oldest_update FROM {jobs} GROUP BY status",
    "orphans": "WITH picked AS MATERIALIZED (SELECT id FROM {jobs}"
    "   WHERE status = 'pending' AND claimed_at IS NULL"
    "   AND updated_at < now() - make_interval(secs => %(age)s)"
    "   ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " UPDATE {jobs} AS j SET updated_at = now()"
    " FROM picked WHERE j.id = picked.id AND j.status = 'pending' AND j.claimed_at IS NULL"
    " RETURNING j.id, j.trace",
}
