"""The loss by term and task (rl/impala.py), the clip per term (rl/sgd.py)
and each task's gradient on the shared torso, by hand and against
independent computations; the multi-task options on 4 fake devices."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from agents import learner
from networks import agent as agent_net
from rl import actor_critic, impala, minibatches, optimizers, popart, sgd, task_gradients
from tests.support.synthetic_unroll import random_unroll
from tests.support.network_examples import network_settings

T, B, A, TASKS = 5, 8, 3, 2


class _Out(NamedTuple):
  metrics: dict
  new_stats: dict = None


def test_clip_per_term_by_hand():
  """policy 3 w0 + 4 w1 (gradient norm 5), value 12 w0 (norm 12), entropy
  w1 (norm 1). With clip 1 the policy group (policy + entropy: gradient
  [3, 5], norm sqrt 34) and the value group ([12, 0]) are each scaled to
  norm 1 and added; plain SGD with rate 1 steps by minus their sum."""
  def loss(params, stats, batch, entropy_cost):
    w = params['w']
    return jnp.stack([3 * w[0] + 4 * w[1], 12 * w[0], w[1]])[:, None], _Out({})
  step = sgd.make_sgd_step(loss, optax.sgd(1.0), 'value_head', None, max_grad_norm=1.0,
                           clip_groups=(impala.CLIP_GROUPS, impala.CLIP_GROUP_NAMES))
  params = {'w': jnp.zeros(2)}
  new, _, out = step(params, optax.sgd(1.0).init(params), None, None)
  expected = np.asarray([3.0, 5.0]) / np.sqrt(34.0) + np.asarray([1.0, 0.0])
  np.testing.assert_allclose(new['w'], -expected, rtol=1e-6)
  np.testing.assert_allclose(out.metrics['grad_norm/policy'], np.sqrt(34.0), rtol=1e-6)
  np.testing.assert_allclose(out.metrics['grad_norm/baseline'], 12.0, rtol=1e-6)
  assert out.metrics['grad_clipped'] == 1.0
  # Under the clip a group passes unscaled.
  step = sgd.make_sgd_step(loss, optax.sgd(1.0), 'value_head', None, max_grad_norm=100.0,
                           clip_groups=(impala.CLIP_GROUPS, impala.CLIP_GROUP_NAMES))
  new, _, out = step(params, optax.sgd(1.0).init(params), None, None)
  np.testing.assert_allclose(new['w'], [-15.0, -5.0], rtol=1e-6)
  assert out.metrics['grad_clipped'] == 0.0


def test_the_chain_does_not_clip_when_the_learner_clips_per_term():
  """RMSProp with epsilon 1e6 inside the root is a near-linear step,
  lr g / 1000: with the clip in the chain the gradient [30, 40] is cut to
  norm 1 first, without it (optimizer.clip_by='term') it is not."""
  params = {'w': jnp.zeros(2)}
  grads = {'w': jnp.asarray([30.0, 40.0])}
  for in_chain, expected in ((True, [-0.0006, -0.0008]), (False, [-0.03, -0.04])):
    opt, _ = optimizers.make_optimizer(1.0, 10**9, 1.0, 0.99, 1e6, 0.0, clip_in_chain=in_chain)
    state = opt.init(params)
    updates, _ = opt.update(grads, state, params)
    np.testing.assert_allclose(updates['w'], expected, rtol=1e-4)
    # The clip stays a hyperparameter either way: the sgd step reads it there.
    assert float(optimizers.hyperparameter(state, 'max_grad_norm')) == 1.0


def _network():
  cfg = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': 0, 'torso_kwargs': {},
                                   'core_extra_inputs': False})
  return agent_net.make_network(network_settings(cfg), num_actions=A, num_values=TASKS)


def _setup(seed=0):
  network = _network()
  variables = agent_net.init_variables(network, jax.random.key(seed),
                                       {'state': np.zeros((4,), np.float32)})
  batch = random_unroll(network, np.arange(B) % TASKS, seed, length=T, num_actions=A)
  return network, variables, batch


def _cfg(**kw):
  base = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                                 reward_mode='none', popart_enabled=True, popart_beta=0.1,
                                 num_tasks=TASKS)
  return base._replace(**kw)


def _norm(tree):
  return float(optax.tree.norm(tree))


def test_task_gradient_norms_match_each_tasks_own_loss():
  """Summed loss, advantages not normalised: task k's policy gradient is the
  gradient of the loss (value and entropy weights 0) on task k's columns
  alone, and its value gradient the difference made by the value weight."""
  network, variables, batch = _setup()
  apply = agent_net.apply_fn(network)
  stats = variables['popart'][agent_net.VALUE_HEAD]
  cfg = _cfg()
  report = task_gradients.task_gradient_norms(impala.LEARNER, apply, cfg, variables['params'], stats,
                                             batch, ('torso',))
  for k in range(TASKS):
    cols = np.flatnonzero(np.arange(B) % TASKS == k)
    part = jax.tree.map(lambda x: x[:, cols], batch._replace(core_state=None))
    def grad(baseline_cost, part=part):
      fn = impala.loss_fn(apply, cfg._replace(baseline_cost=baseline_cost, entropy_cost=0.0))
      # Jitted: compiled once, not dispatched op by op (a few seconds less).
      return jax.jit(jax.grad(lambda p: fn(p, stats, part)[0]))(variables['params'])['torso']
    g_policy = grad(0.0)
    g_value = jax.tree.map(jnp.subtract, grad(0.5), g_policy)
    np.testing.assert_allclose(report['task/grad_policy'][k], _norm(g_policy), rtol=1e-4)
    np.testing.assert_allclose(report['task/grad_baseline'][k], _norm(g_value), rtol=1e-4)
  shares = np.concatenate([report['task/grad_share_policy'], report['task/grad_share_baseline']])
  np.testing.assert_allclose(shares.sum(), 1.0, rtol=1e-5)
  # The two tasks' reward scales differ 100x: so do their value gradients.
  assert report['task/grad_baseline'][1] > 10 * report['task/grad_baseline'][0] or (
      report['task/grad_baseline'][0] > 10 * report['task/grad_baseline'][1])


def _run(devices, cfg, clip_in_chain, steps=2):
  network, variables, _ = _setup()
  mesh = learner.make_mesh(devices)
  variables = {**variables, 'popart': {agent_net.VALUE_HEAD: popart.with_start(
      variables['popart'][agent_net.VALUE_HEAD], 'debiased')}}
  optimizer, schedule = optimizers.make_optimizer(1e-3, 100, 0.5, 0.99, 1e-5, 0.0, name='adam',
                                                  clip_in_chain=clip_in_chain)
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, cfg,
                                agent_net.VALUE_HEAD, mesh)
  state = learner.init_state(variables, optimizer, mesh)
  for i in range(steps):
    batch = random_unroll(network, np.arange(B) % TASKS, i, length=T, num_actions=A)
    state, metrics = update(state, learner.shard_batch(batch, mesh))
  return jax.device_get(state), jax.device_get(metrics)


def test_multi_task_options_on_four_devices_match_one_device():
  """Per-task advantages, the clip per term, the debiased start and the
  per-task metrics are global over the learner devices."""
  assert len(jax.devices()) >= 4, 'conftest should fake 4 CPU devices'
  cfg = _cfg(reduction='mean', clip_per_term=True, settings=impala.VTraceConfig(
      normalize_advantages=True, normalize_advantages_per="task"))
  one, m1 = _run(jax.devices()[:1], cfg, clip_in_chain=False)
  four, m4 = _run(jax.devices()[:4], cfg, clip_in_chain=False)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6),
               one.params, four.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               one.popart, four.popart)
  for key in ('task/value_loss', 'task/norm_target_std', 'grad_norm/baseline'):
    np.testing.assert_allclose(m1[key], m4[key], rtol=1e-4)
  assert m1['task/count'].shape == (TASKS,)
  # The debiased start moved each task's weight once per update (beta 0.1,
  # two updates: 1 - 0.9^2).
  np.testing.assert_allclose(one.popart[agent_net.VALUE_HEAD]['weight'], [1 - 0.9 ** 2] * 2,
                             rtol=1e-5)


def test_balanced_minibatches_deal_each_tasks_unrolls_out_evenly():
  """12 unrolls: task 0 has 5, task 1 has 4, task 2 has 3; 3 minibatches of 4.
  Balanced, each minibatch holds 1-2 of task 0 (5 = 2 + 2 + 1), 1-2 of task 1
  and exactly 1 of task 2; every unroll once. At random, some key leaves a
  task out of a minibatch."""
  tasks = np.asarray([0, 1, 2, 0, 1, 0, 2, 1, 0, 2, 1, 0])
  for seed in range(20):
    key = jax.random.key(seed)
    idx = np.asarray(minibatches.unroll_order(key, 12, 3, tasks))
    assert idx.shape == (3, 4) and sorted(idx.ravel()) == list(range(12))
    counts = np.stack([np.bincount(tasks[row], minlength=3) for row in idx])
    assert set(counts[:, 0]) <= {1, 2} and set(counts[:, 1]) <= {1, 2}
    np.testing.assert_array_equal(counts[:, 2], [1, 1, 1])
  missing = [np.any(np.stack([np.bincount(tasks[row], minlength=3) for row in
                              np.asarray(minibatches.unroll_order(jax.random.key(s), 12, 3))]) == 0)
             for s in range(20)]
  assert any(missing)


def test_balanced_minibatches_rotate_by_device_so_the_global_ones_balance_too():
  """4 learner devices whose shards each hold tasks [0, 0, 0, 1, 1, 1], 2
  minibatches: each device gives one minibatch 2 of task 0 and the other 1;
  rotated by the device's index the global minibatches get 6 and 6 (without
  the rotation, 8 and 4)."""
  tasks = np.asarray([0, 0, 0, 1, 1, 1])
  for seed in range(10):
    key = jax.random.key(seed)
    rows = [np.asarray(minibatches.unroll_order(key, 6, 2, tasks, shift=d)) for d in range(4)]
    global_counts = [sum(np.sum(tasks[r[m]] == 0) for r in rows) for m in range(2)]
    assert global_counts == [6, 6], (seed, global_counts)
    same = [np.asarray(minibatches.unroll_order(key, 6, 2, tasks)) for _ in range(4)]
    assert sorted(sum(np.sum(tasks[r[m]] == 0) for r in same) for m in range(2)) == [4, 8]


def test_balanced_per_task_update_runs_on_four_devices():
  """Per-task advantages and balance_tasks with 2 minibatches (the Atari recipe) through the sharded
  learner on 4 fake devices: finite, and the params move."""
  assert len(jax.devices()) >= 4, 'conftest should fake 4 CPU devices'
  cfg = _cfg(reduction='mean', clip_per_term=True, settings=impala.VTraceConfig(
      minibatches=2, balance_tasks=True, normalize_advantages=True,
      normalize_advantages_per='task'))
  network, variables, _ = _setup()
  four, metrics = _run(jax.devices()[:4], cfg, clip_in_chain=False)
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(four.params))
  assert float(metrics['nonfinite/state']) == 0
  moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
              for a, b in zip(jax.tree.leaves(four.params), jax.tree.leaves(variables['params'])))
  assert moved > 0


def test_balanced_update_takes_its_steps_on_the_balanced_minibatches():
  """The learner's update with balance_tasks equals optimiser steps on
  split_unrolls(balance_tasks=True); each of its 2 minibatches holds 2
  unrolls of each of the 2 tasks."""
  network, variables, batch = _setup()
  apply = agent_net.apply_fn(network)
  params, stats = variables['params'], variables['popart'][agent_net.VALUE_HEAD]
  optimizer, _ = optimizers.make_optimizer(1e-3, 100, 0.5, 0.99, 1e-5, 0.0, name='adam')
  cfg = _cfg(reduction='mean', settings=impala.VTraceConfig(
      minibatches=2, balance_tasks=True, normalize_advantages=True,
      normalize_advantages_per='task'))
  update = impala.make_update(apply, cfg, optimizer, agent_net.VALUE_HEAD, None, seed=5)
  got = update(params, optimizer.init(params), stats, batch, 4, ())[0]
  parts = minibatches.split_unrolls(batch, 2, minibatches.shuffle_keys(5, 4, 1)[0], balance_tasks=True)
  for k in range(2):
    np.testing.assert_array_equal(np.bincount(np.asarray(parts.task_id[k, 0]), minlength=TASKS),
                                  [2, 2])
  loss = impala.loss_fn(apply, cfg)
  step = sgd.make_sgd_step(lambda p, s, mb, ec: loss(p, s, mb, ec), optimizer,
                           agent_net.VALUE_HEAD, None, moves_statistics=True)
  p, o, s = params, optimizer.init(params), stats
  for k in range(2):
    p, o, out = step(p, o, s, jax.tree.map(lambda x, k=k: x[k], parts))
    s = out.new_stats
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), got, p)
