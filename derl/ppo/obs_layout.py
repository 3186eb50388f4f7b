"""Flat layout of (Dict or Box) observations: each key is a column range of one float32 vector.

The collector flattens a vector env's observations into a preallocated ``[num_envs, size]`` array
(``ObsLayout.flatten``); the networks slice the keys back out. A Box observation is one key, ``proprioceptive``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

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

    def flatten(self, obs: Any, out: np.ndarray | None = None) -> np.ndarray:
        """A batch of observations as ``[n, size]`` float32 rows, in ``out`` if given.

        ``obs`` is what a vector env returns, a ``[n, ...]`` array (Box) or a dict of them (Dict),
        or one env's observation (a single row).
        """
        if not self.is_dict:
            flat = np.reshape(obs, (-1, self.size))
            if out is None:
                return flat.astype(np.float32)
            out[:] = flat
            return out
        parts = [np.reshape(obs[key], (-1, dim)) for key, dim in zip(self.keys, self.dims, strict=True)]
        if out is None:
            out = np.empty((parts[0].shape[0], self.size), np.float32)
        for part, columns in zip(parts, self.slices, strict=True):
            out[:, columns] = part
        return out

    def to_dict(self) -> dict:
        return {"keys": list(self.keys), "dims": list(self.dims), "is_dict": self.is_dict}

    @classmethod
    def from_dict(cls, data: dict) -> ObsLayout:
        return cls(tuple(data["keys"]), tuple(int(d) for d in data["dims"]), bool(data["is_dict"]))
