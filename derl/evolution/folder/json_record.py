"""A JSON file of ``OUT_DIR`` as a frozen dataclass, checked once when it is built.

A subclass declares its fields, in the order of the file's keys; their types say what each key
must hold (``problem``): ``int`` an integer >= 0, ``float`` a finite number, ``str`` a string;
``X | None`` with a default may be absent, and is left out of the file when None (``to_json``).
``json_field`` says more where the type does not: a ``check`` of its own (a morphology id), null
accepted in a file (``null``), a field never written (``written=False``). What the file's name fixes
(``NAMED``: a claim's slot and lease, say) is passed to ``problem`` and ``from_json`` by keyword, and
each subclass checks the file against it first (``name_problem``).

Only the reads and writes of a record are here, with the check of a morphology's record
(``morphology_problem``); ``schema`` holds the checks of every other kind of file.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from derl.evolution.population import parse_id

# A test of a value, and what it expects (for the reason a file is refused).
Check = tuple[Callable[[Any], bool], str]


def is_int(value: Any) -> bool:
    """An integer >= 0 (not a bool), as every count and index of ``OUT_DIR`` is."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_number(value: Any) -> bool:
    """A finite number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


TYPE_CHECKS: dict[type, Check] = {int: (is_int, "an integer >= 0"), float: (is_number, "a finite number"),
                                  str: (lambda value: isinstance(value, str), "a string")}


def json_field(*, default: Any = dataclasses.MISSING, check: Check | None = None, null: bool = False,
               written: bool = True) -> Any:
    """A field of a ``JsonRecord``: ``check`` instead of its type's, ``null`` accepted in a file, or never
    ``written`` to (nor read from) it."""
    return dataclasses.field(default=default, metadata={"check": check, "null": null, "written": written})


@dataclasses.dataclass(frozen=True, kw_only=True)
class JsonRecord:
    """A record of a JSON file; a subclass is a frozen, keyword-only dataclass of its fields.

    Building one checks it (``problem`` of its ``to_json``): a ``ValueError`` "not <WHAT>: <reason>",
    so code that holds one never checks it again.
    """

    NAMED: ClassVar[tuple[str, ...]] = ()  # the fields the file's name fixes
    WHAT: ClassVar[str] = "a record"  # what a record is, formatted with its fields

    def __post_init__(self) -> None:
        named = {key: getattr(self, key) for key in self.NAMED}
        if (reason := self.problem(self.to_json(), **named)) is not None:
            raise ValueError(f"not {self.WHAT.format(**named)}: {reason}")

    @classmethod
    def name_problem(cls, data: Mapping[str, object], **named: Any) -> str | None:
        """Why the object ``data`` is not the file its name says (``named``), or None: each subclass's."""
        return None

    @classmethod
    def problem(cls, data: Any, **named: Any) -> str | None:
        """Why ``data`` (parsed JSON) is not this kind of file with the ``named`` fields, or None."""
        if not isinstance(data, dict):
            return "is not a JSON object"
        if (reason := cls.name_problem(data, **named)) is not None:
            return reason
        fields = _json_fields(cls)
        missing = [key for key, (required, _, _) in fields.items() if required and key not in named and key not in data]
        if missing:
            return f"lacks {', '.join(missing)}"
        for key, (_, (test, what), null) in fields.items():
            if key in data and not ((null and data[key] is None) or test(data[key])):
                return f"has {key} {data[key]!r:.60}, expected {what}{' or null' if null else ''}"
        return None

    @classmethod
    def from_json(cls, data: Any, **named: Any) -> Self:
        """The record in ``data`` (parsed JSON) of the file named ``named``; its keys that are not fields ignored.

        Raises:
            ValueError: ``data`` is not one (``problem``, the reason as its message).
        """
        if (reason := cls.problem(data, **named)) is not None:
            raise ValueError(reason)
        return cls(**{**{key: data[key] for key in _json_fields(cls) if key in data}, **named})

    def to_json(self) -> dict[str, object]:
        """The file's content: the written fields in order, those that are None left out."""
        return {key: value for key in _json_fields(type(self)) if (value := getattr(self, key)) is not None}


def morphology_problem(data: Mapping[str, object], name: str) -> str | None:
    """Why the object ``data`` is not a record of morphology ``name`` (its id, slot and attempt), or None.

    Raises:
        ValueError: ``name`` is not a morphology id.
    """
    if data.get("id") != name:
        return f"has id {data.get('id')!r:.60}, expected {name!r}"
    if (data.get("slot"), data.get("attempt")) != parse_id(name):
        return f"has slot/attempt {data.get('slot')!r:.30}/{data.get('attempt')!r:.30}, expected {parse_id(name)}"
    return None


_FIELDS: dict[type[JsonRecord], dict[str, tuple[bool, Check, bool]]] = {}  # _json_fields of each class, once


def _json_fields(cls: type[JsonRecord]) -> dict[str, tuple[bool, Check, bool]]:
    """Each written field of ``cls``: (required in a file, its check, null accepted)."""
    if cls in _FIELDS:
        return _FIELDS[cls]
    hints = typing.get_type_hints(cls)
    fields = {}
    for field in dataclasses.fields(cls):
        if field.metadata.get("written", True):
            kinds = [kind for kind in typing.get_args(hints[field.name]) if kind is not type(None)] \
                if isinstance(hints[field.name], types.UnionType) else [hints[field.name]]
            check = field.metadata.get("check") or TYPE_CHECKS[kinds[0]]
            fields[field.name] = (field.default is dataclasses.MISSING, check, field.metadata.get("null", False))
    _FIELDS[cls] = fields
    return fields
