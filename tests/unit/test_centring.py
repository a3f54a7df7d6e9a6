"""networks/centring.py: each task's running mean frame, by hand; through the
network, the learner (4 fake devices equal 1) and the optimiser, which must
never move it."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from agents import learner
from configs import common
from configs.validation import ConfigError, validate
from networks import agent as agent_net
from networks import centring
from rl import actor_critic, impala, optimizers
from rl.types import Unroll
from tests.support.network_examples import network_settings

H = W = 6


def _params(k=2):
  return {'torso': {'conv': {'kernel': jnp.ones((2, 2))},
                    centring.NAME: {'mean': jnp.zeros((k, H, W)), 'count': jnp.zeros(k)}}}


def _frames(t, b, value_of):
  """uint8 [t, b, 4, H, W]: newest frame of (t, b) filled with value_of(t, b), older ones 255."""
  f = np.full((t, b, 4, H, W), 255, np.uint8)
  for i in range(t):
    for j in range(b):
      f[i, j, -1] = value_of(i, j)
  return jnp.asarray(f)


def test_first_batch_sets_each_tasks_mean_and_an_absent_task_keeps_its_row():
  # Columns 0, 1 play task 0 with values 10 and 30; task 1 is absent.
  frames = _frames(3, 2, lambda t, b: 10 * (2 * b + 1))
  task = jnp.zeros((3, 2), jnp.int32)
  p = centring.update(_params(), frames, task)
  c = p['torso'][centring.NAME]
  np.testing.assert_allclose(c['mean'][0], np.full((H, W), 20.0))    # only the newest frame counts
  np.testing.assert_allclose(c['mean'][1], 0.0)
  np.testing.assert_allclose(c['count'], [6.0, 0.0])
  np.testing.assert_array_equal(p['torso']['conv']['kernel'], 1.0)  # other params untouched


def test_later_batches_average_then_decay_with_min_weight():
  p = _params(1)
  task = jnp.zeros((2, 2), jnp.int32)
  p = centring.update(p, _frames(2, 2, lambda t, b: 40), task)          # mean 40, count 4
  p = centring.update(p, _frames(2, 2, lambda t, b: 100), task)         # w = 4 / 8
  np.testing.assert_allclose(p['torso'][centring.NAME]['mean'][0], 70.0, rtol=1e-6)
  # A long history: the weight floors at MIN_WEIGHT, not 4 / (1e6 + 4).
  p['torso'][centring.NAME]['count'] = jnp.asarray([1e6])
  p = centring.update(p, _frames(2, 2, lambda t, b: 170), task)
  np.testing.assert_allclose(p['torso'][centring.NAME]['mean'][0],
                             70.0 + centring.MIN_WEIGHT * 100.0, rtol=1e-6)


def test_params_without_a_centre_are_returned_as_they_are():
  p = {'torso': {'conv': {'kernel': jnp.ones((2, 2))}}}
  assert centring.update(p, _frames(1, 1, lambda t, b: 9), jnp.zeros((1, 1), jnp.int32)) is p


T, B, A = 3, 8, 4


def _network(num_tasks=2, name='shallow'):
  recurrent = name == 'attention'
  cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': 16 if recurrent else 0,
                                   'torso_kwargs': {'frame_size': 36} if recurrent else {},
                                   'core_extra_inputs': False, 'centre_frames': True})
  return agent_net.make_network(network_settings(cfg), num_actions=A, num_values=1,
                                num_tasks=num_tasks)


def _batch(seed=0, size=36):
  rng = np.random.default_rng(seed)
  t1 = T + 1
  task = np.tile(np.arange(B) % 2, (t1, 1)).astype(np.int32)
  frames = rng.integers(0, 256, (t1, B, 4, size, size)).astype(np.uint8)
  frames[..., :size // 2, :] = 90 + 60 * task[..., None, None, None]   # a fixed background per task
  return Unroll(obs={'frames': frames, 'task_id': task},
                first=np.zeros((t1, B), bool), action=rng.integers(0, A, (t1, B)).astype(np.int32),
                behaviour_logits=rng.normal(size=(t1, B, A)).astype(np.float32),
                reward=rng.normal(size=(t1, B)).astype(np.float32),
                discount=np.ones((t1, B), np.float32), task_id=task, core_state=())


def _run(devices, minibatches=1):
  network = _network()
  mesh = learner.make_mesh(devices)
  example = {'frames': np.zeros((4, 36, 36), np.uint8), 'task_id': np.zeros((), np.int32)}
  variables = agent_net.init_variables(network, jax.random.key(0), example, init='orthogonal')
  optimizer, schedule = optimizers.make_optimizer(1e-3, 100, 0.5, 0.99, 0.01, 0.0, name='adam')
  cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                          reward_mode='clip', popart_enabled=False, popart_beta=0.1,
                          reduction='mean', settings=impala.VTraceConfig(minibatches=minibatches))
  update = learner.build_update(agent_net.apply_fn(network, with_health=True), optimizer,
                                schedule, cfg, agent_net.VALUE_HEAD, mesh)
  state = learner.init_state(variables, optimizer, mesh)
  batch = _batch()
  new_state, metrics = update(state, learner.shard_batch(batch, mesh))
  return batch, jax.device_get(state), jax.device_get(new_state)


def test_learner_sets_the_centres_from_the_batch_and_the_optimiser_never_moves_them():
  batch, before, after = _run(jax.devices()[:1], minibatches=2)
  c = after.params['torso'][centring.NAME]
  newest = batch.obs['frames'][:, :, -1].astype(np.float64)
  for k in range(2):
    np.testing.assert_allclose(c['mean'][k], newest[batch.task_id == k].mean(0), rtol=1e-5)
  np.testing.assert_allclose(c['count'], [(T + 1) * B / 2] * 2)
  # The rest of the network trained: its params moved.
  assert not np.allclose(after.params['torso']['conv1']['kernel'],
                         before.params['torso']['conv1']['kernel'])


def test_four_devices_set_the_same_centres_as_one():
  _, _, one = _run(jax.devices()[:1])
  _, _, four = _run(jax.devices()[:4])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4),
               one.params[('torso')][centring.NAME], four.params['torso'][centring.NAME])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5),
               one.params, four.params)


@pytest.mark.parametrize('name,module', [('shallow', 'torso'), ('resnet', 'torso'),
                                         ('attention', 'attention_core')])
def test_the_network_sees_centred_frames(name, module):
  """A frame equal to its task's mean enters the convolutions as zeros: the
  network's output is then that of an all-zero input, for either task."""
  network = _network(name=name)
  example = {'frames': np.zeros((4, 36, 36), np.uint8), 'task_id': np.zeros((), np.int32)}
  variables = agent_net.init_variables(network, jax.random.key(3), example)
  means = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 36, 36)), jnp.float32)
  params = jax.tree.map(lambda x: x, variables['params'])
  assert params[module][centring.NAME]['mean'].shape == (2, 36, 36)
  params[module][centring.NAME]['mean'] = means
  apply = agent_net.apply_fn(network)
  stats = variables['popart'][agent_net.VALUE_HEAD]
  core = network.initial_state(2)
  obs = {'frames': jnp.broadcast_to(means.astype(jnp.uint8)[None, :, None], (1, 2, 4, 36, 36)),
         'task_id': jnp.asarray([[0, 1]], jnp.int32)}
  logits, _, _ = apply(params, stats, obs, jnp.ones((1, 2), bool), core)
  zeros = {'frames': jnp.zeros((1, 2, 4, 36, 36), jnp.uint8), 'task_id': jnp.zeros((1, 2), jnp.int32)}
  params[module][centring.NAME]['mean'] = jnp.zeros_like(means)
  ref, _, _ = apply(params, stats, zeros, jnp.ones((1, 2), bool), core)
  np.testing.assert_allclose(logits, ref, atol=1e-6)
  other = {**obs, 'frames': obs['frames'] // 2}
  moved, _, _ = apply(params, stats, other, jnp.ones((1, 2), bool), core)
  assert not np.allclose(moved, ref, atol=1e-6)   # the input does reach the output


def test_validation_names_the_field():
  c = common.base_config()
  c.tasks = (common.task('CartPole', 'CartPole-v1'),)
  c.network.centre_frames = True          # network 'mlp' reads states, not frames
  with pytest.raises(ConfigError, match="network.centre_frames.*'mlp'.*attention, resnet, shallow.*"
                                        "centre_frames=False"):
    validate(c)
  with c.ignore_type():
    c.network.centre_frames = 'yes'
  with pytest.raises(ConfigError, match='network.centre_frames.*True or False'):
    validate(c)
