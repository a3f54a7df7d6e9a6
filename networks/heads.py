"""Policy head and the multi-task PopArt value head."""

import flax.linen as nn

from rl import popart

POPART_COLLECTION = 'popart'


class PopArtValueHead(nn.Module):
  """One normalised value output per task, with the PopArt statistics beside it.

  Returns (normalised values n(x) [..., K], unnormalised sigma n(x) + mu).
  The statistics live in the `popart` collection as {'mu': [K], 'nu': [K]};
  the learner updates them and rescales `kernel` and `bias`.
  """
  num_values: int

  @nn.compact
  def __call__(self, x):
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        (x.shape[-1], self.num_values))
    bias = self.param('bias', nn.initializers.zeros, (self.num_values,))
    init = popart.init_stats(self.num_values)
    mu = self.variable(POPART_COLLECTION, 'mu', lambda: init['mu'])
    nu = self.variable(POPART_COLLECTION, 'nu', lambda: init['nu'])
    normalised = x @ kernel + bias
    stats = {'mu': mu.value, 'nu': nu.value}
    unnormalised = popart.unnormalize_all(stats, normalised)
    return normalised, unnormalised


class PolicyHead(nn.Module):
  """Logits over the shared action set; small init keeps the first policy near uniform."""
  num_actions: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.num_actions,
                    kernel_init=nn.initializers.variance_scaling(
                        0.01, 'fan_in', 'truncated_normal'))(x)
