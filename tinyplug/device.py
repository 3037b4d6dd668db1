"""Devices: the registry behind `Device` and device buffers. The interfaces a backend implements live in
`tinyplug.backend` (re-exported here)."""
from __future__ import annotations
import contextlib, pickle, sys, weakref
from typing import Any, Iterator
import numpy as np
from tinyplug import events
from tinyplug.helpers import GlobalCounters, getenv
from tinyplug.uop.dtype import DType, to_np_dtype
from tinyplug.uop import ops as _uop_ops
from tinyplug.uop.ops import Ops, UOp, check_buffer_size
from tinyplug.uop.sidetable import NodeField
from tinyplug.backend import (Allocator, Compiled, Compiler, HostAllocator, LRU, LRU_MAX, LRU_MIN, Program, ProgramSpec,
                              Renderer, ReuseAllocator)
from tinyplug.backend import narrow_vectors

__all__ = ["Buffer", "Device", "buffer_of", "has_buffer", "Allocator", "Compiled", "Compiler", "HostAllocator", "LRU", "LRU_MAX", "LRU_MIN", "Program",
           "ProgramSpec", "Renderer", "ReuseAllocator"]

# ---------------- buffers ----------------

class Buffer:
  """`size` elements of `dtype` on a device; memory is allocated on first use."""
  # slots: a realize plan makes (and frees) one per output, a tiny op's every time (a __dict__ cost ~0.1 us more)
  __slots__ = ("device", "size", "dtype", "_handle", "owned", "_allocator", "__weakref__")
  def __init__(self, device: str, size: int, dtype: DType):
    check_buffer_size(size, dtype)
    self.device, self.size, self.dtype = device, size, dtype
    self._handle: Any = None
    self.owned = True   # False: the memory belongs to someone else (from_address); it is never freed here
  @classmethod
  def from_address(cls, device: str, size: int, dtype: DType, address: int) -> Buffer:
    """A buffer over memory at `address` that the caller allocated and keeps alive (Tensor.from_blob); the device's
    allocator must be able to use it (`Allocator.wrap`)."""
    if not isinstance(address, int) or address <= 0: raise ValueError(f"from_blob needs a memory address, not {address!r}")
    if address % dtype.itemsize:
      raise ValueError(f"address {address:#x} is not aligned to {dtype!r}'s {dtype.itemsize} bytes")
    buf = cls(device, size, dtype)
    buf._handle, buf.owned = Device[device].allocator.wrap(address, buf.nbytes), False
    return buf
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def is_allocated(self) -> bool: return self._handle is not None
  def ensure_allocated(self) -> Buffer:
    if self._handle is None: self._allocate()
    return self
  def _allocate(self) -> None:
    # kept for the free in __del__ (one device lookup per buffer, not two)
    self._allocator = allocator = Device[self.device].allocator
    if events.enabled("profile"):   # the span's name is only built for a listener: a tiny op allocates every time
      with events.profile_span("alloc", f"{self.dtype.name}[{self.size}]", self.device, nbytes=self.nbytes, buf=id(self)):
        self._handle = allocator.alloc(self.nbytes)
    else: self._handle = allocator.alloc(self.nbytes)
    GlobalCounters.mem_used += self.nbytes
  @property
  def handle(self) -> Any:
    h = self._handle
    return h if h is not None else self.ensure_allocated()._handle
  def copyin(self, data: np.ndarray | bytes | memoryview) -> Buffer:
    mv = memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else memoryview(data).cast("B")
    if mv.nbytes != self.nbytes:
      raise ValueError(f"copyin of {mv.nbytes} bytes into a buffer of {self.nbytes} bytes ({self.size} x {self.dtype!r})")
    Device[self.device].allocator.copyin(self.handle, mv)
    return self
  def copyout(self, dest: memoryview) -> memoryview:
    Device[self.device].synchronize()
    Device[self.device].allocator.copyout(dest, self.handle)
    return dest
  def numpy(self) -> np.ndarray:
    """The contents as a 1-D numpy array (bfloat16 as its raw uint16 bits)."""
    out = np.empty(self.size, dtype=to_np_dtype(self.dtype))
    if self.size: self.copyout(memoryview(out).cast("B"))
    return out
  def deallocate(self) -> None:
    """Give the memory back now (the buffer allocates again when next used)."""
    if self._handle is not None and self.owned:
      self.__del__()
      self._handle = None
  def __del__(self, subscribers: dict = events._subscribers):
    try: handle, owned = self._handle, self.owned
    except AttributeError: return   # (a half-made buffer: check_buffer_size raised)
    if handle is not None and owned:
      try:
        try: allocator = self._allocator
        except AttributeError: allocator = Device[self.device].allocator
        nbytes = self.size * self.dtype.itemsize
        if "profile" in subscribers:   # (events.enabled, without its call: every tiny op frees a buffer)
          with events.profile_span("free", f"{self.dtype.name}[{self.size}]", self.device, nbytes=nbytes, buf=id(self)):
            allocator.free(handle, nbytes)
        else: allocator.free(handle, nbytes)
        GlobalCounters.mem_used -= nbytes
      except Exception: pass
  def __repr__(self) -> str:
    return f"<buf real:{self.is_allocated} device:{self.device} size:{self.size} dtype:{self.dtype!r}>"
  @property
  def base(self) -> Buffer:
    """The buffer that owns the memory (a tinyplug Buffer is never a view of another: itself)."""
    return self
  def as_memoryview(self) -> memoryview:
    """A host copy of the contents, as bytes (`.cast("f")` and the like give typed views)."""
    return memoryview(self.numpy()).cast("B")
  def __reduce_ex__(self, protocol: int):
    # the contents travel with the buffer; with protocol 5 as a PickleBuffer, so buffer_callback can keep them out of band
    contents = None
    if self.is_allocated:
      arr = self.numpy()
      contents = pickle.PickleBuffer(arr) if protocol >= 5 else arr.tobytes()
    return _unpickle_device_buffer, (self.device, self.size, self.dtype, contents)

def _unpickle_device_buffer(device: str, size: int, dtype: DType, contents: Any) -> Buffer:
  buf = Buffer(device, size, dtype)
  if contents is not None:
    buf.copyin(memoryview(contents).cast("B"))
    # an out-of-band buffer is let go once copied (the unpickler's memo would keep it alive to the end of the load)
    if isinstance(contents, pickle.PickleBuffer): contents.release()
  return buf

# the device memory behind a BUFFER uop lives as long as the uop does: the Buffer rides along in the node's cache (a
# NodeField: no weak reference and no callback per buffer; every realized output, one per tiny op, has one)
_BUFFERS: NodeField[Buffer] = NodeField("buffer")
BUFFER_KEY = _BUFFERS.key   # (where the Buffer sits in a BUFFER node's cache: handle_of's hit, inline)

def buffer_of(u: UOp) -> Buffer:
  """The Buffer behind a BUFFER uop (created on first use; memory is allocated when first touched)."""
  while u.op is not Ops.BUFFER:
    if u.op is Ops.RESHAPE or u.op is Ops.AFTER: u = u.src[0]
    else: raise ValueError(f"{u.op} is not a buffer")
  if (b := _BUFFERS.get(u)) is not None: return b
  _BUFFERS[u] = b = Buffer(u.src[1].arg, u.arg, u.dtype)
  return b

def has_buffer(u: UOp) -> bool: return u in _BUFFERS

def handle_of(u: UOp) -> Any:
  """The memory handle behind the BUFFER uop `u` (allocated on first use): buffer_of(u).handle, in one lookup when
  the buffer exists and holds memory (every input of a realize plan)."""
  if (c := u._cache) is not None and (b := c.get(BUFFER_KEY)) is not None and (h := b._handle) is not None: return h
  return buffer_of(u).handle

def output_maker(device: str, size: int, dtype: DType, view: Any = None) -> Any:
  """A function making a new BUFFER uop with its Buffer and memory, returning (uop, handle): a realize plan's output,
  made the same way every time (the checks and the device lookup done once here). The memory is not zeroed: the
  plan's kernel writes all of it. With `view` (a maker of one node over the buffer: a 2-D result's RESHAPE), the uop
  returned is that view, pooled with its buffer (_pooled_view)."""
  if type(size) is not int:
    make_uop = UOp.buffer_maker(device, size, dtype)
    if view is not None: return lambda: (view(((u := make_uop()),)), buffer_of(u).handle)
    return lambda: (u := make_uop(), buffer_of(u).handle)
  make_uop = UOp.buffer_maker(device, size, dtype, _BUFFERS)   # (the node is made holding its Buffer)
  nbytes, new, counters, opened = size * dtype.itemsize, object.__new__, GlobalCounters, Device._opened
  def make() -> tuple[UOp, Any]:
    b = new(Buffer)
    b.device, b.size, b.dtype, b.owned = device, size, dtype, True
    # (the registry's dict: a reset device gets a new allocator)
    b._allocator = allocator = dev.allocator if (dev := opened.get(device)) is not None else Device[device].allocator
    b._handle = h = allocator.alloc(nbytes, True)   # (a kernel of the plan writes all of it)
    counters.mem_used += nbytes
    return make_uop(b), h
  if nbytes > OUTPUT_POOL_BYTES or not _REFCOUNTS_EXACT or not LRU.value:
    return make if view is None else _viewed(make, view)
  facts = {"shape": (size,), "device": device}
  return _pooled(make, facts) if view is None else _pooled_view(make, view, facts)

def _viewed(make: Any, view: Any) -> Any:
  def make_viewed() -> tuple[UOp, Any]:
    u, h = make()
    return view((u,)), h
  return make_viewed

# a realize plan's small outputs (at most this many bytes) are kept by the plan, the last OUTPUT_POOL of them, and the
# oldest is handed out again once nothing else refers to it: its BUFFER and UNIQUE nodes, Buffer and memory made and
# freed once instead of every call (~4 us of a `x.sum(1)` of 128x10). LRU=0 turns it off with the allocator's reuse
OUTPUT_POOL_BYTES, OUTPUT_POOL = 1 << 14, 2   # (two: `t = (t + 1).realize()` holds the last one)

def _held_once() -> int:
  holder = [object()]
  x = holder[0]
  return sys.getrefcount(x)
# sys.getrefcount of a local that one other object refers to, in this interpreter (what "nothing else holds it" reads)
_ONE_HOLDER = _held_once()
# the count is exact only with the GIL (a free-threaded build defers some counts): no pool without it
_REFCOUNTS_EXACT = getattr(sys, "_is_gil_enabled", lambda: True)()

def _pooled(make: Any, facts: dict) -> Any:
  """`make` with its last OUTPUT_POOL outputs kept, the oldest handed out again when nothing but the pool refers to
  its node, its UNIQUE, its Buffer or its memory, and no weak reference but hash-consing's points at them (a UOpMap
  entry, a test's probe): whoever held it can no longer reach it. Facts cached on the node since it was made are
  dropped (its cache back to `facts` and its Buffer): derived facts are worked out again, and a kept skeleton holds
  its UNIQUE."""
  pool: list = [None] * OUTPUT_POOL
  rc, wc, one, key, setattr_ = sys.getrefcount, weakref.getweakrefcount, _ONE_HOLDER, BUFFER_KEY, object.__setattr__
  def make_pooled() -> tuple[UOp, Any]:
    if (u := pool[0]) is not None and rc(u) == one and wc(u) == 1 and rc(src := u.src) == one and \
       rc(c := u._cache) == one:
      # (only the pool reaches the node and its facts now, or a holder of its UNIQUE by hash-consing)
      if len(c) != len(facts) + 1:
        setattr_(u, "_cache", {**facts, key: c.get(key)})
        c = u._cache
      if rc(unique := src[0]) == one and wc(unique) == 1 and rc(b := c.get(key)) == one and wc(b) == 0 and \
         rc(h := b._handle) == one:
        del pool[0]
        pool.append(u)
        return u, h
    got = make()
    del pool[0]
    pool.append(got[0])
    return got
  return make_pooled

def _pooled_view(make: Any, view: Any, facts: dict) -> Any:
  """_pooled for an output seen through one view node (`view((buffer,))`, a 2-D result's RESHAPE): the pool keeps the
  view, and hands it out again (with its buffer) only when nothing but the pool refers to the view, its sources, the
  buffer node and what _pooled checks of it, and no weak reference but hash-consing's points at the view (a graph
  linked over it, tensor_ops/users.py, has one): no view node made and freed per call. Facts cached on the view are
  dropped (it is made with none; a kept skeleton holds the buffer)."""
  pool: list = [None] * OUTPUT_POOL
  rc, wc, one, key, setattr_ = sys.getrefcount, weakref.getweakrefcount, _ONE_HOLDER, BUFFER_KEY, object.__setattr__
  def make_pooled_view() -> tuple[UOp, Any]:
    # (the view is hash-consed: its one weak reference is the node table's, whose key tuple holds its sources too)
    if (r := pool[0]) is not None and rc(r) == one and wc(r) == 1 and rc(rs := r.src) == one + 1:
      if r._cache is not None: setattr_(r, "_cache", None)   # (only the pool reaches the view: its facts are derived)
      if rc(u := rs[0]) == one and wc(u) == 1 and rc(src := u.src) == one and rc(c := u._cache) == one:
        if len(c) != len(facts) + 1:
          setattr_(u, "_cache", {**facts, key: c.get(key)})
          c = u._cache
        if rc(unique := src[0]) == one and wc(unique) == 1 and rc(b := c.get(key)) == one and wc(b) == 0 and \
           rc(h := b._handle) == one:
          del pool[0]
          pool.append(r)
          return r, h
    u, h = make()
    r = view((u,))
    del pool[0]
    pool.append(r)
    return r, h
  return make_pooled_view

def realized_buffer(u: UOp) -> Buffer | None:
  """The Buffer behind a BUFFER uop if its memory holds values, else None (nothing is created or allocated)."""
  b = _BUFFERS.get(u)
  return b if b is not None and b.is_allocated else None

def _attach_buffer(u: UOp, buf: Buffer) -> None:
  if (u.dtype, u.arg) != (buf.dtype, buf.size):
    raise ValueError(f"cannot attach a buffer of {buf.size} x {buf.dtype!r} to a BUFFER uop of {u.arg} x {u.dtype!r}")
  _BUFFERS[u] = buf

def buffer_attach_external(u: UOp, buf: Buffer) -> None:
  """Put `buf` (memory from `Buffer.from_address`) behind the BUFFER uop `u`, which must not have one yet."""
  if u.op is not Ops.BUFFER or u in _BUFFERS: raise ValueError(f"{u.op} is not a fresh BUFFER uop")
  _attach_buffer(u, buf)

# UOp.buffer, UOp.realized and unpickling (uop/ does not import this layer)
_uop_ops.buffer_lookup, _uop_ops.realized_lookup, _uop_ops.buffer_attach = buffer_of, realized_buffer, _attach_buffer

# ---------------- the registry ----------------

SLOW_FALLBACK_HINT = ("tinyplug: no compiled device is installed, so kernels run on the PYTHON reference interpreter "
                      "(hundreds of times slower); pip install 'tinyplug[cpu]' adds the LLVM CPU backend "
                      "(DEV=PYTHON picks the interpreter on purpose and hides this line)")

class _DeviceRegistry:
  """`Device[name]` opens a device through the plugin that provides it; `Device.DEFAULT` is the one in use."""
  def __init__(self):
    self._opened: dict[str, Compiled] = {}
    self._default: str | None = None

  def _manager(self):
    from tinyplug.plugins import get_plugin_manager
    return get_plugin_manager()

  def canonicalize(self, name: str) -> str:
    """`cpu` -> `CPU`; `CPU:0` -> `CPU` (the first of its kind), `CPU:1` stays; `CPU:LLVM:...` keeps its options;
    unknown names raise a ValueError with a did-you-mean."""
    if not isinstance(name, str) or not name: raise ValueError(f"a device name must be a non-empty string, got {name!r}")
    base, sep, rest = name.partition(":")
    if base.upper() == "DISK":   # a file as storage (runtime/disk.py): the path is kept as given
      if not rest: raise ValueError("the disk device needs a file: disk:<path>")
      return "DISK:" + rest
    resolved = self._manager().resolve_device(base)
    if resolved is None: raise ValueError(self._manager().missing_device_message(base))
    return resolved if rest == "0" else resolved + sep + rest

  def __getitem__(self, name: str) -> Compiled:
    if (dev := self._opened.get(name)) is not None: return dev   # already canonical and open: the common case
    full = self.canonicalize(name)
    if (dev := self._opened.get(full)) is not None: return dev
    if full.startswith("DISK:"):
      from tinyplug.runtime.disk import DiskDevice
      self._opened[full] = dev = DiskDevice(full)
      return dev
    base = full.partition(":")[0]
    ok, reason = self._manager().device_available(base)
    if not ok: raise RuntimeError(f"device {base} is unavailable: {reason}")
    spec, plugin_id = self._manager().devices[base]
    try: dev = self._manager().load_factory(spec.factory)(full)
    except Exception as e:
      raise RuntimeError(f"device {base} (plugin {plugin_id!r}) failed to open: {type(e).__name__}: {e}") from e
    self._opened[full] = dev
    return dev

  def available(self) -> list[str]:
    """Devices whose probe passes, highest priority first."""
    m = self._manager()
    return [d for d in m.devices_by_priority() if m.device_available(d)[0]]

  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      if (dev := getenv("DEV", "")): self._default = self.canonicalize(dev)
      else:
        # the first device whose probe passes: the others are not probed (opening OpenCL to rule it out took ~1 s)
        m = self._manager()
        first = next((d for d in m.devices_by_priority() if m.device_available(d)[0]), None)
        if first is None: raise RuntimeError("no device is available; see `tinyplug list-plugins`")
        self._default = first
        if self._default == "PYTHON": print(SLOW_FALLBACK_HINT, file=sys.stderr)
    return self._default
  @property
  def default(self) -> Compiled:
    """The default device itself (`Device[Device.DEFAULT]`)."""
    return self[self.DEFAULT]
  @DEFAULT.setter
  def DEFAULT(self, name: str | None) -> None:
    """`Device.DEFAULT = "PYTHON"` picks the device new tensors go to; None goes back to DEV / automatic choice."""
    self._default = None if name is None else self.canonicalize(name)

  @contextlib.contextmanager
  def use(self, name: str | None) -> Iterator[str]:
    """`with Device.use("PYTHON"):` sets the default device for a block, then restores the previous choice
    (including 'not chosen yet', so DEV and automatic selection still apply afterwards)."""
    previous = self._default
    self.DEFAULT = name
    try: yield self.DEFAULT
    finally: self._default = previous

  def reset(self) -> None:
    """Forget opened devices and the default (tests)."""
    self._opened.clear(); self._default = None

Device = _DeviceRegistry()

def renderer_of(device: Any) -> Any:
  """The renderer of the device named `device`, or None where it is no single name or does not open here (a pass
  tuning for a device has nothing to tune for then)."""
  if not isinstance(device, str): return None
  try: return Device[device].renderer
  except Exception: return None

def narrow_vectors_on(device: Any) -> bool:
  """`backend.narrow_vectors` for the renderer of the device named `device` (False where none opens)."""
  return narrow_vectors(renderer_of(device))
