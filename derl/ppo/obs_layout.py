"""Flat layout of (Dict or Box) observations: each key is a column range of one float32 vector.

The collector flattens a vector env's observations (NumPy arrays or tensors) into a preallocated
``[num_envs, size]`` array (``ObsLayout.flatten``); the networks slice the keys back out. A Box
observation is one key, ``proprioceptive``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from derl.arrays import Array, namespace

NORMALIZED_KEY = "proprioceptive"


@dataclass(frozen=True)
class ObsLayout:
    keys: tuple[str, ...]
    dims: tuple[int, ...]
    is_dict: bool
    slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bounds = np.cumsum((0, *self.dims))
        parts = tuple(slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
        object.__setattr__(self, "slices", parts)

    @classmethod
    def from_space(cls, space: gym.Space) -> ObsLayout:
        if isinstance(space, gym.spaces.Box):
            return cls((NORMALIZED_KEY,), (int(np.prod(space.shape)),), False)
        if isinstance(space, gym.spaces.Dict):
            for key, sub in space.spaces.items():
                if not isinstance(sub, gym.spaces.Box):
                    raise ValueError(f"observation key {key!r} is {type(sub).__name__}, expected Box")
            keys = tuple(space.spaces)
            return cls(keys, tuple(int(np.prod(space[k].shape)) for k in keys), True)
        raise ValueError(f"observation space {type(space).__name__} is not supported (Box or Dict of Box)")

    @property
    def size(self) -> int:
        return sum(self.dims)

    def normalized_columns(self) -> tuple[int, int]:
        """Column range of the normalised key (empty if the observation has no such key)."""
        if NORMALIZED_KEY not in self.keys:
            return 0, 0
        part = self.slices[self.keys.index(NORMALIZED_KEY)]
        return part.start, part.stop

    def flatten(self, obs: Any, out: Array | None = None) -> Array:
        """A batch of observations as ``[n, size]`` float32 rows, in ``out`` if given.

        ``obs`` is what a vector env returns, a ``[n, ...]`` array (Box) or a dict of them (Dict),
        NumPy arrays or tensors (rows of the same namespace and device), or one env's observation
        (a single row). Gymnasium's own vector envs give ``final_obs`` as an object array of single
        observations, None where an env did not end: those rows are zeros.
        """
        if isinstance(obs, np.ndarray) and obs.dtype == object:
            flat = np.concatenate([np.zeros((1, self.size), np.float32) if one is None else self.flatten(one)
                                   for one in obs])
            if out is None:
                return flat
            out[:] = flat
            return out
        parts = [obs[key] for key in self.keys] if self.is_dict else [obs]
        xp = namespace(parts[0])
        parts = [xp.reshape(xp.asarray(part), (-1, dim)) for part, dim in zip(parts, self.dims, strict=True)]
        if out is None:
            if not self.is_dict:
                return xp.astype(parts[0], xp.float32)
            out = xp.empty((parts[0].shape[0], self.size), dtype=xp.float32,
                           device=None if xp is np else parts[0].device)
        for part, columns in zip(parts, self.slices, strict=True):
            out[:, columns] = part
        return out

    def to_dict(self) -> dict:
        return {"keys": list(self.keys), "dims": list(self.dims), "is_dict": self.is_dict}

    @classmethod
    def from_dict(cls, data: dict) -> ObsLayout:
        return cls(tuple(data["keys"]), tuple(int(d) for d in data["dims"]), bool(data["is_dict"]))
