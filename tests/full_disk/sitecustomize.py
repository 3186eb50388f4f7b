"""Test hook: a full disk for the processes of one test, switched on and off from outside.

Put this folder first on ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up) and set
``DERL_TEST_FULL_DISK=FLAG``. While the file FLAG exists, every ``os.fsync`` of a file below the
folder named in FLAG raises ``OSError(ENOSPC)``, as a full disk does when data reaches it; every
derl write goes through ``derl.fileio``, which fsyncs before it renames. Deleting FLAG "frees space".
The shim is the simulated cluster's (``benchmarks.sim_shim.fill_disk``, in ``tools/``, which is put last on
the path here: the benchmarks are not installed, and nothing of ``tools/`` may shadow another module).
"""

import os
import sys
from pathlib import Path

if flag := os.environ.get("DERL_TEST_FULL_DISK"):
    sys.path.append(str(Path(__file__).resolve().parents[2] / "tools"))
    from benchmarks.sim_shim import fill_disk

    fill_disk(flag)
