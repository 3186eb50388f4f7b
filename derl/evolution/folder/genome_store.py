"""The genomes' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): each morphology's
genome (``genomes/<id>.json``) and its MJCF (``xml/<id>.xml``), written before it trains; its
checkpoint (``models/<id>.pt``) and curves (``metrics/<id>.jsonl``), which derl.ppo writes, are
checked and cleared here when the body is made anew.

The genome is written last: a genome file means both exist. The MJCF ends with the SHA-256 of the genome
it was made from (``body_mark``), so a genome read back that is not the body trained (written over
while the search was stopped, or during training) is refused like a corrupt one: quarantined, and
the body made anew from scratch, never published nor drawn as a parent. An MJCF without the mark (an
older derl's) is taken as it is.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from derl.config import ConfigError
from derl.evolution.folder import schema
from derl.evolution.folder.record import MORPHOLOGY_FILES
from derl.evolution.folder.shared import SharedFolder
from derl.fileio.reads import MAX_JSON_BYTES, JsonFileError, NotRegularFile, parse_json, read_bytes

_MARK = re.compile(r"<!-- derl genome sha256 ([0-9a-f]{64}) -->\s*\Z")


class GenomeLimits(NamedTuple):
    """What a genome read back must be, beyond its bookkeeping (``schema.genome_problem``): the body's
    design space, which only the backend knows (``derl.evolution.backend.Backend.genome_limits``).
    A file over ``max_bytes`` is refused before it is parsed."""

    max_bytes: int = MAX_JSON_BYTES
    problem: Callable[[Any], str | None] = lambda data: None


@dataclass(frozen=True)
class StoredGenome:
    """A genome read back and checked (``GenomeStore.read_genome``): the bookkeeping the search reads, typed
    (``schema.genome_problem`` checked it), and the whole JSON object, the body, which only the backend
    reads (``Backend.mutate``; derl's body schema is ``derl.morphology.genome``'s)."""

    id: str
    parent_id: str | None
    mutation: str | None
    data: Mapping[str, Any]

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> StoredGenome:
        """The genome of a JSON object that passed ``schema.genome_problem``."""
        return StoredGenome(data["id"], data.get("parent_id"), data.get("mutation"), data)


def genome_digest(genome: Any) -> str:
    """The SHA-256 of a parsed genome, written canonically (sorted keys, no spaces): the same for the
    genome as written and as read back, whatever its whitespace."""
    return hashlib.sha256(json.dumps(genome, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def body_mark(genome_json: str) -> str:
    """The comment that ends an MJCF made from ``genome_json`` (``GenomeStore.write_genome``)."""
    return f"<!-- derl genome sha256 {genome_digest(parse_json(genome_json, 'a new genome'))} -->\n"


def morphology_file(root: Path, key: str, morphology_id: str) -> Path:
    """``<root>/<folder>/<id><suffix>``: a morphology's file ``key`` (genome, xml, checkpoint or metrics,
    as ``record.MORPHOLOGY_FILES`` lays them out), the id checked before it becomes a path."""
    folder, suffix = MORPHOLOGY_FILES[key]
    return root / folder / f"{schema.checked_id(morphology_id)}{suffix}"


class GenomeStore:
    """Reads and writes of the genomes and MJCFs in ``run`` (a ``RunDir``), through the checked
    primitives of its ``SharedFolder``."""

    def __init__(self, run: SharedFolder, limits: GenomeLimits):
        self.run, self.limits = run, limits

    def genome_path(self, morphology_id: str) -> Path:
        return morphology_file(self.run.root, "genome", morphology_id)

    def xml_path(self, morphology_id: str) -> Path:
        return morphology_file(self.run.root, "xml", morphology_id)

    def _trained_files(self, morphology_id: str) -> tuple[Path, Path]:
        """The checkpoint and metrics of ``morphology_id`` (derl.ppo writes them)."""
        return morphology_file(self.run.root, "checkpoint", morphology_id), \
            morphology_file(self.run.root, "metrics", morphology_id)

    def write_genome(self, morphology_id: str, genome_json: str, mjcf: str) -> None:
        """Writes the MJCF, then the genome (the genome file means both exist).

        A checkpoint and metrics already there belong to the body this one replaces (``has_genome``
        found it damaged): they are quarantined, so that the new body trains from scratch.

        Raises:
            ConfigError: the genome is one ``read_genome`` would refuse (``made_problem``): the design
                space the config lets the maker draw is wider than a genome may hold, so every body
                made anew would be refused again (written, trained, quarantined, for ever).
        """
        if (problem := self.made_problem(genome_json)) is not None:
            raise ConfigError(f"the body drawn for {morphology_id} {problem}: the config's design space (the "
                              "ranges of LIMB, TORSO, ...) draws bodies a genome may not hold")
        self.drop_trained(morphology_id, "belongs to a body made anew (its genome or MJCF was damaged)")
        self.run.write_text(self.xml_path(morphology_id), mjcf.rstrip("\n") + "\n" + body_mark(genome_json))
        self.run.write_text(self.genome_path(morphology_id), genome_json)

    def drop_trained(self, morphology_id: str, reason: str) -> None:
        """Quarantines the checkpoint and metrics of ``morphology_id`` (``reason``): its body trains from the start."""
        for stale in self._trained_files(morphology_id):
            if self.run.lexists(stale):
                self.run.quarantine(stale, reason)

    def made_problem(self, genome_json: str) -> str | None:
        """Why a genome just made (``genome_json``) would be refused when read back for its body, or None: its
        bytes and its body's design space (``limits``: ``read_genome`` holds it to them)."""
        try:
            data = parse_json(genome_json.encode(), "a new genome", self.limits.max_bytes)
        except JsonFileError as err:
            return err.reason
        return self.limits.problem(data)

    def read_xml(self, morphology_id: str) -> str:
        """The MJCF text of ``morphology_id``, never read through a link or from a FIFO.

        Raises:
            NotRegularFile: it (or ``xml/``) is a symbolic link, FIFO or folder, or over 16 MiB.
            FileNotFoundError: it is missing.
        """
        return self.run.read_in_folder(self.xml_path(morphology_id), read_bytes).decode(errors="replace")

    def _checked_genome(self, morphology_id: str) -> StoredGenome | None:
        data = self.run.read_checked(self.genome_path(morphology_id),
                                     lambda data: schema.genome_problem(data, morphology_id)
                                     or self.limits.problem(data) or self._body_problem(morphology_id, data),
                                     self.limits.max_bytes)
        return None if data is None else StoredGenome.from_json(data)

    def _body_problem(self, morphology_id: str, genome: Any) -> str | None:
        """Why ``genome`` is not the body ``xml/<id>.xml`` was made from (its mark), or None: the
        body trained is the MJCF's, so a genome that differs is never published or mutated."""
        try:
            mark = _MARK.search(self.read_xml(morphology_id)[-200:])
        except (FileNotFoundError, NotRegularFile):
            return None  # judged by has_genome (made anew) or by the published record's files
        if mark is None or mark[1] == genome_digest(genome):
            return None
        return (f"is not the body trained: {self.run.relative(self.xml_path(morphology_id))} was made from "
                "another genome (its sha256 differs)")

    def has_genome(self, morphology_id: str) -> bool:
        """True if the genome exists and parses and its MJCF is a regular file; else the morphology
        is made anew (``write_genome``), once.

        A corrupt genome is quarantined; so is an MJCF that is a link, FIFO or folder (trained on,
        it would be read from outside ``OUT_DIR``, and its published record refused, again and again),
        and a checkpoint or metrics file that is one (the training then starts without it).
        """
        for path in self._trained_files(morphology_id):
            if (kind := self.run.lstat(path)) is not None and not stat.S_ISREG(kind.st_mode):
                self.run.bad_file(path, "is not a regular file (a link, FIFO or folder); training starts without it")
        xml = self.xml_path(morphology_id)
        found = self.run.lstat(xml)
        if found is not None and not stat.S_ISREG(found.st_mode):
            self.run.bad_file(xml, "is not a regular file (a link, FIFO or folder); the morphology is made anew")
            return False
        return found is not None and self._checked_genome(morphology_id) is not None

    def files_problem(self, morphology_id: str) -> str | None:
        """Why the files of ``morphology_id`` (genome, MJCF, model, curve) cannot be published, or None: one
        is missing or not a regular file. Checked before publishing: once published, a record stays
        published whatever happens to them (``PublicationStore.read_metadata``)."""
        for key in MORPHOLOGY_FILES:
            path = morphology_file(self.run.root, key, morphology_id)
            if (found := self.run.lstat(path)) is None or not stat.S_ISREG(found.st_mode):
                return f"{self.run.relative(path)} is {'missing' if found is None else 'not a regular file'}"
        return None

    def read_genome(self, morphology_id: str) -> StoredGenome:
        """The genome, parsed and checked: its bookkeeping (``schema.genome_problem``), its body held to the
        design space (``limits``, the backend's) and to the MJCF trained (``body_mark``).

        Raises:
            FileNotFoundError: it is missing, or was just quarantined.
        """
        genome = self._checked_genome(morphology_id)
        if genome is None:
            raise FileNotFoundError(f"{self.genome_path(morphology_id)} is missing (see quarantine/)")
        return genome
