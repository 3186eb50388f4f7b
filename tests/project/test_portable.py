"""The tests that compare with values recorded on another machine (``@pytest.mark.recorded``) also
pass with the kernels of CPUs without AVX-512.

The fixtures under tests/assets were recorded on a CPU with AVX-512; most laptops, and AMD servers
before Zen 4, have AVX2 at most, and there OpenBLAS (numpy's BLAS), MKL (torch's) and torch's own
kernels sum in another order. A recorded-value test that compares bit for bit passes on the
recording machine and fails on those. Each test here reruns every recorded-value test of ``make
test`` in a subprocess (the kernels are chosen when the libraries load) with the kernels such a CPU
would pick; the markers, not a list kept here, say which tests those are.
"""

import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

# What each library picks on a CPU with AVX2 but no AVX-512 (e.g. AMD Zen 1-3), and on one without
# AVX2 (e.g. Intel Sandy Bridge), where torch falls back to its scalar kernels.
KERNELS = {
    "avx2": {"OPENBLAS_CORETYPE": "Zen", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "avx": {"OPENBLAS_CORETYPE": "Sandybridge", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ATEN_CPU_CAPABILITY": "default"},
}


def _recorded_test_files() -> list[str]:
    """The test files that use the ``recorded`` marker (this one excepted)."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if path.name != "test_portable.py" and "mark.recorded" in path.read_text())


@pytest.mark.parametrize("kernels", sorted(KERNELS))
def test_recorded_values_hold_with_another_cpus_kernels(kernels):
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2: its own kernels are the ones being tried, `make test` runs them")
    files = _recorded_test_files()
    assert files, "no test is marked recorded"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "recorded and not slow", *files]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **KERNELS[kernels]}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
