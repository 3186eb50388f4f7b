"""Test-only shims for the processes of a simulated cluster, switched on by environment variables.

``benchmarks.cluster`` puts a folder holding a one-line ``sitecustomize.py`` (``import
benchmarks.sim_shim as s; s.install()``) first on ``PYTHONPATH``, so every process of a simulated node,
its coordinator, workers and tools, calls ``install`` at start-up. Nothing in derl imports this module.

- ``DERL_SIM_CLOCK_OFFSET`` (seconds): ``time.time`` and ``time.time_ns`` run that far ahead (behind
  if negative), as the clock of another machine would. File times the kernel sets are not moved: on a
  shared filesystem they come from one clock, the file server's.
- ``DERL_SIM_FULL_DISK`` (a flag file): while it exists and holds a folder, every ``os.fsync`` of a file
  below that folder raises ``OSError(ENOSPC)``, as a full disk does when data reaches it (derl's writes
  go through ``derl.fileio``, which fsyncs before it renames). Deleting the flag frees the disk.
- ``DERL_SIM_AUDIT`` (a folder) and ``DERL_SIM_AUDIT_ROOT`` (the run folder): the process counts its file
  operations on the run folder (``Audit``) and writes them to ``<folder>/<pid>.json`` when it exits.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass
class Audit:
    """File operations of one process on the run folder, counted by an audit hook (``sys.addaudithook``).

    An open counts when its path lies in the run folder or is relative (derl opens the run's files by
    name from a descriptor of their folder: ``derl.evolution.folder.shared``); a listing is ``os.listdir``
    or ``os.scandir`` of a folder of the run or of a descriptor, and ``entries`` the names it returned (also
    by the folder's name: ``entries_by_folder``).
    ``read_chars`` (bytes read, the kernel's rchar: any file, pipe or socket) and ``cpu`` (user + system
    seconds) run from ``install``.
    """

    role: str = ""
    opens: int = 0
    folder_opens: int = 0
    listings: int = 0
    entries: int = 0
    read_chars: int = 0
    cpu: float = 0.0
    entries_by_folder: dict[str, int] = field(default_factory=dict)

    def listed(self, path: Any, count: int) -> None:
        """Counts ``count`` entries listed in ``path`` (a folder or a descriptor of one), by the folder's name."""
        self.entries += count
        name = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.fsdecode(path)
        folder = os.path.basename(name)
        self.entries_by_folder[folder] = self.entries_by_folder.get(folder, 0) + count


def _in_run(path: Any, root: str) -> bool:
    if isinstance(path, int):
        return True
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else ""
    return bool(text) and (not os.path.isabs(text) or text.startswith(root))


class _CountedScandir:
    """``os.scandir``'s iterator, counting the entries it yields into ``audit``."""

    def __init__(self, inner: Any, audit: Audit, path: Any):
        self.inner, self.audit, self.path = inner, audit, path

    def __iter__(self) -> _CountedScandir:
        return self

    def __next__(self) -> os.DirEntry:
        entry = next(self.inner)
        self.audit.listed(self.path, 1)
        return entry

    def __enter__(self) -> _CountedScandir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def close(self) -> None:
        self.inner.close()


def _audit(folder: str, root: str) -> None:
    audit = Audit()
    process = psutil.Process()
    start_io, start_cpu = process.io_counters().read_chars, sum(process.cpu_times()[:2])

    def hook(event: str, args: tuple) -> None:
        if event == "open" and _in_run(args[0], root):
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            if flags & os.O_DIRECTORY:
                audit.folder_opens += 1
            else:
                audit.opens += 1
        elif event in ("os.listdir", "os.scandir") and _in_run(args[0], root):
            audit.listings += 1

    listdir, scandir = os.listdir, os.scandir

    def counted_listdir(path: Any = ".") -> list:
        names = listdir(path)
        if _in_run(path, root):
            audit.listed(path, len(names))
        return names

    def counted_scandir(path: Any = ".") -> Any:
        inner = scandir(path)
        return _CountedScandir(inner, audit, path) if _in_run(path, root) else inner

    def write() -> None:
        argv = " ".join(sys.argv)
        audit.role = "coordinator" if "evo_single_proc" in argv else "worker" if "worker" in argv else "other"
        audit.read_chars = process.io_counters().read_chars - start_io
        audit.cpu = sum(process.cpu_times()[:2]) - start_cpu
        Path(folder, f"{os.getpid()}.json").write_text(json.dumps(asdict(audit)))

    os.listdir, os.scandir = counted_listdir, counted_scandir
    sys.addaudithook(hook)
    atexit.register(write)


def _skew_clock(offset: float) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_time_ns() + int(offset * 1e9)


def fill_disk(flag: str) -> None:
    """While the file ``flag`` exists, every ``os.fsync`` of a file below the folder it names raises
    ``OSError(ENOSPC)``, as a full disk does when data reaches it (derl.fileio fsyncs before it renames)."""
    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        try:
            full = Path(flag).read_text().strip()
        except FileNotFoundError:
            return real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
        if full and path.startswith(full):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_fsync(fd)

    os.fsync = fsync


def install() -> None:
    """Installs the shims the environment asks for (the module docstring); none without it."""
    if offset := os.environ.get("DERL_SIM_CLOCK_OFFSET"):
        _skew_clock(float(offset))
    if flag := os.environ.get("DERL_SIM_FULL_DISK"):
        fill_disk(flag)
    if folder := os.environ.get("DERL_SIM_AUDIT"):
        _audit(folder, os.environ.get("DERL_SIM_AUDIT_ROOT", ""))
