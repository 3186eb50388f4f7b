"""Flat layout of (Dict or Box) observations: each key is a column range of one float32 vector.

The pool writes every env's observation into one row of a preallocated ``[num_envs, size]`` array;
the networks slice the keys back out. A Box observation is one key, ``proprioceptive``.
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

    def write(self, obs: Any, row: np.ndarray) -> None:
        """Copies one env's observation into ``row`` (a view of the pool's buffer).

        Called once per env and step: 1-D observations are assigned without reshaping.
        """
        if not self.is_dict:
            row[:] = obs if np.ndim(obs) == 1 else np.ravel(obs)
            return
        if len(self.keys) == 1:  # FT: proprioceptive only
            value = obs[self.keys[0]]
            row[:] = value if value.ndim == 1 else value.ravel()
            return
        for key, part in zip(self.keys, self.slices, strict=True):
            value = obs[key]
            row[part] = value if value.ndim == 1 else value.ravel()

    def to_dict(self) -> dict:
        return {"keys": list(self.keys), "dims": list(self.dims), "is_dict": self.is_dict}

    @classmethod
    def from_dict(cls, data: dict) -> ObsLayout:
        return cls(tuple(data["keys"]), tuple(int(d) for d in data["dims"]), bool(data["is_dict"]))
