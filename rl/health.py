"""The network's health, read off the learner's own forward pass: dead ReLU units (0 for every
input, so no gradient brings them back) and a policy whose log-probabilities do not depend on the
state. With `axis_name`, the figures are global over every learner device's shard.
"""

from typing import Dict, Optional

import jax
import jax.numpy as jnp

from rl import actor_critic as ac
from rl.types import Unroll


def dead_shares(unit_max: Dict[str, jax.Array], axis_name: Optional[str] = None
                ) -> Dict[str, jax.Array]:
  """The share of each layer's units that are dead on the global batch.

  Args:
    unit_max: layer name -> each unit's maximum over this device's batch (the torsos' `health` sows,
      networks/torsos.py); dead means <= 0 on every device (pmax).

  Returns:
    {'dead/<layer>': scalar share in [0, 1]}.
  """
  out = {}
  for name, m in unit_max.items():
    if axis_name is not None:
      m = jax.lax.pmax(m, axis_name)
    out[f'dead/{name}'] = jnp.mean((m <= 0.0).astype(jnp.float32))
  return out


def logit_spread(log_pi: jax.Array, mask: jax.Array, axis_name: Optional[str] = None
                 ) -> jax.Array:
  """How much the policy depends on the state: the std over valid states of each action's
  log-probability, averaged over actions; 0 means the policy ignores its input.

  Args:
    log_pi: log-softmax [..., A] (not raw logits: their per-state constant
      does not move the policy); stopped from gradients.
    mask: [...], 1 for valid steps.
  """
  log_pi = jax.lax.stop_gradient(log_pi)
  w = mask[..., None]
  axes = tuple(range(log_pi.ndim - 1))
  count, s1 = jnp.sum(mask), jnp.sum(w * log_pi, axis=axes)
  if axis_name is not None:
    count, s1 = jax.lax.psum((count, s1), axis_name)
  count = jnp.maximum(count, 1.0)
  # Two passes: log-probabilities near -1.8 with a spread of 1e-3 would
  # lose it to float32 rounding in E[x^2] - E[x]^2.
  s2 = jnp.sum(w * (log_pi - s1 / count) ** 2, axis=axes)
  if axis_name is not None:
    s2 = jax.lax.psum(s2, axis_name)
  return jnp.mean(jnp.sqrt(s2 / count))


def metrics(unit_max: Optional[Dict[str, jax.Array]], log_pi: jax.Array, mask: jax.Array,
            axis_name: Optional[str] = None) -> Dict[str, jax.Array]:
  """`dead_shares` (unit_max None: none) and 'policy/logit_std' (`logit_spread`)."""
  out = dead_shares(unit_max or {}, axis_name)
  out['policy/logit_std'] = logit_spread(log_pi, mask, axis_name)
  return out


# Unrolls per device `update_kl` compares: a few, so it costs little.
KL_UNROLLS = 4


def update_kl(apply_fn, params, stats, minibatch: Unroll, log_pi_before, axis_name):
  """How far one update moved the policy: KL(pi_before || pi_after).

  Averaged over the valid steps of the first KL_UNROLLS unrolls per device of
  the update's first minibatch, global over `axis_name`; no gradient.

  Args:
    params, stats: those after the update.
    minibatch: the update's first minibatch, [T + 1, B', ...].
    log_pi_before: its log-policy [T, B', A] under the params the update started from.
  """
  k = min(KL_UNROLLS, minibatch.action.shape[1])
  part = jax.tree.map(lambda x: x[:, :k], minibatch._replace(core_state=None))
  core = jax.tree.map(lambda x: x[:k], minibatch.core_state)
  logits = apply_fn(params, stats, part.obs, part.first, core)[0][:-1]
  log_pi_after = jax.nn.log_softmax(jax.lax.stop_gradient(logits))
  before = jax.lax.stop_gradient(log_pi_before[:, :k])
  # The loss's reset steps are not actions of a policy.
  mask = 1.0 - part.first[1:].astype(jnp.float32)
  kl = jnp.sum(jnp.exp(before) * (before - log_pi_after), axis=-1)
  sums = ac.global_sum((jnp.sum(mask * kl), jnp.sum(mask)), axis_name)
  return sums[0] / jnp.maximum(sums[1], 1.0)
