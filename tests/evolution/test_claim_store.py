"""The claim protocol the search's slots and the evaluation's cells share (``derl.evolution.folder.claim_store``)."""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from derl.evaluation.plan import Cell
from derl.evaluation.store import EvalDir
from derl.evolution.folder.claim_store import ClaimStore
from derl.evolution.folder.run_dir import RunDir
from derl.evolution.folder.shared import Identity, SharedFolder
from derl.fileio.folders import NotAFolder
from derl.fileio.reads import JsonFileError


class Notes(ClaimStore[str, dict]):
    """Every generation in one folder, ``claims/<key>-<g>.json``, as the evaluation names its claims."""

    def file(self, key: str, generation: int) -> Path:
        return self.folder.root / "claims" / f"{key}-{generation}.json"

    def generations(self, key: str) -> list[int]:
        prefix = f"{key}-"
        return [int(name[len(prefix):-5]) for name in self.folder.entries(self.folder.root / "claims")
                if name.startswith(prefix) and name.endswith(".json")]

    def parse(self, data: Any, key: str, generation: int) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("owner"), str):
            raise ValueError("names no owner")
        return {**data, "generation": generation}

    def damaged(self, key: str, generation: int, reason: str) -> dict:
        return {"owner": None, "generation": generation, "damaged": reason}


def _folder(root: Path, name: str = "me", **mode) -> SharedFolder:
    folder = SharedFolder(root, Identity("h", 1, name), **mode)
    folder.create()
    (root / "claims").mkdir(exist_ok=True)
    return folder


def test_a_claim_is_exclusive_and_one_of_five_takers_wins(tmp_path):
    store = Notes(_folder(tmp_path))
    assert store.read("a") is None and store.latest("a") == 0
    assert store.create("a", 0, {"owner": "first"})
    assert not Notes(_folder(tmp_path, "other")).create("a", 0, {"owner": "second"})  # held
    assert store.read("a") == {"owner": "first", "generation": 0} and not store.taken_over("a", 0)
    takers = [Notes(_folder(tmp_path, f"t{k}")) for k in range(5)]
    won = [taker.create("a", 1, {"owner": f"t{k}"}) for k, taker in enumerate(takers)]
    assert won == [True, False, False, False, False]
    assert store.taken_over("a", 0) and not store.taken_over("a", 1)  # the old owner yields
    assert store.read("a") == {"owner": "t0", "generation": 1}  # the latest generation decides
    assert sorted(os.listdir(tmp_path / "tmp")) == []  # nothing staged is left behind
    assert store.claim_time("a", 1) == os.lstat(store.file("a", 1)).st_mtime and store.claim_time("a", 2) is None


def test_the_latest_generation_decides_whatever_it_holds(tmp_path, capsys):
    store = Notes(_folder(tmp_path, skip=True))
    assert store.create("a", 0, {"owner": "first"})
    store.file("a", 3).write_text('{"owner": ')  # truncated: a later generation nobody can read
    claim = store.read("a")
    assert claim["owner"] is None and claim["generation"] == 3 and claim["damaged"]  # kept, not the older one
    assert store.file("a", 3).exists()  # never quarantined: that would free the key
    assert "kept: a is taken over only once its owner is silent" in capsys.readouterr().err
    assert store.create("a", 4, {"owner": "taker"}) and store.read("a")["owner"] == "taker"
    store.file("a", 5).write_text("[]")
    with pytest.raises(JsonFileError):  # a reader in neither mode is told, not given a guess
        Notes(_folder(tmp_path)).read("a")


def test_a_strict_store_stops_on_a_claims_folder_that_is_a_link(tmp_path, capsys):
    folder = _folder(tmp_path / "run")
    os.rmdir(folder.root / "claims")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "a-1.json").write_text('{"owner": "planted"}')
    (folder.root / "claims").symlink_to(tmp_path / "outside")
    assert not Notes(folder).taken_over("a", 0)  # a reader: warned once, nothing read through it
    with pytest.raises(NotAFolder):
        Notes(folder, strict=True).taken_over("a", 0)
    with pytest.raises(NotAFolder):  # a heartbeat is never written through it, strict or not
        Notes(folder).touch("a", 1)
    assert "is a link or a file" in capsys.readouterr().err


def test_an_evaluation_claim_is_complete_compact_json_on_the_shared_protocol(tmp_path):
    cell = Cell(tmp_path, "patrol", "000001", 0)
    store = EvalDir(RunDir(tmp_path), lease_seconds=600, identity=Identity("node-a", os.getpid(), "a"))
    assert store.claim(cell) == 0  # makes tmp/, where the claim is staged
    path = tmp_path / "eval" / "claims" / "patrol" / "000001-s0-0.json"
    owner = json.loads(path.read_text())
    assert path.read_text() == json.dumps(owner) and owner["host"] == "node-a"  # as it always was
    assert store.claims.generations(cell) == [0] and os.listdir(tmp_path / "tmp") == []
    assert store.claims.create(cell, 1, {"host": "node-b", "pid": 1, "token": "b"}) and store.lost(cell, 0)
