"""Pure evolution logic on fixed tables: Pareto front, tournaments, aging window, slots, seeds."""

import json

import numpy as np
import pytest

from derl.config import ConfigError
from derl.evolution import selection
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.slot_store import Claim
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.node_size import DEFAULT_WORKER_MEMORY_BYTES, resolve_num_processes, worker_memory_estimate
from derl.evolution.population import init_claim_order, init_share, parse_id, ppo_seed, slot_id, slot_rng


def test_pareto_mask_two_criteria_with_an_exact_tie():
    costs = np.array([[1, 2], [2, 1], [3, 3], [1, 2], [0, 5]])
    # Row 2 is dominated by 0 and 1; row 3 ties row 0 and collapses to it; row 4 trades off.
    assert selection.pareto_mask(costs).tolist() == [True, True, False, False, True]


def test_pareto_mask_one_criterion_keeps_the_first_best():
    assert selection.pareto_mask(np.array([[-5], [-7], [-7], [-1]])).tolist() == [False, True, False, False]


def test_pareto_mask_rejects_an_empty_table():
    with pytest.raises(ValueError, match="non-empty"):
        selection.pareto_mask(np.zeros((0, 2)))


def test_costs_from_table_flips_maximised_columns():
    costs = selection.costs_from_table(np.array([[3.0, 1.0]]), [-1, 1])
    assert costs.tolist() == [[-3.0, 1.0]]
    with pytest.raises(ValueError, match="-1 or 1"):
        selection.costs_from_table(np.array([[3.0]]), [2])
    with pytest.raises(ValueError, match="objectives"):
        selection.costs_from_table(np.array([[3.0, 1.0]]), [-1])


def test_single_criterion_tournament_returns_the_best_participant():
    costs = -np.array([[4.0], [9.0], [1.0], [7.0], [3.0]])  # maximise 4, 9, 1, 7, 3
    for seed in range(50):
        winner, participants = selection.tournament(costs, 4, np.random.default_rng(seed))
        assert winner == participants[np.argmin(costs[participants, 0])]


def test_two_criteria_tournament_picks_uniformly_on_the_front():
    costs = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])
    rng = np.random.default_rng(0)
    winners = [selection.tournament(costs, 50, rng)[0] for _ in range(400)]
    counts = np.bincount(winners, minlength=3)
    assert counts[2] == 0 and 150 < counts[0] < 250


def test_first_dominated_ignores_repeated_draws():
    costs = np.array([[0.0], [1.0], [2.0]])
    assert selection.first_dominated(costs, np.array([0, 0, 2, 1])) == 2
    assert selection.first_dominated(costs, np.array([1, 1])) is None


def test_aging_window_is_ordered_by_publication_number_not_position():
    assert selection.aging_window([5, 1, 3, 9, 7], 3).tolist() == [0, 4, 3]
    assert selection.aging_window([2, 0], 10).tolist() == [1, 0]
    # Slots 0..5 published as 0, 1, 7, 2, 3, 5 (slot 2 late, number 4 and 6 gaps): slot 2 is newest.
    assert selection.aging_window([0, 1, 7, 2, 3, 5], 3).tolist() == [4, 5, 2]


def test_num_participants():
    assert selection.num_participants("aging_num", 4, 5, 100) == 4
    assert selection.num_participants("aging_percent", 4, 5, 100) == 5
    assert selection.num_participants("vanilla_percent", 4, 5, 10) == 2
    with pytest.raises(ValueError, match="TOURNAMENT_TYPE"):
        selection.num_participants("aging", 4, 5, 10)


def test_ids_round_trip_and_stay_distinct():
    assert slot_id(42) == "000042" and slot_id(42, 3) == "000042-3"
    assert parse_id("000042-3") == (42, 3) and parse_id("1234567") == (1234567, 0)
    with pytest.raises(ValueError, match="morphology id"):
        parse_id("0-1-05-12-30-00")


def test_seed_streams_are_per_slot_and_reproducible():
    seeds = {ppo_seed(1409, slot, attempt) for slot in range(200) for attempt in range(3)}
    assert len(seeds) == 600 and max(seeds) < 2**31
    assert slot_rng(1409, 7, 0).random() == slot_rng(1409, 7, 0).random()
    assert slot_rng(1409, 7, 0).random() != slot_rng(1409, 8, 0).random()
    assert slot_rng(1409, 7, 0).random() != slot_rng(1409, 7, 1).random()


@pytest.mark.parametrize("size, nodes, workers", [(576, 16, 18), (10, 3, 2), (5, 2, 4), (3, 1, 5)])
def test_init_shares_partition_the_population(size, nodes, workers):
    shares = [list(init_share(size, nodes, n, workers, w)) for n in range(nodes) for w in range(workers)]
    assert sorted(s for share in shares for s in share) == list(range(size))
    if (size, nodes, workers) == (576, 16, 18):
        assert {len(share) for share in shares} == {2}


def test_init_claim_order_starts_with_the_own_share():
    order = init_claim_order(10, 2, 1, 2, 0)
    assert order[:3] == [5, 6, 7] and sorted(order) == list(range(10))


def test_resolve_num_processes():
    gb = 2**30
    assert resolve_num_processes(3, 2, 64 * gb, 64 * gb, gb) == 3
    assert resolve_num_processes(0, 8, 64 * gb, 64 * gb, gb) == 8
    assert resolve_num_processes(0, 8, 3 * gb, 64 * gb, gb) == 3
    assert resolve_num_processes(0, 8, gb // 2, 64 * gb, gb) == 1
    assert resolve_num_processes(8, 2, gb, 64 * gb, gb) == 8  # 4 per core; free memory does not refuse
    with pytest.raises(ValueError, match="NUM_PROCESSES"):
        resolve_num_processes(-1, 2, gb, gb, gb)
    # Above 4 workers per core, or more than the whole memory holds: one line naming the key and the limit.
    refused = r"^config key EVO.NUM_PROCESSES 9 is more than this node holds: 8 by its cores .* 64 by its memory"
    with pytest.raises(ConfigError, match=refused + r" .*; use at most 8, or 0 for as many as it holds$"):
        resolve_num_processes(9, 2, 64 * gb, 64 * gb, gb)
    with pytest.raises(ConfigError, match=r"use at most 3,"):
        resolve_num_processes(4, 72, 64 * gb, 3 * gb + gb // 2, gb)


def test_slot_claims_are_exclusive_and_complete(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    assert run.slots.claim(3, node=0, worker=0)
    assert not run.slots.claim(3, node=1, worker=0)
    me = run.identity
    assert run.slots.read(3) == Claim(slot=3, lease=0, id="000003", attempt=0, node=0, worker=0, host=me.host,
                                      pid=me.pid, token=me.token)
    assert json.loads((tmp_path / "slots" / "000003.json").read_text()) == {
        "slot": 3, "lease": 0, "id": "000003", "attempt": 0, "node": 0, "worker": 0, **me.as_dict()}
    with pytest.raises(ValueError, match="claims 000004, not in slot 3"):  # only a valid claim is ever built
        Claim(slot=3, lease=0, id="000004", attempt=0, node=0, worker=0)
    assert [p.name for p in (tmp_path / "slots").iterdir()] == ["000003.json"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_worker_memory_estimate_uses_this_nodes_measured_peak(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    assert worker_memory_estimate(run, 0)[0] == DEFAULT_WORKER_MEMORY_BYTES
    run.workers.write_state(WorkerStatus(node=0, worker=0, peak_rss_bytes=1000))
    run.workers.write_state(WorkerStatus(node=0, worker=1, peak_rss_bytes=3000))
    run.workers.write_state(WorkerStatus(node=1, worker=0, peak_rss_bytes=9000))
    assert worker_memory_estimate(run, 0)[0] == 3600
