"""warp's own messages, quietened once for every process that uses ``SIM.BACKEND warp``.

warp prints at ``LOG_INFO`` a banner when it initialises and one line per kernel module it loads
("Module ... load on device 'cuda:0' took ... ms"): a new morphology loads some 100, so a worker's
log drowns in them. From warp 1.19 one setting, ``wp.config.log_level``, gates both (``wp.config.quiet``
is gone); warnings and errors still print.
"""

from __future__ import annotations

from types import ModuleType


def quiet_warp() -> ModuleType:
    """Imports warp and raises its log level to warnings (unless the user chose another level); returns warp.

    Cheap and idempotent: it does not initialise warp, so it can run where the backend is imported.
    """
    import warp as wp  # lazy: warp is an optional install (requirements-gpu.txt)

    if wp.config.log_level == wp.LOG_INFO:  # warp's default; a level set by the user (LOG_DEBUG) is kept
        wp.config.log_level = wp.LOG_WARNING
    return wp
