"""`glyph_conv_stack`: a glyph embedding followed by 3x3 stride-1 SAME
convolutions with ELU (NLE's baseline map and crop encoders), as one
custom-VJP op that is fast to differentiate on XLA:CPU (docs/speed.md).

* Forward: the first layer as nine table lookups (`_embed_conv3x3`), then XLA's conv over chunks of
  ~_FWD_CELLS cells; the ELU outputs are saved (elu'(z) is 1 where y > 0, else y + 1).
* Backward: ~_BWD_CELLS cells at a time, layers in reverse, each an im2col
  and one matmul that stay in cache; the input gradient is itself a 3x3
  SAME conv with the kernel flipped and transposed (no col2im).
* The first layer's input gradient is never formed: with S[i, j, k] the sum of dz0 over the cells
  whose tap (i, j) read glyph k, the embedding gradient is S @ W0' and the first kernel's E^T @ S.

Only the float summation order differs from the plain network.
"""

import jax
import jax.numpy as jnp
from jax import lax

from networks import kernels as kernels_lib

# Cells (map positions) per chunk, so that each chunk's patches stay in cache.
_FWD_CELLS = 16 * 21 * 79
_BWD_CELLS = 2 * 21 * 79

_CONV_DIMS = ('NHWC', 'HWIO', 'NHWC')


def patches3x3(x):
  """The zero-padded 3x3 neighbourhoods of every cell (im2col for a SAME conv):
  [n, H, W, C] -> [n, H, W, 9 C] in HWIO kernel order."""
  h, w = x.shape[1:3]
  x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  return jnp.concatenate([x[:, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=-1)


def _conv3x3(x, kernel, bias):
  return lax.conv_general_dilated(x, kernel, (1, 1), ((1, 1), (1, 1)),
                                  dimension_numbers=_CONV_DIMS) + bias


def _transposed_kernel(kernel):
  """[3, 3, I, O] -> [9 O, I]: the kernel of the input gradient's conv."""
  return jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2).reshape(-1, kernel.shape[2])


def _chunk(a, cells: int):
  """[N, H, W, ...] -> [N / m, m, H, W, ...] for the largest m dividing N with
  m * H * W <= cells (at least 1)."""
  maps = max(1, cells // (a.shape[1] * a.shape[2]))
  m = next(m for m in range(min(maps, a.shape[0]), 0, -1) if a.shape[0] % m == 0)
  return a.reshape((a.shape[0] // m, m) + a.shape[1:])


def _unchunk(a):
  return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def glyph_conv_stack(glyphs, embedding, kernels, biases, impl: str = 'auto'):
  """elu(conv(... elu(conv(embedding[glyphs], k0) + b0) ...) + bL), each conv
  3x3, stride 1, padding 1; gradients to all but the glyphs.

  Args:
    glyphs: int [N, H, W] in [0, G).
    embedding: [G, E].
    kernels: one [3, 3, Cin, Cout] per layer; biases one [Cout] per layer.

  Returns:
    [N, H, W, C_last] in the kernels' dtype.
  """
  cpu = lambda g, e, k, b: _glyph_conv_stack(g, e.astype(k[0].dtype), k, b)
  return kernels_lib.select(impl, cpu, xla_glyph_conv_stack,
                            glyphs.astype(jnp.int32), embedding, tuple(kernels), tuple(biases))


def xla_glyph_conv_stack(glyphs, embedding, kernels, biases):
  """`glyph_conv_stack` as an embedding lookup and XLA's own convolutions.

  The lookup reads `embedding` in its own dtype and casts after: its gradient
  is a scatter-add onto a few glyphs, many times slower in bfloat16 on a GPU.
  """
  x = jnp.take(embedding, glyphs, axis=0).astype(kernels[0].dtype)
  for k, b in zip(kernels, biases):
    x = jax.nn.elu(_conv3x3(x, k, b))
  return x


def _tap_tables(embedding, kernel):
  """[G, E] and [3, 3, E, C] -> [3, 3, G + 1, C]: each glyph's embedding
  times each tap of the first kernel; row G is 0 (the zero padding)."""
  tables = jnp.einsum('ge,ijeo->ijgo', embedding, kernel)
  return jnp.pad(tables, ((0, 0), (0, 0), (0, 1), (0, 0)))


def _tap_glyphs(glyphs, pad_glyph: int):
  """[N, H, W] -> ((i, j), [N, H, W]) for the nine taps in HWIO order: the glyph that tap (i, j)
  reads at each cell p, glyphs[p + (i - 1, j - 1)], and pad_glyph beyond the map's edges."""
  h, w = glyphs.shape[1:3]
  padded = jnp.pad(glyphs, ((0, 0), (1, 1), (1, 1)), constant_values=pad_glyph)
  return [((i, j), padded[:, i:i + h, j:j + w]) for i in range(3) for j in range(3)]


def _embed_conv3x3(glyphs, tables, bias):
  """conv3x3(embedding[glyphs]) + bias as nine table lookups (_tap_tables):
  out[p] = bias + sum over taps (i, j) of tables[i, j, glyph at p + (i - 1,
  j - 1)]: 9 gathers of C floats a cell instead of 9 E C multiply-adds."""
  out = bias
  for (i, j), g in _tap_glyphs(glyphs, tables.shape[2] - 1):
    out = out + tables[i, j].at[g].get(mode='promise_in_bounds')
  return out


@jax.custom_vjp
def _glyph_conv_stack(glyphs, embedding, kernels, biases):
  x = jax.nn.elu(_embed_conv3x3(glyphs, _tap_tables(embedding, kernels[0]), biases[0]))
  for k, b in zip(kernels[1:], biases[1:]):
    x = jax.nn.elu(_conv3x3(x, k, b))
  return x


def _fwd(glyphs, embedding, kernels, biases):
  tables = _tap_tables(embedding, kernels[0])

  def body(_, g):
    x = jax.nn.elu(_embed_conv3x3(g, tables, biases[0]))
    ys = [x]
    for k, b in zip(kernels[1:], biases[1:]):
      x = jax.nn.elu(_conv3x3(x, k, b))
      ys.append(x)
    return None, ys

  _, ys = lax.scan(body, None, _chunk(glyphs, _FWD_CELLS))
  ys = [_unchunk(y) for y in ys]
  return ys[-1], (glyphs, embedding, kernels, ys)


def _bwd(res, dy):
  glyphs, embedding, kernels, ys = res
  transposed = [_transposed_kernel(k) for k in kernels]

  def body(acc, chunk):
    g, ysc, grad = chunk
    s, dws, dbs = acc[0], list(acc[1]), list(acc[2])
    for l in reversed(range(len(kernels))):
      y = ysc[l]
      dz = grad * jnp.where(y > 0, 1.0, y + 1.0)  # elu'(z) from y = elu(z)
      dbs[l] = dbs[l] + dz.sum((0, 1, 2))
      if l:
        # dW^T [Cout, 9 Cin] = dz^T @ patches: XLA transposes the thin dz.
        dws[l] = dws[l] + lax.dot_general(dz, patches3x3(ysc[l - 1]),
                                          (((0, 1, 2), (0, 1, 2)), ((), ())))
        grad = patches3x3(dz) @ transposed[l]
      else:
        # Each cell's dz0 goes to the row of the glyph each tap read there.
        rows = dz.reshape(-1, dz.shape[-1])
        for (i, j), tap in _tap_glyphs(g, num_glyphs):
          s = s.at[i, j, tap.reshape(-1)].add(rows, mode='promise_in_bounds')
    return (s, dws, dbs), None

  num_glyphs, c0 = embedding.shape[0], kernels[0].shape[3]
  init = (jnp.zeros((3, 3, num_glyphs + 1, c0), embedding.dtype),
          [jnp.zeros((k.shape[3], 9 * k.shape[2]), k.dtype) for k in kernels],
          [jnp.zeros((k.shape[3],), k.dtype) for k in kernels])
  chunks = (_chunk(glyphs, _BWD_CELLS), [_chunk(y, _BWD_CELLS) for y in ys], _chunk(dy, _BWD_CELLS))
  (s, dws, dbs), _ = lax.scan(body, init, chunks)
  # s[k, i, j, o] = sum over the cells p whose tap (i, j) read glyph k of dz0[p, o]
  # (row num_glyphs gathered the zero padding's and is dropped).
  s = s[:, :, :num_glyphs].transpose(2, 0, 1, 3)
  dk0 = jnp.einsum('ge,gijo->ijeo', embedding, s)
  dembedding = jnp.einsum('gijo,ijeo->ge', s, kernels[0])
  dks = (dk0,) + tuple(dw.T.reshape(k.shape) for dw, k in zip(dws[1:], kernels[1:]))
  return None, dembedding, dks, tuple(dbs)


_glyph_conv_stack.defvjp(_fwd, _bwd)
