"""A node's coordinator: its heartbeat while it prepares the run, and the private folders dead ones leave.

Real coordinators (``evo_single_proc.py`` with ``tests/evo_fake_backend.py``) killed with SIGKILL, and
the pure functions behind ``tools/status.py`` and the takeover on files written as a coordinator writes them.
"""

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from derl.checked_config import load_config
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.shared import Identity
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.lease import takeover_reason
from derl.evolution.private_folder import remove_dead_private_folders
from derl.evolution.results import PublishedResults
from derl.evolution.status import node_lines, progress_lines, status_lines
from tests.evolution.test_evolution_protocol import ENV, ROOT, start, start_until_published


def _status(out: Path) -> str:
    done = subprocess.run([sys.executable, "tools/status.py", str(out)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"no {what} after {timeout:g} s"
        time.sleep(0.05)
    return found


def test_status_says_a_node_is_preparing_and_a_sigkilled_one_no_longer(tmp_path):
    """While node 0 drew the initial population, status said "no worker has started yet", as for a run
    nobody runs; now its coordinator beats and status says it prepares, until the beat is stale."""
    out, hold = tmp_path / "run", tmp_path / "hold"
    hold.touch()  # node 0 draws the initial population until the file is gone
    coordinator = start(out, env=dict(ENV, DERL_FAKE_HOLD_INIT=str(hold), TMPDIR=str(tmp_path)))
    try:
        beat = _wait_for(lambda: list((out / "nodes").glob("0-*.preparing")), "preparing heartbeat")[0]
        text = _status(out)
        assert "state: preparing (node 0 drawing the initial population)" in text, text
        age = re.search(r"^  node 0: preparing \(drawing the initial population\), last heartbeat (\d+) s ago$",
                        text, re.MULTILINE)
        assert age and int(age[1]) <= 30, text  # one beat per 30 s at most
    finally:
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=60)
    assert beat.exists()  # SIGKILL: the beat stays, and goes stale
    old = beat.stat().st_mtime - 601  # older than EVO.LEASE_SECONDS (600)
    os.utime(beat, (old, old))
    text = _status(out)
    assert "state: no worker has started yet and no node is preparing the run" in text, text
    assert "node 0" not in text and "preparing (" not in text, text


def _preparing_run(tmp_path: Path) -> tuple[RunDir, float]:
    """Node 1's worker 0 holds slot 4 and beat 700 s ago; node 1's coordinator prepares (beats now)."""
    run = RunDir(tmp_path, identity=Identity("host-b", 77, "b" * 16))
    run.create()
    run.slots.claim(4, node=1, worker=0)
    run.workers.write_state(WorkerStatus(node=1, worker=0, slot=4, id="000004", status="training"))
    run.workers.beat(1, 0)
    old = run.filesystem_now() - 700
    os.utime(run.workers.heartbeat_path(1, 0), (old, old))
    os.utime(tmp_path / "slots" / "000004.json", (old, old))
    return run, run.workers.beat_preparing(1)


def test_a_preparing_coordinator_never_holds_its_workers_slots(tmp_path):
    run, now = _preparing_run(tmp_path)
    claim = run.slots.read(4)
    assert takeover_reason(run, 4, claim, now, 600.0) == "its owner 1-0 last beat 700 s ago (EVO.LEASE_SECONDS 600)"
    cfg = load_config(None, {"EVO.LEASE_SECONDS": 600})
    [line] = node_lines(cfg.EVO, run, PublishedResults(run, cfg.EVO))
    assert re.fullmatch(r"  node 1: last heartbeat 70\d s ago, holds slots 4; workers 0: training 000004 STALE "
                        r"\(older than EVO.LEASE_SECONDS 600: its slots are taken over\); its coordinator is "
                        r"preparing \(waiting for node 0's initial population\), last heartbeat \d s ago", line), line


def test_only_regular_files_named_for_a_node_are_preparing_beats(tmp_path):
    run, beat = _preparing_run(tmp_path)
    (tmp_path / "nodes" / "2-planted.preparing").mkdir()
    (tmp_path / "nodes" / "3-link.preparing").symlink_to(run.workers.preparing_path(1))
    (tmp_path / "nodes" / "notes.txt").touch()
    assert run.workers.preparing_beats() == {1: beat}
    run.workers.end_preparing(1)
    assert run.workers.preparing_beats() == {}


def test_the_state_line_names_each_preparing_node_and_only_while_no_worker_runs():
    def state(running: int, preparing: list[int], ever_started: bool = False) -> str:
        return progress_lines(0, 10, running, ever_started, preparing, False, {}, 600.0)[0]

    assert state(0, [0]) == "state: preparing (node 0 drawing the initial population)"
    assert state(0, [0, 2], ever_started=True) == \
        "state: preparing (node 0 drawing the initial population; node 2 waiting for node 0's initial population)"
    assert state(0, []).startswith("state: no worker has started yet and no node is preparing the run; ")
    assert state(3, [1]) == "state: running (3 workers)"


_HOLD_PRIVATE_FOLDER = """
import sys, time
from derl.evolution.private_folder import private_folder
with private_folder(int(sys.argv[1])) as folder:
    print(folder, flush=True)
    time.sleep(120)
"""


def _holder(tmp: Path, node: int) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_PRIVATE_FOLDER, str(node)], cwd=ROOT,
                            env=dict(ENV, TMPDIR=str(tmp)), stdout=subprocess.PIPE, text=True)
    return proc, Path(proc.stdout.readline().strip())


def test_only_the_private_folders_of_dead_coordinators_of_this_user_are_removed(tmp_path, monkeypatch):
    tmp, elsewhere = tmp_path / "tmp", tmp_path / "elsewhere"
    tmp.mkdir()
    elsewhere.mkdir()
    (dead, dead_folder), (live, live_folder) = _holder(tmp, 3), _holder(tmp, 4)
    try:
        assert dead_folder.name.startswith(f"derl-node3-{dead.pid}-") and (dead_folder / "lock").exists()
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=60)
        kept = {
            # Its pid is gone from this host but its lock is held: a coordinator in another pid namespace.
            "locked": tmp / f"derl-node5-{dead.pid}-locked00",
            "no lock yet": tmp / f"derl-node6-{dead.pid}-nolock00",
            "other prefix": tmp / f"derl-bench-evolve-{dead.pid}-abcdefgh",
        }
        for folder in kept.values():
            folder.mkdir()
            (folder / "lock").touch()
        (kept["no lock yet"] / "lock").unlink()
        (elsewhere / "lock").touch()
        link = tmp / f"derl-node7-{dead.pid}-alink000"
        link.symlink_to(elsewhere)
        file = tmp / f"derl-node8-{dead.pid}-afile000"
        file.touch()
        fd = os.open(kept["locked"] / "lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with monkeypatch.context() as patch:  # another user's folders are never touched
                patch.setattr(os, "getuid", lambda: os.geteuid() + 1)
                assert remove_dead_private_folders(tmp) == []
            assert remove_dead_private_folders(tmp) == [dead_folder]
        finally:
            os.close(fd)
        assert not dead_folder.exists()
        assert (live_folder / "config.yaml").exists() or (live_folder / "lock").exists()
        assert all(folder.is_dir() for folder in kept.values())
        assert link.is_symlink() and (elsewhere / "lock").exists() and file.is_file()
        assert remove_dead_private_folders(tmp) == [kept["locked"]]  # its lock released: now it is a dead one's
    finally:
        live.kill()
        live.wait(timeout=60)


def test_a_sigkilled_nodes_private_folder_is_removed_by_the_next_coordinator(tmp_path):
    """SIGKILL skipped the cleanup of the folder holding the node's config: a cluster killing nodes on time
    limits filled /tmp with them. The next coordinator on the host removes it."""
    out, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    env = dict(ENV, TMPDIR=str(tmp))
    first = start_until_published(out, 1, iterations=20, env=env)
    assert list((out / "nodes").iterdir()) == []  # the preparing beat ends as the workers start
    assert "state: running (" in "\n".join(status_lines(str(out)))
    [left] = list(tmp.iterdir())
    assert (left / "config.yaml").is_file()
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert left.is_dir()  # SIGKILL skips the cleanup
    second = start(out, iterations=20, env=env)
    try:
        _wait_for(lambda: not left.exists() and list(tmp.iterdir()), "new private folder in place of the dead one's")
    finally:
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=60) in (0, 128 + signal.SIGINT)  # 0: it finished the search first
    assert list(tmp.iterdir()) == []  # its own, removed on its way out
    assert f"removed {left}, the private folder of a dead coordinator" in (tmp_path / "run-coordinator.log").read_text()
