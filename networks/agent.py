"""The agent network: torso -> optional LSTM core -> policy and value heads.

One code path for acting and learning: inputs are time-major [T, B, ...] (the actor passes T = 1);
the torso sees the flattened [T * B] batch of its observation keys (networks/torsos.py registers
each torso). 'attention' replaces torso and core by networks/attention.py.
"""

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from networks import init as init_lib
from networks.attention import AttentionCore
from networks.core import ResettingLSTM
from networks.heads import (POPART_COLLECTION, VALUE_LOGITS_COLLECTION, CategoricalValueHead,
                            PolicyHead, PopArtValueHead)
from networks.network_config import DTYPES, NetworkConfig
from networks import torsos

VALUE_HEAD = 'value_head'  # name of the PopArt head in params and in the popart collection
# Flax collection of the torsos' per-unit activation maxima (dead ReLUs).
HEALTH_COLLECTION = 'health'

# The core's extra inputs (IMPALA, Espeholt et al. 2018), {key: (shape, dtype)}: observations the
# actor adds, one_hot(prev_action) and clip(prev_reward, -1, 1); both 0 at an episode start.
CORE_EXTRA_INPUTS = {'prev_action': ((), np.int32), 'prev_reward': ((), np.float32)}

def compute_dtype(name: str, platform: str):
  """The torso's dtype for network.dtype; 'auto' is float32 on 'cpu', bfloat16 elsewhere.
  ValueError when `name` is not one of DTYPES."""
  if name not in DTYPES:
    raise ValueError(f'unknown network dtype {name!r}; choose one of {", ".join(DTYPES)}')
  if name == 'auto':
    name = 'float32' if platform == 'cpu' else 'bfloat16'
  return jnp.dtype(name)


class AgentNetwork(nn.Module):
  """Torso, optional recurrent core, policy head and PopArt value head.

  The ResettingLSTM (`lstm_size` > 0) takes the torso's output and the core extra inputs and resets
  where `first` is True. Parameters, the core, the heads and all outputs are float32.

  Attributes:
    torso: network.name: a registered torso, or 'attention' (its policy LSTM needs `lstm_size` > 0).
    torso_kwargs: the torso's keyword arguments, as sorted (name, value) pairs.
    num_values: K, the value head's outputs (one per task with PopArt).
  """
  torso: str
  torso_kwargs: Any
  num_actions: int
  num_values: int
  lstm_size: int = 0  # 0: feed-forward
  # Feed CORE_EXTRA_INPUTS (which obs must then carry) to the recurrent core; unused without one.
  core_extra_inputs: bool = False
  # Observation keys the torso reads beside its own (NLE torsos: networks.nethack.EXTRA_INPUTS).
  extra_inputs: tuple = ()
  # Centre each task's frames on its running mean frame (networks/centring.py):
  # the torso then also reads obs['task_id'] and keeps num_tasks mean frames.
  centre_frames: bool = False
  num_tasks: int = 1
  # The conv layers' implementation (networks/kernels.py); 'auto' chooses by the target platform.
  kernels: str = 'auto'
  # The torso's computation dtype (compute_dtype); its output is float32.
  dtype: Any = jnp.float32
  # A categorical value head of this many bins on [-value_limit, value_limit]
  # (networks/heads.CategoricalValueHead); 0: the scalar PopArt head.
  value_bins: int = 0
  value_limit: float = 10.0

  @nn.compact
  def __call__(self, obs, first, core_state):
    """Runs the network on T steps of B envs.

    Args:
      obs: key -> [T, B, ...]: the torso's keys, CORE_EXTRA_INPUTS with `core_extra_inputs`,
        'task_id' with `centre_frames`.
      first: bool [T, B]; the core's state is zeroed there.
      core_state: the state before the first step; () for a feed-forward network.

    Returns:
      (logits [T, B, A], normalised values [T, B, K], core state after the last step).

    Raises:
      ValueError: core extra inputs missing from obs, or 'attention' with lstm_size 0.
    """
    t, b = first.shape
    extra = self._core_extra_inputs(obs, t, b)
    if self.torso == 'attention':
      self._check_attention()
      centring_kwargs = {'num_centres': self.num_tasks} if self.centre_frames else {}
      x, core_state = AttentionCore(self.lstm_size, **dict(self.torso_kwargs), **centring_kwargs,
                                    kernels=self.kernels, dtype=self.dtype,
                                    name='attention_core')(
                                        obs['frames'], first, extra, core_state,
                                        task_id=obs.get('task_id'))
    else:
      torso = torsos.get(self.torso)
      keys = torso.obs_keys + tuple(self.extra_inputs)
      kwargs = dict(self.torso_kwargs)
      if self.extra_inputs:
        kwargs['extra_inputs'] = tuple(self.extra_inputs)
      if self.centre_frames:
        keys += ('task_id',)
        kwargs['num_centres'] = self.num_tasks
      if torso.convolutional:
        kwargs['kernels'] = self.kernels
      kwargs['dtype'] = self.dtype
      flat = {k: obs[k].reshape((t * b,) + obs[k].shape[2:]) for k in keys}
      x = torso.module(**kwargs, name='torso')(flat)
      x = x.reshape((t, b, -1))
      if self.lstm_size:
        x = jnp.concatenate([x, extra], axis=-1)
        x, core_state = ResettingLSTM(self.lstm_size, name='core')(x, first, core_state)
    logits = PolicyHead(self.num_actions, name='policy_head')(x)
    if self.value_bins:
      values, _ = CategoricalValueHead(self.num_values, self.value_bins, self.value_limit,
                                       name=VALUE_HEAD)(x)
    else:
      values, _ = PopArtValueHead(self.num_values, name=VALUE_HEAD)(x)
    return logits, values, core_state

  def _core_extra_inputs(self, obs, t: int, b: int):
    """[T, B, num_actions + 1], or [T, B, 0] when the core takes none."""
    if not (self.lstm_size and self.core_extra_inputs):
      return jnp.zeros((t, b, 0), jnp.float32)
    missing = [k for k in CORE_EXTRA_INPUTS if k not in obs]
    if missing:
      raise ValueError(
          f'core_extra_inputs is set, so obs needs {sorted(CORE_EXTRA_INPUTS)} [T, B] '
          f'(the actor adds them; give init_variables an example with them too), '
          f'but {missing} are missing from obs keys {sorted(obs)}')
    prev_action = jax.nn.one_hot(obs['prev_action'], self.num_actions, dtype=jnp.float32)
    prev_reward = jnp.clip(obs['prev_reward'].astype(jnp.float32), -1.0, 1.0)[..., None]
    return jnp.concatenate([prev_action, prev_reward], axis=-1)

  def _check_attention(self):
    if not self.lstm_size:
      raise ValueError("network 'attention' needs network.lstm_size > 0: its policy "
                       "LSTM's previous output makes the attention queries")

  def initial_state(self, batch: int):
    """The core state of `batch` envs at the start; () for a feed-forward network."""
    if self.torso == 'attention':
      self._check_attention()
      # parent=None: a detached instance, only to read its sizes (no params).
      core = AttentionCore(self.lstm_size, **dict(self.torso_kwargs), parent=None)
      return core.initial_state(batch)
    if not self.lstm_size:
      return ()
    return ResettingLSTM.initial_state(self.lstm_size, batch)


def make_network(network_config, num_actions: int, num_values: int,
                 num_tasks: int = 1, platform: str = 'cpu', value=None) -> AgentNetwork:
  """The AgentNetwork (no parameters) of the network's settings.

  Args:
    network_config: a NetworkConfig (the spec's `network`).
    platform: the learner devices' platform; resolves network.dtype 'auto'.
    value: rl/value_classification.ValueConfig; None: the scalar head.

  Raises:
    ValueError: an unknown network.dtype, or 'attention' with lstm_size 0.
  """
  c = network_config
  if not isinstance(c, NetworkConfig):
    raise TypeError(f'make_network takes a NetworkConfig, not {type(c).__name__}')
  network = AgentNetwork(
      torso=c.name, torso_kwargs=tuple(sorted(c.torso_kwargs.items())),
      num_actions=num_actions, num_values=num_values, lstm_size=c.lstm_size,
      core_extra_inputs=bool(c.core_extra_inputs), extra_inputs=tuple(c.extra_inputs),
      centre_frames=bool(c.centre_frames), num_tasks=num_tasks, kernels=c.kernels,
      dtype=compute_dtype(c.dtype, platform),
      value_bins=value.bins if value is not None and value.categorical else 0,
      value_limit=value.limit if value is not None else 10.0)
  if network.torso == 'attention':
    network._check_attention()
  return network


def init_variables(network: AgentNetwork, rng, obs_example, batch: int = 1,
                   init: str = 'lecun'):
  """The network's initial variables from one example observation, float32:
  {'params': ..., 'popart': {VALUE_HEAD: {'mu': [K], 'nu': [K]}}}.

  Initialised on `obs_example` (key -> one observation without batch axes) broadcast to
  [1, batch, ...], every step first; the weights are then re-initialised with `init` ('lecun' or
  'orthogonal', networks/init.py; ValueError for another). The health collection is dropped.
  """
  # One compiled program: op by op a NetHack network's init is several times slower.
  @jax.jit
  def initial(rng, obs_example):
    obs = jax.tree.map(lambda x: jnp.broadcast_to(x, (1, batch) + x.shape), obs_example)
    first = jnp.ones((1, batch), bool)
    variables = network.init(rng, obs, first, network.initial_state(batch))
    variables = {k: v for k, v in variables.items()
                 if k not in (HEALTH_COLLECTION, VALUE_LOGITS_COLLECTION)}
    init_key = jax.random.fold_in(rng, 1)
    return {**variables, 'params': init_lib.apply_init(
        variables['params'], init, init_key, policy_head='policy_head', value_head=VALUE_HEAD,
        core='core')}

  return initial(rng, obs_example)


def apply_fn(network: AgentNetwork, with_health: bool = False):
  """The network's apply(params, popart_stats, obs, first, core_state) -> (logits [T, B, A],
  normalised values [T, B, K], core state) in the learner's form, plus with `with_health` a fourth
  output {layer: per-unit max over the batch of its ReLU output} (rl/health.py), and for a
  categorical head its logits [T, B, K, bins] as a fifth (the fourth None without health)."""
  categorical = bool(network.value_bins)
  collections = [HEALTH_COLLECTION] * with_health + [VALUE_LOGITS_COLLECTION] * categorical

  def apply(params, stats, obs, first, core_state):
    variables = {'params': params, POPART_COLLECTION: {VALUE_HEAD: stats}}
    if not collections:
      return network.apply(variables, obs, first, core_state)
    out, sown = network.apply(variables, obs, first, core_state, mutable=collections)
    health = flatten_health(sown.get(HEALTH_COLLECTION, {})) if with_health else None
    if not categorical:
      return (*out, health)
    value_logits = sown[VALUE_LOGITS_COLLECTION][VALUE_HEAD]['sown'][0]
    return (*out, health, value_logits)
  return apply


def flatten_health(sown) -> dict:
  """`health` as {'conv1': x} for {'torso': {'conv1': (x,)}}: paths under the torso, '/'-joined."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(sown))
  out = {}
  for path, value in flat.items():
    names = [p for p in path if p != 'torso']
    out['/'.join(names)] = value[0] if isinstance(value, tuple) else value
  return out
