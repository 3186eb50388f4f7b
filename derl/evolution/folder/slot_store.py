"""The slots' corner of ``OUT_DIR`` (``derl.evolution.folder.run_dir`` has the layout): the claim of each
slot (``slots/<slot>.json``, created exclusively) and the leases that take a slot over from an owner
gone silent (``leases/<slot>-<g>.json``, the g-th takeover, created exclusively too).

The latest lease of a slot decides who owns it, whatever it holds (``read``): the protocol of
``claim_store.ClaimStore``, which the evaluation's claims share. A claim read back is a ``Claim``,
checked once when it is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl.evolution.folder import schema
from derl.evolution.folder.claim_store import ClaimStore, unbroken
from derl.evolution.folder.json_record import JsonRecord, is_int, json_field, morphology_problem
from derl.evolution.folder.shared import Identity, SharedFolder
from derl.evolution.population import parse_id, slot_id


@dataclass(frozen=True, kw_only=True)
class Claim(JsonRecord):
    """Who trains ``slot`` under its ``lease`` (0: ``slots/<slot>.json``; g: ``leases/<slot>-<g>.json``, the
    g-th takeover): morphology ``id`` (its ``attempt``), worker ``worker`` of node ``node``, the process
    (``host``, ``pid``, ``token``; absent in claims of an older derl).

    A damaged claim (``damaged``: why its file failed its check) keeps its slot taken but names no owner
    (``id``, ``attempt``, ``node`` and ``worker`` None). Any other is checked when it is built
    (``JsonRecord``: a ``ValueError``), so code that holds one never checks it again.
    """

    NAMED = ("slot", "lease")  # the lease a file holds is its name's, whatever it says
    WHAT = "a claim of slot {slot}"

    slot: int
    lease: int
    id: str | None
    attempt: int | None
    node: int | None
    worker: int | None
    host: str | None = None
    pid: int | None = None
    token: str | None = None
    damaged: str | None = json_field(default=None, written=False)

    def __post_init__(self) -> None:
        if self.damaged is None:
            super().__post_init__()

    @classmethod
    def name_problem(cls, data: Mapping[str, object], **named: Any) -> str | None:
        """Why ``data`` is not a claim of slot ``named["slot"]`` (its morphology's id, an owner), or None."""
        slot, morphology_id = named["slot"], data.get("id")
        if not isinstance(morphology_id, str) or not schema.is_id(morphology_id):
            return f"has no valid morphology id (id={morphology_id!r:.60})"
        if parse_id(morphology_id)[0] != slot:
            return f"claims {morphology_id}, not in slot {slot}"
        if parse_id(morphology_id)[1] > schema.MAX_ATTEMPTS:
            return f"claims attempt {parse_id(morphology_id)[1]}, more than {schema.MAX_ATTEMPTS}"
        missing = [key for key in ("node", "worker") if not is_int(data.get(key))]
        if missing:
            return f"lacks integer {', '.join(missing)}"
        return morphology_problem(data, morphology_id)

    @staticmethod
    def mine(slot: int, lease: int, attempt: int, node: int, worker: int, me: Identity) -> Claim:
        """The claim this process (``me``, worker ``worker`` of node ``node``) writes for ``slot``."""
        return Claim(slot=slot, lease=lease, id=slot_id(slot, attempt), attempt=attempt, node=node, worker=worker,
                     host=me.host, pid=me.pid, token=me.token)

    @property
    def owner(self) -> tuple[int | None, int | None]:
        """(node, worker) of the claim's owner; (None, None) for a damaged claim."""
        return self.node, self.worker


class SlotStore(ClaimStore[int, Claim]):
    """Claims and leases of the slots in ``run`` (a ``RunDir``), through the checked primitives of
    its ``SharedFolder``: the search's names and ``Claim`` on the protocol of ``ClaimStore`` (the
    generation of a claim is its lease; ``read``, ``claim_time`` and ``taken_over`` are the protocol's)."""

    def __init__(self, run: SharedFolder):
        super().__init__(run)
        self.run = run

    def path(self, slot: int) -> Path:
        return self.run.root / "slots" / f"{slot:06d}.json"

    def file(self, slot: int, lease: int) -> Path:
        return self.path(slot) if lease == 0 else self.run.root / "leases" / f"{slot:06d}-{lease}.json"

    lease_path = file

    def generations(self, slot: int) -> list[int]:
        """The slot's leases, ``1 .. g`` (``claim_store.unbroken``); lease 0, the claim itself, is in ``slots/``,
        read when none is listed. A lease above a missing one was planted: it is moved to ``quarantine/``
        (skipped with one warning by a reader), never taken over from."""
        prefix = f"{slot:06d}-"
        leases, planted = unbroken([int(name[len(prefix):]) for name in self.run.names("leases")
                                    if name.startswith(prefix)])
        missing = self.run.relative(self.lease_path(slot, len(leases) + 1))
        for lease in planted:
            path = self.lease_path(slot, lease)
            reason = f"follows no lease of slot {slot} ({missing} is missing), so no worker created it"
            if self.run.quarantine_bad_files:
                self.run.quarantine(path, reason)
            elif self.run.skip_bad_files:
                self.run.warn_once(path, f"{reason}; skipped")
        return leases

    leases = generations

    def parse(self, data: Any, slot: int, lease: int) -> Claim:
        return Claim.from_json(data, slot=slot, lease=lease)

    def damaged(self, slot: int, lease: int, reason: str) -> Claim:
        """Kept, the owner unknown; taken over, by the next lease, only once no worker working on the slot
        has beaten for ``EVO.LEASE_SECONDS`` (``derl.evolution.lease.takeover_reason``)."""
        return Claim(slot=slot, lease=lease, id=None, attempt=None, node=None, worker=None, damaged=reason)

    def name(self, slot: int) -> str:
        return f"slot {slot}"

    def claim(self, slot: int, node: int, worker: int, attempt: int = 0) -> bool:
        """Claims ``slot`` exclusively (for its first attempt, in a search; the claim records this
        process); False if someone else holds it."""
        return self.create(slot, 0, Claim.mine(slot, 0, attempt, node, worker, self.run.identity).to_json())

    def is_claimed(self, slot: int) -> bool:
        return self.run.lexists(self.path(slot)) or bool(self.leases(slot))

    def replace(self, current: Claim, attempt: int, node: int, worker: int) -> None:
        """Rewrites ``current``, the claim of a slot this worker owns, for the slot's attempt ``attempt``
        (a failed morphology is replaced), under the same lease."""
        mine = Claim.mine(current.slot, current.lease, attempt, node, worker, self.run.identity)
        self.run.write_json(self.lease_path(current.slot, current.lease), mine.to_json())

    def take_over(self, current: Claim, attempt: int, node: int, worker: int) -> bool:
        """Takes ``current``'s slot from its owner for its attempt ``attempt``, by exclusive creation of
        the next lease.

        Of all processes that judged the same claim stale, exactly one succeeds. The old owner
        learns it lost the slot from ``taken_over``.
        """
        mine = Claim.mine(current.slot, current.lease + 1, attempt, node, worker, self.run.identity)
        return self.create(current.slot, mine.lease, mine.to_json())

    def claimed(self) -> list[int]:
        """Every claimed slot, in order."""
        leased = {int(name.split("-")[0]) for name in self.run.names("leases")}
        return sorted(leased | {int(name) for name in self.run.names("slots")})

    def num_claimed(self) -> int:
        return len(self.claimed())
