"""Atomic writes (``derl.fileio``): a temporary file in the target's folder, flushed to disk and
renamed over the target, all through the folder's descriptor (``derl.fileio.folders.open_folder``),
so a reader sees the old file or the new one; and exclusive creation (``create_exclusive``).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from derl.fileio.folders import open_folder
from derl.fileio.reads import FILE_MODE


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
