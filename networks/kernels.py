"""Which implementation the convolutional layers run: this is the one place
that decides.

Two implementations compute every conv layer here, with the same parameters
and the same math:

* 'cpu': the ops written for XLA:CPU (networks/conv.py's im2col / kn2row
  `conv2d`, networks/nature_cnn.py's fused `nature_convs`,
  networks/conv_stack.py's `glyph_conv_stack`, networks/pooling.py's
  sliced max-pool). They turn convolutions into matmuls over patch
  matrices, with hand-written gradients, because XLA:CPU's own
  convolution gradients are slow (docs/speed.md).
* 'xla': `lax.conv_general_dilated` and `lax.reduce_window`, which XLA
  lowers to cuDNN convolutions on GPUs and to the MXU on TPUs. On an
  accelerator the CPU ops would run as generic matmuls and copies and
  would hold the patch matrices in memory.

`network.kernels` chooses:

* 'auto' (the default): decided when the program is lowered, for the
  platform it is lowered for (`jax.lax.platform_dependent`): 'cpu' when
  lowered for CPU, 'xla' for CUDA, ROCm and TPU. The learner is lowered
  for the learner devices and the actor's policy step for the actor
  device, so each gets its own kernels, and a program lowered for CUDA on
  a CPU-only host (`jax.export`) gets convolutions. Nothing depends on
  `jax.default_backend()` or on a flag set at import.
* 'cpu' or 'xla': that implementation on every platform (tests,
  benchmarks, or a CPU whose XLA convolutions happen to be fast).

Parameters are the same under both, so a checkpoint trained on one path
evaluates or resumes on the other (tests/unit/test_kernels.py).
"""

from typing import Callable

from jax import lax

KERNELS = ('auto', 'cpu', 'xla')


def check(kernels: str) -> str:
  """Checks a network.kernels value.

  Args:
    kernels: the value to check.

  Returns:
    `kernels` unchanged.

  Raises:
    ValueError: `kernels` is not one of KERNELS (the message names the
      choices).
  """
  if kernels not in KERNELS:
    raise ValueError(f'unknown kernels {kernels!r}; choose one of {", ".join(KERNELS)}')
  return kernels


def select(kernels: str, cpu: Callable, xla: Callable, *args):
  """Runs the CPU or the XLA implementation, as `kernels` says.

  'auto' decides when the program is lowered, for the platform it is
  lowered for (jax.lax.platform_dependent): `cpu` for CPU, `xla` otherwise.

  Args:
    kernels: one of KERNELS.
    cpu: the implementation written for XLA:CPU.
    xla: the implementation with XLA's own ops. Both must return arrays of
      the same shapes and dtypes.
    *args: the arguments of both; any pytrees of arrays (None leaves
      allowed).

  Returns:
    cpu(*args) or xla(*args).

  Raises:
    ValueError: `kernels` is not one of KERNELS.
  """
  if check(kernels) == 'cpu':
    return cpu(*args)
  if kernels == 'xla':
    return xla(*args)
  return lax.platform_dependent(*args, cpu=cpu, default=xla)
