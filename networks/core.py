"""An LSTM core that resets its state at episode starts, scanned over time."""

import flax.linen as nn
import jax
import jax.numpy as jnp


class _ResettingLSTMStep(nn.Module):
  size: int

  @nn.compact
  def __call__(self, carry, inputs):
    x, first = inputs
    carry = jax.tree.map(lambda c: jnp.where(first[:, None], 0.0, c), carry)
    carry, y = nn.OptimizedLSTMCell(self.size, name='lstm')(carry, x)
    return carry, y


class ResettingLSTM(nn.Module):
  """An LSTM (one nn.OptimizedLSTMCell, 'step/lstm') scanned over time whose
  state is zeroed where an episode starts."""
  size: int

  @nn.compact
  def __call__(self, inputs, first, state):
    """Runs the LSTM over T steps of B envs.

    Args:
      inputs: [T, B, F].
      first: bool [T, B]; where True the state is zeroed before that step.
      state: (c, h), each [B, size].

    Returns:
      (outputs [T, B, size], the state (c, h) after the last step).
    """
    scan = nn.scan(_ResettingLSTMStep, variable_broadcast='params',
                   split_rngs={'params': False}, in_axes=0, out_axes=0)
    state, outputs = scan(self.size, name='step')(state, (inputs, first))
    return outputs, state

  @staticmethod
  def initial_state(size: int, batch: int):
    """Zero state (c, h), each float32 [batch, size]."""
    return (jnp.zeros((batch, size), jnp.float32),
            jnp.zeros((batch, size), jnp.float32))
