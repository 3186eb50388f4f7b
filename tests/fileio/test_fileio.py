import math
import os
import stat

import pytest

from derl.fileio.reads import read_json
from derl.fileio.writes import atomic_write_text, create_exclusive, write_json


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

    from derl.fileio.reads import JsonFileError, read_json

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


def test_only_regular_files_are_read_and_links_are_never_followed(tmp_path):
    """A symlink, FIFO, directory or device where a JSON file belongs is refused in one line, at once
    (a FIFO without a writer would block a plain open forever)."""
    from derl.fileio.reads import JsonFileError, NotRegularFile, open_file

    secret = tmp_path / "outside.json"
    secret.write_text('{"secret": 1}')
    (tmp_path / "link.json").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "device.json").symlink_to("/dev/zero")
    for name, kind in [("link", "a symbolic link"), ("fifo", "a FIFO"), ("dir", "a directory"),
                       ("device", "a symbolic link")]:
        with pytest.raises(JsonFileError, match=rf"{name}.json: is {kind}, not a regular file"):
            read_json(tmp_path / f"{name}.json")
    with pytest.raises(NotRegularFile, match="is a symbolic link"):  # creating through a planted link
        open_file(tmp_path / "link.json", os.O_CREAT | os.O_WRONLY)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")
    assert secret.read_text() == '{"secret": 1}'


def test_json_reads_are_bounded_in_size_and_depth(tmp_path):
    from derl.fileio.reads import MAX_JSON_DEPTH, JsonFileError

    deep, nested, big, digits = (tmp_path / name for name in ("deep", "nested", "big", "digits"))
    deep.write_text("[" * 200_000)  # RecursionError in json.loads
    nested.write_text("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    big.write_text('"' + "x" * 100 + '"')
    digits.write_text("1" * 5000)  # beyond Python's int conversion limit: ValueError, not JSONDecodeError
    with pytest.raises(JsonFileError, match=rf"deep: nests deeper than {MAX_JSON_DEPTH} levels"):
        read_json(deep)
    with pytest.raises(JsonFileError, match="nests deeper"):
        read_json(nested)
    with pytest.raises(JsonFileError, match="big: is larger than 50 bytes"):
        read_json(big, max_bytes=50)
    with pytest.raises(JsonFileError, match="digits: not valid JSON"):
        read_json(digits)
    nested.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(nested)


def test_a_read_through_a_folder_descriptor_reads_that_folder_bounded_and_names_the_file(tmp_path):
    from derl.fileio.folders import open_folder
    from derl.fileio.reads import NotRegularFile, read_bytes

    folder, elsewhere = tmp_path / "run" / "metadata", tmp_path / "elsewhere"
    folder.mkdir(parents=True)
    elsewhere.mkdir()
    (folder / "a.json").write_text('{"x": 1}')
    (folder / "edge").write_bytes(b"1" * 50)
    (folder / "big").write_bytes(b"1" * 51)
    (elsewhere / "a.json").write_text('{"x": "planted"}')
    with pytest.raises(ValueError, match="is not below"):
        open_folder(folder / ".." / ".." / "..", tmp_path / "run")
    fd = open_folder(folder, tmp_path / "run")
    try:
        os.rename(folder, tmp_path / "aside")
        folder.symlink_to(elsewhere)  # swapped after the open: the descriptor still reads the folder it opened
        assert read_json(folder / "a.json", dir_fd=fd) == {"x": 1}
        assert read_bytes(folder / "edge", max_bytes=50, dir_fd=fd) == b"1" * 50
        with pytest.raises(NotRegularFile, match=f"^{folder}/big is larger than 50 bytes$"):
            read_bytes(folder / "big", max_bytes=50, dir_fd=fd)
    finally:
        os.close(fd)
