"""The PPO profile (``tools/bench.py ppo --profile``): exclusive timers, components that add up."""

from pathlib import Path

import mujoco
import numpy as np
from gymnasium.vector import SyncVectorEnv

from benchmarks import ppo_profile
from benchmarks.ppo_profile import Profiler, profile_run, summarise
from derl.checked_config import load_preset
from derl.ppo import rollout
from derl.ppo.episode_stats import EpisodeStatistics, vector_step_values
from derl.training.envs import UnimalEnvFactory

QUADRUPED = Path(__file__).parents[1] / "assets" / "envs" / "quadruped.xml"


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nested_timers_count_their_own_time_only(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(ppo_profile.time, "perf_counter", clock)
    profiler = Profiler()

    def inner():
        clock.now += 2.0

    timed_inner = profiler.wrap(inner, "inner")

    def outer():
        clock.now += 1.0
        timed_inner()
        timed_inner()
        clock.now += 3.0

    profiler.wrap(outer, "outer")()
    # outer lasts 1 + 2 + 2 + 3 = 8 s, of which 4 s are inner's
    assert profiler.exclusive == {"inner": 4.0, "outer": 4.0}
    assert profiler.inclusive == {"inner": 4.0, "outer": 8.0}


def test_profile_of_a_short_unimal_training_adds_up_and_restores_the_code():
    step, own_add, vector_step = mujoco.mj_step, EpisodeStatistics.add, SyncVectorEnv.step
    cfg = load_preset("ft", {"PPO.NUM_ENVS": 2, "PPO.TIMESTEPS": 32, "PPO.BATCH_SIZE": 32,
                             "PPO.MAX_STATE_ACTION_PAIRS": 128, "ENV.EPISODE_LENGTH": 40})
    profiled = profile_run(cfg.trainer, UnimalEnvFactory(cfg.world, str(QUADRUPED)), seed=0)
    assert mujoco.mj_step is step and EpisodeStatistics.add is own_add
    assert rollout.vector_step_values is vector_step_values and SyncVectorEnv.step is vector_step
    assert profiled["env_steps"] == 128
    report = summarise(profiled, {"cpu_seconds": profiled["cpu_seconds"], "env_steps": 128}, 1e4, 5e3)
    parts = report["us_per_env_step"]
    for name in ("physics", "env_python", "observations", "env_reset", "episode_bookkeeping", "vector_env",
                 "policy_forward", "normalisation", "collector", "gae", "update", "setup_envs", "setup_learner",
                 "other"):
        assert parts[name] > 0, name
    assert abs(sum(parts.values()) - report["profiled_us_per_env_step"]) < 0.1
    # CPU-scaled exclusive times add up to the run's CPU time per env step
    total_cpu_us = 1e6 * profiled["cpu_seconds"] / 128
    assert abs(report["profiled_us_per_env_step"] - total_cpu_us) < 0.01 * total_cpu_us
    assert report["physics_replay_us_per_env_step"] == 100.0 and 0 < report["setup_share_of_5e6_steps"] < 1
    assert report["lockstep_physics_replay_us_per_env_step"] == 200.0


def test_physics_replays_step_every_recorded_action(monkeypatch):
    from benchmarks.ppo_replay import StateRecorder, lockstep_physics_seconds, physics_seconds
    from derl.envs import UnimalVectorEnv

    cfg = load_preset("ft", {"ENV.EPISODE_LENGTH": 5})
    recorder = StateRecorder(UnimalVectorEnv(str(QUADRUPED), cfg.world, 2))
    counted = []
    original = mujoco.mj_step
    recorder.reset(seed=0)
    for _ in range(7):  # an episode end (autoreset), then a second episode
        recorder.step(recorder.action_space.sample())
    monkeypatch.setattr(mujoco, "mj_step", lambda *args: (counted.append(1), original(*args)))
    seconds, steps = physics_seconds(recorder.replays)
    assert seconds > 0 and steps == len(counted) == 14
    assert lockstep_physics_seconds(recorder.replays) > 0 and len(counted) == 28  # the same 14 steps again
    # each replay starts from the recorded states: the physics reproduces the env's trajectory
    replay = recorder.replays[1]
    data = mujoco.MjData(replay.model)
    for entry in replay.log:
        if entry.shape[0] != replay.model.nu:
            mujoco.mj_setState(replay.model, data, entry, replay.SIGNATURE)
        else:
            data.ctrl[:] = entry
            original(replay.model, data, replay.frame_skip)
    np.testing.assert_array_equal(data.qpos, recorder.unwrapped.sim.scene.qpos[1])
