"""The world's sections against what exists: tasks, observations, obstacles, objects, and the corridor's
draw. ``derl.checked_config`` calls ``check_world`` on every config it loads."""

from __future__ import annotations

from collections.abc import Sequence

from derl.config import ConfigError, expand_range, one_of
from derl.envs.config import WorldCfg
from derl.envs.observations import OBS_TYPES
from derl.envs.tasks import check_task_config, make_task
from derl.envs.tasks.manipulation import OBJECTS
from derl.envs.terrain import OBSTACLES


def check_world(world: WorldCfg, criteria: Sequence[str]) -> None:
    """Raises ``ConfigError`` for the first value of ``world`` that cannot work.

    Args:
        criteria: ``EVO.SELECTION_CRITERIA``: each must be a term or summary field the task reports.
    """
    check_task_config(world, criteria)  # ENV.TASK, and the criteria and observations against its declarations
    if not world.ENV.OBS_TYPES:
        raise ConfigError(f"config key ENV.OBS_TYPES is empty; use some of {', '.join(OBS_TYPES)}", "ENV.OBS_TYPES")
    for obs_type in world.ENV.OBS_TYPES:
        one_of("ENV.OBS_TYPES", obs_type, OBS_TYPES)
    for terrain_type in world.TERRAIN.TYPES:
        one_of("TERRAIN.TYPES", terrain_type, (*OBSTACLES, "flat"))
    one_of("OBJECT.TYPE", world.OBJECT.TYPE, tuple(OBJECTS))
    _check_corridor_lengths(world)
    refusal = make_task(world, 1).shared_model_refusal() if world.SIM.BACKEND == "warp" else None
    if refusal is not None:
        raise ConfigError(f"config key SIM.BACKEND warp: {refusal}", "SIM.BACKEND", "ENV.TASK")


def _check_corridor_lengths(world: WorldCfg) -> None:
    """Some flat stretch covers a height-map column: the obstacle draw moves along the corridor by the
    stretches (none negative: their keys' ranges) until its end, and would loop forever without."""
    terrain = world.TERRAIN
    longest = max(expand_range(terrain.FLAT_LENGTH_RANGE, "TERRAIN.FLAT_LENGTH_RANGE"))
    if round(2 * longest * world.HFIELD.NUM_DIVS) < 1:
        raise ConfigError(f"config key TERRAIN.FLAT_LENGTH_RANGE {list(terrain.FLAT_LENGTH_RANGE)} needs a length "
                          f"of at least half a height-map cell (1 / (2 HFIELD.NUM_DIVS) m): the corridor's draw "
                          f"would never reach its end", "TERRAIN.FLAT_LENGTH_RANGE", "HFIELD.NUM_DIVS")
