"""Policy head and the multi-task PopArt value head (Hessel et al. 2019,
arXiv 1809.04474)."""

import flax.linen as nn

from rl import popart

POPART_COLLECTION = 'popart'


class PopArtValueHead(nn.Module):
  """One normalised value output per task, with the PopArt statistics beside it.

  Returns (normalised values n(x) [..., K], unnormalised sigma n(x) + mu).
  The statistics live in the `popart` collection as {'mu': [K], 'nu': [K]};
  the learner updates them and rescales `kernel` and `bias`. Parameters:
  'kernel' [F, K] (LeCun normal) and 'bias' [K] (zeros); the statistics
  start at rl/popart.init_stats (mu = 0, nu = 1).

  Attributes:
    num_values: K, one output per task.
  """
  num_values: int

  @nn.compact
  def __call__(self, x):
    """The value outputs of features `x`.

    Args:
      x: features [..., F].

    Returns:
      (normalised values n(x) [..., K], unnormalised values sigma n(x) + mu
      [..., K]).
    """
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
  """Logits over the shared action set; small init keeps the first policy near uniform.

  One Dense layer whose kernel is initialised with variance scaling 0.01
  (fan in, truncated normal).

  Attributes:
    num_actions: A.
  """
  num_actions: int

  @nn.compact
  def __call__(self, x):
    """Logits [..., A] of features `x` [..., F]."""
    return nn.Dense(self.num_actions,
                    kernel_init=nn.initializers.variance_scaling(
                        0.01, 'fan_in', 'truncated_normal'))(x)
