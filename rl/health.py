"""The network's health, read off the learner's own forward pass.

Two failure modes make a policy blind long before its returns say so:

* dead ReLUs: a unit (one position x channel of a conv layer, one unit of a
  dense layer) whose output is 0 for every input gets no gradient and
  cannot come back. On Pong, larger normalised steps killed most of the
  first conv layer within minutes (docs/pong.md).
* a policy that does not depend on the state: its logits are the same for
  every observation, so it only learns action frequencies.

`dead_shares` turns the torsos' per-unit maxima (their `health` sows,
networks/torsos.py) into the share of units dead on the batch, per layer;
`logit_spread` measures how much the policy's log-probabilities vary over
the batch's states. Both are pure and sharding-aware: with `axis_name` they
combine every learner device's shard into the global figure.
"""

from typing import Dict, Optional

import jax
import jax.numpy as jnp


def dead_shares(unit_max: Dict[str, jax.Array], axis_name: Optional[str] = None
                ) -> Dict[str, jax.Array]:
  """{'dead/<layer>': share of the layer's units whose ReLU output is 0 for
  every sample of the (global) batch}, from per-unit maxima over the batch."""
  out = {}
  for name, m in unit_max.items():
    if axis_name is not None:
      m = jax.lax.pmax(m, axis_name)
    out[f'dead/{name}'] = jnp.mean((m <= 0.0).astype(jnp.float32))
  return out


def logit_spread(log_pi: jax.Array, mask: jax.Array, axis_name: Optional[str] = None
                 ) -> jax.Array:
  """Standard deviation over the valid states of each action's
  log-probability, averaged over actions.

  log_pi [..., A] (log-softmax of the logits: the per-state constant of
  raw logits does not move the policy), mask [...] 1 for valid steps. 0
  means the policy ignores its input.
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
  """The health metrics of one forward pass: dead shares and 'policy/logit_std'."""
  out = dead_shares(unit_max or {}, axis_name)
  out['policy/logit_std'] = logit_spread(log_pi, mask, axis_name)
  return out
