"""The float32 update's minibatch step with the network's backward pass written out by hand.

Autograd differentiates ``losses.minibatch_loss`` by recording every small tensor op of the
forward pass and replaying them through its engine; at DERL's minibatch of 512 rows and [64, 64]
layers the recording, the engine and the per-op dispatch cost more than the matrix products. For
``networks.ActorCritic`` the chain rule is short: the forward pass keeps every tanh layer's
output, the loss's derivatives with respect to the action means, the values and ``log_std`` are
closed-form (``_head_gradients``; the loss itself is ``losses.head_loss``, its one definition),
and each layer then takes its tanh derivative, two products and a sum backwards. Gradients are
written straight into the parameters' ``.grad`` (views into ``FlatAdam.grads``), replacing what
was there. ``_head_gradients`` is kept beside autograd on ``head_loss`` because the engine's walk
of that small graph costs more than the closed form (docs/benchmarks.md).

A wide observation key that is mostly zeros (VT's 1,410-value height map: flat ground reads 0,
and a rollout's minibatch had nonzeros in about a quarter of its rows and of its columns) costs
the most for the least: its first layers' products (forward, and the weight gradient backward,
for the actor and the critic) were most of the update. A zero row or column adds exact zeros to
those products, so ``_Nonzero`` keeps only the rows and columns that hold a nonzero: rows left
out get the bias, columns left out a zero weight gradient. The values are the dense products'
with the zero terms left out of the sums (float32 rounding apart); a key narrower than
``WIDE_KEY`` or dense enough is computed densely, as before.

Only ``derl.ppo.fastpath`` hands this out, after checking it against autograd on
``losses.minibatch_loss`` for the model and loss at hand (on a dense and a mostly-zero probe
batch); the tests check it there too, clip ties included (``tests/ppo/test_ppo_gradients.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from derl.ppo.losses import LOG_SQRT_2PI, LossCoefs, LossTerms, Minibatch, head_loss
from derl.ppo.networks import ActorCritic, Encoder, tanh_

Activations = list[torch.Tensor]  # a tanh MLP's input, then every layer's output

# Keys at least this wide are checked for zero rows and columns: the check (four reductions over the
# key, ~0.3 ms on VT's [512, 1,410]) is a fraction of the dense products it can spare there, while on
# a narrow key (FT's 46 proprioceptive values) the products cost less than the check and its gathers.
# The collector's first layer (``acting._first_layer``) uses the same bounds: on a call's [32, 1,410]
# the check costs ~15 us against the dense product's ~140.
WIDE_KEY = 256
# Compacted only when the kept block is at most this share of the key's input: a block nearly as
# large as the input would save little and still pay the gathers and the gradient's scatter.
MOSTLY_ZERO = 0.5


class _Nonzero:
    """The rows and columns of a minibatch's observation key that hold a nonzero, and the key on them.

    ``of(x)`` returns one where that block is at most ``MOSTLY_ZERO`` of a ``WIDE_KEY``-wide ``x``
    on the CPU, else None (the dense products). A NaN counts as nonzero: it is kept and propagates
    as in autograd. On a GPU the dense products take microseconds and finding the block would wait
    for the device twice per key (``nonzero``): dense there.
    """

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor, x: torch.Tensor):
        self.rows, self.cols = rows, cols
        self.block = x.index_select(0, rows).index_select(1, cols)

    @classmethod
    def of(cls, x: torch.Tensor) -> _Nonzero | None:
        n, width = x.shape
        if width < WIDE_KEY or n == 0 or x.device.type != "cpu":
            return None
        # Largest and smallest value per row and column: no [n, width] temporary, as ``x.abs()`` wrote.
        rows = ((x.amax(1) != 0) | (x.amin(1) != 0)).nonzero().squeeze(1)
        cols = ((x.amax(0) != 0) | (x.amin(0) != 0)).nonzero().squeeze(1)
        if rows.numel() * cols.numel() > MOSTLY_ZERO * n * width:
            return None
        return cls(rows, cols, x)

    def linear(self, layer: nn.Linear, n: int) -> torch.Tensor:
        """``F.linear`` of the whole key: the bias on the zero rows, the block's product on the others."""
        out = layer.bias.expand(n, -1).contiguous()
        weight = layer.weight.index_select(1, self.cols)
        return out.index_copy_(0, self.rows, torch.addmm(layer.bias, self.block, weight.t()))

    def weight_grad(self, grad: torch.Tensor, out: torch.Tensor) -> None:
        """``grad.t() @ x`` into ``out``: the zero columns' gradient is zero, the zero rows add nothing."""
        out.zero_().index_copy_(1, self.cols, torch.mm(grad.index_select(0, self.rows).t(), self.block))


def _tanh_mlp_activations(layers: nn.ModuleList, x: torch.Tensor, nonzero: _Nonzero | None = None) -> Activations:
    """``networks.tanh_mlp``, keeping the input and every layer's output; the first layer on
    ``nonzero``'s block of ``x`` where given."""
    activations = [x]
    for i, layer in enumerate(layers):
        if i == 0 and nonzero is not None:
            pre = nonzero.linear(layer, x.shape[0])
        else:
            pre = F.linear(activations[-1], layer.weight, layer.bias)
        activations.append(tanh_(pre))
    return activations


def _mlp_backward(layers: nn.ModuleList, activations: Activations, grad: torch.Tensor,
                  input_grad: bool, nonzero: _Nonzero | None = None) -> torch.Tensor | None:
    """Writes the layers' gradients given the gradient of their output; returns that of their
    input when ``input_grad`` (tanh' = 1 - tanh²). The first layer's weight gradient from
    ``nonzero``'s block where given."""
    for i in reversed(range(len(layers))):
        weight, bias, out = layers[i].weight, layers[i].bias, activations[i + 1]
        grad = torch.ops.aten.tanh_backward(grad, out)  # grad * (1 - out²): that of the pre-activation
        if i == 0 and nonzero is not None:
            nonzero.weight_grad(grad, weight.grad)
        else:
            torch.mm(grad.t(), activations[i], out=weight.grad)
        torch.sum(grad, 0, out=bias.grad)
        grad = torch.mm(grad, weight) if i > 0 or input_grad else None
    return grad


class _EncoderPass:
    """An encoder's forward pass (``networks.Encoder.forward``), kept for its backward pass.

    ``nonzero``: per key, its ``_Nonzero`` block or None (found once, shared by actor and critic).
    """

    def __init__(self, encoder: Encoder, obs: torch.Tensor, nonzero: list[_Nonzero | None]):
        self.encoder, self.nonzero = encoder, nonzero
        self.per_key = [_tanh_mlp_activations(mlp, obs[:, part], block)
                        for mlp, part, block in zip(encoder.per_key, encoder.slices, nonzero, strict=True)]
        self.combined = None
        if encoder.combine is not None:
            features = torch.cat([key[-1] for key in self.per_key], dim=-1)
            self.combined = _tanh_mlp_activations(encoder.combine, features)

    @property
    def features(self) -> torch.Tensor:
        return (self.combined or self.per_key[0])[-1]

    def backward(self, grad: torch.Tensor) -> None:
        encoder = self.encoder
        grads = [grad]
        if self.combined is not None:
            grad = _mlp_backward(encoder.combine, self.combined, grad, input_grad=True)
            grads = grad.split([a[-1].shape[1] for a in self.per_key], dim=1)
        for mlp, activations, part_grad, block in zip(encoder.per_key, self.per_key, grads, self.nonzero,
                                                      strict=True):
            _mlp_backward(mlp, activations, part_grad, input_grad=False, nonzero=block)


def _head_gradients(mean: torch.Tensor, value: torch.Tensor, log_std: torch.Tensor, batch: Minibatch,
                    coefs: LossCoefs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of ``losses.head_loss``'s total with respect to ``mean`` [n, A], ``value`` [n]
    and ``log_std`` [A], in closed form.

    With ``z = (a - mean) / std`` and ``log_prob = sum_j(-z_j²/2 - log_std_j) - A log sqrt(2 pi)``:
    ``d log_prob / d mean = z / std`` and ``d log_prob / d log_std = z² - 1``. The surrogate
    ``min(r A, clip(r) A)`` with ``r = exp(log_prob - old)`` has ``d/d log_prob = r A`` where its
    unclipped term is the minimum, else 0. The value term ``max((V - R)², (V_clip - R)²) / 2`` has
    ``d/dV = V - R`` where its unclipped term is the maximum, ``V_clip - R`` where the clipped one is
    and the clamp is inactive, else 0. The entropy bonus has ``d/d log_std = 1/A`` per dimension.
    Where the two terms of a ``min``/``max`` tie, autograd splits the gradient between them and both
    halves are the same number: this is autograd's gradient there too.
    """
    n, action_dim = mean.shape
    clip_eps, value_coef, entropy_coef, clip_value = coefs
    inv_std = torch.exp(-log_std)
    z = (batch.actions - mean).mul_(inv_std)
    z_squared = z * z
    log_prob = z_squared.sum(1).mul_(-0.5).sub_(log_std.sum() + LOG_SQRT_2PI * action_dim)
    ratio = torch.exp(log_prob - batch.log_probs)
    unclipped = ratio * batch.advantages
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps).mul_(batch.advantages)
    grad_log_prob = torch.where(unclipped <= clipped, unclipped, 0.0).mul_(-1.0 / n)

    grad_value = value - batch.returns
    if clip_value:
        change = value - batch.values
        clipped_error = (batch.values + change.clamp(-clip_eps, clip_eps)).sub_(batch.returns)
        grad_value = torch.where(grad_value * grad_value >= clipped_error * clipped_error, grad_value,
                                 torch.where(change.abs() <= clip_eps, clipped_error, 0.0))
    grad_value = grad_value.mul_(value_coef / n)

    grad_mean = (grad_log_prob.unsqueeze(1) * z).mul_(inv_std)
    grad_log_std = torch.mv(z_squared.t(), grad_log_prob).sub_(grad_log_prob.sum() + entropy_coef / action_dim)
    return grad_mean, grad_value, grad_log_std


@torch.no_grad()
def loss_and_gradient(model: ActorCritic, batch: Minibatch, coefs: LossCoefs) -> LossTerms:
    """The PPO loss terms of ``model`` on ``batch``; its gradient is written into every ``param.grad``
    (which must exist: ``FlatAdam`` creates them)."""
    nonzero = [_Nonzero.of(batch.obs[:, part]) for part in model.actor_encoder.slices]
    actor = _EncoderPass(model.actor_encoder, batch.obs, nonzero)
    critic = _EncoderPass(model.critic_encoder, batch.obs, nonzero)
    mean_head, value_head = model.mean_head, model.value_head
    mean = torch.addmm(mean_head.bias, actor.features, mean_head.weight.t())
    value = torch.addmm(value_head.bias, critic.features, value_head.weight.t()).squeeze(1)
    terms = head_loss(mean, value, model.log_std, batch, coefs)
    grad_mean, grad_value, grad_log_std = _head_gradients(mean, value, model.log_std, batch, coefs)

    model.log_std.grad.copy_(grad_log_std)
    torch.mm(grad_mean.t(), actor.features, out=mean_head.weight.grad)
    torch.sum(grad_mean, 0, out=mean_head.bias.grad)
    actor.backward(torch.mm(grad_mean, mean_head.weight))
    torch.mm(grad_value.unsqueeze(0), critic.features, out=value_head.weight.grad)
    value_head.bias.grad.copy_(grad_value.sum())
    critic.backward(grad_value.unsqueeze(1) * value_head.weight)
    return terms
