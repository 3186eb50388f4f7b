"""A node's private folder on its own host: where its coordinator writes the config its workers
load, removed on exit, and by the next coordinator on the host if this one was SIGKILLed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from derl.checked_config import Config
from derl.config import dump_config
from derl.evolution.process import log
from derl.fileio.writes import atomic_write_text

# A node's private config folder in the temporary folder: derl-node<NODE_ID>-<coordinator pid>-<mkdtemp's suffix>.
_PRIVATE_FOLDER = re.compile(r"^derl-node\d+-(\d+)-[a-z0-9_]+\Z")


@contextlib.contextmanager
def private_folder(node: int) -> Iterator[Path]:
    """A folder of this node's own in the temporary folder, removed on exit; the folders of this user's
    dead coordinators first (``remove_dead_private_folders``: SIGKILL skips a coordinator's cleanup).

    Named for this process's pid, it holds ``lock``, locked (``flock``) while this coordinator lives:
    the kernel drops the lock when the process dies, however it dies.
    """
    tmp = Path(tempfile.gettempdir())
    for path in remove_dead_private_folders(tmp):
        log(f"removed {path}, the private folder of a dead coordinator")
    with tempfile.TemporaryDirectory(prefix=f"derl-node{node}-{os.getpid()}-", dir=tmp) as folder:
        fd = os.open(Path(folder) / "lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)  # not inherited
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield Path(folder)
        finally:
            os.close(fd)


def remove_dead_private_folders(tmp: Path) -> list[Path]:
    """Removes the private folders (``private_folder``) in ``tmp`` that dead coordinators left; returns them.

    Only a real folder (never a link) named ``derl-node<N>-<pid>-...``, owned by this user, whose pid
    runs no process on this host and whose ``lock`` it can lock: a live coordinator holds its lock,
    also one whose pid this host does not see (another pid namespace sharing ``tmp``). A folder without
    ``lock`` is left alone (its coordinator may be creating it). One that vanishes meanwhile (another
    node's sweep) is skipped; one that cannot be removed is logged, never the node's error.
    """
    removed = []
    with os.scandir(tmp) as entries:
        candidates = [(entry, int(found[1])) for entry in entries if (found := _PRIVATE_FOLDER.match(entry.name))]
    for entry, pid in candidates:
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or psutil.pid_exists(pid):
                continue
            fd = os.open(Path(entry.path) / "lock", os.O_RDWR | os.O_NOFOLLOW)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its coordinator lives
                shutil.rmtree(entry.path)
            finally:
                os.close(fd)
            removed.append(Path(entry.path))
        except (FileNotFoundError, BlockingIOError):  # gone meanwhile (another node's sweep), or its owner lives
            continue
        except OSError as err:
            log(f"could not remove {entry.path}, the private folder of a dead coordinator: {err}")
    return removed


def node_config_file(cfg: Config, folder: Path) -> Path:
    """Writes ``cfg`` (this node's resolved config) into ``folder``, private to this node; returns the file.

    Workers load it, not ``OUT_DIR/config.yaml``: a worker the coordinator restarts mid-run trains with
    the config its node joined the search with, even if someone edits or deletes the shared file
    (docs/guides/evolution.md#one-config-per-search).
    """
    path = folder / "config.yaml"
    atomic_write_text(path, dump_config(cfg))
    return path
