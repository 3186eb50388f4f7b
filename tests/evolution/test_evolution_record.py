"""The published record: one definition for the writer, the validator and the readers, and the
metric vocabulary it shares with the envs and the learner.

``tests/assets/evolution/base_format/`` holds two records (metadata, genome, publication number)
exactly as derl wrote them before ``PublishedRecord`` existed: they must still validate, read and
write back byte for byte in the same key order.
"""

import json
import shutil
from pathlib import Path

import pytest

from derl.analysis.run import RunView
from derl.checked_config import load_config
from derl.envs.tasks import TASKS
from derl.evolution.folder.record import BOOKKEEPING, FIELDS, REQUIRED, PublishedRecord, fitness_terms, morphology_files
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.schema import METADATA_TYPES, RecordRules, metadata_problem
from derl.metrics import CTRL_TERM, SUMMARY_FIELDS, is_reward_term, is_summary_key
from derl.ppo.episodes import mean_fields

BASE_FORMAT = Path(__file__).resolve().parents[1] / "assets" / "evolution" / "base_format"
IDS = ("000005", "000006")
RULES = RecordRules.of(load_config().EVO)  # the default search: its slots and criteria


def _base_run(tmp_path: Path) -> RunDir:
    """A run folder with the two records of ``BASE_FORMAT`` (their slots' claims; the other files they list, empty)."""
    run = RunDir(tmp_path)
    run.create()
    for morphology_id in IDS:
        run.slots.claim(int(morphology_id), node=0, worker=0)
    for folder in ("metadata", "genomes", "published"):
        for path in (BASE_FORMAT / folder).iterdir():
            shutil.copy(path, tmp_path / folder / path.name)
    for morphology_id in IDS:
        for key in ("xml", "checkpoint", "metrics"):
            (tmp_path / morphology_files(morphology_id)[key]).touch()
    return run


@pytest.mark.recorded  # JSON text read and written back, no arithmetic: exact on any CPU
def test_metadata_written_by_earlier_derl_reads_and_writes_back_unchanged(tmp_path):
    run = _base_run(tmp_path)
    for morphology_id in IDS:
        text = (BASE_FORMAT / "metadata" / f"{morphology_id}.json").read_text()
        record = run.publications.read_metadata(morphology_id, RULES)  # JsonFileError if it failed its schema
        data = json.loads(text)
        assert record == PublishedRecord.from_json(data)
        terms = ("__reward__ctrl", "__reward__forward", "__reward__stand", "energy", "metric", "return", "x_pos")
        assert record.fitness == {key: data[key] for key in terms}
        assert json.dumps(record.to_json(), indent=2) + "\n" == text  # same keys, same order, same values
    view = RunView(tmp_path)
    child = view.by_id["000006"]
    assert child.lineage == ("000002", "000005", "000006") and child.parent_id == "000005"
    assert child.fitness == run.publications.read_metadata("000006", RULES).fitness
    assert child.limbs is not None  # the genome read once gives the body


def test_writer_validator_and_readers_share_one_record_and_one_vocabulary():
    # The learner's summary of episodes as the env reports them ("length" is not a fitness term).
    episodes = [{"return": 2.0 + k, "__reward__forward": 3.0, CTRL_TERM: -0.5, "energy": 10.0, "x_pos": 1.5,
                 "metric": 1.5, "length": 100} for k in range(3)]
    summary = mean_fields(episodes)
    assert set(summary) == {*SUMMARY_FIELDS, "__reward__forward", CTRL_TERM}
    record = PublishedRecord(id="000004", parent_id="000001", lineage="000001/000004", mutation="grow_limb", slot=4,
                             attempt=0, seed=7, node=0, worker=1, device="cpu", fitness=summary, env_steps=640,
                             iterations=10, wall_time=1.0, steps_per_sec=640.0, files=morphology_files("000004"),
                             published_at=1.7e9, publication=3)
    data = record.to_json()
    assert list(data) == [*FIELDS[:FIELDS.index("fitness")], *summary, *FIELDS[FIELDS.index("fitness") + 1:]]
    rules = RULES._replace(criteria=("__reward__forward",))  # the episodes above have no __reward__stand
    assert metadata_problem(data, "000004", rules) is None
    assert PublishedRecord.from_json(data) == record and fitness_terms(data) == summary
    # Bookkeeping and fitness never share a name; the validator types every bookkeeping field.
    assert not any(is_summary_key(key) for key in BOOKKEEPING) and all(map(is_summary_key, summary))
    assert {*METADATA_TYPES, "parent_id", *REQUIRED} == BOOKKEEPING
    assert set(REQUIRED) == {"id", "slot", "attempt", "lineage", "publication", "files"}
    # Every summary field is a selection criterion the config accepts; the tasks' terms are reward terms.
    load_config(None, {"EVO.SELECTION_CRITERIA": list(SUMMARY_FIELDS), "EVO.SELECTION_CRITERIA_OBJ": [-1] * 4})
    for cls in TASKS.values():
        assert all(map(is_reward_term, (*cls.reward_terms, *cls.aggregates)))
    assert metadata_problem({**data, "return": "high"}, "000004", rules) == \
        "has return 'high', expected a finite number (every result is one)"
