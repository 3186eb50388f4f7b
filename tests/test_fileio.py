import math
import os
import stat

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


def test_json_errors_name_their_file(tmp_path):
    import json

    from derl.fileio import JsonFileError, read_json

    truncated, binary = tmp_path / "cut.json", tmp_path / "bin.json"
    truncated.write_text('{"a": ')
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(JsonFileError, match=r"cut.json: not valid JSON \(Expecting value"):
        read_json(truncated)
    with pytest.raises(json.JSONDecodeError, match=r"bin.json: not UTF-8 text"):  # callers catching JSONDecodeError
        read_json(binary)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_get_the_mode_of_a_plain_open(tmp_path, umask, mode):
    """Group-readable under the usual umasks (mkstemp alone would give 0o600 whatever the umask)."""
    previous = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        create_exclusive(tmp_path / "b.txt", "x")
        (tmp_path / "folder").mkdir()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == mode | (mode & 0o444) >> 2  # r -> x
