"""PPO on a device env (``derl.ppo.rollout``'s collector on tensors): trains end to end, checkpoints
and resumes, never reads a value back per step, and computes what the NumPy path computes (GAE,
advantage normalisation, normalisers, episode statistics) on the same data."""

import json
import os

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp

from derl.checked_config import load_config
from derl.ppo import OnIteration, load_policy, train
from derl.ppo.acting import TorchActor, TorchNoise
from derl.ppo.checkpoint import load_checkpoint
from derl.ppo.distributed import Comm, ProcessGroup
from derl.ppo.episode_stats import EpisodeStatistics, vector_step_values
from derl.ppo.learner import normalize_advantages
from derl.ppo.losses import compute_gae
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.rollout import Collector, Rollout
from derl.ppo.trainer import PPO
from tests.device_point_env import PointMassFactory, PointMassVectorEnv
from tests.ppo.test_ppo_distributed import _free_port, _join

NUM_ENVS, STEPS = 8, 32


def _cfg(iters: int, **overrides):
    keys = {"PPO.NUM_ENVS": NUM_ENVS, "PPO.TIMESTEPS": STEPS, "PPO.BATCH_SIZE": 64, "PPO.BASE_LR": 3e-3,
            "PPO.LINEAR_LR_DECAY": False, "PPO.MAX_STATE_ACTION_PAIRS": NUM_ENVS * STEPS * iters}
    return load_config(None, {**keys, **overrides})


def test_the_device_path_learns_to_move_right():
    # Pushing right every step earns about 15 per 20-step episode, a random policy about 0.
    # 15 iterations (~1 s) reach 12-15 for seed 0; the test asks for 10 and a gain of 5.
    curve = []
    result = train(_cfg(15).trainer, PointMassFactory(), seed=0,
                   callbacks=[OnIteration(lambda r: curve.append(r["return"]))])
    assert result.completed and result.iterations == 15 and result.env_steps == 15 * NUM_ENVS * STEPS
    assert curve[-1] > 10.0 and curve[-1] > curve[0] + 5.0
    assert result.summary["x_pos"] == pytest.approx(result.summary["return"], abs=0.2)  # x_pos: from final_info


def test_a_device_run_checkpoints_in_the_usual_format_and_resumes(tmp_path):
    checkpoint, metrics = tmp_path / "model.pt", tmp_path / "metrics.jsonl"
    train(_cfg(2, CHECKPOINT_PERIOD=1).trainer, PointMassFactory(), seed=0, checkpoint_path=checkpoint,
          metrics_path=metrics)
    state = torch.load(checkpoint, weights_only=True)
    obs_norm, ret_norm = state["obs_norm"], state["ret_norm"]  # as the NumPy path saves them:
    assert obs_norm["mean"].dtype == obs_norm["var"].dtype == torch.float64 and obs_norm["mean"].shape == (3,)
    assert all(isinstance(value, float) for value in (ret_norm["mean"], ret_norm["var"], ret_norm["count"]))
    assert "torch_generator" in json.loads(state["action_rngs"][0])

    ppo = PPO(_cfg(4).trainer, PointMassFactory(), seed=0)
    ppo.load_state_dict(load_checkpoint(checkpoint))
    assert ppo.collector.rng_state() == state["action_rngs"][0]
    np.testing.assert_array_equal(ppo.obs_norm.state_dict()["var"], state["obs_norm"]["var"].numpy())
    ppo.pool.close()
    result = train(_cfg(4, CHECKPOINT_PERIOD=1).trainer, PointMassFactory(), seed=0, checkpoint_path=checkpoint,
                   metrics_path=metrics, resume=True)
    assert (result.iterations, result.env_steps) == (4, 4 * NUM_ENVS * STEPS)
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]
    policy = load_policy(checkpoint)  # the replay side reads it into NumPy normalisers
    obs = {"proprioceptive": np.zeros((2, 3), np.float32), "goal": np.ones((2, 1), np.float32)}
    assert policy.act(obs).shape == (2, 1)


def test_the_trainer_decides_the_device_once_and_hands_it_to_the_env_factory(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")  # read by nobody: the trainer's comm says which rank it is
    handed = []

    def factory(num_envs, first_index, device):
        handed.append(device)
        return PointMassVectorEnv(num_envs, first_index, device)

    ppo = PPO(_cfg(1).trainer, factory, seed=0)
    ppo.pool.close()
    assert handed == [ppo.device] == [torch.device("cpu")] and ppo.pool.device == ppo.device
    assert isinstance(ppo.collector.policy, TorchActor) and ppo.rollout.obs.device == ppo.device


def test_an_env_on_another_device_than_the_learner_is_refused():
    with pytest.raises(ValueError, match="^the vector env's tensors are on meta but the learner is on cpu"):
        train(_cfg(1).trainer, PointMassFactory(device="meta"), seed=0)


def test_collect_never_reads_a_value_back_per_step(monkeypatch):
    # On the meta device a tensor has no data: .item(), bool(), .cpu(), .numpy(), .tolist(), boolean
    # indexing or nonzero() all raise, as would any step that waits for a GPU. Only the rollout's
    # end reads the finished episodes back (EpisodeStatistics.finished), stubbed here.
    meta = torch.device("meta")
    envs = PointMassVectorEnv(4, device="meta", limit=10)  # episodes end within the rollout
    layout = ObsLayout.from_space(envs.single_observation_space)
    model = ActorCritic(layout, 1, [8], [8]).to(meta)
    # meta has no generator of its own; a CPU one draws meta tensors too
    noise = TorchNoise(0, meta, generator=torch.Generator())
    finished = []
    monkeypatch.setattr(EpisodeStatistics, "finished_by_step", lambda stats: finished.append(len(stats._ends)) or [])
    start, stop = layout.normalized_columns()
    collector = Collector(envs, 0, ObsNormalizer(start, stop, meta), ReturnNormalizer(4, 0.99, meta), TorchActor(model),
                          noise)
    rollout = Rollout.allocate(25, 4, layout.size, 1, device=meta)
    collector.reset(0)
    assert collector.collect(rollout) == [] and finished == [25]
    assert len(envs.actions_seen) == 25 and all(a.device == meta for a in envs.actions_seen)
    assert rollout.final_values.device == meta and collector.ret_norm.returns.device == meta


# ----------------------------------------------------------------------------- same numbers as NumPy
def _tensors(*arrays: np.ndarray) -> list[torch.Tensor]:
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def test_gae_and_advantage_normalisation_on_tensors_equal_numpy():
    rng = np.random.default_rng(0)
    t, b = 40, 6
    rewards, values, final_values = (rng.normal(size=(t, b)).astype(np.float32) for _ in range(3))
    bootstrap = rng.normal(size=b).astype(np.float32)
    terminated, truncated = rng.random((t, b)) < 0.1, rng.random((t, b)) < 0.1
    arrays = (rewards, values, bootstrap, terminated, truncated, final_values)
    expected = compute_gae(*arrays, 0.99, 0.95)
    got = compute_gae(*_tensors(*arrays), 0.99, 0.95)
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == torch.float32
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-6, atol=1e-6)
    advantages = expected[0]
    np.testing.assert_allclose(normalize_advantages(torch.from_numpy(advantages), Comm()).numpy(),
                               normalize_advantages(advantages, Comm()), rtol=1e-6, atol=1e-6)


def test_normalisers_on_tensors_equal_numpy_and_share_the_state_format():
    rng = np.random.default_rng(1)
    obs_np, obs_t = ObsNormalizer(1, 4), ObsNormalizer(1, 4, torch.device("cpu"))
    ret_np, ret_t = ReturnNormalizer(5, 0.9), ReturnNormalizer(5, 0.9, torch.device("cpu"))
    for _ in range(20):
        batch = rng.normal(2.0, 3.0, size=(5, 6)).astype(np.float32)
        rewards, dones = rng.normal(size=5).astype(np.float32), rng.random(5) < 0.3
        obs_np.update(batch)
        obs_t.update(torch.from_numpy(batch))
        np.testing.assert_allclose(obs_t.normalize(torch.from_numpy(batch)).numpy(), obs_np.normalize(batch),
                                   rtol=1e-6, atol=1e-6)
        scaled = ret_t.normalize(*_tensors(rewards, dones))
        assert scaled.dtype == torch.float32
        np.testing.assert_allclose(scaled.numpy(), ret_np.normalize(rewards, dones), rtol=1e-6, atol=1e-7)
    for numpy_norm, torch_norm in ((obs_np, obs_t), (ret_np, ret_t)):
        expected, got = numpy_norm.state_dict(), torch_norm.state_dict()
        assert type(got["mean"]) is type(expected["mean"]) and got["mean"].dtype == np.float64
        np.testing.assert_allclose(got["mean"], expected["mean"], rtol=1e-12)
        np.testing.assert_allclose(got["var"], expected["var"], rtol=1e-12)
        assert got["count"] == expected["count"]
    crossed = ObsNormalizer(1, 4, torch.device("cpu"))  # a NumPy state (as a checkpoint loads it) into tensors
    crossed.load_state_dict({key: torch.as_tensor(value) for key, value in obs_np.state_dict().items()})
    x = rng.normal(size=(3, 6)).astype(np.float32)
    np.testing.assert_allclose(crossed.normalize(torch.from_numpy(x)).numpy(), obs_np.normalize(x), rtol=1e-6)


def _step_infos(rng: np.random.Generator, step: int, ended: np.ndarray, on_device: bool) -> dict:
    """Gymnasium same-step infos: a summed term always, energy from step 10, x_pos (a final value)
    on some steps; the ended envs' step values in final_info (left out where none ended, for NumPy)."""
    n = len(ended)

    def part(keys: list[str], mask: np.ndarray) -> dict:
        out = {}
        for key in keys:
            out[key], out[f"_{key}"] = rng.normal(size=n), mask & (rng.random(n) < 0.8)
        return out

    keys = ["__reward__forward", *(["energy"] if step >= 10 else []), *(["x_pos"] if step % 3 else [])]
    infos = part(keys, ~ended)
    final = part(keys, ended)
    if on_device or ended.any():
        infos["final_info"], infos["_final_info"] = final, ended
    if on_device:
        infos = {k: {fk: torch.from_numpy(fv) for fk, fv in v.items()} if isinstance(v, dict) else torch.from_numpy(v)
                 for k, v in infos.items()}
    return infos


def test_device_episode_statistics_equal_numpy_ones():
    n, steps = 5, 30
    expected, device_stats, numpy_stats = [], EpisodeStatistics(n, torch.device("cpu")), EpisodeStatistics(n)
    rng = np.random.default_rng(2)
    for step in range(steps):
        rewards, ended = rng.normal(size=n).astype(np.float32), rng.random(n) < 0.15
        state = rng.bit_generator.state
        numpy_stats.add(rewards, ended, vector_step_values(_step_infos(rng, step, ended, False), ended))
        expected += numpy_stats.finished()
        rng.bit_generator.state = state  # the same infos, as tensors (final_info at every step)
        infos = _step_infos(rng, step, ended, True)
        device_stats.add(*_tensors(rewards, ended), vector_step_values(infos, torch.from_numpy(ended)))
    assert len(expected) > 10
    assert any("energy" in e for e in expected) and any("x_pos" in e for e in expected)
    for got, wanted in ((device_stats.finished(), expected), (device_stats.so_far(), numpy_stats.so_far())):
        assert [list(e) for e in got] == [list(e) for e in wanted]  # the same keys, in the same order
        for g, e in zip(got, wanted, strict=True):
            assert g == pytest.approx(e, rel=1e-12)


# ----------------------------------------------------------------------------- two ranks
def _device_rank(rank: int, port: int, out_dir: str) -> None:
    _join(rank, port)
    with ProcessGroup(torch.device("cpu")) as comm:
        advantages = torch.from_numpy(np.random.default_rng(rank).normal(size=(4, 3)).astype(np.float32))
        normalised = normalize_advantages(advantages, comm)
        result = train(_cfg(4, CHECKPOINT_PERIOD=1).trainer, PointMassFactory(), seed=0, comm=comm,
                       checkpoint_path=os.path.join(out_dir, "model.pt"))
    torch.save({"advantages": advantages, "normalised": normalised, "summary": result.summary,
                "steps": result.env_steps}, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.mark.slow  # ~5 s: two processes start
def test_two_ranks_share_a_device_run(tmp_path):
    tmp.spawn(_device_rank, args=(_free_port(), str(tmp_path)), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    pooled = normalize_advantages(torch.cat([r["advantages"] for r in ranks]), Comm())
    torch.testing.assert_close(torch.cat([r["normalised"] for r in ranks]), pooled)
    assert ranks[0]["summary"] == ranks[1]["summary"] and ranks[0]["steps"] == 4 * NUM_ENVS * STEPS
    rngs = torch.load(tmp_path / "model.pt", weights_only=True)["action_rngs"]
    assert len(set(rngs)) == 2 and all("torch_generator" in json.loads(state) for state in rngs)
