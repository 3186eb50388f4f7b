"""Test hook: a full disk for the processes of one test, switched on and off from outside.

Put this folder first on ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up) and set
``DERL_TEST_FULL_DISK=FLAG``. While the file FLAG exists, every ``os.fsync`` of a file below the
folder named in FLAG raises ``OSError(ENOSPC)``, as a full disk does when data reaches it; every
derl write goes through ``derl.fileio``, which fsyncs before it renames. Deleting FLAG "frees space".
"""

import errno
import os

_FLAG = os.environ.get("DERL_TEST_FULL_DISK")
_fsync = os.fsync


def _fsync_on_full_disk(fd):
    try:
        with open(_FLAG) as flag:
            full = flag.read().strip()
    except FileNotFoundError:
        return _fsync(fd)
    path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    if full and path.startswith(full):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return _fsync(fd)


if _FLAG:
    os.fsync = _fsync_on_full_disk
