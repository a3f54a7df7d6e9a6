"""Policy head and the multi-task PopArt value heads (Hessel et al. 2019,
arXiv 1809.04474): a Dense one, and a categorical one (value as
classification, rl/value_classification.py)."""

import flax.linen as nn
import jax

from rl import popart
from rl import value_classification as vc

POPART_COLLECTION = 'popart'
# The collection a categorical value head sows its logits [..., K, bins] into.
VALUE_LOGITS_COLLECTION = 'value_logits'


def normalised_and_unnormalised(head: nn.Module, normalised):
  """A value head's outputs with its PopArt statistics declared beside them.

  Args:
    head: the value head (a compact module with a `num_values`), whose
      `popart` collection holds {'mu': [K], 'nu': [K]}, started at
      rl/popart.init_stats (mu = 0, nu = 1).
    normalised: its normalised values n(x) [..., K].

  Returns:
    (n(x), sigma n(x) + mu), each [..., K].
  """
  init = popart.init_stats(head.num_values)
  stats = {key: head.variable(POPART_COLLECTION, key, lambda k=key: init[k]).value
           for key in ('mu', 'nu')}
  return normalised, popart.unnormalize_all(stats, normalised)


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
    return normalised_and_unnormalised(self, x @ kernel + bias)


class CategoricalValueHead(nn.Module):
  """One categorical value per task over a fixed support, with PopArt's
  statistics beside it (rl/value_classification.py).

  A Dense layer vc.LOGITS (zeros at the start: a uniform distribution)
  gives logits [..., K, bins], sown into VALUE_LOGITS_COLLECTION for the
  cross-entropy. Each task's normalised value is n_k = kernel_k m_k +
  bias_k, where m_k is the softmax's mean over the support and kernel [K]
  (ones) and bias [K] (zeros) are a per-task affine: PopArt rescales them
  as it rescales a Dense head (rl/popart.preserve_outputs), so sigma n + mu
  is unchanged when the statistics move, while the categorical stays on
  its support in the new normalised units. The squared error between n and
  the normalised target trains the affine alone (m is stopped from
  gradients here), which brings it back to the identity as the
  categorical learns the moved targets.

  Attributes:
    num_values: K, one value per task.
    bins: bins of the support.
    limit: the support is `bins` centres on [-limit, limit].
  """
  num_values: int
  bins: int
  limit: float

  @nn.compact
  def __call__(self, x):
    """The value outputs of features `x`.

    Args:
      x: features [..., F].

    Returns:
      (normalised values n(x) [..., K], unnormalised values sigma n(x) + mu
      [..., K]).
    """
    logits = nn.Dense(self.num_values * self.bins, kernel_init=nn.initializers.zeros,
                      name=vc.LOGITS)(x)
    logits = logits.reshape(x.shape[:-1] + (self.num_values, self.bins))
    self.sow(VALUE_LOGITS_COLLECTION, 'sown', logits)
    categorical = vc.mean(logits, vc.support(self.bins, self.limit))
    kernel = self.param('kernel', nn.initializers.ones, (self.num_values,))
    bias = self.param('bias', nn.initializers.zeros, (self.num_values,))
    return normalised_and_unnormalised(self, kernel * jax.lax.stop_gradient(categorical) + bias)


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
