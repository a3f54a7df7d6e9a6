"""The sharded learner update: 4 fake CPU devices equal 1 device, and PopArt
preserves the unnormalised values through a real update."""

import jax
import ml_collections
import numpy as np
import pytest

from agents import learner
from rl import actor_critic, health, impala, optimizers, popart, ppo
from networks import agent as agent_net
from tests.support.synthetic_unroll import random_unroll
from tests.support.network_examples import network_settings

T, B, A, TASKS = 5, 8, 3, 2


def _network(lstm_size):
  cfg = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': lstm_size,
                                   'torso_kwargs': {}, 'core_extra_inputs': False})
  return agent_net.make_network(network_settings(cfg), num_actions=A, num_values=TASKS)


def _batch(network, seed=0):
  return random_unroll(network, np.arange(B) % TASKS, seed, length=T, num_actions=A)


def _run(network, devices, steps=2):
  mesh = learner.make_mesh(devices)
  obs = {'state': np.zeros((4,), np.float32)}
  variables = agent_net.init_variables(network, jax.random.key(0), obs)
  optimizer, schedule = optimizers.make_optimizer(6e-4, 100, 40.0, 0.99, 0.01, 0.0)
  cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                          reward_mode='none', popart_enabled=True, popart_beta=0.1)
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, cfg,
                                agent_net.VALUE_HEAD, mesh)
  state = learner.init_state(variables, optimizer, mesh)
  for i in range(steps):
    state, metrics = update(state, learner.shard_batch(_batch(network, seed=i), mesh))
  return jax.device_get(state), jax.device_get(metrics)


@pytest.mark.parametrize('lstm_size', [0, 16])
def test_four_devices_match_one_device(lstm_size):
  assert len(jax.devices()) >= 4, 'conftest should fake 4 CPU devices'
  network = _network(lstm_size)
  one, m1 = _run(network, jax.devices()[:1])
  four, m4 = _run(network, jax.devices()[:4])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6),
               one.params, four.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               one.popart, four.popart)
  np.testing.assert_allclose(m1['loss/total'], m4['loss/total'], rtol=1e-4)
  assert int(one.step) == int(four.step) == 2
  # The statistics moved, so the comparison covers the PopArt path.
  assert not np.allclose(one.popart[agent_net.VALUE_HEAD]['mu'], 0.0)


def test_update_preserves_unnormalised_values_apart_from_the_gradient_step():
  """With a zero learning rate, an update only changes PopArt statistics and
  the head's rescale, so unnormalised values stay equal to 1e-5."""
  network = _network(0)
  mesh = learner.make_mesh(jax.devices()[:1])
  obs = {'state': np.zeros((4,), np.float32)}
  variables = agent_net.init_variables(network, jax.random.key(1), obs)
  optimizer, schedule = optimizers.make_optimizer(0.0, 100, 40.0, 0.99, 0.01, 0.0)
  cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                          reward_mode='none', popart_enabled=True, popart_beta=0.3)
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, cfg,
                                agent_net.VALUE_HEAD, mesh)
  state = learner.init_state(variables, optimizer, mesh)
  batch = _batch(network)

  def unnormalised(s):
    _, n, _ = agent_net.apply_fn(network)(s.params, s.popart[agent_net.VALUE_HEAD],
                                          batch.obs, batch.first, batch.core_state)
    return popart.sigma(s.popart[agent_net.VALUE_HEAD]) * n + s.popart[agent_net.VALUE_HEAD]['mu']

  before = unnormalised(state)
  new_state, _ = update(state, learner.shard_batch(batch, mesh))
  after = unnormalised(new_state)
  assert not np.allclose(new_state.popart[agent_net.VALUE_HEAD]['mu'], 0.0)
  np.testing.assert_allclose(after, before, atol=1e-5)


@pytest.mark.parametrize('eps_in_sqrt', [True, False])
def test_rmsprop_step_matches_the_hand_formula(eps_in_sqrt):
  """First step from nu = 0: nu = (1 - decay) g^2 and the update is
  -lr g / sqrt(nu + eps) (TensorFlow, IMPALA) or -lr g / (sqrt(nu) + eps)
  (PyTorch, TorchBeast); gradients above the clip are rescaled first."""
  lr, decay, eps, clip = 0.1, 0.99, 0.01, 1.0
  optimizer, _ = optimizers.make_optimizer(lr, 100, clip, decay, eps, 0.0, eps_in_sqrt)
  params = {'w': np.zeros(3, np.float32)}
  g = np.array([0.3, -0.4, 1.2], np.float32)   # norm 1.3 > clip
  updates, _ = optimizer.update({'w': g}, optimizer.init(params), params)
  gc = g / 1.3
  nu = (1 - decay) * gc ** 2
  denom = np.sqrt(nu + eps) if eps_in_sqrt else np.sqrt(nu) + eps
  np.testing.assert_allclose(updates['w'], -lr * gc / denom, rtol=1e-5)


def test_rmsprop_initial_scale_one_starts_with_small_steps():
  """nu starting at 1 (TensorFlow's RMSProp): the first step is
  lr g / (sqrt(decay + (1 - decay) g^2) + eps), not optax's 10 lr sign(g)."""
  lr, decay, eps = 0.1, 0.99, 1e-5
  g = np.array([0.003, -0.004, 0.012], np.float32)
  params = {'w': np.zeros(3, np.float32)}
  steps = {}
  for scale in (0.0, 1.0):
    optimizer, _ = optimizers.make_optimizer(lr, 100, 1e9, decay, eps, 0.0, False, initial_scale=scale)
    steps[scale] = optimizer.update({'w': g}, optimizer.init(params), params)[0]['w']
  np.testing.assert_allclose(steps[1.0], -lr * g / (np.sqrt(decay + (1 - decay) * g ** 2) + eps),
                             rtol=1e-5)
  # From nu = 0: lr g / (0.1 |g| + eps), about 10 lr sign(g) for every parameter.
  np.testing.assert_allclose(steps[0.0], -lr * g / (np.sqrt((1 - decay) * g ** 2) + eps), rtol=1e-5)
  assert np.all(np.abs(steps[0.0]) > 9 * lr) and np.all(np.abs(steps[1.0]) < 0.02 * lr)


def test_adam_first_step_matches_the_hand_formula():
  """optax's Adam from zero moments: m_hat = g and v_hat = g^2 after bias
  correction, so the first step is -lr g / (|g| + eps) after the clip."""
  lr, eps, clip = 0.1, 1e-5, 1.0
  optimizer, _ = optimizers.make_optimizer(lr, 100, clip, 0.99, 0.01, 0.0, name='adam', adam_eps=eps)
  params = {'w': np.zeros(3, np.float32)}
  g = np.array([0.3, -0.4, 1.2], np.float32)   # norm 1.3 > clip
  updates, state = optimizer.update({'w': g}, optimizer.init(params), params)
  gc = g / 1.3
  np.testing.assert_allclose(updates['w'], -lr * gc / (np.abs(gc) + eps), rtol=1e-5)
  # Second step, same gradient: m = (1 - b1^2) g, v = (1 - b2^2) g^2 bias-corrected back to g, g^2.
  updates, _ = optimizer.update({'w': g}, state, params)
  np.testing.assert_allclose(updates['w'], -lr * (99 / 100) * gc / (np.abs(gc) + eps), rtol=1e-4)


def test_ppo_learning_rate_anneals_over_every_optimiser_step():
  """PPO takes epochs x minibatches optimiser steps per update; the schedule
  must reach 0 at the run's last update, not 1/16 of the way."""
  _, schedule = _schedule(ppo.LEARNER, ppo.PPOConfig(epochs=4, minibatches=4))
  np.testing.assert_allclose(float(schedule(50)), 0.5 * LEARNING_RATE, rtol=1e-6)
  np.testing.assert_allclose(float(schedule(100)), 0.0, atol=1e-12)
  _, schedule = _schedule(impala.LEARNER, impala.VTraceConfig())
  np.testing.assert_allclose(float(schedule(50)), 0.5 * LEARNING_RATE, rtol=1e-6)


LEARNING_RATE = 6e-4   # configs/common.RunConfig's default


def _schedule(learner_, settings):
  """(optimizer, schedule) of the default optimiser over 100 learner updates
  of `learner_` with `settings`, as agents/builder.py makes them."""
  return optimizers.optimizer_from_settings(
      optimizers.OptimizerConfig(), LEARNING_RATE, 0.01, total_learner_steps=100,
      steps_per_update=learner_.optimizer_steps(settings))


def _vtrace_update(network, devices, minibatches, epochs=1, seed=0, lr=6e-4):
  mesh = learner.make_mesh(devices)
  obs = {'state': np.zeros((4,), np.float32)}
  variables = agent_net.init_variables(network, jax.random.key(0), obs)
  optimizer, schedule = optimizers.make_optimizer(lr, 100, 40.0, 0.99, 0.01, 0.0, name='adam')
  cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                          reward_mode='none', popart_enabled=True, popart_beta=0.1,
                          reduction='mean',
                          settings=impala.VTraceConfig(epochs=epochs, minibatches=minibatches,
                                                     normalize_advantages=True))
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, cfg,
                                agent_net.VALUE_HEAD, mesh, seed=seed)
  return mesh, update, learner.init_state(variables, optimizer, mesh)


def _columns(batch, cols):
  cols = np.asarray(cols)
  return batch._replace(**{f: getattr(batch, f)[:, cols] for f in
                           ('first', 'action', 'behaviour_logits', 'reward', 'discount', 'task_id')},
                        obs=jax.tree.map(lambda x: x[:, cols], batch.obs),
                        core_state=jax.tree.map(lambda x: x[cols], batch.core_state))


@pytest.mark.parametrize('lstm_size', [0, 16])
def test_vtrace_minibatches_are_sequential_steps_on_each_devices_shuffled_unrolls(lstm_size):
  """epochs x minibatches on 4 devices = one plain step per minibatch on 1
  device, where global minibatch j holds every device's j-th part of its
  own shard (each shuffled with the same key): V-trace, PopArt and the
  optimiser's count all move step by step."""
  network = _network(lstm_size)
  batch = _batch(network)
  epochs, m = 2, 2
  mesh, update, state = _vtrace_update(network, jax.devices()[:4], m, epochs, seed=7)
  new, metrics = update(state, learner.shard_batch(batch, mesh))
  new = jax.device_get(new)

  mesh1, step1, ref = _vtrace_update(network, jax.devices()[:1], 1)
  key = jax.random.fold_in(jax.random.key(7), 0)
  per_device = B // 4
  for epoch_key in jax.random.split(key, epochs):
    perm = np.asarray(jax.random.permutation(epoch_key, per_device)).reshape(m, per_device // m)
    for j in range(m):
      cols = [d * per_device + c for d in range(4) for c in perm[j]]
      ref, _ = step1(ref, learner.shard_batch(_columns(batch, cols), mesh1))
  ref = jax.device_get(ref)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6),
               new.params, ref.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               new.popart, ref.popart)
  assert int(new.step) == 1 and int(ref.step) == epochs * m
  assert float(metrics['kl_update']) > 0


def test_vtrace_one_minibatch_is_the_plain_update_and_anneals_over_every_step():
  """1 x 1 takes the batch as it is (no shuffle); the schedule counts
  epochs x minibatches optimiser steps per update."""
  network = _network(0)
  batch = _batch(network)
  mesh, update, state = _vtrace_update(network, jax.devices()[:1], 1)
  a, _ = update(state, learner.shard_batch(batch, mesh))
  reversed_batch = _columns(batch, np.arange(B)[::-1])
  b, _ = update(state, learner.shard_batch(reversed_batch, mesh))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6),
               jax.device_get(a.params), jax.device_get(b.params))
  settings = impala.VTraceConfig(epochs=2, minibatches=4)
  assert impala.LEARNER.optimizer_steps(settings) == 8
  _, schedule = _schedule(impala.LEARNER, settings)
  np.testing.assert_allclose(float(schedule(50)), 0.5 * LEARNING_RATE, rtol=1e-6)


def test_kl_update_is_the_policy_move_on_the_first_minibatch_by_hand():
  """kl_update = KL(pi_before || pi_after) over the valid steps of the first
  minibatch's first KL_UNROLLS unrolls, pi_before from the params the update
  started with."""
  network = _network(0)
  batch = _batch(network)
  mesh, update, state = _vtrace_update(network, jax.devices()[:1], 1, lr=0.05)
  new, metrics = update(state, learner.shard_batch(batch, mesh))
  apply = agent_net.apply_fn(network)
  part = _columns(batch, np.arange(health.KL_UNROLLS))
  head = agent_net.VALUE_HEAD

  def log_pi(s):
    logits = apply(s.params, s.popart[head], part.obs, part.first, part.core_state)[0][:-1]
    return jax.nn.log_softmax(logits)

  before, after = log_pi(jax.device_get(state)), log_pi(jax.device_get(new))
  kl = np.sum(np.exp(before) * (before - after), axis=-1)
  mask = 1.0 - part.first[1:]
  np.testing.assert_allclose(metrics['kl_update'], np.sum(mask * kl) / np.sum(mask), rtol=1e-4)
  assert float(metrics['kl_update']) > 1e-4
