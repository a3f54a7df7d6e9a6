"""Observation encoders ("torsos"), each reading the observation keys it needs.

Inputs arrive with one flat batch axis [N, ...]; outputs are [N, F].
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.conv import Conv2D
from networks.nethack import (NLE_NUM_GLYPHS, NLEAttentionTorso, NLEBaselineTorso, NLEFastTorso,
                              blstats_mlp)
from networks.pooling import max_pool_3x3_s2


def sow_unit_max(module: nn.Module, name: str, x) -> None:
  """Records a ReLU layer's per-unit maximum over the batch axis (axis 0) in
  the `health` collection: a unit whose maximum is 0 is dead on the batch
  (agents/health.py). A no-op unless the caller makes `health` mutable."""
  module.sow('health', name, jax.lax.stop_gradient(jnp.max(x, axis=0)))


class MLPTorso(nn.Module):
  """For low-dimensional state vectors (classic control): obs['state'] [N, D]."""
  hidden_sizes: tuple = (64, 64)

  @nn.compact
  def __call__(self, obs):
    x = obs['state'].astype(jnp.float32)
    for i, size in enumerate(self.hidden_sizes):
      x = nn.relu(nn.Dense(size)(x))
      sow_unit_max(self, f'fc{i}', x)
    return x


class NatureCNNTorso(nn.Module):
  """The Nature DQN CNN (Mnih et al. 2015), IMPALA's shallow network.

  obs['frames'] uint8 [N, 4, 84, 84] (EnvPool's stacked, channel-first frames).
  """
  hidden_size: int = 512

  @nn.compact
  def __call__(self, obs):
    x = jnp.transpose(obs['frames'], (0, 2, 3, 1)).astype(jnp.float32) / 255.0
    x = nn.relu(Conv2D(32, (8, 8), strides=(4, 4), name='conv1')(x))
    x = nn.relu(Conv2D(64, (4, 4), strides=(2, 2), name='conv2')(x))
    x = nn.relu(Conv2D(64, (3, 3), strides=(1, 1), name='conv3')(x))
    x = x.reshape((x.shape[0], -1))
    return nn.relu(nn.Dense(self.hidden_size, name='fc')(x))


class ResNetTorso(nn.Module):
  """IMPALA's deep network (Espeholt et al. 2018, fig. 3, right).

  obs['frames'] uint8 [N, 4, 84, 84]. Per stage: conv 3x3, max-pool 3x3/2,
  then two residual blocks (relu, conv, relu, conv, + skip); 84 -> 42 -> 21 -> 11.
  """
  channels: tuple = (16, 32, 32)
  num_blocks: int = 2
  hidden_size: int = 256

  @nn.compact
  def __call__(self, obs):
    x = jnp.transpose(obs['frames'], (0, 2, 3, 1)).astype(jnp.float32) / 255.0
    for i, c in enumerate(self.channels):
      x = Conv2D(c, (3, 3), padding='SAME', name=f'stage{i}_conv')(x)
      x = max_pool_3x3_s2(x)
      for j in range(self.num_blocks):
        y = Conv2D(c, (3, 3), padding='SAME', name=f'stage{i}_block{j}_conv0')(nn.relu(x))
        y = Conv2D(c, (3, 3), padding='SAME', name=f'stage{i}_block{j}_conv1')(nn.relu(y))
        x = x + y
    x = nn.relu(x)
    sow_unit_max(self, 'stages', x)
    x = nn.relu(nn.Dense(self.hidden_size, name='fc')(x.reshape((x.shape[0], -1))))
    sow_unit_max(self, 'fc', x)
    return x


class NLESimpleTorso(nn.Module):
  """A first NetHack encoder: glyph embedding + conv over the map + blstats MLP.

  obs['glyphs'] int [N, 21, 79], obs['blstats'] int [N, 27]. Kept small so the
  main job trains at a useful rate on a CPU: the second conv has stride 2.
  """
  embedding_size: int = 16
  channels: tuple = (16, 32)
  hidden_size: int = 256

  @nn.compact
  def __call__(self, obs):
    glyphs = obs['glyphs'].astype(jnp.int32)
    x = nn.Embed(NLE_NUM_GLYPHS, self.embedding_size, name='glyph_embed')(glyphs)
    for i, c in enumerate(self.channels):
      x = nn.elu(Conv2D(c, (3, 3), strides=(1, 1) if i == 0 else (2, 2), padding='SAME',
                        name=f'conv{i + 1}')(x))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(self.hidden_size, name='map_fc')(x))
    b = blstats_mlp(obs['blstats'], 32, names=('blstats_fc1', 'blstats_fc2'))
    x = jnp.concatenate([x, b], axis=-1)
    return nn.relu(nn.Dense(self.hidden_size, name='fc')(x))


TORSOS = {
    'mlp': MLPTorso,
    'shallow': NatureCNNTorso,
    'resnet': ResNetTorso,
    'nle_simple': NLESimpleTorso,
    'nle_baseline': NLEBaselineTorso,    # networks/nethack.py
    'nle_fast': NLEFastTorso,            # networks/nethack.py
    'nle_attention': NLEAttentionTorso,  # networks/nethack.py
}

# The observation keys each torso reads (NLE envs are asked for exactly these).
OBS_KEYS = {
    'mlp': ('state',),
    'shallow': ('frames',),
    'resnet': ('frames',),
    'nle_simple': ('glyphs', 'blstats'),
    'nle_baseline': ('glyphs', 'blstats'),
    'nle_fast': ('glyphs', 'blstats'),
    'nle_attention': ('glyphs', 'blstats'),
    'attention': ('frames',),  # networks/attention.py: not a torso, see NETWORK_NAMES
}

# Every valid network.name: the plain torsos above (AgentNetwork adds the
# optional LSTM core and the heads) and 'attention', which is its own
# recurrent encoder and core.
NETWORK_NAMES = tuple(sorted(OBS_KEYS))
