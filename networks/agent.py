"""The agent network: torso -> optional LSTM core -> policy and value heads.

One code path for acting and learning: inputs are time-major [T, B, ...]
(the actor passes T = 1). The torso sees the flattened [T * B] batch.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.core import ResettingLSTM
from networks.heads import POPART_COLLECTION, PolicyHead, PopArtValueHead
from networks.torsos import TORSOS

VALUE_HEAD = 'value_head'  # name of the PopArt head in params and in the popart collection


class AgentNetwork(nn.Module):
  """Returns (logits [T, B, A], normalised values [T, B, K], core state)."""
  torso: str
  torso_kwargs: Any
  num_actions: int
  num_values: int
  lstm_size: int = 0  # 0: feed-forward

  @nn.compact
  def __call__(self, obs, first, core_state):
    t, b = first.shape
    flat = jax.tree.map(lambda x: x.reshape((t * b,) + x.shape[2:]), obs)
    x = TORSOS[self.torso](**dict(self.torso_kwargs), name='torso')(flat)
    x = x.reshape((t, b, -1))
    if self.lstm_size:
      x, core_state = ResettingLSTM(self.lstm_size, name='core')(x, first, core_state)
    logits = PolicyHead(self.num_actions, name='policy_head')(x)
    values, _ = PopArtValueHead(self.num_values, name=VALUE_HEAD)(x)
    return logits, values, core_state

  def initial_state(self, batch: int):
    if not self.lstm_size:
      return ()
    return ResettingLSTM.initial_state(self.lstm_size, batch)


def make_network(network_config, num_actions: int, num_values: int) -> AgentNetwork:
  return AgentNetwork(
      torso=network_config.name,
      torso_kwargs=tuple(sorted(dict(network_config.get('torso_kwargs', {})).items())),
      num_actions=num_actions, num_values=num_values,
      lstm_size=network_config.lstm_size)


def init_variables(network: AgentNetwork, rng, obs_example, batch: int = 1):
  """Params and PopArt statistics, from one example observation (no batch axes)."""
  obs = jax.tree.map(lambda x: jnp.broadcast_to(x, (1, batch) + x.shape), obs_example)
  first = jnp.ones((1, batch), bool)
  return network.init(rng, obs, first, network.initial_state(batch))


def apply_fn(network: AgentNetwork):
  """apply(params, popart_stats, obs, first, core_state) in the learner's form."""
  def apply(params, stats, obs, first, core_state):
    return network.apply({'params': params,
                          POPART_COLLECTION: {VALUE_HEAD: stats}},
                         obs, first, core_state)
  return apply
