"""Configuration machinery: typed sections with DERL's key names, YAML plus ``KEY VALUE`` overrides.

A config is a tree of frozen dataclasses (``Section``). Each package declares the sections it reads
next to the code that reads them (``derl.ppo.config.PpoCfg``, ``derl.envs.config.EnvCfg``, ...), each
field a ``key``: its default (whose type is the key's type), its meaning (one line of the generated
reference, ``docs/reference/config.md``) and what values it may take. ``derl.checked_config`` puts
the sections together into the whole tree (``Config``) and loads it; only entry points hold that.

A config is loaded from optional YAML files, then overridden by ``KEY VALUE`` pairs from the command
line, then built once into its typed tree. Keys are either full dotted names (``EVO.NUM_PROCESSES``)
or unambiguous leaf names (``NUM_PROCESSES``). ``1e6`` is accepted for an integer key when it is a
whole number; a text key takes the command line's text as it is. Every number has a ``Range`` with both
ends finite, every text is one line of UTF-8 (``check_keys``).
Derived keys (``PPO.MAX_ITERS``) are computed by their section, never set by hand.

This module is the ground floor: it imports no other part of derl::

    cfg = load_config("configs/evo/ft.yml", ["NUM_PROCESSES", "8"])  # derl.checked_config
    cfg.EVO.NUM_PROCESSES  # -> 8
"""

from derl.config.keys import (
    AMOUNT,
    COUNT,
    INT32_MAX,
    UNIT_INTERVAL,
    ConfigError,
    KeyDoc,
    Range,
    Section,
    check_keys,
    declared_keys,
    derived_keys,
    expand_range,
    key,
    one_of,
    section,
)
from derl.config.parse import (
    REPLACED_KEYS,
    RETIRED_KEYS,
    dump_config,
    flatten,
    parse_config,
    with_values,
)

__all__ = [
    "AMOUNT", "COUNT", "INT32_MAX", "REPLACED_KEYS", "RETIRED_KEYS", "UNIT_INTERVAL",
    "ConfigError", "KeyDoc", "Range", "Section", "check_keys", "declared_keys", "derived_keys", "dump_config",
    "expand_range", "flatten", "key", "one_of", "parse_config", "section", "with_values",
]
