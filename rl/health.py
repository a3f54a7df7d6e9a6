"""The network's health, read off the learner's own forward pass.

Two failure modes make a policy blind long before its returns say so:

* dead ReLUs: a unit (one position x channel of a conv layer, one unit of a
  dense layer) whose output is 0 for every input gets no gradient and
  cannot come back (docs/pong.md).
* a policy that does not depend on the state: its logits are the same for
  every observation, so it only learns action frequencies.

`dead_shares` turns the torsos' per-unit maxima (their `health` sows,
networks/torsos.py) into the share of units dead on the batch, per layer;
`logit_spread` measures how much the policy's log-probabilities vary over
the batch's states; `update_kl` how far one update moved the policy. All
are pure and sharding-aware: with `axis_name` they combine every learner
device's shard into the global figure.
"""

from typing import Dict, Optional

import jax
import jax.numpy as jnp

from rl import actor_critic as ac
from rl.types import Unroll


def dead_shares(unit_max: Dict[str, jax.Array], axis_name: Optional[str] = None
                ) -> Dict[str, jax.Array]:
  """The share of each layer's units that are dead on the batch.

  A unit is dead when its ReLU output is 0 for every sample of the global
  batch: its maximum over the batch, taken across `axis_name` devices (pmax),
  is <= 0.

  Args:
    unit_max: layer name -> the maxima over this device's batch of each of
      its units (the torsos' `health` sows, networks/torsos.py).
    axis_name: the devices the batch spans; None for one device.

  Returns:
    {'dead/<layer>': scalar share in [0, 1]} for each layer of `unit_max`.
  """
  out = {}
  for name, m in unit_max.items():
    if axis_name is not None:
      m = jax.lax.pmax(m, axis_name)
    out[f'dead/{name}'] = jnp.mean((m <= 0.0).astype(jnp.float32))
  return out


def logit_spread(log_pi: jax.Array, mask: jax.Array, axis_name: Optional[str] = None
                 ) -> jax.Array:
  """How much the policy depends on the state.

  The standard deviation over the valid states of each action's
  log-probability, averaged over actions. The statistics are global over
  `axis_name` and taken in two passes (mean, then squared deviations);
  `log_pi` is stopped from gradients.

  Args:
    log_pi: log-softmax of the logits [..., A] (the per-state constant of raw
      logits does not move the policy).
    mask: 1 for valid steps, 0 otherwise, [...].
    axis_name: the devices the batch spans; None for one device.

  Returns:
    A scalar >= 0; 0 means the policy ignores its input.
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
  """The health metrics of one forward pass.

  Args:
    unit_max: layer name -> per-unit maxima over the batch (`dead_shares`),
      or None for no dead-unit metrics.
    log_pi: log-softmax of the logits [..., A].
    mask: 1 for valid steps, 0 otherwise, [...].
    axis_name: the devices the batch spans; None for one device.

  Returns:
    {'dead/<layer>': share of dead units, 'policy/logit_std': `logit_spread`},
    each a scalar, global over `axis_name`.
  """
  out = dead_shares(unit_max or {}, axis_name)
  out['policy/logit_std'] = logit_spread(log_pi, mask, axis_name)
  return out


# Unrolls of the first minibatch whose policy `kl_update` compares before and
# after the update: a fixed few, so it costs a small share of an update.
KL_UNROLLS = 4


def update_kl(apply_fn, params, stats, minibatch: Unroll, log_pi_before, axis_name):
  """How far one update moved the policy: KL(pi_before || pi_after).

  Averaged over the valid steps (reset steps excluded) of the first
  KL_UNROLLS unrolls, per device, of the update's first minibatch, globally
  over `axis_name`; nothing here carries a gradient. PPO's approx_kl for
  V-trace; the behaviour KL ('kl_behaviour') adds the policy lag.

  Args:
    apply_fn: the network, as for `loss_fn`.
    params: the params after the update.
    stats: the PopArt statistics after the update.
    minibatch: the update's first minibatch, [T + 1, B', ...].
    log_pi_before: that minibatch's log-policy [T, B', A] at the update's
      first step, taken with the params the update started from.
    axis_name: the devices the batch spans; None for one device.

  Returns:
    A scalar.
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
