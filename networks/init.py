"""Weight initialisation schemes, applied to a freshly initialised params tree.

'lecun' keeps Flax's initialisers. 'orthogonal' is OpenAI baselines' and cleanrl's (the published
PPO curves'): orthogonal kernels with gain sqrt(2) in the torso, 1 in the LSTM core and the value
head, 0.01 in the policy head; biases 0. A conv kernel is orthogonal as a [kh kw cin, cout] matrix
(PyTorch's `orthogonal_`); other parameters keep their initialiser.
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
  if path[0] == policy_head:
    return POLICY_GAIN
  if path[0] == value_head:
    return VALUE_GAIN
  if path[0] == core:
    return CORE_GAIN
  return HIDDEN_GAIN


def orthogonal_kernel(key, shape, gain: float, dtype=jnp.float32):
  """An orthogonal [prod(shape[:-1]), shape[-1]] matrix times `gain`, reshaped to `shape`."""
  flat = (math.prod(shape[:-1]), shape[-1])
  return nn.initializers.orthogonal(scale=gain)(key, flat, dtype).reshape(shape)


def apply_init(params: Dict[str, Any], scheme: str, key, *, policy_head: str = 'policy_head',
               value_head: str = 'value_head', core: str = 'core') -> Dict[str, Any]:
  """Params re-initialised with `scheme` (ValueError if not one of INITS).

  Kernels are the 'kernel' leaves of at least 2 dimensions, except a categorical value head's logits
  (kept at zeros); the biases beside them become 0. Each kernel's key is folded from `key` and its
  position in the sorted tree, so the result depends only on `key` and the tree.

  Args:
    policy_head, value_head, core: top-level names that get POLICY_GAIN,
      VALUE_GAIN and CORE_GAIN; every other kernel gets HIDDEN_GAIN.

  Returns:
    Params of the same tree, shapes and dtypes ('lecun': `params` itself).
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
