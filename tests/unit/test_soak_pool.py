"""The soak's seed pool: workers claim seeds one at a time until none is left, each seed by exactly one
(Given / When / Then)."""

from __future__ import annotations

import threading
from pathlib import Path

from sluice_local.soak.runner import claimed, seed_pool


def test_given_a_pool_when_one_worker_claims_then_it_gets_every_seed_lowest_first(tmp_path: Path) -> None:
    pool = seed_pool(tmp_path, "lambda", [10, 2, 4])
    assert list(claimed(pool)) == [2, 4, 10]
    assert list(pool.iterdir()) == []


def test_given_four_workers_on_one_pool_when_they_claim_at_once_then_each_seed_is_run_once(
    tmp_path: Path,
) -> None:
    # Given 100 seeds and four workers starting together
    pool = seed_pool(tmp_path, "stepfunctions", range(1, 200, 2))
    start = threading.Barrier(4, timeout=60)
    taken: list[list[int]] = [[] for _ in range(4)]

    def work(i: int) -> None:
        start.wait()
        taken[i].extend(claimed(pool))

    # When they claim until the pool is empty
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Then every seed went to exactly one worker
    every = [seed for share in taken for seed in share]
    assert sorted(every) == list(range(1, 200, 2))


def test_given_an_old_pool_when_a_new_one_is_made_then_only_the_new_seeds_are_in_it(tmp_path: Path) -> None:
    seed_pool(tmp_path, "lambda", [0, 2])
    pool = seed_pool(tmp_path, "lambda", [4])
    assert list(claimed(pool)) == [4]
