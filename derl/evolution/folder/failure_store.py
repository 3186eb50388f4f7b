"""The failures' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): a morphology that
failed (``error_metadata/<id>.json``: ``{id, slot, attempt, reason, node, worker}``); its slot then
tries its next attempt (``derl.evolution.scheduling``).

A record that fails its schema is quarantined, and the morphology counts as not failed: it is tried again.
A record read back is a ``Failure``, checked once when it is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.json_record import JsonRecord, morphology_problem
from derl.evolution.folder.shared import SharedFolder


@dataclass(frozen=True, kw_only=True)
class Failure(JsonRecord):
    """Morphology ``id`` (attempt ``attempt`` of slot ``slot``) failed: ``reason`` (one line), the last frames
    of its ``traceback``, on worker ``worker`` of node ``node`` (both absent in records of an older derl).
    Checked when it is built (``JsonRecord``: a ``ValueError``)."""

    NAMED = ("id",)
    WHAT = "the failure record of {id!r:.60}"

    id: str
    slot: int
    attempt: int
    reason: str
    traceback: str | None = None
    node: int | None = None
    worker: int | None = None

    @classmethod
    def name_problem(cls, data: Mapping[str, object], **named: Any) -> str | None:
        return morphology_problem(data, named["id"])


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

    def read_failure(self, morphology_id: str) -> Failure | None:
        """The failure record of ``morphology_id``, None if there is none (or it was just quarantined)."""
        data = self.run.read_checked(self.error_path(morphology_id),
                                     lambda data: Failure.problem(data, id=morphology_id))
        return None if data is None else Failure.from_json(data, id=morphology_id)

    def record_failure(self, failure: Failure) -> None:
        self.run.write_json(self.error_path(failure.id), failure.to_json())
