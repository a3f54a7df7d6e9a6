"""The network's settings (the config's `network` group) and the checks
across them; networks/agent.make_network builds the AgentNetwork."""

import dataclasses
from typing import Optional, Tuple

from infra.settings import at_least, boolean, first, frozen_setting, mapping, one_of, setting
from networks import attention
from networks.init import INITS
from networks.kernels import KERNELS
from networks.nethack import EXTRA_INPUTS
from networks import torsos

# network.dtype's choices; 'auto' is float32 on a CPU, where bfloat16 is slower.
DTYPES = ('auto', 'float32', 'bfloat16')

# Torso arguments AgentNetwork fills from other network fields: torso_kwargs may not set them.
TORSO_FIELDS = {'dtype': 'network.dtype', 'kernels': 'network.kernels',
                'num_centres': 'network.centre_frames'}


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
  """The agent network: torso, optional LSTM core, policy and value heads."""
  init: str = frozen_setting(
      'lecun', "'lecun' (Flax's defaults) or 'orthogonal' (hidden sqrt 2, policy 0.01, value 1; "
      'cleanrl, baselines)', one_of(INITS))
  name: str = frozen_setting(
      'mlp', "the torso (networks/torsos.py registers them): 'mlp', 'shallow' (Nature CNN), "
      "'resnet', 'attention', 'nle_simple', 'nle_baseline', 'nle_fast', 'nle_attention'",
      one_of(torsos.names))
  centre_frames: bool = frozen_setting(
      False, "'shallow', 'resnet', 'attention': each task's frames minus its running mean frame "
      '(networks/centring.py)', boolean)
  lstm_size: int = frozen_setting(0, 'LSTM core size; 0 = feed-forward', at_least(0))
  dtype: str = setting(
      'auto', "the torso's compute dtype: 'auto' (float32 on CPU, bfloat16 on GPU/TPU), "
      "'float32', 'bfloat16'; parameters, optimiser, PopArt and losses stay float32",
      one_of(DTYPES))
  kernels: str = setting(
      'auto', "conv layers: 'auto' (CPU-tuned ops when lowered for CPU, XLA convolutions on "
      "GPU/TPU), 'cpu', 'xla' (networks/kernels.py)", one_of(KERNELS))
  core_extra_inputs: bool = frozen_setting(
      True, 'the core also sees the one-hot last action and clipped last reward (IMPALA)',
      boolean)
  torso_kwargs: dict = frozen_setting({}, 'extra torso arguments', mapping)
  extra_inputs: Tuple[str, ...] = frozen_setting(
      (), "nle_baseline / nle_fast also read: 'message' (the message line), 'under_hero' (the "
      'glyph under the hero)', lambda v: _names_problem(v))

  def problem(self) -> Optional[Tuple[str, str]]:
    """The checks across fields: what each torso can do."""
    return first([
        ('centre_frames', _centring_problem(self)),
        ('torso_kwargs', _torso_kwargs_problem(self)),
        ('kernels', _kernels_problem(self)),
        ('lstm_size', f'{self.name!r} is recurrent and needs an LSTM size > 0 (e.g. 256)'
         if torsos.get(self.name).recurrent and not self.lstm_size else None),
        ('extra_inputs', _extra_inputs_problem(self)),
    ])

  @property
  def recurrent(self) -> bool:
    """Whether it carries a state along the unroll: an LSTM core or a network
    with its own (a recurrent torso)."""
    return bool(self.lstm_size) or torsos.get(self.name).recurrent


def _centring_problem(c: NetworkConfig) -> Optional[str]:
  if c.centre_frames and not torsos.get(c.name).centres_frames:
    return (f'network {c.name!r} does not centre frames; it works with network.name in '
            f'{", ".join(torsos.names("centres_frames"))} (or set network.centre_frames=False)')
  return None


def _torso_kwargs_problem(c: NetworkConfig) -> Optional[str]:
  own = sorted(set(c.torso_kwargs) & set(TORSO_FIELDS))
  if own:
    return (f'sets {own}, which come from ' + ', '.join(TORSO_FIELDS[k] for k in own)
            + '; set those instead')
  if c.name == 'attention':
    return _attention_sizes_problem(dict(c.torso_kwargs))
  return None


def _attention_sizes_problem(sizes: dict) -> Optional[str]:
  """The attention sizes (SIZE_FIELDS, frame_size): counts > 0, layer lists of
  them, and key_size below conv_lstm_channels."""
  allowed = attention.SIZE_FIELDS + ('frame_size',)
  unknown = sorted(set(sizes) - set(allowed))
  if unknown:
    return f'{unknown} are not attention sizes; the attention agent takes {", ".join(allowed)}'
  for name, value in sizes.items():
    layers = name in ('vision_channels', 'answer_sizes')
    values = value if layers and isinstance(value, (tuple, list)) else (value,)
    if (layers and not isinstance(value, (tuple, list))) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
      kind = 'a tuple of integers > 0' if layers else 'an integer > 0'
      return f'{name} must be {kind}, got {value!r}'
  if 'vision_channels' in sizes and len(sizes['vision_channels']) != 2:
    return f'vision_channels must name the two vision layers, got {sizes["vision_channels"]!r}'
  full = {**attention.size_defaults(), **sizes}
  if not 0 < full['key_size'] < full['conv_lstm_channels']:
    return (f'key_size ({full["key_size"]}) must be below conv_lstm_channels '
            f'({full["conv_lstm_channels"]}): the other channels are the values')
  return None


def _kernels_problem(c: NetworkConfig) -> Optional[str]:
  if c.kernels != 'auto' and not torsos.get(c.name).convolutional:
    return (f'network {c.name!r} has no convolutions, so {c.kernels!r} would change nothing; '
            f"leave it 'auto' (networks with convolutions: {', '.join(torsos.names('convolutional'))})")
  return None


def _names_problem(value) -> Optional[str]:
  if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
    return None
  return f'must be a tuple of names from {", ".join(EXTRA_INPUTS)}, got {value!r}'


def _extra_inputs_problem(c: NetworkConfig) -> Optional[str]:
  for name in c.extra_inputs:
    if name not in EXTRA_INPUTS:
      return f'{name!r} is not allowed; choose one of {", ".join(EXTRA_INPUTS)}'
  if len(set(c.extra_inputs)) != len(c.extra_inputs):
    return f'names an input twice: {c.extra_inputs}'
  if c.extra_inputs and not torsos.get(c.name).extra_inputs:
    return (f'{c.name!r} reads no extra inputs; they need network.name in '
            f'{", ".join(torsos.names("extra_inputs"))}')
  return None
