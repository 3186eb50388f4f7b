"""Processes that die with their parent: no worker, training or pool process outlives its starter.

Linux's parent-death signal (``PR_SET_PDEATHSIG``) reaches a child even when its parent is
killed with SIGKILL, which no handler sees. A parent that dies before the child asks for it is
caught by comparing the parent's pid (docs/guides/evolution.md#stop).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Asks Linux to send ``sig`` to this process when its parent dies; exits at once if ``parent``
    (the pid it was started by) is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def pool_process_init(parent: int) -> None:
    """Initializer of derl's process pools: dies with ``parent``; Ctrl-C is the parent's to handle
    (a terminal sends it to the whole group, and a pool process would print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL, parent)
