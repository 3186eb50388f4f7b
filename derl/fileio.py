"""Atomic file writes and JSON helpers.

Every file another process may read is written to a temporary file in the same
folder, flushed to disk, then renamed over the target with ``os.replace``: a
reader sees the old file or the new one, never half of one.

Files get the mode a plain ``open(path, "w")`` would give them, ``0o666`` less the
process's umask (``tempfile.mkstemp`` alone makes them ``0o600``, unreadable by the
other users of a shared filesystem): with the usual umask 022 they are 0644, readable
by the group; with umask 002 (a group sharing one output folder) 0664. The umask
stays the operator's choice, as for every other program writing there; folders are
made by ``mkdir`` and follow it the same way (0755 or 0775).

A shared folder is untrusted input (README: "The output folder is untrusted input"): files
are opened with ``open_file``, never through a symbolic link and never blocking on a FIFO, and
only regular files are read; ``read_json`` bounds the size and the nesting depth it accepts.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

FILE_MODE = 0o666
# Larger or deeper JSON than any file derl writes is refused (a run's largest, error_metadata/ with a
# traceback, is a few KB): a planted 1 GB file or 200 KB of ``[[[`` costs no memory and no RecursionError.
MAX_JSON_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 32


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


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename).

    Raises:
        OSError: naming ``path`` (a full disk's ENOSPC from ``write`` or ``fsync`` names no file).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any) -> None:
    """Writes ``obj`` as indented JSON, atomically. NaN and infinities are refused."""
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


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


def open_file(path: str | Path, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """A descriptor of the regular file ``path`` (``flags`` as ``os.open``; ``mode`` less the umask).

    The last component is never followed through a symbolic link (``O_NOFOLLOW``) and a FIFO
    never blocks the open (``O_NONBLOCK``, cleared once the file is known to be regular).

    Raises:
        NotRegularFile: ``path`` is a symbolic link, FIFO, directory, socket or device.
        OSError: it cannot be opened (FileNotFoundError included).
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        try:
            kind = os.lstat(path).st_mode
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


def read_bytes(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The content of the regular file ``path`` (``open_file``), at most ``max_bytes`` long.

    Raises:
        NotRegularFile: not a regular file, or larger than ``max_bytes``.
        OSError: it cannot be read (FileNotFoundError included).
    """
    with os.fdopen(open_file(path), "rb") as f:
        data = f.read(max_bytes + 1)
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


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON content of the regular file ``path``: at most ``max_bytes``, ``MAX_JSON_DEPTH`` deep.

    Raises:
        JsonFileError: not a regular file, too large, not UTF-8, not JSON or nested too deep
            (a ``json.JSONDecodeError`` naming the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        data = json.loads(read_bytes(path, max_bytes).decode())
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


def create_exclusive(path: str | Path, text: str = "") -> bool:
    """Creates ``path`` only if it does not exist (O_EXCL). Returns False if it did."""
    try:  # O_EXCL never follows a symbolic link: one planted at path counts as existing
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)  # less the umask
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return True
