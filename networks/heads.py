"""Policy head and the multi-task PopArt value heads (Hessel et al. 2019, arXiv 1809.04474): a Dense
one, and a categorical one (rl/value_classification.py)."""

import flax.linen as nn
import jax

from rl import popart
from rl import value_classification as vc

POPART_COLLECTION = 'popart'
# The collection a categorical value head sows its logits [..., K, bins] into.
VALUE_LOGITS_COLLECTION = 'value_logits'


def normalised_and_unnormalised(head: nn.Module, normalised):
  """(n, sigma n + mu), each [..., K], for a head's normalised values n, its
  PopArt statistics declared in its `popart` collection (rl/popart.init_stats)."""
  init = popart.init_stats(head.num_values)
  stats = {key: head.variable(POPART_COLLECTION, key, lambda k=key: init[k]).value
           for key in ('mu', 'nu')}
  return normalised, popart.unnormalize_all(stats, normalised)


class PopArtValueHead(nn.Module):
  """One normalised value output per task, with the PopArt statistics beside
  it; the learner moves them and rescales 'kernel' [F, K] and 'bias' [K]."""
  num_values: int

  @nn.compact
  def __call__(self, x):
    """(normalised values n(x), sigma n(x) + mu), each [..., K], of features [..., F]."""
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        (x.shape[-1], self.num_values))
    bias = self.param('bias', nn.initializers.zeros, (self.num_values,))
    return normalised_and_unnormalised(self, x @ kernel + bias)


class CategoricalValueHead(nn.Module):
  """One categorical value per task over a fixed support, with PopArt's statistics beside it.

  Logits [..., K, bins] (a zero-initialised Dense, vc.LOGITS: uniform at the start) are sown into
  VALUE_LOGITS_COLLECTION for the cross-entropy. The normalised value is n_k = kernel_k m_k +
  bias_k, m_k the softmax's mean: the per-task affine is what PopArt rescales (as a Dense head's),
  so sigma n + mu is unchanged when the statistics move while the categorical stays on its support.
  m is stopped here, so the squared error trains the affine alone, back toward the identity as the
  categorical learns the moved targets.
  """
  num_values: int
  bins: int
  limit: float

  @nn.compact
  def __call__(self, x):
    """(normalised values n(x), sigma n(x) + mu), each [..., K], of features [..., F]."""
    logits = nn.Dense(self.num_values * self.bins, kernel_init=nn.initializers.zeros,
                      name=vc.LOGITS)(x)
    logits = logits.reshape(x.shape[:-1] + (self.num_values, self.bins))
    self.sow(VALUE_LOGITS_COLLECTION, 'sown', logits)
    categorical = vc.mean(logits, vc.support(self.bins, self.limit))
    kernel = self.param('kernel', nn.initializers.ones, (self.num_values,))
    bias = self.param('bias', nn.initializers.zeros, (self.num_values,))
    return normalised_and_unnormalised(self, kernel * jax.lax.stop_gradient(categorical) + bias)


class PolicyHead(nn.Module):
  """Logits over the shared action set; its kernel's small init (variance
  scaling 0.01) keeps the first policy near uniform."""
  num_actions: int

  @nn.compact
  def __call__(self, x):
    """Logits [..., A] of features `x` [..., F]."""
    return nn.Dense(self.num_actions,
                    kernel_init=nn.initializers.variance_scaling(
                        0.01, 'fan_in', 'truncated_normal'))(x)
