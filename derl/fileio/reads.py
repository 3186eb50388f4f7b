"""Safe reads of files a shared folder holds (``derl.fileio``): regular files only, opened never
through a symbolic link and never blocking on a FIFO (``open_file``, which also creates the lock files
of ``derl.evolution.folder.shared``), JSON and YAML bounded in size and depth, and the errors that name the file.
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
# Values of a JSON text, containers included (a CPU torch generator's state, the largest derl writes
# outside the curves, is 5,056): a 16 MiB file of ``[0,0,...`` (8 million) is refused.
MAX_JSON_ITEMS = 2**20
# A config file is a few KB (a run's whole config.yaml: 2.8 KB, 363 values) and 4 levels deep: a
# 4 MB file is refused before it is parsed, and YAML's pure-Python parser stops at the 10,001st value.
MAX_YAML_BYTES = 256 * 2**10
MAX_YAML_DEPTH = 16
MAX_YAML_ITEMS = 10_000
# One value on the command line (the longest, BODY.JOINT_ANGLE_LIST, is 150 characters).
MAX_OVERRIDE_BYTES = 64 * 2**10


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


def open_file(path: str | Path, flags: int = os.O_RDONLY, mode: int = FILE_MODE, dir_fd: int | None = None,
              follow_links: bool = False) -> int:
    """A descriptor of the regular file ``path`` (``flags`` as ``os.open``; ``mode`` less the umask).

    The last component is never followed through a symbolic link (``O_NOFOLLOW``; unless
    ``follow_links``: a user's own file named on the command line) and a FIFO never blocks the
    open (``O_NONBLOCK``, cleared once the file is known to be regular).
    ``dir_fd``: ``path`` is relative to that folder (``derl.fileio.folders.open_folder``).

    Raises:
        NotRegularFile: ``path`` is a symbolic link, FIFO, directory, socket or device.
        OSError: it cannot be opened (FileNotFoundError included).
    """
    try:
        no_follow = 0 if follow_links else os.O_NOFOLLOW
        fd = os.open(path, flags | no_follow | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as err:
        try:
            kind = (os.stat if follow_links else os.lstat)(path, dir_fd=dir_fd).st_mode
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


def read_bytes(path: str | Path, max_bytes: int = MAX_JSON_BYTES, dir_fd: int | None = None,
               follow_links: bool = False) -> bytes:
    """The content of the regular file ``path`` (``open_file``, ``follow_links`` as there), at most
    ``max_bytes`` long.

    Args:
        dir_fd: a descriptor of ``path``'s folder (``folders.open_folder``): the file is opened by its name in
            that folder, so a folder swapped for a link after it was opened is never read through;
            ``path`` still names the file in errors.

    Raises:
        NotRegularFile: not a regular file, or larger than ``max_bytes``.
        OSError: it cannot be read (FileNotFoundError included).
    """
    fd = open_file(path if dir_fd is None else os.path.basename(path), dir_fd=dir_fd, follow_links=follow_links)
    try:  # os.read, not a file object: a third of the time of a small record's read (no buffer of max_bytes)
        want, data = min(os.fstat(fd).st_size, max_bytes) + 1, b""
        while len(data) <= max_bytes and (chunk := os.read(fd, want)):
            data += chunk  # a file that grows is read on, up to max_bytes + 1
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise NotRegularFile(path, f"is larger than {max_bytes} bytes")
    return data


def _shape_problem(value: Any, max_depth: int, max_items: int) -> str | None:
    """What makes parsed JSON too deep or too large, in words (None: neither), walked without recursion."""
    items, stack = 1, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"nests deeper than {max_depth} levels"
        children = item.values() if isinstance(item, dict) else item
        items += len(children)
        if items > max_items:
            return f"holds more than {max_items} items"
        stack += [(child, depth + 1) for child in children if isinstance(child, dict | list)]
    return None


def parse_json(text: str | bytes, source: str, max_bytes: int = MAX_JSON_BYTES,
               max_items: int = MAX_JSON_ITEMS) -> Any:
    """The JSON value of ``text`` that came from outside the process (``source`` names it in errors):
    at most ``max_bytes`` long, ``MAX_JSON_DEPTH`` deep and ``max_items`` values (containers
    included), checked before it is parsed where it can be.

    Raises:
        JsonFileError: too large, not UTF-8, not JSON, nested too deep or too many items (the message
            names ``source``).
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
    if isinstance(data, dict | list) and (problem := _shape_problem(data, MAX_JSON_DEPTH, max_items)) is not None:
        raise JsonFileError(source, problem)
    return data


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES, dir_fd: int | None = None,
              max_items: int = MAX_JSON_ITEMS) -> Any:
    """The JSON content of the regular file ``path``: at most ``max_bytes``, ``MAX_JSON_DEPTH`` deep,
    ``max_items`` values (``dir_fd``: as ``read_bytes``).

    Raises:
        JsonFileError: not a regular file, too large, not UTF-8, not JSON, nested too deep or too many
            items (a ``json.JSONDecodeError`` naming the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        data = read_bytes(path, max_bytes, dir_fd)
    except NotRegularFile as err:
        raise JsonFileError(path, err.reason) from None
    return parse_json(data, str(path), max_bytes, max_items)


class YamlRefused(yaml.YAMLError):
    """YAML that parses but is refused: an anchor or alias, too deep, too many values or too long."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases, composing at most ``MAX_YAML_DEPTH`` deep and
    ``max_items`` nodes: a "billion laughs" file, 100 KB of ``[[[`` or a file of millions of values
    costs neither memory nor a RecursionError; the count stops the parse at the first value too many
    (PyYAML parses as it composes)."""

    def __init__(self, stream: str, max_items: int):
        super().__init__(stream)
        self._depth, self._items, self._max_items = 0, 0, max_items

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) or getattr(self.peek_event(), "anchor", None) is not None:
            raise YamlRefused("anchors and aliases (& and *) are not accepted")
        self._items += 1
        if self._items > self._max_items:
            raise YamlRefused(f"holds more than {self._max_items} items")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise YamlRefused(f"nests deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, max_bytes: int = MAX_YAML_BYTES, max_items: int = MAX_YAML_ITEMS) -> Any:
    """``yaml.safe_load`` of ``text`` without anchors or aliases, at most ``max_bytes`` long (in UTF-8),
    ``MAX_YAML_DEPTH`` deep and ``max_items`` values.

    Raises:
        YamlRefused: too long, aliased, too deep, too many values, or a number too long to convert.
        yaml.YAMLError: it does not parse.
    """
    if len(text) > max_bytes or len(text.encode(errors="replace")) > max_bytes:
        raise YamlRefused(f"is larger than {max_bytes} bytes")
    loader = _BoundedLoader(text, max_items)
    try:
        return loader.get_single_data()
    except RecursionError:  # the depth count stops first; kept for a parser change
        raise YamlRefused(f"nests deeper than {MAX_YAML_DEPTH} levels") from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise YamlRefused(f"holds a value that cannot be converted ({err})") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path, max_bytes: int = MAX_YAML_BYTES, follow_links: bool = False) -> Any:
    """The YAML content of the regular file ``path`` (``open_file``: never from a FIFO, and never
    through a link unless ``follow_links``: a user's own config file), at most ``max_bytes`` long,
    bounded as ``load_yaml``.

    Raises:
        YamlFileError: not a regular file, too large, not UTF-8, not YAML, aliased, too deep or too
            many values (the message names the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        return load_yaml(read_bytes(path, max_bytes, follow_links=follow_links).decode(), max_bytes)
    except NotRegularFile as err:
        raise YamlFileError(path, err.reason) from None
    except UnicodeDecodeError:
        raise YamlFileError(path, "not UTF-8 text") from None
    except YamlRefused as err:
        raise YamlFileError(path, str(err)) from None
    except yaml.YAMLError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "invalid YAML"
        raise YamlFileError(path, f"not valid YAML ({first})") from None


def parse_override(text: str, key: str) -> Any:
    """The value of a ``KEY VALUE`` pair from the command line: its YAML (a list, a bool, a number),
    else the text itself; at most ``MAX_OVERRIDE_BYTES`` long, bounded as ``load_yaml``. A value
    that begins with ``&`` or ``*`` (YAML's anchors and aliases) is refused: quote it.

    Raises:
        YamlFileError: the value is refused (the message names ``key``).
    """
    try:
        return load_yaml(text, MAX_OVERRIDE_BYTES)
    except YamlRefused as err:
        raise YamlFileError(f"config key {key}", f"its value on the command line is refused: {err}") from None
    except yaml.YAMLError:
        return text
