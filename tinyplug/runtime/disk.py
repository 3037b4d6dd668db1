"""DISK: a file as device memory (tinygrad's `disk:<path>` device).

It holds data and runs no kernels. A buffer on `DISK:<path>` is the file's first bytes (the file is created or grown
to fit), mapped into memory; `range_buffer` maps a byte range further in. Tensors over it (`Tensor.empty(...,
device="disk:<path>")`, `Tensor(pathlib.Path)`, `t.to("disk:<path>")`) are read by moving them to a compute device
(tensor_ops/disk.py). The device is opened by name only: it is no plugin's, and `Device.available()` never lists it."""
from __future__ import annotations
import mmap, os
from tinyplug.uop.dtype import DType
from tinyplug.uop.ops import UOp

class DiskAllocator:
  """Memory is a window of the file: a memoryview over a shared mapping (writes reach the file)."""
  def __init__(self, path: str): self.path = path
  def view(self, offset: int, nbytes: int) -> memoryview:
    if nbytes == 0: return memoryview(bytearray(0))
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      if os.fstat(fd).st_size < offset + nbytes: os.ftruncate(fd, offset + nbytes)
      mapped = mmap.mmap(fd, offset + nbytes)
    finally: os.close(fd)   # the mapping stays valid without the descriptor
    return memoryview(mapped)[offset:offset + nbytes]
  def alloc(self, nbytes: int) -> memoryview: return self.view(0, nbytes)
  def free(self, handle: memoryview, nbytes: int) -> None: pass   # unmapped when the last view goes
  def copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src

class DiskDevice:
  """The registry's object for `DISK:<path>`: an allocator, and clear errors for anything that would run a kernel."""
  def __init__(self, name: str):
    self.name = name
    path = name.partition(":")[2]
    if not path: raise ValueError("the disk device needs a file: disk:<path>")
    self.allocator = DiskAllocator(path)
  def synchronize(self) -> None: pass
  def count(self) -> int: return 1
  @property
  def renderer(self):
    raise RuntimeError(f"{self.name} holds data and runs no kernels: move the tensor to a compute device first "
                       "(t.to('CPU'))")
  compiler = renderer

def range_buffer(device: str, offset: int, size: int, dtype: DType) -> UOp:
  """A BUFFER uop over `size` elements of the file of `device`, from byte `offset` on."""
  from tinyplug.device import Buffer, Device, _attach_buffer
  from tinyplug.helpers import GlobalCounters
  u = UOp.new_buffer(device, size, dtype)
  buf = Buffer(device, size, dtype)
  buf._handle = Device[device].allocator.view(offset, buf.nbytes)
  GlobalCounters.mem_used += buf.nbytes   # given back when the Buffer goes, as for any allocation
  _attach_buffer(u, buf)
  return u
