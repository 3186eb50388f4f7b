"""The shared-filesystem protocol with real processes and real signals.

Training is replaced by ``tests/evo_fake_backend.py`` (selected through
``DERL_EVO_BACKEND``), so each run takes seconds; everything else is the real
``evo_single_proc.py``: coordinator, worker processes, claims, publication.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from derl.evolution.folder.run_dir import RunDir
from derl.evolution.population import parse_id
from derl.evolution.process import EXIT_STOPPED
from tests.conftest import DEFAULT_CFG

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, DERL_EVO_BACKEND="tests.evo_fake_backend:FakeBackend", PYTHONPATH=str(ROOT))
# One PPO iteration is 4096 env steps by default: 10 iterations of 0.05 s per morphology.
ITERATIONS = 10


def start(out_dir: Path, *extra: str, iterations: int = ITERATIONS, log_name: str = "coordinator.log",
          env: dict[str, str] | None = None):
    args = [
        "--cfg", str(DEFAULT_CFG), "OUT_DIR", str(out_dir), "EVO.NUM_PROCESSES", "2",
        "EVO.INIT_POPULATION_SIZE", "4",
        "EVO.SEARCH_SPACE_SIZE", "12", "EVO.AGING_WINDOW_SIZE", "6", "PPO.MAX_STATE_ACTION_PAIRS",
        str(iterations * 4096), "EVO.SELECTION_CRITERIA", "[__reward__forward]",
        "EVO.SELECTION_CRITERIA_OBJ", "[-1]", *extra,
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir.parent / f"{out_dir.name}-{log_name}", "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "evo_single_proc.py", *args], cwd=ROOT, env=env or ENV, stdout=log,
                            stderr=subprocess.STDOUT)


def start_until_published(out_dir: Path, count: int, **kwargs) -> subprocess.Popen:
    """``start``, once ``count`` morphologies are published."""
    coordinator = start(out_dir, **kwargs)
    while len(published(out_dir)) < count if (out_dir / "metadata").is_dir() else True:
        time.sleep(0.1)
    return coordinator


def published(out_dir: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out_dir / "metadata").glob("*.json")}


def assert_complete(out_dir: Path, size: int, lost: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Exactly ``size`` valid results, each with its files, one per slot, nothing staged left over; the
    files in ``lost`` (damaged after their record was published) may be missing: published means published."""
    records = published(out_dir)
    assert len(records) == size
    assert sorted(r["slot"] for r in records.values()) == list(range(size))
    for morphology_id, record in records.items():
        assert record["id"] == morphology_id
        for path in record["files"].values():
            assert (out_dir / path).is_file() or path in lost, path
        assert record["lineage"].endswith(morphology_id)
        assert record["device"] == "cpu"  # the learner device each morphology trained on
    assert list((out_dir / "metadata").iterdir()) == list((out_dir / "metadata").glob("*.json"))
    numbers = [r["publication"] for r in records.values()]
    assert len(set(numbers)) == size  # publication numbers are never shared
    for record in records.values():
        taken = json.loads((out_dir / "published" / f"{record['publication']:08d}.json").read_text())
        assert taken["id"] == record["id"]
    return records


def starts(out_dir: Path) -> Counter:
    return Counter(p.name.rsplit(".", 1)[0] for p in (out_dir / "fake_starts").iterdir())


def worker_pids(out_dir: Path) -> list[int]:
    pids = []
    for path in (out_dir / "workers").glob("*.json"):
        try:
            pids.append(json.loads(path.read_text())["pid"])
        except (OSError, ValueError):
            pass
    return pids


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_run_publishes_exactly_the_search_space_and_records_failures(tmp_path):
    out = tmp_path / "run"
    assert start(out).wait(timeout=120) == 0
    records = assert_complete(out, 12)
    failed = sorted(p.stem for p in (out / "error_metadata").glob("*.json"))
    assert failed == ["000005"]  # the fake backend fails slot 5 once; 000005-1 replaced it
    assert "000005-1" in records
    failure = json.loads((out / "error_metadata" / "000005.json").read_text())
    assert failure["reason"].startswith("RuntimeError")
    assert all(count == 1 for count in starts(out).values())
    children = [r for r in records.values() if r["slot"] >= 4 and r["parent_id"]]
    assert len(children) == 8
    for child in children:
        assert child["lineage"] == f"{records[child['parent_id']]['lineage']}/{child['id']}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["published"] == 12 and summary["best"]["id"] in records
    status = subprocess.run([sys.executable, "tools/status.py", str(out)], cwd=ROOT, capture_output=True,
                            text=True)
    assert status.returncode == 0 and "done: 12/12" in status.stdout and "state: done" in status.stdout
    # `tensorboard --logdir OUT_DIR` finds the search's curves: a point per publication number.
    curves = EventAccumulator(str(out / "tensorboard" / "search"))
    curves.Reload()
    assert {"search/fitness", "search/best", "search/aging_window_mean", "search/return"} <= set(
        curves.Tags()["scalars"])
    steps = sorted(event.step for event in curves.Scalars("search/fitness"))
    assert steps == sorted(r["publication"] for r in records.values())


@pytest.mark.slow  # 13-23 s: kept out of make test's 10-minute budget
def test_random_search_draws_every_slot_like_the_initial_population(tmp_path):
    out = tmp_path / "run"
    assert start(out, "EVO.IS_EVO", "false").wait(timeout=120) == 0
    records = assert_complete(out, 12)
    assert json.loads((out / "init_population.json").read_text())["ids"] == [f"{k:06d}" for k in range(12)]
    assert all(r["parent_id"] is None and r["mutation"] is None for r in records.values())
    # The fake initial population gives slot k the size 1 + k; slot 5 fails once and is redrawn.
    assert all(r["return"] == 1.0 + r["slot"] for r in records.values() if r["id"] != "000005-1")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["initial_population_size"] == 12 and summary["search"] == "random search"
    assert "node 0: random search (EVO.IS_EVO false): 12 morphologies" in (tmp_path / "run-coordinator.log").read_text()


def forge_record(out: Path, forged: str = "999999") -> None:
    """The hostile-folder probe's forgery: a complete record of a slot no worker claimed (``999999``,
    beyond the search), with its files, its own publication number and an unbeatable fitness."""
    genome = {"schema_version": 1, "id": forged, "parent_id": None, "mutation": None, "size": 1e300}
    files = {"genomes": json.dumps(genome), "xml": "<mujoco/>\n", "models": '{"iteration": 10}', "metrics": "{}\n"}
    for folder, suffix in (("genomes", ".json"), ("xml", ".xml"), ("models", ".pt"), ("metrics", ".jsonl")):
        (out / folder).mkdir(exist_ok=True)
        (out / folder / f"{forged}{suffix}").write_text(files[folder])
    (out / "published" / "00000999.json").write_text(json.dumps({"id": forged, "node": 0, "worker": 0}))
    (out / "metadata" / f"{forged}.json").write_text(json.dumps({
        "id": forged, "parent_id": None, "lineage": forged, "mutation": None, "slot": int(forged), "attempt": 0,
        "seed": 1, "node": 0, "worker": 0, "device": "cpu", "return": 1e300, "__reward__forward": 1e300,
        "env_steps": 1000, "iterations": 10, "wall_time": 1.0, "steps_per_sec": 1000.0,
        "files": {"genome": f"genomes/{forged}.json", "xml": f"xml/{forged}.xml", "checkpoint": f"models/{forged}.pt",
                  "metrics": f"metrics/{forged}.jsonl"},
        "published_at": 1.7e9, "publication": 999}))


def test_a_forged_record_is_never_best_nor_a_parent_nor_counted(tmp_path, capsys):
    """Planted as the search starts, the forged record of slot 999999 became the best, parented children
    and made status print 13/12; now it is quarantined at its first read and the run is its own."""
    from derl.analysis.run import RunView
    from derl.evolution.status import status_lines

    out = tmp_path / "run"
    coordinator = start(out, "EVO.SEARCH_SPACE_SIZE", "8", iterations=5)
    while not ((out / "config.yaml").exists() and (out / "published").is_dir()):
        time.sleep(0.01)
    forge_record(out)
    assert coordinator.wait(timeout=120) == 0
    records = assert_complete(out, 8)  # 999999 is not among them
    assert not [r["id"] for r in records.values() if "999999" in r["lineage"]]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["published"] == 8 and summary["best"]["id"] in records
    assert (out / "quarantine" / "metadata-999999.json").exists()
    log = (tmp_path / "run-coordinator.log").read_text()
    assert "metadata/999999.json is in slot 999999, outside the search (EVO.SEARCH_SPACE_SIZE 8)" in log
    # Planted again in the finished run: the read-only tools skip it with one line and never count it.
    forge_record(out)
    lines = status_lines(str(out))
    assert lines[2].startswith("done: 8/8 (100.0%)") and "999999" not in "\n".join(lines)
    assert [line for line in capsys.readouterr().err.splitlines() if "999999" in line] == [
        f"warning: {out}/metadata/999999.json is in slot 999999, outside the search (EVO.SEARCH_SPACE_SIZE 8); "
        "skipped"]
    view = RunView(out)
    assert len(view) == 8 and list(view.unreadable) == [str(out / "metadata" / "999999.json")]


def test_sigkilled_workers_are_restarted_and_nothing_partial_is_visible(tmp_path):
    out = tmp_path / "run"
    errors, finished = [], threading.Event()

    def read_metadata_continuously():
        while not finished.is_set():
            for path in list((out / "metadata").glob("*")):
                try:
                    json.loads(path.read_text())
                except FileNotFoundError:
                    pass
                except ValueError as err:
                    errors.append(f"{path.name}: {err}")

    coordinator = start(out, "EVO.SEARCH_SPACE_SIZE", "16", iterations=20)
    while not (out / "metadata").is_dir():
        time.sleep(0.05)
    reader = threading.Thread(target=read_metadata_continuously)
    reader.start()
    rng = random.Random(0)
    kills = 0
    try:
        while kills < 5 and coordinator.poll() is None:
            time.sleep(rng.uniform(0.3, 1.2))
            pids = [pid for pid in worker_pids(out) if alive(pid)]
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills += 1
        assert coordinator.wait(timeout=120) == 0
    finally:
        finished.set()
        reader.join()
    assert kills >= 3 and not errors
    assert_complete(out, 16)
    log = (tmp_path / "run-coordinator.log").read_text()
    assert "died (exit -9)" in log


def test_stopped_or_killed_coordinator_leaves_no_orphans_and_resumes(tmp_path):
    out = tmp_path / "run"
    coordinator = start(out, iterations=30)
    while len(published(out)) < 2 if (out / "metadata").is_dir() else True:
        time.sleep(0.1)
    pids = worker_pids(out)
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=120) == 128 + signal.SIGTERM
    assert not any(alive(pid) for pid in pids)
    before = published(out)

    coordinator = start(out, iterations=30)
    while len(published(out)) < len(before) + 2:
        time.sleep(0.1)
    pids = worker_pids(out)
    coordinator.kill()  # SIGKILL: the workers learn it from PR_SET_PDEATHSIG
    coordinator.wait()
    deadline = time.monotonic() + 120  # generous for a busy machine: an orphan never dies
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)

    assert start(out, iterations=30).wait(timeout=120) == 0
    records = assert_complete(out, 12)
    assert all(records[morphology_id] == record for morphology_id, record in before.items())
    resumed = [m for m in starts(out) if starts(out)[m] > 1]
    assert resumed, "an interrupted morphology should have been resumed from its checkpoint"
    run = RunDir(out)  # each under a new lease: a process of the old session would yield it
    assert all(run.slots.read(records[m]["slot"]).lease >= 1 for m in resumed if m in records)


def _training(out_dir: Path, worker: str) -> bool:
    try:
        return json.loads((out_dir / "workers" / f"{worker}.json").read_text())["status"] == "training"
    except (OSError, ValueError, KeyError):
        return False


@pytest.mark.slow  # ~25-30 s: kept out of make test's 10-minute budget
def test_restart_with_fewer_workers_adopts_their_claimed_slots(tmp_path):
    """Worker 0-2 holds a claimed slot when the node stops; the node comes back with 2 workers
    (as NUM_PROCESSES 0 may decide) and worker 0 (2 mod 2) must finish that slot."""
    out = tmp_path / "run"
    coordinator = start(out, "EVO.NUM_PROCESSES", "3", iterations=40)
    while not _training(out, "0-2"):
        time.sleep(0.05)
    orphan = json.loads((out / "workers" / "0-2.json").read_text())["slot"]
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=120) == 128 + signal.SIGTERM
    assert json.loads((out / "slots" / f"{orphan:06d}.json").read_text())["worker"] == 2

    assert start(out, "EVO.NUM_PROCESSES", "2", iterations=40).wait(timeout=120) == 0
    records = assert_complete(out, 12)
    adopted = [r for r in records.values() if r["slot"] == orphan]
    assert [r["worker"] for r in adopted] == [0]
    assert "adopting slot" in (tmp_path / "run-coordinator.log").read_text()


@pytest.mark.slow  # 13-23 s: kept out of make test's 10-minute budget
def test_two_nodes_share_one_search_without_collisions(tmp_path):
    out = tmp_path / "run"
    common = ("NUM_NODES", "2", "EVO.INIT_POPULATION_SIZE", "6", "EVO.SEARCH_SPACE_SIZE", "14")
    node1 = start(out, "NODE_ID", "1", *common, iterations=40, log_name="node1.log")
    # Node 0 starts once node 1 says it waits for node 0's initial population: a sleep of 0.5 s was too short
    # for a busy machine to start node 1, which then found the population made and never waited.
    node1_log, waited = tmp_path / "run-node1.log", time.monotonic() + 300
    while "waiting for node 0" not in node1_log.read_text() and node1.poll() is None and time.monotonic() < waited:
        time.sleep(0.1)
    node0 = start(out, "NODE_ID", "0", *common, iterations=40, log_name="node0.log")
    assert node0.wait(timeout=300) == 0 and node1.wait(timeout=300) == 0
    records = assert_complete(out, 14)
    assert all(count == 1 for count in starts(out).values())  # nothing trained twice
    # Both nodes ran and published into the one search; which node trained which slot is the scheduler's race
    # (on busy cores node 1's workers may train every initial slot before node 0's start), not asserted.
    assert {records[m]["node"] for m in records} <= {0, 1}
    assert sorted(p.name for p in (out / "manifest").iterdir()) == ["0.json", "1.json"]
    assert "waiting for node 0" in node1_log.read_text()


def test_status_of_an_interrupted_run_says_stopped_and_how_to_resume(tmp_path):
    """After Ctrl-C no worker runs: status says so and how to resume, with no ETA (it printed the
    last measured rate and "ETA 0.01 h" with 0 workers and no state line)."""
    out = tmp_path / "run"
    coordinator = start_until_published(out, 2, iterations=20)
    coordinator.send_signal(signal.SIGINT)
    assert coordinator.wait(timeout=60) == 128 + signal.SIGINT

    def status() -> str:
        done = subprocess.run([sys.executable, "tools/status.py", str(out)], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = status()
    assert "running workers: 0" in text and "ETA" not in text, text
    assert "state: stopped" in text and "rerun the same command to resume" in text, text
    (out / "STOP").touch()
    assert "STOP file present: delete it and rerun the same command to resume" in status()


@pytest.mark.slow  # ~25-30 s: kept out of make test's 10-minute budget
def test_stop_file_stops_workers_and_the_run_resumes_once_it_is_deleted(tmp_path):
    out = tmp_path / "run"
    coordinator = start_until_published(out, 2, iterations=20)
    (out / "STOP").touch()
    assert coordinator.wait(timeout=60) == EXIT_STOPPED  # not 0: the search is not complete
    assert len(published(out)) < 12
    refused = subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", str(DEFAULT_CFG), "OUT_DIR", str(out)],
                             cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert refused.returncode == 2 and "STOP exists" in refused.stderr
    (out / "STOP").unlink()
    assert start(out, iterations=20).wait(timeout=120) == 0
    assert_complete(out, 12)


@pytest.mark.slow  # 13-23 s: kept out of make test's 10-minute budget
def test_foreign_and_corrupt_files_are_quarantined_and_the_run_completes(tmp_path):
    out = tmp_path / "run"
    coordinator = start_until_published(out, 4, iterations=20)
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=120) == 128 + signal.SIGTERM
    victim = sorted(published(out))[0]
    seven_done = any(parse_id(m)[0] == 7 for m in published(out))
    truncated = out / "metadata" / f"{victim}.json"
    truncated.write_text(truncated.read_text()[:40])
    (out / "metadata" / "notes.txt").write_text("a stray file\n")
    (out / "slots" / "000007.json").write_text("{}")

    assert start(out, iterations=20, log_name="rerun.log").wait(timeout=120) == 0
    records = assert_complete(out, 12)
    moved = sorted(p.name for p in (out / "quarantine").iterdir())
    assert moved == [f"metadata-{victim}.json", "metadata-notes.txt"]
    log = (tmp_path / "run-rerun.log").read_text()
    for name in (f"metadata/{victim}.json", "metadata/notes.txt"):
        assert sum(f"{name} " in line and "moved to quarantine/" in line for line in log.splitlines()) == 1
    # A damaged claim stays (the lease decides who owns a slot) and is superseded by a later lease.
    assert (out / "slots" / "000007.json").read_text() == "{}"
    assert seven_done or not RunDir(out, skip=True).slots.read(7).damaged
    assert records[victim]["slot"] == parse_id(victim)[0]  # republished from its finished checkpoint


def _two_nodes_training(out: Path, iterations: int) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Nodes 0 and 1 of a 14-morphology search with a 3 s lease, once a worker of node 1 trains."""
    common = ("NUM_NODES", "2", "EVO.INIT_POPULATION_SIZE", "6", "EVO.SEARCH_SPACE_SIZE", "14",
              "EVO.LEASE_SECONDS", "3")
    node0 = start(out, "NODE_ID", "0", *common, iterations=iterations, log_name="node0.log")
    node1 = start(out, "NODE_ID", "1", *common, iterations=iterations, log_name="node1.log")
    while not any(_training(out, f"1-{w}") for w in (0, 1)):
        time.sleep(0.05)
    return node0, node1


def _process_tree(process: subprocess.Popen) -> list[int]:
    """``process`` and every process below it."""
    return [process.pid, *(p.pid for p in psutil.Process(process.pid).children(recursive=True))]


@pytest.mark.slow
def test_a_dead_node_loses_its_slots_to_the_survivor(tmp_path):
    """Node 1 is SIGKILLed for good (coordinator and workers) mid-run; with a 3 s lease, node 0 takes
    its claimed slots over, resumes them from their checkpoints and finishes the whole search."""
    out = tmp_path / "run"
    node0, node1 = _two_nodes_training(out, iterations=40)
    time.sleep(1.0)  # some iterations into its slots: checkpoints exist
    held = {json.loads((out / "workers" / f"1-{w}.json").read_text())["slot"] for w in (0, 1)} - {None}
    node1_tree = _process_tree(node1)
    for pid in node1_tree:
        os.kill(pid, signal.SIGKILL)
    node1.wait()
    assert held

    assert node0.wait(timeout=180) == 0
    records = assert_complete(out, 14)  # one result per slot: nothing published twice
    for slot in held:
        record = next(r for r in records.values() if r["slot"] == slot)
        assert record["node"] == 0
        assert starts(out)[record["id"]] >= 2  # node 1 started it, node 0 resumed it
    log = (tmp_path / "run-node0.log").read_text()
    assert sum("took over slot" in line for line in log.splitlines()) >= len(held)
    assert "last beat" in log
    status = subprocess.run([sys.executable, "tools/status.py", str(out)], cwd=ROOT, capture_output=True,
                            text=True)
    node_lines = {line.split(":")[0].strip(): line for line in status.stdout.splitlines() if "node " in line}
    assert "STALE" in node_lines["node 1"] and "STALE" not in node_lines["node 0"], status.stdout


@pytest.mark.slow
def test_a_paused_node_that_comes_back_yields_the_slots_it_lost(tmp_path):
    """Node 1 is SIGSTOPped past its lease; node 0 takes its slots over and publishes one; SIGCONT:
    node 1 drops them without publishing or writing their files, and the search still ends with
    one result per slot."""
    out = tmp_path / "run"
    node0, node1 = _two_nodes_training(out, iterations=60)
    time.sleep(0.5)
    node1_tree = _process_tree(node1)
    for pid in node1_tree:
        os.kill(pid, signal.SIGSTOP)
    log0 = tmp_path / "run-node0.log"
    deadline = time.monotonic() + 60
    while "took over slot" not in log0.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    first_taken = log0.read_text().split("took over slot ")[1].split("(")[1].split(")")[0]
    while f"published {first_taken} " not in log0.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)  # node 1 wakes after its taker has published: it must not touch the files
    for pid in node1_tree:
        os.kill(pid, signal.SIGCONT)
    assert node0.wait(timeout=180) == 0 and node1.wait(timeout=180) == 0
    records = assert_complete(out, 14)
    taken = [int(line.split("took over slot ")[1].split()[0]) for line in log0.read_text().splitlines()
             if "took over slot" in line]
    assert taken and all(next(r for r in records.values() if r["slot"] == s)["node"] == 0 for s in taken)
    assert "yielding it without publishing" in (tmp_path / "run-node1.log").read_text()
    for record in records.values():  # node 1, woken, wrote nothing over its takers' checkpoints
        assert json.loads((out / record["files"]["checkpoint"]).read_text()) == {"iteration": 60}, record["id"]


def test_a_corrupt_claim_of_a_slot_in_training_is_never_trained_twice(tmp_path):
    """Slot 5's claim is truncated while worker 0-x trains it and the other worker runs out of work:
    the lease, not the claim's content, decides ownership, so nobody else trains slot 5 while its owner
    beats, and the model and metrics published belong to the one training (before, the idle worker
    quarantined the claim, claimed the slot as lease 0 and trained it too)."""
    out = tmp_path / "run"
    env = dict(ENV, DERL_FAKE_FAILING_ATTEMPTS="0")
    coordinator = start(out, "EVO.SEARCH_SPACE_SIZE", "6", iterations=20, env=env)
    claim = out / "slots" / "000005.json"
    deadline = time.monotonic() + 60
    while not (claim.exists() and "000005" in starts_or_none(out)) and time.monotonic() < deadline:
        time.sleep(0.05)
    claim.write_text(claim.read_text()[:25])
    assert coordinator.wait(timeout=120) == 0
    records = assert_complete(out, 6)
    assert all(count == 1 for count in starts(out).values()), starts(out)
    assert records["000005"]["worker"] in (0, 1)
    assert not (out / "quarantine").exists() or not list((out / "quarantine").iterdir())


def starts_or_none(out_dir: Path) -> Counter:
    return starts(out_dir) if (out_dir / "fake_starts").is_dir() else Counter()


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL])
def test_the_initial_population_pool_dies_with_its_coordinator(tmp_path, sig):
    """Node 0 builds the initial population in a process pool (real backend, many candidates): SIGTERM
    exits 143 at once, and after SIGKILL of the coordinator none of its pool processes is left
    (before, they and the resource tracker slept for good, and SIGTERM exited 130)."""
    from derl.evolution.node_size import usable_cores

    if usable_cores() < 2:
        pytest.skip("one core: the initial population is built without a pool")
    env = {key: value for key, value in ENV.items() if key != "DERL_EVO_BACKEND"}
    out = tmp_path / "run"
    coordinator = start(out, "EVO.INIT_POPULATION_SIZE", "5000", "EVO.SEARCH_SPACE_SIZE", "5000", env=env)
    # generous: with a process spinning on each core the coordinator logged the pool's start after 90 s
    deadline = time.monotonic() + 300
    pool = []
    while len(pool) < 2 and time.monotonic() < deadline and coordinator.poll() is None:
        time.sleep(0.2)
        try:
            pool = [p for p in psutil.Process(coordinator.pid).children(recursive=True)
                    if "multiprocessing" in " ".join(p.cmdline())]
        except psutil.NoSuchProcess:
            break
    assert len(pool) >= 2, "no pool started"
    coordinator.send_signal(sig)
    assert coordinator.wait(timeout=120) == (128 + sig if sig == signal.SIGTERM else -signal.SIGKILL)
    deadline = time.monotonic() + 120  # generous for a busy machine: an orphan never dies
    while any(alive(p.pid) for p in pool) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p.pid) for p in pool)
