import math

import pytest

from derl.fileio import atomic_write_text, create_exclusive, read_json, write_json


def test_write_json_round_trip_leaves_no_temp(tmp_path):
    p = tmp_path / "a.json"
    write_json(p, {"x": [1, 2.5], "id": "k"})
    write_json(p, {"x": 3})
    assert read_json(p) == {"x": 3}
    assert [f.name for f in tmp_path.iterdir()] == ["a.json"]


def test_failed_write_keeps_old_file(tmp_path):
    p = tmp_path / "a.json"
    write_json(p, {"x": 1})
    with pytest.raises(ValueError):
        write_json(p, {"x": math.nan})
    assert read_json(p) == {"x": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["a.json"]


def test_create_exclusive(tmp_path):
    p = tmp_path / "claim"
    assert create_exclusive(p, "me")
    assert not create_exclusive(p, "other")
    assert p.read_text() == "me"
    atomic_write_text(tmp_path / "t.txt", "hi")
    assert (tmp_path / "t.txt").read_text() == "hi"
