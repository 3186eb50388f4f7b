"""Numbers in the run folder's names held to their range, and what a hostile user plants beside them.

Each test plants what a damaged or hostile ``OUT_DIR`` may hold
(docs/design/run-folder.md#the-output-folder-is-untrusted-input) and checks that the search goes on and
that status, ``summary.json`` and the report agree.
"""

import json
import subprocess
import sys

import pytest

from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import max_publications, name_problem
from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete, start


def plant(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


@pytest.mark.parametrize("folder, stem, problem", [
    ("slots", "000003", None), ("slots", "000004", "outside the search"), ("slots", "999999999", "outside"),
    ("slots", "0000001", "6 digits"), ("leases", "000003-2", None), ("leases", "000003-02", "not as derl writes"),
    ("leases", "000003-0", "lease 0"), ("leases", "000003-99999999", "at most"), ("leases", "000004-1", "outside"),
    ("published", "00000399", None), ("published", "00000400", "outside"), ("published", "0000001", "8 digits"),
    ("published", "99999999999999999999999", "outside"), ("metadata", "000003-1", None),
    ("metadata", "000004", "outside"), ("error_metadata", "0000003", "as derl writes"),
    ("retired", "000001-01", "as derl writes"), ("workers", "0-1", None),
])
def test_numbers_in_names_are_held_to_the_search(folder, stem, problem):
    found = name_problem(folder, stem, 4)
    assert (found is None) if problem is None else problem in found, found


def test_out_of_range_names_are_never_counted_nor_continued_from(tmp_path, capsys):
    """Before: ``claimed slots: 5`` in a 4-slot search, and the next publication numbered 1e23."""
    out = tmp_path / "run"
    search = RunDir(out, quarantine=True, search_space_size=4)
    search.create()
    for slot in range(2):
        assert search.slots.claim(slot, node=0, worker=0)
    for name in ("slots/999999999.json", "slots/0000003.json", "leases/000009-1.json", "leases/000001-0999.json",
                 "published/99999999999999999999999.json", "published/00000400.json"):
        plant(out / name, {"id": "000001", "node": 0, "worker": 0})
    reader = RunDir(out, skip=True, search_space_size=4)
    assert reader.slots.claimed() == [0, 1]
    assert sorted(p.name for p in (out / "quarantine").iterdir()) == []  # a reader moves nothing
    assert capsys.readouterr().err.count("warning:") == 4  # the slots/ and leases/ names, once each
    assert search.slots.claimed() == [0, 1] and search.slots.num_claimed() == 2
    assert search.publications.take_publication_number("000000", 0, 0) == 0
    assert search.publications.take_publication_number("000001", 0, 0) == 1
    assert sorted(p.name for p in (out / "published").iterdir()) == ["00000000.json", "00000001.json"]
    assert len(list((out / "quarantine").iterdir())) == 6
    assert "outside the search" in capsys.readouterr().err
    assert max_publications(4) == 400


def test_every_publication_number_taken_is_an_error_not_an_overflow(tmp_path):
    run = RunDir(tmp_path, quarantine=True, search_space_size=1)
    run.create()
    for number in range(max_publications(1)):
        plant(tmp_path / "published" / f"{number:08d}.json", {"id": "000000", "node": 0, "worker": 0})
    with pytest.raises(RuntimeError, match="every publication number below 100 is taken"):
        run.publications.take_publication_number("000000", 0, 0)


def tool(*argv):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


def test_a_search_with_planted_numbers_finishes_and_its_counts_agree(tmp_path):
    """Before: the next publication was numbered 1e23, TensorBoard's step overflowed and every coordinator start
    exited 2 (``Value out of range``); status and ``summary.json`` said ``claimed slots: 13`` of 12."""
    from derl.analysis.run import RunView

    out = tmp_path / "run"
    plant(out / "published" / "99999999999999999999999.json", {"id": "000001", "node": 0, "worker": 0})
    plant(out / "slots" / "999999999.json", {"id": "999999999", "slot": 999999999, "attempt": 0, "node": 0,
                                              "worker": 0})
    node = start(out, "TENSORBOARD.ENABLED", "True")
    code = node.wait(timeout=240)
    log = (tmp_path / "run-coordinator.log").read_text()
    assert code == 0, log[-3000:]
    records = assert_complete(out, 12)
    assert max(r["publication"] for r in records.values()) < max_publications(12)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["published"], summary["claimed_slots"], summary["total"]) == (12, 12, 12)
    status = tool("tools/status.py", str(out))
    assert status.returncode == 0, status.stderr
    failed = summary["failed"]  # the fake backend fails a body now and then
    assert f"done: 12/12 (100.0%), failed: {failed}, claimed slots: 12" in status.stdout, status.stdout
    view = RunView(out)
    assert (len(view), view.total, len(view.in_progress()), len(view.run.failures.failed_ids())) == (12, 12, 0, failed)
    again = start(out, log_name="again.log")  # a finished search starts and stops at once, never exit 2
    assert again.wait(timeout=120) == 0, (tmp_path / "run-again.log").read_text()[-3000:]


def node_of(out, *extra):
    return subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", "OUT_DIR", str(out),
                           *extra], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("planted", ["link", "aliases"])
def test_the_coordinator_reads_config_yaml_back_as_status_does(tmp_path, planted):
    """Before: the coordinator followed a ``config.yaml`` linked to a file outside and compared against it
    (its search ran), and an alias bomb there was a MemoryError traceback."""
    from derl.checked_config import load_config
    from derl.evolution.search_config import join_search

    out, outside = tmp_path / "run", tmp_path / "outside.yaml"
    run = RunDir(out)
    run.create()
    join_search(load_config("configs/evo/quick.yml", ["OUT_DIR", str(out)]), run, lambda message: None)
    config = run.config_path()
    if planted == "link":
        outside.write_text(config.read_text())  # the same search: followed, it would pass the comparison
        config.unlink()
        config.symlink_to(outside)
    else:
        config.write_text(config.read_text() + "x: &x [1]\ny: *x\n")
    done = node_of(out)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    reason = "is a symbolic link" if planted == "link" else "anchors and aliases"
    assert reason in done.stderr and "config.yaml" in done.stderr


@pytest.mark.parametrize("age, preparing", [(20, True), (95, False), (400, False)])
def test_a_preparing_beat_silent_for_three_intervals_is_a_stopped_coordinator(tmp_path, age, preparing):
    """Before: after ``kill -9`` of a coordinator drawing the initial population, status said
    ``preparing ..., last heartbeat 95 s ago`` for the whole lease (600 s), though the beat is renewed every 30 s."""
    import os

    from derl.checked_config import load_config
    from derl.evolution.search_config import join_search
    from derl.evolution.status import status_lines

    out = tmp_path / "run"
    run = RunDir(out)
    run.create()
    join_search(load_config("configs/evo/quick.yml", ["OUT_DIR", str(out)]), run, lambda message: None)
    run.workers.beat_preparing(0)
    old = run.filesystem_now() - age
    os.utime(run.workers.preparing_path(0), (old, old))
    text = "\n".join(status_lines(str(out)))
    if preparing:
        assert "  node 0: preparing (drawing the initial population), last heartbeat 20 s ago" in text, text
        assert "state: preparing (node 0 drawing the initial population)" in text, text
    else:
        assert f"  node 0: stopped preparing (drawing the initial population; last heartbeat {age} s ago, it beats " \
               "every 30 s)" in text, text
        assert "state: no worker has started yet and no node is preparing the run" in text, text


def test_a_genome_that_is_not_the_body_trained_is_refused(tmp_path, capsys):
    """Before: a valid genome written over ``genomes/<id>.json`` of a claimed, unpublished slot was published
    with that id while ``xml/<id>.xml`` stayed the body trained (its children then all failed)."""
    run = RunDir(tmp_path, quarantine=True, search_space_size=12)
    run.create()
    genome = {"schema_version": 1, "id": "000004", "parent_id": None, "size": 3}
    run.genomes.write_genome("000004", json.dumps(genome, indent=2), "<mujoco/>\n")
    run.checkpoint_path("000004").write_text("trained on the body of xml/000004.xml\n")
    assert run.genomes.read_genome("000004").data == genome  # as written, whatever its whitespace
    reader = RunDir(tmp_path, skip=True, search_space_size=12)
    run.genomes.genome_path("000004").write_text(json.dumps({**genome, "size": 20000}))
    assert reader.genomes.has_genome("000004") is False and run.genomes.genome_path("000004").exists()
    assert not run.genomes.has_genome("000004")  # quarantined: the body is made anew, from scratch
    assert "is not the body trained" in capsys.readouterr().err
    run.genomes.write_genome("000004", json.dumps(genome), "<mujoco/>\n")
    assert run.genomes.read_genome("000004").data == genome
    assert sorted(p.name for p in (tmp_path / "quarantine").iterdir()) == ["genomes-000004.json", "models-000004.pt"]
    run.genomes.xml_path("000004").write_text("<mujoco/>\n")  # an older derl's MJCF, without the mark
    assert run.genomes.read_genome("000004").data == genome


@pytest.mark.parametrize("limbs", [11, 100_000])
def test_a_search_holds_a_genome_read_back_to_the_design_space(tmp_path, capsys, monkeypatch, limbs):
    """Before: a genome of any size in ``genomes/`` was parsed whole (16 MiB) and trained on; a
    100,000-limb one cost minutes and GB. Now the worker's run folder holds it to the backend's design
    space: over ``LIMB.MAX_LIMBS`` x 4 KiB it is refused unread, past ``LIMB.MAX_LIMBS`` limbs before a
    limb is read; either way quarantined, and the body made anew."""
    import os
    import resource

    from derl.checked_config import load_config
    from derl.evolution.backend import DerlBackend
    from derl.morphology.genome import max_genome_bytes
    from tests.morphology.test_genome_bounds import _huge

    unimal = load_config().unimal
    run = RunDir(tmp_path, quarantine=True, search_space_size=12,
                 genome_limits=DerlBackend().genome_limits(unimal))
    run.create()
    genome = {**_huge("chain", limbs), "id": "000004"}
    run.genomes.xml_path("000004").write_text("<mujoco/>\n")
    run.genomes.genome_path("000004").write_text(json.dumps(genome))  # planted while the search was stopped
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    read, os_read = [0], os.read

    def counted(fd: int, size: int) -> bytes:
        chunk = os_read(fd, size)
        read[0] += len(chunk)
        return chunk

    monkeypatch.setattr(os, "read", counted)
    assert run.genomes.has_genome("000004") is False
    monkeypatch.undo()
    assert read[0] <= max_genome_bytes(unimal) + 1  # the work, counted in bytes read: never the whole 16 MiB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 300 * 1024  # KiB
    warning = capsys.readouterr().err
    assert ("is larger than" if limbs > 1000 else "more than LIMB.MAX_LIMBS (10)") in warning
    assert (tmp_path / "quarantine" / "genomes-000004.json").exists()
