"""Parent selection over published metadata (aging window, vanilla retirement) and the summary."""

import numpy as np
import pytest

from derl.config import load_config
from derl.evolution.population import slot_id
from derl.evolution.results import PublishedResults, rank, summarize
from derl.evolution.storage import RunDir

FORWARD = [5.0, 9.0, 1.0, 7.0, 3.0, 2.0, 8.0, 4.0, 6.0, 0.5]  # slot k has FORWARD[k]


def published_run(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    for slot, value in enumerate(FORWARD):
        morphology_id = slot_id(slot)
        run.publish({"id": morphology_id, "slot": slot, "lineage": morphology_id, "__reward__forward": value})
    results = PublishedResults(run)
    results.refresh()
    return run, results


def config(**evo):
    overrides = {"EVO.SELECTION_CRITERIA": ["__reward__forward"], "EVO.SELECTION_CRITERIA_OBJ": [-1]}
    overrides.update({f"EVO.{key}": value for key, value in evo.items()})
    return load_config(None, overrides)


def test_aging_tournament_draws_only_from_the_newest_slots(tmp_path):
    _, results = published_run(tmp_path)
    cfg = config(AGING_WINDOW_SIZE=3, NUM_PARTICIPANTS=2)
    rng = np.random.default_rng(0)
    parents = {results.select_parent(cfg, rng) for _ in range(100)}
    assert parents <= {"000007", "000008", "000009"} and "000008" in parents
    # With many participants the best of the window (slot 8: 6.0) nearly always wins.
    cfg = config(AGING_WINDOW_SIZE=3, NUM_PARTICIPANTS=40)
    assert results.select_parent(cfg, rng) == "000008"


def test_vanilla_tournament_retires_losers_for_good(tmp_path):
    run, results = published_run(tmp_path)
    cfg = config(TOURNAMENT_TYPE="vanilla_num", NUM_PARTICIPANTS=2)
    rng = np.random.default_rng(1)
    winners = [results.select_parent(cfg, rng) for _ in range(60)]
    retired = run.retired_ids()
    assert retired and "000001" not in retired  # the best is never dominated
    assert len(results.by_id) == len(FORWARD)  # published metadata stays
    later = [results.select_parent(cfg, rng) for _ in range(20)]
    assert not set(later) & retired and set(winners) - retired


def test_a_missing_criterion_is_a_one_line_error(tmp_path):
    _, results = published_run(tmp_path)
    cfg = load_config(None, {"EVO.SELECTION_CRITERIA": ["__reward__manipulation"],
                             "EVO.SELECTION_CRITERIA_OBJ": [-1]})
    with pytest.raises(ValueError, match="__reward__manipulation is not in the metadata"):
        results.select_parent(cfg, np.random.default_rng(0))


def test_summary_ranks_by_the_criteria(tmp_path):
    run, results = published_run(tmp_path)
    cfg = config(SEARCH_SPACE_SIZE=20)
    summary = summarize(cfg, run, results, {"started": 0.0, "published_at_start": 0})
    assert summary["published"] == 10 and summary["total"] == 20
    assert summary["best"]["id"] == "000001"
    assert [r["id"] for r in summary["top_k"][:3]] == ["000001", "000006", "000003"]
    assert rank(list(results.by_id.values()), ("__reward__forward",), (1,))[0]["id"] == "000009"
