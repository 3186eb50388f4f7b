"""Tasks by name (``ENV.TASK``): each owns its world, observations, reward, termination and metric.

``TASKS`` maps names to ``Task`` classes (``derl.envs.tasks.base``); ``@register(name)`` adds one.
The evolution tasks are ``locomotion`` (FT, VT) and ``manipulation`` (MVT); the evaluation tasks of
DERL are ``patrol``, ``point_nav``, ``obstacle``, ``exploration``, ``incline``, ``push_box_incline``,
``escape_bowl`` and ``manipulation_ball`` (``configs/eval/<task>.yml``; manipulation_ball is the
``manipulation`` task with ``OBJECT.TYPE ball``).
"""

from __future__ import annotations

# Importing the task modules registers their tasks.
from derl.envs.tasks import locomotion, manipulation, navigation  # noqa: F401
from derl.envs.tasks.base import Task
from derl.envs.tasks.registry import TASKS, check_task_config, make_task, register
from derl.metrics import CTRL_TERM, SUMMARY_FIELDS

__all__ = ["CTRL_TERM", "SUMMARY_FIELDS", "TASKS", "Task", "check_task_config", "make_task", "register"]
