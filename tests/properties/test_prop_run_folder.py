"""Every run-folder file kind, attacked: a search stopped half-way (the fake backend's, seconds) has its files
damaged, linked out, turned into FIFOs or folders, dated in the future or in 1970, and names planted at the ends
of their folder's range (``derl.evolution.folder.schema``'s limits); then the search is started again.

The files attacked are the stopped run's own, listed, and the names planted come from the schema's declared
limits, so a new file kind or limit is attacked without a test of its own. The invariants:

- a search that can finish finishes (its resume ends within a generous timeout that counts as failure), with
  exactly one result per slot (a damaged file is quarantined; only a damaged ``config.yaml`` may stop it, in one
  line naming it, exit 2), never a traceback;
- no published record, model or fitness is lost or altered (the bytes of each one published before, unless the
  attack damaged that very file), and ``tools/status.py`` agrees;
- nothing outside the run folder changes (a link planted in it points at a sentinel folder).
"""

import hashlib
import inspect
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from derl.evolution.folder import schema
from tests.attacks import DAMAGES, TEN_YEARS, damage
from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete, published, start
from tests.properties.declarations import config_keys, examples

pytestmark = pytest.mark.fuzz

SIZE = 8
SEARCH = ("EVO.SEARCH_SPACE_SIZE", str(SIZE), "NUM_NODES", "2")
# Names at the ends of their folder's range (schema.name_problem): the last in range, the first past it.
PLANTED = {
    "published": [f"{schema.max_publications(SIZE) - 1:08d}.json", f"{schema.max_publications(SIZE):08d}.json"],
    "slots": [f"{SIZE - 1:06d}.json", f"{SIZE:06d}.json"],
    "leases": [f"{SIZE - 1:06d}-{schema.MAX_LEASES}.json", f"{SIZE - 1:06d}-{schema.MAX_LEASES + 1}.json",
               f"{SIZE - 1:06d}-1.json"],
    "metadata": [f"{SIZE - 1:06d}-{schema.MAX_ATTEMPTS}.json", f"{SIZE:06d}.json"],
}
# A search per example: a failing one is reported as drawn, not shrunk through dozens more searches.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
RESUME_TIMEOUT = 240  # seconds: a search that cannot finish runs on; a healthy resume here takes seconds


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A search of ``SIZE`` slots on two nodes, of which node 0 alone runs (node 1 may come, or a file of its may
    be planted), stopped (SIGTERM) once 3 morphologies are published."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    coordinator = start(out, *SEARCH)
    deadline = time.monotonic() + 600
    while (len(published(out)) if (out / "metadata").is_dir() else 0) < 3 and coordinator.poll() is None:
        assert time.monotonic() < deadline, "the search published nothing"
        time.sleep(0.1)
    coordinator.send_signal(signal.SIGTERM)
    coordinator.wait(timeout=600)
    return out


def _files(run: Path) -> list[str]:
    skipped = ("tensorboard", "fake_starts")  # TensorBoard's own files; the fake backend's log of its starts
    return sorted(str(p.relative_to(run)) for p in run.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.parts[len(run.parts)] not in skipped)


def _plant(path: Path, like: Path | None) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(like.read_bytes() if like is not None and like.is_file() else b"{}")


def _hold(run: Path, slot: int, ahead: float) -> None:
    """A worker of the other node (node 1, which is not started) holds ``slot``: its claim, its state saying it
    works on the slot, and its heartbeat dated ``ahead`` seconds in the future (a node whose clock runs ahead)."""
    claim = json.loads(next((run / "slots").glob("*.json")).read_text())
    morphology_id = f"{slot:06d}"
    (run / "slots" / f"{morphology_id}.json").write_text(json.dumps(
        {**claim, "slot": slot, "lease": 0, "id": morphology_id, "attempt": 0, "node": 1, "worker": 0, "pid": 1,
         "host": "elsewhere", "token": "f" * 16}))
    state = json.loads((run / "workers" / "0-0.json").read_text())
    when = time.time() + ahead
    (run / "workers" / "1-0.json").write_text(json.dumps(
        {**state, "node": 1, "worker": 0, "slot": slot, "id": morphology_id, "status": "training", "pid": 1,
         "updated": when}))
    for suffix in (".alive", ".lock"):
        (run / "workers" / f"1-0{suffix}").write_bytes(b"")
        os.utime(run / "workers" / f"1-0{suffix}", (when, when))


@st.composite
def attacks(draw, files: list[str]) -> list[tuple[str, str]]:
    """One or two attacks: (file of the run, damage), (planted name, the file of its folder it copies) or the
    last slot held by a worker whose heartbeat is dated in the future."""
    chosen = []
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.integers(0, 5)) == 0:
            chosen.append(("hold", f"slots/{SIZE - 1:06d}.json", draw(st.sampled_from([3600.0, TEN_YEARS]))))
        elif draw(st.integers(0, 2)) == 0:
            folder = draw(st.sampled_from(sorted(PLANTED)))
            name = draw(st.sampled_from(PLANTED[folder]))
            like = next((f for f in files if f.startswith(f"{folder}/")), None)
            chosen.append(("plant", f"{folder}/{name}", like))
        else:
            chosen.append(("damage", draw(st.sampled_from(files)), draw(st.sampled_from(DAMAGES))))
    return chosen


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None


def _published_files(run: Path) -> dict[str, str | None]:
    """Each published record's metadata and model, by path, with a digest of its bytes."""
    found = {}
    for record in published(run).values():
        for relative in [f"metadata/{record['id']}.json", *record["files"].values()]:
            if relative.startswith(("metadata/", "models/")):
                found[relative] = _digest(run / relative)
    return found


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): _digest(p) for p in sorted(folder.rglob("*"))}


def _complete(run: Path, damaged: frozenset[str]) -> None:
    """``assert_complete``, a published file the attack damaged allowed lost (quarantined: published means
    published, its record stays); an older ``assert_complete`` (8222025's) takes no such files."""
    if "lost" in inspect.signature(assert_complete).parameters:
        assert_complete(run, SIZE, lost=damaged)
    else:
        assert_complete(run, SIZE)


def _kill_tree(process: subprocess.Popen) -> None:
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in [*children, process]:
        try:
            child.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    process.wait()


@settings(max_examples=examples(1, 1 / 100), phases=NO_SHRINK)
@given(data=st.data())
def test_a_stopped_search_with_attacked_files_finishes_keeping_what_it_published(stopped_run, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("attacked")
    run, sentinel = work / "run", work / "sentinel"
    shutil.copytree(stopped_run, run, symlinks=True)
    sentinel.mkdir()
    (sentinel / "victim.json").write_text('{"id": "000003", "slot": 3}')
    chosen = data.draw(attacks(_files(run)), label="attacks")
    processes = data.draw(st.sampled_from(["1", "2"]), label="EVO.NUM_PROCESSES")
    before, outside = _published_files(run), _snapshot(sentinel)
    damaged = set()
    for kind, relative, how in chosen:
        if kind == "plant":
            _plant(run / relative, run / how if how else None)
        elif kind == "hold":
            if not (run / relative).exists():
                _hold(run, SIZE - 1, how)
        else:
            if not (run / relative).exists() and not (run / relative).is_symlink():
                continue
            damage(run / relative, how, sentinel / "victim.json")
            damaged.add(relative)
    resume = start(run, *SEARCH, "EVO.NUM_PROCESSES", processes, log_name="resume.log")
    try:
        code = resume.wait(timeout=RESUME_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_tree(resume)
        code = None
    log = (work / "run-resume.log").read_text(errors="replace")
    assert code is not None, f"{chosen}: the search did not finish within {RESUME_TIMEOUT} s: {log[-1500:]}"
    assert "Traceback" not in log, (chosen, log[-3000:])
    assert _snapshot(sentinel) == outside, chosen
    after = _published_files(run)
    for relative, digest in before.items():
        if relative not in damaged:
            assert after.get(relative) == digest, f"{chosen}: published {relative} lost or altered"
    if code == 0:
        _complete(run, frozenset(damaged))
        status = subprocess.run([sys.executable, "tools/status.py", str(run)], cwd=ROOT, env=ENV,
                                capture_output=True, text=True, timeout=300)
        assert status.returncode == 0 and f"done: {SIZE}/{SIZE}" in status.stdout, (chosen, status.stdout[-2000:],
                                                                                  status.stderr[-2000:])
    else:  # only a run whose config.yaml is gone may be refused: a damaged file is quarantined, the search goes on
        assert code == 2 and "config.yaml" in damaged, (chosen, code, log[-3000:])
        assert "config.yaml" in log.strip().splitlines()[-1], (chosen, log[-3000:])


# The search's keys of time (``EVO.*_SECONDS``, ``EVO.*_TIMEOUT``), from their declarations.
TIME_KEYS = [key for key in config_keys() if key.section == "EVO" and key.name.endswith(("SECONDS", "TIMEOUT"))]


@pytest.mark.parametrize("key", TIME_KEYS, ids=[key.name for key in TIME_KEYS])
@settings(max_examples=examples(1, 1 / 400), phases=NO_SHRINK)
@given(data=st.data())
def test_a_search_with_a_key_of_time_at_its_bound_finishes_or_is_refused_in_one_line(key, data, tmp_path_factory):
    """A lease of a millisecond made two workers take a slot from each other for ever: a value the config
    accepts is one a search finishes with."""
    value = data.draw(st.sampled_from(_time_edges(key)), label="value")
    run = tmp_path_factory.mktemp("time") / "run"
    search = start(run, "EVO.SEARCH_SPACE_SIZE", "6", key.name, value, iterations=40)  # 2 s a body: time to overlap
    try:
        code = search.wait(timeout=RESUME_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_tree(search)
        code = None
    log = (run.parent / "run-coordinator.log").read_text(errors="replace")
    assert code is not None, f"{key.name} {value}: the search did not finish within {RESUME_TIMEOUT} s: {log[-1500:]}"
    assert "Traceback" not in log, (key.name, value, log[-3000:])
    if code == 0:
        assert_complete(run, 6)
    else:
        assert code == 2 and key.name in log.strip().splitlines()[-1], (key.name, value, code, log[-3000:])


def _time_edges(key) -> list[str]:
    """The ends of ``key``'s range, or values a user may try where it declares none."""
    if key.allowed is None:
        return ["0.001", "0.01", "1"]
    return [repr(key.allowed.low) if not key.allowed.low_open else repr(math.nextafter(key.allowed.low, math.inf)),
            "0.001"]
