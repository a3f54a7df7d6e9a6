"""Learner hyperparameters that change mid-run (rl/optimizers.py): the
learning rate, clip threshold, epsilon and entropy cost live in the
optimiser state, so a new value changes the next update as the equations
say, without recompiling it, and checkpoints carry them (old checkpoints
without them restore too)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from agents import learner
from agents.checkpoint import Checkpointer
from networks import agent as agent_net
from rl import actor_critic, optimizers
from tests.support.synthetic_unroll import random_unroll
from tests.support.network_examples import network_settings

T, B, A = 5, 4, 3


def _step(optimizer, grads, opt_state, params):
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return updates, opt_state


def test_new_values_change_the_next_rmsprop_step_as_the_equations_say():
  """RMSProp with nu starting at 0, eps inside the root, decay d, base rate
  lr annealed over N steps, global-norm clip c: after one step at the old
  values, the second step with (lr', c', eps') is
  -lr' (1 - 1/N) g~ / sqrt(nu_2 + eps'), g~ = g min(1, c' / |g|),
  nu_2 = d (1 - d) g1^2 + (1 - d) g~^2."""
  d, n = 0.9, 10
  optimizer, _ = optimizers.make_optimizer(0.1, n, 100.0, d, 0.01, 0.0, eps_in_sqrt=True,
                                           entropy_cost=0.5)
  params = {'w': jnp.zeros(2)}
  g1 = {'w': jnp.asarray([3.0, -4.0])}   # |g1| = 5 < 100: no clip
  state = optimizer.init(params)
  step = jax.jit(lambda g, s: _step(optimizer, g, s, params))
  u1, state = step(g1, state)
  nu1 = (1 - d) * np.array([9.0, 16.0])
  np.testing.assert_allclose(u1['w'], -0.1 * np.array([3.0, -4.0]) / np.sqrt(nu1 + 0.01),
                             rtol=1e-5)

  compiled = step._cache_size()  # for states as the step returns them
  state = optimizers.with_hyperparameters(
      state, {'learning_rate': 0.4, 'max_grad_norm': 2.5, 'eps': 1e-4})
  g2 = {'w': jnp.asarray([6.0, 8.0])}    # |g2| = 10: clipped to norm 2.5
  u2, state = step(g2, state)
  clipped = np.array([6.0, 8.0]) * 2.5 / 10.0
  nu2 = d * nu1 + (1 - d) * clipped ** 2
  expected = -0.4 * (1 - 1 / n) * clipped / np.sqrt(nu2 + 1e-4)
  np.testing.assert_allclose(u2['w'], expected, rtol=1e-5)
  step(g2, state)
  assert step._cache_size() == compiled  # new values, the same compiled step
  held = optimizers.hyperparameters(state)
  assert set(held) == {'learning_rate', 'max_grad_norm', 'eps', 'entropy_cost'}
  np.testing.assert_allclose([held['learning_rate'], held['entropy_cost']], [0.4, 0.5])


def test_adam_epsilon_is_the_injected_one():
  """Adam's first step is -lr g / (|g| + eps) (bias-corrected moments):
  with eps set to |g| it halves."""
  optimizer, _ = optimizers.make_optimizer(0.1, 1_000_000, 1e9, 0.99, 0.01, 0.0, name='adam',
                                           adam_eps=1e-8)
  params = {'w': jnp.zeros(1)}
  g = {'w': jnp.asarray([2.0])}
  state = optimizers.with_hyperparameters(optimizer.init(params), {'eps': 2.0})
  updates, _ = optimizer.update(g, state, params)
  np.testing.assert_allclose(updates['w'], [-0.1 * 2.0 / (2.0 + 2.0)], rtol=1e-5)


def test_unknown_hyperparameter_is_named():
  optimizer, _ = optimizers.make_optimizer(0.1, 10, 1.0, 0.9, 0.01, 0.0)
  with pytest.raises(KeyError, match='entropy_cost.*holds eps, learning_rate, max_grad_norm'):
    optimizers.with_hyperparameters(optimizer.init({'w': jnp.zeros(1)}), {'entropy_cost': 1.0})


def _learner(entropy_in_state, entropy_cost, lr=1e-3, clip=40.0):
  cfg_net = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': 0, 'torso_kwargs': {},
                                       'core_extra_inputs': False})
  network = agent_net.make_network(network_settings(cfg_net), num_actions=A, num_values=1)
  mesh = learner.make_mesh(jax.devices()[:1])
  variables = agent_net.init_variables(network, jax.random.key(0),
                                       {'state': np.zeros((4,), np.float32)})
  optimizer, schedule = optimizers.make_optimizer(
      lr, 100, clip, 0.99, 0.01, 0.0,
      entropy_cost=entropy_cost if entropy_in_state else None)
  cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=entropy_cost,
                          reward_mode='none', popart_enabled=False, popart_beta=0.1)
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, cfg,
                                agent_net.VALUE_HEAD, mesh, clip)
  batch = learner.shard_batch(random_unroll(network, np.zeros(B, np.int32), 0, length=T,
                                            num_actions=A), mesh)
  return update, learner.init_state(variables, optimizer, mesh), batch


def _params(state):
  return jax.tree.leaves(jax.device_get(state.params))


def test_entropy_cost_set_mid_run_is_the_one_the_loss_uses():
  """An update with the entropy cost changed in the state equals, to float
  precision, the update of a learner built with that cost as a constant;
  and it is not the update at the old cost."""
  update, state, batch = _learner(True, 0.01)
  moved = state._replace(opt_state=optimizers.with_hyperparameters(
      state.opt_state, {'entropy_cost': 0.5}))
  changed, metrics = update(moved, batch)
  unchanged, _ = update(state, batch)
  assert update._cache_size() == 1
  fixed_update, fixed_state, _ = _learner(False, 0.5)
  reference, _ = fixed_update(fixed_state, batch)
  for a, b, c in zip(_params(changed), _params(reference), _params(unchanged)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert not all(np.allclose(a, c) for a, c in zip(_params(changed), _params(unchanged)))
  assert float(metrics['hparams/entropy_cost']) == pytest.approx(0.5)


def test_learning_rate_set_mid_run_scales_the_first_step():
  """From the same state and batch, RMSProp's step (nu from 0: linear in the
  rate) with the base rate doubled mid-run is exactly twice the step; the
  logged rate follows the new base."""
  update, state, batch = _learner(True, 0.01, lr=1e-3)
  before = _params(state)
  one, m1 = update(state, batch)
  doubled = state._replace(opt_state=optimizers.with_hyperparameters(
      state.opt_state, {'learning_rate': 2e-3}))
  two, m2 = update(doubled, batch)
  for p0, p1, p2 in zip(before, _params(one), _params(two)):
    np.testing.assert_allclose(p2 - p0, 2 * (p1 - p0), rtol=1e-4, atol=5e-7)  # float32 sums
  assert float(m2['learning_rate']) == pytest.approx(2 * float(m1['learning_rate']))


def test_clip_threshold_set_mid_run_binds():
  update, state, batch = _learner(True, 0.01, clip=1e6)
  _, loose = update(state, batch)
  assert float(loose['grad_clipped']) == 0.0
  tight = state._replace(opt_state=optimizers.with_hyperparameters(
      state.opt_state, {'max_grad_norm': float(loose['grad_norm']) / 10}))
  _, metrics = update(tight, batch)
  assert float(metrics['grad_clipped']) == 1.0


def test_checkpoint_keeps_changed_values(tmp_path):
  update, state, batch = _learner(True, 0.01)
  state = state._replace(opt_state=optimizers.with_hyperparameters(
      state.opt_state, {'learning_rate': 7e-4, 'entropy_cost': 0.03}))
  state, _ = update(state, batch)
  ckpt = Checkpointer(str(tmp_path))
  ckpt.save(100, state, jax.random.key(1))
  _, like, _ = _learner(True, 0.01)
  restored = ckpt.restore(like)['state']
  held = jax.device_get(optimizers.hyperparameters(restored.opt_state))
  np.testing.assert_allclose([held['learning_rate'], held['entropy_cost']], [7e-4, 0.03])
  assert int(restored.opt_state.count) == 1
  ckpt.close()


def test_plain_optax_chain_still_updates():
  """Tools that pass an optimiser without injected hyperparameters (a bare
  optax chain) keep the LossConfig's entropy cost and the given clip."""
  chain = optax.chain(optax.clip_by_global_norm(40.0), optax.sgd(1e-3))
  assert optimizers.hyperparameter(chain.init({'w': jnp.zeros(1)}), 'entropy_cost') is None


@pytest.mark.parametrize('name', optimizers.OPTIMIZERS)
def test_a_horizon_past_optax_int32_steps_updates_at_the_base_rate(name):
  """More optimiser steps than optax's int32 counter holds (the benchmark's
  train stage runs 10**12 env steps: 12.5e9 minibatch steps for Pong) is no
  decay: the update runs, at the base rate, and the schedule says so."""
  optimizer, schedule = optimizers.make_optimizer(0.1, 12_500_000_000, 1e9, 0.99, 0.01, 0.0,
                                                  name=name)
  params = {'w': jnp.zeros(1)}
  updates, _ = jax.jit(optimizer.update)({'w': jnp.asarray([2.0])}, optimizer.init(params), params)
  assert np.isfinite(np.asarray(updates['w'])).all() and float(updates['w'][0]) < 0
  np.testing.assert_allclose(float(schedule(1000)), 0.1, rtol=1e-6)


def test_warmup_scales_the_annealed_rate_step_by_step_as_the_equation_says():
  """Base rate 0.1 annealed over N = 100 optimiser steps, warmup W = 4: step n
  (from 0) takes 0.1 (1 - n / 100) min(1, (n + 1) / 4); Adam's first update
  is -rate_0 g / (|g| + eps) with rate_0 = 0.1 x 1 x 1/4 = 0.025."""
  optimizer, schedule = optimizers.make_optimizer(0.1, 100, 1e9, 0.99, 0.01, 0.0, name='adam',
                                                  adam_eps=1e-5, warmup_steps=4)
  expected = [0.025, 0.0495, 0.0735, 0.097, 0.096, 0.095]   # 0.1 (1 - n/100) min(1, (n+1)/4)
  np.testing.assert_allclose([float(schedule(n)) for n in range(6)], expected, rtol=1e-6)
  params = {'w': jnp.zeros(2)}
  g = {'w': jnp.asarray([3.0, -4.0])}
  u, _ = jax.jit(optimizer.update)(g, optimizer.init(params), params)
  np.testing.assert_allclose(u['w'], -0.025 * np.array([3.0, -4.0]) / (np.array([3.0, 4.0]) + 1e-5),
                             rtol=1e-5)
  with pytest.raises(ValueError, match='warmup_steps must be >= 0'):
    optimizers.make_optimizer(0.1, 100, 1.0, 0.99, 0.01, 0.0, warmup_steps=-1)


def test_warmup_updates_count_learner_updates_of_several_optimiser_steps():
  """optimizer.warmup_updates = 2 with 2 minibatch steps per update is a
  warmup of W = 4 optimiser steps; the logged schedule is indexed by update u
  (optimiser step 2u): u = 0 -> 0.1 x 1/4, u = 1 -> 0.1 (1 - 2/20) x 3/4,
  u = 2 -> 0.1 (1 - 4/20) (10 updates of 2 steps: N = 20)."""
  settings = optimizers.OptimizerConfig(name='adam', warmup_updates=2)
  _, schedule = optimizers.optimizer_from_settings(settings, 0.1, 0.01, total_learner_steps=10,
                                                   steps_per_update=2)
  np.testing.assert_allclose([float(schedule(u)) for u in range(3)], [0.025, 0.0675, 0.08],
                             rtol=1e-6)
  none, _ = optimizers.optimizer_from_settings(optimizers.OptimizerConfig(name='adam'), 0.1, 0.01,
                                               total_learner_steps=10, steps_per_update=2)
  params = {'w': jnp.zeros(1)}
  u, _ = none.update({'w': jnp.asarray([2.0])}, none.init(params), params)
  np.testing.assert_allclose(u['w'], [-0.1 * 2.0 / (2.0 + 1e-5)], rtol=1e-5)   # no warmup: all of it


def test_anneal_to_ends_the_schedule_at_a_fraction_of_the_base_as_the_equation_says():
  """Base 0.1 over N = 10 optimiser steps to anneal_to = 0.25: step n takes
  0.1 (1 - 0.75 min(1, n / 10)): 0.1, 0.0925, 0.0625 (n = 5), 0.025 from n =
  10 on; anneal_to = 1 keeps 0.1; with a warmup of W = 2 step 0 takes half.
  Adam's first step at n = 0 is -0.1 g / (|g| + eps) either way."""
  _, schedule = optimizers.make_optimizer(0.1, 10, 1e9, 0.99, 0.01, 0.0, name='adam',
                                          anneal_to=0.25)
  np.testing.assert_allclose([float(schedule(n)) for n in (0, 1, 5, 10, 11, 1000)],
                             [0.1, 0.0925, 0.0625, 0.025, 0.025, 0.025], rtol=1e-6)
  # a new base mid-run keeps the schedule's place: base 0.2 at n = 5 -> 0.125
  np.testing.assert_allclose(float(schedule(5, base=0.2)), 0.125, rtol=1e-6)
  _, constant = optimizers.make_optimizer(0.1, 10, 1e9, 0.99, 0.01, 0.0, anneal_to=1.0)
  np.testing.assert_allclose([float(constant(n)) for n in (0, 5, 10, 50)], [0.1] * 4, rtol=1e-6)
  _, warm = optimizers.make_optimizer(0.1, 10, 1e9, 0.99, 0.01, 0.0, anneal_to=0.25,
                                      warmup_steps=2)
  np.testing.assert_allclose([float(warm(n)) for n in (0, 1, 2)], [0.05, 0.0925, 0.085], rtol=1e-6)
  # the default anneals to 0, as before: 0.1 (1 - n / 10)
  _, default = optimizers.make_optimizer(0.1, 10, 1e9, 0.99, 0.01, 0.0)
  np.testing.assert_allclose([float(default(n)) for n in (0, 5, 10)], [0.1, 0.05, 0.0], atol=1e-8)
  for bad in (-0.1, 1.5):
    with pytest.raises(ValueError, match=r'anneal_to must be in \[0, 1\]'):
      optimizers.make_optimizer(0.1, 10, 1.0, 0.99, 0.01, 0.0, anneal_to=bad)


def test_anneal_to_from_the_settings_reaches_the_optimisers_steps():
  """optimizer.anneal_to = 0.5, 4 updates of 2 optimiser steps (N = 8): the
  logged schedule at update u is 0.1 (1 - 0.5 min(1, 2u / 8)); plain SGD-like
  check through Adam: at the last optimiser step (n = 8, past the horizon)
  the update is -0.05 g / (|g| + eps)."""
  settings = optimizers.OptimizerConfig(name='adam', anneal_to=0.5)
  optimizer, schedule = optimizers.optimizer_from_settings(settings, 0.1, 0.01,
                                                           total_learner_steps=4,
                                                           steps_per_update=2)
  np.testing.assert_allclose([float(schedule(u)) for u in range(6)],
                             [0.1, 0.0875, 0.075, 0.0625, 0.05, 0.05], rtol=1e-6)
  params = {'w': jnp.zeros(1)}
  state = optimizer.init(params)
  g = {'w': jnp.asarray([2.0])}
  update = jax.jit(optimizer.update)
  for _ in range(8):
    _, state = update(g, state, params)
  u, _ = update(g, state, params)   # optimiser step n = 8: the rate is 0.05
  np.testing.assert_allclose(u['w'], [-0.05 * 2.0 / (2.0 + 1e-5)], rtol=1e-4)
