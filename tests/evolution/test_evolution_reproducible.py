"""A quick-preset search with one worker and a fixed seed publishes the same morphologies every time.

One worker makes the run sequential: every parent is chosen from the same published records, so the
genomes (file bytes), their MJCF, lineage and seeds must match a fixture exactly and the fitness terms to
float64 rounding. The fixture was written by this code at the time the evolution step was last
restructured, so a refactor that changes what a search publishes fails here. Regenerate it (only for a
deliberate change of behaviour, for this CPU's vendor) with ``python -m tests.evolution.test_evolution_reproducible``.

Ten PPO iterations on contact dynamics are chaotic: another CPU's BLAS and torch kernels sum in
another order and the fitness moves by up to 6x (``OPENBLAS_CORETYPE=Zen`` alone: a return 115% off),
too far for any tolerance to keep the test's meaning. So the search runs, and the fixture was
recorded, with the kernels every x86-64 CPU has (``PORTABLE_KERNELS``); torch's version is pinned in
``requirements.txt``. They gave the same values on AMD EPYCs with and without AVX-512, but not on an
Intel Xeon (2026-11-29), where the same search under them trained other policies while the bodies'
physics matched the AMD recordings bit for bit (tests/assets/envs): most likely torch's BLAS, Intel's
MKL, whose paths depend on the vendor (not proven). So there is one fixture per CPU vendor,
``quick_one_worker.<vendor_id>.json`` in tests/assets/evolution, and a vendor without one is skipped.

The MJCF is compared without the mark that ends it (the SHA-256 of its genome, checked here to be the
genome's): the AMD fixture was recorded before MJCFs were marked.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from derl.evolution.folder.genome_store import body_mark

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "assets" / "evolution"
# 3 initial morphologies, 4 children (one a grandchild), 10 PPO iterations of 64 env steps each: ~10 s.
OVERRIDES = ["EVO.NUM_PROCESSES", "1", "EVO.INIT_POPULATION_SIZE", "3", "EVO.SEARCH_SPACE_SIZE", "7",
             "EVO.AGING_WINDOW_SIZE", "3", "EVO.NUM_PARTICIPANTS", "2", "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "32",
             "PPO.MAX_STATE_ACTION_PAIRS", "640", "ENV.EPISODE_LENGTH", "100"]
# What identifies a published morphology besides its genome and fitness (published_at, wall_time and
# steps_per_sec are clock readings, node/worker/device where it ran).
IDENTITY = ("parent_id", "lineage", "mutation", "slot", "attempt", "seed", "publication", "env_steps", "iterations")
CLOCK = ("published_at", "wall_time", "steps_per_sec", "node", "worker", "device", "files", "id")
# The kernels of the oldest x86-64 CPUs for OpenBLAS (numpy), torch and MKL (torch's BLAS, in its
# conditional-numerical-reproducibility mode) and oneDNN (torch's layers): the same arithmetic on any CPU.
PORTABLE_KERNELS = {"OPENBLAS_CORETYPE": "Nehalem", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                    "ONEDNN_MAX_CPU_ISA": "SSE41"}


def run_search(out: Path) -> None:
    command = [sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", "OUT_DIR", str(out), *OVERRIDES]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **PORTABLE_KERNELS}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _body_sha256(xml: Path, genome: Path) -> str:
    """The SHA-256 of the MJCF before the mark of its genome, which must end it."""
    text, mark = xml.read_text(), body_mark(genome.read_text())
    assert text.endswith(mark), f"{xml} does not end with its genome's mark"
    return hashlib.sha256(text[:-len(mark)].encode()).hexdigest()


def cpu_vendor() -> str:
    """The CPU's ``vendor_id`` (GenuineIntel, AuthenticAMD), as Linux reports it."""
    found = re.search(r"^vendor_id\s*:\s*(\S+)", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return found.group(1) if found else "unknown"


def fixture() -> Path:
    return FIXTURES / f"quick_one_worker.{cpu_vendor()}.json"


def published(out: Path) -> dict[str, dict]:
    """Per published id: its genome's and MJCF's sha256, the ``IDENTITY`` fields and every fitness term."""
    found = {}
    for path in sorted((out / "metadata").glob("*.json")):
        metadata = json.loads(path.read_text())
        found[metadata["id"]] = {
            "genome_sha256": _sha256(out / "genomes" / path.name),
            "xml_sha256": _body_sha256(out / "xml" / f"{metadata['id']}.xml", out / "genomes" / path.name),
            **{key: metadata[key] for key in IDENTITY},
            "fitness": {key: value for key, value in metadata.items() if key not in IDENTITY + CLOCK},
        }
    return found


@pytest.mark.slow
@pytest.mark.recorded
def test_one_worker_search_publishes_the_recorded_morphologies(tmp_path):
    if not fixture().is_file():
        pytest.skip(f"no search recorded on a {cpu_vendor()} CPU (module docstring)")
    run_search(tmp_path / "run")
    got, expected = published(tmp_path / "run"), json.loads(fixture().read_text())
    assert sorted(got) == sorted(expected)
    for morphology_id, want in expected.items():
        have = got[morphology_id]
        assert {k: v for k, v in have.items() if k != "fitness"} == {k: v for k, v in want.items() if k != "fitness"}
        assert sorted(have["fitness"]) == sorted(want["fitness"]), morphology_id
        for key, value in want["fitness"].items():
            assert have["fitness"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (morphology_id, key)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        run_search(Path(folder) / "run")
        fixture().write_text(json.dumps(published(Path(folder) / "run"), indent=1, sort_keys=True) + "\n")
    print(f"wrote {fixture()}")
