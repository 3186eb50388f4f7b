"""The learner: from a collected rollout to PPO epochs of minibatch steps (docs/guides/training.md).

Data-parallel ranks each hold their own rollout. Advantages are normalised with the mean and
standard deviation of all ranks' advantages together, and after each minibatch's backward pass
one all-reduce of the process group (``Comm.mean_``) averages the flat gradient buffer, with the
minibatch's approximate KL appended: every rank then steps with the same gradient (the gradient
of the loss on the union of the ranks' minibatches) and takes the same KL early-stop decision,
on the KL of that union.
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np
import torch
from torch import nn

from derl.ppo.config import PpoCfg
from derl.ppo.distributed import Comm
from derl.ppo.fastpath import loss_and_gradient
from derl.ppo.losses import Array, LossCoefs, LossTerms, Minibatch, compute_gae, minibatch_loss
from derl.ppo.optim import FlatAdam
from derl.ppo.rollout import Rollout

STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


def _sum_over_ranks(values: Array, comm: Comm) -> Array:
    """A small float64 vector summed over the ranks: NumPy through ``Comm.sum``, a tensor through
    an all-reduce where the tensor lies (no copy to the host)."""
    if isinstance(values, np.ndarray):
        return comm.sum(values)
    return comm.sum_(values.to(comm.device)).to(values.device)


def normalize_advantages(advantages: Array, comm: Comm) -> Array:
    """``(A - mean) / (std + 1e-5)`` with the mean and (population) std over all ranks' advantages.

    Two passes in float64 (sum, then squared deviations), so N ranks give what one process
    computes on the concatenated advantages, to float32 rounding. NumPy arrays or torch tensors
    (``array_api_compat``), one code.
    """
    xp = array_api_compat.array_namespace(advantages)
    device = array_api_compat.device(advantages)
    size = xp.asarray(float(math.prod(advantages.shape)), dtype=xp.float64, device=device)
    count, total = _sum_over_ranks(xp.stack([size, xp.sum(advantages, dtype=xp.float64)]), comm)
    mean = total / count
    centred = xp.astype(advantages, xp.float64) - mean
    (squares,) = _sum_over_ranks(xp.reshape(xp.sum(xp.square(centred)), (1,)), comm)
    return xp.astype(centred / (xp.sqrt(squares / count) + 1e-5), xp.float32)


class Learner:
    """Owns the optimiser; ``update(batch(rollout))`` runs one iteration's PPO epochs.

    ``model`` is any policy network (``forward(obs) -> (mean, value)``, ``log_std``), as
    ``derl.ppo.networks.ActorCritic``.
    """

    def __init__(self, model: nn.Module, ppo: PpoCfg, comm: Comm, amp: bool = False):
        self.model, self.ppo, self.comm, self.amp = model, ppo, comm, amp
        self.device = next(model.parameters()).device
        self.optimizer = FlatAdam(model, lr=ppo.BASE_LR, eps=ppo.EPS)
        comm.broadcast_(self.optimizer.params)  # every rank starts from rank 0's weights
        self.coefs = LossCoefs.from_ppo(ppo)
        self.kl_limit = ppo.KL_TARGET_COEF * 0.01
        self._fast_gradient = loss_and_gradient(model, self.coefs, amp)

    def batch(self, rollout: Rollout) -> Minibatch:
        """GAE over this rank's rollout, advantages normalised over all ranks, rows on the device.

        A rollout of NumPy arrays (``rollout.Rollout``) is copied to the device here; one of
        tensors already there (``derl.ppo.rollout``) is read in place.
        """
        ppo = self.ppo
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.bootstrap_value, rollout.terminated, rollout.truncated,
            rollout.final_values, ppo.GAMMA, ppo.GAE_LAMBDA,
        )
        advantages = normalize_advantages(advantages, self.comm)

        def rows(array: Array) -> torch.Tensor:
            return torch.as_tensor(array).reshape(-1, *array.shape[2:]).to(self.device)

        columns = (rollout.obs, rollout.actions, rollout.log_probs, rollout.values, returns, advantages)
        return Minibatch(*(rows(column) for column in columns))

    def update(self, batch: Minibatch) -> dict[str, float]:
        """PPO epochs over ``batch``; returns the mean loss statistics over the minibatches (and ranks).

        The last partial minibatch of an epoch is dropped. DERL's KL early stop ends the whole
        update before the step of the minibatch whose KL exceeds ``KL_TARGET_COEF * 0.01``.
        """
        ppo, total = self.ppo, batch.size
        size = min(ppo.BATCH_SIZE, total)
        sums = torch.zeros(len(STAT_NAMES), device=self.device)
        count, stopped = 0, False
        # Each minibatch gathers its rows just before it is used (VT's: 2.9 MB, then still in cache for
        # the first layers), into buffers kept for the update (docs/benchmarks.md).
        minibatch = Minibatch(*(column.new_empty((size, *column.shape[1:])) for column in batch))
        for _ in range(ppo.EPOCHS):
            # The order comes from the CPU generator, the one checkpoints keep.
            order = torch.randperm(total).to(self.device)
            for start in range(0, total - size + 1, size):
                terms = self._loss_and_gradient(batch.rows(order[start:start + size], out=minibatch))
                with torch.no_grad():
                    sums += torch.stack(terms)
                count += 1
                if self._average_gradients(terms.approx_kl) > self.kl_limit:
                    stopped = True
                    break
                self.optimizer.clip_grad_norm(ppo.MAX_GRAD_NORM)
                self.optimizer.step()
            if stopped:
                break
        means = self.comm.mean_(sums / max(count, 1)).tolist()
        stats = {name: float(value) for name, value in zip(STAT_NAMES, means, strict=True)}
        stats["kl_early_stop"] = float(stopped)
        return stats

    def _loss_and_gradient(self, minibatch: Minibatch) -> LossTerms:
        """The loss terms; the gradient is left in the parameters' ``.grad``.

        The hand-written gradient where ``derl.ppo.fastpath`` hands it out (DERL's network in
        float32: about 40% less time per minibatch on the CPU), else autograd's.
        """
        if self._fast_gradient is not None:
            return self._fast_gradient(self.model, minibatch, self.coefs)
        terms = minibatch_loss(self.model, minibatch, self.coefs, amp=self.amp)
        self.optimizer.zero_grad()
        terms.total.backward()
        return terms

    def _average_gradients(self, approx_kl: torch.Tensor) -> float:
        """Averages the gradients over the ranks, the KL with them (one all-reduce); returns the KL."""
        if self.comm.world_size == 1:
            return approx_kl.item()
        grads = self.optimizer.grads
        buffer = torch.cat([grads, approx_kl.detach().reshape(1).to(grads.dtype)])
        self.comm.mean_(buffer)
        grads.copy_(buffer[:-1])
        return buffer[-1].item()

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
