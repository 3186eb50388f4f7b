"""MuJoCo Warp's kernel compilations over the bodies of a search: how many, for which bodies, what they follow.

MuJoCo Warp builds some kernels per model: ``@cache_kernel`` factories in ``mujoco_warp/_src`` take
model sizes as arguments and the kernel reads them as constants, so warp compiles a module anew
for each value and keeps it in its kernel cache on disk, where later processes load it. Here the
bodies (``--genomes DIR``: the genome JSON files of a run's ``genomes/``, in the order of their
names; or ``--sample N`` genomes drawn as ``tools/morphology.py sample`` draws them, mutated
``--mutations`` times, a comma-separated list taking turns) are stepped in order, each in a process
of its own, all with warp's cache in one fresh folder (``WARP_CACHE_PATH``), as a node's workers
share ``~/.cache/warp``. A process builds the body's world (``--cfg``, default ``configs/evo/ft.yml``),
puts ``--nworld`` worlds on warp's ``--device`` and takes one env step (``benchmarks.sim.WarpSim``);
the modules that appeared in the cache meanwhile were compiled for that body.

Per body: its model sizes (limbs, nv, nu, ngeom, nbody, njnt, nv_pad, nC: the mass matrix's nonzeros,
the geom type pairs that may collide), the modules it compiled, by name, and the first step's seconds.
The summary: bodies, bodies that compiled anything, modules in all, the cumulative count against
the body number, the shape classes (``SPECIALISED``: the sizes that the kernels specialised per model
read on these bodies) and their cumulative count, for candidate keys of sizes the bodies that
compiled exactly when one of their keys was new to the cache, the kernels compiled again after the
first body, and the share of the processes' wall time spent in first steps that compiled something.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from benchmarks.cases import genome_files, sampled_in_turns, world_model
from benchmarks.children import ChildError, run_json, serve
from derl.arguments import any_seed, bounded_float, bounded_int
from derl.checked_config import load_config
from derl.config import ConfigError
from derl.morphology.config import UnimalCfg
from derl.morphology.files import InputError, load_genome
from derl.paths import evo_preset

# The model sizes that MuJoCo Warp 4.0's kernels specialised per model read on FT bodies, one key per
# group of kernels: nv (the Newton solver's two Cholesky kernels and its residual kernel, the mass
# matrix's dense tile), nv padded to a multiple of 4 with nC (the solver's J'DJ kernel), and the geom
# type pairs that may collide (the narrow phase). Each key's values are a shape class.
SPECIALISED = (("nv",), ("nv_pad", "nC"), ("geom_pairs",))
# Predicates tested against the compilations: does a body compile exactly when one of its keys is new?
CANDIDATES = ((("nbody",),), (("ngeom",),), (("nu",),), (("nv",),), (("nv", "nC"),), SPECIALISED)


@dataclass(frozen=True)
class BodyCompile:
    """One body's first step in a process of its own: its model sizes and what it compiled."""

    id: str
    limbs: int
    nv: int
    nu: int
    ngeom: int
    nbody: int
    njnt: int
    nv_pad: int  # nv padded to the Newton solver's tile (mujoco_warp's Model.nv_pad)
    nC: int  # nonzeros of the mass matrix's lower triangle (len(M_colind)): the tree's shape
    geom_pairs: tuple[str, ...]  # geom type pairs that may collide (MuJoCo Warp's geom_pair_type_count)
    new_modules: tuple[str, ...]  # warp modules that appeared in the cache during the first step
    put_seconds: float  # put_model + put_data
    first_step_seconds: float
    process_seconds: float = 0.0  # the child process, start to exit (measured by the parent)

    def key(self, fields: Sequence[str]) -> tuple:
        return tuple(getattr(self, name) for name in fields)


# Its output paths (derl.fileio.outputs.check_outputs).
OUTPUTS = {"cache": "folder"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--genomes", type=Path, help="a folder of genome JSON files (a run's genomes/)")
    parser.add_argument("--sample", type=bounded_int(0, 100_000), help="or: this many random genomes")
    parser.add_argument("--seed", type=any_seed, default=0,
                        help="--sample: the first seed (one more per --mutations value)")
    parser.add_argument("--mutations", default="0",
                        help="--sample: mutations per genome, comma-separated values taking turns (0,4,8)")
    parser.add_argument("--cfg", type=Path, default=evo_preset("ft"), help="the bodies' config (default: ft.yml)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="warp's device")
    parser.add_argument("--nworld", type=bounded_int(0, 1_000_000), default=8, help="worlds of each body")
    parser.add_argument("--cache", type=Path,
                        help="warp's cache folder, new or empty; kept afterwards (default: a temporary one, removed)")
    parser.add_argument("--timeout", type=bounded_float(1, 604_800), default=1800,
                        help="seconds one body's process may take")


def collision_pairs(pair_counts: Sequence[int], type_names: Sequence[str]) -> tuple[str, ...]:
    """The pairs with a count in ``pair_counts``, MuJoCo Warp's ``geom_pair_type_count``: the upper
    triangle (diagonal included) over the geom types ``type_names`` by value, row after row."""
    n = len(type_names)
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    return tuple(f"{type_names[i]}-{type_names[j]}" for (i, j), count in zip(pairs, pair_counts, strict=True) if count)


def kernel_name(module: str) -> str:
    """The factory or module of a warp cache folder's name: ``wp__update_gradient_cholesky__locals__kernel_
    4c171783_1b26c4d`` -> ``_update_gradient_cholesky``, ``wp_mujoco_warp._src.smooth_439a86e`` ->
    ``mujoco_warp._src.smooth``."""
    name = re.sub(r"(_[0-9a-f]{8})?_[0-9a-f]{7}$", "", module.removeprefix("wp_"))
    return name.split("__locals__")[0]


def _name(keys: Sequence[Sequence[str]]) -> str:
    return " | ".join(", ".join(key) for key in keys)


def _follows(bodies: Sequence[BodyCompile], keys: Sequence[Sequence[str]]) -> int:
    """Bodies after the first that compiled something exactly when one of their ``keys`` was new to the cache."""
    seen = [{bodies[0].key(key)} for key in keys]
    agree = 0
    for body in bodies[1:]:
        new = [body.key(key) not in values for key, values in zip(keys, seen, strict=True)]
        agree += any(new) == bool(body.new_modules)
        for key, values in zip(keys, seen, strict=True):
            values.add(body.key(key))
    return agree


def summarise(bodies: Sequence[BodyCompile]) -> dict:
    """What the per-body records say, in figures (bodies in the order they ran)."""
    if not bodies:
        raise ValueError("no bodies to summarise")
    counts = [len(body.new_modules) for body in bodies]
    cumulative = [sum(counts[:index + 1]) for index in range(len(bodies))]
    classes = {_name([key]): [len({body.key(key) for body in bodies[:index + 1]}) for index in range(len(bodies))]
               for key in SPECIALISED}
    later = bodies[1:]
    compiling = [body.first_step_seconds for body in later if body.new_modules]
    loading = [body.first_step_seconds for body in later if not body.new_modules]
    wall = sum(body.process_seconds for body in bodies)
    compile_seconds = sum(body.first_step_seconds for body in bodies if body.new_modules)
    compiled_at = [index + 1 for index, count in enumerate(counts) if count]
    return {
        "bodies": len(bodies),
        "bodies_compiling": len(compiled_at),
        "modules": cumulative[-1],
        "modules_first_body": counts[0],
        "modules_later_bodies": cumulative[-1] - counts[0],
        "modules_per_body": counts,
        "cumulative_modules": cumulative,
        "last_body_compiling": compiled_at[-1] if compiled_at else None,
        "modules_in_second_half": cumulative[-1] - cumulative[len(bodies) // 2 - 1] if len(bodies) > 1 else 0,
        "classes": {name: values[-1] for name, values in classes.items()},
        "cumulative_classes": classes,
        "compiles_follow": {_name(keys): {"agree": _follows(bodies, keys), "of": len(later)} for keys in CANDIDATES},
        "kernels_compiled_again": dict(Counter(kernel_name(module) for body in later for module in body.new_modules)
                                       .most_common()),
        "first_step_seconds": {"first_body": bodies[0].first_step_seconds,
                               "later_compiling_median": statistics.median(compiling) if compiling else None,
                               "later_loading_median": statistics.median(loading) if loading else None},
        "wall_seconds": round(wall, 2),
        "compiling_seconds": round(compile_seconds, 2),
        "compiling_share_of_wall": round(compile_seconds / wall, 3) if wall else None,
    }


def measure_body(genome_path: Path, config_file: Path, device: str, nworld: int) -> BodyCompile:
    """In this process: the body's world on warp's ``device``, its first env step, the modules it added."""
    from benchmarks.sim import WarpSim

    cfg = load_config(config_file)
    genome = load_genome(genome_path)
    model = world_model(genome, cfg.world)
    warp = WarpSim(device)
    before = warp.modules()
    cost = warp.build_cost(model, nworld, cfg.SIM.NCONMAX, cfg.SIM.NJMAX)
    new = warp.modules() - before
    with warp.wp.ScopedDevice(warp.device):
        device_model = warp.mjw.put_model(model)
    names = [kind.name for kind in sorted(warp.mjw.GeomType, key=lambda kind: kind.value)]
    return BodyCompile(genome.id, genome.num_limbs, model.nv, model.nu, model.ngeom, model.nbody, model.njnt,
                       int(device_model.nv_pad), len(model.M_colind),
                       collision_pairs(device_model.geom_pair_type_count, names), tuple(sorted(new)),
                       round(cost["put_model_seconds"] + cost["put_data_seconds"], 4), cost["first_step_seconds"])


def _genome_files(args: argparse.Namespace, unimal: UnimalCfg, work: Path) -> list[Path]:
    """The bodies' genome files, in the order they run."""
    if (args.genomes is None) == (args.sample is None):
        raise SystemExit("error: give --genomes DIR or --sample N (one of them)")
    if args.genomes is not None:
        if not args.genomes.is_dir():
            raise SystemExit(f"error: --genomes: not a folder: {args.genomes}")
        paths = genome_files(args.genomes)
        if not paths:
            raise SystemExit(f"error: --genomes: no genome JSON files in {args.genomes}")
        for path in paths:  # a bad file is one line here, before any process starts
            load_genome(path)
        return paths
    try:
        mutations = [int(part) for part in args.mutations.split(",")]
    except ValueError:
        raise SystemExit(f"error: --mutations expects comma-separated integers, got {args.mutations!r}") from None
    if args.sample < 1 or args.seed < 0 or min(mutations) < 0:
        raise SystemExit("error: --sample must be >= 1, --seed and --mutations >= 0")
    return sampled_in_turns(unimal, args.sample, args.seed, mutations, work)


def _fresh_cache(path: Path | None) -> Path:
    if path is None:
        return Path(tempfile.mkdtemp(prefix="derl-warp-cache-"))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SystemExit(f"error: --cache must be a new or empty folder (a fresh kernel cache): {path}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run_body(genome: Path, args: argparse.Namespace, cache: Path) -> BodyCompile:
    """``measure_body`` in a child process (in the checkout's root, so paths are absolute) with warp's
    cache in ``cache``."""
    spec = {"genome": str(genome.resolve()), "cfg": str(args.cfg.resolve()), "device": args.device,
            "nworld": args.nworld}
    try:
        record = run_json(__name__, spec, f"{genome.name}: its process", timeout=args.timeout,
                          env=dict(os.environ, WARP_CACHE_PATH=str(cache.resolve())))
    except ChildError as err:
        raise SystemExit(f"error: {err}") from None
    seconds = record.pop("child_seconds")
    return BodyCompile(**{**record, "geom_pairs": tuple(record["geom_pairs"]),
                          "new_modules": tuple(record["new_modules"]), "process_seconds": round(seconds, 3)})


def _versions() -> dict:
    versions = {}
    for name in ("mujoco", "mujoco-warp", "warp-lang"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run(args: argparse.Namespace) -> dict:
    if args.nworld < 1 or args.timeout <= 0:
        raise SystemExit("error: --nworld must be >= 1 and --timeout > 0")
    try:
        cfg = load_config(args.cfg)
    except ConfigError as err:
        raise SystemExit(f"error: --cfg: {err}") from None
    cache = _fresh_cache(args.cache)
    with tempfile.TemporaryDirectory(prefix="derl-bench-compile-") as work:
        try:
            genomes = _genome_files(args, cfg.unimal, Path(work))
            bodies = [_run_body(path, args, cache) for path in genomes]
        except InputError as err:
            raise SystemExit(f"error: {err}") from None
        finally:
            if args.cache is None:
                shutil.rmtree(cache, ignore_errors=True)
    return {"device": args.device, "nworld": args.nworld, "cfg": str(args.cfg), "nconmax": cfg.SIM.NCONMAX,
            "njmax": cfg.SIM.NJMAX, "cache": str(args.cache) if args.cache else "a temporary folder, removed",
            "versions": _versions(), "summary": summarise(bodies), "per_body": [asdict(body) for body in bodies]}


def _child(spec: dict) -> dict:
    """``python -m benchmarks.compile SPEC`` (``benchmarks.children``): one body's record."""
    try:
        body = measure_body(Path(spec["genome"]), Path(spec["cfg"]), spec["device"], spec["nworld"])
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    return asdict(body)


if __name__ == "__main__":
    serve(_child)
