"""The bug behind Pong's flat runs: with normalised RMSProp steps, Pong's
almost-constant frames kill the Nature CNN's first layer within a few
updates (docs/pong.md). recipe=a2c's
TensorFlow-form RMSProp must not; PyTorch's form (eps outside the root,
nu from 0) does, which shows the check can fail. And recipe=vtrace's frame
centring keeps conv1 alive under Adam, where uncentred frames leave half of
it dead."""

import jax
import numpy as np
import optax
import pytest

from configs.validation import validate_spec
from rl import impala, optimizers
from rl.types import Unroll
from configs import atari_single
from envs import atari
from networks import agent as agent_net
from tests.support.network_examples import network_settings

B, T, UPDATES = 16, 5, 20


@pytest.fixture(scope='module')
def pong_batches():
  import envpool
  config = atari_single.get_config('game=Pong')
  env = envpool.make('Pong-v5', env_type='gymnasium', num_envs=B, batch_size=B, seed=1,
                     **atari.protocol_kwargs(config.atari, 1))
  obs, _ = env.reset()
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(UPDATES):
    o, a, r, d = [], [], [], []
    for _ in range(T + 1):
      act = rng.integers(0, 6, B)
      o.append(obs)
      a.append(act)
      obs, rew, term, _, _ = env.step(act)
      r.append(rew)
      d.append(1.0 - term)
    a = np.stack(a).astype(np.int32)
    batches.append(Unroll(
        obs={'frames': np.stack(o), 'prev_action': a, 'prev_reward': np.stack(r).astype(np.float32)},
        first=np.zeros((T + 1, B), bool), action=a,
        behaviour_logits=np.zeros((T + 1, B, 6), np.float32),
        reward=np.stack(r).astype(np.float32), discount=np.stack(d).astype(np.float32),
        task_id=np.zeros((T + 1, B), np.int32), core_state=()))
  env.close()
  return batches


def _conv1_dead_after_updates(batches, config):
  network = agent_net.make_network(network_settings(config.network), 6, 1)
  example = {k: v[0, 0] for k, v in batches[0].obs.items()}
  variables = agent_net.init_variables(network, jax.random.key(0), example)
  spec = validate_spec(config)
  optimizer, _ = optimizers.optimizer_from_settings(
      spec.optimizer, spec.run.learning_rate, spec.run.entropy_cost, 10_000,
      spec.optimizer_steps_per_update)
  loss_fn = impala.loss_fn(agent_net.apply_fn(network), spec.loss)
  stats = variables['popart'][agent_net.VALUE_HEAD]

  @jax.jit
  def update(params, opt_state, batch):
    grads, _ = jax.grad(loss_fn, has_aux=True)(params, stats, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params, opt_state = variables['params'], optimizer.init(variables['params'])
  for batch in batches:
    params, opt_state = update(params, opt_state, batch)
  probe = np.concatenate([b.obs['frames'] for b in batches[::4]], axis=1)
  # conv1's per-unit maxima over the probe frames, as the learner's health
  # metrics read them (the fused Nature CNN op has no conv1 output to capture).
  apply = agent_net.apply_fn(network, with_health=True)
  *_, unit_max = apply(params, stats, {'frames': probe}, np.zeros(probe.shape[:2], bool), ())
  conv1 = np.asarray(unit_max['conv1'])
  assert conv1.shape == (20, 20, 32), conv1.shape
  return 1.0 - np.mean(conv1 > 0)


def test_recipe_a2c_keeps_pongs_first_layer_alive_and_pytorch_form_kills_it(pong_batches):
  config = atari_single.get_config('game=Pong,recipe=a2c')
  alive_run = _conv1_dead_after_updates(pong_batches, config)
  with config.unlocked():
    config.optimizer.eps_in_sqrt = False
    config.optimizer.rmsprop_initial_scale = 0.0
  killed_run = _conv1_dead_after_updates(pong_batches, config)
  # At initialisation about 24% of conv1's units are dead for every input.
  assert alive_run < 0.35, alive_run
  assert killed_run > 0.6, killed_run


def _centred(batches):
  """The batches with task ids among the observations (a centring torso reads them)."""
  return [b._replace(obs={**b.obs, 'task_id': b.task_id}) for b in batches]


def _vtrace_conv1_dead(batches, centre: bool, updates_per_batch: int = 8):
  """conv1's dead share after recipe=vtrace's Adam steps on the batches,
  frames centred (on the batches' mean frame, as the learner sets it) or not."""
  from networks import centring
  config = atari_single.get_config('game=Pong')   # recipe=vtrace
  with config.unlocked():
    config.network.centre_frames = centre
  network = agent_net.make_network(network_settings(config.network), 6, 1)
  example = {k: v[0, 0] for k, v in batches[0].obs.items()}
  variables = agent_net.init_variables(network, jax.random.key(0), example, init='orthogonal')
  spec = validate_spec(config)
  optimizer, _ = optimizers.optimizer_from_settings(
      spec.optimizer, spec.run.learning_rate, spec.run.entropy_cost, 10_000,
      spec.optimizer_steps_per_update)
  loss_fn = impala.loss_fn(agent_net.apply_fn(network), spec.loss)
  stats = variables['popart'][agent_net.VALUE_HEAD]
  params = variables['params']
  for b in batches:
    params = centring.update(params, b.obs['frames'], b.task_id)

  @jax.jit
  def update(params, opt_state, batch):
    grads, _ = jax.grad(loss_fn, has_aux=True)(params, stats, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  opt_state = optimizer.init(params)
  for batch in batches:
    for _ in range(updates_per_batch):
      params, opt_state = update(params, opt_state, batch)
  probe = {k: np.concatenate([b.obs[k] for b in batches[::4]], axis=1) for k in batches[0].obs}
  apply = agent_net.apply_fn(network, with_health=True)
  *_, unit_max = apply(params, stats, probe, np.zeros(probe['frames'].shape[:2], bool), ())
  return 1.0 - np.mean(np.asarray(unit_max['conv1']) > 0)


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): Adam steps on real Pong frames, 1-1.5 min
def test_frame_centring_keeps_pongs_first_layer_alive_under_adam(pong_batches):
  """160 of recipe=vtrace's Adam steps on Pong's frames. Uncentred, about
  half of conv1 is dead for every input (a unit on the fixed background
  sees one input; measured 0.56); centred on the frames' mean, each unit's
  input is what changes between frames and none is (measured 0.00)."""
  batches = _centred(pong_batches)
  centred = _vtrace_conv1_dead(batches, centre=True)
  uncentred = _vtrace_conv1_dead(batches, centre=False)
  assert centred < 0.1, centred
  assert uncentred > 0.4, uncentred
