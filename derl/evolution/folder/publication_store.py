"""The publications' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): the publication
numbers (``published/<n>.json``, each taken by exclusive creation), the published records
(``metadata/<id>.json``, written last and created exclusively, so no morphology is published twice)
and the morphologies retired from the vanilla-tournament population (``retired/<id>.json``).

Published files are never rewritten or deleted, so readers may cache them. A record is read only
once the folder backs it: its number is its own, its slot's claim names it. Published means published:
once read, a record stays published whatever later happens to the files it lists (``read_metadata``).
"""

from __future__ import annotations

import stat
from pathlib import Path

from derl.evolution.folder import schema
from derl.evolution.folder.record import PublishedRecord
from derl.evolution.folder.shared import SharedFolder
from derl.evolution.folder.slot_store import SlotStore
from derl.fileio.folders import NotAFolder
from derl.fileio.reads import JsonFileError, read_json


class PublicationStore:
    """Publication numbers, published records and retirements in ``run`` (a ``RunDir``), through the
    checked primitives of its ``SharedFolder``; ``slots`` (its ``SlotStore``) vouches for a record's slot;
    ``search_space_size`` bounds the publication numbers (``schema.max_publications``)."""

    def __init__(self, run: SharedFolder, slots: SlotStore, search_space_size: int):
        self.run = run
        self.slots = slots
        self.search_space_size = search_space_size  # EVO.SEARCH_SPACE_SIZE: the range of publication numbers

    def metadata_path(self, morphology_id: str) -> Path:
        return self.run.root / "metadata" / f"{schema.checked_id(morphology_id)}.json"

    def published_ids(self) -> list[str]:
        return self.run.names("metadata")

    def is_published(self, morphology_id: str) -> bool:
        return self.run.lexists(self.metadata_path(morphology_id))

    def read_metadata(self, morphology_id: str, rules: schema.RecordRules) -> PublishedRecord | None:
        """The published record of ``morphology_id`` in a run with ``rules``; None if missing or quarantined.

        Its JSON must pass its schema (``derl.evolution.folder.schema.metadata_problem``: a slot of the search,
        the selection criteria); the record is then built from it, once, and held to the folder: its
        publication number must be its own (``published/<n>.json`` names it), so no two records share a
        number, and its slot's claim must name it, so that only the morphology a worker held the slot for
        counts.

        Published means published: what happens to the files it lists (genome, MJCF, model, curve)
        never refuses it, so no later start unpublishes a result and trains its slot again. A listed
        file that is missing is named in one warning; one that is not a regular file is quarantined
        (never read through). A genome that cannot be read takes the morphology out of the tournament
        pool (``derl.evolution.results.PublishedResults.select_parent``), nothing more.
        """
        path = self.metadata_path(morphology_id)
        data = self.run.read_checked(path, lambda data: schema.metadata_problem(data, morphology_id, rules))
        if data is None:
            return None
        record = PublishedRecord.from_json(data)
        if (problem := self._publication_problem(record) or self._metadata_claim_problem(record)) is not None:
            self.run.bad_file(path, problem)
            return None
        self._check_files(record)
        return record

    def _check_files(self, record: PublishedRecord) -> None:
        """Warns of each file ``record`` lists that is missing; quarantines one that is not a regular file."""
        kept = f"{record.id} stays published"
        for relative in record.files.values():
            path = self.run.root / relative
            if (found := self.run.lstat(path)) is None:
                self.run.warn_once(path, f"is missing; {kept}")
            elif not stat.S_ISREG(found.st_mode):
                self.run.bad_file(path, f"is not a regular file (a link, FIFO or folder); {kept}")

    def _publication_problem(self, record: PublishedRecord) -> str | None:
        """Why ``published/<n>.json`` of the record's number ``n`` does not give it to the record, or None."""
        number = record.publication
        path = self.run.root / "published" / f"{number:08d}.json"
        try:
            with self.run.open_dir(path.parent) as folder:
                taken = read_json(path, dir_fd=folder)
        except FileNotFoundError:
            return f"has publication {number}, which was never taken (no {self.run.relative(path)})"
        except NotAFolder as err:
            self.run.refuse(err)
            return f"has publication {number}, whose folder {self.run.relative(err.path)}/ is a link or a file"
        except JsonFileError as err:
            return f"has publication {number}, whose record {self.run.relative(path)} {err.reason}"
        if schema.published_problem(taken) or taken["id"] != record.id:
            return f"has publication {number}, which {self.run.relative(path)} gives to {taken.get('id')!r:.40}" \
                if isinstance(taken, dict) else f"has publication {number}, whose record is not an object"
        return None

    def _metadata_claim_problem(self, record: PublishedRecord) -> str | None:
        """Why the current claim of the record's slot (``slots/`` or its latest lease) refutes it, or None.

        A worker names each morphology in its slot's claim before training it and never changes the
        claim once it is published, so a record its slot never held (planted) is refused. A damaged
        claim names nobody and refutes nothing (``SlotStore.read``: the lease, not its content, decides who
        finishes the slot): refusing the record would throw away the result its owner just published.
        """
        slot = record.slot
        try:
            claim = self.slots.read(slot)
        except JsonFileError:  # damaged, read by a reader that neither quarantines nor skips
            return None
        if claim is None:
            return f"is in slot {slot}, which was never claimed (no {self.run.relative(self.slots.path(slot))})"
        if claim.damaged or claim.id == record.id:
            return None
        name = self.run.relative(self.slots.lease_path(slot, claim.lease))
        return f"is in slot {slot}, whose claim {name} names {claim.id}"

    def taken_numbers(self) -> set[int]:
        """Every publication number of the search's range taken (a listing of ``published/``)."""
        return {int(name) for name in self.run.names("published")}  # a damaged record's number stays taken

    def taken_id(self, number: int) -> str | None:
        """The morphology ``published/<number>.json`` gives its number to; None if missing or damaged."""
        return self.taken_from(number, number + 1).get(number)

    def taken_from(self, start: int, stop: int | None = None) -> dict[int, str | None]:
        """The numbers taken from ``start`` up to the first free one (or ``stop``), each with the morphology
        its record names (None: damaged), by looking at ``published/<n>.json`` one by one in one descriptor
        of the folder: the cost of what is new since ``start``, never a listing of the folder."""
        folder = self.run.root / "published"
        stop = min(stop or schema.max_publications(self.search_space_size),
                   schema.max_publications(self.search_space_size))
        found: dict[int, str | None] = {}
        try:
            with self.run.open_dir(folder) as descriptor:
                for number in range(start, stop):
                    try:
                        taken = read_json(folder / f"{number:08d}.json", dir_fd=descriptor)
                    except FileNotFoundError:
                        break
                    except JsonFileError:
                        taken = None
                    found[number] = taken["id"] if schema.published_problem(taken) is None else None
        except FileNotFoundError:
            pass
        except NotAFolder as err:
            self.run.refuse(err)
        return found

    def take_publication_number(self, morphology_id: str, node: int, worker: int, start: int | None = None) -> int:
        """The lowest free publication number, taken by creating ``published/<n>.json`` exclusively.

        Numbers are unique on every node (exclusive creation) and need no clock. Every process takes
        the lowest number free when it looks (a number taken concurrently makes it try the next), and
        numbers are never removed, so in a folder derl wrote the numbers taken are ``0 .. n - 1`` and
        the next is ``n``: increasing in the order they are taken. A number planted above a free one
        (``published/00000599.json`` in a fresh run) is passed over, never continued from: near the top
        of the range it would leave no number for the search's own publications (a name in range must
        never force the next out of it). Only numbers of the search's range count
        (``schema.max_publications``: a planted name out of it is quarantined by the listing).
        A number whose taker died before writing its metadata stays taken and unused (a gap):
        the morphology takes a new number when it is published again. ``start``: the lowest free number
        the caller knows of (every number below it taken: ``PublishedResults.next_number``), tried first,
        so the folder is not listed.

        Raises:
            RuntimeError: every number of the range is taken (100 takes per slot: the folder is broken).
        """
        folder = self.run.root / "published"
        taken = self.taken_numbers() if start is None else set()
        number = lowest_free(taken, start or 0)
        record = {"id": morphology_id, "node": node, "worker": worker}
        limit = schema.max_publications(self.search_space_size)
        while number < limit and not self.run.create_json(folder / f"{number:08d}.json", record):
            number = lowest_free(taken, number + 1)
        if number >= limit:
            raise RuntimeError(f"every publication number below {limit} is taken in {self.run.relative(folder)}/ "
                               f"({schema.PUBLICATIONS_PER_SLOT} per slot of EVO.SEARCH_SPACE_SIZE)")
        return number

    def publish(self, record: PublishedRecord) -> bool:
        """Publishes a finished morphology (exclusive creation of its ``record.to_json()``); False if it was
        already published.

        Its other files must already be on disk, and ``record.publication`` must come
        from ``take_publication_number``.
        """
        return self.run.create_json(self.metadata_path(record.id), record.to_json())

    # The vanilla tournament's population: a published morphology that lost leaves it.
    def retire(self, morphology_id: str) -> None:
        """Removes a morphology from the vanilla population; its files stay."""
        self.run.create_json(self.run.root / "retired" / f"{schema.checked_id(morphology_id)}.json",
                              {"id": morphology_id})

    def retired_ids(self) -> set[str]:
        return set(self.run.names("retired"))


def lowest_free(taken: set[int], start: int = 0) -> int:
    """The lowest number from ``start`` up that ``taken`` lacks."""
    number = start
    while number in taken:
        number += 1
    return number
