"""derl.ppo.fastpath: the fast paths serve DERL's network and nothing else; any other network
trains through the torch model and autograd, with a note saying why."""

import logging
import math

import numpy as np
import pytest
import torch
from torch import nn

from derl.checked_config import load_config
from derl.ppo import acting, fastpath, gradients, networks
from derl.ppo.acting import NumpyActorCritic, NumpyNoise, TorchActor
from derl.ppo.distributed import Comm
from derl.ppo.learner import Learner
from derl.ppo.losses import LossCoefs
from derl.ppo.networks import ActorCritic
from derl.ppo.normalize import ObsNormalizer, ReturnNormalizer
from derl.ppo.obs_layout import ObsLayout
from derl.ppo.optim import FlatAdam
from derl.ppo.rollout import Collector, Rollout, sync_vector_env
from tests.ppo.test_ppo_collector import CountingEnv

COEFS = LossCoefs(clip_eps=0.2, value_coef=0.5, entropy_coef=0.01, clip_value=True)
ONE_KEY = ObsLayout(("proprioceptive",), (5,), False)


class NormalisedActorCritic(ActorCritic):
    """A network the fast paths were not written for: LayerNorm and ReLU on the actor's features."""

    def __init__(self, layout: ObsLayout, action_dim: int):
        super().__init__(layout, action_dim, hidden=(8,), feat_hidden=(8,))
        self.norm = nn.LayerNorm(8)

    def action_mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean_head(torch.relu(self.norm(self.actor_encoder(obs))))


class _ScaledLinear(nn.Linear):
    """A layer of another kind where the encoder had an ``nn.Linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


def _notes(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "derl.ppo.fastpath"]


@pytest.mark.parametrize("layout", [ONE_KEY, ObsLayout(("goal", "hfield", "proprioceptive"), (3, 5, 7), True)])
def test_derl_network_gets_both_fast_paths(layout, caplog):
    torch.manual_seed(0)
    model = ActorCritic(layout, action_dim=4)
    FlatAdam(model, lr=1e-3, eps=1e-5)
    rng_state = torch.get_rng_state()
    assert isinstance(fastpath.actor(model), NumpyActorCritic)
    assert fastpath.loss_and_gradient(model, COEFS) is gradients.loss_and_gradient
    assert fastpath.loss_and_gradient(model, COEFS, amp=True) is None  # AMP: autograd, by choice
    assert torch.equal(torch.get_rng_state(), rng_state)  # the probes leave the training's stream alone
    assert _notes(caplog) == []


def test_a_network_the_fast_paths_do_not_know_trains_through_autograd(caplog):
    envs = sync_vector_env(CountingEnv, 2)
    layout = ObsLayout.from_space(envs.single_observation_space)
    torch.manual_seed(0)
    model = NormalisedActorCritic(layout, 1)
    cfg = load_config(None, {"PPO.NUM_ENVS": 2, "PPO.TIMESTEPS": 4, "PPO.BATCH_SIZE": 4, "PPO.EPOCHS": 2})
    with caplog.at_level(logging.WARNING):
        learner = Learner(model, cfg.PPO, Comm())
        collector = Collector(envs, 0, ObsNormalizer(*layout.normalized_columns()), ReturnNormalizer(2, 0.99),
                              *fastpath.acting(model, None, seed=0))
    notes = _notes(caplog)
    assert len(notes) == 2 and all("NormalisedActorCritic, not a derl.ppo.networks.ActorCritic" in n for n in notes)
    assert isinstance(collector.policy, TorchActor) and learner._fast_gradient is None
    try:
        rollout = Rollout.allocate(4, 2, layout.size, 1)
        collector.reset(0)
        collector.collect(rollout)
    finally:
        collector.close()
    norm_before = model.norm.weight.clone()
    stats = learner.update(learner.batch(rollout))
    assert all(math.isfinite(value) for value in stats.values())
    assert not torch.equal(model.norm.weight, norm_before)  # the layer the fast paths know nothing of learns


@pytest.mark.parametrize("change, reason", [
    (lambda model: model.double(), "parameters are torch.float64, not float32"),
    (lambda model: setattr(model, "extra", nn.Linear(2, 2)), "would ignore its parameters extra.weight, extra.bias"),
    (lambda model: setattr(model, "mean_head", nn.Sequential(nn.Linear(8, 2))), "holds a Sequential"),
    (lambda model: model.actor_encoder.per_key[0].__setitem__(0, _ScaledLinear(5, 8)), "holds a _ScaledLinear"),
])
def test_structure_the_fast_paths_do_not_read_turns_them_off(change, reason, caplog):
    model = ActorCritic(ONE_KEY, action_dim=2, hidden=(8, 8))
    change(model)
    assert isinstance(fastpath.actor(model), TorchActor)
    assert fastpath.loss_and_gradient(model, COEFS) is None
    notes = _notes(caplog)
    assert len(notes) == 2 and all(reason in note for note in notes), notes


def test_each_fast_path_is_judged_on_its_own(caplog):
    """An empty combining MLP for one key (the same network): the NumPy forward pass cannot read
    it and is off; the hand-written gradient handles it, equals autograd's, and stays on."""
    model = ActorCritic(ONE_KEY, action_dim=2, hidden=(8, 8))
    model.actor_encoder.combine = model.critic_encoder.combine = nn.ModuleList()
    assert isinstance(fastpath.actor(model), TorchActor)
    assert fastpath.loss_and_gradient(model, COEFS) is gradients.loss_and_gradient
    notes = _notes(caplog)
    assert len(notes) == 1 and "NumPy forward pass" in notes[0] and "fails on this model (IndexError" in notes[0]


def test_an_edit_to_the_network_that_the_fast_paths_do_not_follow_turns_them_off(monkeypatch, caplog):
    """networks.py changed to ReLU, the fast paths not rewritten: the probe batch tells them apart."""

    def relu_mlp(layers, x):
        for layer in layers:
            x = torch.relu(layer(x))
        return x

    monkeypatch.setattr(networks, "tanh_mlp", relu_mlp)
    model = ActorCritic(ONE_KEY, action_dim=2, hidden=(8, 8))
    assert isinstance(fastpath.actor(model), TorchActor)
    assert fastpath.loss_and_gradient(model, COEFS) is None
    notes = _notes(caplog)
    assert len(notes) == 2 and all("does not match the reference on a probe batch" in note for note in notes), notes
    assert "NumPy forward pass" in notes[0] and "hand-written gradient" in notes[1]


@pytest.mark.parametrize("fault", ["zero rows get no bias", "stale gradient on zero columns"])
def test_a_wrong_compacted_first_layer_turns_the_hand_written_gradient_off(fault, monkeypatch, caplog):
    """The probe's mostly-zero batch runs a wide key's compacted product (gradients._Nonzero): a
    fault there is caught before training, and autograd runs instead."""
    if fault == "zero rows get no bias":
        monkeypatch.setattr(gradients._Nonzero, "linear", lambda self, layer, n: torch.zeros(
            n, layer.out_features).index_copy_(0, self.rows, torch.addmm(
                layer.bias, self.block, layer.weight.index_select(1, self.cols).t())))
    else:
        monkeypatch.setattr(gradients._Nonzero, "weight_grad", lambda self, grad, out: out.index_copy_(
            1, self.cols, torch.mm(grad.index_select(0, self.rows).t(), self.block)).add_(1.0))
    layout = ObsLayout(("hfield", "proprioceptive"), (gradients.WIDE_KEY, 7), True)
    model = ActorCritic(layout, action_dim=2, hidden=(8, 8))
    assert fastpath.loss_and_gradient(model, COEFS) is None
    notes = _notes(caplog)
    assert len(notes) == 1 and "does not match the reference on a probe batch" in notes[0], notes


def test_a_wrong_compacted_first_layer_turns_the_numpy_forward_pass_off(monkeypatch, caplog):
    """The actor's probe also acts on a mostly-zero batch, through a wide key's compacted first
    layer (acting._first_layer): zero rows that miss the bias are caught, the torch model acts."""
    dense = acting._first_layer

    def no_bias_on_zero_rows(layer, x):
        weight, bias = layer
        out = dense((weight, np.zeros_like(bias)), x)
        rows = (x != 0).any(1)
        out[rows] += bias
        return out

    layout = ObsLayout(("hfield", "proprioceptive"), (gradients.WIDE_KEY, 7), True)
    model = ActorCritic(layout, action_dim=2, hidden=(8, 8))
    assert isinstance(fastpath.actor(model), NumpyActorCritic)
    monkeypatch.setattr(acting, "_first_layer", no_bias_on_zero_rows)
    assert isinstance(fastpath.actor(model), TorchActor)
    notes = _notes(caplog)
    assert len(notes) == 1 and "does not match the reference on a probe batch" in notes[0], notes


def test_torch_actor_and_numpy_actor_act_alike():
    """The collector's reference policy and its fast path draw the same noise: the same rollout."""
    torch.manual_seed(0)
    model = ActorCritic(ONE_KEY, action_dim=3)
    with torch.no_grad():
        model.log_std.uniform_(-0.5, 0.5)
    obs = torch.randn(6, 5).numpy()
    fast = NumpyActorCritic(model).sample(obs, NumpyNoise(3))
    reference = TorchActor(model).sample(obs, NumpyNoise(3))
    for got, expected in zip(fast, reference, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(TorchActor(model).value(obs), NumpyActorCritic(model).value(obs), rtol=1e-5, atol=1e-6)

