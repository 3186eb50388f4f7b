"""Strategies built from what the code declares, so that a new key, limit, file kind or argument is attacked
without anyone writing its test:

- ``config_keys``: every key of the typed config (``derl.checked_config.Config``) with its default, ``Range``,
  choices and span form, and ``override_texts(key)`` the command-line texts that attack it (its bounds and just
  past them, huge and non-finite numbers, wrong types, YAML syntax in text, bytes that are not UTF-8);
- ``genome_attacks``: a valid genome with one field moved to or past a limit of ``derl.morphology.genome``;
- ``FILE_KINDS`` and ``DAMAGES``: the run folder's file kinds (``derl.evolution.folder``) and what a hostile
  or unlucky world does to them;
- ``tool_parsers``: every tool's ``argparse`` parser (``tools/*.py``, ``evo_single_proc.py``), captured as the
  tool builds it, and its options by kind (counts, output paths).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from derl.checked_config import Config
from derl.config import Range
from tests.conftest import ROOT


def examples(make_test: int, share: float = 1.0) -> int:
    """Examples for one property: ``make_test`` under ``make test``; under ``make fuzz`` a ``share`` of
    ``DERL_FUZZ_EXAMPLES`` (a test that starts processes takes a small share; at least one)."""
    fuzz = int(os.environ.get("DERL_FUZZ_EXAMPLES") or 0)
    return max(1, int(fuzz * share)) if fuzz else make_test


# ---------------------------------------------------------------- the typed config


@dataclass(frozen=True)
class Key:
    """A key of the typed config as it is declared (``derl.config.key``)."""

    name: str
    default: Any
    allowed: Range | None
    choices: tuple
    span: bool
    derived: bool

    @property
    def section(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else ""

    @property
    def numeric(self) -> bool:
        return any(_is_number(v) for v in _leaves(self.default)) or (self.allowed is not None and not self.choices)

    @property
    def text(self) -> bool:
        return isinstance(self.default, str)


def _walk(cls: type, prefix: str = "") -> Iterator[Key]:
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING:  # a section
            yield from _walk(field.default_factory, f"{prefix}{field.name}.")
        else:
            meta = field.metadata
            yield Key(f"{prefix}{field.name}", field.default, meta["allowed"], tuple(meta["choices"]), meta["span"],
                      meta["derived"])


def config_keys() -> list[Key]:
    """Every key of the root config, in declaration order."""
    return list(_walk(Config))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, tuple | list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _number_text(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


# Texts that YAML reads as something else than the text: a comment, an anchor, an alias, a flow collection, a
# mapping, a tag, a document marker, a number, a null; and what a shell can pass but UTF-8 cannot encode.
YAML_SYNTAX = ["runs/base #2", "a\nb", "&a x", "*a", "{", "[", "a: b", "- a", "!!python/object:os.system", "%TAG",
               "---", "~", "null", "1e1", "-1e1", "0x10", "yes", "'", '"', "a\tb", "\udcff\udcfe", " lead", ""]
WRONG_TYPES = ["abc", "[1, 2]", "{a: 1}", "true", "null", "[]", "[[1]]"]
HUGE = [1e308, -1e308, 2**63, -(2**63), 10**30]
NON_FINITE = [".nan", ".inf", "-.inf", "1e400", "nan", "inf"]


def _edges(allowed: Range | None, whole: bool) -> list[float]:
    """A range's ends and the numbers just past them (for a whole-number key: one past)."""
    if allowed is None:
        return [0, -1, 1, 100, 1e6]
    low, high = allowed.low, allowed.high
    if whole:
        return [int(low), int(high), int(low) - 1, int(high) + 1]
    return [low, high, math.nextafter(low, -math.inf), math.nextafter(high, math.inf), (low + high) / 2]


def numbers(key: Key) -> st.SearchStrategy[float]:
    """One number for ``key``: at and past its range's ends, huge, or anything a float or an int can be."""
    whole = isinstance(next(_leaves(key.default), 0.0), int) or bool(key.allowed and key.allowed.whole)
    anything = st.integers(-(2**70), 2**70) if whole else st.floats(allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from(_edges(key.allowed, whole)), st.sampled_from(HUGE), anything)


def _flow(items: list) -> str:
    return "[" + ", ".join(_number_text(v) if _is_number(v) else str(v) for v in items) + "]"


def override_texts(key: Key) -> st.SearchStrategy[str]:
    """Texts given on the command line as ``KEY TEXT`` that attack ``key``."""
    hostile = st.sampled_from(YAML_SYNTAX + WRONG_TYPES + NON_FINITE)
    if key.text:
        return st.one_of(st.sampled_from(list(key.choices)) if key.choices else st.nothing(), hostile,
                         st.text(max_size=40))
    if isinstance(key.default, bool):
        return st.one_of(st.sampled_from(["true", "false", "True", "1", "0", "maybe"]), hostile)
    if isinstance(key.default, tuple):
        first = next(_leaves(key.default), None)
        if isinstance(first, str) or key.choices:
            item = st.sampled_from(list(key.choices)) if key.choices else st.text(max_size=12)
            return st.one_of(st.lists(item, max_size=4).map(_flow), hostile)
        number = numbers(key).map(_number_text)
        if key.span:
            single = number.map(lambda v: f"[{v}]")
            triple = st.tuples(number, number, number).map(lambda t: f"[{t[0]}, {t[1]}, {t[2]}]")
            return st.one_of(single, triple, hostile)
        if key.default and isinstance(key.default[0], tuple):  # a list of pairs
            pairs = st.lists(st.tuples(number, number).map(lambda t: f"[{t[0]}, {t[1]}]"), max_size=4)
            return st.one_of(pairs.map(lambda ps: "[" + ", ".join(ps) + "]"), hostile)
        return st.one_of(st.lists(number, max_size=18).map(lambda vs: "[" + ", ".join(vs) + "]"), hostile)
    return st.one_of(numbers(key).map(_number_text), st.sampled_from(NON_FINITE), hostile)


def within_declaration(key: Key, value: Any) -> str | None:
    """Why ``value``, accepted for ``key``, breaks the key's declaration, or None."""
    leaves = [v for v in _leaves(value) if _is_number(v)]
    if not all(math.isfinite(v) for v in leaves):
        return f"a non-finite number {value!r}"
    if leaves and key.allowed is None:
        return f"{value!r} accepted, and the key declares no finite range (docs/guides/configuration.md)"
    if key.allowed is not None and not key.span:
        for number in leaves:
            if (problem := key.allowed.problem(number)) is not None:
                return f"{value!r} accepted although it {problem} ({key.allowed.text()})"
    if key.choices:
        for item in (value if isinstance(value, tuple) else (value,)):
            if item not in key.choices:
                return f"{item!r} accepted, not one of {key.choices}"
    return None


# ---------------------------------------------------------------- tools


class _Captured(Exception):
    def __init__(self, parser):
        super().__init__()
        self.parser = parser


def tool_paths() -> list[Path]:
    """Every command-line entry point: ``tools/*.py`` and ``evo_single_proc.py``."""
    return [*sorted((ROOT / "tools").glob("*.py")), ROOT / "evo_single_proc.py"]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_derl_tool_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool_parser(path: Path, argv: list[str] = ()) -> Any:
    """The ``argparse`` parser ``path``'s ``main(argv)`` builds (captured at its ``parse_args``, nothing run); for
    ``tools/bench.py``, ``argv[0]`` chooses the benchmark whose parser is captured."""
    import argparse

    calls = []
    original = argparse.ArgumentParser.parse_known_args  # what parse_args and parse_intermixed_args call

    def capture(self, args=None, namespace=None):
        calls.append(self)
        if path.name == "bench.py" and len(calls) == 1:  # the chooser: let it choose
            return original(self, args, namespace)
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        _load(path).main(list(argv))
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise AssertionError(f"{path.name}: main() parsed no arguments")


def options(parser) -> Iterator[tuple[Any, Any]]:
    """(parser, action) of every option and positional of ``parser`` and its subcommands."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from options(sub)
        elif not isinstance(action, argparse._HelpAction):
            yield parser, action


def is_number(action) -> bool:
    """A number option: a count the user sizes the work with (``--num``, ``--seeds``, ``--resamples``), a seed, a
    fraction (its type ``int``, ``float`` or a bounded one of ``derl.cli``)."""
    kind = getattr(action.type, "__name__", "") or type(action.type).__name__
    return bool(action.option_strings) and ("int" in kind.lower() or "float" in kind.lower())


OUTPUT_OPTIONS = ("--out", "--video", "--work", "--plot")


def is_output_path(action) -> bool:
    """An option naming a file or folder the tool writes (``--out``, ``--video``, ``--work``, ``--plot``, or a
    path option whose name says out)."""
    return any(option in OUTPUT_OPTIONS or (action.type is Path and "out" in option)
               for option in action.option_strings)
