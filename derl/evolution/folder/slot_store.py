"""The slots' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): the claim of each
slot (``slots/<slot>.json``, created exclusively) and the leases that take a slot over from an owner
gone silent (``leases/<slot>-<g>.json``, the g-th takeover, created exclusively too).

The latest lease of a slot decides who owns it, whatever it holds (``read``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.shared import SharedFolder
from derl.fileio.folders import NotAFolder
from derl.fileio.reads import JsonFileError, read_json


class SlotStore:
    """Claims and leases of the slots in ``run`` (a ``RunDir``), through the checked primitives of
    its ``SharedFolder``."""

    def __init__(self, run: SharedFolder):
        self.run = run

    def path(self, slot: int) -> Path:
        return self.run.root / "slots" / f"{slot:06d}.json"

    def lease_path(self, slot: int, lease: int) -> Path:
        return self.path(slot) if lease == 0 else self.run.root / "leases" / f"{slot:06d}-{lease}.json"

    def leases(self, slot: int) -> list[int]:
        prefix = f"{slot:06d}-"
        return [int(name[len(prefix):]) for name in self.run.names("leases") if name.startswith(prefix)]

    def claim(self, slot: int, claim: dict[str, Any]) -> bool:
        """Claims ``slot`` exclusively (the claim records this process); False if someone else holds it."""
        return self.run.create_json(self.path(slot), {**claim, **self.run.identity.as_dict(), "lease": 0})

    def is_claimed(self, slot: int) -> bool:
        return self.run.lexists(self.path(slot)) or bool(self.leases(slot))

    def read(self, slot: int) -> dict[str, Any] | None:
        """The current claim of ``slot`` (its latest lease: ``lease`` counts takeovers), or None if unclaimed.

        The latest lease file decides who owns the slot, whatever it holds. One that fails its
        schema (truncated, say) is not quarantined, which would free the slot while its owner may
        still train it: it comes back as ``{"slot", "lease", "damaged": reason}`` with the owner
        unknown (``node``, ``worker``, ``id`` and ``attempt`` None), and is taken over, by the next
        lease, only once no worker working on the slot has beaten for ``EVO.LEASE_SECONDS``
        (``derl.evolution.lease.takeover_reason``). A reader without ``quarantine`` or ``skip``
        gets the ``JsonFileError``.
        """
        leases = sorted(self.leases(slot), reverse=True)
        lease = leases[0] if leases else 0
        path = self.lease_path(slot, lease)
        try:
            with self.run.open_dir(path.parent) as folder:
                claim = read_json(path, dir_fd=folder)
            reason = schema.claim_problem(claim, slot)
        except FileNotFoundError:
            return None
        except NotAFolder as err:
            self.run.refuse(err)
            return None
        except JsonFileError as err:
            reason = err.reason
        if reason is None:
            return {**claim, "lease": lease}
        if not (self.run.quarantine_bad_files or self.run.skip_bad_files):
            raise JsonFileError(path, reason)
        self.run.warn_once(path, f"{reason}; kept: slot {slot} is taken over only once its owner is silent")
        return {"slot": slot, "lease": lease, "damaged": reason, "id": None, "attempt": None, "node": None,
                "worker": None}

    def claim_time(self, slot: int, lease: int) -> float | None:
        """Modification time (shared-filesystem clock) of the claim file of ``slot``'s lease ``lease``."""
        found = self.run.lstat(self.lease_path(slot, lease))
        return None if found is None else found.st_mtime

    def replace(self, slot: int, claim: dict[str, Any]) -> None:
        """Rewrites the claim of a slot this worker owns (a failed morphology is replaced)."""
        lease = claim.get("lease", 0)
        self.run.write_json(self.lease_path(slot, lease), {**claim, **self.run.identity.as_dict(), "lease": lease})

    def take_over(self, slot: int, current: dict[str, Any], claim: dict[str, Any]) -> bool:
        """Takes ``slot`` from the owner of its ``current`` claim, by exclusive creation of the next lease.

        Of all processes that judged the same claim stale, exactly one succeeds. The old owner
        learns it lost the slot from ``taken_over``.
        """
        lease = current["lease"] + 1
        owner = {**claim, **self.run.identity.as_dict(), "lease": lease}
        return self.run.create_json(self.lease_path(slot, lease), owner)

    def taken_over(self, slot: int, lease: int) -> bool:
        """True once someone holds a later lease of ``slot`` than ``lease`` (one stat on the shared folder)."""
        return self.run.lexists(self.lease_path(slot, lease + 1))

    def claimed(self) -> list[int]:
        """Every claimed slot, in order."""
        leased = {int(name.split("-")[0]) for name in self.run.names("leases")}
        return sorted(leased | {int(name) for name in self.run.names("slots")})

    def num_claimed(self) -> int:
        return len(self.claimed())
