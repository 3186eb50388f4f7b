"""The published record of a morphology (``metadata/<id>.json``, docs/reference/output-folder.md#metadataidjson), typed.

One definition for the writer (``derl.evolution.step``), the validator
(``derl.evolution.folder.schema.metadata_problem``) and the readers: ``PublicationStore.read_metadata`` builds
each record once from JSON its schema passed, and the search (selection, ``summary.json``, the curves) and
the read side (``derl.analysis``) read its fields, never the JSON's keys. Every
field of ``PublishedRecord`` but ``fitness`` is bookkeeping; ``fitness`` holds the training
summary (``derl.metrics``: ``return``, the ``__reward__*`` terms, ``energy``, ``x_pos``,
``metric``) and is written flat, between ``device`` and ``env_steps``, as derl always wrote it.

Records written by older derl may lack the optional fields; only ``REQUIRED`` must be there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The files of a published morphology: ``files`` key -> (folder, suffix), relative to OUT_DIR.
MORPHOLOGY_FILES = {"genome": ("genomes", ".json"), "xml": ("xml", ".xml"), "checkpoint": ("models", ".pt"),
                    "metrics": ("metrics", ".jsonl")}


def morphology_files(morphology_id: str) -> dict[str, str]:
    """The ``files`` entry of a morphology's metadata: its files' paths relative to ``OUT_DIR``."""
    return {key: f"{folder}/{morphology_id}{suffix}" for key, (folder, suffix) in MORPHOLOGY_FILES.items()}


@dataclass(frozen=True, kw_only=True)
class PublishedRecord:
    """A published morphology, in the order of its JSON keys.

    ``lineage`` is ``<root>/.../<parent>/<id>``; ``publication`` the number it took in
    ``published/`` (the order of publication on every node); ``device`` where it trained.
    """

    id: str
    parent_id: str | None = None
    lineage: str
    mutation: str | None = None
    slot: int
    attempt: int
    seed: int | None = None
    node: int | None = None
    worker: int | None = None
    device: str | None = None
    fitness: dict[str, float]
    env_steps: int | None = None
    iterations: int | None = None
    wall_time: float | None = None
    steps_per_sec: float | None = None
    files: dict[str, str]
    published_at: float | None = None
    publication: int

    def to_json(self) -> dict[str, object]:
        """The JSON object written to ``metadata/<id>.json``: bookkeeping with the fitness terms inlined. An
        optional field left None is not written (an older derl's record lacks it), but ``parent_id`` and
        ``mutation``, whose null is a value: a morphology of the initial population."""
        at = FIELDS.index("fitness")
        return {**self._written(FIELDS[:at]), **self.fitness, **self._written(FIELDS[at + 1:])}

    def _written(self, keys: tuple[str, ...]) -> dict[str, object]:
        return {key: value for key in keys if (value := getattr(self, key)) is not None or key in NULLABLE}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PublishedRecord:
        """The record of a metadata object that passed ``schema.metadata_problem`` (its numeric
        non-bookkeeping keys are the fitness terms; a time or rate written as an integer is read as a float)."""
        bookkeeping = {key: value for key, value in data.items() if key in BOOKKEEPING}
        times = {key: float(bookkeeping[key]) for key in FLOATS if bookkeeping.get(key) is not None}
        return PublishedRecord(**{**bookkeeping, **times}, fitness=fitness_terms(data))


FIELDS = tuple(field.name for field in dataclasses.fields(PublishedRecord))
# Metadata fields that are bookkeeping, not fitness terms (every other field is a finite number).
BOOKKEEPING = frozenset(FIELDS) - {"fitness"}
NULLABLE = ("parent_id", "mutation")  # written as null where None (schema.metadata_problem takes null for both)
FLOATS = ("wall_time", "steps_per_sec", "published_at")  # optional, finite numbers >= 0 (schema.METADATA_TYPES)
REQUIRED = tuple(field.name for field in dataclasses.fields(PublishedRecord)
                 if field.default is dataclasses.MISSING and field.name != "fitness")


def fitness_terms(metadata: Mapping[str, object]) -> dict[str, float]:
    """The numeric results of a metadata object (everything that is not bookkeeping)."""
    return {key: float(value) for key, value in metadata.items()
            if key not in BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool)}
