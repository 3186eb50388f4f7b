"""The thread budget of a derl process, set in one place: torch's threads and every BLAS and OpenMP
thread pool follow ``TORCH_THREADS`` (docs/guides/configuration.md).

Left alone, a BLAS pool starts one thread per core: with the second of two cores busy, numpy's
OpenBLAS took 18x longer over the VT height-map layer's product, and on a node running one worker
per core the pools of all workers fight. Environment variables (``OPENBLAS_NUM_THREADS``) cannot
change a pool once its library is loaded, and every entry point loads numpy first; threadpoolctl
resizes the pools already loaded, whichever BLAS (OpenBLAS, MKL) or OpenMP runtime they belong to.
MuJoCo's batch stepping has threads of its own (``VECENV.THREADS``), which this leaves alone.
"""

import sys

import threadpoolctl


def limit_threads(threads: int) -> None:
    """Limits every BLAS and OpenMP pool loaded in this process, and torch if loaded, to ``threads``.

    Entry points call it once their config is read; the trainer and the policy player call it
    again once torch is loaded (a pool loaded after a call keeps its library's default). It does not
    import torch itself: a coordinator, and the workers of a test backend, never load it.

    Args:
        threads: the process's budget, ``TORCH_THREADS`` (at least 1, checked with the config).
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    threadpoolctl.threadpool_limits(limits=threads)
