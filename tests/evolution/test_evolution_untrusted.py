"""The run folder as untrusted input: crafted ids, planted links and FIFOs, records that lie.

Each test plants what a damaged or hostile shared folder may hold and checks that derl touches
nothing outside ``OUT_DIR``, never blocks, and keeps every bad record away from the search.
"""

import json
import os

import pytest

from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import RecordRules, metadata_problem, morphology_files
from derl.evolution.folder.worker_store import WorkerStatus
from derl.evolution.lease import takeover_reason
from derl.evolution.population import parse_id

RULES = RecordRules(search_space_size=24, criteria=("__reward__forward",))


@pytest.fixture
def sentinel(tmp_path):
    """A folder outside the run with a file in it; tests assert both stay byte for byte."""
    folder = tmp_path / "sentinel"
    folder.mkdir()
    (folder / "victim.json").write_text('{"id": "victim"}')
    return folder


def snapshot(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def search_run(tmp_path):
    run = RunDir(tmp_path / "run", quarantine=True)
    run.create()
    return run


def test_an_id_from_a_record_never_becomes_a_path_outside_the_folder(tmp_path, sentinel):
    run = search_run(tmp_path)
    before = snapshot(sentinel)
    for build in (run.genomes.genome_path, run.genomes.xml_path, run.publications.metadata_path, run.checkpoint_path,
                  run.metrics_path, run.failures.error_path, run.video_path):
        with pytest.raises(ValueError, match="not a morphology id"):
            build("../../sentinel/victim")
    with pytest.raises(ValueError, match="not a morphology id"):
        run.publications.metadata_path("000001\n")
    # A genome naming such a parent is itself invalid: quarantined, never followed.
    run.genomes.write_genome("000004", json.dumps({"id": "000004", "parent_id": "../../sentinel/victim"}), "<mujoco/>")
    assert not run.genomes.has_genome("000004")
    with pytest.raises(ValueError, match="is not a file of"):
        run.quarantine(run.root / "genomes" / ".." / ".." / "sentinel" / "victim.json", "crafted")
    assert snapshot(sentinel) == before
    assert [p.name for p in (run.root / "quarantine").iterdir()] == ["genomes-000004.json"]


def test_planted_links_are_never_followed(tmp_path, sentinel):
    from derl.evolution.process import try_worker_lock

    run = search_run(tmp_path)
    before = snapshot(sentinel)
    (run.root / "workers" / "0-0.alive").symlink_to(sentinel / "victim.json")
    (run.root / "workers" / "0-0.lock").symlink_to(sentinel / "created-by-derl")
    (run.root / "workers" / "0-0.json").symlink_to(sentinel / "victim.json")
    run.workers.beat(0, 0)
    os.close(try_worker_lock(run, 0, 0))
    assert run.workers.read_state(0, 0) is None
    assert snapshot(sentinel) == before
    for name in ("0-0.alive", "0-0.lock"):  # the links moved aside, regular files in their place
        assert (run.root / "workers" / name).is_file() and not (run.root / "workers" / name).is_symlink()
    assert sorted(p.name for p in (run.root / "quarantine").iterdir()) == [
        "workers-0-0.alive", "workers-0-0.json", "workers-0-0.lock"]
    assert all(p.is_symlink() for p in (run.root / "quarantine").iterdir())


def test_a_quarantine_folder_that_is_a_link_is_refused(tmp_path, sentinel):
    run = RunDir(tmp_path / "run", quarantine=True)
    run.root.mkdir()
    (run.root / "quarantine").symlink_to(sentinel)
    with pytest.raises(OSError, match="quarantine is not a folder"):
        run.create()
    assert sorted(os.listdir(run.root)) == ["quarantine"]  # nothing made before the check
    (run.root / "metadata").mkdir()
    (run.root / "metadata" / "000001.json").write_text("[]")
    with pytest.raises(OSError, match="quarantine is not a folder"):
        run.publications.read_metadata("000001", RULES)
    assert (run.root / "metadata" / "000001.json").exists() and sorted(os.listdir(sentinel)) == ["victim.json"]


def test_a_fifo_or_folder_where_a_record_belongs_is_quarantined_at_once(tmp_path):
    run = search_run(tmp_path)
    os.mkfifo(run.root / "metadata" / "000007.json")
    (run.root / "metadata" / "000008.json").mkdir()
    os.mkfifo(run.root / "summary.json")
    assert run.publications.read_metadata("000007", RULES) is None
    assert run.publications.read_metadata("000008", RULES) is None
    assert run.read_summary() is None
    assert sorted(p.name for p in (run.root / "quarantine").iterdir()) == [
        "metadata-000007.json", "metadata-000008.json", "summary.json"]


def published_record(run, morphology_id, **fields):
    """A finished morphology's files, its slot's claim, its publication number and a valid record
    (``fields`` override)."""
    for relative in morphology_files(morphology_id).values():
        (run.root / relative).write_text("stand-in\n")
    slot, attempt = parse_id(morphology_id)
    run.slots.claim(slot, node=0, worker=0, attempt=attempt)
    number = run.publications.take_publication_number(morphology_id, 0, 0)
    return {"id": morphology_id, "parent_id": None, "lineage": morphology_id, "mutation": None, "slot": slot,
            "attempt": attempt, "seed": 1, "node": 0, "worker": 0, "device": "cpu", "__reward__forward": 2.0,
            "env_steps": 100, "iterations": 1, "wall_time": 1.0, "steps_per_sec": 100.0,
            "files": morphology_files(morphology_id), "published_at": 1.7e9, "publication": number, **fields}


@pytest.mark.parametrize("fields, reason", [
    ({"__reward__forward": "abc"}, "has __reward__forward 'abc', expected a finite number"),
    ({"__reward__forward": None}, "has __reward__forward None, expected a finite number"),
    ({"wall_time": -1}, "has wall_time -1, expected a finite number >= 0"),
    ({"parent_id": "../../victim"}, "has parent_id '../../victim', expected another morphology's id"),
    ({"lineage": "000009/000003"}, "has lineage '000009/000003'"),
    ({"files": {"genome": "../../victim.json"}}, "lists files"),
    ({"publication": True}, "has no publication number"),
])
def test_a_record_that_lies_is_refused(tmp_path, fields, reason):
    run = search_run(tmp_path)
    assert reason in metadata_problem(published_record(run, "000003", **fields), "000003", RULES)


def test_a_planted_record_or_a_reused_publication_number_is_quarantined(tmp_path, capsys):
    run = search_run(tmp_path)
    run.publications.publish(PublishedRecord.from_json(published_record(run, "000000")))
    planted = {"id": "000001", "slot": 1, "attempt": 0, "lineage": "000001", "publication": 0,
               "__reward__forward": 1e300, "files": morphology_files("000001")}
    (run.root / "metadata" / "000001.json").write_text(json.dumps(planted))  # no files, number 0 is 000000's
    record = published_record(run, "000002")
    os.unlink(run.root / "models" / "000002.pt")
    run.publications.publish(PublishedRecord.from_json(record))
    assert run.publications.read_metadata("000000", RULES).publication == 0
    assert run.publications.read_metadata("000001", RULES) is None
    # Published means published: a listed file lost later never unpublishes the record (one warning).
    assert run.publications.read_metadata("000002", RULES).id == "000002"
    err = capsys.readouterr().err
    assert "has publication 0, which published/00000000.json gives to '000000'" in err
    assert "models/000002.pt is missing; 000002 stays published" in err


def test_a_record_its_slot_never_held_is_quarantined(tmp_path, capsys):
    """A complete record of slot 999999 (files, its own publication number) became the best and a
    parent, and counted towards the end of the search. A record counts only if its slot is one of
    the search's and the slot's current claim (``slots/`` or its latest lease) names it."""
    run = search_run(tmp_path)
    for name in ("000000", "999999", "000005-1"):
        run.publications.publish(PublishedRecord.from_json(published_record(run, name, slot=parse_id(name)[0])))
    run.slots.replace(run.slots.read(5), 0, node=0, worker=0)  # slot 5 holds 000005
    record = published_record(run, "000004")
    os.unlink(run.root / "slots" / "000004.json")
    run.publications.publish(PublishedRecord.from_json(record))
    for name, taker in (("000006", "000006-2"), ("000008", "000008")):  # slots taken over by another worker
        record = published_record(run, name)
        run.slots.take_over(run.slots.read(parse_id(name)[0]), parse_id(taker)[1], node=1, worker=0)
        run.publications.publish(PublishedRecord.from_json(record))
    record = published_record(run, "000007")
    (run.root / "slots" / "000007.json").write_text("{}")
    run.publications.publish(PublishedRecord.from_json(record))
    accepted = [name for name in sorted(run.publications.published_ids())
                if run.publications.read_metadata(name, RULES) is not None]
    # The taker of slot 8 holds the same morphology; slot 7's damaged claim names nobody, refutes nothing.
    assert accepted == ["000000", "000007", "000008"]
    err = capsys.readouterr().err
    for reason in ("999999.json is in slot 999999, outside the search (EVO.SEARCH_SPACE_SIZE 24)",
                   "000004.json is in slot 4, which was never claimed (no slots/000004.json)",
                   "000005-1.json is in slot 5, whose claim slots/000005.json names 000005",
                   "000006.json is in slot 6, whose claim leases/000006-1.json names 000006-2"):
        assert f"{reason}; moved to quarantine/metadata-" in err
    assert len(list((run.root / "quarantine").iterdir())) == 4


def test_a_worker_state_of_the_wrong_type_is_quarantined_and_memory_estimated_without_it(tmp_path):
    from derl.evolution.node_size import DEFAULT_WORKER_MEMORY_BYTES, worker_memory_estimate

    run = search_run(tmp_path)
    (run.root / "workers" / "0-0.json").write_text(json.dumps({"node": 0, "worker": 0, "peak_rss_bytes": "x"}))
    (run.root / "workers" / "0-1.json").write_text(json.dumps({"node": 0, "worker": 1, "slot": "../x"}))
    with pytest.raises(ValueError, match="has slot '../x'"):  # derl never writes one: only a valid state is built
        WorkerStatus(node=0, worker=1, slot="../x")
    assert worker_memory_estimate(run, 0) == (DEFAULT_WORKER_MEMORY_BYTES, "default until workers have been measured")
    assert sorted(p.name for p in (run.root / "quarantine").iterdir()) == ["workers-0-0.json", "workers-0-1.json"]


def test_a_damaged_claim_is_kept_while_a_worker_on_its_slot_beats(tmp_path):
    """The lease decides ownership: a truncated claim of a slot whose owner heartbeats is never handed
    to a second worker; once nobody working on it has beaten for the lease, it is taken over."""
    run = search_run(tmp_path)
    run.slots.claim(2, node=0, worker=1)
    run.workers.write_state(WorkerStatus(node=0, worker=1, slot=2, id="000002", status="training"))
    beat = run.workers.beat(0, 1)
    path = run.root / "slots" / "000002.json"
    path.write_text(path.read_text()[:20])  # truncated while worker 0-1 trains
    claim = run.slots.read(2)
    assert claim.damaged.startswith("not valid JSON") and claim.lease == 0 and path.exists()
    assert takeover_reason(run, 2, claim, now=beat + 5, lease_seconds=10) is None
    assert "no other worker on slot 2 beat" in takeover_reason(run, 2, claim, now=beat + 20, lease_seconds=10)
    # Worker 0-1 itself, restarted, resumes it: no other worker is on the slot.
    assert takeover_reason(run, 2, claim, now=beat + 5, lease_seconds=10, me=(0, 1)) is not None
    assert run.slots.take_over(claim, 0, node=1, worker=0)
    assert run.slots.taken_over(2, 0) and run.slots.read(2).node == 1


def test_status_skips_a_fifo_a_folder_and_deep_nesting_in_one_line_each(tmp_path, capsys):
    """A FIFO named metadata/000007.json blocked status.py for good; a folder of that name was a
    traceback; 200 KB of [[[ a RecursionError. Now each is one warning line and the status is shown."""
    import signal

    from derl.checked_config import load_config
    from derl.config import dump_config
    from derl.evolution.status import status_lines

    run = search_run(tmp_path)
    run.config_path().write_text(dump_config(load_config(None, [])))
    os.mkfifo(run.root / "metadata" / "000007.json")
    (run.root / "metadata" / "000008.json").mkdir()
    (run.root / "workers" / "0-0.json").write_text("[" * 200_000)
    signal.alarm(20)  # a hang fails the test instead of the suite
    try:
        lines = status_lines(str(run.root))
    finally:
        signal.alarm(0)
    assert lines[2].startswith("done: 0/")
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 3 and all(line.startswith("warning: ") and "skipped" in line for line in warnings)
    assert os.path.exists(run.root / "metadata" / "000007.json")  # a read-only tool moves nothing


def test_a_folder_of_the_layout_that_is_a_link_is_never_read_through(tmp_path, sentinel, capsys):
    from derl.analysis.run import RunView
    from derl.checked_config import load_config
    from derl.config import dump_config

    run = search_run(tmp_path)
    run.config_path().write_text(dump_config(load_config(None, [])))
    (sentinel / "000003.json").write_text(json.dumps(published_record(run, "000003")))
    os.rmdir(run.root / "metadata")
    (run.root / "metadata").symlink_to(sentinel)
    reader = RunDir(run.root, skip=True)
    assert reader.publications.published_ids() == [] and reader.publications.read_metadata("000003", RULES) is None
    assert "metadata is a link or a file, not a folder" in capsys.readouterr().err
    assert len(RunView(run.root)) == 0  # the report's reader too
    with pytest.raises(OSError, match="metadata is not a folder"):
        run.publications.published_ids()  # the search stops on it
