"""V-trace targets and advantages against values worked out by hand.

Recursion (rho_bar = c_bar = 1):
  v_s = V(x_s) + delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})),  v_T = V(x_T)
  delta_s = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s))
  pg advantage_s = rho_s (r_s + gamma_s v_{s+1} - V(x_s))
"""

import jax.numpy as jnp
import numpy as np

from rl import vtrace

# gamma = 0.5; the episode terminates on the action at t = 1 (gamma_1 = 0).
VALUES = [1.0, 2.0, 3.0, 4.0, 5.0]        # V(x_0..x_4)
REWARDS = [1.0, 1.0, 1.0, 1.0]
DISCOUNTS = [0.5, 0.0, 0.5, 0.5]
RHOS = [2.0, 0.5, 1.0, 0.25]               # clipped: [1, 0.5, 1, 0.25]
# By hand, backwards from v_4 = 5:
#   s=3: delta = 0.25 (1 + 2.5 - 4) = -0.125;       v_3 = 4 - 0.125 + 0 = 3.875
#   s=2: delta = 1 (1 + 2 - 3) = 0;                 v_2 = 3 + 0 + 0.5 (3.875 - 4) = 2.9375
#   s=1: delta = 0.5 (1 + 0 - 2) = -0.5 (gamma 0);  v_1 = 2 - 0.5 = 1.5
#   s=0: delta = 1 (1 + 0.5 * 2 - 1) = 1;           v_0 = 1 + 1 + 0.5 (1.5 - 2) = 1.75
EXPECTED_VS = [1.75, 1.5, 2.9375, 3.875]
# q_s = r_s + gamma_s v_{s+1}: [1 + 0.75, 1 + 0, 1 + 1.9375, 1 + 2.5]
EXPECTED_QS = [1.75, 1.0, 2.9375, 3.5]
# rho_s (q_s - V(x_s)): [0.75, 0.5 * -1, -0.0625, 0.25 * -0.5]
EXPECTED_PG = [0.75, -0.5, -0.0625, -0.125]


def _column(x):
  return jnp.asarray(x, jnp.float32)[:, None]


def test_vtrace_targets_and_advantages_by_hand():
  vs, qs = vtrace.vtrace_returns(_column(VALUES), _column(REWARDS), _column(DISCOUNTS),
                                 _column(RHOS))
  np.testing.assert_allclose(vs[:, 0], EXPECTED_VS, rtol=1e-6)
  np.testing.assert_allclose(qs[:, 0], EXPECTED_QS, rtol=1e-6)
  pg = np.minimum(RHOS, 1.0) * (np.asarray(qs[:, 0]) - np.asarray(VALUES[:-1]))
  np.testing.assert_allclose(pg, EXPECTED_PG, rtol=1e-6)


def test_vtrace_is_per_column_of_the_batch():
  values = jnp.concatenate([_column(VALUES), _column(VALUES) * 0.0], axis=1)
  rewards = jnp.concatenate([_column(REWARDS), _column(REWARDS) * 0.0], axis=1)
  discounts = jnp.concatenate([_column(DISCOUNTS)] * 2, axis=1)
  rhos = jnp.concatenate([_column(RHOS)] * 2, axis=1)
  vs, _ = vtrace.vtrace_returns(values, rewards, discounts, rhos)
  np.testing.assert_allclose(vs[:, 0], EXPECTED_VS, rtol=1e-6)
  np.testing.assert_allclose(vs[:, 1], 0.0, atol=1e-7)


def _episode_aware(discount_flags):
  # T = 3, gamma = 0.5, on-policy. x_2 is terminal, so the step from it is a
  # reset step (x_3 is the first observation of the next episode).
  values = _column([1.0, 2.0, 3.0, 4.0])
  rewards = _column([1.0, 1.0, 0.0])
  first = jnp.asarray([False, False, False, True])[:, None]
  rhos = _column([1.0, 1.0, 1.0])
  return vtrace.episode_aware_vtrace(values, rewards, _column(discount_flags), first,
                                     rhos, gamma=0.5)


def test_truncation_bootstraps_from_the_terminal_observation():
  vs, _, mask = _episode_aware([1.0, 1.0, 1.0])
  # s=2 (reset step): target = V(x_2) = 3, masked out.
  # s=1: v_1 = r_1 + gamma V(x_2) = 1 + 1.5 = 2.5
  # s=0: v_0 = 1 + 1 + 0.5 (2.5 - 2) = 2.25
  np.testing.assert_allclose(vs[:, 0], [2.25, 2.5, 3.0], rtol=1e-6)
  np.testing.assert_array_equal(mask[:, 0], [1.0, 1.0, 0.0])


def test_termination_does_not_bootstrap():
  vs, _, mask = _episode_aware([1.0, 0.0, 1.0])
  # s=1: v_1 = r_1 = 1;  s=0: v_0 = 1 + (1 + 1 - 1) + 0.5 (1 - 2) = 1.5
  np.testing.assert_allclose(vs[:, 0], [1.5, 1.0, 3.0], rtol=1e-6)
  np.testing.assert_array_equal(mask[:, 0], [1.0, 1.0, 0.0])
