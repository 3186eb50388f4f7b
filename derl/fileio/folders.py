"""Folders opened and made without following a symbolic link (``derl.fileio``): from a shared
folder down (a ``root``, or the one ``confine_writes`` named for the process) each folder is opened
relative to the one above, so a folder swapped for a link is refused (``NotAFolder``), never passed through.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from derl.fileio.reads import NotRegularFile

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Folders below which every write of this process checks each folder from there down (``confine_writes``).
_CONFINED: list[Path] = []


class NotAFolder(NotRegularFile):
    """A symbolic link or a file where a folder that derl writes into belongs: what is written or
    moved through it would land outside. The node's problem (an ``OSError``), never a morphology's."""

    def __init__(self, path: str | Path):
        super().__init__(path, "is not a folder (a symbolic link or a file): remove it or use another OUT_DIR")


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
