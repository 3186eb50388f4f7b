"""Failures classified (docs/design/run-folder.md#failures): whose fault a failure is, the restart
back-off, and a full disk during training with real processes (fault injected through
``tests/full_disk/sitecustomize.py``)."""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mujoco
import pytest
import torch

from derl.checked_config import load_config
from derl.config import ConfigError
from derl.evolution.coordinator import RETRY_SECONDS, Coordinator
from derl.evolution.failures import Streak, classify, describe, gives_up, next_streak, restart_delay
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.process import EXIT_ENVIRONMENT, EXIT_FATAL
from derl.evolution.results import PublishedResults
from derl.evolution.step import lineage
from derl.fileio.reads import JsonFileError
from derl.morphology.genome import GenomeError
from derl.ppo.checkpoint import CheckpointError
from derl.ppo.device import DeviceError
from tests.evo_fake_backend import _genome
from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete, published, start
from tests.evolution.test_evolution_run import tiny_search


def _raised(err: BaseException, context: BaseException, cause: BaseException | None = None,
            from_none: bool = False) -> BaseException:
    """``err`` raised while handling ``context``: plainly, ``from cause`` or ``from None``."""
    try:
        try:
            raise context
        except BaseException:  # noqa: BLE001
            if from_none:
                raise err from None
            if cause is not None:
                raise err from cause
            raise err  # noqa: B904 - the implicit chain is what is tested
    except BaseException as raised:  # noqa: BLE001 - the exception with its __cause__ and __context__ set
        return raised


class _WarpCodegenError(RuntimeError):
    """Stands for an exception class of warp's (the module is what ``classify`` reads)."""


_WarpCodegenError.__module__ = "warp._src.codegen"

# What CUDA and Warp raise on a GPU (messages as warp 1.19 and torch word them): the device's failures.
DEVICE_FAILURES = [
    RuntimeError("Warp error: unknown stream"),
    RuntimeError("Warp CUDA error 900: operation not permitted when stream is capturing (in function "
                 "wp_cuda_graph_end_capture, warp/native/warp.cu:3021)"),
    RuntimeError("CUDA graph capture failed. operation would make the legacy stream depend on a capturing "
                 "blocking stream"),
    RuntimeError("Graph capture is not active on this stream"),
    RuntimeError("CUDA error 700 detected on device cuda:0: an illegal memory access was encountered"),
    RuntimeError("cudaErrorStreamCaptureUnsupported"),
    RuntimeError("Failed to allocate 8589934592 bytes on device 'cuda:0'"),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    _WarpCodegenError("Error while parsing function \"kernel\""),
    _raised(ValueError("training summary is not finite"), RuntimeError("Warp CUDA error 2: out of memory")),
]


@pytest.mark.parametrize("err", DEVICE_FAILURES, ids=lambda err: str(err)[:40])
def test_a_cuda_or_warp_error_is_the_devices_failure_not_the_morphologys(err):
    assert classify(err) == "environment"


@pytest.mark.parametrize("err, cause", [
    (OSError(errno.ENOSPC, "No space left on device"), "environment"),
    (OSError(errno.EIO, "Input/output error"), "environment"),
    (FileNotFoundError("genomes/000001.json"), "environment"),
    (MemoryError(), "config"),  # never retried: a restart asks for the same memory
    (ModuleNotFoundError("No module named 'mujoco'"), "environment"),
    (ConfigError("unknown key"), "config"),  # a fault of the config found while training: exit 2, never retried
    (DeviceError("DEVICE cuda requested but CUDA is not available on this machine"), "environment"),
    (RuntimeError("CUDA error: out of memory"), "environment"),
    (AssertionError("Torch not compiled with CUDA enabled"), "environment"),
    (CheckpointError("models/000001.pt: not a readable checkpoint (UnpicklingError)"), "environment"),
    (JsonFileError("metrics/000001.jsonl", "not valid JSON"), "environment"),
    (EOFError(), "environment"),  # an env subprocess that vanished (OOM killer)
    (_raised(RuntimeError("write failed"), KeyError(), cause=OSError(errno.ENOSPC, "full")), "environment"),
    (_raised(RuntimeError("while handling"), OSError(errno.EIO, "I/O")), "environment"),
    # A parent genome lost to quarantine/ leaves the pool; none left is the folder's problem, not the child's.
    (FileNotFoundError("no parent: no published morphology of /run has a readable genome"), "environment"),
    (ValueError("training summary is not finite: {'return': nan}"), "morphology"),
    (ValueError("XML Error: size 0 of capsule"), "morphology"),
    (GenomeError("genome g: limb group [0] radius must be a positive number"), "morphology"),
    (mujoco.FatalError("mj_stackAlloc: insufficient memory"), "morphology"),
    (FloatingPointError("overflow"), "morphology"),
    (RuntimeError("injected MuJoCo failure"), "morphology"),
    (TypeError("unsupported operand"), "bug"),
    (KeyError("limb"), "bug"),
    (NotImplementedError(), "bug"),
])
def test_only_the_morphologys_own_failures_count_against_its_slot(err, cause):
    assert classify(err) == cause


def test_describe_is_one_line():
    assert describe(OSError(errno.ENOSPC, "No space left on device", "/out/models/x.pt")) == (
        "OSError: [Errno 28] No space left on device: '/out/models/x.pt'")
    assert describe(RuntimeError("env subprocess failed:\nTraceback ...")) == "RuntimeError: env subprocess failed:"
    assert describe(KeyError()) == "KeyError"


def test_restart_delay_doubles_from_one_second_up_to_its_cap():
    assert [restart_delay(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert [restart_delay(n, first=0.5, cap=3) for n in (1, 2, 3, 4)] == [0.5, 1, 2, 3]


def test_a_streak_grows_while_runs_are_short_and_gives_up_after_the_limit():
    limit = 600.0
    streak = next_streak(None, now=1000.0, ran_seconds=5000.0, healthy_seconds=limit)
    assert streak == Streak(1, 1000.0)
    # Each restart dies within seconds: the streak keeps its start, the delays add up.
    now = 1000.0
    for failures in range(2, 12):
        now += restart_delay(failures - 1) + 2.0
        streak = next_streak(streak, now, ran_seconds=2.0, healthy_seconds=limit)
        assert streak == Streak(failures, 1000.0)
    assert now - 1000.0 < limit and not gives_up(streak, now, limit)
    assert gives_up(streak, 1000.0 + limit, limit)
    # A run that lasted the whole limit was healthy: its failure starts a new streak.
    assert next_streak(streak, now + limit, ran_seconds=limit, healthy_seconds=limit) == Streak(1, now + limit)


def _in_training(out: Path) -> dict[str, int]:
    """Iteration of each checkpoint whose morphology is not published yet."""
    done = published(out)
    found = {}
    for path in (out / "models").glob("*.pt"):
        try:
            found[path.stem] = json.loads(path.read_text())["iteration"]
        except (OSError, ValueError):
            pass
    return {key: value for key, value in found.items() if key not in done}


class InjectedFullDisk:
    """ENOSPC from every fsync under ``out`` while a flag file exists (``tests/full_disk/sitecustomize.py``)."""

    def __init__(self, tmp_path: Path):
        self.out, self.flag = tmp_path / "run", tmp_path / "disk-full"
        self.env = dict(ENV, DERL_TEST_FULL_DISK=str(self.flag),
                        PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "full_disk"), ENV["PYTHONPATH"]]))

    def fill(self) -> None:
        self.flag.write_text(str(self.out))

    def free(self) -> None:
        self.flag.unlink()

    def close(self) -> None:
        pass


class TmpfsFullDisk:
    """A real full disk: ``out`` is a 16 MB tmpfs (needs mount rights), filled up by a filler file."""

    def __init__(self, tmp_path: Path):
        self.out, self.env = tmp_path / "disk", ENV
        self.out.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(self.out)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        self.filler = self.out / "filler"

    def fill(self) -> None:
        with open(self.filler, "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC

    def free(self) -> None:
        self.filler.unlink()

    def close(self) -> None:
        subprocess.run(["umount", "--lazy", str(self.out)], check=True)  # lazy: a failed test may leave a process


@pytest.mark.slow  # 20-40 s on 2 busy cores
@pytest.mark.parametrize("disk", [InjectedFullDisk, TmpfsFullDisk])
def test_a_full_disk_costs_no_attempt_and_loses_nothing(tmp_path, disk):
    """Real processes (fake training): the disk fills while two workers train. Each stops with one line,
    the coordinator backs off and stops the node (exit 5) after EVO.LEASE_SECONDS of failures; nothing
    partial is left, no attempt was counted and every checkpoint is intact. Once space is freed, a
    rerun resumes those checkpoints and completes the search with every slot at its first attempt."""
    disk = disk(tmp_path)
    try:
        _full_disk_then_rerun(tmp_path, disk)
    finally:
        disk.close()


def _full_disk_then_rerun(tmp_path: Path, disk: InjectedFullDisk | TmpfsFullDisk) -> None:
    out = disk.out
    small = ("EVO.LEASE_SECONDS", "4", "EVO.SEARCH_SPACE_SIZE", "6")  # slot 5, a child, fails once by design
    node = start(out, *small, iterations=20, env=disk.env)
    try:
        while not any(iteration >= 3 for iteration in _in_training(out).values()):
            time.sleep(0.05)
        disk.fill()
        assert node.wait(timeout=120) == EXIT_ENVIRONMENT
    finally:
        if node.poll() is None:  # a failed assertion: stop the node (and its workers) before unmounting
            node.terminate()
            node.wait()
    log = (tmp_path / f"{out.name}-coordinator.log").read_text()
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if "error: OSError: [Errno 28] No space left on device" in line]
    assert errors and all("environment failure" in line and str(out) in line for line in errors)  # names the file
    assert "restarting it in 1 s" in log and "stopping node 0" in log

    assert list((out / "tmp").iterdir()) == []  # no staged file left
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no partial checkpoint
    reasons = [json.loads(p.read_text())["reason"] for p in (out / "error_metadata").glob("*.json")]
    assert all("injected MuJoCo failure" in reason for reason in reasons)  # the full disk counted nothing
    claims = {claim["slot"]: claim["attempt"] for claim in map(json.loads, map(Path.read_text,
                                                                                (out / "slots").glob("*.json")))}
    assert all(attempt == 0 for slot, attempt in claims.items() if slot != 5) and claims.get(5, 0) <= 1
    interrupted = _in_training(out)  # parses: every checkpoint intact
    assert interrupted and all(iteration > 0 for iteration in interrupted.values())

    disk.free()
    assert start(out, *small, iterations=20, env=disk.env, log_name="rerun.log").wait(timeout=120) == 0
    records = assert_complete(out, 6)
    assert {r["slot"]: r["attempt"] for r in records.values()} == {s: int(s == 5) for s in range(6)}
    for morphology_id, iteration in interrupted.items():
        resumed_from = [int(p.read_text()) for p in (out / "fake_starts").glob(f"{morphology_id}.*")]
        assert max(resumed_from) >= iteration  # resumed from its checkpoint, not from scratch
    assert list((out / "tmp").iterdir()) == []


@pytest.mark.slow  # 20-30 s on 2 busy cores
def test_a_slot_whose_bodies_keep_failing_stops_the_node_and_a_rerun_tries_the_next_attempts(tmp_path):
    """Slot 5's first 12 morphologies fail by themselves: after 10 in a row the node stops (exit 3,
    one line); the rerun (as a node taking the slot over would) starts a new count, and attempt 12
    is published."""
    out = tmp_path / "run"
    env = dict(ENV, DERL_FAKE_FAILING_ATTEMPTS="12")
    small = ("EVO.SEARCH_SPACE_SIZE", "6")
    assert start(out, *small, iterations=2, env=env).wait(timeout=120) == EXIT_FATAL
    log = (tmp_path / "run-coordinator.log").read_text()
    assert "slot 5: 10 morphologies failed in a row (attempts 0-9" in log and "Traceback" not in log
    failed = {p.stem for p in (out / "error_metadata").glob("*.json")}
    assert failed == {"000005", *(f"000005-{attempt}" for attempt in range(1, 10))}
    assert start(out, *small, iterations=2, env=env, log_name="rerun.log").wait(timeout=120) == 0
    records = assert_complete(out, 6)
    assert next(r for r in records.values() if r["slot"] == 5)["id"] == "000005-12"


@pytest.mark.slow
def test_a_full_disk_during_real_training_keeps_every_checkpoint_and_a_rerun_completes(tmp_path):
    """The same with real PPO (derl.ppo checkpoints every iteration): the node stops with exit 5, every
    checkpoint loads, nothing counted as failed; after freeing space every morphology is published at
    attempt 0 with its whole budget and an unbroken learning curve."""
    out, flag = tmp_path / "run", tmp_path / "disk-full"
    env = dict(os.environ, DERL_TEST_FULL_DISK=str(flag),
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "full_disk"), str(ROOT)]))
    command = [sys.executable, "evo_single_proc.py",
               *tiny_search(out, 4, 512 * 12, "CHECKPOINT_PERIOD", "1", "EVO.LEASE_SECONDS", "4")]
    with open(tmp_path / "node.log", "w") as log:
        node = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        while not list((out / "models").glob("*.pt")) if (out / "models").is_dir() else True:
            time.sleep(0.1)
        flag.write_text(str(out))
        assert node.wait(timeout=300) == EXIT_ENVIRONMENT
    text = (tmp_path / "node.log").read_text()
    assert "No space left on device" in text and "Traceback" not in text, text[-3000:]
    assert list((out / "tmp").iterdir()) == [] and not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert list((out / "error_metadata").iterdir()) == []
    checkpoints = {p.stem: torch.load(p, weights_only=True)["iteration"] for p in (out / "models").glob("*.pt")}
    assert checkpoints and all(iteration >= 1 for iteration in checkpoints.values())

    flag.unlink()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (out / "metadata").glob("*.json")]
    assert sorted((r["slot"], r["attempt"]) for r in records) == [(slot, 0) for slot in range(4)]
    assert all(r["env_steps"] == 512 * 12 for r in records)
    for record in records:
        lines = (out / record["files"]["metrics"]).read_text().splitlines()
        assert [json.loads(line)["iteration"] for line in lines] == list(range(1, 13))


def test_a_transient_error_postpones_a_restart_instead_of_stopping_the_node(tmp_path, monkeypatch):
    # ESTALE from the STOP file's check, or EAGAIN from fork: the node's healthy workers keep running.
    coordinator = Coordinator(load_config(None, {"OUT_DIR": str(tmp_path)}).EVO, RunDir(tmp_path), [], node=0,
                              tensorboard=True)
    started = []
    stop_errors = iter([OSError(errno.ESTALE, "Stale file handle")])
    start_errors = iter([OSError(errno.EAGAIN, "Resource temporarily unavailable")])

    def stop_requested():
        if error := next(stop_errors, None):
            raise error
        return False

    def start_worker(worker):
        if error := next(start_errors, None):
            raise error
        started.append(worker)

    monkeypatch.setattr(coordinator.run, "stop_requested", stop_requested)
    monkeypatch.setattr(coordinator, "_start", start_worker)
    coordinator.restart_at = {0: 0.0}  # worker 0's back-off is over
    for _ in range(2):  # the STOP file's check fails, then fork
        before = time.monotonic()
        coordinator._restart_due()
        assert started == [] and coordinator.restart_at[0] >= before + RETRY_SECONDS
        coordinator.restart_at[0] = 0.0  # the retry is due
    coordinator._restart_due()
    assert started == [0] and coordinator.restart_at == {}


def test_a_child_of_a_quarantined_parent_is_published_with_its_lineage_from_the_genomes(tmp_path):
    # The parent's metadata went to quarantine/ after it was chosen: the child's finished result must
    # still be published, its lineage read from the genomes' parent ids.
    run = RunDir(tmp_path)
    run.create()
    for genome_id, parent_id in [("000003", None), ("000007", "000003"), ("000010", "000007")]:
        run.genomes.write_genome(genome_id, _genome(genome_id, parent_id, None, 1.0), "<mujoco/>")
    results = PublishedResults(run, load_config(None, []).EVO)
    assert lineage(run, results, "000010", "000007") == "000003/000007/000010"
    assert lineage(run, results, "000003", None) == "000003"


@pytest.mark.parametrize("err, words", [
    (OSError(28, "No space left on device", "/shared/run/tmp/x"),
     "OSError: [Errno 28] No space left on device: '/shared/run/tmp/x' (an environment failure: this node's"),
    (TypeError("unsupported operand"), "TypeError: unsupported operand (a bug in derl (traceback above)"),
    (ValueError("selection criterion"), "ValueError: selection criterion (a morphology's error raised outside"),
])
def test_a_workers_last_error_line_is_worded_by_its_class(monkeypatch, capsys, err, words):
    from derl.evolution import worker

    def fail(*args):
        raise err

    monkeypatch.setattr(worker, "_run_worker", fail)
    assert worker.run_worker(load_config(None, []), 0) == worker.EXIT_ENVIRONMENT
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"[worker 0-0] error: {words}") and "failure, not the morphology's" not in line


@pytest.mark.parametrize("err", [MemoryError("Unable to allocate 462 GiB"),
                                 RuntimeError("training failed").with_traceback(None)])
def test_a_workers_memory_error_stops_the_node_and_is_never_retried(monkeypatch, capsys, err):
    from derl.evolution import worker

    if isinstance(err, RuntimeError):  # a MemoryError under another error counts too
        err.__cause__ = MemoryError("Unable to allocate 462 GiB")

    def fail(*args):
        raise err

    monkeypatch.setattr(worker, "_run_worker", fail)
    assert worker.run_worker(load_config(None, []), 0) == worker.EXIT_FATAL
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[worker 0-0] fatal: ") and "more memory than this node" in lines[0]


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    from derl.fileio.writes import write_json

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"No space left on device: '.*/a.json'"):
        write_json(tmp_path / "a.json", {"x": 1})
    assert list(tmp_path.iterdir()) == []
