"""PPO throughput of this checkout against another git revision, in one process, iterations alternating.

On a shared machine, runs a minute apart differ by tens of percent, more than most optimisations
buy. Two trainings in one process, one PPO iteration of each in turn, see the same machine: the
median of the per-pair speed ratios resolves changes of a few percent (A/A runs, ``--base HEAD``
on a clean checkout, 30-40 iterations on the 2-core development machine: 0.97, 1.02, 1.01). The
other revision's ``derl`` package and ``configs`` are taken with ``git archive`` into a temporary
folder and imported as ``derl_base`` (its ``derl`` imports rewritten). Both train the same body on
the preset of ``--env`` (FT by default; VT, MVT) from the same seed, with DERL's PPO defaults (32 envs
x 128 steps), one torch thread, envs in the process. Each keeps its own torch generator state between
its iterations (the global one is swapped in and out), so each is the training it would be alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.cases import FT_GENOME_SEED, env_configs, unimal_case
from benchmarks.ppo_runs import speed_overrides
from benchmarks.stats import median, paired_median, ratio_of_totals
from derl.arguments import bounded_int
from derl.paths import REPO_ROOT

BASE_PACKAGE = "derl_base"
_IMPORT = re.compile(r"^(\s*)(from|import) derl(?=[.\s])", re.MULTILINE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, help="git revision to compare against (e.g. HEAD~3, a tag)")
    parser.add_argument("--xml", type=Path, help="unimal MJCF (default: the ppo benchmark's seeded genome)")
    parser.add_argument("--iters", type=bounded_int(1, 100_000), default=30, help="PPO iterations of each, alternating")
    parser.add_argument("--env", default="ft", choices=("ft", "vt", "mvt"),
                        help="the task preset both train (configs/evo/<env>.yml of each revision)")


def rename_imports(source: str) -> str:
    """``from derl.x import y`` / ``import derl.x`` -> the same from ``derl_base``."""
    return _IMPORT.sub(rf"\1\2 {BASE_PACKAGE}", source)


def extract_revision(revision: str, folder: Path) -> None:
    """``derl`` of ``revision`` as ``folder/derl_base`` (imports renamed), its ``configs`` beside it."""
    try:
        archive = subprocess.run(["git", "archive", revision, "derl", "configs"], cwd=REPO_ROOT,
                                 capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"error: git archive {revision!r} failed: {err.stderr.decode().strip()}") from None
    except FileNotFoundError:
        raise SystemExit("error: bench ab needs git on the PATH") from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "derl").rename(folder / BASE_PACKAGE)
    for path in (folder / BASE_PACKAGE).rglob("*.py"):
        path.write_text(rename_imports(path.read_text()))


def _load_package(path: Path) -> None:
    """Imports the package in ``path`` under its folder's name; its submodules then import from there
    (importlib's recipe for a package outside ``sys.path``)."""
    name = path.name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]  # a previous comparison's
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py", submodule_search_locations=[str(path)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)


def _config_loader(package: str):
    """The module with ``load_preset``: ``checked_config``, or ``config`` in a base from before it."""
    try:
        return importlib.import_module(f"{package}.checked_config")
    except ModuleNotFoundError as err:
        if err.name != f"{package}.checked_config":
            raise
        return importlib.import_module(f"{package}.config")


class _Training:
    """One PPO of a package (``derl`` or ``derl_base``), stepped an iteration at a time."""

    def __init__(self, package: str, preset: str, xml: Path, iters: int):
        envs = importlib.import_module(f"{package}.training.envs")
        trainer = importlib.import_module(f"{package}.ppo.trainer")
        cfg = _config_loader(package).load_preset(preset, speed_overrides(iters))
        # The trainer takes ``cfg.trainer`` and the factory ``cfg.world``; a base from before the typed
        # config's bundles takes the whole tree for either.
        takes_world = "world" in {field.name for field in dataclasses.fields(envs.UnimalEnvFactory)}
        settings = cfg.trainer if hasattr(cfg, "trainer") else cfg
        factory = envs.UnimalEnvFactory(cfg.world if takes_world else cfg, str(xml))
        self.ppo = trainer.PPO(settings, factory, seed=0)
        self.ppo.collector.reset(0)
        self.rng_state = torch.get_rng_state()
        self.seconds: list[float] = []

    def iterate(self) -> None:
        torch.set_rng_state(self.rng_state)
        started = time.process_time()
        self.ppo.iterate()
        self.seconds.append(time.process_time() - started)
        self.rng_state = torch.get_rng_state()

    def close(self) -> None:
        self.ppo.pool.close()


def compare(base: list[float], new: list[float]) -> dict:
    """Seconds per iteration of each, alternating pairs -> medians and the median speed ratio."""
    return {
        "base_median_seconds": median(base, 4),
        "new_median_seconds": median(new, 4),
        "speedup_paired_median": paired_median(base, new, 4),
        "speedup_of_totals": ratio_of_totals(base, new),
    }


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        extract_revision(args.base, folder)
        xml = Path(unimal_case(env_configs()[args.env], args.xml, FT_GENOME_SEED, folder)["xml"])
        _load_package(folder / BASE_PACKAGE)
        trainings: dict[str, _Training] = {}
        try:
            trainings["base"] = _Training(BASE_PACKAGE, args.env, xml, args.iters)
            trainings["new"] = _Training("derl", args.env, xml, args.iters)
            for i in range(args.iters):
                for name in ("base", "new") if i % 2 == 0 else ("new", "base"):
                    trainings[name].iterate()
        finally:
            for training in trainings.values():
                training.close()
    body = str(args.xml) if args.xml else f"random_genome seed {FT_GENOME_SEED}"
    return {"base": args.base, "env": args.env, "body": body, "iters": args.iters,
            **compare(trainings["base"].seconds, trainings["new"].seconds)}
