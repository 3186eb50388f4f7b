"""Reading a config: YAML files, then ``KEY VALUE`` overrides, over a root section's defaults, built once."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from derl.config.keys import ConfigError, S, Section, _build, _freeze, check_keys, derived_keys


def _resolve_key(key: str, leaves: list[str]) -> str:
    """Maps a full dotted key or an unambiguous leaf name to its full path."""
    if key in leaves:
        return key
    matches = [p for p in leaves if p.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"ambiguous config key {key!r}: use one of {', '.join(matches)}")
    replaced = [path for path in REPLACED_KEYS if key in (path, path.rsplit(".", 1)[-1])]
    if replaced:
        raise ConfigError(f"unknown config key {key!r}: removed, {REPLACED_KEYS[replaced[0]]}")
    names = leaves + sorted({p.rsplit(".", 1)[-1] for p in leaves})
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown config key {key!r}{hint}")


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Returns ``value`` converted to the type of ``default``, or raises ConfigError."""

    def bad() -> ConfigError:
        kind = "list" if isinstance(default, list | tuple) else type(default).__name__
        return ConfigError(f"config key {key} expects {kind}, got {value!r}")

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad()
    if isinstance(default, int):
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, str):
            value = _parse_number(value, bad)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise bad()
    if isinstance(default, float):
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, str):
            value = _parse_number(value, bad)
        if isinstance(value, int | float):
            return float(value)
        raise bad()
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise bad()
    if isinstance(default, list | tuple):
        if isinstance(value, list | tuple):
            if default and all(_is_number(item) for item in default) and not all(_is_number(item) for item in value):
                raise ConfigError(f"config key {key} expects a list of numbers, got {value!r}", key)  # 1e9: a string
            return list(value)
        raise bad()
    raise bad()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_number(text: str, bad) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise bad() from None


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        node = node[part]
    node[leaf] = _freeze(_coerce(path, value, node[leaf]))


def flatten(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a nested mapping."""
    pairs = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            pairs.extend(flatten(value, path + "."))
        else:
            pairs.append((path, value))
    return pairs


def _read_yaml(file: str | Path, read: Callable[[Path], Any]) -> Mapping[str, Any]:
    """The mapping in ``file``; ``read``: how to read and parse it (``parse_config``)."""
    path = Path(file)
    try:
        data = read(path)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except ValueError as err:  # derl.fileio.reads.YamlFileError: a FIFO, too large, deep or many, aliases
        raise ConfigError(f"config file {err}") from None
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror or err}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    return data


def _pairs_from_overrides(overrides: Sequence[str] | Mapping[str, Any]) -> list[tuple[str, Any]]:
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    if len(overrides) % 2:
        raise ConfigError(f"config overrides come in KEY VALUE pairs; {overrides[-1]!r} has no value")
    return list(zip(overrides[::2], overrides[1::2], strict=True))


def _override_value(text: str, name: str, default: Any, parse_value: Callable[[str, str], Any]) -> Any:
    """A ``KEY VALUE`` value from the command line: a text key (``OUT_DIR``, ``ENV.TASK``) takes the text as
    it is (``runs/base #2`` is no YAML comment, a newline no space: ``check_keys`` refuses what a text may not
    hold); any other key its YAML (a number, a list, a bool), by the bounded reader ``parse_value``."""
    if isinstance(default, str):
        return text
    try:
        return parse_value(text, name)
    except ValueError as err:  # derl.fileio.reads.YamlFileError naming the key: an alias, too deep, too long
        raise ConfigError(str(err), name) from None


# Keys that something else replaced, and what: setting one is an error that says so.
REPLACED_KEYS = {
    "VECENV.TYPE": "a worker's envs are one Gymnasium vector env in its own process; VECENV.THREADS sets "
                   "its threads",
    "VECENV.IN_SERIES": "a worker's envs are one Gymnasium vector env in its own process; VECENV.THREADS "
                        "sets its threads",
}
# Keys that derl wrote into every dumped ``config.yaml`` until nothing was left to read them: a run
# folder from then still holds them. ``derl.checked_config.load_run_config`` drops them there; anywhere else they are
# unknown keys, as any key that does nothing.
RETIRED_KEYS = frozenset({
    "BODY.SYMMETRY_PLANE", "CFG_DEST", "CUDNN.BENCHMARK", "CUDNN.DETERMINISTIC", "ENV.AVOID_REWARD_WEIGHT",
    "ENV.HEALTHY_REWARD", "ENV.SKIP_SELF_POS", "ENV.STATE_RANGE", "ENV.WALKER", "ENV.WRAPPERS", "ENV.Z_RANGE",
    "ENV_NAME", "EVAL_PERIOD", "EVO.INIT_METHOD", "HFIELD.ADAPTIVE_OBS", "HFIELD.ADAPTIVE_OBS_SIZE", "HFIELD.DIM",
    "HFIELD.VIZ", "IMAGE.CAMERA", "IMAGE.HEIGHT", "IMAGE.SAVE", "IMAGE.WIDTH", "LOG_DEST", "LOG_PERIOD",
    "MODEL.EX_HIDDEN_DIMS", "PPO.CHECKPOINT_PATH", "PPO.XML_PATH", "TERRAIN.CENTER_FLAT", "TERRAIN.WALL_LENGTH",
    "TORSO.CONDIM", "TORSO.HEIGHT_RANGE", "TORSO.NUM_TORSO_RANGE", "TORSO.RADIUS_RANGE", "XML.SHADOWCLIP",
    *REPLACED_KEYS,
})


def parse_config(
    root: type[S],
    cfg_file: str | Path | Sequence[str | Path] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    retired: frozenset[str] = frozenset(),
    check: Callable[[S], None] | None = None,
    *,
    read: Callable[[Path], Any],
    parse_value: Callable[[str, str], Any],
) -> S:
    """The defaults of ``root``, then ``cfg_file``, then ``overrides``: the typed tree, built once.

    Programs load a config with ``derl.checked_config.load_config``, which passes the whole tree and
    the checks across its sections; this module knows none of them.

    Args:
        root: the tree's type (``derl.checked_config.Config``).
        cfg_file: optional YAML file with a (partial) tree of keys, or several applied in order
            (a task preset, then ``configs/gpu_server.yml``).
        overrides: ``["KEY", "VALUE", ...]`` strings from the command line (values parsed as YAML, a text
            key's taken as they are: ``_override_value``), or a mapping of keys to already-typed values.
        retired: keys skipped where a file sets them (``RETIRED_KEYS`` for a run's own config.yaml).
        check: called with the tree after ``check_keys``; a ``ConfigError`` either raises gets where its
            key was set (a file, the command line) or that it is a default.
        read: reads and parses a file (``derl.fileio.reads.read_yaml``: bounded, no aliases; for a file
            derl reads back, never through a link); raises ``ValueError`` naming the file if it refuses it.
        parse_value: ``(text, key)`` -> the value of one ``KEY VALUE`` override
            (``derl.fileio.reads.parse_override``); raises ``ValueError`` naming the key if it refuses it.
            This module imports no other part of derl: the one bounded reader is handed in.

    Raises:
        ConfigError: unknown or ambiguous key, wrong type, derived key set, missing file, or any
            value the checks reject (named with the file that set it).
    """
    tree = root().to_dict()
    leaves = [path for path, _ in flatten(tree)]
    derived = derived_keys(root)
    files = [] if cfg_file is None else [cfg_file] if isinstance(cfg_file, str | Path) else list(cfg_file)
    file_pairs = [(key, value, str(path)) for path in files for key, value in flatten(_read_yaml(path, read))
                  if key not in retired]
    defaults = dict(flatten(tree))
    origins: dict[str, str] = {}
    command_line = [(k, v, "command line") for k, v in _pairs_from_overrides(overrides)]
    for key, value, origin in file_pairs + command_line:
        try:
            path = _resolve_key(str(key), leaves)
            if path in derived:
                if origin != "command line":
                    continue  # a dumped config carries the derived value; it is recomputed
                raise ConfigError(f"config key {path} is derived and cannot be set")
            if origin == "command line" and not isinstance(overrides, Mapping):
                value = _override_value(value, str(key), defaults[path], parse_value)
            _set(tree, path, value)
        except ConfigError as err:
            raise ConfigError(f"{err} (set in {origin})" if origin != "command line" else str(err), *err.keys) from None
        origins[path] = origin
    cfg = _build(root, tree)
    try:
        check_keys(cfg)
        if check is not None:
            check(cfg)
    except ConfigError as err:
        raise ConfigError(f"{err} ({_origin(err.keys, origins)})", *err.keys) from None
    return cfg


def with_values(tree: S, values: Mapping[str, Any]) -> S:
    """``tree`` with some keys set to values a program computed (an absolute ``OUT_DIR``, a worker count).

    No file is read: a node that loaded and checked its config once passes it on this way. Values
    take their key's type, derived keys are recomputed; the values are the caller's to keep valid.
    """
    plain, derived = tree.to_dict(), derived_keys(type(tree))
    for key, value in values.items():
        if key in derived:
            raise ConfigError(f"config key {key} is derived and cannot be set")
        _set(plain, key, value)
    return _build(type(tree), plain)


def _origin(keys: Sequence[str], origins: Mapping[str, str]) -> str:
    set_keys = [key for key in keys if key in origins]
    return _origin_text(origins[set_keys[0]]) if set_keys else "default value"


def _origin_text(origin: str) -> str:
    return "set on the command line" if origin == "command line" else f"set in {origin}"


def dump_config(tree: Section) -> str:
    """The resolved config as YAML text; loading it gives ``tree`` back."""
    return yaml.safe_dump(tree.to_dict(), sort_keys=False, default_flow_style=None)
