"""Reward modes: clipping and Pohlen et al.'s h(x) and its inverse."""

import jax.numpy as jnp
import numpy as np
import pytest

from rl import rewards


def test_h_by_hand_and_inverse():
  eps = rewards.H_EPSILON
  # h(3) = sqrt(4) - 1 + 3 eps = 1 + 0.003; h(-8) = -(3 - 1) - 8 eps
  np.testing.assert_allclose(rewards.h(jnp.asarray([3.0, -8.0, 0.0])),
                             [1.0 + 3 * eps, -2.0 - 8 * eps, 0.0], rtol=1e-6)
  x = jnp.asarray([-1000.0, -3.5, -0.1, 0.0, 0.2, 7.0, 25_000.0])
  np.testing.assert_allclose(rewards.h_inv(rewards.h(x)), x, rtol=1e-4, atol=1e-4)


def test_transform_rewards_modes():
  r = jnp.asarray([-5.0, 0.5, 3.0])
  np.testing.assert_allclose(rewards.transform_rewards(r, 'clip'), [-1.0, 0.5, 1.0])
  np.testing.assert_allclose(rewards.transform_rewards(r, 'none'), r)
  np.testing.assert_allclose(rewards.transform_rewards(r, 'h'), r)
  with pytest.raises(ValueError, match='reward_mode'):
    rewards.transform_rewards(r, 'scale')
