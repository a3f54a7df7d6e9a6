"""Each task's policy-gradient and value gradient norms on the shared modules:
a multi-task diagnostic the learner logs now and then."""

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from rl import popart
from rl.actor_critic import Learner, LossConfig
from rl.types import Unroll


def task_gradient_norms(learner: Learner, apply_fn: Callable, cfg: LossConfig, params,
                        stats: popart.Stats, batch: Unroll, shared: Sequence[str]) -> dict:
  """The gradient norms on the `shared` modules (top-level param names; absent ones skipped) of each
  task's policy and value terms of a by-term learner's loss (Learner.term_loss) on one device's
  `batch`: one forward pass, 2K backward passes.

  Returns:
    [K] arrays: 'task/grad_policy', 'task/grad_baseline' and 'task/grad_share_policy',
    'task/grad_share_baseline' (each norm over the sum of the 2K norms).
  """
  k, names = cfg.num_tasks, learner.terms
  terms = learner.term_loss(apply_fn, cfg, None, by_term=True)
  _, vjp_fn, _ = jax.vjp(lambda p: terms(p, stats, batch), params, has_aux=True)
  rows = (names.index('policy'), names.index('baseline'))
  cotangents = jnp.zeros((len(rows) * k, len(names), k))
  for r, row in enumerate(rows):
    cotangents = cotangents.at[r * k + jnp.arange(k), row, jnp.arange(k)].set(1.0)
  # In turn (lax.map), not vmapped: as in rl/sgd.py.
  (grads,) = jax.lax.map(vjp_fn, cotangents)
  leaves = jax.tree.leaves({name: grads[name] for name in shared if name in grads})
  norms = jnp.sqrt(sum(jnp.sum(x.reshape(x.shape[0], -1) ** 2, axis=1) for x in leaves))
  total = jnp.maximum(jnp.sum(norms), 1e-12)
  out = {}
  for r, row in enumerate(rows):
    part = norms[r * k:(r + 1) * k]
    out[f'task/grad_{names[row]}'] = part
    out[f'task/grad_share_{names[row]}'] = part / total
  return out
