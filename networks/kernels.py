"""Which implementation the convolutional layers run: the one place that decides.

'cpu': the ops written for XLA:CPU (conv2d, nature_convs, glyph_conv_stack, the sliced max-pool),
which turn convolutions into matmuls with hand-written gradients. 'xla': XLA's own ops (cuDNN on
GPU, the MXU on TPU), where the CPU ops would only hold patch matrices in memory. 'auto' decides
when the program is lowered, for the platform it is lowered for, so learner and actor each get their
own and nothing depends on jax.default_backend(). Parameters are the same under both, so a
checkpoint moves between them.
"""

from typing import Callable

from jax import lax

KERNELS = ('auto', 'cpu', 'xla')


def check(kernels: str) -> str:
  if kernels not in KERNELS:
    raise ValueError(f'unknown kernels {kernels!r}; choose one of {", ".join(KERNELS)}')
  return kernels


def select(kernels: str, cpu: Callable, xla: Callable, *args):
  """cpu(*args) or xla(*args), as `kernels` says; both must return the same
  shapes and dtypes. ValueError for a `kernels` not in KERNELS."""
  if check(kernels) == 'cpu':
    return cpu(*args)
  if kernels == 'xla':
    return xla(*args)
  return lax.platform_dependent(*args, cpu=cpu, default=xla)
