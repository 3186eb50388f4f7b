"""Atomic file writes and JSON helpers.

Every file another process may read is written to a temporary file in the same
folder, flushed to disk, then renamed over the target with ``os.replace``: a
reader sees the old file or the new one, never half of one.

Files get the mode a plain ``open(path, "w")`` would give them, ``0o666`` less the
process's umask (the temporary file is created with that mode; ``tempfile.mkstemp`` would
make it ``0o600``, unreadable by the other users of a shared filesystem): with the usual
umask 022 they are 0644, readable by the group; with umask 002 (a group sharing one output folder) 0664. The umask
stays the operator's choice, as for every other program writing there; folders are
made by ``mkdir`` and follow it the same way (0755 or 0775).

A shared folder is untrusted input (docs/design/run-folder.md#the-output-folder-is-untrusted-input): files
are opened with ``open_file``, never through a symbolic link and never blocking on a FIFO, and
only regular files are read; ``read_json`` and ``read_yaml`` bound the size and the nesting depth
they accept (and YAML's aliases, which can multiply a small file into a huge tree, are refused).
A write goes through its folder's descriptor and the temporary file and the rename are relative to
it; below a shared folder (a ``root``, or one that ``confine_writes`` named for the process) every
folder from there down is opened without following a symbolic link (``open_folder``): a folder
swapped for a link, at any moment, is refused (``NotAFolder``), never written through. A read takes
such a descriptor too (``read_bytes``/``read_json``'s ``dir_fd``): the folder checked is the one read.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import yaml

FILE_MODE = 0o666
# Larger or deeper JSON than any file derl writes is refused (a run's largest, error_metadata/ with a
# traceback, is a few KB): a planted 1 GB file or 200 KB of ``[[[`` costs no memory and no RecursionError.
MAX_JSON_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 32
# A config.yaml is a few KB and 4 levels deep.
MAX_YAML_BYTES = 2**20
MAX_YAML_DEPTH = 16
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Folders below which every write of this process checks each folder from there down (``confine_writes``).
_CONFINED: list[Path] = []


def current_umask() -> int:
    """This process's umask, read without changing it (Linux ``/proc``; elsewhere set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def confine_writes(root: str | Path) -> None:
    """Makes every write of this process below ``root`` check each folder from ``root`` down
    (``open_folder``), not only its own: called once by a process that writes into a tree that
    other processes share (an evolution worker in ``OUT_DIR``, an evaluation cell in ``OUT_DIR/eval/``),
    so that a folder of it swapped for a link is refused wherever the write comes from."""
    root = Path(os.path.abspath(root))
    if root not in _CONFINED:
        _CONFINED.append(root)


def _root_of(path: Path) -> Path | None:
    """The confined folder ``path`` lies in (``confine_writes``), if any."""
    absolute = Path(os.path.abspath(path))
    return next((root for root in _CONFINED if absolute.is_relative_to(root)), None)


def open_folder(path: str | Path, root: str | Path | None = None) -> int:
    """A descriptor of the real folder ``path``, opened without following a symbolic link.

    Args:
        root: a folder above ``path`` (followed: the user's choice, as ``OUT_DIR``); every folder
            from it down to ``path`` is opened in turn, relative to the one above, so none of them
            can be a link. Without it, the folder ``confine_writes`` gave that holds ``path``; outside
            any, ``path`` is opened as given (a user's own folder, links followed).

    Raises:
        NotAFolder: ``path`` (or a folder between ``root`` and it) is a symbolic link or a file.
        OSError: it cannot be opened (FileNotFoundError included).
    """
    root = _root_of(Path(path)) if root is None else root
    if root is None:
        return os.open(path, _FOLDER_FLAGS)
    return _descend(root, path, make=False)


def make_folders(path: str | Path, root: str | Path | None = None) -> None:
    """``mkdir -p path`` that never makes or passes a folder through a symbolic link below ``root``
    (default: as ``open_folder``; outside any, a plain ``mkdir -p``).

    Raises:
        NotAFolder: a folder on the way is a symbolic link or a file.
    """
    path = Path(path)
    root = _root_of(path) if root is None else root
    if root is None:
        path.mkdir(parents=True, exist_ok=True)
        return
    os.close(_descend(root, path, make=True))


def _descend(root: str | Path, path: str | Path, make: bool) -> int:
    """A descriptor of ``path``, reached from ``root`` one folder at a time, each opened without
    following a link (made first if ``make``): the first by its path (``root``'s own followed), each
    next relative to the one above.

    Raises:
        NotAFolder: a folder on the way is a symbolic link or a file.
    """
    top, below = os.path.abspath(root), os.path.abspath(path)  # strings: pathlib costs more than the opens
    if below == top:
        return os.open(top, _FOLDER_FLAGS)
    if not below.startswith(top.rstrip(os.sep) + os.sep):
        raise ValueError(f"{path} is not below {root}")
    parts = below[len(top):].lstrip(os.sep).split(os.sep)
    fd = None  # the first folder is opened by its path, ``root``'s own path followed: one open where one suffices
    try:
        for depth, part in enumerate(parts):
            name = part if fd is not None else os.path.join(top, part)
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            try:
                inner = os.open(name, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR) and (fd is not None or os.path.isdir(top)):
                    raise NotAFolder(Path(root).joinpath(*parts[: depth + 1])) from None
                raise
            if fd is not None:
                os.close(fd)
            fd = inner
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    assert fd is not None  # parts is never empty: ``below`` lies strictly below ``top``
    return fd


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None) -> None:
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename, in its folder's descriptor).

    Args:
        root: the folders from ``root`` down to ``path``'s are checked (``open_folder``; default:
            the confined folder that holds ``path``, ``confine_writes``).

    Raises:
        NotAFolder: ``path``'s folder is a symbolic link or a file.
        OSError: naming ``path`` (a full disk's ENOSPC from ``write`` or ``fsync`` names no file).
    """
    path = Path(path)
    folder = open_folder(path.parent, root)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                     dir_fd=folder)  # FILE_MODE less the umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as err:
        _unlink(tmp, folder)
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except BaseException:
        _unlink(tmp, folder)
        raise
    finally:
        os.close(folder)


def _unlink(name: str, folder: int) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None) -> None:
    atomic_write_bytes(path, text.encode(), root)


def write_json(path: str | Path, obj: Any, root: str | Path | None = None) -> None:
    """Writes ``obj`` as indented JSON, atomically (``root``: as ``atomic_write_bytes``); no NaN or infinity."""
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n", root)


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


class NotAFolder(NotRegularFile):
    """A symbolic link or a file where a folder that derl writes into belongs: what is written or
    moved through it would land outside. The node's problem (an ``OSError``), never a morphology's."""

    def __init__(self, path: str | Path):
        super().__init__(path, "is not a folder (a symbolic link or a file): remove it or use another OUT_DIR")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_file(path: str | Path, flags: int = os.O_RDONLY, mode: int = FILE_MODE, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file ``path`` (``flags`` as ``os.open``; ``mode`` less the umask).

    The last component is never followed through a symbolic link (``O_NOFOLLOW``) and a FIFO
    never blocks the open (``O_NONBLOCK``, cleared once the file is known to be regular).
    ``dir_fd``: ``path`` is relative to that folder (``open_folder``).

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
        dir_fd: a descriptor of ``path``'s folder (``open_folder``): the file is opened by its name in
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


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES, dir_fd: int | None = None) -> Any:
    """The JSON content of the regular file ``path``: at most ``max_bytes``, ``MAX_JSON_DEPTH`` deep
    (``dir_fd``: as ``read_bytes``).

    Raises:
        JsonFileError: not a regular file, too large, not UTF-8, not JSON or nested too deep
            (a ``json.JSONDecodeError`` naming the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        data = json.loads(read_bytes(path, max_bytes, dir_fd).decode())
    except NotRegularFile as err:
        raise JsonFileError(path, err.reason) from None
    except UnicodeDecodeError:
        raise JsonFileError(path, "not UTF-8 text") from None
    except ValueError as err:  # JSONDecodeError, or an integer of more digits than Python converts
        raise JsonFileError(path, f"not valid JSON ({err})") from None
    except RecursionError:
        raise JsonFileError(path, f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise JsonFileError(path, f"nests deeper than {MAX_JSON_DEPTH} levels")
    return data


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


def create_exclusive(path: str | Path, text: str = "", root: str | Path | None = None) -> bool:
    """Creates ``path`` only if it does not exist (O_EXCL). Returns False if it did.

    Its folder is opened as ``open_folder`` (``root``): never reached through a symbolic link.
    """
    path = Path(path)
    folder = open_folder(path.parent, root)
    try:  # O_EXCL never follows a symbolic link: one planted at path counts as existing
        fd = os.open(path.name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE,  # less the umask
                     dir_fd=folder)
    except FileExistsError:
        return False
    finally:
        os.close(folder)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return True
