"""What ``tools/train_ppo.py`` does: pick the env, train into an output folder, replay a policy.

Output folder layout (every file but TensorBoard's append-only event files written atomically):

- ``config.yaml``: the resolved config; ``run.json``: the env source (``xml`` or ``env_id``);
- ``<id>.xml``: the unimal MJCF when training from a genome file;
- ``model.pt``: checkpoint (``torch.load(weights_only=True)``), ``metrics.jsonl``: one record per
  iteration, ``metrics.json``: the final ``TrainResult`` (``summary`` = the fitness of ``derl.ppo.episodes``
  for ``return``, every ``__reward__*``, ``x_pos``, ``metric``), env steps and wall time
  of all ranks together; written once the training has run its whole budget;
- ``tensorboard/``: TensorBoard event files of the curves (``TENSORBOARD.ENABLED``;
  ``derl.ppo.callbacks.TensorBoard``).

Under ``torchrun`` (``tools/train_ddp.sh``) every rank runs ``train_to_folder``; rank 0 alone
writes the folder.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from derl.checked_config import Config
from derl.config import dump_config
from derl.envs.config import WorldCfg
from derl.envs.sim_warnings import counted_warnings
from derl.fileio.folders import confine_writes
from derl.fileio.reads import read_json
from derl.fileio.writes import atomic_write_text, write_json
from derl.morphology import Genome, to_mjcf
from derl.morphology.config import UnimalCfg
from derl.ppo.callbacks import Callback, StopWhen, TensorBoard
from derl.ppo.device import learner_device
from derl.ppo.distributed import ProcessGroup, RankInfo
from derl.ppo.episode_stats import EpisodeStatistics, vector_step_values
from derl.ppo.episodes import mean_fields
from derl.ppo.policy import load_policy
from derl.ppo.rollout import env_device
from derl.ppo.trainer import TrainResult, max_iterations, train
from derl.progress import progress_bar
from derl.training.envs import env_factory
from derl.training.faults import FiniteTraining, config_faults

CHECKPOINT_FILE = "model.pt"
METRICS_LINES_FILE = "metrics.jsonl"
FINAL_METRICS_FILE = "metrics.json"
RUN_FILE = "run.json"
TENSORBOARD_DIR = "tensorboard"


def write_xml(unimal: UnimalCfg, genome: Genome, out_dir: Path) -> Path:
    """Writes the MJCF (``unimal``'s options) of ``genome`` to ``out_dir/<id>.xml``; returns its path.

    ``genome`` was read by ``derl.morphology.files.load_genome(path, unimal)``: never through a link, bounded and
    held to ``unimal``'s design space before anything is built (``tools/train_ppo.py --genome``)."""
    xml_path = out_dir / f"{genome.id}.xml"
    atomic_write_text(xml_path, to_mjcf(genome, unimal))
    return xml_path


def saved_source(folder: Path) -> dict[str, str]:
    """The env source (``xml`` or ``env_id``) that ``train_to_folder`` recorded in ``folder/run.json``."""
    run_file = folder / RUN_FILE
    if not run_file.is_file():
        raise FileNotFoundError(f"no {RUN_FILE} in {folder}: give --xml, --genome or --env-id")
    source = read_json(run_file)
    if not (isinstance(source, dict) and len(source) == 1 and isinstance(source.get("xml", source.get("env_id")), str)):
        raise ValueError(f"{run_file}: not a run.json of tools/train_ppo.py (one of xml, env_id)")
    return source


class ProgressBar(Callback):
    """The training's progress bar (``derl.progress``): iteration, env steps, mean return, ETA."""

    def __init__(self, max_iters: int):
        self.bar = progress_bar(max_iters, "train", unit="iter")
        self.first = True

    def on_iteration(self, record: dict) -> None:
        if self.first:  # a resumed run starts its bar (and its rate) at the checkpoint's iteration
            self.bar.n = self.bar.last_print_n = self.bar.initial = record["iteration"] - 1
            self.first = False
        mean_return = f"{record['return']:.1f}" if "return" in record else "-"
        self.bar.set_postfix_str(f"steps {record['env_steps']}, return {mean_return}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while a command prepares (``interrupted_by_signals``); exit code 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` at once while the body runs: before the training starts
    (reading and building the body) there is no checkpoint to save, so a signal stops the command there
    and then, never after the build."""
    def interrupt(signum: int, frame) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class SignalStop(StopWhen):
    """Ctrl-C or SIGTERM while training: the run saves its checkpoint at the end of the iteration
    and returns (``TrainResult.completed`` False), so ``--resume`` continues it. A second signal
    stops at once (``KeyboardInterrupt``)."""

    def __init__(self):
        super().__init__(lambda: self.signum is not None)
        self.signum: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> SignalStop:
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


def finished_result(out_dir: Path, max_iters: int) -> TrainResult | None:
    """The saved ``metrics.json`` of a training in ``out_dir`` that already ran ``max_iters`` iterations.

    A resume of it has nothing to do; training "again" would replace its summary with that of
    zero new episodes.
    """
    path = out_dir / FINAL_METRICS_FILE
    if not path.is_file():
        return None
    saved = read_json(path)
    try:
        result = TrainResult(**{f.name: saved[f.name] for f in dataclasses.fields(TrainResult) if f.name in saved})
    except TypeError:
        raise ValueError(f"{path}: not a metrics.json of tools/train_ppo.py") from None
    if not (isinstance(result.completed, bool) and isinstance(result.iterations, int)):
        raise ValueError(f"{path}: not a metrics.json of tools/train_ppo.py (completed, iterations)")
    return result if result.completed and result.iterations >= max_iters else None


@contextmanager
def removed_on_failure(out_dir: Path) -> Iterator[None]:
    """Undoes what a command added to ``out_dir`` if it fails before its first checkpoint.

    A refused command (a bad env, a malformed MJCF, Ctrl-C while starting) leaves no half-made
    folder: a folder it created goes, in an existing one the files it added go. Once ``model.pt``
    exists the folder holds a training to resume and nothing is removed.
    """
    created = next((p for p in reversed([out_dir, *out_dir.parents]) if not p.exists()), None)
    before = set(out_dir.iterdir()) if created is None and out_dir.is_dir() else set()
    try:
        yield
    except BaseException:
        if not (out_dir / CHECKPOINT_FILE).is_file():
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            elif out_dir.is_dir():
                for path in set(out_dir.iterdir()) - before:
                    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        raise


def train_to_folder(
    cfg: Config, source: dict[str, str], out_dir: Path, resume: bool = False, progress: bool = True,
    callbacks: Sequence[Callback] = (),
) -> TrainResult:
    """Trains with ``seed = RNG_SEED`` and writes the output folder (module docstring).

    Args:
        cfg: the training's whole config: it is written to ``config.yaml``, and its bundles go to the
            envs (``cfg.world``) and the trainer (``cfg.trainer``), with ``RNG_SEED`` and ``TENSORBOARD``.
        source: the env, ``{"xml": MJCF path}`` (a unimal) or ``{"env_id": id}`` (a Gymnasium env).
        out_dir: the output folder (created if missing).
        resume: continue from ``out_dir/model.pt`` if it exists.
        progress: draw a progress bar (on a terminal only).
        callbacks: more hooks (``derl.ppo.callbacks``), called before the folder's own.

    Joins the ranks ``torchrun`` started, if any (``derl.ppo.distributed``); one rank otherwise.
    A resume of a finished training returns its saved result and writes nothing
    (``finished_result``); a run stopped by a callback keeps its checkpoint and gets no
    ``metrics.json``. With ``TENSORBOARD.ENABLED``, rank 0 writes ``out_dir/tensorboard/``.

    Raises:
        ConfigError: a reward or loss stopped being finite, or memory ran out (``derl.training.faults``): the
            keys to change, the last checkpoint (if any) the iteration before.
    """
    factory = env_factory(cfg.world, source)
    info = RankInfo.from_environ()
    if resume and (done := finished_result(out_dir, max_iterations(cfg.PPO, info.world_size))) is not None:
        return done
    device = learner_device(cfg.DEVICE, info.local_rank, info.world_size)
    out_dir.mkdir(parents=True, exist_ok=True)
    confine_writes(out_dir)  # a folder of it swapped for a link while it trains is refused, never written through
    with ProcessGroup(device, info) as comm:
        own: list[Callback] = []
        if comm.is_main:
            atomic_write_text(out_dir / "config.yaml", dump_config(cfg))
            write_json(out_dir / RUN_FILE, source)
            if progress:
                own.append(ProgressBar(max_iterations(cfg.PPO, comm.world_size)))
            if cfg.TENSORBOARD.ENABLED:
                own.append(TensorBoard(out_dir / TENSORBOARD_DIR))
        try:
            with counted_warnings(f"training {out_dir}"), config_faults(cfg.world, cfg.PPO):
                result = train(
                    cfg.trainer,
                    factory,
                    seed=cfg.RNG_SEED,
                    checkpoint_path=out_dir / CHECKPOINT_FILE,
                    metrics_path=out_dir / METRICS_LINES_FILE,
                    resume=resume,
                    callbacks=[FiniteTraining(cfg.world), *callbacks, *own],
                    comm=comm,
                )
        finally:
            for callback in own:
                callback.close()
        if comm.is_main and result.completed:
            write_json(out_dir / FINAL_METRICS_FILE, dataclasses.asdict(result))
    return result


def evaluate(world: WorldCfg, device: str, checkpoint: Path, source: dict[str, str] | None, episodes: int,
             seed: int) -> dict:
    """Replays the policy deterministically (mean actions) for ``episodes`` episodes in ``world``.

    ``device`` is the ``DEVICE`` a training would learn on (an env that simulates on a device, ``SIM.BACKEND
    warp``, runs there). ``source`` defaults to the ``run.json`` next to the checkpoint. Returns the mean return,
    each episode's return, and the means of the ``__reward__*``/``x_pos``/``metric`` fields.
    """
    if source is None:
        source = saved_source(checkpoint.parent)
    policy = load_policy(checkpoint)
    # one env, as the trainer builds them: on the device this process would learn on, if it simulates on one
    env_on = "cpu" if world.SIM.BACKEND == "mujoco" else learner_device(device, 0, 1)
    envs = env_factory(world, source)(1, 0, env_on)
    stats, finished = EpisodeStatistics(1, env_device(envs)), []
    try:
        for k in range(episodes):
            obs, _ = envs.reset(seed=seed + k)
            stats.restart()
            ended: list = []
            while not ended:
                action = policy.act(obs, deterministic=True, action_space=envs.single_action_space)
                obs, reward, terminated, truncated, infos = envs.step(action)
                done = terminated | truncated
                stats.add(reward, done, vector_step_values(infos, done))
                ended = stats.finished()
            finished += ended
    finally:
        envs.close()
    return {
        **mean_fields(finished),
        "returns": [ep["return"] for ep in finished],
        "lengths": [int(ep["length"]) for ep in finished],
        "mean_length": float(np.mean([ep["length"] for ep in finished])),
    }
