"""Observation encoders ("torsos"), each reading the observation keys it needs.

Inputs arrive with one flat batch axis [N, ...]; outputs are [N, F].
"""

import functools

import flax.linen as nn
import jax.numpy as jnp

from networks.conv import Conv2D

NLE_NUM_GLYPHS = 5976 + 1  # nle.nethack.MAX_GLYPH + 1; kept literal so networks/ needs no NLE import.


class MLPTorso(nn.Module):
  """For low-dimensional state vectors (classic control): obs['state'] [N, D]."""
  hidden_sizes: tuple = (64, 64)

  @nn.compact
  def __call__(self, obs):
    x = obs['state'].astype(jnp.float32)
    for size in self.hidden_sizes:
      x = nn.relu(nn.Dense(size)(x))
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


def max_pool_3x3_s2(x):
  """nn.max_pool(x, (3, 3), (2, 2), 'SAME') on NHWC, as maxima of strided slices.

  XLA:CPU's reduce_window backward (select_and_scatter) is very slow; maxima
  of slices of the -inf-padded input differentiate into cheap selects and
  pads. Done separably (3 column slices, then 3 row slices), the ResNet torso's
  value_and_grad on 640 frames (2-core CPU, under load) took 4.5 s, against
  7.6 s with the 9 slices of the full window and 8.6 s with nn.max_pool.
  """
  def pads(n):  # lax's SAME padding: out = ceil(n / 2), the odd pixel at the end
    out = -(-n // 2)
    total = 2 * (out - 1) + 3 - n
    return out, (total // 2, total - total // 2)

  (oh, ph), (ow, pw) = pads(x.shape[-3]), pads(x.shape[-2])
  x = jnp.pad(x, ((0, 0),) * (x.ndim - 3) + (ph, pw, (0, 0)), constant_values=-jnp.inf)
  x = functools.reduce(jnp.maximum, [x[..., j:j + 2 * ow - 1:2, :] for j in range(3)])
  return functools.reduce(jnp.maximum, [x[..., i:i + 2 * oh - 1:2, :, :] for i in range(3)])


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
    x = nn.relu(x).reshape((x.shape[0], -1))
    return nn.relu(nn.Dense(self.hidden_size, name='fc')(x))


def normalise_blstats(blstats):
  """Signed log scaling: blstats mix coordinates, HP, gold and turn counters
  spanning 0..1e5, and a log keeps all of them in a trainable range."""
  x = blstats.astype(jnp.float32)
  return jnp.sign(x) * jnp.log1p(jnp.abs(x))


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
    b = normalise_blstats(obs['blstats'])
    b = nn.relu(nn.Dense(32, name='blstats_fc1')(b))
    b = nn.relu(nn.Dense(32, name='blstats_fc2')(b))
    x = jnp.concatenate([x, b], axis=-1)
    return nn.relu(nn.Dense(self.hidden_size, name='fc')(x))


TORSOS = {
    'mlp': MLPTorso,
    'shallow': NatureCNNTorso,
    'resnet': ResNetTorso,
    'nle_simple': NLESimpleTorso,
}

# The observation keys each torso reads (NLE envs are asked for exactly these).
OBS_KEYS = {
    'mlp': ('state',),
    'shallow': ('frames',),
    'resnet': ('frames',),
    'nle_simple': ('glyphs', 'blstats'),
    'attention': ('frames',),  # networks/attention.py: not a torso, see NETWORK_NAMES
}

# Every valid network.name: the plain torsos above (AgentNetwork adds the
# optional LSTM core and the heads) and 'attention', which is its own
# recurrent encoder and core.
NETWORK_NAMES = tuple(sorted(OBS_KEYS))
