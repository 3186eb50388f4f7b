"""Can ``SIM.BACKEND warp`` run on this machine: its packages installed, and warp able to capture MuJoCo
Warp's step on a CUDA device (driver, toolkit, memory pool). Called by the loader for a config that
trains here (``derl.checked_config.load_config(..., this_node=True)``) and by ``tools/gpu_check.py``."""

from __future__ import annotations

import importlib.util

from derl.config import ConfigError
from derl.envs.warp_log import quiet_warp

# The modules SIM.BACKEND warp imports, and how to install them (requirements-gpu.txt).
WARP_MODULES = ("warp", "mujoco_warp")
GPU_INSTALL = "`.venv/bin/pip install -r requirements-gpu.txt` (or `make setup-gpu`)"


def check_backend_here(backend: str) -> None:
    """``SIM.BACKEND``'s packages are installed here: ``warp`` needs ``requirements-gpu.txt``.

    Finds the modules without importing them (``import mujoco_warp`` takes over a second and
    100 MB, which the coordinator would pay for nothing); a broken install shows where a worker
    imports them.
    """
    if backend != "warp":
        return
    missing = [name for name in WARP_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"config key SIM.BACKEND warp needs the Python module(s) {', '.join(missing)}, not "
                          f"installed here; install them with {GPU_INSTALL}", "SIM.BACKEND")


# CUDA graphs with conditional nodes (wp.capture_while: MuJoCo Warp's solver loop inside a captured step)
# need a driver and a toolkit of this version or newer.
CONDITIONAL_GRAPH_CUDA = (12, 4)


def _version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_warp_cuda(device: str, toolkit: tuple[int, int] | None, driver: tuple[int, int] | None,
                    min_driver: tuple[int, int] | None, mempool: bool) -> None:
    """Raises ``ConfigError`` (one line, what to do) if warp cannot capture MuJoCo Warp's step on ``device``.

    Args:
        toolkit: the CUDA version warp's wheel was built with (``wp.get_cuda_toolkit_version()``);
            None: a CPU-only build of warp.
        driver: the CUDA version the NVIDIA driver supports (``wp.get_cuda_driver_version()``); None:
            no driver found. torch's CUDA says nothing about warp's: each wheel brings its own.
        min_driver: the oldest driver warp's build runs on (warp's runtime ``min_driver_version``).
        mempool: ``wp.is_mempool_supported(device)``: captured graphs allocate from warp's memory pool.
    """
    key = "SIM.BACKEND"
    if toolkit is None:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: this warp-lang was built without "
                          f"CUDA; install the CUDA build with {GPU_INSTALL}", key)
    if driver is None:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: warp finds no NVIDIA driver; install "
                          f"one for CUDA >= {_version(max(min_driver or toolkit, CONDITIONAL_GRAPH_CUDA))}", key)
    if min_driver is not None and driver < min_driver:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: warp-lang was built with CUDA "
                          f"{_version(toolkit)} and needs a driver for CUDA >= {_version(min_driver)}, this node's "
                          f"supports CUDA {_version(driver)}: update the NVIDIA driver", key)
    if min(driver, toolkit) < CONDITIONAL_GRAPH_CUDA:
        older = f"the driver's CUDA {_version(driver)}" if driver < toolkit else f"warp's CUDA {_version(toolkit)}"
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: MuJoCo Warp's captured step needs "
                          f"conditional CUDA graphs (CUDA >= {_version(CONDITIONAL_GRAPH_CUDA)}), {older} is older: "
                          "update the NVIDIA driver or warp-lang", key)
    if not mempool:
        raise ConfigError(f"config key SIM.BACKEND warp with DEVICE {device}: the GPU or driver has no CUDA memory "
                          "pool, which warp's captured graphs allocate from: use a driver for CUDA >= 11.2 "
                          "without MIG/vGPU limits on pools, or DEVICE cpu", key)


def check_warp_cuda_here(device: str) -> None:
    """``check_warp_cuda`` on this node's warp, driver and ``device`` (imports warp: about a second)."""
    wp = quiet_warp()  # lazy: only SIM.BACKEND warp on a GPU needs it (requirements-gpu.txt)
    wp.init()
    runtime = wp._src.context.runtime
    driver = wp.get_cuda_driver_version()
    mempool = driver is not None and wp.is_cuda_available() and wp.is_mempool_supported(device)
    check_warp_cuda(device, wp.get_cuda_toolkit_version(), driver, runtime.min_driver_version, mempool)
