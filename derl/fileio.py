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
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

FILE_MODE = 0o666


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
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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


def read_json(path: str | Path) -> Any:
    """The JSON content of ``path``.

    Raises:
        JsonFileError: not UTF-8 or not JSON (a ``json.JSONDecodeError`` naming the file).
        OSError: the file cannot be read (FileNotFoundError included).
    """
    try:
        return json.loads(Path(path).read_bytes().decode())
    except UnicodeDecodeError:
        raise JsonFileError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise JsonFileError(path, f"not valid JSON ({err})") from None


def create_exclusive(path: str | Path, text: str = "") -> bool:
    """Creates ``path`` only if it does not exist (O_EXCL). Returns False if it did."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)  # less the umask
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return True
