"""The task registry, and the config check against what a task declares."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from derl.config import ConfigError
from derl.envs.config import WorldCfg
from derl.envs.tasks.base import Task
from derl.metrics import CTRL_TERM, SUMMARY_FIELDS

TASKS: dict[str, type[Task]] = {}


def register(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: ``ENV.TASK name`` builds this task."""

    def add(cls: type[Task]) -> type[Task]:
        if name in TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = cls
        cls.name = name
        return cls

    return add


def task_class(world: WorldCfg) -> type[Task]:
    """The class of ``world.ENV.TASK``; an unknown name is a one-line error."""
    name = world.ENV.TASK
    if name not in TASKS:
        raise ConfigError(f"unknown ENV.TASK {name!r}; known: {', '.join(sorted(TASKS))}", "ENV.TASK")
    return TASKS[name]


def make_task(world: WorldCfg, num_envs: int = 1) -> Task:
    """A new task of ``world.ENV.TASK`` for the config, serving ``num_envs`` envs."""
    return task_class(world)(world, num_envs)


def check_task_config(world: WorldCfg, criteria: Sequence[str] = ()) -> None:
    """Checks ``ENV.TASK``, ``ENV.KEYS_TO_KEEP`` and ``criteria`` (``EVO.SELECTION_CRITERIA``) against the task.

    Observation keys must be ``proprioceptive`` or keys the task declares; selection criteria must
    be reward terms the task reports (``__reward__ctrl`` and its aggregates included) or a summary
    field (``return``, ``energy``, ``x_pos``, ``metric``).

    Raises:
        ConfigError: one line naming the unknown key and what the task offers (a ValueError).
    """
    cls = task_class(world)
    observables = ("proprioceptive", *cls.observables)
    unknown = [k for k in world.ENV.KEYS_TO_KEEP if k not in observables]
    if unknown:
        raise ConfigError(f"unknown ENV.KEYS_TO_KEEP {unknown} for task {world.ENV.TASK}; "
                          f"known: {', '.join(observables)}", "ENV.KEYS_TO_KEEP")
    known = (*cls.reward_terms, CTRL_TERM, *cls.aggregates, *SUMMARY_FIELDS)
    unknown = [k for k in criteria if k not in known]
    if unknown:
        raise ConfigError(f"unknown EVO.SELECTION_CRITERIA {unknown} for task {world.ENV.TASK}; "
                          f"known: {', '.join(known)}", "EVO.SELECTION_CRITERIA")
