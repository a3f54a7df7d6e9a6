"""PopArt's per-sample step rule (popart.step_per='sample'), by hand and against rlax.art."""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from configs.validation import ConfigError, validate_spec
from rl import actor_critic, impala, popart
from rl.task_metrics import mean_metrics
from rl.types import Unroll


def _stats(mu, nu):
  return {'mu': jnp.asarray(mu, jnp.float32), 'nu': jnp.asarray(nu, jnp.float32)}


def test_per_sample_step_is_one_minus_one_minus_beta_to_the_count():
  stats = _stats([0.0, 10.0, 7.0], [1.0, 200.0, 50.0])
  targets = jnp.asarray([1.0, 2.0, 3.0, 20.0, 99.0])
  tasks = jnp.asarray([0, 0, 0, 1, 1])
  mask = jnp.asarray([1.0, 1.0, 1.0, 1.0, 0.0])       # the 99 is masked out
  new, step = popart.update_stats_and_step(stats, targets, tasks, mask, 0.1, per_sample=True)
  # task 0: 3 targets, a = 1 - 0.9^3 = 0.271; mean 2, mean square 14/3.
  #   mu = 0.271 * 2 = 0.542; nu = 0.729 * 1 + 0.271 * 14/3 = 1.993667
  # task 1: 1 target, a = 0.1: mu = 9 + 2 = 11, nu = 180 + 40 = 220
  # task 2: absent: unchanged, step 0.
  np.testing.assert_allclose(step, [0.271, 0.1, 0.0], rtol=1e-5)
  np.testing.assert_allclose(new['mu'], [0.542, 11.0, 7.0], rtol=1e-5)
  np.testing.assert_allclose(new['nu'], [0.729 + 0.271 * 14 / 3, 220.0, 50.0], rtol=1e-5)
  # The per-batch rule steps beta = 0.1 on each present task whatever its count.
  batch_new, batch_step = popart.update_stats_and_step(stats, targets, tasks, mask, 0.1)
  np.testing.assert_allclose(batch_step, [0.1, 0.1, 0.0])
  np.testing.assert_allclose(batch_new['mu'], [0.2, 11.0, 7.0], rtol=1e-6)


def test_per_sample_equals_one_step_per_target_on_equal_targets():
  beta, n = 0.05, 40
  stats = _stats([3.0], [25.0])
  once = popart.update_stats(stats, jnp.full((n,), 8.0), jnp.zeros(n, int), jnp.ones(n), beta,
                             per_sample=True)
  one_by_one = stats
  for _ in range(n):
    one_by_one = popart.update_stats(one_by_one, jnp.asarray([8.0]), jnp.asarray([0]),
                                     jnp.ones(1), beta)
  np.testing.assert_allclose(once['mu'], one_by_one['mu'], rtol=1e-5)
  np.testing.assert_allclose(once['nu'], one_by_one['nu'], rtol=1e-5)


def _rlax_state(stats):
  return rlax.PopArtState(shift=stats['mu'], scale=popart.sigma(stats),
                          second_moment=stats['nu'])


def test_matches_rlax_art_at_one_target_per_task():
  stats = _stats([0.5, -2.0, 1.0], [1.25, 8.0, 1.5])
  targets, tasks = jnp.asarray([4.0, -7.0, 0.3]), jnp.asarray([2, 0, 1])
  ours = popart.update_stats(stats, targets, tasks, jnp.ones(3), 0.2, per_sample=True)
  theirs = rlax.art(_rlax_state(stats), targets, tasks, 0.2, popart.SIGMA_MIN, popart.SIGMA_MAX)
  np.testing.assert_allclose(ours['mu'], theirs.shift, rtol=1e-6)
  np.testing.assert_allclose(ours['nu'], theirs.second_moment, rtol=1e-6)
  np.testing.assert_allclose(popart.sigma(ours), theirs.scale, rtol=1e-5)


def test_agrees_with_rlax_art_to_first_order_in_n_beta():
  # rlax sums n steps of beta (n beta); the per-sample rule moves 1 - (1 - beta)^n
  # toward the mean: the two differ by O((n beta)^2) of the distance moved.
  rng = np.random.default_rng(0)
  n, beta = 64, 1e-4
  targets = jnp.asarray(rng.normal(50.0, 10.0, size=n), jnp.float32)
  tasks = jnp.zeros(n, jnp.int32)
  stats = _stats([0.0], [1.0])
  ours = popart.update_stats(stats, targets, tasks, jnp.ones(n), beta, per_sample=True)
  theirs = rlax.art(_rlax_state(stats), targets, tasks, beta, popart.SIGMA_MIN, popart.SIGMA_MAX)
  moved = float(theirs.shift[0])                         # n beta * mean ~ 0.32
  assert abs(float(ours['mu'][0]) - moved) <= (n * beta) * moved * 1.01
  np.testing.assert_allclose(ours['mu'], theirs.shift, rtol=n * beta)
  np.testing.assert_allclose(ours['nu'], theirs.second_moment, rtol=n * beta)


def test_debiased_start_with_per_sample_steps():
  beta = 0.1
  stats = popart.init_stats(2, start='debiased')
  tasks, mask = jnp.asarray([0, 0]), jnp.ones(2)
  first, step = popart.update_stats_and_step(stats, jnp.asarray([100.0, 300.0]), tasks, mask,
                                             beta, per_sample=True)
  # a = 1 - 0.9^2 = 0.19, weight 0.19, step 0.19 / 0.19 = 1: the batch's moments.
  np.testing.assert_allclose(step, [1.0, 0.0], rtol=1e-6)
  np.testing.assert_allclose(first['weight'], [0.19, 0.0], rtol=1e-5)
  np.testing.assert_allclose(first['mu'], [200.0, 0.0], rtol=1e-5)
  np.testing.assert_allclose(popart.sigma(first), [100.0, 1.0], rtol=1e-4)
  second, step = popart.update_stats_and_step(first, jnp.asarray([0.0, 0.0]), tasks, mask,
                                              beta, per_sample=True)
  # weight 0.81 * 0.19 + 0.19 = 0.3439 (= 1 - 0.9^4, four targets so far),
  # step 0.19 / 0.3439: the mean of all four targets, each weighted by its
  # recency 0.9^k (the newest two 1 and 0.9, the oldest 0.81 and 0.729).
  np.testing.assert_allclose(second['weight'], [1 - 0.9 ** 4, 0.0], rtol=1e-5)
  np.testing.assert_allclose(step, [0.19 / 0.3439, 0.0], rtol=1e-5)
  np.testing.assert_allclose(second['mu'], [200.0 * (1 - 0.19 / 0.3439), 0.0], rtol=1e-5)


def test_per_sample_counts_the_global_batch_across_devices():
  rng = np.random.default_rng(1)
  targets = jnp.asarray(rng.normal(3.0, 2.0, size=(2, 6)), jnp.float32)
  tasks = jnp.asarray(rng.integers(0, 2, size=(2, 6)), jnp.int32)
  stats = _stats([0.0, 1.0], [1.0, 4.0])
  update = functools.partial(popart.update_stats, beta=0.01, per_sample=True)
  sharded = jax.vmap(lambda x, t: update(stats, x, t, jnp.ones(6), axis_name='d'),
                     axis_name='d')(targets, tasks)
  whole = update(stats, targets.reshape(-1), tasks.reshape(-1), jnp.ones(12))
  for key in ('mu', 'nu'):
    np.testing.assert_allclose(sharded[key][0], whole[key], rtol=1e-6)
    np.testing.assert_allclose(sharded[key][1], whole[key], rtol=1e-6)


def test_an_updates_steps_combine_one_after_another():
  steps = {popart.STEP_METRIC: jnp.asarray([[0.1, 0.0], [0.5, 0.2]]),   # 2 minibatches x 2 tasks
           'loss/total': jnp.asarray([1.0, 3.0])}
  out = mean_metrics(steps)
  np.testing.assert_allclose(out[popart.STEP_METRIC], [1 - 0.9 * 0.5, 0.2], rtol=1e-6)
  np.testing.assert_allclose(out['loss/total'], 2.0)


def test_the_impala_loss_moves_its_statistics_by_the_rule_chosen():
  t1, b = 4, 3
  batch = Unroll(obs={}, first=jnp.zeros((t1, b), bool), action=jnp.zeros((t1, b), jnp.int32),
                 behaviour_logits=jnp.zeros((t1, b, 2)),
                 reward=jnp.asarray(np.arange(t1 * b, dtype=np.float32).reshape(t1, b)),
                 discount=jnp.ones((t1, b)), task_id=jnp.asarray([[0, 1, 1]] * t1, jnp.int32),
                 core_state=())
  apply = lambda params, stats, obs, first, core: (jnp.zeros((t1, b, 2)), jnp.zeros((t1, b, 2)),
                                                   core)
  stats = popart.init_stats(2)
  outs = {}
  for per_sample in (False, True):
    cfg = actor_critic.LossConfig(discount=0.9, baseline_cost=0.5, entropy_cost=0.0,
                                  reward_mode='none', popart_enabled=True, popart_beta=0.01,
                                  num_tasks=2, popart_per_sample=per_sample)
    outs[per_sample] = impala.loss_fn(apply, cfg)({}, stats, batch)[1]
  vs, mask, tasks = outs[True].extras['vs'], outs[True].extras['mask'], batch.task_id[:-1]
  expected = popart.update_stats(stats, vs, tasks, mask, 0.01, per_sample=True)
  np.testing.assert_allclose(outs[True].new_stats['mu'], expected['mu'], rtol=1e-6)
  # 3 and 6 valid targets: steps 1 - 0.99^3 and 1 - 0.99^6; per batch 0.01 each.
  np.testing.assert_allclose(outs[True].metrics[popart.STEP_METRIC],
                             [1 - 0.99 ** 3, 1 - 0.99 ** 6], rtol=1e-5)
  np.testing.assert_allclose(outs[False].metrics[popart.STEP_METRIC], [0.01, 0.01], rtol=1e-6)


def test_the_setting_reaches_the_loss_and_needs_popart():
  config = importlib.import_module('configs.cartpole').get_config()
  config.popart.enabled = True
  config.popart.step_per = 'sample'
  assert validate_spec(config).loss.popart_per_sample
  config.popart.step_per = 'target'
  with pytest.raises(ConfigError, match='popart.step_per.*batch, sample'):
    validate_spec(config)
  config.popart.enabled = False
  config.popart.step_per = 'sample'
  with pytest.raises(ConfigError, match='popart.step_per.*needs popart.enabled=True'):
    validate_spec(config)
