"""Config overrides of DERL's three evolution environments (DERL_SPEC section 2.4).

Use as ``load_config(None, EVOLUTION_ENVS["vt"])``. Walls and a 3 m flat start in all three;
MVT also produces ``hfield`` and ``goal`` (the original listed them but never produced them).
"""

_TERRAIN_TYPES = ["curve_slope", "steps", "rugged_square"]

EVOLUTION_ENVS: dict[str, dict[str, object]] = {
    "ft": {
        "ENV.MODULES": ["Agent", "Terrain"], "ENV.TASK": "locomotion", "ENV.KEYS_TO_KEEP": ["proprioceptive"],
        "TERRAIN.SIZE": [75, 75, 1], "TERRAIN.START_FLAT": 3, "TERRAIN.TYPES": [],
    },
    "vt": {
        "ENV.MODULES": ["Agent", "Terrain"], "ENV.TASK": "locomotion",
        "ENV.KEYS_TO_KEEP": ["proprioceptive", "hfield"],
        "TERRAIN.SIZE": [50, 50, 1], "TERRAIN.START_FLAT": 3, "TERRAIN.TYPES": _TERRAIN_TYPES,
    },
    "mvt": {
        "ENV.MODULES": ["Agent", "Terrain", "Objects"], "ENV.TASK": "manipulation",
        "ENV.KEYS_TO_KEEP": ["proprioceptive", "hfield", "obj", "goal"],
        "TERRAIN.SIZE": [30, 20, 1], "TERRAIN.START_FLAT": 3, "TERRAIN.TYPES": _TERRAIN_TYPES,
        "OBJECT.BOX_SIDE": 0.2, "OBJECT.SUCCESS_MARGIN": 0.75,
    },
}
