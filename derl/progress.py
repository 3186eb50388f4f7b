"""Progress bars on long work (tqdm): drawn on a terminal, silent when stderr is a log file or a pipe.

Every long loop a user waits on (a training, the initial population, the report, evaluation cells,
benchmarks) shows one of these, so logs stay clean and a terminal is never silent for minutes.
"""

from __future__ import annotations

from tqdm import tqdm


def progress_bar(total: int | None, description: str, unit: str = "it", enabled: bool = True, **options) -> tqdm:
    """A tqdm bar on stderr; ``disable=None`` is tqdm's own "only on a terminal" switch."""
    return tqdm(total=total, desc=description, unit=unit, disable=None if enabled else True,
                dynamic_ncols=True, **options)
