"""The names of what an episode reports and a morphology is judged by: one vocabulary for the envs,
the learner, the published record and the reports.

An env's step ``info`` carries its reward terms (``__reward__*``, whose sum plus ``__reward__ctrl``
is the reward), ``energy`` and the values ``x_pos`` and ``metric``; the episode statistics
(``derl.ppo.episode_stats``) sum the terms and ``energy`` over an episode and keep the last
``x_pos`` and ``metric``; the learner's summary (``derl.ppo.episodes``) averages those and
``return`` over the last episodes; the evolution publishes that summary as the fitness terms of a
morphology (``derl.evolution.folder.record.PublishedRecord``), any of which may be a selection criterion
(``EVO.SELECTION_CRITERIA``, checked against the task in ``derl.envs.tasks.registry``).

A leaf module: it imports nothing from derl, so the learner and the robot world share it without
importing each other.
"""

from __future__ import annotations

REWARD_PREFIX = "__reward__"
CTRL_TERM = f"{REWARD_PREFIX}ctrl"  # the control cost every task's reward includes
RETURN = "return"
SUM_KEYS = ("energy",)  # logged per step, summed per episode, not reward terms
FINAL_KEYS = ("x_pos", "metric")  # their value at an episode's last step
# What every run reports besides the reward terms: valid selection criteria for any task.
SUMMARY_FIELDS = (RETURN, *SUM_KEYS, *FINAL_KEYS)


def is_reward_term(key: str) -> bool:
    return key.startswith(REWARD_PREFIX)


def is_summary_key(key: str) -> bool:
    """``return``, every ``__reward__*`` term, ``energy``, and the final ``x_pos`` and ``metric``."""
    return key in SUMMARY_FIELDS or is_reward_term(key)
