"""The schema of every JSON file kind of ``OUT_DIR``: one checker per kind, shared by writer and readers.

Each checker takes the parsed content (and what the file's name says it must be) and returns why
it is not a valid file of its kind, or None. ``derl.evolution.folder.run_dir.RunDir`` applies them at
every read, so nothing downstream sees a file that fails
(docs/design/run-folder.md#the-output-folder-is-untrusted-input): types, finite numbers, ranges, the id
matching the file name, parent ids that are ids, the files a record lists being the run's own, a
published record agreeing with the run's config
(``RecordRules``). Pure functions: no filesystem access here (what needs the folder, such as
listed files being present or the slot's claim naming the record, is checked in ``PublicationStore.read_metadata``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from derl.checked_config import MORPHOLOGIES, EvoCfg
from derl.evolution.folder.record import BOOKKEEPING, morphology_files
from derl.evolution.population import ID_PATTERN, SEARCH_KINDS, parse_id, slot_id


def is_id(value: Any) -> bool:
    """True for a morphology id (``000042``, ``000042-1``): the only names that become paths."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def checked_id(morphology_id: str) -> str:
    """``morphology_id`` if it is a morphology id; a ``ValueError`` before it can become a path
    (``../../victim`` from a crafted record must never name a file outside ``OUT_DIR``)."""
    if not is_id(morphology_id):
        raise ValueError(f"not a morphology id: {morphology_id!r:.60}")
    return morphology_id


def _is_int(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_number(value: Any, minimum: float = -math.inf) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value >= minimum)


def _typed(data: Mapping[str, Any], checks: dict[str, tuple[Any, str]]) -> str | None:
    """The first ``key`` present in ``data`` whose ``test(value)`` fails, as a reason."""
    for key, (test, what) in checks.items():
        if key in data and not test(data[key]):
            return f"has {key} {data[key]!r:.60}, expected {what}"
    return None


def _required(data: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    missing = [key for key in keys if key not in data]
    return f"lacks {', '.join(missing)}" if missing else None


# The numbers in the names of ``OUT_DIR``'s files, held to their range (``name_problem``): a planted
# ``published/99999999999999999999999.json`` would make every later number overflow TensorBoard's step, a
# planted ``slots/999999999.json`` would count as a claimed slot of the search.
MAX_SEARCH_SPACE_SIZE = int(MORPHOLOGIES.high)  # EVO.SEARCH_SPACE_SIZE at most: slots are 6 digits, {slot:06d}
# Publication numbers taken per slot at most: one to publish it, one more for each worker killed between taking
# a number and writing its metadata, and for each result quarantined and published again (gaps). So numbers lie
# below 100 x EVO.SEARCH_SPACE_SIZE: 8 digits, {n:08d}.
PUBLICATIONS_PER_SLOT = 100
MAX_LEASES = 10**6  # takeovers of one slot (leases/<slot>-<g>.json, g from 1), each after EVO.LEASE_SECONDS of silence
MAX_ATTEMPTS = 10**6  # morphologies of one slot (<slot>-<attempt>): 10 failures in a row stop the node


def max_publications(search_space_size: int) -> int:
    """The publication numbers a search of ``search_space_size`` slots may take: ``0 .. this - 1``."""
    return PUBLICATIONS_PER_SLOT * search_space_size


def _number_problem(text: str, what: str, width: int, limit: int, key: str) -> str | None:
    """Why the digits ``text`` are not a ``what`` as derl writes it (``width`` digits, zero-padded)
    below ``limit`` (``key`` says why), or None."""
    number = int(text)
    if text != f"{number:0{width}d}":
        return f"has {what} {text[:30]}, not as derl writes one ({width} digits)"
    if number >= limit:
        return f"has {what} {text[:30]}, outside the search ({key} {limit})"
    return None


def name_problem(folder: str, stem: str, search_space_size: int) -> str | None:
    """Why the numbers in ``stem`` (a name its folder's pattern allows, less its suffix) are out of range
    in a search of ``search_space_size`` slots, or None: slot ids below ``EVO.SEARCH_SPACE_SIZE`` and
    written ``{slot:06d}``, publication numbers below ``max_publications`` and written ``{n:08d}``, lease
    generations and attempts in ``1 .. MAX_LEASES`` and ``1 .. MAX_ATTEMPTS`` without leading zeros.
    """
    slot_limit = (search_space_size, "EVO.SEARCH_SPACE_SIZE")
    if folder == "published":
        return _number_problem(stem, "publication number", 8, max_publications(search_space_size),
                               f"{PUBLICATIONS_PER_SLOT} x EVO.SEARCH_SPACE_SIZE =")
    if folder == "slots":
        return _number_problem(stem, "slot", 6, *slot_limit)
    if folder == "leases":
        slot_text, generation = stem.split("-")
        return _number_problem(slot_text, "slot", 6, *slot_limit) or \
            _number_problem(generation, "lease", 0, MAX_LEASES + 1, "at most") or \
            (None if int(generation) > 0 else "has lease 0, which is the claim in slots/")
    if folder in ("metadata", "error_metadata", "retired"):
        slot, attempt = parse_id(stem)
        if stem != slot_id(slot, attempt):
            return f"is not a morphology id as derl writes one ({slot_id(slot, attempt)[:30]})"
        if slot >= search_space_size:
            return f"is in slot {stem[:30]}, outside the search (EVO.SEARCH_SPACE_SIZE {search_space_size})"
        return None if attempt <= MAX_ATTEMPTS else f"has attempt {str(attempt)[:30]}, more than {MAX_ATTEMPTS}"
    return None


_OPTIONAL_ID = (lambda v: v is None or is_id(v), "a morphology id or null")
_INDEX = (_is_int, "an integer >= 0")
_NON_NEGATIVE = (lambda v: _is_number(v, 0), "a finite number >= 0")


def _id_problem(data: Any, name: str) -> str | None:
    """Why ``data`` is not a record of morphology ``name`` (id, slot, attempt), or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if data.get("id") != name:
        return f"has id {data.get('id')!r:.60}, expected {name!r}"
    if (data.get("slot"), data.get("attempt")) != parse_id(name):
        return f"has slot/attempt {data.get('slot')!r:.30}/{data.get('attempt')!r:.30}, expected {parse_id(name)}"
    return None


# The optional bookkeeping fields of a ``PublishedRecord`` (but ``parent_id``, which depends on the id)
# and what each must be; the required ones (``record.REQUIRED``) are checked one by one in ``metadata_problem``.
METADATA_TYPES = {
    "mutation": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "seed": _INDEX, "node": _INDEX, "worker": _INDEX, "env_steps": _INDEX, "iterations": _INDEX,
    "device": (lambda v: isinstance(v, str), "a string"),
    "wall_time": _NON_NEGATIVE, "steps_per_sec": _NON_NEGATIVE, "published_at": _NON_NEGATIVE,
}


class RecordRules(NamedTuple):
    """What the run's config asks of each of its published records.

    A record outside the search's slots would count towards its end (and could win every
    tournament); one without a selection criterion cannot take part in one, and the child being
    made when it is drawn must not pay for that.
    """

    search_space_size: int  # EVO.SEARCH_SPACE_SIZE: slots 0 .. size - 1
    criteria: tuple[str, ...]  # EVO.SELECTION_CRITERIA: each a finite number in every record

    @staticmethod
    def of(evo: EvoCfg) -> RecordRules:
        return RecordRules(evo.SEARCH_SPACE_SIZE, tuple(evo.SELECTION_CRITERIA))


def metadata_problem(data: Any, name: str, rules: RecordRules) -> str | None:
    """Why ``data`` is not the published metadata (``derl.evolution.folder.record.PublishedRecord``) of
    ``name`` in a run with ``rules``, or None (the folder-level checks: ``PublicationStore.read_metadata``)."""
    problem = _id_problem(data, name) or _required(data, ("lineage", "publication", "files"))
    if problem:
        return problem
    if not _is_int(data["publication"]):
        return f"has no publication number (publication={data['publication']!r:.60})"
    if data["publication"] >= max_publications(rules.search_space_size):
        return (f"has publication {data['publication']!r:.30}, outside the search "
                f"({PUBLICATIONS_PER_SLOT} x EVO.SEARCH_SPACE_SIZE {rules.search_space_size})")
    problem = _typed(data, {
        "parent_id": (lambda v: v is None or (is_id(v) and v != name), "another morphology's id or null"),
        **METADATA_TYPES})
    if problem:
        return problem
    lineage = data["lineage"].split("/") if isinstance(data["lineage"], str) else None
    parent = data.get("parent_id")
    if not lineage or not all(map(is_id, lineage)) or lineage[-1] != name or \
            (lineage[-2] if len(lineage) > 1 else None) != parent:
        return f"has lineage {data['lineage']!r:.60}, expected ids ending in {parent + '/' if parent else ''}{name}"
    if data["files"] != morphology_files(name):
        return f"lists files {data['files']!r:.80}, expected {morphology_files(name)}"
    for key, value in data.items():
        if key not in BOOKKEEPING and not _is_number(value):
            return f"has {key} {value!r:.60}, expected a finite number (every result is one)"
    if data["slot"] >= rules.search_space_size:
        return f"is in slot {data['slot']}, outside the search (EVO.SEARCH_SPACE_SIZE {rules.search_space_size})"
    missing = [key for key in rules.criteria if key not in data]
    return f"lacks {missing[0]}, a selection criterion of the run (EVO.SELECTION_CRITERIA)" if missing else None


def published_problem(data: Any) -> str | None:
    """Why ``data`` is not a publication record (``published/<n>.json``), or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if not is_id(data.get("id")):
        return f"has no valid morphology id (id={data.get('id')!r:.60})"
    return _required(data, ("node", "worker")) or _typed(data, {"node": _INDEX, "worker": _INDEX})


def genome_problem(data: Any, name: str) -> str | None:
    """Why ``data`` is not a genome with id ``name`` (the body itself: ``derl.morphology.genome``), or None."""
    if not isinstance(data, dict) or data.get("id") != name:
        return f"is not a genome with id {name!r}"
    return _typed(data, {
        "parent_id": (lambda v: v is None or (is_id(v) and v != name), "another morphology's id or null"),
        "mutation": (lambda v: v is None or isinstance(v, str), "a string or null")})


def manifest_problem(data: Any, node: int) -> str | None:
    """Why ``data`` is not node ``node``'s entry of ``manifest/``, or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if data.get("node") != node:
        return f"is not the manifest entry of node {node}"
    return _typed(data, {key: (lambda v: v is None or isinstance(v, str), "a string or null")
                         for key in ("derl", "commit", "python", "torch", "mujoco", "numpy", "gymnasium", "host")})


def init_population_problem(data: Any) -> str | None:
    ids = data.get("ids") if isinstance(data, dict) else None
    ok = isinstance(ids, list) and all(map(is_id, ids)) and len(set(ids)) == len(ids)
    return None if ok else "has no list of distinct morphology ids"


def summary_problem(data: Any) -> str | None:
    """Why ``data`` is not a ``summary.json``, or None (the fields ``tools/status.py`` shows)."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    return _typed(data, {"search": (lambda v: v in SEARCH_KINDS, " or ".join(SEARCH_KINDS)),
                         "eta_hours": (lambda v: v is None or _is_number(v, 0), "a finite number or null"),
                         "morphologies_per_hour": (_is_number, "a finite number"),
                         "updated": (lambda v: _is_number(v, 0), "a finite number >= 0")})


def eval_result_problem(data: Any) -> str | None:
    """Why ``data`` is not a finished evaluation cell's ``metrics.json``, or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    problem = _required(data, ("summary", "env_steps", "iterations")) or _typed(data, {
        "summary": (lambda v: isinstance(v, dict), "an object"), "env_steps": _INDEX, "iterations": _INDEX})
    if problem:
        return problem
    bad = [key for key, value in data["summary"].items() if not _is_number(value)]
    return f"has summary {bad[0]} {data['summary'][bad[0]]!r:.60}, expected a finite number" if bad else None


def eval_claim_problem(data: Any) -> str | None:
    """Why ``data`` is not an evaluation claim (``eval/claims/``), or None."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    return _typed(data, {"host": (lambda v: isinstance(v, str), "a string"), "pid": _INDEX,
                         "token": (lambda v: isinstance(v, str), "a string"),
                         "started": (lambda v: v is None or _is_number(v), "a number or null")})
