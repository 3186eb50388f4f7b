"""Claims that processes on many nodes race for, in a ``SharedFolder``: who works on a key (a slot of
the search, a cell of the evaluation) and who took it over once its owner went silent.

The protocol, shared by ``slot_store.SlotStore`` (``slots/<slot>.json``, ``leases/<slot>-<g>.json``)
and ``derl.evaluation.store.EvalDir`` (``eval/claims/<task>/<cell>-<g>.json``):

- the g-th claim of a key is a file of its own, created exclusively (``create``): generation 0 claims
  the key, generation g + 1 takes it over from the owner of g; of several processes that race for the
  same generation exactly one wins, and no file is ever rewritten by a taker, so no owner's claim is
  lost to another's write;
- the newest generation decides who owns the key, whatever it holds (``read``): one that does not
  parse or fails its check is kept as damaged, never quarantined, which would free the key while its
  owner may still work on it;
- an owner learns it lost the key from the next generation's file (``taken_over``: one lookup);
- a generation is created only once the one before it was read, and none is ever removed, so the
  generations of a key are ``1 .. g`` without a break (``unbroken``): one above a missing one was planted,
  and is never the base of the next (near the top of the names' range it would leave none for the
  protocol's own takeovers);
- when a key is stale is each store's own rule: the search judges its owner's worker heartbeat and the
  claim's mtime (``derl.evolution.lease``), the evaluation the claiming process and the claim's mtime,
  which it touches while the cell trains (``touch``).

Names and contents are each store's (``file``, ``generations``, ``parse``), so the files of runs from
before this module read as they always did.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Generic, TypeVar

from derl.evolution.folder.shared import SharedFolder
from derl.fileio.folders import NotAFolder
from derl.fileio.reads import JsonFileError, read_json

K = TypeVar("K")  # what is claimed: a slot number, an evaluation cell
C = TypeVar("C")  # a claim read back, checked


class ClaimStore(Generic[K, C]):
    """The generations of claims of keys ``K`` in ``folder``, read back as ``C``; a subclass names them.

    Args:
        strict: a folder of the claims that is a symbolic link or a file raises ``NotAFolder``
            (``SharedFolder.refuse``'s ``strict``) rather than reading as no claim: for a writer whose folder refuses
            nothing (the evaluation's: it stops on it, ``EXIT_FATAL``). A folder in quarantine mode
            raises anyway (``refuse``).
    """

    def __init__(self, folder: SharedFolder, strict: bool = False):
        self.folder = folder
        self.strict = strict

    # What each store names.
    def file(self, key: K, generation: int) -> Path:
        """The file of ``key``'s claim ``generation``."""
        raise NotImplementedError

    def generations(self, key: K) -> list[int]:
        """The generations of ``key`` its folders list; 0 may be missing from them where generation 0 lives
        elsewhere (the search's ``slots/``): ``latest`` then reads it."""
        raise NotImplementedError

    def parse(self, data: Any, key: K, generation: int) -> C:
        """The claim in the parsed file ``data``; ``ValueError`` (the reason) if it is not one.
        Only ``read`` calls it: a store that judges its files otherwise (the evaluation) need not define it."""
        raise NotImplementedError

    def damaged(self, key: K, generation: int, reason: str) -> C:
        """The claim of a file that failed ``parse`` (``reason``): the key held, its owner unknown."""
        raise NotImplementedError

    def name(self, key: K) -> str:
        """``key`` in a warning line."""
        return str(key)

    def create_file(self, path: Path, claim: Any) -> bool:
        """Creates ``path`` with the JSON ``claim`` unless it exists, complete from the first moment
        (staged, then linked: ``SharedFolder.create_json``); True if this call created it."""
        return self.folder.create_json(path, claim)

    # The protocol.
    def latest(self, key: K) -> int:
        """The generation that decides who owns ``key``: the newest listed, else 0 (whose file may be missing)."""
        return max(self.generations(key), default=0)

    def create(self, key: K, generation: int, claim: Any) -> bool:
        """Creates ``key``'s claim ``generation`` (0: claims the key; g + 1: takes it over from the
        owner of g) exclusively; False if another process holds that generation already.

        Of all processes that race for one generation exactly one succeeds. Its folder must exist.
        """
        return self.create_file(self.file(key, generation), claim)

    def read(self, key: K) -> C | None:
        """The current claim of ``key`` (its latest generation, ``latest``), or None if unclaimed.

        The latest file decides who owns the key, whatever it holds. One that fails ``parse``
        (truncated, say) is not quarantined, which would free the key while its owner may still work on
        it: it comes back ``damaged``, the owner unknown, with one warning (the folder's ``quarantine``
        or ``skip`` mode); a reader in neither mode gets the ``JsonFileError``.
        """
        generation = self.latest(key)
        path = self.file(key, generation)
        try:
            with self.folder.open_dir(path.parent) as folder:
                return self.parse(read_json(path, dir_fd=folder), key, generation)
        except FileNotFoundError:
            return None
        except NotAFolder as err:
            self.folder.refuse(err, self.strict)
            return None
        except ValueError as err:  # JsonFileError too
            reason = err.reason if isinstance(err, JsonFileError) else str(err)
        if not (self.folder.quarantine_bad_files or self.folder.skip_bad_files):
            raise JsonFileError(path, reason)
        self.folder.warn_once(path, f"{reason}; kept: {self.name(key)} is taken over only once its owner is silent")
        return self.damaged(key, generation, reason)

    def taken_over(self, key: K, generation: int) -> bool:
        """True once someone holds a later generation of ``key`` than ``generation`` (one lookup)."""
        return self.folder.lstat(self.file(key, generation + 1), self.strict) is not None

    def claim_time(self, key: K, generation: int) -> float | None:
        """Modification time (shared-filesystem clock) of ``key``'s claim ``generation``; None if missing."""
        found = self.folder.lstat(self.file(key, generation), self.strict)
        return None if found is None else found.st_mtime

    def touch(self, key: K, generation: int) -> None:
        """Sets the mtime of ``key``'s claim ``generation`` to now, on the file server's clock: where the
        claim's mtime is its owner's heartbeat (the evaluation's). Never through a folder swapped for a
        link (``NotAFolder``); a claim gone raises ``FileNotFoundError``."""
        path = self.file(key, generation)
        with self.folder.open_dir(path.parent) as folder:
            os.utime(path.name, dir_fd=folder, follow_symlinks=False)


def unbroken(generations: list[int]) -> tuple[list[int], list[int]]:
    """``generations`` split into the unbroken run ``1 .. g`` (0 kept where listed) and those above its
    first break, which no process of the protocol created (planted)."""
    listed = set(generations)
    top = 0
    while top + 1 in listed:
        top += 1
    return sorted(g for g in listed if g <= top), sorted(g for g in listed if g > top)
