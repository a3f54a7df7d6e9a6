"""The Attention-Augmented Agent (Mott et al. 2019, arXiv 1906.02500).

Per step: a conv stack encodes the frames, a ConvLSTM carries its maps; its output splits into keys
and values, each with a Fourier spatial basis appended (so a query can ask *where* as well as
*what*); queries from the policy LSTM's previous output attend over positions, and the answers,
queries and core extra inputs feed the policy LSTM. The conv stack and the ConvLSTM's input gates
have no recurrence, so they run once on [T * B] outside the scan. The attention weights
[T, B, num_queries, h, w] are sown into 'intermediates' (only an apply with that collection mutable
keeps them).
"""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks import centring
from networks.conv import Conv2D

# The vision stack: the Nature CNN's first two layers, 84 -> 20 -> 9.
_VISION_KERNELS = ((8, 4), (4, 2))  # (kernel, stride) per layer


def vision_map_size(frame_size: int) -> int:
  """The side of the vision core's maps for square frames of `frame_size` (84 -> 9)."""
  n = frame_size
  for k, s in _VISION_KERNELS:
    n = (n - k) // s + 1
  return n


def spatial_basis(height: int, width: int, num_frequencies: int):
  """A fixed Fourier basis of map positions, float32 [h, w, 4F].

  Positions run over [-1, 1]; frequency k = 1..F is k pi / 2, so the lowest is
  monotonic over the map. Channels: sin(y), cos(y), then sin(x), cos(x).
  """
  freqs = jnp.arange(1, num_frequencies + 1, dtype=jnp.float32) * (math.pi / 2)
  y = jnp.linspace(-1.0, 1.0, height)[:, None] * freqs  # [h, F]
  x = jnp.linspace(-1.0, 1.0, width)[:, None] * freqs   # [w, F]
  fy = jnp.concatenate([jnp.sin(y), jnp.cos(y)], -1)[:, None, :]  # [h, 1, 2F]
  fx = jnp.concatenate([jnp.sin(x), jnp.cos(x)], -1)[None, :, :]  # [1, w, 2F]
  return jnp.concatenate([jnp.broadcast_to(fy, (height, width, fy.shape[-1])),
                          jnp.broadcast_to(fx, (height, width, fx.shape[-1]))], -1)


def _reset(state, first):
  """Zeros the state of the envs whose observation starts an episode."""
  return jax.tree.map(
      lambda s: jnp.where(first.reshape(first.shape + (1,) * (s.ndim - 1)), 0.0, s), state)


class _AttentionStep(nn.Module):
  """One time step; carry {'vision': (c, h) [B, h, w, C], 'policy': (c, h) [B, L]}."""
  lstm_size: int
  conv_lstm_channels: int
  key_size: int
  num_queries: int
  query_hidden_size: int
  num_frequencies: int
  answer_sizes: tuple = ()
  kernels: str = 'auto'

  @nn.compact
  def __call__(self, carry, inputs):
    input_gates, first, extra = inputs  # [B, h, w, 4C], [B], [B, E]
    carry = _reset(carry, first)
    (vc, vh), (pc, ph) = carry['vision'], carry['policy']

    # ConvLSTM: the input half of the gates was computed outside the scan.
    gates = input_gates + Conv2D(4 * self.conv_lstm_channels, (3, 3), padding='SAME',
                                 use_bias=False, kernels=self.kernels, name='conv_lstm_hidden')(vh)
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    vc = nn.sigmoid(f) * vc + nn.sigmoid(i) * jnp.tanh(g)
    vh = nn.sigmoid(o) * jnp.tanh(vc)

    b, h, w, _ = vh.shape
    basis = jnp.broadcast_to(spatial_basis(h, w, self.num_frequencies),
                             (b, h, w, 4 * self.num_frequencies))
    keys = jnp.concatenate([vh[..., :self.key_size], basis], -1)    # [B, h, w, Dk]
    values = jnp.concatenate([vh[..., self.key_size:], basis], -1)  # [B, h, w, Dv]
    dk = keys.shape[-1]

    # Queries from the policy LSTM's previous output (top-down attention).
    q = nn.relu(nn.Dense(self.query_hidden_size, name='query_mlp_0')(ph))
    q = nn.Dense(self.num_queries * dk, name='query_mlp_1')(q).reshape(b, self.num_queries, dk)
    logits = jnp.einsum('bnd,bpd->bnp', q, keys.reshape(b, h * w, dk))
    weights = jax.nn.softmax(logits, axis=-1)                       # over positions
    answers = jnp.einsum('bnp,bpd->bnd', weights, values.reshape(b, h * w, -1))

    x = jnp.concatenate([answers.reshape(b, -1), q.reshape(b, -1), extra], -1)
    for n, size in enumerate(self.answer_sizes):
      x = nn.relu(nn.Dense(size, name=f'answer_mlp_{n}')(x))
    (pc, ph), y = nn.OptimizedLSTMCell(self.lstm_size, name='policy_lstm')((pc, ph), x)
    carry = {'vision': (vc, vh), 'policy': (pc, ph)}
    return carry, (y, weights.reshape(b, self.num_queries, h, w))


class AttentionCore(nn.Module):
  """The attention agent's encoder and recurrent core."""
  lstm_size: int                  # L, the policy LSTM's size
  frame_size: int = 84            # input frames are frame_size x frame_size
  vision_channels: tuple = (32, 64)  # the two vision conv layers (8x8/4, 4x4/2)
  conv_lstm_channels: int = 64    # ConvLSTM hidden channels (keys + values)
  key_size: int = 8               # ConvLSTM channels used as keys; the rest are values
  num_queries: int = 4
  query_hidden_size: int = 128
  num_frequencies: int = 4        # spatial basis: 4 * this channels
  answer_sizes: tuple = ()        # ReLU MLP before the policy LSTM; the paper's: (512, 256)
  num_centres: int = 0            # > 0: frames centred on their task's mean (centring.py)
  kernels: str = 'auto'           # the conv layers' implementation (networks/kernels.py)
  dtype: Any = jnp.float32        # the vision stack's dtype (the recurrent parts: float32)

  @nn.compact
  def __call__(self, frames, first, extra, state, task_id=None):
    """Runs the core over T steps of B envs.

    Args:
      frames: uint8 [T, B, C, H, W] with H = W = frame_size.
      first: bool [T, B]; the vision and policy states are zeroed there.
      extra: [T, B, E] for the policy LSTM's input (E may be 0).
      task_id: int [T, B]; needed with num_centres > 0.

    Returns:
      (outputs float32 [T, B, L], the state after the last step).

    Raises:
      ValueError: frames not frame_size x frame_size, or key_size not in (0, conv_lstm_channels).
    """
    t, b = first.shape
    if frames.shape[-2:] != (self.frame_size, self.frame_size):
      raise ValueError(f'attention network built for {self.frame_size}x{self.frame_size} '
                       f'frames (torso_kwargs.frame_size), got {frames.shape[-2:]}')
    if not 0 < self.key_size < self.conv_lstm_channels:
      raise ValueError(f'key_size must be in (0, conv_lstm_channels = {self.conv_lstm_channels}), '
                       f'got {self.key_size}: the other channels are the values')
    x = frames.reshape((t * b,) + frames.shape[2:])
    if self.num_centres:
      centres = centring.FrameCentre(self.num_centres, frames.shape[-2:], name=centring.NAME)()
      x = centring.centred_frames(x, task_id.reshape(t * b), centres)
    else:
      x = x.astype(jnp.float32) / 255.0
    x = jnp.transpose(x, (0, 2, 3, 1)).astype(self.dtype)
    for n, ((k, s), c) in enumerate(zip(_VISION_KERNELS, self.vision_channels)):
      x = nn.relu(Conv2D(c, (k, k), strides=(s, s), kernels=self.kernels, dtype=self.dtype,
                         name=f'vision_conv{n}')(x))
    input_gates = Conv2D(4 * self.conv_lstm_channels, (3, 3), padding='SAME',
                         kernels=self.kernels, dtype=self.dtype,
                         name='conv_lstm_input')(x).astype(jnp.float32)
    input_gates = input_gates.reshape((t, b) + input_gates.shape[1:])

    scan = nn.scan(_AttentionStep, variable_broadcast='params',
                   split_rngs={'params': False}, in_axes=0, out_axes=0)
    state, (y, weights) = scan(
        self.lstm_size, self.conv_lstm_channels, self.key_size, self.num_queries,
        self.query_hidden_size, self.num_frequencies, tuple(self.answer_sizes), self.kernels,
        name='step')(
            state, (input_gates, first, extra))
    self.sow('intermediates', 'attention_weights', weights)
    return y, state

  def initial_state(self, batch: int):
    """Zero states of `batch` envs, float32: the carry of _AttentionStep."""
    n = vision_map_size(self.frame_size)
    zeros = lambda *shape: jnp.zeros((batch,) + shape, jnp.float32)
    return {'vision': (zeros(n, n, self.conv_lstm_channels), zeros(n, n, self.conv_lstm_channels)),
            'policy': (zeros(self.lstm_size), zeros(self.lstm_size))}


# AttentionCore's sizes a config sets through network.torso_kwargs (which may also set frame_size).
SIZE_FIELDS = ('vision_channels', 'conv_lstm_channels', 'key_size', 'num_queries',
               'query_hidden_size', 'num_frequencies', 'answer_sizes')


def size_defaults() -> dict:
  defaults = {f.name: f.default for f in dataclasses.fields(AttentionCore)}
  return {name: defaults[name] for name in SIZE_FIELDS}
