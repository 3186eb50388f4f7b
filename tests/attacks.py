"""The damage a test does to a file of a run folder: one catalogue for the hostile tests and the fuzzer.

``damage(path, how, target)`` replaces ``path`` by ``how`` (``DAMAGES``): cut short, another JSON type,
``null``, every number 1e300 (``huge value``) or every 0 of its text 400 nines (``long digits``: integers
past any range), 100,000 open brackets, empty, a folder, a FIFO, a symbolic link to ``target``, or its
time set ten years ahead (``future``) or to 1970 (its content kept).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

TEN_YEARS = 10 * 365 * 86400
DAMAGES = ("truncate", "wrong type", "null", "huge value", "long digits", "deep nesting", "empty", "directory",
           "fifo", "symlink", "future", "1970")


def _huge(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _huge(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_huge(item) for item in value]
    return 1e300 if isinstance(value, int | float) and not isinstance(value, bool) else value


def _huge_text(text: str) -> str:
    try:
        return json.dumps(_huge(json.loads(text)))
    except ValueError:  # not JSON (a heartbeat, a lock): a number past the float range
        return "1e999"


def damage(path: Path, how: str, target: Path) -> None:
    """Damages the file at ``path`` as ``how`` says (``DAMAGES``); ``target``: where a ``symlink`` points."""
    if how in ("future", "1970"):
        when = time.time() + TEN_YEARS if how == "future" else 0
        os.utime(path, (when, when))
        return
    text = path.read_text(errors="replace") if path.is_file() else ""
    path.unlink(missing_ok=True)
    written = {"truncate": text[: len(text) // 2], "wrong type": "[1, 2]", "null": "null", "empty": "",
               "huge value": _huge_text(text), "long digits": text.replace("0", "9" * 400) or "1e999",
               "deep nesting": "[" * 100_000}
    if how in written:
        path.write_text(written[how])
    elif how == "directory":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "symlink":
        path.symlink_to(target)
    else:
        raise ValueError(f"unknown damage {how!r}; known: {', '.join(DAMAGES)}")
