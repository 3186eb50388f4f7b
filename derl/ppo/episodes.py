"""DERL's learning curve and fitness, from the finished episodes, stated in env steps.

DERL trains 32 envs x 128 steps: one PPO iteration is 4,096 env steps, and each iteration records a
point, the mean of the last ``EPISODES_PER_POINT`` (10) finished episodes. A morphology's fitness (the
``summary`` the evolution publishes) is the mean of the last ``POINTS`` (100) points: the last 409,600
env steps of learning. Counted in iterations, that rule would measure other things under other batch
shapes (the second half of training at 4,096 envs x 24 steps, the whole curve of a short run), so
here it is counted in env steps, whatever the shape:

    the fitness is the mean, over the last 409,600 env steps of training, of one point per 4,096 env
    steps (``POINT_STEPS``), each the mean of the last 10 episodes finished by then.

Episodes are ordered by the env step at which they ended, then by env (rank, then index): the order
in which DERL's vector env reports them. Under DERL's shape the points fall at the ends of the
iterations and the fitness is DERL's, bit for bit. A training whose length is not a multiple of
``POINT_STEPS`` adds a last point at its end. The learning curve (``current``, one record per
iteration in ``metrics.jsonl``) is unchanged: the mean of the last 10 episodes at the iteration's
end. Fitnesses are kept as floats (the original truncated to int).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from derl.metrics import is_summary_key

EPISODES_PER_POINT = 10
POINT_STEPS = 4096  # DERL's env steps per iteration (32 envs x 128 steps): one point each
POINTS = 100
FITNESS_STEPS = POINTS * POINT_STEPS  # 409,600: the end of the learning curve that the fitness measures


def mean_fields(episodes: Iterable[dict[str, float]]) -> dict[str, float]:
    """Per-key float mean over the episodes that report the key (finite values only)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for episode in episodes:
        for key, value in episode.items():
            if is_summary_key(key) and math.isfinite(value):
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sorted(sums)}


def merge_ranks(parts: Sequence[Sequence[tuple[int, dict[str, float]]]]) -> list[tuple[int, dict[str, float]]]:
    """The finished episodes of every rank (``parts[r]``: rank r's, by step then env, each with its
    step), by step, then rank and env: as one process stepping every rank's envs reports them."""
    return sorted((episode for part in parts for episode in part), key=lambda ended: ended[0])


class EpisodeLog:
    """The last ``EPISODES_PER_POINT`` finished episodes, the last ``POINTS`` points (one per
    ``POINT_STEPS`` env steps), and a count of all.

    ``env_steps`` is the training's env-step count (all ranks) the log has reached; a resumed
    training gives it back to ``load_state_dict`` from its checkpoint.
    """

    def __init__(self) -> None:
        self.recent: deque[dict[str, float]] = deque(maxlen=EPISODES_PER_POINT)
        self.points: deque[dict[str, float]] = deque(maxlen=POINTS)
        self.finished = 0
        self.env_steps = 0

    def add_iteration(self, episodes: Sequence[tuple[int, dict[str, float]]], env_steps: int) -> None:
        """The episodes that ended in one iteration, each with the env-step count at which it ended
        (in order), and the count at the iteration's end; records the points of the env steps passed."""
        for ended_at, episode in episodes:
            self._record_points(up_to=ended_at - 1)  # a point at step s counts the episodes ended by s
            self.recent.append(episode)
            self.finished += 1
        self._record_points(up_to=env_steps)
        self.env_steps = env_steps

    def _record_points(self, up_to: int) -> None:
        """The points at the multiples of ``POINT_STEPS`` after ``env_steps`` up to ``up_to``; a point
        is recorded once any episode has ended."""
        crossed = up_to // POINT_STEPS - self.env_steps // POINT_STEPS
        if crossed > 0:
            if self.recent:
                point = mean_fields(self.recent)
                self.points.extend(dict(point) for _ in range(min(crossed, POINTS)))
            self.env_steps = up_to // POINT_STEPS * POINT_STEPS

    def current(self) -> dict[str, float]:
        """The learning curve's latest value: the mean of the last 10 episodes (empty before the first)."""
        return mean_fields(self.recent)

    def summary(self, in_progress: Sequence[dict[str, float]] = ()) -> dict[str, float]:
        """The fitness: the mean of the last ``POINTS`` points, the training's end one of them; with no
        episode finished, the means of the episodes in progress.

        The fallback keeps a run too short to end an episode reporting every field as a finite
        float (docs/design/differences.md, fitness as floats), instead of NaN or a
        missing key.
        """
        if not self.recent:
            return mean_fields(in_progress)
        points = list(self.points)
        if self.env_steps % POINT_STEPS or not points:  # the end is no multiple of POINT_STEPS: a last point
            points = points[1 - POINTS:] + [mean_fields(self.recent)]
        return mean_fields(points)

    def state_dict(self) -> dict:
        return {"recent": [dict(ep) for ep in self.recent], "points": [dict(p) for p in self.points],
                "finished": self.finished}

    def load_state_dict(self, state: dict, env_steps: int) -> None:
        def floats(rows: list[dict]) -> list[dict[str, float]]:
            return [{k: float(v) for k, v in row.items()} for row in rows]

        self.recent = deque(floats(state["recent"]), maxlen=EPISODES_PER_POINT)
        self.points = deque(floats(state.get("points", [])), maxlen=POINTS)  # older checkpoints had none
        self.finished = int(state["finished"])
        self.env_steps = env_steps
