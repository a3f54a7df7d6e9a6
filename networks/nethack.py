"""NetHack (NLE) torsos: NLE's baseline network (Kuttler et al. 2020, arXiv 2006.13760), a variant
with a shallower map CNN, and an attention variant. All read obs['glyphs'] int [N, 21, 79] and
obs['blstats'] int [N, 27] and end at FC 512 (the LSTM is AgentNetwork's core, network.lstm_size).
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from networks.conv import Conv2D
from networks.conv_stack import glyph_conv_stack
from networks.pooling import max_pool_3x3_s2

NLE_NUM_GLYPHS = 5976 + 1  # nle.nethack.MAX_GLYPH + 1, literal so networks/ needs no NLE
NO_GLYPH = 5976            # nle.nethack.NO_GLYPH: the crop's padding beyond the map edges


def normalise_blstats(blstats):
  """sign(x) log(1 + |x|) of the bottom-line statistics, float32: they span
  0..1e5 (coordinates, HP, gold, turns) and the log keeps them trainable."""
  x = blstats.astype(jnp.float32)
  return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def blstats_mlp(blstats, size: int = 32, names=('blstats_fc0', 'blstats_fc1'),
                dtype=jnp.float32):
  """normalise_blstats, then one ReLU Dense of `size` per name: [N, 27] -> [N, size] in `dtype`.
  Call inside a compact __call__ (the layers are that module's)."""
  x = normalise_blstats(blstats).astype(dtype)
  for name in names:
    x = nn.relu(nn.Dense(size, dtype=dtype, name=name)(x))
  return x


def crop_glyphs(glyphs, x, y, size: int = 9):
  """A size x size window [N, size, size] of glyphs [N, H, W] centred on each agent's (x, y),
  clipped to the map; beyond the map it reads NO_GLYPH (its own embedding row; glyph 0 is a giant
  ant). Cropped from the int glyphs, before the embedding, so no gradient."""
  r = size // 2
  h, w = glyphs.shape[-2:]
  padded = jnp.pad(glyphs, ((0, 0), (r, r), (r, r)), constant_values=NO_GLYPH)
  # The map is padded by r, so the crop centred at (y, x) starts at padded (y, x).
  y = jnp.clip(y.astype(jnp.int32), 0, h - 1)
  x = jnp.clip(x.astype(jnp.int32), 0, w - 1)
  return jax.vmap(lambda g, i, j: lax.dynamic_slice(g, (i, j), (size, size)))(padded, y, x)


# Inputs an NLE torso may read beside glyphs and blstats (network.extra_inputs):
# NLE's message line (uint8 [256]) and the glyph under the hero (int16 []).
EXTRA_INPUTS = ('message', 'under_hero')


def message_mlp(message, length: int = 80, char_size: int = 16, channels=(32, 64),
                kernel: int = 5, dtype=jnp.float32):
  """NLE's message line (uint8 [N, 256]) encoded by a character CNN -> [N, channels[-1]] in `dtype`:
  the first `length` characters (one terminal line) are embedded, go through 1-D SAME ReLU convs of
  width `kernel` and are max-pooled over the line, so a word counts wherever it stands. Call inside
  a compact __call__."""
  chars = message[:, :length].astype(jnp.int32)
  # Looked up in float32, then cast: see conv_stack.xla_glyph_conv_stack.
  x = nn.Embed(256, char_size, name='message_embed')(chars).astype(dtype)
  for i, c in enumerate(channels):
    x = nn.relu(nn.Conv(c, (kernel,), padding='SAME', dtype=dtype, name=f'message_conv{i}')(x))
  return jnp.max(x, axis=1)


def extra_features(obs, extra_inputs, glyph_embedding, dtype=jnp.float32):
  """Features of `extra_inputs` to concatenate before a torso's FC, in EXTRA_INPUTS order: message
  [N, 64], under_hero [N, E] (embedded as the map's glyphs, by `glyph_embedding`). Call inside a
  compact __call__. ValueError for an entry of `extra_inputs` not in EXTRA_INPUTS."""
  unknown = [k for k in extra_inputs if k not in EXTRA_INPUTS]
  if unknown:
    raise ValueError(f'unknown extra inputs {unknown}; known: {EXTRA_INPUTS}')
  feats = []
  if 'message' in extra_inputs:
    feats.append(message_mlp(obs['message'], dtype=dtype))
  if 'under_hero' in extra_inputs:
    feats.append(jnp.take(glyph_embedding, obs['under_hero'].astype(jnp.int32), axis=0).astype(dtype))
  return feats


def _cast(tree, dtype):
  return jax.tree.map(lambda a: a.astype(dtype), tree)


class ConvParams(nn.Module):
  """An nn.Conv's parameters (same names, shapes and initialisers) without the
  conv, for ops that take the kernels themselves (glyph_conv_stack)."""
  features: int
  kernel_size: tuple = (3, 3)

  @nn.compact
  def __call__(self, in_features: int):
    """(kernel [kh, kw, in_features, features], bias [features]), float32."""
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        tuple(self.kernel_size) + (in_features, self.features))
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,))
    return kernel, bias


class NLEBaselineTorso(nn.Module):
  """NLE's bundled agent network up to its FC 512 (Kuttler et al. 2020).

  A glyph embedding shared by the 21x79 map and a crop around the agent, each through 3x3 ELU convs;
  blstats through an MLP; concatenated -> FC -> FC (ReLU). blstats take normalise_blstats' signed
  log, not NLE's per-field divisors: one rule for any NLE version. The embedding and each conv stack
  run as one glyph_conv_stack op; reference=True uses nn.Embed and nn.Conv (same parameters).
  """
  embedding_size: int = 32
  channels: tuple = (16, 16, 16, 16, 8)
  map_channels: tuple = ()    # the full map's conv channels; () = `channels`
  crop_size: int = 9
  blstats_size: int = 32
  hidden_size: int = 512
  reference: bool = False  # plain nn.Embed / nn.Conv: tests and benchmarks
  extra_inputs: tuple = ()  # EXTRA_INPUTS read beside glyphs and blstats, before fc0
  kernels: str = 'auto'     # networks/kernels.py: 'auto', 'cpu' or 'xla'
  dtype: Any = jnp.float32  # computation dtype (parameters stay float32); the output is float32

  @nn.compact
  def __call__(self, obs):
    """float32 [N, hidden_size] of obs 'glyphs' int [N, 21, 79], 'blstats' int [N, 27] and the
    `extra_inputs`; ValueError for an unknown entry of `extra_inputs`."""
    glyphs = obs['glyphs'].astype(jnp.int32)
    blstats = obs['blstats']
    crop = crop_glyphs(glyphs, blstats[:, 0], blstats[:, 1], self.crop_size)
    embed = nn.Embed(NLE_NUM_GLYPHS, self.embedding_size, name='glyph_embed')  # float32 lookups
    feats = []
    map_channels = tuple(self.map_channels) or tuple(self.channels)
    for name, g, channels in (('map', glyphs, map_channels), ('crop', crop, tuple(self.channels))):
      if self.reference:
        x = embed(g).astype(self.dtype)
        for i, c in enumerate(channels):
          x = nn.elu(nn.Conv(c, (3, 3), padding=((1, 1), (1, 1)), dtype=self.dtype,
                             name=f'{name}_conv{i}')(x))
      else:
        sizes = (self.embedding_size,) + channels
        kernels, biases = zip(*[ConvParams(c, name=f'{name}_conv{i}')(sizes[i])
                                for i, c in enumerate(channels)])
        x = glyph_conv_stack(g, embed.embedding, *_cast((kernels, biases), self.dtype),
                             impl=self.kernels)
      feats.append(x.reshape((x.shape[0], -1)))
    b = blstats_mlp(blstats, self.blstats_size, dtype=self.dtype)
    extra = extra_features(obs, tuple(self.extra_inputs), embed.embedding, self.dtype)
    x = jnp.concatenate(feats + [b] + extra, axis=-1)
    x = nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='fc0')(x))
    return nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='fc1')(x)).astype(jnp.float32)


class NLEFastTorso(NLEBaselineTorso):
  """NLE's baseline network with a two-layer CNN on the full map (net=nle_fast): the map's convs are
  32 -> 16 -> 8 instead of five layers (the full-map stack dominates a CPU learner step; the crop
  gives the deep local view). All else is NLEBaselineTorso's."""
  map_channels: tuple = (16, 8)


class NLEAttentionTorso(nn.Module):
  """The course report's variant of the NLE baseline: attention replaces the crop.

  Glyph CNN: embedding -> conv 3x3 (ELU) -> per stage max-pool 3x3/2 and residual blocks (IMPALA's),
  later stages starting with a conv: 21x79 -> 11x40 -> 6x20 -> 3x10, channels (16, 32, 64). A
  learned position encoding is added to the grid; a query from the blstats MLP attends over the 30
  positions (scaled dot product). Output: FC 512 -> FC 512 (ReLU) over the readout, the blstats
  embedding and the flattened grid. The weights [N, 3, 10] are sown into 'intermediates'.
  reference=True: plain nn.Embed and nn.Conv.
  """
  embedding_size: int = 32
  channels: tuple = (16, 32, 64)
  num_blocks: int = 1         # residual blocks per stage
  key_size: int = 64          # D, the attention's query and key size
  blstats_size: int = 32
  hidden_size: int = 512
  reference: bool = False
  kernels: str = 'auto'     # networks/kernels.py: 'auto', 'cpu' or 'xla'
  dtype: Any = jnp.float32  # computation dtype (parameters stay float32); the output is float32

  @nn.compact
  def __call__(self, obs):
    """float32 [N, hidden_size] of obs 'glyphs' int [N, 21, 79], 'blstats' int [N, 27]."""
    glyphs = obs['glyphs'].astype(jnp.int32)
    embed = nn.Embed(NLE_NUM_GLYPHS, self.embedding_size, name='glyph_embed')  # float32 lookups
    c0 = self.channels[0]
    if self.reference:
      x = nn.elu(nn.Conv(c0, (3, 3), padding=((1, 1), (1, 1)), dtype=self.dtype,
                         name='stage0_conv')(embed(glyphs).astype(self.dtype)))
    else:
      kernel, bias = ConvParams(c0, name='stage0_conv')(self.embedding_size)
      x = glyph_conv_stack(glyphs, embed.embedding, *_cast(((kernel,), (bias,)), self.dtype),
                           impl=self.kernels)
    if self.reference:
      conv = functools.partial(nn.Conv, kernel_size=(3, 3), padding='SAME', dtype=self.dtype)
    else:
      conv = functools.partial(Conv2D, kernel_size=(3, 3), padding='SAME', kernels=self.kernels,
                               dtype=self.dtype)
    for i, c in enumerate(self.channels):
      if i:
        x = conv(c, name=f'stage{i}_conv')(x)
      x = max_pool_3x3_s2(x, self.kernels)
      for j in range(self.num_blocks):
        y = conv(c, name=f'stage{i}_block{j}_conv0')(nn.relu(x))
        y = conv(c, name=f'stage{i}_block{j}_conv1')(nn.relu(y))
        x = x + y
    n, h, w, c = x.shape
    pos = self.param('position_encoding', nn.initializers.normal(0.02), (h, w, c))
    grid = (nn.relu(x) + pos.astype(self.dtype)).reshape(n, h * w, c)

    b = blstats_mlp(obs['blstats'], self.blstats_size, dtype=self.dtype)

    dense = functools.partial(nn.Dense, dtype=self.dtype)
    query = dense(self.key_size, name='query')(b)                     # [N, D]
    # No key bias: it adds the same query . bias to every position's logit.
    keys = dense(self.key_size, use_bias=False, name='keys')(grid)    # [N, P, D]
    values = dense(c, name='values')(grid)                            # [N, P, C]
    logits = jnp.einsum('nd,npd->np', query, keys) / jnp.sqrt(float(self.key_size))
    weights = jax.nn.softmax(logits, axis=-1)
    self.sow('intermediates', 'attention_weights', weights.reshape(n, h, w).astype(jnp.float32))
    readout = jnp.einsum('np,npc->nc', weights, values)

    x = jnp.concatenate([readout, b, grid.reshape(n, -1)], axis=-1)
    x = nn.relu(dense(self.hidden_size, name='fc0')(x))
    return nn.relu(dense(self.hidden_size, name='fc1')(x)).astype(jnp.float32)
