"""PPO's math by hand: GAE, the clipped surrogate, the value clip, PopArt-PPO
targets, minibatch splitting, and the plain policy gradient as a special case."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import learner
from rl import actor_critic, optimizers, popart, ppo
from rl.types import Unroll
from tests.support.network_examples import network_settings


def _config(**ppo_kw):
  ppo_cfg = ppo.PPOConfig(**{'epochs': 1, 'minibatches': 1, 'clip_epsilon': 0.2,
                                'value_clip_epsilon': 0.0, 'gae_lambda': 0.5,
                                'value_targets': 'gae', 'normalize_advantages': False,
                                'split': 'unrolls', **ppo_kw})
  return actor_critic.LossConfig(discount=0.5, baseline_cost=0.5, entropy_cost=0.0,
                           reward_mode='none', popart_enabled=False, popart_beta=0.5,
                           reduction='sum', name='ppo', settings=ppo_cfg)


def test_gae_by_hand():
  # One column, T = 3, gamma = 0.5 folded into the discounts, lambda = 0.5.
  values = jnp.asarray([[1.0], [2.0], [4.0], [8.0]])
  rewards = jnp.asarray([[1.0], [0.0], [2.0]])
  discounts = jnp.asarray([[0.5], [0.0], [0.5]])   # the second transition terminates
  adv = ppo.gae(values, rewards, discounts, 0.5)
  # delta_2 = 2 + 0.5 * 8 - 4 = 2;       A_2 = 2
  # delta_1 = 0 + 0 * 4 - 2 = -2;        A_1 = -2 + 0 * ... = -2
  # delta_0 = 1 + 0.5 * 2 - 1 = 1;       A_0 = 1 + 0.5 * 0.5 * (-2) = 0.5
  np.testing.assert_allclose(adv[:, 0], [0.5, -2.0, 2.0], rtol=1e-6)
  # lambda = 1: discounted returns minus values; lambda = 0: one-step TD errors.
  np.testing.assert_allclose(ppo.gae(values, rewards, discounts, 0.0)[:, 0], [1.0, -2.0, 2.0])
  np.testing.assert_allclose(ppo.gae(values, rewards, discounts, 1.0)[:, 0],
                             [1.0 + 0.5 * -2.0, -2.0, 2.0])


def _fixed_apply(logits, norm_values):
  """A 'network' whose logits scale with params['scale'] and whose value
  adds params['v']: enough to take gradients through both heads."""
  def apply(params, stats, obs, first, core_state):
    del stats, obs, first
    return logits * params['scale'], norm_values + params['v'], core_state
  return apply


def _unroll(t1=4, b=2, num_actions=2, first=None, behaviour=None):
  rng = np.random.default_rng(0)
  return Unroll(
      obs={}, first=jnp.zeros((t1, b), bool) if first is None else first,
      action=jnp.asarray(rng.integers(0, num_actions, (t1, b)), jnp.int32),
      behaviour_logits=(jnp.zeros((t1, b, num_actions)) if behaviour is None else behaviour),
      reward=jnp.asarray(rng.normal(size=(t1, b)), jnp.float32),
      discount=jnp.ones((t1, b)), task_id=jnp.zeros((t1, b), jnp.int32), core_state=())


def test_targets_gae_at_an_episode_boundary():
  """A reset step (x_{t+1} first) gets advantage 0 and is masked; a
  truncated episode bootstraps from V(x_terminal); gamma 0.5, lambda 0.5."""
  n = jnp.asarray([[[1.0]], [[2.0]], [[4.0]], [[8.0]]])           # [T+1, 1, 1]
  first = jnp.asarray([[False], [False], [True], [False]])       # x_2 starts an episode
  batch = _unroll(t1=4, b=1, first=first)._replace(
      reward=jnp.asarray([[1.0], [3.0], [2.0], [0.0]]), discount=jnp.ones((4, 1)))
  cfg = _config()
  _, t, _ = ppo.targets_fn(_fixed_apply(jnp.zeros((4, 1, 2)), n), cfg)(
      {'scale': 1.0, 'v': 0.0}, popart.init_stats(1), batch)
  # Transition 1 (x_1 -> x_2) is the reset step: reward V(x_1) = 2, discount 0.
  # delta_2 = 2 + 0.5 * 8 - 4 = 2                   -> A_2 = 2
  # delta_1 = 2 + 0 - 2 = 0                         -> A_1 = 0
  # delta_0 = 1 + 0.5 * 2 - 1 = 1 (bootstraps from V(x_1), the terminal obs) -> A_0 = 1
  np.testing.assert_allclose(t.mask[:, 0], [1.0, 0.0, 1.0])
  np.testing.assert_allclose(t.advantage[:, 0], [1.0, 0.0, 2.0], rtol=1e-6)
  np.testing.assert_allclose(t.norm_target[:, 0], [2.0, 2.0, 6.0], rtol=1e-6)   # A + V


def test_vtrace_targets_on_policy_equal_gae_returns():
  """With the behaviour policy equal to the learner's (rho = 1), V-trace(lambda)
  targets are the lambda-returns of GAE, and the policy's target is rlax's
  q_s = r_s + gamma (lambda v_{s+1} + (1 - lambda) V(x_{s+1}))."""
  rng = np.random.default_rng(1)
  n = jnp.asarray(rng.normal(size=(6, 3, 1)), jnp.float32)
  logits = jnp.asarray(rng.normal(size=(6, 3, 2)), jnp.float32)
  batch = _unroll(t1=6, b=3, behaviour=logits)
  params = {'scale': 1.0, 'v': 0.0}
  gae_t = ppo.targets_fn(_fixed_apply(logits, n), _config())(params, popart.init_stats(1), batch)[1]
  vt_t = ppo.targets_fn(_fixed_apply(logits, n), _config(value_targets='vtrace'))(
      params, popart.init_stats(1), batch)[1]
  np.testing.assert_allclose(vt_t.norm_target, gae_t.norm_target, rtol=1e-5, atol=1e-6)
  m = ppo.targets_fn(_fixed_apply(logits, n), _config())(params, popart.init_stats(1), batch)[2]
  np.testing.assert_allclose(m['kl_behaviour'], 0.0, atol=1e-6)   # behaviour = learner
  v = n[..., 0]
  r = batch.reward[:-1]
  vs_next = jnp.concatenate([vt_t.norm_target[1:], v[-1:]], axis=0)
  q = r + 0.5 * (0.5 * vs_next + 0.5 * v[1:])
  np.testing.assert_allclose(vt_t.advantage, q - v[:-1], rtol=1e-5, atol=1e-6)


def test_popart_ppo_targets_by_hand():
  """PopArt: statistics move on the value targets (lambda = 1, gamma = 0.5),
  targets are normalised with the new statistics, the start-of-update value
  is the rescaled head's, and advantages are divided by the new sigma."""
  n = jnp.asarray([[[0.0]], [[1.0]], [[2.0]]])                  # T = 2, B = 1
  stats = {'mu': jnp.asarray([10.0]), 'nu': jnp.asarray([104.0])}  # sigma 2: V = 10, 12, 14
  batch = _unroll(t1=3, b=1)._replace(reward=jnp.asarray([[1.0], [2.0], [0.0]]))
  cfg = _config(gae_lambda=1.0)._replace(popart_enabled=True)
  new_stats, t, _ = ppo.targets_fn(_fixed_apply(jnp.zeros((3, 1, 2)), n), cfg)(
      {'scale': 1.0, 'v': 0.0}, stats, batch)
  # Returns: G_1 = 2 + 0.5 * 14 = 9, G_0 = 1 + 0.5 * 9 = 5.5; mean 7.25, mean sq 55.625.
  np.testing.assert_allclose(new_stats['mu'], [0.5 * 10 + 0.5 * 7.25], rtol=1e-6)
  np.testing.assert_allclose(new_stats['nu'], [0.5 * 104 + 0.5 * 55.625], rtol=1e-6)
  mu, sigma = 8.625, np.sqrt(79.8125 - 8.625 ** 2)
  np.testing.assert_allclose(t.norm_target[:, 0], (np.asarray([5.5, 9.0]) - mu) / sigma, rtol=1e-5)
  np.testing.assert_allclose(t.old_norm_value[:, 0], (np.asarray([10.0, 12.0]) - mu) / sigma,
                             rtol=1e-5)
  np.testing.assert_allclose(t.advantage[:, 0], (np.asarray([5.5, 9.0]) - [10.0, 12.0]) / sigma,
                             rtol=1e-5)
  # The rescaled head gives the same old value: preserve_outputs round trip.
  head = popart.preserve_outputs({'kernel': jnp.ones((1, 1)), 'bias': jnp.zeros(1)}, stats,
                                 new_stats)
  np.testing.assert_allclose(head['kernel'][0, 0] * 1.0 + head['bias'][0], t.old_norm_value[1, 0],
                             rtol=1e-5)


def _minibatch(log_pi_a_learner, behaviour_log_prob, advantage, norm_value=0.0, old=0.0,
               target=0.0):
  """One transition per column, time-major [1, B]: a two-action policy whose
  log-probability of action 0 is given."""
  b = len(advantage)
  p0 = np.exp(np.asarray(log_pi_a_learner))
  logits = jnp.asarray(np.log(np.stack([p0, 1.0 - p0], -1)), jnp.float32)[None]
  t = ppo.Targets(advantage=jnp.asarray([advantage], jnp.float32),
                  norm_target=jnp.full((1, b), target, jnp.float32),
                  old_norm_value=jnp.full((1, b), old, jnp.float32),
                  behaviour_log_prob=jnp.asarray([behaviour_log_prob], jnp.float32),
                  mask=jnp.ones((1, b)))
  mb = ppo.Minibatch(obs={}, first=jnp.zeros((1, b), bool), core_state=(),
                     action=jnp.zeros((1, b), jnp.int32), task_id=jnp.zeros((1, b), jnp.int32),
                     targets=t)
  return logits, jnp.full((1, b, 1), norm_value, jnp.float32), mb


def test_clipped_surrogate_by_hand():
  """-min(r A, clip(r, 0.8, 1.2) A) for each case of the clip (eps 0.2)."""
  ratios = np.asarray([1.5, 0.5, 0.5, 1.5, 1.1])
  advantages = [2.0, 2.0, -2.0, -2.0, 3.0]
  behaviour = np.log(np.full(5, 0.4))
  logits, n, mb = _minibatch(np.log(0.4 * ratios), behaviour, advantages)
  loss, m = ppo.loss_fn(_fixed_apply(logits, n), _config())({'scale': 1.0, 'v': 0.0},
                                                            popart.init_stats(1), mb)
  # r 1.5, A 2: clipped to 1.2 -> 2.4;   r 0.5, A 2: min(1.0, 1.6) = 1.0
  # r 0.5, A -2: min(-1.0, -1.6) = -1.6;  r 1.5, A -2: min(-3, -2.4) = -3
  # r 1.1, A 3: inside the clip -> 3.3
  expected = -(2.4 + 1.0 - 1.6 - 3.0 + 3.3)
  np.testing.assert_allclose(m['loss/policy'] * 5, expected, rtol=1e-5)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)  # no value error, no entropy cost
  np.testing.assert_allclose(m['ppo/clip_fraction'], 0.8, rtol=1e-6)
  # Schulman's k3 estimate of KL(mu || pi): mean of (r - 1) - log r.
  np.testing.assert_allclose(m['ppo/approx_kl'], np.mean((ratios - 1) - np.log(ratios)), rtol=1e-5)


def test_value_clip_by_hand():
  """0.5 max((n - G)^2, (n_old + clip(n - n_old, -eps, eps) - G)^2), eps 0.1."""
  logits, n, mb = _minibatch([np.log(0.5)], [np.log(0.5)], [0.0], norm_value=1.0, old=0.0,
                             target=2.0)
  cfg = _config(value_clip_epsilon=0.1)
  loss, m = ppo.loss_fn(_fixed_apply(logits, n), cfg)({'scale': 1.0, 'v': 0.0},
                                                      popart.init_stats(1), mb)
  # Unclipped (1 - 2)^2 = 1; clipped value 0.1: (0.1 - 2)^2 = 3.61 -> 0.5 * 3.61.
  np.testing.assert_allclose(m['loss/baseline'], 0.5 * 3.61, rtol=1e-5)
  # The clipped branch binds, so the value gets no gradient from it.
  grad_v = jax.grad(lambda p: ppo.loss_fn(_fixed_apply(logits, n), cfg)(
      p, popart.init_stats(1), mb)[0])({'scale': 1.0, 'v': 0.0})['v']
  np.testing.assert_allclose(grad_v, 0.0, atol=1e-7)
  # A value moving towards its target within the clip is not clipped: (0.05 - 2)^2.
  logits, n, mb = _minibatch([np.log(0.5)], [np.log(0.5)], [0.0], norm_value=0.05, target=2.0)
  _, m = ppo.loss_fn(_fixed_apply(logits, n), cfg)({'scale': 1.0, 'v': 0.0},
                                                   popart.init_stats(1), mb)
  np.testing.assert_allclose(m['loss/baseline'], 0.5 * 1.95 ** 2, rtol=1e-5)


def test_advantage_normalisation_by_hand():
  """normalize_advantages: (A - mean) / (std + 1e-8) over the minibatch."""
  logits, n, mb = _minibatch(np.log([0.5, 0.5, 0.5]), np.log([0.25, 0.5, 1.0]), [1.0, 2.0, 6.0])
  cfg = _config(normalize_advantages=True, clip_epsilon=10.0)
  _, m = ppo.loss_fn(_fixed_apply(logits, n), cfg)({'scale': 1.0, 'v': 0.0},
                                                   popart.init_stats(1), mb)
  a = np.asarray([1.0, 2.0, 6.0])
  a = (a - 3.0) / np.sqrt(np.mean((a - 3.0) ** 2))
  ratios = np.asarray([2.0, 1.0, 0.5])
  np.testing.assert_allclose(m['loss/policy'], -np.mean(ratios * a), rtol=1e-5)


def test_one_epoch_without_active_clip_is_the_plain_policy_gradient():
  """epochs = minibatches = 1, behaviour = learner policy (r = 1 at the step,
  so no clip is active): the surrogate's gradient is -sum A grad log pi(a|x)."""
  rng = np.random.default_rng(2)
  t1, b, a = 5, 3, 4
  base = jnp.asarray(rng.normal(size=(t1, b, a)), jnp.float32)
  n = jnp.asarray(rng.normal(size=(t1, b, 1)), jnp.float32)
  batch = _unroll(t1, b, a, behaviour=base)
  apply = _fixed_apply(base, n)
  cfg = _config()
  params = {'scale': jnp.asarray(1.0), 'v': jnp.asarray(0.0)}
  _, t, _ = ppo.targets_fn(apply, cfg)(params, popart.init_stats(1), batch)
  mb = ppo.split_minibatches(batch, t, 1, 'unrolls', jax.random.key(0))
  mb = jax.tree.map(lambda x: x[0], mb)
  cfg0 = cfg._replace(baseline_cost=0.0)
  g_ppo = jax.grad(lambda p: ppo.loss_fn(apply, cfg0)(p, popart.init_stats(1), mb)[0])(params)

  def plain_pg(p):
    log_pi = jax.nn.log_softmax(apply(p, None, None, None, None)[0][:-1])
    log_pi_a = jnp.take_along_axis(log_pi, batch.action[:-1, :, None], -1)[..., 0]
    return -jnp.sum(t.mask * t.advantage * log_pi_a)

  g_pg = jax.grad(plain_pg)(params)
  np.testing.assert_allclose(g_ppo['scale'], g_pg['scale'], rtol=1e-5)
  assert abs(float(g_pg['scale'])) > 1e-3


def _batch_for_split(t1=5, b=4):
  obs = {'x': jnp.arange(t1 * b, dtype=jnp.float32).reshape(t1, b)}
  u = _unroll(t1, b)._replace(obs=obs, core_state=(jnp.arange(b, dtype=jnp.float32),))
  t = ppo.Targets(*[jnp.arange((t1 - 1) * b, dtype=jnp.float32).reshape(t1 - 1, b)] * 5)
  return u, t


def test_split_steps_covers_every_transition_once():
  u, t = _batch_for_split()
  u = u._replace(core_state=())
  mb = ppo.split_minibatches(u, t, 4, 'steps', jax.random.key(3))
  assert mb.obs['x'].shape == (4, 1, 4) and mb.targets.mask.shape == (4, 1, 4)
  seen = np.sort(np.asarray(mb.obs['x']).ravel())
  np.testing.assert_array_equal(seen, np.arange(16))  # rows 0..3 of 5: the bootstrap row is out
  # Each step keeps its own targets and action: obs x = t * B + b = the targets' index.
  np.testing.assert_array_equal(mb.obs['x'], mb.targets.advantage)
  a = np.asarray(u.action[:-1]).ravel()[np.asarray(mb.obs['x'], int)]
  np.testing.assert_array_equal(mb.action, a)
  other = ppo.split_minibatches(u, t, 4, 'steps', jax.random.key(4))
  assert not np.array_equal(other.obs['x'], mb.obs['x'])  # reshuffled per key


def test_split_unrolls_keeps_unrolls_whole():
  u, t = _batch_for_split()
  mb = ppo.split_minibatches(u, t, 2, 'unrolls', jax.random.key(3))
  assert mb.obs['x'].shape == (2, 5, 2) and mb.targets.mask.shape == (2, 4, 2)
  cols = np.asarray(mb.core_state[0]).astype(int)                   # [2, 2] unroll ids
  assert sorted(cols.ravel().tolist()) == [0, 1, 2, 3]
  for i in range(2):
    for j in range(2):
      np.testing.assert_array_equal(mb.obs['x'][i, :, j], np.asarray(u.obs['x'])[:, cols[i, j]])
      np.testing.assert_array_equal(mb.targets.advantage[i, :, j], np.asarray(t.advantage)[:, cols[i, j]])


@pytest.mark.parametrize('split', ['steps', 'unrolls'])
def test_ppo_update_on_four_devices_equals_one(split):
  """One minibatch (shuffling cannot differ), two epochs, PopArt on."""
  import ml_collections
  from networks import agent as agent_net
  from tests.support.synthetic_unroll import random_unroll
  net_cfg = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': 0, 'torso_kwargs': {},
                                       'core_extra_inputs': False})
  network = agent_net.make_network(network_settings(net_cfg), num_actions=3, num_values=2)
  variables = agent_net.init_variables(network, jax.random.key(0),
                                       {'state': np.zeros((4,), np.float32)})
  cfg = _config(epochs=2, minibatches=1, split=split, value_clip_epsilon=0.2,
                normalize_advantages=True)._replace(popart_enabled=True, entropy_cost=0.01)
  results = []
  for n in (1, 4):
    mesh = learner.make_mesh(jax.devices()[:n])
    optimizer, schedule = optimizers.make_optimizer(1e-2, 100, 0.5, 0.99, 1e-5, 0.0, name='adam')
    update = learner.build_update(agent_net.apply_fn(network, with_health=True), optimizer,
                                  schedule, cfg, agent_net.VALUE_HEAD, mesh, 0.5)
    state = learner.init_state(variables, optimizer, mesh)
    batch = random_unroll(network, np.arange(8) % 2, 0, length=5, num_actions=3)
    state, metrics = update(state, learner.shard_batch(batch, mesh))
    results.append((jax.device_get(state), jax.device_get(metrics)))
  (one, m1), (four, m4) = results
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               one.params, four.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               one.popart, four.popart)
  for key in ('loss/total', 'ppo/clip_fraction', 'dead/fc0', 'policy/logit_std'):
    np.testing.assert_allclose(m1[key], m4[key], rtol=1e-4, atol=1e-6)
  assert not np.allclose(one.popart[agent_net.VALUE_HEAD]['mu'], 0.0)
