"""The IMPALA + PopArt loss on a tiny batch with a fixed "network"."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl import actor_critic, impala, popart
from rl.task_metrics import mean_metrics
from rl.types import Unroll


def _fixed_apply(logits, norm_values):
  def apply(params, stats, obs, first, core_state):
    return logits * params['scale'], norm_values, core_state
  return apply


def _batch(t1=3, b=2, num_actions=2):
  return Unroll(obs={}, first=jnp.zeros((t1, b), bool),
                action=jnp.zeros((t1, b), jnp.int32),
                behaviour_logits=jnp.zeros((t1, b, num_actions)),
                reward=jnp.asarray([[1.0, 10.0], [2.0, 20.0], [0.0, 0.0]]),
                discount=jnp.ones((t1, b)),
                task_id=jnp.asarray([[0, 1]] * t1, jnp.int32), core_state=())


def _config(popart_enabled=True, beta=0.5):
  return actor_critic.LossConfig(discount=0.5, baseline_cost=0.5, entropy_cost=0.01,
                           reward_mode='none', popart_enabled=popart_enabled,
                           popart_beta=beta)


def test_popart_targets_advantages_and_stats_by_hand():
  # Uniform policy equal to the behaviour policy: rho = 1 everywhere.
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0, 0.0], [0.0, 1.0]],
                   [[1.0, 0.0], [0.0, 2.0]],
                   [[2.0, 0.0], [0.0, 3.0]]])          # [T+1, B, K]; column b uses task b
  stats = {'mu': jnp.asarray([0.0, 10.0]), 'nu': jnp.asarray([1.0, 104.0])}  # sigma 1, 2
  loss_fn = impala.loss_fn(_fixed_apply(logits, n), _config())
  _, out = loss_fn({'scale': jnp.ones(())}, stats, _batch())
  # Unnormalised values: task 0: [0, 1, 2]; task 1: 10 + 2 n = [12, 14, 16].
  # Targets (gamma 0.5, rho 1): task 0: v_1 = 2 + 0.5 * 2 = 3, v_0 = 1 + 0.5 * 3 = 2.5
  #                            task 1: v_1 = 20 + 8 = 28,     v_0 = 10 + 14 = 24
  np.testing.assert_allclose(out.extras['vs'], [[2.5, 24.0], [3.0, 28.0]], rtol=1e-6)
  # Stats (beta 0.5): task 0 mean 2.75, mean sq (6.25 + 9) / 2 = 7.625
  #   mu0 = 1.375, nu0 = 0.5 + 3.8125 = 4.3125 -> sigma0 = sqrt(4.3125 - 1.890625)
  #   task 1 mean 26, mean sq (576 + 784) / 2 = 680: mu1 = 18, nu1 = 52 + 340 = 392
  np.testing.assert_allclose(out.new_stats['mu'], [1.375, 18.0], rtol=1e-6)
  np.testing.assert_allclose(out.new_stats['nu'], [4.3125, 392.0], rtol=1e-6)
  sigma_new = np.sqrt([4.3125 - 1.375 ** 2, 392.0 - 18.0 ** 2])
  # Normalised targets (v - mu') / sigma'.
  expected_targets = (np.asarray([[2.5, 24.0], [3.0, 28.0]]) - [1.375, 18.0]) / sigma_new
  np.testing.assert_allclose(out.extras['norm_target'], expected_targets, rtol=1e-5)
  # The rescaled head's normalised value: (V - mu') / sigma', V unnormalised.
  expected_values = (np.asarray([[0.0, 12.0], [1.0, 14.0]]) - [1.375, 18.0]) / sigma_new
  np.testing.assert_allclose(out.extras['norm_value'], expected_values, rtol=1e-5)
  # Advantage rho ((r + gamma v_{s+1} - mu') / sigma' - n'(x_s)): q = r + gamma v_{s+1}
  q = np.asarray([[1.0 + 0.5 * 3.0, 10.0 + 0.5 * 28.0], [2.0 + 0.5 * 2.0, 20.0 + 0.5 * 16.0]])
  expected_pg = (q - [1.375, 18.0]) / sigma_new - expected_values
  np.testing.assert_allclose(out.extras['pg_advantage'], expected_pg, rtol=1e-5, atol=1e-6)


def test_without_popart_one_value_output_and_fixed_stats():
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])  # one output for all tasks
  stats = popart.init_stats(1)
  loss_fn = impala.loss_fn(_fixed_apply(logits, n), _config(popart_enabled=False))
  _, out = loss_fn({'scale': jnp.ones(())}, stats, _batch())
  np.testing.assert_allclose(out.new_stats['mu'], [0.0])
  np.testing.assert_allclose(out.new_stats['nu'], [1.0])
  # Unnormalised advantage: q - V with V = [0, 1]: column 1 (rewards 10, 20).
  q1 = [10.0 + 0.5 * (20.0 + 0.5 * 2.0), 20.0 + 0.5 * 2.0]
  np.testing.assert_allclose(out.extras['pg_advantage'][:, 1],
                             np.asarray(q1) - [0.0, 1.0], rtol=1e-6)


def test_policy_gradient_pushes_up_advantaged_actions():
  logits = jnp.zeros((3, 2, 2))
  n = jnp.zeros((3, 2, 2))
  batch = _batch()._replace(reward=jnp.ones((3, 2)))
  params = {'scale': jnp.ones(())}
  logits_grad = jax.grad(
      lambda lg: impala.loss_fn(_fixed_apply(lg, n[..., :1]), _config(popart_enabled=False))(
          params, popart.init_stats(1), batch)[0])(logits)
  # Action 0 was taken with positive advantage: its logit's gradient is negative.
  assert float(logits_grad[0, 0, 0]) < 0 < float(logits_grad[0, 0, 1])


def test_h_mode_runs_vtrace_on_raw_values_and_learns_in_h_space():
  from rl import rewards
  logits = jnp.zeros((3, 2, 2))
  raw = np.asarray([[0.0, 0.0], [3.0, 8.0], [15.0, 24.0]])  # raw values per step / env
  n = rewards.h(jnp.asarray(raw))[..., None]                   # network outputs h(V)
  cfg = actor_critic.LossConfig(discount=0.5, baseline_cost=0.5, entropy_cost=0.0,
                          reward_mode='h', popart_enabled=False, popart_beta=0.1)
  _, out = impala.loss_fn(_fixed_apply(logits, n), cfg)(
      {'scale': jnp.ones(())}, popart.init_stats(1), _batch())
  # Raw targets, rho = 1: env 0: v_1 = 2 + 0.5 * 15 = 9.5, v_0 = 1 + 0.5 * 9.5 = 5.75
  #                       env 1: v_1 = 20 + 12 = 32,      v_0 = 10 + 16 = 26
  expected = rewards.h(jnp.asarray([[5.75, 26.0], [9.5, 32.0]]))
  np.testing.assert_allclose(out.extras['vs'], expected, rtol=1e-4)


def test_kl_behaviour_and_rho_clipped_by_hand():
  # Learner policy softmax([log 3, 0]) = (0.75, 0.25); behaviour uniform; action 0
  # everywhere, so rho = 0.75 / 0.5 = 1.5 > 1 on every valid step.
  logits = jnp.broadcast_to(jnp.asarray([np.log(3.0), 0.0]), (3, 2, 2))
  loss_fn = impala.loss_fn(_fixed_apply(logits, jnp.zeros((3, 2, 2))), _config(False))
  batch = _batch()
  batch = batch._replace(first=batch.first.at[2, 1].set(True))  # env 1's last step is a reset step
  _, out = loss_fn({'scale': jnp.ones(())}, popart.init_stats(2), batch)
  # KL(mu || pi) = 0.5 ln(0.5 / 0.75) + 0.5 ln(0.5 / 0.25)
  np.testing.assert_allclose(out.metrics['kl_behaviour'],
                             0.5 * np.log(0.5 / 0.75) + 0.5 * np.log(2.0), rtol=1e-5)
  assert float(out.metrics['rho_clipped']) == 1.0
  np.testing.assert_allclose(out.metrics['rho_mean'], 1.5, rtol=1e-5)


def test_mean_reduction_divides_the_summed_loss_by_the_valid_steps():
  logits = jnp.broadcast_to(jnp.asarray([np.log(3.0), 0.0]), (3, 2, 2))
  n = jnp.zeros((3, 2, 1))
  batch = _batch()
  batch = batch._replace(first=batch.first.at[2, 1].set(True))  # 3 valid steps of 4
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  summed, out_sum = impala.loss_fn(_fixed_apply(logits, n), _config(False))(params, stats, batch)
  cfg = _config(False)._replace(reduction='mean')
  mean, out_mean = impala.loss_fn(_fixed_apply(logits, n), cfg)(params, stats, batch)
  np.testing.assert_allclose(mean, summed / 3.0, rtol=1e-6)
  # Same per-step metrics either way; the gradient is 1/3 of the summed one.
  np.testing.assert_allclose(out_mean.metrics['loss/total'], out_sum.metrics['loss/total'], rtol=1e-6)
  g_sum = jax.grad(lambda p: impala.loss_fn(_fixed_apply(logits, n), _config(False))(p, stats, batch)[0])(params)
  g_mean = jax.grad(lambda p: impala.loss_fn(_fixed_apply(logits, n), cfg)(p, stats, batch)[0])(params)
  np.testing.assert_allclose(g_mean['scale'], g_sum['scale'] / 3.0, rtol=1e-5)


def test_normalize_by_hand():
  """(x - mean) / std over the valid entries only; masked entries give 0."""
  x = jnp.asarray([[1.0, 5.0], [3.0, 100.0]])
  mask = jnp.asarray([[1.0, 1.0], [1.0, 0.0]])
  # Valid 1, 5, 3: mean 3, variance (4 + 4 + 0) / 3.
  std = np.sqrt(8.0 / 3.0)
  np.testing.assert_allclose(actor_critic.normalize(x, mask),
                             [[-2.0 / std, 2.0 / std], [0.0, 0.0]], rtol=1e-5, atol=1e-7)


def test_normalized_advantages_weight_the_policy_gradient():
  """With vtrace.normalize_advantages the policy term uses the advantages
  normalised over the valid steps; the raw advantages' RMS is reported."""
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  _, raw = impala.loss_fn(_fixed_apply(logits, n), _config(False))(params, stats, _batch())
  cfg = _config(False)._replace(settings=impala.VTraceConfig(normalize_advantages=True))
  _, out = impala.loss_fn(_fixed_apply(logits, n), cfg)(params, stats, _batch())
  # Raw advantages q - V (gamma 0.5, V = [0, 1] in both columns, rho 1):
  # column 0: q = [1 + 0.5 (2 + 0.5 * 2), 2 + 0.5 * 2] = [2.5, 3] -> [2.5, 2]
  # column 1: q = [10 + 0.5 (20 + 1), 21] = [20.5, 21] -> [20.5, 20]
  a = np.asarray([[2.5, 20.5], [2.0, 20.0]])
  np.testing.assert_allclose(raw.extras['pg_advantage'], a, rtol=1e-6)
  np.testing.assert_allclose(out.extras['pg_advantage'], (a - a.mean()) / a.std(), rtol=1e-5)
  np.testing.assert_allclose(out.metrics['pg_advantage_rms'], np.sqrt(np.mean(a ** 2)), rtol=1e-6)
  # The value targets are not touched.
  np.testing.assert_allclose(out.extras['vs'], raw.extras['vs'], rtol=1e-6)


def test_normalize_per_task_by_hand():
  """Each task's valid entries apart: mean 0, std 1 within the task."""
  x = jnp.asarray([[1.0, 10.0, 7.0], [3.0, 30.0, 9.0], [5.0, 1000.0, 0.0]])
  tasks = jnp.asarray([[0, 1, 2]] * 3)
  mask = jnp.asarray([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  # task 0: 1, 3, 5 (mean 3, std sqrt(8/3)); task 1: 10, 30 (mean 20, std
  # 10; the 1000 is masked); task 2: one entry, 7 - 7 = 0.
  s0 = np.sqrt(8.0 / 3.0)
  out = actor_critic.normalize_per_task(x, mask, tasks, 3)
  np.testing.assert_allclose(out, [[-2.0 / s0, -1.0, 0.0], [0.0, 1.0, 0.0], [2.0 / s0, 0.0, 0.0]],
                             rtol=1e-5, atol=1e-6)


def _two_task_config(**fields):
  return _config(False)._replace(num_tasks=2, settings=impala.VTraceConfig(**fields))


def test_advantages_normalised_per_task():
  """Column 0 plays task 0, column 1 task 1, whose rewards are 10x: over the
  whole batch task 1's advantages would dwarf task 0's; per task both are
  +-1."""
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  cfg = _two_task_config(normalize_advantages=True, normalize_advantages_per='task')
  _, out = impala.loss_fn(_fixed_apply(logits, n), cfg)(params, stats, _batch())
  # Raw advantages [[2.5, 20.5], [2, 20]] (the test above): task 0 mean
  # 2.25, std 0.25; task 1 mean 20.25, std 0.25.
  np.testing.assert_allclose(out.extras['pg_advantage'], [[1.0, 1.0], [-1.0, -1.0]], rtol=1e-5)


def test_task_moments_by_hand():
  """Each task's mean and std over its valid entries; an absent task 0, 0."""
  x = jnp.asarray([[1.0, 10.0], [3.0, 30.0], [5.0, 1000.0]])
  tasks = jnp.asarray([[0, 1]] * 3)
  mask = jnp.asarray([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
  m = actor_critic.task_moments(x, mask, tasks, 3)
  # task 0: 1, 3, 5: mean 3, std sqrt(8/3); task 1: 10, 30 (1000 masked):
  # mean 20, std 10; task 2: no entry.
  np.testing.assert_allclose(m.mean, [3.0, 20.0, 0.0], rtol=1e-6)
  np.testing.assert_allclose(m.std, [np.sqrt(8.0 / 3.0), 10.0, 0.0], rtol=1e-6)
  out = actor_critic.normalize_with(x, mask, tasks, m)
  np.testing.assert_allclose(out, actor_critic.normalize_per_task(x, mask, tasks, 3), rtol=1e-6)


def test_by_term_loss_splits_the_loss_by_term_and_task():
  logits = jnp.zeros((3, 2, 2))   # uniform, as the behaviour policy: rho 1
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  cfg = _two_task_config(normalize_advantages=True)
  apply = _fixed_apply(logits, n)
  total, out = impala.loss_fn(apply, cfg)(params, stats, _batch())
  by_term, _ = impala.loss_fn(apply, cfg, by_term=True)(params, stats, _batch())
  assert by_term.shape == (3, 2)
  np.testing.assert_allclose(jnp.sum(by_term), total, rtol=1e-5)
  # Value term of task 0: 0.5 (baseline cost) x 0.5 x ((2.5 - 0)^2 + (3 - 1)^2);
  # task 1: 0.5 x 0.5 x (20.5^2 + 20^2) (targets of the test above).
  np.testing.assert_allclose(by_term[1], [0.25 * (6.25 + 4.0), 0.25 * (420.25 + 400.0)],
                             rtol=1e-5)
  # Policy term: -sum of advantage x log pi(a) = -A log 0.5 over the task's
  # steps, the advantages [[2.5, 20.5], [2, 20]] normalised over the batch.
  a = np.asarray([[2.5, 20.5], [2.0, 20.0]])
  a = (a - a.mean()) / a.std()
  np.testing.assert_allclose(by_term[0], -a.sum(axis=0) * np.log(0.5), rtol=1e-5)
  # Entropy term: -0.01 x the entropies (log 2 each) of the task's two steps.
  np.testing.assert_allclose(by_term[2], [-0.01 * 2 * np.log(2.0)] * 2, rtol=1e-5)
  # The gradient of the rows' sum is the loss's gradient.
  g = jax.grad(lambda p: impala.loss_fn(apply, cfg)(p, stats, _batch())[0])(params)
  g_rows = jax.grad(lambda p: jnp.sum(impala.loss_fn(apply, cfg, by_term=True)(
      p, stats, _batch())[0]))(params)
  np.testing.assert_allclose(g_rows['scale'], g['scale'], rtol=1e-5)


def test_task_metrics_by_hand():
  """Value loss, normalised targets and raw advantages per task (no PopArt:
  normalised units are reward units)."""
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  _, out = impala.loss_fn(_fixed_apply(logits, n), _two_task_config(normalize_advantages=True))(
      params, stats, _batch())
  m = out.metrics
  # Targets: task 0 [2.5, 3], task 1 [20.5, 21]; values [0, 1] in both.
  np.testing.assert_allclose(m['task/value_loss'], [0.5 * (6.25 + 4.0) / 2,
                                                    0.5 * (420.25 + 400.0) / 2], rtol=1e-5)
  np.testing.assert_allclose(m['task/norm_target_mean'], [2.75, 20.75], rtol=1e-5)
  np.testing.assert_allclose(m['task/norm_target_std'], [0.25, 0.25], rtol=1e-3)
  np.testing.assert_allclose(m['task/advantage_rms'], np.sqrt([5.125, 410.125]), rtol=1e-5)
  np.testing.assert_allclose(m['task/count'], [2.0, 2.0])
  # One task: no per-task metrics.
  _, single = impala.loss_fn(_fixed_apply(logits, n), _config(False))(params, stats, _batch())
  assert not any(k.startswith('task/') for k in single.metrics)


def test_an_updates_task_metrics_weigh_each_minibatch_by_the_tasks_steps():
  steps = {'task/value_loss': jnp.asarray([[1.0, 5.0], [3.0, 0.0]]),
           'task/count': jnp.asarray([[1.0, 4.0], [3.0, 0.0]]),
           'loss/total': jnp.asarray([2.0, 4.0])}
  out = mean_metrics(steps)
  # Task 0: (1 x 1 + 3 x 3) / 4; task 1: only the first step had it.
  np.testing.assert_allclose(out['task/value_loss'], [2.5, 5.0])
  np.testing.assert_allclose(out['task/count'], [4.0, 4.0])
  np.testing.assert_allclose(out['loss/total'], 3.0)


def test_a_loss_refuses_another_learners_settings_and_says_so():
  from rl import ppo
  def LossConfig(**kwargs):
    return actor_critic.LossConfig(0.99, 0.5, 0.01, 'clip', False, 3e-4, **kwargs)
  assert impala.settings(LossConfig()) == impala.VTraceConfig()   # None: the defaults
  with pytest.raises(TypeError, match='reads a VTraceConfig, not PPOConfig'):
    impala.settings(LossConfig(settings=ppo.PPOConfig()))
  with pytest.raises(TypeError, match='reads a PPOConfig, not VTraceConfig'):
    ppo.settings(LossConfig(name='ppo', settings=impala.VTraceConfig()))


def test_the_by_term_loss_counts_every_step_whatever_the_task_count_and_needs_one():
  """Before: one_hot(task, num_tasks) left out the steps of task ids past the
  count (the by-term rows summed to part of the loss, with no error)."""
  logits = jnp.zeros((3, 2, 2))
  n = jnp.asarray([[[0.0]] * 2, [[1.0]] * 2, [[2.0]] * 2])
  params, stats = {'scale': jnp.ones(())}, popart.init_stats(1)
  apply = _fixed_apply(logits, n)
  one_task = _two_task_config()._replace(num_tasks=1)   # task 1's steps are past the count
  total, _ = impala.loss_fn(apply, one_task)(params, stats, _batch())
  by_term, _ = impala.loss_fn(apply, one_task, by_term=True)(params, stats, _batch())
  assert by_term.shape == (3, 1)
  np.testing.assert_allclose(jnp.sum(by_term), total, rtol=1e-5)
  no_count = _two_task_config(normalize_advantages=True)._replace(num_tasks=None)
  with pytest.raises(ValueError, match=r"LossConfig.num_tasks is None: the loss by term"):
    impala.loss_fn(apply, no_count, by_term=True)
  impala.loss_fn(apply, no_count)(params, stats, _batch())   # where it does not matter: fine


def test_a_batch_with_task_ids_outside_the_run_is_stopped_naming_them():
  from agents.update_checks import TaskIdError, check_task_ids
  batch = _batch()
  check_task_ids(batch, 2)
  with pytest.raises(TaskIdError, match=r"a batch holds 3 steps of task id 1, outside the "
                                        r"run's 1 tasks \(0..0\)"):
    check_task_ids(batch, 1)
