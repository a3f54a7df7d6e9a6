"""One optimiser step of a learner, the same for every loss (acme's sgd_step).

The gradient of the loss on this device's shard, summed over the learner
devices (`axis_name`); when the loss moved the PopArt statistics, the value
head and its gradient rescaled to the new statistics (rl/popart.py); then
the optimiser. The loss's entropy cost and the clip threshold the metrics
compare with are the optimiser state's injected hyperparameters
(rl/optimizers.py), so changing them mid-run does not recompile.
"""

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from rl import optimizers
from rl import popart


def make_sgd_step(loss_fn: Callable, optimizer: optax.GradientTransformation, value_head: str,
                  axis_name: Optional[str], max_grad_norm: float = float('inf'),
                  moves_statistics: bool = False) -> Callable:
  """Returns step(params, opt_state, stats, minibatch) -> (params, opt_state, aux).

  `loss_fn(params, stats, minibatch, entropy_cost)` returns (loss, aux) with
  `aux.metrics` (a dict) and, when `moves_statistics`, `aux.new_stats`: the
  statistics after the loss's PopArt step, for which the head is rescaled
  before the optimiser steps it. The loss sums (or averages) over the
  global minibatch, so its gradient is the sum of the per-device gradients.
  `aux.metrics` gains 'grad_norm' and 'grad_clipped' (1 when the clip binds;
  `max_grad_norm` is the clip of an optimiser state without one).
  """

  def step(params, opt_state, stats: popart.Stats, minibatch):
    entropy_cost = optimizers.hyperparameter(opt_state, 'entropy_cost')
    grads, aux = jax.grad(loss_fn, has_aux=True)(params, stats, minibatch, entropy_cost)
    if axis_name is not None:
      grads = jax.lax.psum(grads, axis_name)
    grad_norm = optax.tree.norm(grads)
    if moves_statistics:
      params = popart.rescale_head(params, value_head, stats, aux.new_stats)
      grads = popart.rescale_head_grads(grads, value_head, stats, aux.new_stats)
    clip = optimizers.hyperparameter(opt_state, 'max_grad_norm', max_grad_norm)
    metrics = {**aux.metrics, 'grad_norm': grad_norm,
               'grad_clipped': (grad_norm > clip).astype(jnp.float32)}
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, aux._replace(metrics=metrics)

  return step
