"""Whose fault a failure is, and how long a coordinator waits before restarting a failing worker.

Only a failure of the morphology itself costs its slot an attempt: MuJoCo rejecting or blowing up
the body, an invalid genome. A fault of the config found only while training (a ``ConfigError``: a
non-finite reward or training summary, an allocation the config asked for, a ``DEVICE`` the node lacks)
and running out of memory (``MemoryError``: a rollout that does not fit,
``derl.ppo.rollout.RolloutTooLarge``, or any allocation) are the config's or the machine's (``config``):
a restart would fail again, so they are never recorded as a morphology's nor retried as an environment
failure (``config_fault`` finds the ``ConfigError``, which names its key). Everything else is the node's problem
(a full disk, an I/O error, a missing GPU or module, a bug in derl; a checkpoint that does not load is
set aside by the step first, ``damaged_checkpoint``): the
worker stops without recording anything, its slot and checkpoint stay as they were, and the
coordinator restarts it after a back-off, so that the run resumes once the cause is gone.
Pure functions: ``derl.evolution.scheduling``, ``worker`` and ``coordinator`` apply them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Literal, NamedTuple

from derl.config import ConfigError

Cause = Literal["morphology", "environment", "config", "bug"]

# The config or the machine: more memory than the node has (NumPy's "Unable to allocate 462 GiB" included).
CONFIG_ERRORS: tuple[type[BaseException], ...] = (MemoryError,)
# The node, not the morphology: I/O (ENOSPC, EIO, NFS), resources, installation, files and settings.
ENVIRONMENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError, EOFError, ImportError, json.JSONDecodeError,
)
# Matched by class name (theirs or a base's), so that classifying imports neither torch nor mujoco.
ENVIRONMENT_ERROR_NAMES = frozenset({"derl.ppo.checkpoint.CheckpointError", "derl.ppo.device.DeviceError"})
# What simulating or training a bad body raises: MuJoCo's compiler and mju_error (ValueError,
# mujoco.FatalError, RuntimeError), values a body drives out of range (ArithmeticError).
MORPHOLOGY_ERRORS: tuple[type[BaseException], ...] = (ValueError, ArithmeticError, RuntimeError)
MORPHOLOGY_ERROR_NAMES = frozenset({"mujoco.FatalError"})
# torch and warp report device problems as RuntimeError (or AssertionError when torch is built without
# CUDA); warp's own words: "Warp CUDA error 900: ...", "CUDA graph capture failed", "Graph capture is not
# active on this stream", "Failed to allocate N bytes on device 'cuda:0'", an unknown or capturing stream.
DEVICE_WORDS = ("CUDA", "cuda", "cuDNN", "CUBLAS", "NCCL", "out of memory", "no kernel image", "device-side",
                "cudaError", "Warp error", "stream", "capture", "Failed to allocate", "on device")
# Any exception a class of these modules raises is the device's or the installation's (warp's code
# generator and runtime, MuJoCo Warp's put_model/put_data on a device), never a body's.
DEVICE_MODULES = ("warp.", "mujoco_warp.")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or while handling (unless ``raise ... from None``)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        hidden = current.__suppress_context__
        current = current.__cause__ if current.__cause__ is not None else None if hidden else current.__context__


def _names(err: BaseException) -> set[str]:
    return {f"{kind.__module__}.{kind.__qualname__}" for kind in type(err).__mro__}


def _is_environment_error(err: BaseException) -> bool:
    return isinstance(err, ENVIRONMENT_ERRORS) or bool(_names(err) & ENVIRONMENT_ERROR_NAMES) or _is_device_error(err)


def _is_device_error(err: BaseException) -> bool:
    """A CUDA or Warp runtime error: by its class's module, or by the words of torch's and warp's messages."""
    if any(name.startswith(DEVICE_MODULES) for name in _names(err)):
        return True
    return isinstance(err, RuntimeError | AssertionError) and any(word in str(err) for word in DEVICE_WORDS)


def config_fault(err: BaseException) -> ConfigError | None:
    """The ``ConfigError`` in ``err``'s chain, or None: a fault of the config found while a worker trains
    (its message names the key; the search ends on it as on bad input, ``EXIT_CONFIG``)."""
    return next((e for e in _chain(err) if isinstance(e, ConfigError)), None)


def damaged_checkpoint(err: BaseException) -> bool:
    """Whether ``err`` says a checkpoint read back does not load (``derl.ppo.checkpoint.CheckpointError``, or
    JSON that does not parse): the folder's file, which ``derl.evolution.step`` sets aside to train anew."""
    return any(isinstance(e, json.JSONDecodeError) or "derl.ppo.checkpoint.CheckpointError" in _names(e)
               for e in _chain(err))


def classify(err: BaseException) -> Cause:
    """Whose fault ``err`` is: ``morphology`` (costs the slot an attempt), ``config``, ``environment`` or ``bug``.

    A ``MemoryError`` or a ``ConfigError`` anywhere in the chain (``raise ... from``) makes the whole
    failure the config's or the machine's (``config``: restarting would fail again; it stops the worker
    for good); else an environment error anywhere in the chain makes it the environment's. A ``NotImplementedError`` or
    an exception outside the lists (``TypeError``, ``KeyError``, ...) is a bug of derl: it must be
    fixed, not paid for with slots.
    """
    if any(isinstance(e, CONFIG_ERRORS) for e in _chain(err)) or config_fault(err) is not None:
        return "config"
    if any(_is_environment_error(e) for e in _chain(err)):
        return "environment"
    if isinstance(err, NotImplementedError):
        return "bug"
    if isinstance(err, MORPHOLOGY_ERRORS) or _names(err) & MORPHOLOGY_ERROR_NAMES:
        return "morphology"
    return "bug"


# What a worker's last error line says about a failure that stopped it, by ``classify``'s cause.
WHOSE = {
    "environment": "an environment failure: this node's disk, files, devices (a CUDA or Warp error) or "
                   "installation, not the morphology's",
    "config": "more memory than this node has: the config's sizes (PPO.NUM_ENVS, PPO.TIMESTEPS) or the node, "
              "not the morphology's; a restart would fail again",
    "bug": "a bug in derl (traceback above), not the morphology's",
    "morphology": "a morphology's error raised outside its training, so no slot paid for it",
}


def describe(err: BaseException) -> str:
    """``Type: message`` on one line (the first line of the message)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


# Back-off between restarts of a worker that keeps failing: 1 s, doubling, at most this long.
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 60.0


class Streak(NamedTuple):
    """Consecutive failures of one worker: how many, and when (monotonic seconds) the first happened."""

    failures: int
    since: float


def next_streak(streak: Streak | None, now: float, ran_seconds: float, healthy_seconds: float) -> Streak:
    """The streak after a worker that ran ``ran_seconds`` failed at ``now``.

    A run of at least ``healthy_seconds`` ends the previous streak: this failure starts a new one.
    """
    if streak is None or ran_seconds >= healthy_seconds:
        return Streak(1, now)
    return Streak(streak.failures + 1, streak.since)


def restart_delay(failures: int, first: float = FIRST_DELAY_SECONDS, cap: float = MAX_DELAY_SECONDS) -> float:
    """Seconds to wait before restarting after the ``failures``-th failure in a row: first * 2**(n-1), capped."""
    return min(cap, first * 2.0 ** max(failures - 1, 0))


def gives_up(streak: Streak, now: float, limit_seconds: float) -> bool:
    """True once a worker has been failing (restarts and waits included) for ``limit_seconds`` or more."""
    return now - streak.since >= limit_seconds
