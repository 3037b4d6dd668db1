"""Winograd's minimal filtering for stride-1 3x3 convolutions, F(m x m, 3 x 3), as ordinary tensor ops: the weight
becomes G g G^T, each (m+2) x (m+2) input tile B^T d B, each of the (m+2)^2 tile positions is a matmul over the
input channels, and A^T M A turns each product tile back into m x m outputs. conv2d (tensor_ops/nn.py) uses it for
the output and for the input gradient (itself a stride-1 3x3 convolution) with m=2; its weight gradient stays direct.
The channel mixing does (m+2)^2 / (9 m^2) of direct convolution's multiplies (m=2: 1/2.25, m=4: 1/4), at the price
of the transforms and, for larger m, more rounding (m=4 misses the conv tests' float32 tolerances by 2x). Each
transform is one kernel (a constant matrix contracted) and the 16 matmuls one kernel, in one of two layouts: where an
image has 16 tiles (`tiles_inner`) the tiles innermost, otherwise the tiles as the matmul's rows and the channels
innermost (`_winograd_tile_rows`). The weight is transformed once a step, per output channel; the input gradient reads
that transform (its flipped transpose is a reordering of its planes), one of the two matmuls from a transposed copy."""
from __future__ import annotations
import functools
from fractions import Fraction as Fr
import numpy as np
from tinyplug.helpers import ContextVar
from tinyplug.tensor_ops.layout import channel_block, channels_last_copy

WINO = ContextVar("WINO", -1, "stride-1 3x3 convolutions as Winograd F(2x2,3x3): 1 every one it can take, 0 none, "
                  "-1 (default) those of the shapes where it measured faster (winograd.wino_wins)")

# (B^T, G, A^T) per output tile size m; interpolation points 0, 1, -1 (and 2, -2 for m=4) and infinity
_MATRICES: dict[int, tuple[list[list], list[list], list[list]]] = {
  2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
      [[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
      [[1, 1, 1, 0], [0, 1, -1, -1]]),
  4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0],
       [0, 4, 0, -5, 0, 1]],
      [[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
       [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
      [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
TILE = 2   # F(4x4,3x3) was tried too: see benchmarks/README.md (session 20, helper wino)

def _kron(left: list[list], right: list[list]) -> np.ndarray:
  """The Kronecker product of two small matrices: the 2-D transform X -> L X R^T as one matrix on flattened X."""
  return np.kron(np.array(left, dtype=np.float64), np.array(right, dtype=np.float64))

@functools.lru_cache(maxsize=64)
def _realized(cls, values: tuple, shape: tuple[int, ...], device: str, dtype):
  return cls(np.array(values, dtype=np.float64).reshape(shape), device=device, dtype=dtype).realize()

def _constant(like, mat: np.ndarray):
  """mat as a realized tensor of like's device and dtype, one buffer per matrix: the input gradient's weight transform
  is then the forward's own node, computed once. Each transform is a matmul with such a matrix, one kernel that
  writes every plane into one buffer (a kernel per plane re-read the operand for each; planes joined by a cat
  evaluated every plane's branch per element)."""
  return _realized(type(like), tuple(mat.ravel().tolist()), mat.shape, like.device, like.dtype)

def _winograd_tile_rows(x, u, kv, ky, m: int, ty: int, tx: int):
  """winograd_conv3x3's (bs, cout, ty*m, tx*m) output with the tiles as the matmul's rows: V (a*a, tiles, cin) @ U^T
  (a*a, cin, cout) as one kernel, each transform one kernel with the channels innermost, V reduced in place from the
  windows of a channels-last copy of x (the forward's is the weight gradient's own copy). 256->256 14x14 b8 fwd+bwd,
  one Zen 4 thread: the same time as a kernel per tile position (41.6 against 41.9 ms), in 15 kernels a step instead
  of 72, each with rows for 16 threads (the per-position matmuls' batch of 8 had 8)."""
  a, (bs, cin, h, w), cout = m + 2, x.shape, u.shape[2]
  tiles = bs * ty * tx
  xc = channels_last_copy(x).permute(0, 2, 3, 1)                                  # (bs, h, w, cin)
  if (ty + 1) * m != h or (tx + 1) * m != w:
    xc = xc.pad(((0, 0), (0, (ty + 1) * m - h), (0, (tx + 1) * m - w), (0, 0)))
  win = xc.permute(0, 3, 1, 2)._pool((a, a), m)                                    # (bs, cin, ty, tx, a, a)
  xw = win.permute(4, 5, 0, 2, 3, 1).reshape(a * a, tiles * cin)
  v = _constant(x, kv).dot(xw).reshape(a * a, tiles, cin)
  prod = v.dot(u)                                                                   # (a*a, tiles, cout)
  if channel_block(x.device) is not None: return _output_transform_channels_last(x, prod, ky, m, ty, tx)
  y = _constant(x, ky).dot(prod.reshape(a * a, tiles * cout)).contiguous().reshape(m, m, bs, ty, tx, cout)
  return y.permute(2, 5, 3, 0, 4, 1).reshape(bs, cout, ty * m, tx * m)

def _output_transform_channels_last(x, prod, ky, m: int, ty: int, tx: int):
  """A^T M A of the tile rows' products (a*a, tiles, cout) stored channels-last, (bs, ty*m, tx*m, cout), each tile's
  m x m outputs where they land in the image, so the output's layout is one transpose of (bs, h*w, cout) (on AVX2,
  `layout.channel_block`). Stored by tile position first, (m, m, bs, ty, tx, cout), the copy into the output read two
  planes far apart per row: conv b8 64->64 56x56 forward, one Zen 3 thread, that copy 2.4-2.7 ms, this one's 1.0;
  fwd+bwd 56x56 66.0-67.6 -> 60.0-65.6 ms, 64->64 28x28 14.5-16.1 -> 13.8-14.3, 128->128 14x14 14.6-15.3 -> 14.0-14.2."""
  a, bs, cout = m + 2, x.shape[0], prod.shape[2]
  p = prod.reshape(a * a, bs, ty, 1, tx, 1, cout)
  k = _constant(x, ky).reshape(m, m, a * a).permute(2, 0, 1).reshape(a * a, 1, 1, m, 1, m, 1)
  y = (p * k).sum(0).contiguous()                                                  # (bs, ty, m, tx, m, cout)
  return y.permute(0, 5, 1, 2, 3, 4).reshape(bs, cout, ty * m, tx * m)

def _flip_planes(m: int) -> list[int] | None:
  """The tile positions' order that turns the transform of a weight into that of its flipped transpose: G
  flip(g) = P (G g) for a row permutation P (m=2's points 0, 1, -1, infinity: the first and last rows trade
  places), so plane (r, c) of the flipped weight's transform is plane (P r, P c) of the weight's, transposed.
  None where no row permutation does it."""
  g = np.array(_MATRICES[m][1], dtype=np.float64)
  rows = [next((j for j in range(len(g)) if np.array_equal(g[j], r)), None) for r in g[:, ::-1]]
  if None in rows: return None
  return [rows[r] * len(g) + rows[c] for r in range(len(g)) for c in range(len(g))]

def _weight_transform(weight, m: int, transposed: bool = False, planes_outer: bool = False):
  """U (a*a, cout, cin) = G g G^T of every (cout, cin) filter g, a plane per tile position, as a view of a (cout, a*a,
  cin) buffer: per output channel (the loop the threads share; planes outermost left 16 threads 2 rows), a (a*a, 9)
  @ (9, cin) matmul over the taps copied out as rows (reduced in place, 9 floats apart, every vector was a gather:
  6.4 ms at 512->512, one thread). `transposed`: U^T (a*a, cin, cout), a view of U's buffer copied transposed into
  (cin, a*a, cout), for a matmul whose weight operand wants cout contiguous (reading U's planes transposed: the
  tiles-inner input gradient's matmuls were 40% slower); the forward and its input gradient share U. `planes_outer`
  (tiles as rows on a machine with `layout.channel_block`): U or U^T copied planes outermost instead, (a*a, cout, cin)
  or (a*a, cin, cout), each plane's rows contiguous (planes inner, a plane's rows are a*a*c floats apart and its
  column panel falls into a few cache sets: 256->256 14x14 b8, (16, 392, 256) @ (16, 256, 256) on a Zen 3 core
  18.5 -> 10.7 ms); the input gradient's then costs a copy of its own."""
  (cout, cin), a = weight.shape[:2], m + 2
  # the taps from the weight's own 4-d index (a view of it as 2-d or 3-d kept divisions by 9 and 3 that hid a
  # transpose from the heuristic: 6 against 2 ms)
  taps = weight.permute(0, 2, 3, 1).contiguous().reshape(cout, 9, cin)
  u = _constant(weight, _kron(_MATRICES[m][1], _MATRICES[m][1])).reshape(1, a * a, 9).dot(taps)   # (cout, a*a, cin)
  if planes_outer: return (u.permute(1, 2, 0) if transposed else u.permute(1, 0, 2)).contiguous()
  if transposed: u = u.permute(2, 1, 0).contiguous()                                             # (cin, a*a, cout)
  return u.permute(1, 0, 2)

def winograd_conv3x3(x, weight, m: int = TILE, flipped_transpose: bool = False):
  """The valid (unpadded) stride-1 convolution of x (bs, cin, h, w) with weight (cout, cin, 3, 3); with
  `flipped_transpose`, with the weight (cin, cout, 3, 3) flipped and its channels swapped (an input gradient's),
  from the same transform of it as the forward's where the tile size allows (`_flip_planes`)."""
  bt, _, at = _MATRICES[m]
  if flipped_transpose and _flip_planes(m) is None: weight, flipped_transpose = weight.transpose(0, 1).flip((2, 3)), False
  h, w = x.shape[2:]
  oh, ow = h - 2, w - 2
  ty, tx = -(-oh // m), -(-ow // m)
  inner = tiles_inner(ty, tx, blocked=channel_block(x.device) is not None)
  kv, ky = _kron(bt, bt), _kron(at, at)
  # U (a*a, cout, cin) for the tiles-inner matmul, U^T (a*a, cin, cout) for the tile rows'; the input gradient's is
  # the other one of the forward's transform
  u = _weight_transform(weight, m, transposed=flipped_transpose if inner else not flipped_transpose,
                        planes_outer=not inner and channel_block(x.device) is not None)
  if flipped_transpose:
    # the planes in the forward transform's order, the input's and output's transforms reordered to match
    order = _flip_planes(m)
    kv, ky = kv[order], ky[:, order]
  y = (_winograd_tiles_inner if inner else _winograd_tile_rows)(x, u, kv, ky, m, ty, tx)
  return y.shrink((None, None, (0, oh), (0, ow))) if (ty * m, tx * m) != (oh, ow) else y

def _winograd_tiles_inner(x, u, kv, ky, m: int, ty: int, tx: int):
  """winograd_conv3x3's (bs, cout, ty*m, tx*m) output with the tiles innermost: U (a*a, cout, cin) @ V (a*a, cin,
  bs*tiles)."""
  a, (bs, cin, h, w), cout = m + 2, x.shape, u.shape[1]
  x = x.pad(((0, 0), (0, 0), (0, (ty + 1) * m - h), (0, (tx + 1) * m - w)))
  # V (a*a, cin, bs*tiles): every tile's a x a window copied out as (a*a, cin * bs * tiles) rows, then B^T d B of them
  # as one (a*a, a*a) @ (a*a, cin * bs * tiles) matmul (reduced in place from the window view, every vector of tiles
  # was a gather: 1.9 ms; as a batch of (a*a, a*a) @ (a*a, tiles) over the channels, V a strided view, 1.3 ms; now 0.7)
  win = x._pool((a, a), m)                                                         # (bs, cin, ty, tx, a, a)
  xw = win.permute(4, 5, 1, 0, 2, 3).reshape(a * a, cin * bs * ty * tx).contiguous()
  v = _constant(x, kv).dot(xw).reshape(a * a, cin, bs * ty * tx)
  # the channel mixing: a matmul per tile position, (cout, cin) @ (cin, bs * tiles), both operands row-major (tiles
  # by channels made both transforms transposing copies: 512->512 7x7, one thread, the output's 6.6 ms), then the
  # products back to m x m outputs per tile, a matmul into (cout, m*m, tiles) and a view of it (reduced in the
  # output's order, 16 gathered planes: 1.7 against 0.5 ms)
  prod = u.dot(v).permute(1, 0, 2)                                               # (cout, a*a, bs*tiles), a view
  y = _constant(x, ky).reshape(1, m * m, a * a).dot(prod).contiguous().reshape(cout, m, m, bs, ty, tx)
  return y.permute(3, 0, 4, 1, 5, 2).reshape(bs, cout, ty * m, tx * m)

# the tiles innermost where a vector of tiles is whole images' tiles: 16 per image (a 7x7 or 8x8 output). Conv b8
# fwd+bwd, one Zen 4 thread: 512->512 7x7 70.6 -> 55.0 ms; at 256->256 14x14 (49 tiles an image) a vector's windows
# each took a division by 7 and 49 and the tiles padded to 416: 41.7 -> 55 ms. The tiles as rows at 512->512 7x7:
# its (16, 128, 512) @ (16, 512, 512) matmul 14.0 against 9.9 ms
TILES_PER_VECTOR = 16

def tiles_inner(ty: int, tx: int, blocked: bool = False) -> bool:
  """Whether winograd_conv3x3 runs with the tiles innermost (else as the matmul's rows) for ty x tx tiles an image;
  `blocked`: on a machine with `layout.channel_block` (AVX2), only for one vector of tiles an image, where the tile
  rows' planes-outermost matmul wins beyond it. Conv b8 64->64 fwd+bwd, one Zen 3 thread, tiles inner / rows: 16x16
  (64 tiles) 6.4-6.8 / 4.7 ms; 24x24 (144) 13.4-13.9 / 10.2; 56x56 (784: the window copy divides every lane by 28
  and 784, the input transform alone 24 ms against 3.1)."""
  if blocked: return ty * tx == TILES_PER_VECTOR
  return (ty * tx) % TILES_PER_VECTOR == 0

# where the Winograd form measured clearly faster (forward and forward + backward, one thread and two, Zen 4): many
# channels on a short output (the direct convolution's rows are short there) and enough tiles for each tile
# position's matmul (b1/b2 lost); 64-128 channels were even or slower with the backward. Outputs of at most 8x8 want
# 512 channels: since short rows take the turned-around direct tile, 256->256 7x7 b8 fwd+bwd runs 15.0-15.7 ms direct
# against 17.5-17.7 as Winograd per thread (torch 16.0-16.4); 512->512 7x7 74 against 56. Up to 28x28 since the
# tiles became the matmul's rows: 256->256 28x28 b8 direct 222.8 against 167.5 ms per thread, 109.5 against 84.3 on
# two threads (a kernel per tile position was even or slower there)
WINO_MIN_CHANNELS, WINO_MAX_OUT, WINO_MIN_TILES = 256, 28, 128
WINO_SHORT_OUT, WINO_SHORT_MIN_CHANNELS = 8, 512

# ... and on a machine with `layout.channel_block` (AVX2: narrower direct tiles; the blocked layouts speed Winograd's
# matmuls and the weight gradient) from 64 channels. Conv b8 fwd+bwd, one Zen 3 thread, Winograd against direct:
# 64->64 28x28 13.7 / 16.8 ms, 14x14 3.3 / 7.8, 18x18 5.6 / 6.9; b2 64->64 28x28 3.2 / 4.0; 128->128 28x28 51 / 97,
# 14x14 14.0 / 30.6
WINO_BLOCKED_MIN_CHANNELS = 64
# ... up to 56x56 outputs there (tile rows): conv b8 64->64 56x56, one Zen 3 thread, forward 19.4 ms against the direct
# row band's 22.8 (its padded copy included), fwd+bwd 61.5 against 76.0
WINO_BLOCKED_MAX_OUT = 56

def wino_wins(bs: int, cin: int, cout: int, out_hw: tuple[int, ...], blocked: bool = False) -> bool:
  """Whether the default (WINO=-1) takes the Winograd form for a convolution of these sizes; `blocked`: on a machine
  with `layout.channel_block`."""
  tiles = bs * -(-out_hw[0] // TILE) * -(-out_hw[1] // TILE)
  least = WINO_SHORT_MIN_CHANNELS if max(out_hw) <= WINO_SHORT_OUT else \
    WINO_BLOCKED_MIN_CHANNELS if blocked else WINO_MIN_CHANNELS
  most = WINO_BLOCKED_MAX_OUT if blocked else WINO_MAX_OUT
  return min(cin, cout) >= least and max(out_hw) <= most and tiles >= WINO_MIN_TILES

def use_winograd(x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, stride, dilation, dtype,
                 device: str | None = None) -> bool:
  """Whether conv2d of these shapes (the input's padded) and arguments takes the Winograd form: a one-group stride-1
  dilation-1 3x3 convolution with no accumulation dtype of its own, under WINO=1 always, by default where
  `wino_wins` on `device`."""
  if not (mode := WINO.value) or groups != 1 or dtype is not None or len(w_shape) != 4 or len(x_shape) != 4:
    return False
  if tuple(w_shape[2:]) != (3, 3) or any(s != 1 for s in stride) or any(d != 1 for d in dilation): return False
  out_hw = tuple(i - 2 for i in x_shape[2:])
  if min(out_hw) < 1: return False
  return mode == 1 or wino_wins(x_shape[0], w_shape[1], w_shape[0], out_hw, channel_block(device) is not None)
