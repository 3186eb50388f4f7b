"""A folder that processes on several nodes write and read at once: staged writes, exclusive
creations, and what to do with a file that does not belong.

The primitives under ``derl.evolution.folder.run_dir.RunDir`` (which adds the layout and the records of
the evolution's protocol, docs/reference/output-folder.md):

- every file is staged in ``tmp/`` (``derl.fileio``: temp + fsync + rename) and then renamed into
  place, so the target folders never show a partial file; staged names carry the host, the pid, a
  random token of the process and a counter, so no two processes (other hosts, other pid
  namespaces) or calls share one;
- an exclusive creation links the complete staged file to its target with ``os.link``, which fails
  if the target exists: the file is complete from the first moment it is seen;
- every read, listing, existence check, write, rename, link and move goes through descriptors of its
  folders, each opened from the root down without following a symbolic link (``open_dir``), at each
  use: the check that a folder is real and its use are one open, so a folder of the layout swapped
  for a link (or a file) at any moment, even between two calls, is refused, never read or written
  through; the search stops on it (``NotAFolder``: the node's problem, never a morphology's), a
  read-only tool warns once and skips it;
- the folder is untrusted input (docs/design/run-folder.md#the-output-folder-is-untrusted-input): files are opened
  without following links or blocking on FIFOs (``derl.fileio``), every JSON read is checked by a
  function of its content, and a folder holds only the names its pattern allows;
- a file that is not a regular file, does not parse or fails its check (a stray or corrupt file) is
  moved to ``quarantine/`` with a one-line warning (``quarantine=True``), skipped with one
  (``skip=True``), or else raises a ``JsonFileError`` naming the file.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar

from derl.fileio.folders import NotAFolder, make_folders, open_folder
from derl.fileio.reads import MAX_JSON_BYTES, JsonFileError, NotRegularFile, open_file, read_json
from derl.fileio.writes import atomic_write_bytes, atomic_write_text, write_json

T = TypeVar("T")


class Identity(NamedTuple):
    """Who writes: unique across hosts and pid namespaces thanks to the random token."""

    host: str
    pid: int
    token: str

    @staticmethod
    def current() -> Identity:
        return Identity(socket.gethostname(), os.getpid(), secrets.token_hex(8))

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "token": self.token}


class _OpenFolder:
    """``with`` gives the descriptor of an open folder and closes it (a class: a generator's context
    manager costs as much as the open itself, on every read)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class SharedFolder:
    """Staged writes, exclusive creations, checked reads and quarantine in the folder ``root``.

    Subclasses name their layout: ``FOLDERS`` (made by ``create``, ``tmp`` and ``quarantine``
    among them), ``NAMES`` (the only file names a listed folder may hold) and ``OTHER_FOLDERS``
    (written by other tools; their files may be quarantined too).

    Args:
        identity: this process (``Identity.current()`` unless a test injects one); it names staged files.
        quarantine: a file that fails its check is moved to ``quarantine/`` (the writers).
        skip: a file that fails its check is skipped with one warning line (read-only tools);
            with neither, reading it raises ``JsonFileError``.
    """

    FOLDERS: ClassVar[tuple[str, ...]] = ("tmp", "quarantine")
    NAMES: ClassVar[dict[str, re.Pattern[str]]] = {}
    OTHER_FOLDERS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, root: str | Path, identity: Identity | None = None, quarantine: bool = False,
                 skip: bool = False):
        self.root = Path(root).resolve()
        self.identity = identity or Identity.current()
        self.quarantine_bad_files, self.skip_bad_files = quarantine, skip
        self._warned: set[Path] = set()
        self.refused_names: dict[Path, str] = {}  # names listings refused (``name_problem``): path -> why
        self._counter = itertools.count()

    def create(self) -> None:
        """Makes the layout's folders; one that is a symbolic link or a file is refused (``NotAFolder``):
        files written or moved through it would land outside the folder."""
        self.root.mkdir(parents=True, exist_ok=True)
        for folder in self.FOLDERS:  # every one checked before any is made
            with contextlib.suppress(FileNotFoundError), self.open_dir(self.root / folder):
                pass
        for folder in self.FOLDERS:
            make_folders(self.root / folder, self.root)

    def open_dir(self, folder: Path) -> _OpenFolder:
        """A descriptor of ``folder`` (``root`` or below), every folder from ``root`` down opened without
        following a link (``open_folder``); closed on exit. Every read and write below ``root`` goes through
        one: check and use are one open, so a folder swapped for a link (or a file) is never used.

        Raises:
            NotAFolder: ``folder`` (or one on the way) is a symbolic link or a file.
            FileNotFoundError: it is missing.
        """
        return _OpenFolder(open_folder(folder, self.root))

    def refuse(self, err: NotAFolder, strict: bool = False) -> None:
        """A folder that is a link or a file holds nothing of ours: the search (``quarantine``) stops on it
        (raises ``err``: the node's problem, not a morphology's); a reader is warned once (``strict``: then raises)."""
        if self.quarantine_bad_files:
            raise err
        self.warn_once(err.path, "is a link or a file, not a folder; its files are not read")
        if strict:
            raise err

    def lexists(self, path: Path) -> bool:
        """Whether the entry ``path`` exists (a link counts), as ``lstat``."""
        return self.lstat(path) is not None

    def lstat(self, path: Path, strict: bool = False) -> os.stat_result | None:
        """The entry ``path`` (a link itself), looked up in its folder's descriptor (``open_dir``); None if
        missing, or if its folder is a link or a file (``refuse``, ``strict`` as there)."""
        try:
            with self.open_dir(path.parent) as folder:
                return os.lstat(path.name, dir_fd=folder)
        except FileNotFoundError:
            return None
        except NotAFolder as err:
            self.refuse(err, strict)
            return None

    def read_in_folder(self, path: Path, read: Callable[..., T]) -> T:
        """``read(path, dir_fd=folder)``: the file ``path``, below ``root``, looked up in a descriptor of
        its folder (``open_dir``), as ``derl.fileio.read_bytes`` and ``read_json`` take one: a folder
        swapped for a link at any moment is never read through.

        Raises:
            NotAFolder: a folder on the way is a link or a file: the search stops on it; a reader
                is warned once (``refuse``) and should skip the file.
            FileNotFoundError: the folder is missing (or, from ``read``, the file).
        """
        try:
            with self.open_dir(path.parent) as folder:
                return read(path, dir_fd=folder)
        except NotAFolder as err:
            self.refuse(err)
            raise

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    # Atomic writes, staged outside the target folder.
    def _staged(self, target: Path) -> Path:
        me, call = self.identity, next(self._counter)
        return self.root / "tmp" / f"{me.host}-{me.pid}-{me.token}-{call}-{target.parent.name}-{target.name}"

    def write_text(self, target: Path, text: str) -> None:
        self.write_bytes(target, text.encode())

    def write_bytes(self, target: Path, data: bytes) -> None:
        staged = self._staged(target)
        atomic_write_bytes(staged, data, self.root)
        self._move_staged(staged, target)

    def write_json(self, target: Path, obj: Any) -> None:
        staged = self._staged(target)
        write_json(staged, obj, self.root)
        self._move_staged(staged, target)

    def _move_staged(self, staged: Path, target: Path) -> None:
        """Renames a staged file into place; if that fails (I/O error, full disk, a folder that is a
        link), removes it."""
        try:
            with self.open_dir(staged.parent) as source, self.open_dir(target.parent) as folder:
                os.replace(staged.name, target.name, src_dir_fd=source, dst_dir_fd=folder)
        except BaseException:
            self._drop_staged(staged)
            raise

    def _drop_staged(self, staged: Path) -> None:
        """Removes a staged file, never through a ``tmp/`` that became a link."""
        with contextlib.suppress(OSError), self.open_dir(staged.parent) as source:
            os.unlink(staged.name, dir_fd=source)

    def create_json(self, target: Path, obj: Any) -> bool:
        """Creates ``target`` with ``obj`` unless it exists; True if this call created it."""
        staged = self._staged(target)
        write_json(staged, obj, self.root)
        return self._link_staged(staged, target)

    def create_text(self, target: Path, text: str) -> bool:
        staged = self._staged(target)
        atomic_write_text(staged, text, self.root)
        return self._link_staged(staged, target)

    def _link_staged(self, staged: Path, target: Path) -> bool:
        """Links the complete ``staged`` file to ``target`` unless it exists (then False), and drops ``staged``."""
        try:
            with self.open_dir(staged.parent) as source, self.open_dir(target.parent) as folder:
                os.link(staged.name, target.name, src_dir_fd=source, dst_dir_fd=folder, follow_symlinks=False)
        except FileExistsError:
            return False
        finally:
            self._drop_staged(staged)
        return True

    # Foreign and corrupt files.
    def quarantine(self, path: Path, reason: str) -> None:
        """Moves ``path`` to ``quarantine/`` (its relative path flattened) with a one-line warning.

        Only an entry of the folder or of one of its folders moves, into the real folder
        ``quarantine/``; the rename moves the entry itself (a symbolic link, never what it points to).
        """
        relative = path.relative_to(self.root) if path.is_absolute() else None
        if relative is None or len(relative.parts) > 2 or any(part in ("", ".", "..") for part in relative.parts) \
                or (len(relative.parts) == 2 and relative.parts[0] not in self.FOLDERS + self.OTHER_FOLDERS):
            raise ValueError(f"{path} is not a file of {self.root}; not moved to quarantine/")
        folder = self.root / "quarantine"
        if not os.path.lexists(folder):
            folder.mkdir(exist_ok=True)
        target = folder / "-".join(relative.parts)
        try:
            with self.open_dir(path.parent) as source, self.open_dir(folder) as destination:
                with contextlib.suppress(FileNotFoundError):  # the name is taken: this one made unique
                    os.lstat(target.name, dir_fd=destination)
                    target = target.with_name(f"{target.name}.{self.identity.token}-{next(self._counter)}")
                os.rename(path.name, target.name, src_dir_fd=source, dst_dir_fd=destination)
        except FileNotFoundError:
            return  # moved by another process, or gone
        print(f"warning: {path} {reason}; moved to {self.relative(target)}", file=sys.stderr, flush=True)

    def bad_file(self, path: Path, reason: str) -> None:
        if self.quarantine_bad_files:
            self.quarantine(path, reason)
        elif self.skip_bad_files:
            self.warn_once(path, f"{reason}; skipped")
        else:
            raise JsonFileError(path, reason)

    def warn_once(self, path: Path, message: str) -> None:
        if path not in self._warned:
            self._warned.add(path)
            print(f"warning: {path} {message}", file=sys.stderr, flush=True)

    def read_checked(self, path: Path, problem: Callable[[Any], str | None], max_bytes: int = MAX_JSON_BYTES) -> Any:
        """The JSON of ``path`` (at most ``max_bytes``) if it parses and ``problem`` finds nothing; None if missing.

        A bad file is quarantined (``quarantine=True``, then None) or raises ``JsonFileError``. So is
        a file whose folder is a link (its content lies outside the folder: never read).
        """
        try:
            with self.open_dir(path.parent) as folder:
                data = read_json(path, max_bytes, dir_fd=folder)
        except FileNotFoundError:
            return None
        except NotAFolder:
            if self.quarantine_bad_files:
                raise  # the search stops on it (the node's problem)
            self.bad_file(path, f"is in {path.parent.name}/, which is a link or a file, not a folder")
            return None
        except JsonFileError as err:
            self.bad_file(path, err.reason)
            return None
        reason = problem(data)
        if reason is None:
            return data
        self.bad_file(path, reason)
        return None

    def names(self, folder: str, suffix: str = ".json") -> list[str]:
        """Stems of the ``suffix`` files of ``folder``; names ``name_problem`` refuses are quarantined (or
        skipped with one warning; a reader in neither mode skips them silently).

        Hidden names are ignored: NFS keeps deleted open files as ``.nfsXXXX``.
        """
        names = []
        for name in self.entries(self.root / folder):
            if name.startswith("."):
                continue
            if (problem := self.name_problem(folder, name)) is not None:
                self.refused_names[self.root / folder / name] = problem
                if self.quarantine_bad_files:
                    self.quarantine(self.root / folder / name, problem)
                elif self.skip_bad_files:
                    self.warn_once(self.root / folder / name, f"{problem}; skipped")
                continue
            if name.endswith(suffix):
                names.append(name[: -len(suffix)])
        return names

    def name_problem(self, folder: str, name: str) -> str | None:
        """Why ``name`` may not be in the listed ``folder`` (its ``NAMES`` pattern), or None; a subclass
        adds what the pattern cannot say (``RunDir``: the numbers in a name held to their range)."""
        return None if self.NAMES[folder].match(name) else f"is not a {folder}/ file name"

    def entries(self, folder: Path) -> list[str]:
        """The names in ``folder``, listed through its descriptor (``open_dir``); none if it is missing, or
        a link or a file (``refuse``: its entries lie outside)."""
        try:
            with self.open_dir(folder) as fd, os.scandir(fd) as entries:
                return [entry.name for entry in entries]
        except FileNotFoundError:
            return []
        except NotAFolder as err:
            self.refuse(err)
            return []

    def open_own_file(self, path: Path) -> int:
        """A writable descriptor of the regular file ``path`` (a lock, a heartbeat), created if missing.

        Something else planted there (a symbolic link to a file outside the folder, a FIFO) is
        never followed: it is moved to ``quarantine/`` and a regular file created in its place.
        """
        with self.open_dir(path.parent) as folder:
            try:
                return open_file(path.name, os.O_CREAT | os.O_RDWR, dir_fd=folder)
            except NotRegularFile as err:
                self.quarantine(path, err.reason)
                return open_file(path.name, os.O_CREAT | os.O_RDWR, dir_fd=folder)

    def filesystem_now(self) -> float:
        """The shared filesystem's clock: the mtime of a probe file created now in ``tmp/``."""
        probe = f"clock-{self.identity.host}-{self.identity.pid}-{self.identity.token}"
        with self.open_dir(self.root / "tmp") as folder:
            fd = open_file(probe, os.O_CREAT | os.O_WRONLY, dir_fd=folder)
            try:
                os.utime(fd)
                return os.fstat(fd).st_mtime
            finally:
                os.close(fd)
                os.unlink(probe, dir_fd=folder)
