"""One code over NumPy arrays (the host) and torch tensors (a device): the array namespace, and the
one question whose answer differs between the two (docs/guides/gpus.md#simulating-on-a-gpu).

The env loop (``derl.envs``) and the collector (``derl.ppo.rollout``) are written once over an
array API namespace. What they may not do on a device is read a value back to the host per step:
on a GPU that waits for every kernel queued so far. ``any_set`` is where that is decided: on the
host it reads the mask (free, and it lets a step skip work no env needs); for a tensor, on any
device, CPU included, it answers True without reading, and the caller does the masked work for
every row. So a test on CPU tensors runs exactly what a GPU runs.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

import array_api_compat
import numpy as np

Array = Any  # a NumPy array or a torch tensor
_HOST = (np.ndarray, np.generic)  # NumPy's arrays and scalars: isinstance costs 0.05 us, is_numpy_array 0.3


def namespace(x: Any) -> ModuleType:
    """The array API namespace of ``x``: NumPy itself for NumPy arrays (and host data such as lists,
    scalars: its own functions, without array_api_compat's wrappers, run every step), array_api_compat's
    torch for a tensor."""
    if array_api_compat.is_torch_array(x):
        return array_api_compat.array_namespace(x)
    return np


def namespace_of(device: Any) -> ModuleType:
    """The namespace of arrays on ``device``: NumPy for None (the host), else array_api_compat's torch."""
    if device is None:
        return np
    import array_api_compat.torch as torch_namespace  # lazy: imports torch, which a host-only caller need not

    return torch_namespace


def any_set(mask: Array) -> bool:
    """Whether any entry of the bool array ``mask`` may be set: read on the host; True for a tensor,
    without reading it (module docstring)."""
    if isinstance(mask, _HOST):
        return bool(np.count_nonzero(mask))  # 0.2 us; mask.any() goes through NumPy's Python (0.9 us)
    return True


def all_set(mask: Array) -> bool:
    """Whether every entry of ``mask`` is certainly set: read on the host; False for a tensor."""
    if isinstance(mask, _HOST):
        return bool(mask.all())
    return False


def to_host(x: Array) -> np.ndarray:
    """``x`` as a NumPy array (a copy from a device; NumPy's own array as it is)."""
    if isinstance(x, _HOST):
        return cast(np.ndarray, x)  # a NumPy scalar too: the callers read it as a 0-d array
    return x.detach().cpu().numpy()


# NumPy's cheapest calls for what a step computes on small arrays. For a batch of one env each array call
# is most of its cost: NumPy's Python-level functions (np.take, np.astype, np.cumulative_sum, x.any())
# add 0.5-0.8 us to the 0.2-0.3 us of the C method or ufunc under them, and a step makes dozens of calls.
# Tensors go through their namespace (array_api_compat's torch) as everywhere else.


def take(x: Array, indices: Array, axis: int) -> Array:
    """``xp.take(x, indices, axis=axis)``: for NumPy the array's method (the function's wrapper costs 0.8 us)."""
    if isinstance(x, np.ndarray):
        return x.take(indices, axis=axis)
    return namespace(x).take(x, indices, axis=axis)


def astype(x: Array, dtype: Any) -> Array:
    """``xp.astype(x, dtype)``: for NumPy the array's method (0.16 us; the function: 0.8 us)."""
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    return namespace(x).astype(x, dtype)


def cumulative_sum(x: Array, axis: int) -> Array:
    """``xp.cumulative_sum(x, axis=axis)``: the sums added left to right; for NumPy the ufunc's method."""
    if isinstance(x, np.ndarray):
        return np.add.accumulate(x, axis=axis)
    return namespace(x).cumulative_sum(x, axis=axis)
