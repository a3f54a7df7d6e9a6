"""Observation encoders ("torsos"): [N, ...] inputs of the keys each reads -> [N, F] float32.

Every torso takes `dtype`, its layers' compute dtype; its parameters and output stay float32, as do
core, heads and losses. Each is registered with what it reads and can do (`Torso`, `register`).
"""

import dataclasses
import functools
from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks import centring, kernels as kernels_lib, nature_cnn
from networks.conv import Conv2D
from networks.nethack import (NLE_NUM_GLYPHS, NLEAttentionTorso, NLEBaselineTorso, NLEFastTorso,
                              blstats_mlp)
from networks.pooling import max_pool_3x3_s2


def sow_unit_max(module: nn.Module, name: str, x=None, unit_max=None) -> None:
  """Records a ReLU layer's per-unit maximum over the batch (of `x` [N, ...], or `unit_max` given)
  in the `health` collection under `name`, float32 and stopped; a no-op unless `health` is mutable.

  Appends to a tuple on the scope as sow does: `module.sow(name)` would clash
  with the layer's submodule of the same name in flax 0.12.
  """
  if not module.is_mutable_collection('health'):
    return
  value = jax.lax.stop_gradient(jnp.max(x, axis=0) if unit_max is None else unit_max)
  value = value.astype(jnp.float32)
  scope = module.scope
  old = scope.get_variable('health', name) if scope.has_variable('health', name) else ()
  scope.put_variable('health', name, old + (value,))


def _centres(module: nn.Module, obs):
  """(task ids [N], mean frames [K, H, W]) with `num_centres` > 0, else (None, None)."""
  if not module.num_centres:
    return None, None
  frames = obs['frames']
  centres = centring.FrameCentre(module.num_centres, frames.shape[-2:], name=centring.NAME)()
  return obs['task_id'], centres


def _conv_input(frames, task_id, centres, dtype=jnp.float32):
  """uint8 frames [N, C, H, W] as NHWC conv input in `dtype`: / 255, centred given centres."""
  if centres is None:
    x = frames.astype(jnp.float32) / 255.0
  else:
    x = centring.centred_frames(frames, task_id, centres)
  return jnp.transpose(x, (0, 2, 3, 1)).astype(dtype)


class MLPTorso(nn.Module):
  """For low-dimensional state vectors (classic control): obs['state'] [N, D]
  through ReLU Dense layers ('fc<i>' in `health`)."""
  hidden_sizes: tuple = (64, 64)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, obs):
    """Returns float32 [N, hidden_sizes[-1]] for obs['state'] [N, D]."""
    x = obs['state'].astype(self.dtype)
    for i, size in enumerate(self.hidden_sizes):
      x = nn.relu(nn.Dense(size, dtype=self.dtype)(x))
      sow_unit_max(self, f'fc{i}', x)
    return x.astype(jnp.float32)


class _ConvParams(nn.Module):
  """A conv layer's parameters only, exactly nn.Conv's and Conv2D's, for a fused op that computes
  the layer itself. Called with the layer's input x (only its channel count is read) so that method
  interceptors see it (analysis/frame_checks.torso_input)."""
  features: int
  kernel_size: tuple
  in_features: int = 0

  @nn.compact
  def __call__(self, x=None):
    cin = x.shape[-1] if x is not None else self.in_features
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        tuple(self.kernel_size) + (cin, self.features), jnp.float32)
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,), jnp.float32)
    return kernel, bias


class NatureCNNTorso(nn.Module):
  """The Nature DQN CNN (Mnih et al. 2015), IMPALA's shallow network.

  uint8 [N, 4, 84, 84] frames take `nature_cnn.nature_convs` (or `xla_convs`, as `kernels` says)
  with the same parameters; other frames use one `Conv2D` per layer. Records conv1..3 and fc in
  `health`. With `num_centres` K > 0 frames are centred on their task's mean frame (obs['task_id']).
  """
  hidden_size: int = 512
  num_centres: int = 0
  kernels: str = 'auto'
  dtype: Any = jnp.float32   # the fused CPU op computes in float32 whatever this is

  @nn.compact
  def __call__(self, obs):
    """float32 [N, hidden_size] of obs 'frames' uint8 [N, C, H, W] (+ 'task_id' [N] if centring)."""
    frames = obs['frames']
    task_id, centres = _centres(self, obs)
    # conv1's input as nn.Conv would get it; unused by the fused op (jit drops it).
    x = _conv_input(frames, task_id, centres, self.dtype)
    if nature_cnn.supported(frames):
      k1, b1 = _ConvParams(32, (8, 8), name='conv1')(x)
      k2, b2 = _ConvParams(64, (4, 4), 32, name='conv2')()
      k3, b3 = _ConvParams(64, (3, 3), 64, name='conv3')()
      dtype = self.dtype
      x, maxima = kernels_lib.select(
          self.kernels,
          lambda *a: _in_dtype(nature_cnn.nature_convs(*a), dtype),
          lambda *a: nature_cnn.xla_convs(*a, dtype=dtype),
          frames, k1, b1, k2, b2, k3, b3, task_id, centres)
      for name, m in zip(('conv1', 'conv2', 'conv3'), maxima):
        sow_unit_max(self, name, unit_max=m)
    else:
      for name, features, k, s in (('conv1', 32, 8, 4), ('conv2', 64, 4, 2), ('conv3', 64, 3, 1)):
        x = nn.relu(Conv2D(features, (k, k), strides=(s, s), kernels=self.kernels,
                           dtype=self.dtype, name=name)(x))
        sow_unit_max(self, name, x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='fc')(x))
    sow_unit_max(self, 'fc', x)
    return x.astype(jnp.float32)


def _in_dtype(outputs, dtype):
  y, maxima = outputs
  return y.astype(dtype), maxima


class ResNetTorso(nn.Module):
  """IMPALA's deep network (Espeholt et al. 2018, arXiv 1802.01561, fig. 3, right).

  Per stage (84 -> 42 -> 21 -> 11): conv 3x3, max-pool 3x3/2, residual blocks (relu, conv, relu,
  conv, + skip). `num_centres`, `kernels` as NatureCNNTorso's; records 'stages', 'fc' in `health`.
  """
  channels: tuple = (16, 32, 32)
  num_blocks: int = 2
  hidden_size: int = 256
  num_centres: int = 0
  kernels: str = 'auto'
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, obs):
    x = _conv_input(obs['frames'], *_centres(self, obs), self.dtype)
    conv = functools.partial(Conv2D, kernel_size=(3, 3), padding='SAME', kernels=self.kernels,
                             dtype=self.dtype)
    for i, c in enumerate(self.channels):
      x = conv(c, name=f'stage{i}_conv')(x)
      x = max_pool_3x3_s2(x, self.kernels)
      for j in range(self.num_blocks):
        y = conv(c, name=f'stage{i}_block{j}_conv0')(nn.relu(x))
        y = conv(c, name=f'stage{i}_block{j}_conv1')(nn.relu(y))
        x = x + y
    x = nn.relu(x)
    sow_unit_max(self, 'stages', x)
    x = nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='fc')(x.reshape((x.shape[0], -1))))
    sow_unit_max(self, 'fc', x)
    return x.astype(jnp.float32)


class NLESimpleTorso(nn.Module):
  """A small NetHack encoder: glyph embedding, 3x3 SAME ELU convs over the map (the first stride 1,
  the rest stride 2, so a CPU trains it at a useful rate), and a blstats MLP."""
  embedding_size: int = 16
  channels: tuple = (16, 32)
  hidden_size: int = 256
  kernels: str = 'auto'
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, obs):
    """Returns float32 [N, hidden_size] for obs 'glyphs' [N, 21, 79] and 'blstats' [N, 27]."""
    glyphs = obs['glyphs'].astype(jnp.int32)
    # Looked up in float32, then cast: see conv_stack.xla_glyph_conv_stack.
    x = nn.Embed(NLE_NUM_GLYPHS, self.embedding_size, name='glyph_embed')(glyphs).astype(self.dtype)
    for i, c in enumerate(self.channels):
      x = nn.elu(Conv2D(c, (3, 3), strides=(1, 1) if i == 0 else (2, 2), padding='SAME',
                        kernels=self.kernels, dtype=self.dtype, name=f'conv{i + 1}')(x))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='map_fc')(x))
    b = blstats_mlp(obs['blstats'], 32, names=('blstats_fc1', 'blstats_fc2'), dtype=self.dtype)
    x = jnp.concatenate([x, b], axis=-1)
    return nn.relu(nn.Dense(self.hidden_size, dtype=self.dtype, name='fc')(x)).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class Torso:
  """A network.name and what it can do, registered once (`register`).

  `module` is the flax module class, called with its settings (`dtype`; `kernels` if
  `convolutional`; `num_centres` if `centres_frames` and network.centre_frames; `extra_inputs` if
  `extra_inputs` and set; network.torso_kwargs) and name='torso', mapping {key: [N, ...]} of
  `obs_keys` to float32 [N, F]; None: networks/attention.py replaces torso and core.
  """
  module: Optional[Callable]
  obs_keys: Tuple[str, ...]            # the observation keys it reads (envs are asked for them)
  recurrent: bool = False              # carries its own core state (needs lstm_size > 0)
  centres_frames: bool = False         # takes num_centres (network.centre_frames; centring.py)
  convolutional: bool = False          # takes kernels (network.kernels; kernels.py)
  extra_inputs: bool = False           # takes extra_inputs (network.extra_inputs)


_REGISTRY: Dict[str, Torso] = {}


def register(name: str, torso: Torso) -> None:
  """Makes `name` a network.name; ValueError if it is registered already."""
  if name in _REGISTRY:
    raise ValueError(f'torso {name!r} is registered already')
  _REGISTRY[name] = torso


def unregister(name: str) -> None:
  """Removes a registered torso (tests)."""
  del _REGISTRY[name]


def get(name: str) -> Torso:
  """The torso registered as `name`; ValueError if none is."""
  if name not in _REGISTRY:
    raise ValueError(f'unknown network {name!r}; choose one of {", ".join(names())}')
  return _REGISTRY[name]


def names(where: Optional[str] = None) -> Tuple[str, ...]:
  """Every network.name, sorted; with `where` (a Torso field), those for which it is true."""
  return tuple(sorted(n for n, t in _REGISTRY.items() if where is None or getattr(t, where)))


_FRAMES = dict(obs_keys=('frames',), centres_frames=True, convolutional=True)
_NLE = dict(obs_keys=('glyphs', 'blstats'), convolutional=True)
register('mlp', Torso(MLPTorso, ('state',)))
register('shallow', Torso(NatureCNNTorso, **_FRAMES))
register('resnet', Torso(ResNetTorso, **_FRAMES))
register('attention', Torso(None, recurrent=True, **_FRAMES))   # networks/attention.py
register('nle_simple', Torso(NLESimpleTorso, **_NLE))
register('nle_baseline', Torso(NLEBaselineTorso, extra_inputs=True, **_NLE))   # networks/nethack.py
register('nle_fast', Torso(NLEFastTorso, extra_inputs=True, **_NLE))
register('nle_attention', Torso(NLEAttentionTorso, **_NLE))
