"""What an accelerator would run, checked on this CPU: the real learner
update and the actors' policy step lowered for CUDA and TPU with
`jax.export` (cross-platform lowering), on the 4 fake devices of
conftest.py.

With network.kernels='auto' (networks/kernels.py) the programs lowered for
an accelerator hold XLA convolutions and none of the CPU path's patch
construction; the program lowered for CPU is the CPU path. The learner
lowers for 4 devices with the multi-device design's shardings: learner
state replicated, every field of the batch split along its batch axis.
"""

import re

import jax
import numpy as np
import pytest

from agents import builder
from agents import learner as learner_lib
from agents.actor import make_act_fn
from agents.rollout import policy_observation_spec
from configs import atari_single, nethack_popart
from configs.validation import validate_spec
from envs import registry
from rl.types import BATCH_AXES, Unroll

ACCELERATORS = ('cuda', 'tpu')


def _agent(config, devices):
  with config.unlocked():
    config.num_learner_devices = devices
  spec = validate_spec(config)
  group = spec.plan.actor_env_groups[0][0]
  num_actions, obs_spec = registry.env_spaces(group.env_id, group.env_kwargs,
                                              spec.plan.observation_keys)
  return builder.build_agent(spec, num_actions, obs_spec), num_actions, obs_spec


def _batch_spec(agent, config, num_actions, obs_spec) -> Unroll:
  """The shapes and shardings of one learner batch."""
  t1, b = config.unroll_length + 1, config.batch_size
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype)
  obs = {k: spec((t1, b) + tuple(s), np.dtype(d)) for k, (s, d) in
         policy_observation_spec(obs_spec).items()}
  core = jax.tree.map(lambda x: spec(x.shape, x.dtype), agent.network.initial_state(b))
  unroll = Unroll(obs=obs, first=spec((t1, b), bool), action=spec((t1, b), np.int32),
                  behaviour_logits=spec((t1, b, num_actions), np.float32),
                  reward=spec((t1, b), np.float32), discount=spec((t1, b), np.float32),
                  task_id=spec((t1, b), np.int32), core_state=core)
  shardings = learner_lib.batch_sharding(agent.mesh, unroll)
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      unroll, shardings)


def _state_spec(agent):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                      agent.state)


def _counts(text):
  return {op: text.count(f'stablehlo.{op}') for op in
          ('convolution', 'dot_general', 'bitcast_convert', 'reduce_window')}


@pytest.fixture(scope='module')
def pong():
  config = atari_single.get_config('game=Pong')   # recipe=vtrace: Nature CNN, centred frames
  agent, num_actions, obs_spec = _agent(config, 4)
  return config, agent, num_actions, obs_spec


@pytest.fixture(scope='module')
def pong_exports(pong):
  config, agent, num_actions, obs_spec = pong
  args = (_state_spec(agent), _batch_spec(agent, config, num_actions, obs_spec))
  return {platform: jax.export.export(agent.update, platforms=(platform,))(*args)
          for platform in ACCELERATORS + ('cpu',)}


@pytest.mark.parametrize('platform', ACCELERATORS)
def test_learner_update_for_an_accelerator_runs_convolutions(pong_exports, platform):
  counts = _counts(pong_exports[platform].mlir_module())
  # conv1..3 forward, and their kernel and input gradients
  assert counts['convolution'] >= 3 + 3 + 2
  assert counts['bitcast_convert'] == 0   # the fused CPU op's uint8 space-to-depth
  cpu = _counts(pong_exports['cpu'].mlir_module())
  assert cpu['convolution'] == 0 and cpu['bitcast_convert'] > 0
  # The CPU path's convolutions are matmuls: far more of them than the dense layers'.
  assert cpu['dot_general'] >= counts['dot_general'] + 10


@pytest.mark.parametrize('platform', ACCELERATORS)
def test_learner_lowers_for_four_devices_with_the_designs_shardings(pong, pong_exports, platform):
  exported = pong_exports[platform]
  assert exported.nr_devices == 4 and exported.platforms == (platform,)
  _, agent, _, _ = pong
  state_leaves = len(jax.tree.leaves(agent.state))
  shardings = exported.in_shardings_jax(agent.mesh)
  axis = learner_lib.AXIS
  # Learner state (params, PopArt statistics, optimiser state, step): replicated.
  assert all(s.is_fully_replicated for s in shardings[:state_leaves])
  # The batch: every field split 4 ways along its batch axis, nothing else split.
  batch_axes = jax.tree.leaves(jax.tree.map(
      lambda batch_axis, field: jax.tree.map(lambda _: batch_axis, field), BATCH_AXES,
      _batch_spec(agent, pong[0], pong[2], pong[3]),
      is_leaf=lambda x: isinstance(x, int)))
  batch_shardings = shardings[state_leaves:]
  assert len(batch_shardings) == len(batch_axes)
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(
      _batch_spec(agent, pong[0], pong[2], pong[3]))]
  # None: an input the program never reads (the core's extra inputs, without a core).
  unread = [p for p, s in zip(paths, batch_shardings) if s is None]
  assert unread == [".obs['prev_action']", ".obs['prev_reward']"]
  for sharding, batch_axis in zip(batch_shardings, batch_axes):
    if sharding is None:
      continue
    spec = tuple(sharding.spec) + (None,) * 5
    assert spec[batch_axis] == axis and all(
        p is None for i, p in enumerate(spec) if i != batch_axis), (sharding.spec, batch_axis)
    assert sharding.num_devices == 4
  # The updated state and the metrics come back replicated.
  assert all(s.is_fully_replicated for s in exported.out_shardings_jax(agent.mesh))


@pytest.mark.parametrize('name', ['shallow', 'resnet', 'attention'])
def test_policy_step_for_an_accelerator_runs_convolutions(name):
  config = atari_single.get_config(f'game=Pong,net={name}')
  agent, num_actions, obs_spec = _agent(config, 1)
  b = config.actors.envs_per_actor
  obs = {k: jax.ShapeDtypeStruct((b,) + tuple(s), np.dtype(d))
         for k, (s, d) in policy_observation_spec(obs_spec).items()}
  core = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                      agent.network.initial_state(b))
  variables = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), agent.variables)
  args = (variables, obs, jax.ShapeDtypeStruct((b,), bool), core,
          jax.ShapeDtypeStruct((), jax.random.key(0).dtype))
  act = make_act_fn(agent.network)
  layers = {'shallow': 3, 'resnet': 15, 'attention': 4}[name]
  cpu = _counts(jax.export.export(act, platforms=('cpu',))(*args).mlir_module())
  for platform in ACCELERATORS:
    counts = _counts(jax.export.export(act, platforms=(platform,))(*args).mlir_module())
    assert counts['convolution'] >= layers, (platform, counts)
    if name == 'resnet':   # stride 1 only: the CPU path acts with XLA's convs too
      assert counts['reduce_window'] == 3 and cpu['reduce_window'] == 0  # max-pools
    else:  # the CPU path's strided convolutions are matmuls (kn2row); none of them here
      assert counts['dot_general'] < cpu['dot_general'], (platform, counts, cpu)


def test_main_job_learner_for_an_accelerator_runs_convolutions():
  config = nethack_popart.get_config()
  agent, num_actions, obs_spec = _agent(config, 2)
  args = (_state_spec(agent), _batch_spec(agent, config, num_actions, obs_spec))
  exported = jax.export.export(agent.update, platforms=('cuda',))(*args)
  counts = _counts(exported.mlir_module())
  # nle_fast: the map's 2 convs and the crop's 5, forward and backward
  assert counts['convolution'] >= 2 * 7 and exported.nr_devices == 2


def test_bfloat16_learner_for_an_accelerator_convolves_in_bfloat16():
  # network.dtype='auto' would choose bfloat16 on the GPU itself; lowered from
  # this CPU host it must be asked for (docs/gpu.md).
  config = atari_single.get_config('game=Pong')
  config.network.dtype = 'bfloat16'
  agent, num_actions, obs_spec = _agent(config, 1)
  args = (_state_spec(agent), _batch_spec(agent, config, num_actions, obs_spec))
  text = jax.export.export(agent.update, platforms=('cuda',))(*args).mlir_module()
  convolutions = [line for line in text.splitlines() if 'stablehlo.convolution' in line]
  assert len(convolutions) >= 8 and all('bf16' in line for line in convolutions)
  # The losses and the optimiser stay float32: the state's leaves are float32.
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(agent.state.params))


def test_bfloat16_main_job_learner_scatters_in_float32():
  # The embedding lookups' gradients are scatter-adds over every cell's glyph
  # (and every message character), mostly the same few rows: in bfloat16 they
  # made the main job's learner 11x slower on an H200 (docs/gpu.md). The
  # lookups read the float32 tables and cast after, so every scatter is f32.
  config = nethack_popart.get_config()
  config.network.dtype = 'bfloat16'
  agent, num_actions, obs_spec = _agent(config, 1)
  args = (_state_spec(agent), _batch_spec(agent, config, num_actions, obs_spec))
  text = jax.export.export(agent.update, platforms=('cuda',))(*args).mlir_module()
  scatter_types = re.findall(r'"stablehlo.scatter"[^^]*\^bb0\(%\w+: tensor<(\w+)>', text)
  assert len(scatter_types) >= 3 and set(scatter_types) == {'f32'}, scatter_types
  convolutions = [line for line in text.splitlines() if 'stablehlo.convolution' in line]
  assert convolutions and all('bf16' in line for line in convolutions)
