"""analysis/update_stats.py: per-term gradients, the clip, the RMSProp step and
the policy change of one update, against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents import learner as learner_lib
from rl import actor_critic, impala, optimizers, popart
from analysis import update_stats
from rl.types import Unroll
from networks.agent import VALUE_HEAD


def _setup(num_actions=3, t1=4, b=2, seed=0):
  """A linear 'network' on fixed features, so gradients are easy to state."""
  rng = np.random.default_rng(seed)
  feats = jnp.asarray(rng.normal(size=(t1, b, 5)), jnp.float32)

  def apply(params, stats, obs, first, core_state):
    x = obs['x']
    return (x @ params['policy_head']['w'], (x @ params[VALUE_HEAD]['kernel'])
            + params[VALUE_HEAD]['bias'], core_state)

  params = {'policy_head': {'w': jnp.asarray(rng.normal(size=(5, num_actions)), jnp.float32)},
            VALUE_HEAD: {'kernel': jnp.asarray(rng.normal(size=(5, 1)), jnp.float32),
                         'bias': jnp.zeros((1,), jnp.float32)}}
  batch = Unroll(obs={'x': feats}, first=jnp.zeros((t1, b), bool),
                 action=jnp.asarray(rng.integers(0, num_actions, (t1, b)), jnp.int32),
                 behaviour_logits=jnp.asarray(rng.normal(size=(t1, b, num_actions)), jnp.float32),
                 reward=jnp.asarray(rng.normal(size=(t1, b)), jnp.float32),
                 discount=jnp.ones((t1, b)), task_id=jnp.zeros((t1, b), jnp.int32),
                 core_state=())
  cfg = actor_critic.LossConfig(discount=0.9, baseline_cost=0.5, entropy_cost=0.01,
                          reward_mode='none', popart_enabled=False, popart_beta=3e-4)
  return apply, params, batch, cfg


def test_term_gradients_add_up_and_each_is_its_own_term():
  apply, params, batch, cfg = _setup()
  stats = popart.init_stats(1)
  g = update_stats.term_gradients(impala.loss_fn, apply, cfg, params, stats, batch)
  total = jax.tree.map(lambda a, b, c: a + b + c, g['policy'], g['baseline'], g['entropy'])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               total, g['total'])
  # The policy and entropy terms never reach the value head, the baseline
  # term never reaches the policy head.
  assert float(optax.tree.norm(g['policy'][VALUE_HEAD])) == 0.0
  assert float(optax.tree.norm(g['entropy'][VALUE_HEAD])) == 0.0
  assert float(optax.tree.norm(g['baseline']['policy_head'])) == 0.0
  # The entropy term by hand: -c_e * sum_t sum_b H(pi(x)) over the T valid steps.
  def neg_entropy(w):
    log_pi = jax.nn.log_softmax(batch.obs['x'][:-1] @ w)
    return cfg.entropy_cost * jnp.sum(jnp.exp(log_pi) * log_pi)
  np.testing.assert_allclose(g['entropy']['policy_head']['w'],
                             jax.grad(neg_entropy)(params['policy_head']['w']),
                             rtol=1e-5, atol=1e-7)


def test_gradient_report_norms_and_clip_scale():
  grads = {'total': {'a': jnp.asarray([30.0, 40.0]), 'b': jnp.asarray([60.0, 80.0])}}
  report = update_stats.gradient_report(grads, max_grad_norm=40.0)
  # |total| = sqrt(50^2 + 100^2)
  np.testing.assert_allclose(report['grad/total'], np.sqrt(50.0 ** 2 + 100.0 ** 2), rtol=1e-6)
  np.testing.assert_allclose(report['grad/total/a'], 50.0, rtol=1e-6)
  np.testing.assert_allclose(report['clip_scale'], 40.0 / np.sqrt(12500.0), rtol=1e-6)
  assert float(update_stats.gradient_report(grads, 1000.0)['clip_scale']) == 1.0


def test_policy_kl_by_hand():
  p = jnp.asarray([[0.0, 0.0], [0.0, 0.0]])
  q = jnp.asarray([[np.log(3.0), 0.0], [5.0, 5.0]])   # (0.75, 0.25); uniform
  mask = jnp.asarray([1.0, 1.0])
  # KL((.5,.5) || (.75,.25)) = 0.5 ln(2/3) + 0.5 ln 2; second row 0.
  expected = (0.5 * np.log(2 / 3) + 0.5 * np.log(2.0)) / 2
  np.testing.assert_allclose(update_stats.policy_kl(p, q, mask), expected, rtol=1e-6)
  np.testing.assert_allclose(update_stats.policy_kl(p, q, jnp.asarray([0.0, 1.0])), 0.0, atol=1e-7)


def test_step_report_on_a_first_rmsprop_step():
  # optax's RMSProp starts nu at 0, so the first step is lr g / (sqrt(0.01 g^2) + eps)
  # = 10 lr sign(g) when eps << |g| (PyTorch placement), for every parameter.
  apply, params, batch, cfg = _setup()
  lr, eps = 1e-3, 1e-8
  optimizer, _ = optimizers.make_optimizer(lr, 1_000_000, 1e9, 0.99, eps, 0.0,
                                            eps_in_sqrt=False)
  state = learner_lib.LearnerState(params=params, popart={VALUE_HEAD: popart.init_stats(1)},
                                   opt_state=optimizer.init(params), step=jnp.zeros((), jnp.int32))
  grads = jax.grad(lambda p: impala.loss_fn(apply, cfg)(p, popart.init_stats(1), batch)[0])(params)
  updates, opt_state = optimizer.update(grads, state.opt_state, params)
  after = state._replace(params=optax.apply_updates(params, updates), opt_state=opt_state,
                         step=state.step + 1)
  report = update_stats.step_report(apply, state, after, batch, lr, eps=1e-3, eps_in_sqrt=False)
  np.testing.assert_allclose(report['step/mean_over_lr'], 10.0, rtol=1e-3)
  np.testing.assert_allclose(report['step/max'], 10 * lr, rtol=1e-3)
  # sqrt(nu) = 0.1 |g| < 1e-3 exactly where |g| < 0.01.
  g = np.concatenate([np.abs(np.asarray(x)).ravel() for x in jax.tree.leaves(grads)])
  np.testing.assert_allclose(report['eps_dominated'], np.mean(0.1 * g < 1e-3), rtol=1e-6)
  # The KL of the step by hand, over the T valid steps.
  log_p = jax.nn.log_softmax(batch.obs['x'][:-1] @ params['policy_head']['w'])
  log_q = jax.nn.log_softmax(batch.obs['x'][:-1] @ after.params['policy_head']['w'])
  kl = np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)
  np.testing.assert_allclose(report['kl_update'], kl.mean(), rtol=1e-3)
  np.testing.assert_allclose(report['kl_update_max'], kl.max(), rtol=1e-3)
  assert float(report['kl_update']) > 0


def test_step_report_on_a_first_adam_step():
  """Adam's first step is lr g / (|g| + eps) after bias correction: about lr
  for every parameter whose |g| >> eps; epsilon dominates sqrt(v_hat) = |g|
  exactly where |g| < eps."""
  apply, params, batch, cfg = _setup()
  lr, eps = 1e-3, 1e-4
  optimizer, _ = optimizers.make_optimizer(lr, 1_000_000, 1e9, 0.99, 0.01, 0.0, name='adam',
                                            adam_eps=eps)
  state = learner_lib.LearnerState(params=params, popart={VALUE_HEAD: popart.init_stats(1)},
                                   opt_state=optimizer.init(params), step=jnp.zeros((), jnp.int32))
  grads = jax.grad(lambda p: impala.loss_fn(apply, cfg)(p, popart.init_stats(1), batch)[0])(params)
  updates, opt_state = optimizer.update(grads, state.opt_state, params)
  after = state._replace(params=optax.apply_updates(params, updates), opt_state=opt_state)
  report = update_stats.step_report(apply, state, after, batch, lr, eps=eps, optimizer='adam')
  g = np.concatenate([np.abs(np.asarray(x)).ravel() for x in jax.tree.leaves(grads)])
  np.testing.assert_allclose(report['step/mean_over_lr'], np.mean(g / (g + eps)), rtol=1e-3)
  np.testing.assert_allclose(report['eps_dominated'], np.mean(g < eps), rtol=1e-6)
