"""derl is a package: a build system, an editable install, no import-path tricks in the code."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = [*ROOT.glob("derl/**/*.py"), *ROOT.glob("tools/**/*.py"), *ROOT.glob("tools/**/*.sh"),
        ROOT / "evo_single_proc.py"]


def test_pyproject_has_a_build_system():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["project"]["name"] == "derl"
    assert "-e ." in (ROOT / "Makefile").read_text()


# The simulated cluster's test-only shim (docs/design/scale.md) reaches every process of a simulated node through a
# generated sitecustomize.py put first on PYTHONPATH: it fakes a node's clock and a full disk and counts file
# operations. The benchmarks (tools/benchmarks) are not installed: the processes they start find them through
# PYTHONPATH (children.with_benchmarks). derl itself is imported from its install, never from a path edited here.
SHIM = {"tools/benchmarks/children.py", "tools/benchmarks/cluster.py", "tools/benchmarks/sim_shim.py"}


def test_no_import_path_edits_in_the_code():
    offenders = [str(path.relative_to(ROOT)) for path in CODE
                 if re.search(r"sys\.path\.(insert|append)|PYTHONPATH", path.read_text())]
    assert sorted(offenders) == sorted(SHIM)


def _pins(path: Path) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    pins = [line for line in lines if line and not line.startswith("-")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][0-9A-Za-z.+]*", pin) for pin in pins), pins
    return {name.split("[")[0].lower().replace("_", "-"): version
            for name, version in (pin.split("==") for pin in pins)}


def test_gpu_requirements_are_exact_pins_kept_out_of_the_base_install():
    base, gpu = _pins(ROOT / "requirements.txt"), _pins(ROOT / "requirements-gpu.txt")
    assert gpu["mujoco-warp"] == "4.0.0" and gpu["warp-lang"] == "1.19.0"
    assert "mujoco-warp" not in base and "warp-lang" not in base  # the CPU install stays lean
    assert base["mujoco"] == "4.0.0"
    assert "-c requirements.txt" in (ROOT / "requirements-gpu.txt").read_text()  # base pins hold while it installs
    assert not {name for name in gpu if name in base and gpu[name] != base[name]}
    assert "requirements-gpu.txt" in (ROOT / "Makefile").read_text()
