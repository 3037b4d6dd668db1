"""Tensors on the DISK device (runtime/disk.py): a file's bytes, read by moving them to a compute device.

The DISK device runs no kernels, so `to(device)` does not copy a disk tensor's value: it builds the same graph on
`device` over copies of the disk buffers it reads (a slice of a 1-D buffer, as safetensors loaders take them, copies
only the bytes of that slice)."""
from __future__ import annotations
from tinyplug.uop.ops import Ops, UOp
from tinyplug.tensor_ops import graph

def is_disk(device) -> bool: return isinstance(device, str) and device.startswith("DISK:")

def pending_writes(u: UOp) -> list[UOp]:
  """The copies to a DISK device in u's graph not written yet (they must reach the file before it is read)."""
  return [n for n in u.toposort() if n.op is Ops.COPY and is_disk(n.device)]

def from_disk(u: UOp, device: str) -> UOp:
  """u's value computed on `device` from copies of the DISK buffers it reads."""
  from tinyplug.runtime.disk import range_buffer
  memo: dict[UOp, UOp] = {}
  made: dict[UOp, UOp | None] = {}
  def leaf(x: UOp) -> UOp | None:
    if x not in made: made[x] = _leaf(x)
    return made[x]
  def _leaf(x: UOp) -> UOp | None:
    if x.op is Ops.SHRINK and x.src[0].op is Ops.BUFFER and is_disk(x.src[0].device) and len(x.shape) == 1:
      (start, end), = x.arg   # just the slice's bytes
      return graph.copy_to(range_buffer(x.device, start * x.dtype.itemsize, end - start, x.dtype), device)
    if x.op is Ops.BUFFER and is_disk(x.device): return graph.copy_to(x, device)
    if x.op is Ops.DEVICE and is_disk(x.arg): return graph.device_uop(device)
    if x.op is Ops.COPY and is_disk(x.device): raise RuntimeError("a copy to the disk device is not written yet")
    return None
  for x in u.toposort(gate=lambda x: leaf(x) is None):
    memo[x] = lf if (lf := leaf(x)) is not None else x.replace(src=tuple(memo[s] for s in x.src)) if x.src else x
  return memo[u]
