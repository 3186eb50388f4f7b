"""Safe reads of files a shared folder holds (``derl.fileio``): regular files only, opened never
through a symbolic link and never blocking on a FIFO (``open_file``, which also creates the lock files
of ``derl.shared_folder``), JSON and YAML bounded in size and depth, and the errors that name the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

# What a file derl creates gets: 0o666 less the umask, as a plain ``open(path, "w")`` (``derl.fileio``).
FILE_MODE = 0o666
# Larger or deeper JSON than any file derl writes is refused (a run's largest, error_metadata/ with a
# traceback, is a few KB): a planted 1 GB file or 200 KB of ``[[[`` costs no memory and no RecursionError.
MAX_JSON_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 32
# A config.yaml is a few KB and 4 levels deep.
MAX_YAML_BYTES = 2**20
MAX_YAML_DEPTH = 16


class JsonFileError(json.JSONDecodeError):
    """A JSON file that does not parse or does not match its schema; the message names the file."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(reason, "", 0)
        self.path = Path(path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def __reduce__(self):
        return type(self), (self.path, self.reason)


class YamlFileError(JsonFileError):
    """A YAML file read back that does not parse or is too large, deep or aliased; the message names
    the file. A ``JsonFileError``, so that every reader (and ``derl.evolution.failures``) takes it
    for the folder's problem, as a bad JSON file."""


class NotRegularFile(OSError):
    """A symbolic link, FIFO, directory or device where a regular file belongs."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path} {reason}")
        self.path = Path(path)
        self.reason = reason


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_file(path: str | Path, flags: int = os.O_RDONLY, mode: int = FILE_MODE, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``path`` (``flags`` as ``os.open``; ``mode`` less the umask).

    The last component is never followed through a symbolic link (``O_NOFOLLOW``) and a FIFO
    never blocks the open (``O_NONBLOCK``, cleared once the file is known to be regular).
    ``dir_fd``: ``path`` is relative to that folder (``derl.fileio.folders.open_folder``).

    Raises:
        NotRegularFile: ``path`` is a symbolic link, FIFO, directory, socket or device.
        OSError: it cannot be opened (FileNotFoundError included).
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as err:
        try:
            kind = os.lstat(path, dir_fd=dir_fd).st_mode
        except OSError:
            raise err from None
        if stat.S_ISREG(kind):
            raise
        raise NotRegularFile(path, f"is {_kind(kind)}, not a regular file") from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise NotRegularFile(path, f"is {_kind(kind)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: str | Path, max_bytes: int = MAX_JSON_BYTES, dir_fd: int | None = None) -> bytes:
    """The content of the regular file ``path`` (``open_file``), at most ``max_bytes`` long.

    Args:
        dir_fd: a descriptor of ``path``'s folder (``folders.open_folder``): the file is opened by its name in
            that folder, so a folder swapped for a link after it was opened is never read through;
            ``path`` still names the file in errors.

    Raises:
        NotRegularFile: not a regular file, or larger than ``max_bytes``.
        OSError: it cannot be read (FileNotFoundError included).
    """
    fd = open_file(path if dir_fd is None else os.path.basename(path), dir_fd=dir_fd)
    try:  # os.read, not a file object: a third of the time of a small record's read (no buffer of max_bytes)
        want, data = min(os.fstat(fd).st_size, max_bytes) + 1, b""
        while len(data) <= max_bytes and (chunk := os.read(fd, want)):
            data += chunk  # a file that grows is read on, up to max_bytes + 1
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise NotRegularFile(path, f"is larger than {max_bytes} bytes")
    return data


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def parse_json(text: str | bytes, source: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of ``text`` that came from outside the process (``source`` names it in errors):
    at most ``max_bytes`` long, ``MAX_JSON_DEPTH`` deep, checked before it is parsed where it can be.

    Raises:
        JsonFileError: too large, not UTF-8, not JSON or nested too deep (the message names ``source``).
    """
    if len(text) > max_bytes:  # a str is at least as many bytes as characters
        raise JsonFileError(source, f"is larger than {max_bytes} bytes")
    try:
        data = json.loads(text)
    except UnicodeDecodeError:
        raise JsonFileError(source, "not UTF-8 text") from None
    except ValueError as err:  # JSONDecodeError, or an integer of more digits than Python converts
        raise JsonFileError(source, f"not valid JSON ({err})") from None
    except RecursionError:
        raise JsonFileError(source, f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise JsonFileError(source, f"nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES, dir_fd: int | None = None) -> Any:
    """The JSON content of the regular file ``path``: at most ``max_bytes``, ``MAX_JSON_DEPTH`` deep
    (``dir_fd``: as ``read_bytes``).

    Raises:
        JsonFileError: not a regular file, too large, not UTF-8, not JSON or nested too deep
            (a ``json.JSONDecodeError`` naming the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        data = read_bytes(path, max_bytes, dir_fd)
    except NotRegularFile as err:
        raise JsonFileError(path, err.reason) from None
    return parse_json(data, str(path), max_bytes)


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases, composing at most ``MAX_YAML_DEPTH`` deep:
    a "billion laughs" file or 100 KB of ``[[[`` costs neither memory nor a RecursionError."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) or getattr(self.peek_event(), "anchor", None) is not None:
            raise yaml.YAMLError("anchors and aliases (& and *) are not accepted")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.YAMLError(f"nests deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text`` without anchors or aliases, at most ``MAX_YAML_DEPTH`` deep.

    Raises:
        yaml.YAMLError: it does not parse, uses an alias or nests too deep.
    """
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """The YAML content of the regular file ``path`` (``open_file``: never through a link or from a
    FIFO), at most ``max_bytes`` long, bounded as ``load_yaml``.

    Raises:
        YamlFileError: not a regular file, too large, not UTF-8, not YAML, aliased or too deep.
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        return load_yaml(read_bytes(path, max_bytes).decode())
    except NotRegularFile as err:
        raise YamlFileError(path, err.reason) from None
    except UnicodeDecodeError:
        raise YamlFileError(path, "not UTF-8 text") from None
    except yaml.YAMLError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "invalid YAML"
        raise YamlFileError(path, f"not valid YAML ({first})") from None
    except RecursionError:
        raise YamlFileError(path, f"nests deeper than {MAX_YAML_DEPTH} levels") from None
