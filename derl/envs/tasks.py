"""Tasks: the reward, extra observations, extra termination and metric of an env (``ENV.TASK``).

A task is a small set of hooks the env calls; tasks register by name in ``TASKS``. The
control cost and the energy log are the env's own (common to all tasks). Reward terms are
returned as ``{"__reward__<name>": value}``; the env's reward is their sum plus the control cost,
except the task's ``aggregates`` (sums of other terms logged under their own name).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from derl.envs.observations import head_frame, names_with_prefix

if TYPE_CHECKING:
    from derl.envs.unimal_env import UnimalEnv


class Task:
    """Hooks with neutral defaults; subclasses override what they need."""

    #: observation keys (besides proprioceptive/hfield) this task produces, with their sizes
    obs_sizes: dict[str, int] = {}
    #: logged sums of other terms (name -> its parts): in ``info`` but not added to the reward
    aggregates: dict[str, tuple[str, ...]] = {}
    #: end the episode when the agent nears a side edge (SIZE[1] - |y| <= 1)
    edge_termination = True

    def __init__(self, env: UnimalEnv):
        self.env = env

    def reset(self, rng: np.random.Generator) -> None:
        """Sets up the episode (objects, goals) after the terrain is drawn."""

    def start(self) -> None:
        """Reads the start state (positions are forwarded) before the first step."""

    def reward(self, x_before: float) -> tuple[float, dict[str, float]]:
        """The task's reward (control cost excluded) and its ``__reward__*`` terms."""
        raise NotImplementedError

    def observe(self, obs: dict[str, np.ndarray]) -> None:
        """Adds the task's observation keys to ``obs``."""

    def metric(self) -> float:
        """The task metric reported in ``info["metric"]``."""
        return float(self.env.data.qpos[0])


class Locomotion(Task):
    """Move along +x: ``FORWARD_REWARD_WEIGHT * dx/dt`` (+ stand term, weight 0 in DERL)."""

    def __init__(self, env: UnimalEnv):
        super().__init__(env)
        self._forward_weight = float(env.cfg.ENV.FORWARD_REWARD_WEIGHT)
        self._stand_weight = float(env.cfg.ENV.STAND_REWARD_WEIGHT)

    def reward(self, x_before: float) -> tuple[float, dict[str, float]]:
        forward = self._forward_weight * float(self.env.data.qpos[0] - x_before) / self.env.dt
        stand = self._stand_weight * self.env.torso_height if self._stand_weight else 0.0
        return forward + stand, {"__reward__forward": forward, "__reward__stand": stand}


class Manipulation(Task):
    """Push a box to a goal (MVT), as DERL's ``ManipulationTask``: reach the box, then push it.

    d = least distance between the agent's sites (``torso/*``, ``limb/btm/*``, ``limb/mid/*``)
    and the box's face sites; with (w, _, bonus) = ENV.REACH_REWARD_PARAMS and m =
    OBJECT.SUCCESS_MARGIN, on every step:

    - ``__reward__reach`` = w * (d_before - d_after), + bonus the first time d <= m (walking
      away from the box after reaching it costs reward);
    - ``__reward__push`` = 0 until that first reach; from that step on,
      w * (decrease of the box-goal xy distance), + bonus on each step the box is within m of
      the goal;
    - ``__reward__manipulation`` = reach + push, an aggregate (``aggregates``): DERL's
      selection criterion, not a third term of the reward.

    The metric is how much closer to the goal the box is than at the start (metres).
    """

    obs_sizes = {"obj": 12, "goal": 3}
    aggregates = {"__reward__manipulation": ("__reward__reach", "__reward__push")}
    edge_termination = False

    def __init__(self, env: UnimalEnv):
        super().__init__(env)
        model, cfg = env.model, env.cfg
        if "Objects" not in cfg.ENV.MODULES:
            raise ValueError("ENV.TASK manipulation needs Objects in ENV.MODULES")
        def sites(*prefixes: str) -> np.ndarray:
            found = [names_with_prefix(model, mujoco.mjtObj.mjOBJ_SITE, model.nsite, p) for p in prefixes]
            return np.array(sum(found, []), dtype=np.intp)

        agent_sites = sites("torso/", "limb/btm/", "limb/mid/")
        self._num_agent_sites = len(agent_sites)
        self._sites = np.concatenate([agent_sites, sites("box/face/")])  # agent sites, then box faces
        box = model.joint("box")
        self._box_qpos = int(box.qposadr[0])
        self._box_dof = int(box.dofadr[0])
        self._box_body = model.body("box").id
        self._goal_site = model.site("goal").id
        self._weight, _, self._bonus = (float(v) for v in cfg.ENV.REACH_REWARD_PARAMS)
        self._margin = float(cfg.OBJECT.SUCCESS_MARGIN)
        self._side = float(cfg.OBJECT.BOX_SIDE)
        low, high = cfg.OBJECT.FORWARD_PLACEMENT_DIST
        self._ahead = (float(low), float(high))
        corridor = env.corridor
        self._x_span = (corridor.x_min + 2 * cfg.OBJECT.PLACEMENT_BUFFER_LEN,
                        corridor.x_max - 2 * cfg.OBJECT.PLACEMENT_BUFFER_LEN)
        self._min_gap = float(cfg.OBJECT.CLOSE_PLACEMENT_DIST)
        self._y_half = max(0.0, corridor.half_width - 2 * cfg.OBJECT.PLACEMENT_BUFFER_WIDTH)
        if self._x_span[1] - self._min_gap < self._x_span[0]:
            raise ValueError("TERRAIN.SIZE is too short to place the box and its goal "
                             "(see OBJECT.PLACEMENT_BUFFER_LEN, CLOSE_PLACEMENT_DIST)")
        self._reached = False
        self._agent_dist = self._goal_dist = self._start_goal_dist = 0.0

    def _ground(self, x: float, y: float, half: float) -> float:
        """Highest ground under a square of half-side ``half`` centred at (x, y)."""
        corridor, heights = self.env.corridor, self.env.heights
        if heights is None:
            return corridor.ground_z
        pad = self.env.map_pad
        r0, c0 = corridor.cell(x - half, y - half)
        r1, c1 = corridor.cell(x + half, y + half)
        return corridor.ground_z + float(heights[pad + r0:pad + r1 + 1, pad + c0:pad + c1 + 1].max())

    def reset(self, rng: np.random.Generator) -> None:
        x_lo, x_hi = self._x_span
        box_x = float(np.clip(rng.uniform(*self._ahead), x_lo, x_hi - self._min_gap))
        goal_x = min(box_x + rng.uniform(*self._ahead), x_hi)
        box_y, goal_y = rng.uniform(-self._y_half, self._y_half, size=2)
        data, model = self.env.data, self.env.model
        box_z = self._ground(box_x, box_y, self._side) + self._side + 0.1
        data.qpos[self._box_qpos:self._box_qpos + 7] = (box_x, box_y, box_z, 1, 0, 0, 0)
        data.qvel[self._box_dof:self._box_dof + 6] = 0
        model.site_pos[self._goal_site] = (goal_x, goal_y, self._ground(goal_x, goal_y, 0.0))
        self._reached = False
        self._goal_dist = self._start_goal_dist = math.hypot(goal_x - box_x, goal_y - box_y)

    def start(self) -> None:
        self._agent_dist = self._box_distance()

    def _box_distance(self) -> float:
        points = self.env.data.site_xpos.take(self._sites, axis=0)
        split = self._num_agent_sites
        gaps = points[:split, None, :] - points[None, split:, :]
        return math.sqrt(float((gaps * gaps).sum(axis=2).min()))

    def reward(self, x_before: float) -> tuple[float, dict[str, float]]:
        agent_dist = self._box_distance()
        reach = self._weight * (self._agent_dist - agent_dist)
        self._agent_dist = agent_dist
        if not self._reached and agent_dist <= self._margin:
            self._reached = True
            reach += self._bonus
        # The box body's position as MuJoCo last computed it, like the agent's sites (and as DERL).
        box = self.env.data.xpos[self._box_body]
        goal = self.env.model.site_pos[self._goal_site]
        goal_dist = math.hypot(goal[0] - box[0], goal[1] - box[1])
        push = 0.0
        if self._reached:
            push = self._weight * (self._goal_dist - goal_dist)
            if goal_dist <= self._margin:
                push += self._bonus
        self._goal_dist = goal_dist
        return reach + push, {"__reward__reach": reach, "__reward__push": push,
                              "__reward__manipulation": reach + push}

    def observe(self, obs: dict[str, np.ndarray]) -> None:
        data, head = self.env.data, self.env.head_body
        head_pos = data.xpos[head]
        box_pos = data.qpos[self._box_qpos:self._box_qpos + 3]
        box_vel = data.qvel[self._box_dof:self._box_dof + 3]
        box_spin = data.xmat[self._box_body].reshape(3, 3) @ data.qvel[self._box_dof + 3:self._box_dof + 6]
        goal = self.env.model.site_pos[self._goal_site]
        world = np.stack([box_pos - head_pos, box_vel - data.qvel[0:3], box_spin, goal - head_pos])
        local = head_frame(world, data.xmat[head])
        obs["obj"] = local.ravel()
        obs["goal"] = local[3].copy()

    def metric(self) -> float:
        return self._start_goal_dist - self._goal_dist


TASKS: dict[str, type[Task]] = {"locomotion": Locomotion, "manipulation": Manipulation}
