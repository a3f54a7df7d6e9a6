"""One optimiser step of a learner, the same for every loss (acme's sgd_step)."""

from typing import Callable, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import optax

from rl import optimizers
from rl import popart


def make_sgd_step(loss_fn: Callable, optimizer: optax.GradientTransformation, value_head: str,
                  axis_name: Optional[str], max_grad_norm: float = float('inf'),
                  moves_statistics: bool = False,
                  clip_groups: Optional[Tuple[Sequence[Sequence[float]], Sequence[str]]] = None
                  ) -> Callable:
  """One optimiser step of a learner's loss.

  This device's gradient is summed over `axis_name` (the loss reduces over the global minibatch).
  With `moves_statistics` the value head and its gradient move to the loss's new PopArt statistics
  before the optimiser; the entropy cost and clip come from the optimiser state.

  With `clip_groups` = (weights [G, terms], names [G]) the loss returns an array [terms, ...]
  summing to the loss (rl/impala.loss_fn(by_term=True)); group g's gradient is that of its terms
  weighted by weights[g], each is clipped on its own and their sum goes to the optimiser (whose
  chain then must not clip).

  Args:
    loss_fn: (params, stats, minibatch, entropy_cost) -> (loss, aux), aux a LossOutput-like tuple
      with `metrics`, and with `moves_statistics` `new_stats` (and optionally `preserve_from`).
    max_grad_norm: the clip of an optimiser state without one.

  Returns:
    step(params, opt_state, stats, minibatch) -> (params, opt_state, aux); aux.metrics gains
    'grad_norm', 'grad_clipped' and, with `clip_groups`, 'grad_norm/<name>' (pre-clip).
  """

  def gradient(params, stats, minibatch, entropy_cost, clip):
    if clip_groups is None:
      grads, aux = jax.grad(loss_fn, has_aux=True)(params, stats, minibatch, entropy_cost)
      return _summed(grads), aux, {}
    weights, names = clip_groups
    by_term, vjp_fn, aux = jax.vjp(lambda p: loss_fn(p, stats, minibatch, entropy_cost),
                                   params, has_aux=True)
    weights = jnp.asarray(weights, by_term.dtype)
    cotangents = weights.reshape(weights.shape + (1,) * (by_term.ndim - 1)) * jnp.ones_like(by_term)
    # One backward pass per group in turn: XLA:CPU runs conv backward passes slower vmapped.
    grads_by_group = [vjp_fn(cotangents[g])[0] for g in range(len(names))]
    groups = jax.tree.map(lambda *xs: jnp.stack(xs), *grads_by_group)   # each leaf [G, ...]
    groups = _summed(groups)
    norms = jax.vmap(optax.tree.norm)(groups)      # [G]
    scales = jnp.minimum(1.0, clip / jnp.maximum(norms, 1e-12))
    grads = jax.tree.map(lambda g: jnp.tensordot(scales, g, axes=1), groups)
    extra = {f'grad_norm/{name}': norms[g] for g, name in enumerate(names)}
    extra['grad_clipped'] = jnp.any(norms > clip).astype(jnp.float32)
    return grads, aux, extra

  def _summed(grads):
    return grads if axis_name is None else jax.lax.psum(grads, axis_name)

  def step(params, opt_state, stats: popart.Stats, minibatch):
    entropy_cost = optimizers.hyperparameter(opt_state, 'entropy_cost')
    clip = optimizers.hyperparameter(opt_state, 'max_grad_norm', max_grad_norm)
    grads, aux, extra = gradient(params, stats, minibatch, entropy_cost, clip)
    grad_norm = optax.tree.norm(grads)
    if moves_statistics:
      old = stats if getattr(aux, 'preserve_from', None) is None else aux.preserve_from
      params = popart.rescale_head(params, value_head, old, aux.new_stats)
      grads = popart.rescale_head_grads(grads, value_head, old, aux.new_stats)
    metrics = {**aux.metrics, 'grad_norm': grad_norm,
               'grad_clipped': (grad_norm > clip).astype(jnp.float32), **extra}
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, aux._replace(metrics=metrics)

  return step
