"""Reward and value transforms: 'clip' clips rewards to [-1, 1] (IMPALA's
Atari protocol), 'none' leaves them, 'h' leaves them and learns values in
h-space (Pohlen et al. 2018, arXiv 1805.11593; R2D2)."""

import jax.numpy as jnp

REWARD_MODES = ('clip', 'none', 'h')
H_EPSILON = 1e-3  # R2D2's choice.


def h(x, eps: float = H_EPSILON):
  """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
  return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def h_inv(x, eps: float = H_EPSILON):
  """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1),
  the closed-form inverse of `h` for the same eps."""
  root = (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
  return jnp.sign(x) * (root ** 2 - 1.0)


def transform_rewards(rewards, mode: str):
  """The rewards the learner trains on (episode returns are logged raw);
  ValueError for a `mode` not in REWARD_MODES."""
  if mode == 'clip':
    return jnp.clip(rewards, -1.0, 1.0)
  if mode in ('none', 'h'):
    return rewards
  raise ValueError(f'reward_mode must be one of {REWARD_MODES}, got {mode!r}')
