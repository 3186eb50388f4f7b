"""The failures' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): a morphology that
failed (``error_metadata/<id>.json``: ``{id, slot, attempt, reason, node, worker}``); its slot then
tries its next attempt (``derl.evolution.scheduling``).

A record that fails its schema is quarantined, and the morphology counts as not failed: it is tried again.
A record read back is a ``Failure``, checked once when it is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.shared import SharedFolder


@dataclass(frozen=True, kw_only=True)
class Failure:
    """Morphology ``id`` (attempt ``attempt`` of slot ``slot``) failed: ``reason`` (one line), the last frames
    of its ``traceback``, on worker ``worker`` of node ``node`` (both absent in records of an older derl).
    Checked when it is built (``schema.error_problem``: a ``ValueError``)."""

    id: str
    slot: int
    attempt: int
    reason: str
    traceback: str | None = None
    node: int | None = None
    worker: int | None = None

    def __post_init__(self) -> None:
        if (reason := schema.error_problem(self.as_json(), self.id)) is not None:
            raise ValueError(f"not the failure record of {self.id!r:.60}: {reason}")

    @staticmethod
    def parse(data: Any, morphology_id: str) -> Failure:
        """The failure record in the parsed file ``data`` of ``morphology_id``.

        Raises:
            ValueError: ``data`` is not one (the reason as its message).
        """
        if (reason := schema.error_problem(data, morphology_id)) is not None:
            raise ValueError(reason)
        return Failure(**{field.name: data.get(field.name) for field in dataclasses.fields(Failure)})

    def as_json(self) -> dict[str, Any]:
        """The file's content (fields that are None left out)."""
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


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
                                     lambda data: schema.error_problem(data, morphology_id))
        return None if data is None else Failure.parse(data, morphology_id)

    def record_failure(self, failure: Failure) -> None:
        self.run.write_json(self.error_path(failure.id), failure.as_json())
