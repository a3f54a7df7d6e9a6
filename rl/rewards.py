"""Reward and value transforms: clipping, or Pohlen et al.'s h(x).

`clip` clips rewards to [-1, 1] (IMPALA's Atari protocol). `none` leaves
them. `h` keeps rewards unclipped and learns values in the transformed space
h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018, arXiv
1805.11593; R2D2).
"""

import jax.numpy as jnp

REWARD_MODES = ('clip', 'none', 'h')
H_EPSILON = 1e-3  # R2D2's choice.


def h(x, eps: float = H_EPSILON):
  """The value transform h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x.

  Squashes large returns so one network can learn values of very different
  scales without clipping rewards; invertible (`h_inv`).

  See "Observe and Look Further: Achieving Consistent Performance on Atari" by
  Pohlen et al. 2018 (https://arxiv.org/abs/1805.11593).

  Args:
    x: values in reward units, any shape.
    eps: the linear term's weight (H_EPSILON, R2D2's choice).

  Returns:
    h(x), the shape of x.
  """
  return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def h_inv(x, eps: float = H_EPSILON):
  """The inverse of `h`, in closed form.

  h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)
  (Pohlen et al. 2018, https://arxiv.org/abs/1805.11593).

  Args:
    x: values in h-space, any shape.
    eps: the `eps` the values were transformed with.

  Returns:
    h^-1(x) in reward units, the shape of x.
  """
  root = (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
  return jnp.sign(x) * (root ** 2 - 1.0)


def transform_rewards(rewards, mode: str):
  """The rewards the learner trains on.

  The episode return logs use the raw rewards, not these.

  Args:
    rewards: raw rewards, any shape.
    mode: one of REWARD_MODES: 'clip' clips to [-1, 1]; 'none' and 'h' leave
      the rewards as they are ('h' transforms the values instead).

  Returns:
    The transformed rewards, the shape of `rewards`.

  Raises:
    ValueError: `mode` is not one of REWARD_MODES.
  """
  if mode == 'clip':
    return jnp.clip(rewards, -1.0, 1.0)
  if mode in ('none', 'h'):
    return rewards
  raise ValueError(f'reward_mode must be one of {REWARD_MODES}, got {mode!r}')
