"""Weight initialisation schemes, applied to a freshly initialised network.

'lecun' keeps Flax's initialisers (LeCun normal kernels, zero biases, the
policy head at 0.01 scale). 'orthogonal' is the scheme of OpenAI baselines
and cleanrl's Atari agents, which the published PPO curves use:

* every Dense or conv kernel of the torso: orthogonal with gain sqrt(2)
  (ReLU's), biases 0;
* the LSTM core's kernels: orthogonal with gain 1, biases 0;
* the policy head: orthogonal with gain 0.01 (a near-uniform first policy);
* the value head: orthogonal with gain 1 (one column per task).

A conv kernel [kh, kw, cin, cout] is made orthogonal as a [kh kw cin, cout]
matrix, as PyTorch's `orthogonal_` does on its [cout, cin kh kw] weight.
Other parameters (embeddings, position encodings) keep their initialiser.

Written as a transform of the params tree, so every network gets the same
scheme without each module taking initialiser arguments.
"""

import math
from typing import Any, Dict

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from rl import value_classification as vc

INITS = ('lecun', 'orthogonal')

HIDDEN_GAIN = math.sqrt(2.0)
POLICY_GAIN = 0.01
VALUE_GAIN = 1.0
CORE_GAIN = 1.0


def _gain(path, policy_head: str, value_head: str, core: str):
  """The orthogonal gain for the kernel at `path` (a tuple of names)."""
  if path[0] == policy_head:
    return POLICY_GAIN
  if path[0] == value_head:
    return VALUE_GAIN
  if path[0] == core:
    return CORE_GAIN
  return HIDDEN_GAIN


def orthogonal_kernel(key, shape, gain: float, dtype=jnp.float32):
  """An orthogonal kernel, its leading axes flattened to one for the orthogonality.

  Args:
    key: a PRNG key.
    shape: [..., fan_out], e.g. [kh, kw, cin, cout] or [fan_in, fan_out].
    gain: the scale of the orthogonal matrix.
    dtype: the kernel's dtype.

  Returns:
    An array of `shape`: an orthogonal [prod(shape[:-1]), fan_out] matrix
    times `gain`, reshaped.
  """
  flat = (math.prod(shape[:-1]), shape[-1])
  return nn.initializers.orthogonal(scale=gain)(key, flat, dtype).reshape(shape)


def apply_init(params: Dict[str, Any], scheme: str, key, *, policy_head: str = 'policy_head',
               value_head: str = 'value_head', core: str = 'core') -> Dict[str, Any]:
  """Params re-initialised with `scheme` (see the module docstring).

  Kernels are the leaves named 'kernel' of at least 2 dimensions (Dense,
  conv, the value head, the LSTM cell's gates), except a categorical value
  head's logits (vc.LOGITS: zeros, a uniform start); the biases beside them
  become 0. The key of each kernel is folded from `key` and its position in
  the sorted tree, so the result depends only on `key` and the tree. Other
  leaves are kept.

  Args:
    params: the network's params, freshly initialised.
    scheme: one of INITS; 'lecun' returns `params` unchanged.
    key: a PRNG key.
    policy_head: the top-level name of the policy head (gain POLICY_GAIN).
    value_head: the top-level name of the value head (gain VALUE_GAIN).
    core: the top-level name of the LSTM core (gain CORE_GAIN); every other
      kernel gets HIDDEN_GAIN.

  Returns:
    Params of the same tree, shapes and dtypes (a plain nested dict for
    'orthogonal').

  Raises:
    ValueError: `scheme` is not one of INITS.
  """
  if scheme not in INITS:
    raise ValueError(f'unknown init {scheme!r}; choose one of {", ".join(INITS)}')
  if scheme == 'lecun':
    return params
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  # A categorical value head's logits keep their zero start (DreamerV3), and their bias.
  with_kernel = {path[:-1] for path, value in flat.items()
                 if path[-1] == 'kernel' and value.ndim >= 2
                 and path[:2] != (value_head, vc.LOGITS)}
  out = {}
  for i, (path, value) in enumerate(sorted(flat.items())):
    if path[:-1] not in with_kernel:
      out[path] = value                      # embeddings, position encodings, ...
    elif path[-1] == 'kernel':
      gain = _gain(path, policy_head, value_head, core)
      out[path] = orthogonal_kernel(jax.random.fold_in(key, i), value.shape, gain, value.dtype)
    else:
      out[path] = jnp.zeros_like(value)      # the bias beside a kernel
  return flax.traverse_util.unflatten_dict(out)
