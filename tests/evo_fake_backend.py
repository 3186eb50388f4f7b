"""A stand-in for derl's morphology and PPO used by the evolution protocol tests.

Selected in worker processes with ``DERL_EVO_BACKEND=tests.evo_fake_backend:FakeBackend``.
A genome is a number; "training" takes ``PPO.MAX_ITERS`` iterations of ``ITERATION_SECONDS``,
checkpoints after each one and when stopped, while ``may_save()`` (so a resumed run continues), and fails on purpose for
slots with ``slot % 7 == 5`` at attempts below ``DERL_FAKE_FAILING_ATTEMPTS`` (default 1, to
exercise ``error_metadata/``).
Every training start is logged as ``<OUT_DIR>/fake_starts/<id>.<pid>`` (holding the iteration it
starts from) so tests can check that no morphology is trained by two processes, and that a resumed
one continues from its checkpoint. While the file ``DERL_FAKE_HOLD_INIT`` names exists, drawing the
initial population waits. ``DERL_FAKE_ITERATION_SECONDS`` sets an iteration's length (a slow PPO shape);
with ``DERL_FAKE_CHILD`` set, training starts a child process (as an encoder would) and logs its pid
as ``<OUT_DIR>/fake_children/<pid>``. Faults on demand: ``DERL_FAKE_FAULT`` ``config`` (training raises a
``ConfigError`` naming ``ENV.FORWARD_REWARD_WEIGHT``), ``nan`` (the training summary is not finite),
``pool`` (a process drawing the initial population dies).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from derl.config import ConfigError
from derl.evolution.backend import GenomeFiles
from derl.evolution.folder.genome_store import GenomeLimits
from derl.evolution.population import parse_id
from derl.fileio.writes import atomic_write_text, create_exclusive

ITERATION_SECONDS = 0.05


def _genome(genome_id, parent_id, mutation, size):
    return json.dumps({"schema_version": 1, "id": genome_id, "parent_id": parent_id, "mutation": mutation,
                       "size": size})


def _files(genome_id, parent_id, mutation, size):
    return GenomeFiles(_genome(genome_id, parent_id, mutation, size),
                       f'<mujoco model="unimal"><!-- {genome_id} --></mujoco>\n')


class Result:
    def __init__(self, summary, iterations, wall_time, completed):
        self.summary = summary
        self.env_steps = iterations * 100
        self.iterations = iterations
        self.wall_time = wall_time
        self.steps_per_sec = self.env_steps / max(wall_time, 1e-9)
        self.completed = completed


def _size_problem(data):
    """The fake design space: a genome's size is a finite number below 1e6."""
    size = data.get("size")
    ok = isinstance(size, int | float) and not isinstance(size, bool) and abs(size) < 1e6
    return None if ok else f"has no size in the fake design space: {size!r:.40}"


class FakeBackend:
    def genome_limits(self, unimal):
        return GenomeLimits(4096, _size_problem)

    def initial_population(self, unimal, seed, ids, num_workers):
        if os.environ.get("DERL_FAKE_FAULT") == "pool":
            raise ChildProcessError("pool process derl-pool-0 died (exit code -9) before sending all its results")
        while os.path.exists(os.environ.get("DERL_FAKE_HOLD_INIT", "")):  # a long draw, as on a 72-core node
            time.sleep(0.05)
        return [_files(genome_id, None, None, 1.0 + k) for k, genome_id in enumerate(ids)]

    def random_genome(self, unimal, rng, genome_id):
        return _files(genome_id, None, None, float(rng.uniform(0, 5)))

    def mutate(self, unimal, parent, rng, child_id):
        return _files(child_id, parent.id, "size", parent.data["size"] + float(rng.normal()))

    def train(self, training, xml_path, *, seed, checkpoint_path, metrics_path, resume, should_stop, may_save):
        genome_id = Path(xml_path).stem
        out_dir = Path(xml_path).parents[1]
        done = json.loads(checkpoint_path.read_text())["iteration"] if resume else 0
        (out_dir / "fake_starts").mkdir(exist_ok=True)
        create_exclusive(out_dir / "fake_starts" / f"{genome_id}.{os.getpid()}", str(done))
        slot, attempt = parse_id(genome_id)
        if os.environ.get("DERL_FAKE_FAULT") == "config":
            raise ConfigError("config key ENV.FORWARD_REWARD_WEIGHT 1e+308: the reward is not finite",
                              "ENV.FORWARD_REWARD_WEIGHT")
        if slot % 7 == 5 and attempt < int(os.environ.get("DERL_FAKE_FAILING_ATTEMPTS", "1")):
            raise RuntimeError("injected MuJoCo failure")
        size = json.loads((out_dir / "genomes" / f"{genome_id}.json").read_text())["size"]
        if os.environ.get("DERL_FAKE_CHILD"):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            (out_dir / "fake_children").mkdir(exist_ok=True)
            (out_dir / "fake_children" / str(child.pid)).touch()
        seconds = float(os.environ.get("DERL_FAKE_ITERATION_SECONDS", ITERATION_SECONDS))
        start = time.monotonic()
        while done < training.trainer.PPO.MAX_ITERS:
            if should_stop():  # as derl.ppo.train: a final checkpoint, if the files are still ours
                if may_save():
                    atomic_write_text(checkpoint_path, json.dumps({"iteration": done}))
                return Result({}, done, time.monotonic() - start, False)
            time.sleep(seconds)
            done += 1
            if not may_save():
                return Result({}, done, time.monotonic() - start, False)
            atomic_write_text(checkpoint_path, json.dumps({"iteration": done}))
        atomic_write_text(metrics_path, json.dumps({"iteration": done}) + "\n")
        if os.environ.get("DERL_FAKE_FAULT") == "nan":
            size = float("nan")
        summary = {"return": size, "__reward__forward": size, "__reward__ctrl": -0.1, "x_pos": size,
                   "metric": size}
        return Result(summary, done, time.monotonic() - start, True)
