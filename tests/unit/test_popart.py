"""PopArt statistics, normalisation and output preservation, by hand."""

import jax.numpy as jnp
import pytest
import numpy as np

from rl import popart


def _stats(mu, nu):
  return {'mu': jnp.asarray(mu, jnp.float32), 'nu': jnp.asarray(nu, jnp.float32)}


def test_sigma_normalise_unnormalise():
  stats = _stats([2.0, 0.0], [13.0, 1.0])   # sigma = sqrt(13 - 4) = 3, and 1
  np.testing.assert_allclose(popart.sigma(stats), [3.0, 1.0], rtol=1e-6)
  x = jnp.asarray([8.0, 8.0])
  task = jnp.asarray([0, 1])
  np.testing.assert_allclose(popart.normalize(stats, x, task), [2.0, 8.0], rtol=1e-6)
  np.testing.assert_allclose(popart.unnormalize(stats, jnp.asarray([2.0, 8.0]), task),
                             [8.0, 8.0], rtol=1e-6)


def test_sigma_is_clipped():
  stats = _stats([5.0, 0.0], [25.0, 1e14])  # variance 0 -> 1e-4; 1e7 -> 1e6
  np.testing.assert_allclose(popart.sigma(stats), [1e-4, 1e6], rtol=1e-5)


def test_update_uses_each_tasks_batch_mean_and_keeps_absent_tasks():
  stats = _stats([0.0, 10.0, 7.0], [1.0, 200.0, 50.0])
  targets = jnp.asarray([[1.0, 20.0], [3.0, 99.0]])   # [T=2, B=2]
  tasks = jnp.asarray([[0, 1], [0, 1]])
  mask = jnp.asarray([[1.0, 1.0], [1.0, 0.0]])         # the 99 is masked out
  new = popart.update_stats(stats, targets, tasks, mask, beta=0.1)
  # task 0: mean 2, mean square 5:   mu = 0.9 * 0 + 0.2 = 0.2,  nu = 0.9 + 0.5 = 1.4
  # task 1: mean 20, mean sq 400:    mu = 9 + 2 = 11,           nu = 180 + 40 = 220
  # task 2: absent, unchanged.
  np.testing.assert_allclose(new['mu'], [0.2, 11.0, 7.0], rtol=1e-6)
  np.testing.assert_allclose(new['nu'], [1.4, 220.0, 50.0], rtol=1e-6)


def test_update_step_does_not_grow_with_batch_size():
  stats = _stats([0.0], [1.0])
  small = popart.update_stats(stats, jnp.full((2,), 4.0), jnp.zeros(2, int), jnp.ones(2), 0.5)
  large = popart.update_stats(stats, jnp.full((200,), 4.0), jnp.zeros(200, int),
                              jnp.ones(200), 0.5)
  np.testing.assert_allclose(small['mu'], [2.0])
  np.testing.assert_allclose(large['mu'], [2.0])


def test_preserve_outputs_keeps_unnormalised_values():
  rng = np.random.default_rng(0)
  h = jnp.asarray(rng.normal(size=(5, 8)), jnp.float32)
  head = {'kernel': jnp.asarray(rng.normal(size=(8, 3)), jnp.float32),
          'bias': jnp.asarray(rng.normal(size=(3,)), jnp.float32)}
  old = _stats([0.5, -2.0, 1.0], [1.25, 8.0, 1.5])
  new = _stats([1.5, -1.0, 0.2], [6.25, 3.0, 0.3])
  before = popart.sigma(old) * (h @ head['kernel'] + head['bias']) + old['mu']
  rescaled = popart.preserve_outputs(head, old, new)
  after = popart.sigma(new) * (h @ rescaled['kernel'] + rescaled['bias']) + new['mu']
  np.testing.assert_allclose(after, before, atol=1e-5)
  # and the normalised outputs did change, so the test is not vacuous
  assert not np.allclose(h @ rescaled['kernel'], h @ head['kernel'])


def test_scale_divides_by_the_tasks_sigma_without_a_shift():
  stats = _stats([2.0, 0.0], [13.0, 1.0])   # sigma 3 and 1
  np.testing.assert_allclose(popart.scale(stats, jnp.asarray([6.0, 6.0]), jnp.asarray([0, 1])),
                             [2.0, 6.0], rtol=1e-6)


def test_unnormalize_all_gives_every_tasks_value():
  stats = _stats([2.0, 0.0], [13.0, 1.0])   # sigma 3 and 1
  n = jnp.asarray([[1.0, 1.0], [-1.0, 4.0]])   # [steps, K]
  np.testing.assert_allclose(popart.unnormalize_all(stats, n), [[5.0, 1.0], [-1.0, 4.0]],
                             rtol=1e-6)


def test_rescaled_value_is_the_rescaled_heads_output():
  # Task 0: sigma 3 -> 2 (nu 8, mu 2), mu 2 -> 2; task 1: sigma 1 -> 4, mu 0 -> 3.
  old = _stats([2.0, 0.0], [13.0, 1.0])
  new = _stats([2.0, 3.0], [8.0, 25.0])
  n = jnp.asarray([1.0, 2.0])
  task = jnp.asarray([0, 1])
  # (sigma n + mu - mu') / sigma': (3 + 2 - 2) / 2 = 1.5; (2 + 0 - 3) / 4 = -0.25.
  np.testing.assert_allclose(popart.rescaled_value(old, new, n, task), [1.5, -0.25], rtol=1e-6)
  # ... which is what a head rescaled by rescale_head outputs.
  head = {'kernel': jnp.asarray([[1.0, 2.0]]), 'bias': jnp.asarray([0.0, 0.0])}
  params = {'value_head': head, 'torso': {'w': jnp.ones(3)}}
  rescaled = popart.rescale_head(params, 'value_head', old, new)
  np.testing.assert_allclose(jnp.asarray([[1.0]]) @ rescaled['value_head']['kernel']
                             + rescaled['value_head']['bias'], [[1.5, -0.25]], rtol=1e-6)
  assert rescaled['torso'] is params['torso']


def test_rescaled_head_gradient_is_sigma_ratio_times_the_old_one():
  old = _stats([2.0, 0.0], [13.0, 1.0])   # sigma 3, 1
  new = _stats([2.0, 3.0], [8.0, 25.0])   # sigma 2, 4
  grads = {'value_head': {'kernel': jnp.ones((2, 2)), 'bias': jnp.asarray([3.0, 1.0])},
           'torso': {'w': jnp.ones(3)}}
  out = popart.rescale_head_grads(grads, 'value_head', old, new)
  # sigma' / sigma per task column: 2/3 and 4.
  np.testing.assert_allclose(out['value_head']['kernel'], [[2 / 3, 4.0], [2 / 3, 4.0]], rtol=1e-6)
  np.testing.assert_allclose(out['value_head']['bias'], [2.0, 4.0], rtol=1e-6)
  np.testing.assert_allclose(out['torso']['w'], np.ones(3))


def test_debiased_start_takes_the_first_batch_then_steps_by_beta_over_the_weight():
  beta = 0.1
  stats = popart.init_stats(2, start='debiased')
  np.testing.assert_allclose(stats['weight'], [0.0, 0.0])
  np.testing.assert_allclose(popart.sigma(stats), [1.0, 1.0])   # identity until a first batch
  tasks, mask = jnp.asarray([0, 0]), jnp.ones(2)
  first = popart.update_stats(stats, jnp.asarray([100.0, 300.0]), tasks, mask, beta)
  # weight 0.9 * 0 + 0.1 = 0.1, step 0.1 / 0.1 = 1: the batch's mean 200 and
  # mean square (1e4 + 9e4) / 2 = 5e4, so sigma = sqrt(5e4 - 4e4) = 100.
  np.testing.assert_allclose(first['weight'], [0.1, 0.0], rtol=1e-6)
  np.testing.assert_allclose(first['mu'], [200.0, 0.0], rtol=1e-6)
  np.testing.assert_allclose(first['nu'], [5e4, 1.0], rtol=1e-6)
  np.testing.assert_allclose(popart.sigma(first), [100.0, 1.0], rtol=1e-5)
  second = popart.update_stats(first, jnp.asarray([0.0, 0.0]), tasks, mask, beta)
  # weight 0.9 * 0.1 + 0.1 = 0.19, step 0.1 / 0.19 = 10/19: mu = 200 * 9/19,
  # the mean of the two batches weighted 0.09 : 0.1 (Adam's bias correction).
  np.testing.assert_allclose(second['weight'], [0.19, 0.0], rtol=1e-6)
  np.testing.assert_allclose(second['mu'], [200.0 * 9 / 19, 0.0], rtol=1e-5)
  np.testing.assert_allclose(second['nu'], [5e4 * 9 / 19, 1.0], rtol=1e-5)


def test_debiased_step_tends_to_beta():
  beta = 0.01
  stats = popart.init_stats(1, start='debiased')
  for _ in range(2000):
    stats = popart.update_stats(stats, jnp.asarray([1.0]), jnp.asarray([0]), jnp.ones(1), beta)
  # weight 1 - 0.99^2000 ~ 1: the next step is beta, the paper's rule.
  np.testing.assert_allclose(stats['weight'], [1.0], atol=1e-5)   # float32 sums
  step = popart.update_stats(stats, jnp.asarray([101.0]), jnp.asarray([0]), jnp.ones(1), beta)
  np.testing.assert_allclose(step['mu'], [1.0 + beta * 100.0], rtol=1e-4)


def test_identity_start_has_no_weight_and_unknown_starts_fail():
  assert set(popart.init_stats(3)) == {'mu', 'nu'}
  with pytest.raises(ValueError, match="unknown PopArt start 'fast'.*identity, debiased"):
    popart.init_stats(3, start='fast')
