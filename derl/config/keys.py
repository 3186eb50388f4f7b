"""Config keys and sections: what a key declares (default, meaning, allowed values) and the checks of them."""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar


class ConfigError(ValueError):
    """A bad config file, key or value. The message is one line for the user.

    ``keys`` are the dotted keys at fault (``key`` the first): ``parse_config`` adds where the first
    of them that was set came from (a file, the command line), else that it is a default value.
    """

    def __init__(self, message: str, *keys: str):
        super().__init__(message)
        self.keys = keys
        self.key = keys[0] if keys else None


class Range(NamedTuple):
    """The values a numeric key may take: ``low`` to ``high`` inclusive (``low`` excluded if ``low_open``).

    Every numeric key declares one with both ends finite (``tests/config/test_config_rules.py`` walks them all): a
    list key (``MODEL.PRO_HIDDEN_DIMS``, ``BODY.JOINT_ANGLE_LIST``) holds it in each number, a ``span`` key
    in each value it draws. ``whole``: a list's numbers must be whole numbers (an integer key's value is one
    already).
    """

    low: float
    high: float
    low_open: bool = False
    whole: bool = False

    def problem(self, value: float) -> str | None:
        """What is wrong with ``value`` in words (``must be positive``), or None if it lies in the range."""
        if value < self.low or (self.low_open and value == self.low):
            if self.low == 0:
                return "must be positive" if self.low_open else "must not be negative"
            return "must be positive" if self.low == 1 and isinstance(value, int) else f"must be at least {self.low}"
        if value > self.high:
            return f"must be at most {self.high}"
        return None

    def text(self) -> str:
        """The range in interval notation, as the config reference shows it: ``[1, 65536]``, ``(0, 10]``."""
        return f"{'(' if self.low_open else '['}{_number_text(self.low)}, {_number_text(self.high)}]"


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e13 else f"{value:g}"


# MuJoCo and torch store counts in C ints.
INT32_MAX = 2**31 - 1
UNIT_INTERVAL = Range(0, 1)
COUNT = Range(1, INT32_MAX)
AMOUNT = Range(0, INT32_MAX)
# Values a ``span`` key's ``[start, stop, step]`` may expand to (a body's gears: 4): ``[0, 1e9, 1e-9]`` is refused,
# not a list of 10**18 values.
MAX_SPAN_VALUES = 10_000
# Bytes of a text value (a path's most on Linux, PATH_MAX): names and paths are far shorter.
MAX_TEXT_BYTES = 4096


def key(default: Any, meaning: str, allowed: Range | None = None, choices: Sequence[Any] = (),
        span: bool = False, derived: bool = False) -> Any:
    """A config key: a dataclass field of a ``Section``.

    Args:
        default: its value unless set; its type is the key's type (a list is held as a tuple).
        meaning: one line for the reference table of the docs.
        allowed: the numbers it may take (each element of a list key).
        choices: the values it may take (each element of a list key).
        span: a ``[value]`` or ``[start, stop, step]`` range of values drawn from (``expand_range``).
        derived: computed by its section's ``__post_init__`` from other keys; setting it is an error.
    """
    meta = {"meaning": meaning, "allowed": allowed, "choices": tuple(choices), "span": span, "derived": derived}
    return dataclasses.field(default=_freeze(default), metadata=meta)


def section(cls: type[Section]) -> Any:
    """A field holding a whole section (``PPO: PpoCfg = section(PpoCfg)``)."""
    return dataclasses.field(default_factory=cls)


@dataclass(frozen=True)
class Section:
    """A frozen group of keys (``key`` fields) and sections (``section`` fields).

    ``check`` holds the section to what its own keys must satisfy together (``INIT_POPULATION_SIZE`` not
    above ``SEARCH_SPACE_SIZE``); a check across sections belongs to whoever holds both.
    """

    def check(self) -> None:
        """Raises ``ConfigError`` naming the keys at fault (full dotted names, as the messages do)."""

    def to_dict(self) -> dict[str, Any]:
        """The plain tree (lists, not tuples): what ``config.yaml`` holds."""
        return {f.name: _thaw(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def get_path(self, dotted: str) -> Any:
        node: Any = self
        for part in dotted.split("."):
            node = getattr(node, part)
        return node


S = TypeVar("S", bound=Section)


def _is_section(field: dataclasses.Field) -> bool:
    return field.default_factory is not dataclasses.MISSING


def _fields(cls: type[Section], prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted path, field) of every key of ``cls``, in declaration order."""
    for field in dataclasses.fields(cls):
        if _is_section(field):
            yield from _fields(field.default_factory, f"{prefix}{field.name}.")  # type: ignore[arg-type]
        else:
            yield f"{prefix}{field.name}", field


@dataclass(frozen=True)
class KeyDoc:
    """A flattened key as the reference documents it."""

    key: str
    default: Any
    type: str
    meaning: str
    allowed: Range | None


def declared_keys(root: type[Section]) -> list[KeyDoc]:
    """Every flattened key of ``root`` with its default, type and meaning, in declaration order."""
    return [KeyDoc(path, _thaw(f.default), type(_thaw(f.default)).__name__, f.metadata["meaning"],
                   f.metadata["allowed"]) for path, f in _fields(root)]


def derived_keys(root: type[Section]) -> tuple[str, ...]:
    """The keys of ``root`` its sections compute (``PPO.MAX_ITERS``)."""
    return tuple(path for path, f in _fields(root) if f.metadata["derived"])


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list | tuple) else value


def _thaw(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


def _build(cls: type[S], tree: Mapping[str, Any]) -> S:
    values = {f.name: _build(f.default_factory, tree[f.name]) if _is_section(f)  # type: ignore[arg-type]
              else _freeze(tree[f.name]) for f in dataclasses.fields(cls)}
    return cls(**values)


def check_keys(tree: Section) -> None:
    """Holds every key of ``tree`` to its declaration (finite numbers inside ``allowed``, ``choices``, text
    that is one line of Unicode, ``span`` forms), then every section to its own ``check``; raises
    ``ConfigError`` for the first value that cannot work."""
    for path, field in _fields(type(tree)):
        value = tree.get_path(path)
        numbers = list(_numbers(value))
        if not all(math.isfinite(v) for v in numbers):
            raise ConfigError(f"config key {path} must be finite, got {_show(value)}", path)
        for text in _texts(value):
            if (problem := text_problem(text)) is not None:
                shown = repr(text if len(text) <= 80 else text[:80] + "...")
                raise ConfigError(f"config key {path} {problem}, got {shown}", path)
        if (problem := _shape_problem(value, field.default)) is not None:
            raise ConfigError(f"config key {path} {problem}, got {_show(value)}", path)
        allowed, choices = field.metadata["allowed"], field.metadata["choices"]
        if field.metadata["span"]:
            try:
                numbers = expand_range(value, path)  # the values drawn: a step is no value
            except ValueError as err:
                raise ConfigError(str(err), path) from None
        if allowed is not None:
            if allowed.whole and not all(isinstance(n, int) and not isinstance(n, bool) for n in _numbers(value)):
                raise ConfigError(f"config key {path} must hold whole numbers, got {_show(value)}", path)
            for number in numbers:
                if (problem := allowed.problem(number)) is not None:
                    raise ConfigError(f"config key {path} {problem}, got {_show(value)}", path)
        for item in (value if isinstance(value, tuple) else (value,)) if choices else ():
            one_of(path, item, choices)
    _check_sections(tree)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be a config value, or None: a key's text is one line of Unicode that UTF-8 encodes
    (a path of ``OUT_DIR`` names a folder on every filesystem and in every log line), so no control character
    (a newline, a NUL) and no lone surrogate (the bytes of a command-line argument that are not UTF-8), and
    at most ``MAX_TEXT_BYTES`` long."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "must be text that UTF-8 encodes (it holds bytes that are not UTF-8)"
    if size > MAX_TEXT_BYTES:
        return f"must be at most {MAX_TEXT_BYTES} bytes of text, not {size}"
    if any(unicodedata.category(char) == "Cc" for char in text):
        return "must be one line of text without control characters (a newline, a tab, a NUL)"
    return None


def _check_sections(node: Section) -> None:
    node.check()
    for field in dataclasses.fields(node):
        if _is_section(field):
            _check_sections(getattr(node, field.name))


def expand_range(values: Sequence[float], key: str) -> list[float]:
    """``[a]`` -> [a]; ``[a, b, s]`` -> a, a+s, ..., b (b included): the values of a ``span`` key."""
    if len(values) == 1:
        return [values[0]]
    if len(values) != 3 or values[2] <= 0 or values[1] < values[0]:
        raise ValueError(f"config key {key} must be [value] or [start, stop, step>0], got {list(values)}")
    start, stop, step = values
    if (stop - start) / step >= MAX_SPAN_VALUES:
        raise ValueError(f"config key {key} spans more than {MAX_SPAN_VALUES} values, got {list(values)}")
    count = int(round((stop - start) / step)) + 1
    out = [round(start + k * step, 10) for k in range(count)]
    return [int(v) for v in out] if all(isinstance(v, int) for v in values) else out


def one_of(key: str, value: Any, known: Sequence[Any]) -> None:
    """Raises ``ConfigError`` unless ``value`` is one of ``known``."""
    if value not in known:
        raise ConfigError(f"config key {key}: unknown value {value!r}; use one of {', '.join(map(str, known))}", key)


def _kind(value: Any) -> str:
    if isinstance(value, tuple):
        return "list"
    if isinstance(value, str):
        return "text"
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__


def _shape_problem(value: Any, default: Any) -> str | None:
    """Why a list key's items are not of the kind its default's items are (``[[1]]`` where names go, ``[1, 2]``
    where pairs go), or None: the items of a list key are all texts, all numbers or all lists."""
    if not (isinstance(value, tuple) and isinstance(default, tuple) and default):
        return None
    kind = _kind(default[0])
    if any(_kind(item) != kind for item in value):
        return f"must hold {kind}s as its items"
    problems = (_shape_problem(item, default[0]) for item in value)  # the items of a list of lists, in turn
    return next((problem for problem in problems if problem is not None), None)


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, tuple):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, tuple):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, str):
        yield value


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)
