"""The search's rules, each owned by one place (docs/guides/evolution.md, docs/design/run-folder.md):

- a name in range never forces the next one out of range, and every retry loop ends;
- published means published: no later start unpublishes a result, whatever happens to its files;
- time from the future is not fresh;
- a worker dies with its coordinator, SIGKILL included, and its children with it;
- a fault of the config found while training ends the search as bad input (exit 2), never as a body's.

Searches run with the fake backend (``tests/evo_fake_backend.py``): seconds each. No test asserts a time:
processes are awaited with generous deadlines that count as failures.
"""

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from derl.config import ConfigError
from derl.evolution import status
from derl.evolution.folder import schema
from derl.evolution.folder.genome_store import GenomeLimits
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.slot_store import Claim
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.lease import is_stale, takeover_reason
from derl.evolution.process import EXIT_ENVIRONMENT, FatalError
from derl.evolution.scheduling import Scheduler
from tests.evo_fake_backend import _genome
from tests.evolution.test_evolution_protocol import ENV, alive, assert_complete, published, start, start_until_published
from tests.evolution.test_evolution_untrusted import RULES, published_record, search_run

TEN_YEARS = 10 * 365 * 86_400
DEADLINE = 120  # seconds a process gets to do what the test waits for; past it the test fails


def wait_for(condition, what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"{what}: not after {deadline} s")
        time.sleep(0.1)


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def log_of(out: Path) -> str:
    return (out.parent / f"{out.name}-coordinator.log").read_text()


# A name in range never forces the next one out of range.
def test_a_planted_publication_number_near_the_top_is_passed_over(tmp_path):
    """Before: ``published/00000599.json`` in a search of 6 slots made the next number 600, out of range:
    every publication failed after its training. Now the next number is the lowest free one."""
    run = RunDir(tmp_path / "run", quarantine=True, search_space_size=6)
    run.create()
    (run.root / "published" / "00000599.json").write_text(json.dumps({"id": "000005", "node": 0, "worker": 0}))
    assert [run.publications.take_publication_number(f"00000{n}", 0, 0) for n in range(3)] == [0, 1, 2]
    (run.root / "published" / "00000004.json").write_text(json.dumps({"id": "000001", "node": 0, "worker": 0}))
    assert run.publications.take_publication_number("000003", 0, 0) == 3
    assert run.publications.take_publication_number("000004", 0, 0) == 5  # 4 is taken: the next free


def test_a_planted_lease_that_follows_no_lease_is_quarantined_never_a_base(tmp_path, capsys):
    """Before: ``leases/000004-1000000.json`` (the largest generation allowed) became the slot's claim,
    so the worker's own next lease, 1000001, was out of range, quarantined, and taken again without end."""
    run = search_run(tmp_path)
    run.slots.claim(4, node=0, worker=0)
    planted = Claim(slot=4, lease=schema.MAX_LEASES, id="000004", attempt=0, node=7, worker=3)
    (run.root / "leases" / f"000004-{schema.MAX_LEASES}.json").write_text(json.dumps(planted.to_json()))
    claim = run.slots.read(4)
    assert (claim.lease, claim.owner) == (0, (0, 0))
    assert run.slots.take_over(claim, 0, node=1, worker=0)  # lease 1, in range, and the latest
    assert run.slots.read(4).owner == (1, 0)
    assert list((run.root / "leases").iterdir()) == [run.root / "leases" / "000004-1.json"]
    assert "follows no lease of slot 4 (leases/000004-1.json is missing)" in capsys.readouterr().err


def test_a_slot_taken_over_as_often_as_its_names_allow_stops_the_node(tmp_path):
    run = search_run(tmp_path)
    scheduler = Scheduler.__new__(Scheduler)  # only what _new_lease reads
    scheduler.run, scheduler.node, scheduler.worker = run, 0, 0
    last = Claim(slot=4, lease=schema.MAX_LEASES, id="000004", attempt=0, node=1, worker=0)
    with pytest.raises(FatalError, match=f"slot 4 was taken over {schema.MAX_LEASES} times"):
        scheduler._new_lease(last)
    assert not (run.root / "leases" / f"000004-{schema.MAX_LEASES + 1}.json").exists()


def test_a_claim_of_an_attempt_out_of_range_is_damaged(tmp_path):
    """A claim naming attempt 10^6 + 1 would make its morphology's records out of range: never counted,
    the slot filled again and again. It reads as damaged: taken over from attempt 0."""
    data = {"slot": 4, "lease": 0, "id": f"000004-{schema.MAX_ATTEMPTS + 1}", "attempt": schema.MAX_ATTEMPTS + 1,
            "node": 0, "worker": 0}
    assert "more than" in Claim.problem(data, slot=4, lease=0)


def test_a_body_the_genome_reader_would_refuse_is_a_config_fault_not_made_again(tmp_path):
    """Before: a design space wider than the genome reader's (``TORSO.HEAD_RADIUS_RANGE [100]``) made a body,
    trained it, refused its genome on read-back and made it anew: 280 trainings in 200 s, no end."""
    run = RunDir(tmp_path / "run", quarantine=True, genome_limits=GenomeLimits(4096, lambda g: (
        None if g["size"] < 10 else f"has head radius {g['size']}, more than 10")))
    run.create()
    with pytest.raises(ConfigError, match="the body drawn for 000004 has head radius 100.0, more than 10"):
        run.genomes.write_genome("000004", _genome("000004", None, None, 100.0), "<mujoco/>")
    assert not run.genomes.genome_path("000004").exists()
    run.genomes.write_genome("000005", _genome("000005", None, None, 1.0), "<mujoco/>")
    assert run.genomes.read_genome("000005").data["size"] == 1.0


def test_a_search_with_names_planted_near_their_limits_finishes(tmp_path):
    out = tmp_path / "run"
    coordinator = start_until_published(out, 4)  # the initial population
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=DEADLINE) == 128 + signal.SIGTERM
    limit = schema.max_publications(12)
    (out / "published" / f"{limit - 1:08d}.json").write_text(json.dumps({"id": "000011", "node": 0, "worker": 0}))
    (out / "leases" / f"000011-{schema.MAX_LEASES}.json").write_text("{}")  # a damaged claim, far ahead
    assert start(out).wait(timeout=DEADLINE) == 0, log_of(out)[-3000:]
    records = assert_complete(out, 12)
    assert max(r["publication"] for r in records.values()) < 100  # numbers from the bottom, never the planted
    assert not list((out / "error_metadata").glob("000011*"))


# Published means published.
def test_a_record_stays_published_whatever_happens_to_its_files(tmp_path, capsys):
    run = search_run(tmp_path)
    run.publications.publish(PublishedRecord.from_json(published_record(run, "000002")))
    os.unlink(run.root / "models" / "000002.pt")
    os.unlink(run.root / "genomes" / "000002.json")
    os.unlink(run.root / "metrics" / "000002.jsonl")
    os.symlink("/etc/passwd", run.root / "metrics" / "000002.jsonl")
    assert run.publications.read_metadata("000002", RULES).id == "000002"
    err = capsys.readouterr().err
    assert "models/000002.pt is missing; 000002 stays published" in err
    assert "metrics/000002.jsonl is not a regular file (a link, FIFO or folder); 000002 stays published; " \
           "moved to quarantine/metrics-000002.jsonl" in err
    assert (run.root / "metadata" / "000002.json").exists()


def test_a_published_best_whose_genome_is_lost_stays_published_at_every_start(tmp_path):
    """Before: a published morphology's genome quarantined, the next start unpublished it and trained its
    slot again: the best changed from 12.295 to 9.051. Now status, summary.json and the coordinator
    agree on every start, and metadata/ and models/ keep their bytes."""
    out = tmp_path / "run"
    assert start(out).wait(timeout=DEADLINE) == 0
    best = json.loads((out / "summary.json").read_text())["best"]["id"]
    os.unlink(out / "genomes" / f"{best}.json")  # as a tournament drawing it quarantines a damaged one
    before = {"metadata": digests(out / "metadata"), "models": digests(out / "models")}
    for _ in range(2):
        assert start(out).wait(timeout=DEADLINE) == 0
        assert {"metadata": digests(out / "metadata"), "models": digests(out / "models")} == before
        assert "search complete: 12 morphologies" in log_of(out).splitlines()[-1]
        summary = json.loads((out / "summary.json").read_text())
        assert (summary["published"], summary["best"]["id"]) == (12, best)
        lines = status.status_lines(str(out))
        assert "done: 12/12 (100.0%)" in "\n".join(lines) and lines[-1] == "state: done"


# Time from the future is not fresh.
def test_a_time_from_the_future_is_stale():
    now = 1.7e9
    assert is_stale(now, now + TEN_YEARS, None, 600.0)
    assert is_stale(now, None, now + TEN_YEARS, 600.0)
    assert is_stale(now, now + TEN_YEARS, now - 1.0, 600.0)  # a claim before a heartbeat from the future
    assert not is_stale(now, now - 900.0, now - 1.0, 600.0)  # a claim after the last heartbeat: a sign of life
    assert not is_stale(now, now + 1.0, None, 600.0)  # a beat that landed after the judge read "now"
    assert not is_stale(now, now - 599.0, None, 600.0) and is_stale(now, now - 601.0, None, 600.0)
    from derl.evolution.lease import file_age

    assert file_age(now, now + 61.0, 600.0) == float("inf") and file_age(now, now + 3.0, 2.0) == float("inf")


def future_worker(tmp_path) -> RunDir:
    """A run whose worker 0-0 holds slot 4 and last beat ten years from now."""
    run = search_run(tmp_path)
    run.slots.claim(4, node=0, worker=0)
    run.workers.write_state(WorkerStatus(node=0, worker=0, slot=4, id="000004", status="training", pid=1))
    run.workers.beat(0, 0)
    ahead = time.time() + TEN_YEARS
    os.utime(run.workers.heartbeat_path(0, 0), (ahead, ahead))
    os.utime(run.slots.path(4), (ahead, ahead))
    return run


def test_a_slot_whose_owner_beats_from_the_future_is_taken_over(tmp_path):
    """Before: a heartbeat dated ten years ahead held its slot for ten years."""
    run = future_worker(tmp_path)
    reason = takeover_reason(run, 4, run.slots.read(4), run.filesystem_now(), 600.0)
    assert reason is not None and "s in the future (a clock set wrong, or planted: counts as stale)" in reason


def test_status_counts_a_heartbeat_from_the_future_as_stale(tmp_path):
    """Before: ``last heartbeat -315619043 s ago`` and ``state: running``."""
    run = future_worker(tmp_path)
    search = "EVO: {SEARCH_SPACE_SIZE: 24, INIT_POPULATION_SIZE: 4, AGING_WINDOW_SIZE: 4}\n"
    (run.root / "config.yaml").write_text(search)
    lines = status.status_lines(str(run.root))
    node = next(line for line in lines if line.startswith("  node 0"))
    assert "s in the future" in node and "STALE" in node and " -" not in node
    assert "running workers: 0" in lines and lines[-1].startswith("state: stopped")


# A worker dies with its coordinator, and its children with it.
def test_a_coordinator_killed_with_sigkill_takes_its_workers_and_their_children(tmp_path):
    """Before: the parent-death signal was SIGTERM, honoured at the end of a PPO iteration (109 s more
    training). Here an iteration takes an hour: only a kill stops the worker; its child (as an encoder
    would be) dies with it."""
    out = tmp_path / "run"
    env = dict(ENV, DERL_FAKE_ITERATION_SECONDS="3600", DERL_FAKE_CHILD="1")
    coordinator = start(out, "EVO.NUM_PROCESSES", "1", env=env)
    wait_for(lambda: (out / "fake_children").is_dir() and any((out / "fake_children").iterdir()), "training started")
    tree = psutil.Process(coordinator.pid).children(recursive=True)
    children = [int(p.name) for p in (out / "fake_children").iterdir()]
    assert children and all(child in {p.pid for p in tree} for child in children)
    coordinator.kill()
    assert coordinator.wait(timeout=DEADLINE) == -signal.SIGKILL
    wait_for(lambda: not any(alive(p.pid) for p in tree), "the workers and their children gone")


# A fault of the config found while training is bad input.
@pytest.mark.parametrize("fault, words", [
    ("config", "error: config key ENV.FORWARD_REWARD_WEIGHT 1e+308: the reward is not finite"),
    ("nan", "error: the training summary of 000000 is not finite ({'return': nan"),
])
def test_a_config_fault_found_while_training_ends_the_search_as_bad_input(tmp_path, fault, words):
    """Before: ``ENV.FORWARD_REWARD_WEIGHT 1e308`` recorded 10 failed morphologies, then exited 3 (a
    ``ConfigError`` raised in training was retried as an environment failure until exit 5)."""
    out = tmp_path / "run"
    node = start(out, "EVO.NUM_PROCESSES", "1", env=dict(ENV, DERL_FAKE_FAULT=fault))
    assert node.wait(timeout=DEADLINE) == 2  # EXIT_CONFIG, as bad input (docs/reference/commands.md)
    log = log_of(out)
    assert f"[worker 0-0] {words}" in log
    assert list((out / "error_metadata").iterdir()) == [] and published(out) == {}
    assert "found a fault of the config (its error line names the key); stopping the node" in log


def test_a_pool_process_killed_while_drawing_the_initial_population_is_no_bad_input(tmp_path):
    out = tmp_path / "run"
    node = start(out, env=dict(ENV, DERL_FAKE_FAULT="pool"))
    assert node.wait(timeout=DEADLINE) == EXIT_ENVIRONMENT
    line = log_of(out).strip().splitlines()[-1]
    assert line.startswith("error: pool process derl-pool-0 died") and "run the same command to resume" in line


def test_a_summary_that_could_not_be_written_is_never_pointed_to(tmp_path, monkeypatch):
    from derl.evolution.coordinator import Coordinator

    coordinator = Coordinator.__new__(Coordinator)

    def full(session):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(coordinator, "_write_summary", full)
    assert coordinator._try_write_summary({}) is False


def test_a_worker_stopped_by_a_signal_of_its_own_is_restarted(tmp_path):
    """Before: a SIGTERM to the worker alone (not the node, no STOP file) ended the node with exit 0, slots
    left unclaimed. Now the worker is restarted like one that died, and the search completes."""
    out = tmp_path / "run"
    coordinator = start(out, "EVO.NUM_PROCESSES", "1")
    wait_for(lambda: (out / "fake_starts").is_dir() and any((out / "fake_starts").iterdir()), "training started")
    worker = next(p for p in psutil.Process(coordinator.pid).children() if "derl.evolution.worker" in p.cmdline())
    worker.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=DEADLINE) == 0, log_of(out)[-3000:]
    assert_complete(out, 12)
    assert "worker 0 stopped though no stop was asked of the node (exit 4)" in log_of(out)


# What grows with the search is read once: a step reads what is new, never the whole folder.
def test_a_step_reads_the_records_published_since_its_last_look_without_listing_a_folder(tmp_path, monkeypatch):
    """Before: every tournament and every publication listed ``metadata/`` (and ``published/``): O(n) per
    publication, O(n^2) in all. Now a step probes the numbers from the lowest it has not seen."""
    from derl.checked_config import load_config
    from derl.evolution.results import PublishedResults

    evo = load_config(None, ["EVO.SEARCH_SPACE_SIZE", "24", "EVO.INIT_POPULATION_SIZE", "4", "EVO.AGING_WINDOW_SIZE",
                             "4", "EVO.SELECTION_CRITERIA", "[__reward__forward]", "EVO.SELECTION_CRITERIA_OBJ",
                             "[-1]"]).EVO
    run = search_run(tmp_path)
    results = PublishedResults(run, evo)
    for name in ("000000", "000001"):
        run.publications.publish(PublishedRecord.from_json(published_record(run, name)))
    results.refresh()  # the first look lists the folders
    assert sorted(results.by_id) == ["000000", "000001"] and results.next_number == 2
    # Number 2 taken, its metadata not written yet (or its taker died).
    gap = PublishedRecord.from_json(published_record(run, "000002"))
    run.publications.publish(PublishedRecord.from_json(published_record(run, "000003")))
    listed = []
    monkeypatch.setattr(run, "names", lambda folder, suffix=".json": listed.append(folder) or [])
    results.refresh_new()
    assert sorted(results.by_id) == ["000000", "000001", "000003"] and results.pending == {2: "000002"}
    run.publications.publish(gap)
    results.refresh_new()
    assert sorted(results.by_id) == ["000000", "000001", "000002", "000003"] and results.pending == {}
    assert results.next_number == 4 and not {"metadata", "published"} & set(listed)  # leases/: a slot's claim
    assert run.publications.take_publication_number("000004", 0, 0, results.next_number) == 4


def test_a_search_whose_init_wait_timeout_is_zero_finishes(tmp_path):
    """Before: ``EVO.INIT_WAIT_TIMEOUT 0`` (other nodes' wait for node 0's drawing) failed node 0's own worker
    waiting for its neighbour's initial morphology: exit 3. Now the workers' wait is bounded by progress."""
    out = tmp_path / "run"
    node = start(out, "EVO.SEARCH_SPACE_SIZE", "6", "EVO.INIT_WAIT_TIMEOUT", "0", iterations=4)
    assert node.wait(timeout=DEADLINE) == 0, log_of(out)[-3000:]
    assert_complete(out, 6)


def test_a_damaged_checkpoint_of_an_unpublished_body_is_set_aside_and_trained_anew(tmp_path):
    """Before: a truncated ``models/<id>.pt`` of a slot in training stopped every resumed worker as an
    environment failure, restart after restart, until the node gave up (exit 5)."""
    out = tmp_path / "run"
    env = dict(ENV, DERL_FAKE_ITERATION_SECONDS="0.3")
    coordinator = start(out, "EVO.NUM_PROCESSES", "1", env=env)
    wait_for(lambda: any(not (out / "metadata" / f"{p.stem}.json").exists() for p in (out / "models").glob("*.pt"))
             if (out / "models").is_dir() else False, "a checkpoint of a body in training")
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=DEADLINE) == 128 + signal.SIGTERM
    damaged = next(p for p in (out / "models").glob("*.pt") if not (out / "metadata" / f"{p.stem}.json").exists())
    damaged.write_text(damaged.read_text()[:5])
    assert start(out).wait(timeout=DEADLINE) == 0, log_of(out)[-3000:]
    assert_complete(out, 12)
    assert len((out / "quarantine" / f"models-{damaged.name}").read_text()) == 5  # the damaged file, set aside
    assert f"{damaged.stem} trains from the start; moved to quarantine/models-{damaged.name}" in log_of(out)
