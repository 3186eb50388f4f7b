"""Parent selection over published metadata (aging window, vanilla retirement) and the summary."""

import json

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.evolution.failures import classify
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import morphology_files, summary_problem
from derl.evolution.population import search_text, slot_id
from derl.evolution.results import PublishedResults, rank, summarize

FORWARD = [5.0, 9.0, 1.0, 7.0, 3.0, 2.0, 8.0, 4.0, 6.0, 0.5]  # slot k has FORWARD[k]


def publish(run, slot, value):
    """Slot ``slot``'s morphology (its claim, genome, stand-in files and record) with fitness ``value``."""
    morphology_id = slot_id(slot)
    run.genomes.write_genome(morphology_id, json.dumps({"id": morphology_id}), "<mujoco/>")  # first: a new body's
    for relative in morphology_files(morphology_id).values():  # genome quarantines an older checkpoint
        if not (run.root / relative).exists():
            (run.root / relative).write_text("stand-in\n")
    run.slots.claim(slot, node=0, worker=0)
    number = run.publications.take_publication_number(morphology_id, node=0, worker=0)
    run.publications.publish(PublishedRecord(id=morphology_id, slot=slot, attempt=0, lineage=morphology_id,
                                             fitness={"__reward__forward": value}, publication=number,
                                             files=morphology_files(morphology_id)))
    return number


def published_run(tmp_path, order=None):
    run = RunDir(tmp_path, quarantine=True)
    run.create()
    for slot in range(len(FORWARD)) if order is None else order:
        publish(run, slot, FORWARD[slot])
    results = PublishedResults(run, config().EVO)
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
    parents = {results.select_parent(cfg.EVO, rng).id for _ in range(100)}
    assert parents <= {"000007", "000008", "000009"} and "000008" in parents
    # With many participants the best of the window (slot 8: 6.0) nearly always wins.
    cfg = config(AGING_WINDOW_SIZE=3, NUM_PARTICIPANTS=40)
    assert results.select_parent(cfg.EVO, rng).id == "000008"


def test_aging_window_follows_publication_order_with_a_slot_that_publishes_late(tmp_path):
    # Slot 1 (the best, 9.0) is slow: claimed second, published last. By slot it would be the
    # oldest and out of a window of 3; by publication it is the newest.
    order = [0, 2, 3, 4, 5, 6, 7, 8, 9, 1]
    run, results = published_run(tmp_path, order)
    assert {r.id: r.publication for r in results.by_id.values()}["000001"] == 9
    cfg = config(AGING_WINDOW_SIZE=3, NUM_PARTICIPANTS=40)
    rng = np.random.default_rng(0)
    assert results.select_parent(cfg.EVO, rng).id == "000001"
    parents = {results.select_parent(config(AGING_WINDOW_SIZE=3, NUM_PARTICIPANTS=1).EVO, rng).id for _ in range(60)}
    assert parents == {"000008", "000009", "000001"}


def test_publication_numbers_are_unique_with_gaps_after_a_death(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    assert publish(run, 0, 1.0) == 0
    # A worker takes number 1 for slot 1 and dies before writing the metadata: the number stays
    # taken and unused. Resumed, it publishes slot 1 under a new number; 1 is a gap forever.
    assert run.publications.take_publication_number(slot_id(1), node=0, worker=1) == 1
    assert publish(run, 2, 2.0) == 2
    assert publish(run, 1, 3.0) == 3
    # A number taken meanwhile by another process (here: created by hand) is skipped.
    (tmp_path / "published" / "00000004.json").write_text('{"id": "000003", "node": 1, "worker": 0}')
    assert publish(run, 3, 4.0) == 5
    results = PublishedResults(run, config().EVO)
    results.refresh()
    numbers = sorted(r.publication for r in results.by_id.values())
    assert numbers == [0, 2, 3, 5]
    assert results.by_id["000001"].publication == 3


def test_vanilla_tournament_retires_losers_for_good(tmp_path):
    run, results = published_run(tmp_path)
    cfg = config(TOURNAMENT_TYPE="vanilla_num", NUM_PARTICIPANTS=2)
    rng = np.random.default_rng(1)
    winners = [results.select_parent(cfg.EVO, rng).id for _ in range(60)]
    retired = run.publications.retired_ids()
    assert retired and "000001" not in retired  # the best is never dominated
    assert len(results.by_id) == len(FORWARD)  # published metadata stays
    later = [results.select_parent(cfg.EVO, rng).id for _ in range(20)]
    assert not set(later) & retired and set(winners) - retired


def test_a_record_without_the_selection_criterion_is_quarantined_not_blamed_on_the_child(tmp_path, capsys):
    """Such a record made the tournament raise a ValueError, scored as the failure of the child being
    made: 10 attempts burned, then exit 3. The criteria are part of the record's schema now."""
    run, _ = published_run(tmp_path, order=range(4))
    for name, value in (("000002", None), ("000003", "9")):  # missing, or not a number
        path = tmp_path / "metadata" / f"{name}.json"
        record = {**json.loads(path.read_text()), "__reward__forward": value}
        path.write_text(json.dumps({key: v for key, v in record.items() if v is not None}))
    results = PublishedResults(run, config().EVO)
    results.refresh()
    assert sorted(results.by_id) == ["000000", "000001"]
    assert results.select_parent(config(NUM_PARTICIPANTS=40).EVO, np.random.default_rng(0)).id == "000001"
    assert sorted(p.name for p in (tmp_path / "quarantine").iterdir()) == ["metadata-000002.json",
                                                                           "metadata-000003.json"]
    assert "000002.json lacks __reward__forward, a selection criterion of the run (EVO.SELECTION_CRITERIA)" \
        in capsys.readouterr().err


def test_a_parent_whose_genome_was_quarantined_leaves_the_pool(tmp_path, capsys):
    """Its draw raised "parent genome unavailable", scored as the child's failure, at every draw."""
    _, results = published_run(tmp_path)
    (tmp_path / "genomes" / "000001.json").write_text("{")  # the best (9.0), damaged after it was published
    cfg = config(AGING_WINDOW_SIZE=10, NUM_PARTICIPANTS=40)
    rng = np.random.default_rng(0)
    assert results.select_parent(cfg.EVO, rng).id == "000006"  # the next best (8.0), drawn again
    assert results.unavailable == {"000001"} and len(results.by_id) == len(FORWARD)  # still published
    assert "warning: 000001 leaves the tournament pool" in capsys.readouterr().err
    assert "000001" not in {results.select_parent(config(NUM_PARTICIPANTS=2).EVO, rng).id for _ in range(20)}
    for path in (tmp_path / "genomes").iterdir():
        path.write_text("{")
    with pytest.raises(FileNotFoundError, match="no parent") as raised:
        results.select_parent(cfg.EVO, rng)
    assert classify(raised.value) == "environment"  # the folder's problem: no slot pays for it


def test_summary_ranks_by_the_criteria(tmp_path):
    run, results = published_run(tmp_path)
    cfg = config(SEARCH_SPACE_SIZE=20, INIT_POPULATION_SIZE=10)
    summary = summarize(cfg.EVO, run, results, {"started": 0.0, "published_at_start": 0})
    assert summary["published"] == 10 and summary["total"] == 20
    assert summary["best"]["id"] == "000001"
    assert [r["id"] for r in summary["top_k"][:3]] == ["000001", "000006", "000003"]
    assert rank(list(results.by_id.values()), ("__reward__forward",), (1,))[0].id == "000009"


def test_summary_says_random_search_and_names_no_tournament(tmp_path):
    """With EVO.IS_EVO false the summary, status, report and log said "aging_num on ... (window 8)"."""
    run, results = published_run(tmp_path)
    session = {"started": 0.0, "published_at_start": 0}
    assert summarize(config().EVO, run, results, session)["search"] == "evolution"
    baseline = config(IS_EVO=False, SEARCH_SPACE_SIZE=20)
    summary = summarize(baseline.EVO, run, results, session)
    assert summary["search"] == "random search" and summary_problem(summary) is None
    assert search_text(baseline.EVO) == ("random search (EVO.IS_EVO false): 20 morphologies drawn like an initial "
                                         "population, no tournament, no mutation; ranked on __reward__forward")
    assert search_text(config(TOURNAMENT_TYPE="aging_num", AGING_WINDOW_SIZE=8, INIT_POPULATION_SIZE=8).EVO) == (
        "evolution: aging_num tournaments on __reward__forward (window 8, initial population 8)")
    assert "window" not in search_text(config(TOURNAMENT_TYPE="vanilla_num").EVO)


def test_summary_schema_knows_the_two_searches():
    assert summary_problem({"search": "random search"}) is None and summary_problem({}) is None  # an older run's
    assert summary_problem({"search": "tournament"}) == \
        "has search 'tournament', expected evolution or random search"
