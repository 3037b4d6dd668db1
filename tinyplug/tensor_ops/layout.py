"""Layouts of the copies a convolution makes of its operands, chosen for the machine's caches where it runs.

A channels-last copy (b, h, w, c) has one row of c values per position, c * 4 bytes apart: a register tile reading W
channels of each position (the weight gradient's column panel, one per tap and block of W channels) takes W * 4 bytes
of every row, rows that map to a few of the caches' sets (256 channels: 1 KB apart, 1/16 of them), so the panel does
not stay in the L2 for the next tile. Blocked, (c / W, b, h, w, W), each block of W channels is one contiguous stretch:
every set, one prefetch stream, and all 9 taps' panels in the same few hundred KB. Conv b8 fwd+bwd on a Zen 3 core
(AVX2, 512 KB L2), one thread: the weight gradient 256->256 14x14 48 -> 21.5 ms, 512->512 7x7 31.9 -> 21.7.
Winograd's weight transforms, for the matmuls with the tiles as rows, are stored planes outermost for the same reason
(`winograd._weight_transform`)."""
from __future__ import annotations
from typing import Any

def channel_block(device: Any) -> int | None:
  """Channels per block of `channels_last_copy` on this device: two vectors of float32, the width of the heuristic's
  CPU register tile (16 on AVX2), where `backend.narrow_vectors` holds; None elsewhere (the plain channels-last layout,
  Winograd's planes inner: AVX-512 keeps the layouts it was tuned with)."""
  from tinyplug.backend import narrow_vectors
  from tinyplug.device import renderer_of
  r = renderer_of(device)
  return max(2 * r.vector_bytes // 4, 2) if narrow_vectors(r) else None

def padded_copies(device: Any) -> bool:
  """Whether a convolution's operand read through a zero border gets a padded copy of its own on this device (where
  `backend.narrow_vectors` holds): x86 code makes each masked broadcast a branch, and AVX2's tiles broadcast per tap.
  conv_transpose2d b8 64->32 28x28 k4 s2's weight gradient on a Zen 3 core, one thread, as 4 taps x 16 channels:
  8.2-9.0 ms masked, 4.6-5.1 from the copy (0.3 ms, which its input gradient reads too). AVX-512 keeps the masked
  reads it was tuned with."""
  from tinyplug.device import narrow_vectors_on
  return narrow_vectors_on(device)

def channels_last_copy(x):
  """A copy of x (b, c, spatial..) with the channels innermost, viewed as x's shape: plain (b, spatial.., c), or in
  blocks of `channel_block` channels (c / W, b, spatial.., W) where the device has one and c is two blocks or more."""
  nd, (bs, cin), spatial = x.ndim - 2, x.shape[:2], x.shape[2:]
  w = channel_block(x.device)
  if w is None or cin % w or cin < 2 * w:
    return x.permute(0, *range(2, 2 + nd), 1).contiguous().permute(0, nd + 1, *range(1, nd + 1))
  xb = x.reshape(bs, cin // w, w, *spatial).permute(1, 0, *range(3, 3 + nd), 2).contiguous()
  return xb.permute(1, 0, nd + 2, *range(2, 2 + nd)).reshape(bs, cin, *spatial)

def output_channel_blocks(w):
  """A copy of w (cout, rest..) with the output channels innermost in blocks of `channel_block`, (cout / W, rest.., W),
  viewed as w's shape; None where the device has no block or cout is not two blocks or more (the caller's plain copy)."""
  cout, rest = w.shape[0], w.shape[1:]
  b = channel_block(w.device)
  if b is None or cout % b or cout < 2 * b: return None
  wb = w.reshape(cout // b, b, *rest).permute(0, *range(2, w.ndim + 1), 1).contiguous()
  return wb.permute(0, w.ndim, *range(1, w.ndim)).reshape(cout, *rest)
