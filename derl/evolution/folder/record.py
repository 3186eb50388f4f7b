"""The published record of a morphology (``metadata/<id>.json``, docs/reference/output-folder.md#metadataidjson), typed.

One definition for the writer (``derl.evolution.step``), the validator
(``derl.evolution.folder.schema.metadata_problem``) and the readers (``derl.analysis.records``): every
field of ``PublishedRecord`` but ``fitness`` is bookkeeping; ``fitness`` holds the training
summary (``derl.metrics``: ``return``, the ``__reward__*`` terms, ``energy``, ``x_pos``,
``metric``) and is written flat, between ``device`` and ``env_steps``, as derl always wrote it.

Records written by older derl may lack the optional fields; only ``REQUIRED`` must be there.
"""

from __future__ import annotations

import dataclasses
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

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to ``metadata/<id>.json``: bookkeeping with the fitness terms inlined."""
        data: dict[str, Any] = {}
        for key in FIELDS:
            if key == "fitness":
                data.update(self.fitness)
            else:
                data[key] = getattr(self, key)
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> PublishedRecord:
        """The record of a metadata object that passed ``schema.metadata_problem`` (its numeric
        non-bookkeeping keys are the fitness terms)."""
        return PublishedRecord(**{key: value for key, value in data.items() if key in BOOKKEEPING},
                               fitness=fitness_terms(data))


FIELDS = tuple(field.name for field in dataclasses.fields(PublishedRecord))
# Metadata fields that are bookkeeping, not fitness terms (every other field is a finite number).
BOOKKEEPING = frozenset(FIELDS) - {"fitness"}
REQUIRED = tuple(field.name for field in dataclasses.fields(PublishedRecord)
                 if field.default is dataclasses.MISSING and field.name != "fitness")


def fitness_terms(metadata: dict[str, Any]) -> dict[str, float]:
    """The numeric results of a metadata object (everything that is not bookkeeping)."""
    return {key: float(value) for key, value in metadata.items()
            if key not in BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool)}
