"""Value as classification (rl/value_classification.py, the categorical head),
against projections and losses worked out by hand."""

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.validation import ConfigError, validate_spec
from networks import agent as agent_net
from networks.heads import CategoricalValueHead
from networks.init import apply_init
from rl import actor_critic, impala, popart
from rl import value_classification as vc
from rl.types import Unroll


def _phi(x):
  return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_support_is_evenly_spaced_on_the_limits():
  np.testing.assert_allclose(vc.support(5, 2.0), [-2.0, -1.0, 0.0, 1.0, 2.0])


def test_hl_gauss_by_hand_on_three_bins():
  # Centres -1, 0, 1 (width 1, edges -1.5, -0.5, 0.5, 1.5), sigma 0.75, target 0:
  # bin 0 holds Phi(-0.5/0.75) - Phi(-1.5/0.75), over the support's mass Phi(2) - Phi(-2).
  probs = vc.hl_gauss(jnp.asarray(0.0), vc.support(3, 1.0), 0.75)
  total = _phi(2.0) - _phi(-2.0)
  side = (_phi(-0.5 / 0.75) - _phi(-2.0)) / total
  np.testing.assert_allclose(probs, [side, 1.0 - 2.0 * side, side], rtol=1e-5)
  np.testing.assert_allclose(side, 0.24069, rtol=1e-4)


def test_hl_gauss_mass_sums_to_one_and_its_mean_is_within_a_bin():
  centres = vc.support(51, 10.0)                     # width 0.4
  targets = jnp.linspace(-9.0, 9.0, 37)
  probs = vc.hl_gauss(targets, centres, 0.75)
  np.testing.assert_allclose(jnp.sum(probs, -1), 1.0, rtol=1e-5)
  recovered = jnp.sum(probs * centres, -1)
  assert float(jnp.max(jnp.abs(recovered - targets))) < 0.4   # one bin
  # Away from the ends the Gaussian is whole: the mean is the target.
  np.testing.assert_allclose(recovered, targets, atol=1e-3)


def test_targets_outside_the_support_clip_to_its_ends():
  centres = vc.support(11, 5.0)
  for projection in vc.PROJECTIONS:
    high = vc.project(projection, jnp.asarray([50.0, 5.0]), centres)
    np.testing.assert_allclose(high[0], high[1], atol=1e-7)    # 50 projects as 5 does
    low = vc.project(projection, jnp.asarray(-1e6), centres)
    assert int(jnp.argmax(low)) == 0 and int(jnp.argmax(high[0])) == 10
  np.testing.assert_allclose(vc.two_hot(jnp.asarray(50.0), centres), jax.nn.one_hot(10, 11))


def test_two_hot_by_hand_and_its_mean_is_exact():
  centres = vc.support(3, 1.0)
  np.testing.assert_allclose(vc.two_hot(jnp.asarray(0.25), centres), [0.0, 0.75, 0.25])
  np.testing.assert_allclose(vc.two_hot(jnp.asarray(-1.0), centres), [1.0, 0.0, 0.0])
  np.testing.assert_allclose(vc.two_hot(jnp.asarray(1.0), centres), [0.0, 0.0, 1.0])
  targets = jnp.linspace(-20.0, 20.0, 81)
  centres = vc.support(255, 20.0)
  probs = vc.two_hot(targets, centres)
  np.testing.assert_allclose(jnp.sum(probs, -1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(jnp.sum(probs * centres, -1), targets, atol=1e-4)


def test_cross_entropy_and_its_gradient():
  logits = jnp.asarray([0.0, jnp.log(2.0), jnp.log(5.0)])    # softmax 1/8, 2/8, 5/8
  target = jnp.asarray([0.0, 0.75, 0.25])
  expected = -(0.75 * math.log(2 / 8) + 0.25 * math.log(5 / 8))
  np.testing.assert_allclose(vc.cross_entropy(logits, target), expected, rtol=1e-6)
  grad = jax.grad(lambda l: vc.cross_entropy(l, target))(logits)
  np.testing.assert_allclose(grad, np.asarray([1, 2, 5]) / 8 - target, atol=1e-6)
  np.testing.assert_allclose(vc.mean(logits, vc.support(3, 1.0)), (-1 + 5) / 8, rtol=1e-6)


def test_symlog_and_symexp_are_inverse():
  x = jnp.asarray([-1000.0, -1.0, 0.0, 0.5, 21.0])
  np.testing.assert_allclose(vc.symlog(x)[1], -math.log(2.0), rtol=1e-6)
  np.testing.assert_allclose(vc.symexp(vc.symlog(x)), x, rtol=1e-5)


def test_return_range_moves_each_tasks_percentiles():
  stats = {'mu': jnp.zeros(1), **vc.init_range(3)}
  targets = jnp.concatenate([jnp.arange(101.0), jnp.asarray([0.2, 0.4])])
  tasks = jnp.concatenate([jnp.zeros(101, jnp.int32), jnp.asarray([1, 1])])
  new = vc.update_return_range(stats, targets, tasks, jnp.ones(103), rate=0.5)
  # task 0: P5 5, P95 95 -> half way from 0; task 1: P5 0.21, P95 0.39; task 2 absent.
  np.testing.assert_allclose(new['return_p5'], [2.5, 0.105, 0.0], rtol=1e-5)
  np.testing.assert_allclose(new['return_p95'], [47.5, 0.195, 0.0], rtol=1e-5)
  # A large range divides the advantages; a small one never multiplies them.
  np.testing.assert_allclose(vc.advantage_scale(new), [45.0, 1.0, 1.0], rtol=1e-5)
  assert 'mu' in new


def _head(k=3, bins=11, limit=5.0, seed=0):
  head = CategoricalValueHead(k, bins, limit)
  x = jax.random.normal(jax.random.key(seed), (4, 6))
  variables = head.init(jax.random.key(1), x)
  params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(jax.random.key(2), p.shape),
                        variables['params'])
  return head, x, params


def test_categorical_head_preserves_its_outputs_when_the_statistics_move():
  head, x, params = _head()
  old = {'mu': jnp.asarray([0.5, -2.0, 1.0]), 'nu': jnp.asarray([1.25, 8.0, 1.5])}
  new = {'mu': jnp.asarray([30.0, -1.0, 0.2]), 'nu': jnp.asarray([1000.0, 3.0, 0.3])}
  before = head.apply({'params': params, 'popart': old}, x)[1]
  rescaled = popart.preserve_outputs(params, old, new)
  after = head.apply({'params': rescaled, 'popart': new}, x)[1]
  np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
  # The categorical itself is untouched: it stays on its support, in the new units.
  np.testing.assert_allclose(rescaled['logits']['kernel'], params['logits']['kernel'])
  assert not np.allclose(rescaled['kernel'], params['kernel'])


def test_rescaled_gradient_leaves_the_logits_layer_alone():
  _, _, params = _head()
  grads = jax.tree.map(jnp.ones_like, params)
  old = {'mu': jnp.zeros(3), 'nu': jnp.ones(3)}
  new = {'mu': jnp.zeros(3), 'nu': jnp.asarray([4.0, 9.0, 1.0])}    # sigma 2, 3, 1
  out = popart.rescale_head_grads({'value_head': grads}, 'value_head', old, new)['value_head']
  np.testing.assert_allclose(out['kernel'], [2.0, 3.0, 1.0])
  np.testing.assert_allclose(out['bias'], [2.0, 3.0, 1.0])
  np.testing.assert_allclose(out['logits']['kernel'], 1.0)


def test_categorical_head_starts_uniform_under_orthogonal_init():
  head, x, _ = _head()
  params = head.init(jax.random.key(1), x)['params']
  params = apply_init({'value_head': params}, 'orthogonal', jax.random.key(3))['value_head']
  np.testing.assert_allclose(params['logits']['kernel'], 0.0)
  np.testing.assert_allclose(params['kernel'], 1.0)
  normalised, _ = head.apply({'params': params, 'popart': popart.init_stats(3)}, x)
  np.testing.assert_allclose(normalised, 0.0, atol=1e-6)     # the uniform's mean


def _batch(t1=3, b=2):
  return Unroll(obs={}, first=jnp.zeros((t1, b), bool), action=jnp.zeros((t1, b), jnp.int32),
                behaviour_logits=jnp.zeros((t1, b, 2)),
                reward=jnp.asarray([[1.0, 10.0], [2.0, 20.0], [0.0, 0.0]]),
                discount=jnp.ones((t1, b)), task_id=jnp.asarray([[0, 1]] * t1, jnp.int32),
                core_state=())


def _categorical_apply(value_logits, affine):
  """A fixed network: uniform policy, a categorical head of given logits
  [T+1, B, K, bins] and affine (kernel, bias) [K] from params."""
  centres = vc.support(value_logits.shape[-1], 2.0)

  def apply(params, stats, obs, first, core_state):
    m = vc.mean(params['logits'], centres)
    n = params['kernel'] * m + params['bias']
    return jnp.zeros(value_logits.shape[:2] + (2,)), n, core_state, None, params['logits']
  return apply, {'logits': value_logits, 'kernel': affine[0], 'bias': affine[1]}


def _config(head, popart_enabled, **kw):
  return actor_critic.LossConfig(discount=0.5, baseline_cost=0.5, entropy_cost=0.0,
                                 reward_mode='none', popart_enabled=popart_enabled,
                                 popart_beta=0.5, num_tasks=2,
                                 value=vc.ValueConfig(head=head, bins=5, limit=2.0, **kw))


def test_loss_cross_entropy_on_the_normalised_target_with_popart():
  logits = jax.random.normal(jax.random.key(0), (3, 2, 2, 5))
  apply, params = _categorical_apply(logits, (jnp.ones(2), jnp.zeros(2)))
  stats = {'mu': jnp.asarray([0.0, 10.0]), 'nu': jnp.asarray([1.0, 104.0])}
  _, out = impala.loss_fn(apply, _config('two_hot', True))(params, stats, _batch())
  norm_target, mask = out.extras['norm_target'], out.extras['mask']
  # Each step's head: column b reads task b's logits.
  own = jnp.stack([logits[:-1, 0, 0], logits[:-1, 1, 1]], axis=1)
  expected_ce = vc.cross_entropy(own, vc.two_hot(norm_target, vc.support(5, 2.0)))
  np.testing.assert_allclose(out.metrics['loss/value_ce'],
                             jnp.sum(mask * expected_ce) / jnp.sum(mask), rtol=1e-5)
  expected_sq = 0.5 * (norm_target - out.extras['norm_value']) ** 2
  np.testing.assert_allclose(out.metrics['loss/baseline'],
                             jnp.sum(mask * (expected_ce + expected_sq)) / jnp.sum(mask), rtol=1e-5)


def test_loss_without_popart_learns_symlog_targets_and_scales_advantages_per_task():
  logits = jnp.zeros((3, 2, 1, 5))                       # uniform: value symexp(0) = 0
  apply, params = _categorical_apply(logits, (jnp.ones(1), jnp.zeros(1)))
  stats = {**popart.init_stats(1), 'return_p5': jnp.asarray([0.0, 0.0]),
           'return_p95': jnp.asarray([2.0, 50.0])}
  cfg = _config('hl_gauss', False, range_rate=0.5)
  _, out = impala.loss_fn(apply, cfg)(params, stats, _batch())
  # V = 0 everywhere, gamma 0.5, rho 1: task 0 v = [2, 2], task 1 v = [20, 20] (column 1).
  raw_vs = np.asarray([[1.0 + 0.5 * 2.0, 10.0 + 0.5 * 20.0], [2.0, 20.0]])
  np.testing.assert_allclose(out.extras['vs'], np.sign(raw_vs) * np.log1p(np.abs(raw_vs)),
                             rtol=1e-6)
  # Ranges: task 0 targets {2}: P5 = P95 = 2 -> (1, 2); task 1 {20}: (10, 35).
  np.testing.assert_allclose(out.new_stats['return_p5'], [1.0, 10.0], rtol=1e-6)
  np.testing.assert_allclose(out.new_stats['return_p95'], [2.0, 35.0], rtol=1e-6)
  # Advantages q - V in reward units over max(1, P95 - P5): 1 and 25.
  q = raw_vs    # with V = 0, q_s = r_s + gamma v_{s+1} = v_s here
  np.testing.assert_allclose(out.extras['pg_advantage'], q / np.asarray([1.0, 25.0]), rtol=1e-5)


def test_settings_checked_at_start_up():
  config = importlib.import_module('configs.cartpole').get_config()
  config.value.head = 'hl_gauss'
  assert validate_spec(config).loss.value.categorical
  config.value.bins = 1
  with pytest.raises(ConfigError, match='value.bins'):
    validate_spec(config)
  config.value.bins = 51
  config.reward_mode = 'h'
  with pytest.raises(ConfigError, match="value.head.*reward_mode='h'"):
    validate_spec(config)
  config.reward_mode = 'none'
  config.loss.name = 'ppo'
  with pytest.raises(ConfigError, match="value.head.*implemented for loss.name='impala'"):
    validate_spec(config)
  config.loss.name = 'impala'
  config.value.head = 'gauss'
  with pytest.raises(ConfigError, match='value.head.*scalar, hl_gauss, two_hot'):
    validate_spec(config)


def test_network_of_a_categorical_head_gives_its_logits_to_the_loss():
  config = importlib.import_module('configs.cartpole').get_config()
  config.value.head = 'two_hot'
  spec = validate_spec(config)
  network = agent_net.make_network(spec.network, num_actions=2, num_values=1, value=spec.value)
  variables = agent_net.init_variables(network, jax.random.key(0), {'state': jnp.zeros(4)},
                                       init='orthogonal')
  out = agent_net.apply_fn(network)(variables['params'], variables['popart']['value_head'],
                                    {'state': jnp.ones((3, 2, 4))}, jnp.zeros((3, 2), bool), ())
  assert len(out) == 5 and out[3] is None
  assert out[4].shape == (3, 2, 1, spec.value.bins)
  np.testing.assert_allclose(out[1], 0.0, atol=1e-6)   # uniform at the start


def test_a_tasks_first_debiased_statistics_leave_the_categorical_affine_alone():
  _, _, params = _head()
  old = {'mu': jnp.asarray([0.0, 2.0, 0.0]), 'nu': jnp.asarray([1.0, 13.0, 1.0]),
         'weight': jnp.asarray([0.0, 0.5, 0.0])}     # tasks 0 and 2 not yet updated
  new = {'mu': jnp.asarray([100.0, 3.0, 0.0]), 'nu': jnp.asarray([20000.0, 25.0, 1.0]),
         'weight': jnp.asarray([0.1, 0.55, 0.0])}    # task 2 still absent
  source = popart.preserved_from(old, new)
  np.testing.assert_allclose(source['mu'], [100.0, 2.0, 0.0])
  np.testing.assert_allclose(source['nu'], [20000.0, 13.0, 1.0])
  rescaled = popart.rescale_head({'value_head': params}, 'value_head', source, new)['value_head']
  # Task 0 keeps its affine; task 1 is rescaled from sigma 3 to 4, mu 2 to 3.
  np.testing.assert_allclose(rescaled['kernel'][0], params['kernel'][0], rtol=1e-6)
  np.testing.assert_allclose(rescaled['kernel'][1], params['kernel'][1] * 3 / 4, rtol=1e-5)
  np.testing.assert_allclose(rescaled['bias'][1], (3 * params['bias'][1] + 2 - 3) / 4, rtol=1e-5)
  grads = popart.rescale_head_grads({'value_head': jax.tree.map(jnp.ones_like, params)},
                                    'value_head', source, new)['value_head']
  np.testing.assert_allclose(grads['kernel'], [1.0, 4 / 3, 1.0], rtol=1e-5)
  # The loss hands these statistics to the optimiser step (LossOutput.preserve_from);
  # a Dense head is rescaled from the placeholder as before.
  dense = {'kernel': jnp.ones((2, 3)), 'bias': jnp.zeros(3)}
  out = popart.rescale_head({'v': dense}, 'v', old, new)['v']
  np.testing.assert_allclose(out['kernel'][0, 0], 1.0 / np.sqrt(20000.0 - 100.0 ** 2), rtol=1e-5)
