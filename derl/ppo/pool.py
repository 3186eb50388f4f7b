"""Env pools: ``NUM_ENVS`` envs stepped in lockstep, observations stacked in preallocated arrays.

Autoreset mode: *same step* (Gymnasium's ``AutoresetMode.SAME_STEP``). When env i ends an episode
at a step, its true final observation is copied to ``final_obs[i]`` (the trainer bootstraps
truncated episodes from it), the env is reset at once, and ``obs[i]`` holds the first observation
of the next episode. Env i is seeded with ``seed + i`` at the first reset only; a pool's envs
have consecutive indices from ``first_index`` (rank r of a data-parallel run starts at
``r * NUM_ENVS``, so no two ranks share an env seed).

``EnvPool`` steps its envs in the calling process (DERL's DummyVecEnv: no inter-process copies).
``SubprocEnvPool`` runs groups of ``IN_SERIES`` envs, each group an ``EnvPool`` in a subprocess
started by the ``forkserver`` (never ``fork``: unsafe once CUDA or NCCL run in the parent), for
envs heavy enough to pay for the pickling. Its ``make_env`` must therefore be picklable: a
top-level function or class, or an env description such as ``derl.training.envs.UnimalEnvFactory``;
and, as with ``spawn``, a script that builds one needs an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from derl.ppo.episode_stats import EpisodeStats
from derl.ppo.obs_layout import ObsLayout

MakeEnv = Callable[[int], gym.Env]


class StepBatch(NamedTuple):
    """One lockstep step of all envs; arrays are ``[num_envs, ...]``."""

    obs: np.ndarray  # float32 [N, D], after autoreset
    rewards: np.ndarray  # float64 [N]
    terminated: np.ndarray  # bool [N]
    truncated: np.ndarray  # bool [N]
    final_obs: np.ndarray  # float32 [N, D], valid where terminated | truncated
    episodes: list[dict[str, float]]  # info["episode"] of the episodes that ended


def _check_action_space(space: gym.Space) -> None:
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"action space {type(space).__name__} is not supported (continuous Box only)")


class EnvPool:
    """Envs ``make_env(i)`` for ``i`` in ``indices``, stepped in this process."""

    def __init__(self, make_env: MakeEnv, indices: Sequence[int]):
        self.indices = list(indices)
        self.envs = [EpisodeStats(make_env(i)) for i in self.indices]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        _check_action_space(self.action_space)
        self.layout = ObsLayout.from_space(self.observation_space)
        # Envs that split a step in two (``advance(action)``, then ``step(action)``; UnimalEnv) have
        # every env's physics run first. Gymnasium wrappers do not forward ``advance``: a wrapper in
        # between, which could change the action, keeps the plain step unless it defines one.
        advances = [getattr(env.env, "advance", None) for env in self.envs]
        self._advances = advances if all(advances) else None
        n, size = len(self.envs), self.layout.size
        self._obs = np.zeros((n, size), np.float32)
        self._final_obs = np.zeros((n, size), np.float32)
        self._rewards = np.zeros(n, np.float64)
        self._terminated = np.zeros(n, bool)
        self._truncated = np.zeros(n, bool)

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    def reset(self, seed: int | None) -> np.ndarray:
        for row, (index, env) in enumerate(zip(self.indices, self.envs, strict=True)):
            obs, _ = env.reset(seed=None if seed is None else seed + index)
            self.layout.write(obs, self._obs[row])
        return self._obs

    def step(self, actions: np.ndarray) -> StepBatch:
        """Steps every env with its row of ``actions``. Returned arrays are reused next step."""
        write, episodes = self.layout.write, []
        obs_buf, final_buf = self._obs, self._final_obs
        rewards, terminated_buf, truncated_buf = self._rewards, self._terminated, self._truncated
        if self._advances is not None:
            for advance, action in zip(self._advances, actions, strict=True):
                advance(action)
        for row, (env, action) in enumerate(zip(self.envs, actions, strict=True)):
            obs, reward, terminated, truncated, info = env.step(action)
            rewards[row] = reward
            terminated_buf[row] = terminated
            truncated_buf[row] = truncated
            if terminated or truncated:
                write(obs, final_buf[row])
                episodes.append(info["episode"])
                obs, _ = env.reset()
            write(obs, obs_buf[row])
        return StepBatch(obs_buf, rewards, terminated_buf, truncated_buf, final_buf, episodes)

    def episodes_so_far(self) -> list[dict[str, float]]:
        return [env.episode_so_far() for env in self.envs]

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _module_of(make_env: MakeEnv) -> str:
    module = getattr(make_env, "__module__", None) or type(make_env).__module__
    return "derl.ppo.pool" if module == "__main__" else module


def _pool_worker(conn, make_env: MakeEnv, indices: list[int]) -> None:
    """Serves one ``EnvPool`` over a pipe. Messages: (command, payload) → (ok, result)."""
    pool = None
    try:
        pool = EnvPool(make_env, indices)
        conn.send((True, (pool.observation_space, pool.action_space)))
        while True:
            command, payload = conn.recv()
            if command == "step":
                conn.send((True, pool.step(payload)))
            elif command == "reset":
                conn.send((True, pool.reset(payload)))
            elif command == "episodes_so_far":
                conn.send((True, pool.episodes_so_far()))
            elif command == "close":
                conn.send((True, None))
                return
            else:
                raise ValueError(f"unknown env pool message {command!r}")
    except (KeyboardInterrupt, EOFError):
        return
    except Exception as err:  # the parent re-raises it (``_remote_error``)
        text = traceback.format_exc()
        try:
            payload = pickle.dumps(err)
        except Exception:  # an exception that cannot travel arrives as text only
            payload = None
        conn.send((False, (payload, text)))
    finally:
        if pool is not None:
            pool.close()
        conn.close()


def _remote_error(payload: bytes | None, text: str) -> BaseException:
    """An env subprocess's exception, of its own class, with the subprocess's traceback as a note.

    The class matters to the caller: the evolution charges a ``ValueError`` from MuJoCo to the
    morphology but an ``OSError`` (a full disk) to the node, as it does for envs in-process. An
    exception that cannot be unpickled becomes a ``RuntimeError`` holding the traceback.
    """
    error = None
    if payload is not None:
        try:
            error = pickle.loads(payload)
        except Exception:  # its class needs arguments it did not pickle: the text will do
            pass
    if not isinstance(error, BaseException):
        return RuntimeError(f"env subprocess failed:\n{text}")
    error.add_note(f"raised in an env subprocess:\n{text}")
    return error


class SubprocEnvPool:
    """Same interface as ``EnvPool``; envs in groups of ``in_series`` per subprocess."""

    def __init__(self, make_env: MakeEnv, num_envs: int, in_series: int, first_index: int = 0):
        if in_series < 1 or num_envs % in_series:
            raise ValueError(f"VECENV.IN_SERIES {in_series} must divide PPO.NUM_ENVS {num_envs}")
        try:
            pickle.dumps(make_env)
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            raise ValueError(f"VECENV.TYPE SubprocVecEnv needs a picklable env factory, not {make_env!r} "
                             f"({err}); use a top-level function or an env description") from None
        context = mp.get_context("forkserver")
        # The server imports these once; each env subprocess forks from it and shares their pages.
        context.set_forkserver_preload(["derl.ppo.pool", _module_of(make_env)])
        starts = range(first_index, first_index + num_envs, in_series)
        groups = [list(range(s, s + in_series)) for s in starts]
        self._conns, self._procs = [], []
        for group in groups:
            parent, child = context.Pipe()
            proc = context.Process(target=_pool_worker, args=(child, make_env, group), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        spaces = [self._receive(conn) for conn in self._conns]
        self.observation_space, self.action_space = spaces[0]
        self.layout = ObsLayout.from_space(self.observation_space)
        self._rows = [slice(g[0] - first_index, g[-1] + 1 - first_index) for g in groups]
        self._obs = np.zeros((num_envs, self.layout.size), np.float32)
        self._final_obs = np.zeros_like(self._obs)
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminated = np.zeros(num_envs, bool)
        self._truncated = np.zeros(num_envs, bool)

    @property
    def num_envs(self) -> int:
        return self._obs.shape[0]

    @staticmethod
    def _receive(conn) -> Any:
        ok, result = conn.recv()
        if not ok:
            raise _remote_error(*result)
        return result

    def _call(self, command: str, payloads: Sequence[Any]) -> list[Any]:
        for conn, payload in zip(self._conns, payloads, strict=True):
            conn.send((command, payload))
        return [self._receive(conn) for conn in self._conns]

    def reset(self, seed: int | None) -> np.ndarray:
        for rows, obs in zip(self._rows, self._call("reset", [seed] * len(self._conns)), strict=True):
            self._obs[rows] = obs
        return self._obs

    def step(self, actions: np.ndarray) -> StepBatch:
        episodes = []
        batches = self._call("step", [actions[rows] for rows in self._rows])
        for rows, batch in zip(self._rows, batches, strict=True):
            self._obs[rows] = batch.obs
            self._final_obs[rows] = batch.final_obs
            self._rewards[rows] = batch.rewards
            self._terminated[rows] = batch.terminated
            self._truncated[rows] = batch.truncated
            episodes.extend(batch.episodes)
        return StepBatch(
            self._obs, self._rewards, self._terminated, self._truncated, self._final_obs, episodes
        )

    def episodes_so_far(self) -> list[dict[str, float]]:
        return [ep for group in self._call("episodes_so_far", [None] * len(self._conns)) for ep in group]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (OSError, EOFError):  # the subprocess is gone (it failed, or was killed)
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()


def make_pool(
    make_env: MakeEnv, num_envs: int, pool_type: str, in_series: int, first_index: int = 0
) -> EnvPool | SubprocEnvPool:
    """``VECENV.TYPE``: ``DummyVecEnv`` (in-process, default) or ``SubprocVecEnv``; envs
    ``first_index`` to ``first_index + num_envs - 1``."""
    if pool_type == "DummyVecEnv":
        return EnvPool(make_env, range(first_index, first_index + num_envs))
    if pool_type == "SubprocVecEnv":
        return SubprocEnvPool(make_env, num_envs, in_series, first_index)
    raise ValueError(f"VECENV.TYPE must be DummyVecEnv or SubprocVecEnv, got {pool_type!r}")
