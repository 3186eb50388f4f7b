"""Data-parallel PPO on the CPU: two real ranks (spawned processes, gloo), tiny nets and envs.

One spawn runs every learner-level scenario (the start-up of two torch processes is the cost);
the tests then compare its results with single-process references computed here.
"""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp

from derl.checked_config import load_config
from derl.ppo import StopWhen, train
from derl.ppo.distributed import Comm, ProcessGroup, RankInfo, merge_statistics
from derl.ppo.learner import Learner, normalize_advantages
from derl.ppo.losses import gaussian_log_prob
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import RunningMeanStd
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Rollout
from derl.ppo.trainer import learning_rate, max_iterations
from tests.ppo.test_ppo_collector import CountingEnv, vec

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2
T, N, D, A = 4, 3, 3, 2  # rollout steps, envs per rank, observation size, action size
LAYOUT = ObsLayout(("proprioceptive",), (D,), False)


def _cfg(**overrides):
    keys = {"PPO.NUM_ENVS": N, "PPO.TIMESTEPS": T, "PPO.EPOCHS": 1, "PPO.BATCH_SIZE": T * N,
            "MODEL.PRO_HIDDEN_DIMS": [8, 8], "PPO.MAX_STATE_ACTION_PAIRS": 10 * T * N}
    return load_config(None, {**keys, **overrides})


def _model() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(LAYOUT, A, hidden=(8, 8))


def _rollout(model: ActorCritic, envs: range, kl_offset: float = 0.0) -> Rollout:
    """A rollout whose env ``e`` is drawn from ``default_rng(e)``; log-probs and values from
    ``model`` itself (plus ``kl_offset`` on the log-probs: the approximate KL of a fresh update)."""
    rollout = Rollout.allocate(T, len(envs), D, A)
    for column, e in enumerate(envs):
        rng = np.random.default_rng(e)
        rollout.obs[:, column] = rng.normal(size=(T, D))
        rollout.actions[:, column] = rng.normal(size=(T, A))
        rollout.rewards[:, column] = rng.normal(size=T)
        rollout.terminated[:, column] = rng.random(T) < 0.2
        rollout.bootstrap_value[column] = rng.normal()
    with torch.no_grad():
        obs = torch.from_numpy(rollout.obs.reshape(-1, D))
        mean, value = model(obs)
        log_prob = gaussian_log_prob(torch.from_numpy(rollout.actions.reshape(-1, A)), mean, model.log_std)
    rollout.log_probs[:] = log_prob.numpy().reshape(T, len(envs)) + kl_offset
    rollout.values[:] = value.numpy().reshape(T, len(envs))
    return rollout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _join(rank: int, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)


def _learner_scenarios(rank: int, port: int, out_dir: str) -> None:
    _join(rank, port)
    envs = range(rank * N, (rank + 1) * N)
    results = {}
    with ProcessGroup(torch.device("cpu")) as comm:
        # One update on a whole batch: the gradient of the union of both ranks' rows.
        model = _model()
        learner = Learner(model, _cfg().PPO, comm)
        results["one_update_stats"] = learner.update(learner.batch(_rollout(model, envs)))
        results["one_update"] = learner.optimizer.params.clone()
        # Many all-reduces in a row: every call averages its own values.
        results["means"] = [comm.mean_(torch.full((5,), float(10 * k + rank))).tolist() for k in range(300)]
        # Several epochs of small minibatches on different data: the weights stay identical.
        model = _model()
        learner = Learner(model, _cfg(**{"PPO.EPOCHS": 3, "PPO.BATCH_SIZE": 4}).PPO, comm)
        for _ in range(2):
            learner.update(learner.batch(_rollout(model, envs)))
        results["several_updates"] = learner.optimizer.params.clone()
        # Rank 0's KL (1.0) is above the limit 0.2, rank 1's (0.0) is not: the mean (0.5) stops both.
        model = _model()
        learner = Learner(model, _cfg().PPO, comm)
        before = learner.optimizer.params.clone()
        stats = learner.update(learner.batch(_rollout(model, envs, kl_offset=1.0 if rank == 0 else 0.0)))
        results["kl_stats"] = stats
        results["kl_params_unchanged"] = bool(torch.equal(before, learner.optimizer.params))
        # Normaliser statistics: a shared base, then each rank's own batches.
        rms = RunningMeanStd((D,))
        rms.update(np.random.default_rng(100).normal(2.0, 3.0, size=(5, D)))
        base = rms.state_dict()
        for batch in _rank_batches(rank):
            rms.update(batch)
        results["merged"] = merge_statistics(rms.state_dict(), base, comm)
        # Advantages normalised over both ranks.
        results["advantages"] = normalize_advantages(_rank_batches(rank)[0][:, 0].astype(np.float32), comm)
        results["stop_any"] = comm.any(rank == 1)
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


def _rank_batches(rank: int) -> list[np.ndarray]:
    rng = np.random.default_rng(200 + rank)
    return [rng.normal(rank, 1.0 + rank, size=(n, D)) for n in (7, 1, 12)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    tmp.spawn(_learner_scenarios, args=(_free_port(), str(out)), nprocs=WORLD)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def test_parameters_stay_identical_on_both_ranks(two_ranks):
    first, second = two_ranks
    for key in ("one_update", "several_updates"):
        assert torch.equal(first[key], second[key]), key
    assert not torch.equal(first["one_update"], Learner(_model(), _cfg().PPO, Comm()).optimizer.params)


def test_one_update_on_two_ranks_equals_one_process_on_the_concatenated_batch(two_ranks):
    model = _model()
    cfg = _cfg(**{"PPO.BATCH_SIZE": WORLD * T * N})
    learner = Learner(model, cfg.PPO, Comm())
    stats = learner.update(learner.batch(_rollout(model, range(WORLD * N))))
    torch.testing.assert_close(two_ranks[0]["one_update"], learner.optimizer.params, rtol=1e-5, atol=1e-6)
    # Each rank's loss is the mean over its rows; their mean is the mean over all rows.
    assert two_ranks[0]["one_update_stats"]["loss"] == pytest.approx(stats["loss"], rel=1e-5, abs=1e-6)


def test_a_kl_stop_on_one_rank_stops_both(two_ranks):
    for result in two_ranks:
        assert result["kl_stats"]["kl_early_stop"] == 1.0
        assert result["kl_params_unchanged"]  # stopped before the step, on both ranks
        assert result["kl_stats"]["approx_kl"] == pytest.approx(0.5, abs=1e-5)  # (1.0 + 0.0) / 2
    assert all(result["stop_any"] for result in two_ranks)  # a stop request on rank 1 reaches rank 0


def test_process_group_mean_over_many_calls(two_ranks):
    expected = [[10 * k + 0.5] * 5 for k in range(300)]  # the mean of 10k + 0 and 10k + 1
    assert two_ranks[0]["means"] == expected and two_ranks[1]["means"] == expected


def test_merged_normaliser_statistics_equal_the_pooled_data(two_ranks):
    pooled = RunningMeanStd((D,))
    pooled.update(np.random.default_rng(100).normal(2.0, 3.0, size=(5, D)))
    pooled.update(np.concatenate([b for rank in range(WORLD) for b in _rank_batches(rank)]))
    for result in two_ranks:
        merged = result["merged"]
        np.testing.assert_allclose(merged["mean"], pooled.mean, rtol=1e-10)
        np.testing.assert_allclose(merged["var"], pooled.var, rtol=1e-10)
        assert merged["count"] == pytest.approx(pooled.count)
    np.testing.assert_array_equal(two_ranks[0]["merged"]["var"], two_ranks[1]["merged"]["var"])


def test_advantages_are_normalised_over_the_global_batch(two_ranks):
    both = np.concatenate([_rank_batches(rank)[0][:, 0] for rank in range(WORLD)]).astype(np.float32)
    expected = normalize_advantages(both, Comm())
    np.testing.assert_allclose(np.concatenate([r["advantages"] for r in two_ranks]), expected, rtol=1e-6)
    np.testing.assert_allclose(expected, (both - both.mean()) / (both.std() + 1e-5), rtol=1e-5, atol=1e-6)


def test_iterations_and_learning_rate_scale_with_the_ranks():
    cfg = _cfg(**{"PPO.MAX_STATE_ACTION_PAIRS": 10 * T * N, "PPO.LINEAR_LR_DECAY": False})
    assert [max_iterations(cfg.PPO, w) for w in (1, 2, 3, 20)] == [10, 5, 3, 1]
    assert learning_rate(cfg.PPO, 0, 4) == cfg.PPO.BASE_LR
    assert learning_rate(_cfg(**{"PPO.LR_SCALING": "sqrt", "PPO.LINEAR_LR_DECAY": False}).PPO, 0, 4) == pytest.approx(
        2 * cfg.PPO.BASE_LR)
    assert learning_rate(_cfg(**{"PPO.LR_SCALING": "linear"}).PPO, 1, 2) == pytest.approx(2 * 3e-4 * (1 - 1 / 5))
    with pytest.raises(ValueError, match="PPO.LR_SCALING"):
        learning_rate(_cfg(**{"PPO.LR_SCALING": "cubic"}).PPO, 0, 2)


def test_rank_variables():
    assert RankInfo.from_environ({}) == RankInfo(0, 1, 0)
    assert RankInfo.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == RankInfo(3, 4, 1)
    with pytest.raises(ValueError, match="bad torchrun variables"):
        RankInfo.from_environ({"RANK": "4", "WORLD_SIZE": "4"})


# ----------------------------------------------------------------------------- whole runs
def _counting_env(index):
    return CountingEnv(index, limit=5, fall_above=math.inf)


def _train_rank(rank: int, port: int, out_dir: str, stop_after: int, resume: bool) -> None:
    _join(rank, port)
    cfg = _cfg(**{"PPO.MAX_STATE_ACTION_PAIRS": 4 * WORLD * T * N, "CHECKPOINT_PERIOD": 1,
                  "PPO.BATCH_SIZE": 4, "PPO.EPOCHS": 2})
    calls = iter(range(100))
    # Only rank 1 asks to stop: the request is joint.
    stop = StopWhen(lambda: rank == 1 and next(calls) >= stop_after)
    with ProcessGroup(torch.device("cpu")) as comm:
        result = train(cfg.trainer, vec(_counting_env), seed=0, checkpoint_path=os.path.join(out_dir, "model.pt"),
                       metrics_path=os.path.join(out_dir, "metrics.jsonl"), resume=resume, callbacks=[stop],
                       comm=comm)
    with open(os.path.join(out_dir, f"result{rank}.json"), "w") as f:
        json.dump({"completed": result.completed, "iterations": result.iterations,
                   "env_steps": result.env_steps, "summary": result.summary}, f)


def test_a_two_rank_run_stops_jointly_and_resumes_from_its_checkpoint(tmp_path):
    tmp.spawn(_train_rank, args=(_free_port(), str(tmp_path), 2, False), nprocs=WORLD)
    first = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(WORLD)]
    assert [(r["completed"], r["iterations"], r["env_steps"]) for r in first] == [(False, 2, 2 * WORLD * T * N)] * 2
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["world_size"] == WORLD and len(state["action_rngs"]) == WORLD
    assert len(set(state["action_rngs"])) == WORLD  # each rank its own action noise

    tmp.spawn(_train_rank, args=(_free_port(), str(tmp_path), 100, True), nprocs=WORLD)
    second = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(WORLD)]
    assert [(r["completed"], r["iterations"], r["env_steps"]) for r in second] == [(True, 4, 4 * WORLD * T * N)] * 2
    assert second[0]["summary"] == second[1]["summary"]  # the episodes of both ranks, on both
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert [r["env_steps"] for r in records] == [WORLD * T * N * i for i in (1, 2, 3, 4)]
    # Envs 0-2 (rank 0) earn 1-3 per step, envs 3-5 (rank 1) earn 4-6: both ranks' episodes count.
    assert {ep["return"] for ep in state["episode_log"]["recent"]} >= {5.0, 30.0}


def _train_ddp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "tools" / "train_ddp.sh"), *args], capture_output=True, text=True,
                          timeout=300, check=False, env=dict(os.environ, PYTHON=sys.executable))


@pytest.mark.slow
def test_train_ddp_script_runs_two_cpu_ranks_and_resumes(tmp_path):
    tiny = ["--env-id", "Pendulum-v1", "--out", str(tmp_path), "--quiet", "PPO.NUM_ENVS", "2",
            "PPO.TIMESTEPS", "16", "PPO.BATCH_SIZE", "16"]
    first = _train_ddp("--nproc", "2", *tiny, "MAX_STATE_ACTION_PAIRS", "128")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.strip().splitlines()[-1])["env_steps"] == 128  # printed once, by rank 0
    resumed = _train_ddp("--nproc", "2", *tiny, "--resume", "MAX_STATE_ACTION_PAIRS", "256")
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads((tmp_path / "metrics.json").read_text())
    assert (final["iterations"], final["env_steps"], final["world_size"], final["completed"]) == (4, 256, 2, True)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [64, 128, 192, 256]


def test_train_ddp_script_arguments():
    dry = _train_ddp("--nproc", "3", "--dry-run", "--env-id", "Pendulum-v1", "PPO.NUM_ENVS", "4")
    assert dry.returncode == 0, dry.stderr
    assert "--standalone --nproc_per_node 3" in dry.stdout  # CPU ranks, whatever a --cfg file's DEVICE says:
    assert "train_ppo.py DEVICE cpu --env-id Pendulum-v1" in dry.stdout
    multi = _train_ddp("--nproc", "1", "--nnodes", "2", "--node-rank", "1", "--master", "h:29500", "--dry-run")
    assert "--nnodes 2 --node_rank 1 --master_addr h --master_port 29500" in multi.stdout
    bad = _train_ddp("--nnodes", "2", "--nproc", "1")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --nnodes 2 needs --master HOST:PORT"
    if not torch.cuda.is_available():
        no_gpu = _train_ddp("--gpus", "1", "--dry-run")
        assert no_gpu.returncode == 2 and "0 GPU(s) visible" in no_gpu.stderr


def test_the_learner_package_knows_no_unimals():
    # derl.ppo trains any Gymnasium env: the unimal wiring lives in derl.training.
    code = ("import sys, derl.ppo, derl.ppo.trainer, derl.ppo.distributed, derl.ppo.policy; "
            "print(sorted(m for m in sys.modules if m.startswith(('derl.envs', 'derl.morphology', 'derl.training'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    for path in (ROOT / "derl" / "ppo").glob("*.py"):
        text = path.read_text()
        assert "derl.envs" not in text and "derl.morphology" not in text, path.name
