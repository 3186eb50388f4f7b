"""bench ppo's physics replay: each env's trajectory recorded during a training, replayed through
``mj_step`` alone (``physics_seconds``) and with the envs in lockstep (``lockstep_physics_seconds``);
and the episode returns a return run compares (``EpisodeReturns``). Used in ``benchmarks.ppo_runs``'
child processes (``benchmarks.ppo``'s docstring says what the figures mean)."""

from __future__ import annotations

import time

import gymnasium as gym
import mujoco
import numpy as np


class Replay:
    """One env's recorded trajectory: its model, substeps per step and a log of full physics states
    (after each reset, warm start included) and actions. Replaying them through ``mj_step`` from the
    same states reproduces the simulated trajectory exactly, without the env's Python or the learner (a
    terrain redrawn per episode aside: every episode replays on its env's last terrain, drawn whole, as
    keeping each episode's 4 MB map would take GBs. Against each episode replayed on its own terrain and
    props (300 random-action steps of 32 envs, 2026-11-26): VT's physics costs the same within 2.5%, MVT's
    8-12% less, so MVT's ``vs_physics_alone`` reads about 10% low)."""

    SIGNATURE = mujoco.mjtState.mjSTATE_INTEGRATION

    def __init__(self, model: mujoco.MjModel, frame_skip: int):
        self.model, self.frame_skip, self.log = model, frame_skip, []


class StateRecorder(gym.vector.VectorWrapper):
    """Records every env's trajectory of a ``UnimalVectorEnv`` (``replays``, one ``Replay`` per env)."""

    def __init__(self, env):
        super().__init__(env)
        sim = env.unwrapped.sim
        sim.arena.draw_whole()  # each replay's model holds its env's last terrain whole, not the tiles it walked
        self._physics = sim.physics
        self.replays = [Replay(model, round(sim.dt / model.opt.timestep)) for model in sim.models]

    def _record_states(self, envs) -> None:
        for env in envs:
            self.replays[env].log.append(self._physics.state(env))

    def reset(self, **kwargs):
        result = self.env.reset(**kwargs)
        self._record_states(range(self.num_envs))
        return result

    def step(self, actions):
        for replay, action in zip(self.replays, actions, strict=True):
            replay.log.append(np.array(action, np.float64))
        result = self.env.step(actions)
        self._record_states(np.flatnonzero(result[2] | result[3]).tolist())
        return result


class EpisodeReturns(gym.vector.VectorWrapper):
    """Appends the raw return of every finished episode to ``returns``, as SB3's ``Monitor`` records it.

    derl's own ``summary["return"]`` is DERL's fitness (``derl.ppo.episodes``: the last 409,600
    env steps of the curve): over a short run that averages the whole curve, so the
    return comparison takes the last 100 episodes of both trainers instead.
    """

    def __init__(self, env, returns: list):
        super().__init__(env)
        self.returns = returns
        self._totals = np.zeros(env.num_envs)

    def reset(self, **kwargs):
        self._totals[:] = 0.0
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self._totals += rewards
        ended = terminated | truncated
        self.returns.extend(self._totals[ended].tolist())
        self._totals[ended] = 0.0
        return obs, rewards, terminated, truncated, infos


def physics_seconds(replays: list[Replay]) -> tuple[float, int]:
    """CPU seconds ``mj_step`` x frame_skip takes to replay the recorded episodes, one env at a time."""
    total, steps = 0.0, 0
    for replay in replays:
        model = replay.model
        data = mujoco.MjData(model)
        for entry in replay.log:
            if entry.shape[0] != model.nu:
                mujoco.mj_setState(model, data, entry, replay.SIGNATURE)
                continue
            data.ctrl[:] = entry
            started = time.process_time()
            mujoco.mj_step(model, data, replay.frame_skip)
            total += time.process_time() - started
            steps += 1
    return total, steps


def lockstep_physics_seconds(replays: list[Replay]) -> float:
    """The same replay with the envs in lockstep, one step of each in turn, one ``MjData`` per env.

    Each env's state then leaves the CPU caches between two of its steps (32 envs' MuJoCo data
    and models do not fit in L2), which costs ``mj_step`` itself time: this is the physics limit
    of one env object per simulation, ``physics_seconds`` that of one env stepped alone.
    """
    envs = [(replay, mujoco.MjData(replay.model), iter(replay.log)) for replay in replays]
    total = 0.0
    while envs:
        stepped = []
        for env in envs:
            replay, data, entries = env
            for entry in entries:
                if entry.shape[0] != replay.model.nu:
                    mujoco.mj_setState(replay.model, data, entry, replay.SIGNATURE)
                    continue
                data.ctrl[:] = entry
                started = time.process_time()
                mujoco.mj_step(replay.model, data, replay.frame_skip)
                total += time.process_time() - started
                stepped.append(env)
                break
        envs = stepped
    return total
