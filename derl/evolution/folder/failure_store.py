"""The failures' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): a morphology that
failed (``error_metadata/<id>.json``: ``{id, slot, attempt, reason, node, worker}``); its slot then
tries its next attempt (``derl.evolution.scheduling``).

A record that fails its schema is quarantined, and the morphology counts as not failed: it is tried again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.shared import SharedFolder


class FailureStore:
    """Reads and writes of the failure records in ``run`` (a ``RunDir``), through the checked
    primitives of its ``SharedFolder``."""

    def __init__(self, run: SharedFolder):
        self.run = run

    def error_path(self, morphology_id: str) -> Path:
        return self.run.root / "error_metadata" / f"{schema.checked_id(morphology_id)}.json"

    def failed_ids(self) -> list[str]:
        return self.run.names("error_metadata")

    def has_failed(self, morphology_id: str) -> bool:
        """True if ``error_metadata/<id>.json`` exists and matches its schema (a bad one is quarantined,
        and the morphology counts as not failed: it is tried again)."""
        return self.read_failure(morphology_id) is not None

    def read_failure(self, morphology_id: str) -> dict[str, Any] | None:
        return self.run.read_checked(self.error_path(morphology_id),
                                      lambda data: schema.error_problem(data, morphology_id))

    def record_failure(self, failure: dict[str, Any]) -> None:
        self.run.write_json(self.error_path(failure["id"]), failure)
