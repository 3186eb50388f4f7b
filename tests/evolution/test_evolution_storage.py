"""The shared folder under contention: unique names, exclusive claims, leases, quarantine."""

import json
import multiprocessing
import os
import re

import pytest

from derl.evolution.folder.failure_store import Failure
from derl.evolution.folder.record import PublishedRecord, morphology_files
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import RecordRules
from derl.evolution.folder.shared import Identity
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.lease import is_stale, takeover_reason
from derl.fileio.reads import JsonFileError

RACES = 1000


RULES = RecordRules(search_space_size=24, criteria=("__reward__forward",))


def record(morphology_id, publication):
    """The record of an initial morphology in slot 2 (its files are not written)."""
    return PublishedRecord(id=morphology_id, lineage=morphology_id, slot=2, attempt=0, fitness={},
                           files=morphology_files(morphology_id), publication=publication)

def _claimer(out, token, barrier, results):
    """Races for slots 0..RACES-1 as a process sharing host and pid with its rival (as in two pid
    namespaces); the barrier lines both up before every slot, so each slot is a real race."""
    run = RunDir(out, identity=Identity("samehost", 4242, token))
    won = []
    for slot in range(RACES):
        barrier.wait(timeout=60)  # a rival that crashed breaks the barrier instead of hanging
        if run.slots.claim(slot, node=0, worker=0):
            won.append(slot)
    results.put((token, won))


def test_claimers_with_the_same_host_and_pid_never_both_own_a_slot(tmp_path):
    out = tmp_path / "run"
    RunDir(out).create()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    procs = [context.Process(target=_claimer, args=(str(out), token, barrier, results))
             for token in ("a" * 16, "b" * 16)]
    for proc in procs:
        proc.start()
    won = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    a, b = (set(slots) for slots in won.values())
    print("WON", len(a), len(b))
    assert not a & b and a | b == set(range(RACES))
    assert min(len(a), len(b)) > RACES // 10  # both won often: the races were real
    for token, slots in won.items():  # the claim on disk names the process that was told it won
        for slot in slots:
            claim = json.loads((out / "slots" / f"{slot:06d}.json").read_text())
            assert (claim["host"], claim["pid"], claim["token"]) == ("samehost", 4242, token)
    assert not list((out / "tmp").iterdir())  # every staged file was cleaned up


def test_staged_names_are_unique_per_process_and_call(tmp_path):
    one, two = RunDir(tmp_path, Identity("h", 1, "x")), RunDir(tmp_path, Identity("h", 1, "y"))
    target = tmp_path / "slots" / "000001.json"
    names = {one._staged(target), one._staged(target), two._staged(target)}
    assert len(names) == 3 and all("h-1-" in p.name for p in names)


def test_is_stale_compares_file_times_only():
    assert not is_stale(now=100.0, heartbeat=95.0, claimed=10.0, lease_seconds=10)
    assert is_stale(now=100.0, heartbeat=80.0, claimed=10.0, lease_seconds=10)
    assert not is_stale(now=100.0, heartbeat=80.0, claimed=99.0, lease_seconds=10)  # a fresh claim
    assert is_stale(now=100.0, heartbeat=None, claimed=None, lease_seconds=10)


def test_one_of_many_takers_wins_a_lease_and_the_old_owner_sees_it(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    assert run.slots.claim(4, node=1, worker=0)
    current = run.slots.read(4)
    assert current.lease == 0 and not run.slots.taken_over(4, 0)
    takers = [RunDir(tmp_path, Identity("h", k, f"t{k}")) for k in range(5)]
    won = [taker.slots.take_over(current, 0, node=0, worker=k) for k, taker in enumerate(takers)]
    assert won == [True, False, False, False, False]
    assert run.slots.taken_over(4, 0)  # the old owner (lease 0) yields
    now = run.slots.read(4)
    assert (now.lease, now.node, now.worker, now.token) == (1, 0, 0, "t0")
    # The new owner replaces a failed attempt within its own lease; a second takeover makes lease 2.
    takers[0].slots.replace(now, 1, node=0, worker=0)
    assert (run.slots.read(4).attempt, run.slots.read(4).id, run.slots.read(4).lease) == (1, "000004-1", 1)
    assert takers[1].slots.take_over(run.slots.read(4), 1, node=2, worker=0)
    assert run.slots.read(4).lease == 2 and run.slots.claimed() == [4]


def test_takeover_reason_stale_owner_or_owner_elsewhere(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    run.slots.claim(2, node=1, worker=0)
    run.workers.write_state(WorkerStatus(node=1, worker=0, slot=2))
    claim = run.slots.read(2)
    beat = run.workers.beat(1, 0)
    assert takeover_reason(run, 2, claim, now=beat + 5, lease_seconds=10) is None
    assert "last beat 20 s ago" in takeover_reason(run, 2, claim, now=beat + 20, lease_seconds=10)
    run.workers.write_state(WorkerStatus(node=1, worker=0, slot=3))  # alive, but on another slot
    assert "works on slot 3" in takeover_reason(run, 2, claim, now=beat, lease_seconds=10)
    run.publications.publish(record("000002", publication=0))
    assert takeover_reason(run, 2, claim, now=beat + 20, lease_seconds=10) is None  # done: nothing to take
    assert not run.publications.publish(record("000002", publication=1))


def test_bad_files_are_quarantined_by_the_search_and_named_to_other_readers(tmp_path, capsys):
    RunDir(tmp_path).create()
    (tmp_path / "metadata" / "000001.json").write_text('{"id": "000001", "slot"')  # truncated
    (tmp_path / "metadata" / "notes.txt").write_text("my notes")  # foreign
    (tmp_path / "slots" / "000003.json").write_text("{}")
    (tmp_path / "workers" / "0-0.json").write_text('{"node": 5, "worker": 0}')
    reader = RunDir(tmp_path)
    with pytest.raises(JsonFileError, match=r"metadata/000001.json: not valid JSON"):
        reader.publications.read_metadata("000001", RULES)
    with pytest.raises(ValueError, match=r"slots/000003.json: has no valid morphology id"):
        reader.slots.read(3)
    search = RunDir(tmp_path, quarantine=True)
    assert search.publications.published_ids() == ["000001"]  # notes.txt moved out of the way
    assert search.publications.read_metadata("000001", RULES) is None and search.workers.read_state(0, 0) is None
    # A damaged claim stays: the lease, not the file's content, decides who owns the slot.
    assert search.slots.read(3).damaged == "has no valid morphology id (id=None)" and search.slots.is_claimed(3)
    moved = sorted(p.name for p in (tmp_path / "quarantine").iterdir())
    assert moved == ["metadata-000001.json", "metadata-notes.txt", "workers-0-0.json"]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 4 and all(line.startswith("warning: ") for line in warnings)
    assert sum("moved to quarantine/" in line for line in warnings) == 3
    assert any("metadata/notes.txt is not a metadata/ file name" in line for line in warnings)
    # The same name going bad again gets its own place in quarantine/.
    (tmp_path / "workers" / "0-0.json").write_text("[]")
    assert search.workers.read_state(0, 0) is None and len(list((tmp_path / "quarantine").iterdir())) == 4


def test_status_shows_each_node_and_marks_the_stale_one(tmp_path):
    from derl.checked_config import load_config
    from derl.evolution.results import PublishedResults
    from derl.evolution.status import node_lines

    run = RunDir(tmp_path)
    run.create()
    for node in (0, 1):
        run.slots.claim(node, node=node, worker=0)
        run.workers.write_state(WorkerStatus(node=node, worker=0, slot=node, id=f"{node:06d}", status="training"))
        run.workers.beat(node, 0)
    old = run.filesystem_now() - 100
    os.utime(run.workers.heartbeat_path(1, 0), (old, old))
    os.utime(tmp_path / "slots" / "000001.json", (old, old))
    cfg = load_config(None, {"EVO.LEASE_SECONDS": 10})
    lines = node_lines(cfg.EVO, run, PublishedResults(run, cfg.EVO))
    assert len(lines) == 2
    # Ages are read off the clock while the test runs: a loaded machine may add a second or two.
    fresh = re.match(r"  node 0: last heartbeat (\d+) s ago, holds slots 0", lines[0])
    stale = re.match(r"  node 1: last heartbeat (\d+) s ago, holds slots 1", lines[1])
    assert fresh and int(fresh[1]) <= 5 and "STALE" not in lines[0], lines[0]
    assert stale and 100 <= int(stale[1]) <= 105 and "STALE" in lines[1], lines[1]


def test_a_corrupt_genome_is_quarantined_and_counts_as_missing(tmp_path):
    search = RunDir(tmp_path, quarantine=True)
    search.create()
    search.genomes.write_genome("000004", '{"id": "000004", "size": 1.0}\n', "<mujoco/>")
    assert search.genomes.has_genome("000004") and search.genomes.read_genome("000004").data["size"] == 1.0
    (tmp_path / "genomes" / "000004.json").write_text('{"id": "000004", "si')
    assert not search.genomes.has_genome("000004")
    with pytest.raises(FileNotFoundError, match="genomes/000004.json is missing"):
        search.genomes.read_genome("000004")
    assert [p.name for p in (tmp_path / "quarantine").iterdir()] == ["genomes-000004.json"]


def test_the_genome_store_lays_out_a_morphology_s_files_as_its_record_lists_them(tmp_path):
    run = RunDir(tmp_path)
    paths = {"genome": run.genomes.genome_path("000004"), "xml": run.genomes.xml_path("000004"),
             "checkpoint": run.checkpoint_path("000004"), "metrics": run.metrics_path("000004")}
    assert {key: run.relative(path) for key, path in paths.items()} == morphology_files("000004")
    assert run.genomes is run.genomes and run.publications.slots is run.slots  # built once, sharing the slots


def test_a_damaged_failure_record_is_quarantined_and_the_morphology_tried_again(tmp_path):
    search = RunDir(tmp_path, quarantine=True)
    search.create()
    failure = Failure(id="000003", slot=3, attempt=0, reason="ValueError: bad body", node=0, worker=1)
    search.failures.record_failure(failure)
    assert search.failures.has_failed("000003") and search.failures.read_failure("000003") == failure
    assert json.loads(search.failures.error_path("000003").read_text()) == {
        "id": "000003", "slot": 3, "attempt": 0, "reason": "ValueError: bad body", "node": 0, "worker": 1}
    with pytest.raises(ValueError, match="has slot/attempt 4/0"):  # only a valid record is ever built
        Failure(id="000003", slot=4, attempt=0, reason="ValueError: bad body")
    assert search.failures.failed_ids() == ["000003"] and not search.failures.has_failed("000004")
    search.failures.error_path("000003").write_text('{"id": "000003", "sl')
    assert not search.failures.has_failed("000003")
    assert [p.name for p in (tmp_path / "quarantine").iterdir()] == ["error_metadata-000003.json"]


def test_a_morphology_is_retired_once_and_stays_published(tmp_path):
    run = RunDir(tmp_path)
    run.create()
    number = run.publications.take_publication_number("000002", node=0, worker=0)
    assert not run.publications.is_published("000002")
    assert run.publications.publish(record("000002", publication=number))
    run.publications.retire("000002")
    run.publications.retire("000002")  # a second tournament that drew the loser: nothing changes
    assert run.publications.retired_ids() == {"000002"} and run.publications.published_ids() == ["000002"]
    assert run.publications.is_published("000002")
