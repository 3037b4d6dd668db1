"""Devices: the registry behind `Device`, device buffers, and the interfaces a backend plugin implements."""
from __future__ import annotations
import contextlib, difflib, functools, sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
import numpy as np
from tinyplug import events
from tinyplug.helpers import ContextVar, getenv, DEBUG
from tinyplug.uop.dtype import DType, dtypes, to_np_dtype
from tinyplug.uop.ops import UOp

LRU = ContextVar("LRU", 1, "1 keeps freed device memory of at least LRU_MIN bytes for reuse by an allocation of the same size")
LRU_MIN = ContextVar("LRU_MIN", 1 << 16, "the smallest freed block (bytes) kept for reuse")
LRU_MAX = ContextVar("LRU_MAX", 1 << 30, "at most this many freed bytes are kept per device")

# ---------------- the interfaces a backend implements ----------------

class Allocator:
  """Raw device memory. Subclasses implement _alloc/_free/_copyin/_copyout on opaque handles.

  Freed blocks of at least LRU_MIN bytes are kept (up to LRU_MAX bytes in all) and handed out again for the same
  size: a big output then lands in memory that is already mapped instead of faulting in (and zeroing) fresh pages.
  So, as in torch and tinygrad, memory from `Tensor.empty` holds whatever was there; small blocks are always fresh."""
  def alloc(self, nbytes: int) -> Any:
    nbytes = max(nbytes, 1)
    if (blocks := self._free_blocks().get(nbytes)):
      self._kept_bytes -= nbytes
      return blocks.pop()
    try: return self._alloc(nbytes)
    except Exception:
      if not self._kept_bytes: raise
      self.release_kept()   # out of memory, perhaps: give the kept blocks back and try once more
      return self._alloc(nbytes)
  def free(self, handle: Any, nbytes: int) -> None:
    blocks = self._free_blocks()
    if LRU and nbytes >= LRU_MIN.value and self._kept_bytes + nbytes <= LRU_MAX.value:
      blocks.setdefault(nbytes, []).append(handle)
      self._kept_bytes += nbytes
    else: self._free(handle, nbytes)
  def release_kept(self) -> None:
    """Free every kept block for real."""
    for nbytes, blocks in self._free_blocks().items():
      for handle in blocks: self._free(handle, nbytes)
    self._kept, self._kept_bytes = {}, 0
  def _free_blocks(self) -> dict[int, list]:
    if "_kept" not in self.__dict__: self._kept, self._kept_bytes = {}, 0   # subclasses need not call __init__
    return self._kept
  def _alloc(self, nbytes: int) -> Any: raise NotImplementedError
  def _free(self, handle: Any, nbytes: int) -> None: pass
  def _copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def _copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError

class HostAllocator(Allocator):
  """Memory in this process, as zero-filled numpy byte arrays (used by PYTHON and host-side CPU backends)."""
  def _alloc(self, nbytes: int) -> np.ndarray: return np.zeros(nbytes, dtype=np.uint8)
  def _copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def _copyout(self, dest: memoryview, src: np.ndarray) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = src[:len(dest)]

@dataclass(frozen=True)
class ProgramSpec:
  """A lowered kernel, ready to render and run."""
  name: str
  uops: tuple[UOp, ...]                  # the linear program
  src: str                               # what the renderer made of it
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] | None = None
  vars: tuple[UOp, ...] = ()             # DEFINE_VARs, in parameter order
  outs: tuple[int, ...] = (0,)
  ins: tuple[int, ...] = ()
  applied_opts: tuple = ()
  estimates: dict = field(default_factory=dict, compare=False)   # ops, mem (bytes)

class Renderer:
  """Turns a linear program into source. Class attributes declare what the target supports."""
  device: str = ""
  suffix: str = ""
  has_local: bool = False          # GPU-style: output dims become SPECIAL ids, not loops
  has_shared: bool = False
  global_max: tuple[int, ...] | None = None
  local_max: tuple[int, ...] | None = None
  shared_max: int = 0
  supports_float4: bool = False
  # ops this target computes natively; everything else is decomposed by the "decompositions" stage
  native_ops: frozenset | None = None
  supported_dtypes: frozenset[DType] | None = None
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError

class Compiler:
  """Turns source into a binary; `cachekey` namespaces its on-disk cache (None: no cache)."""
  cachekey: str | None = None
  def compile(self, src: str) -> bytes: return src.encode()
  def compile_cached(self, src: str) -> bytes: return self.compile(src)

class Compiled:
  """A device: allocator + renderer + compiler + a way to run a compiled program."""
  def __init__(self, name: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
               runtime: Callable[..., Any] | None = None):
    self.name, self.allocator, self.renderer, self.compiler, self.runtime = name, allocator, renderer, compiler, runtime
  def make_program(self, spec: ProgramSpec, lib: bytes) -> Callable[..., float | None]:
    """A callable `prg(*raw_buffers, global_size=, local_size=, vals=(), wait=False) -> seconds | None`."""
    if self.runtime is None: raise NotImplementedError(f"device {self.name} cannot run programs")
    return self.runtime(spec.name, lib)
  def synchronize(self) -> None: pass
  def describe(self) -> str:
    """One line on what this device is and how it runs (for `tinyplug doctor`); empty if nothing to say."""
    return ""

# ---------------- buffers ----------------

class Buffer:
  """`size` elements of `dtype` on a device; memory is allocated on first use."""
  def __init__(self, device: str, size: int, dtype: DType):
    self.device, self.size, self.dtype = device, size, dtype
    self._handle: Any = None
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def is_allocated(self) -> bool: return self._handle is not None
  def ensure_allocated(self) -> Buffer:
    if self._handle is None: self._allocate()
    return self
  def _allocate(self) -> None:
    from tinyplug.helpers import GlobalCounters
    allocator = Device[self.device].allocator
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
    Device[self.device].allocator._copyin(self.handle, mv)
    return self
  def copyout(self, dest: memoryview) -> memoryview:
    Device[self.device].synchronize()
    Device[self.device].allocator._copyout(dest, self.handle)
    return dest
  def numpy(self) -> np.ndarray:
    """The contents as a 1-D numpy array (bfloat16 as its raw uint16 bits)."""
    out = np.empty(self.size, dtype=to_np_dtype(self.dtype))
    if self.size: self.copyout(memoryview(out).cast("B"))
    return out
  def __del__(self):
    if getattr(self, "_handle", None) is not None:
      try:
        from tinyplug.helpers import GlobalCounters
        allocator = Device[self.device].allocator
        if events.enabled("profile"):
          with events.profile_span("free", f"{self.dtype.name}[{self.size}]", self.device, nbytes=self.nbytes, buf=id(self)):
            allocator.free(self._handle, self.nbytes)
        else: allocator.free(self._handle, self.nbytes)
        GlobalCounters.mem_used -= self.nbytes
      except Exception: pass
  def __repr__(self) -> str:
    return f"<buf real:{self.is_allocated} device:{self.device} size:{self.size} dtype:{self.dtype!r}>"

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
    """`cpu` -> `CPU`; `CPU:LLVM:...` keeps its options; unknown names raise a ValueError with a did-you-mean."""
    if not isinstance(name, str) or not name: raise ValueError(f"a device name must be a non-empty string, got {name!r}")
    base, sep, rest = name.partition(":")
    resolved = self._manager().resolve_device(base)
    if resolved is None: raise ValueError(self._manager().missing_device_message(base))
    return resolved + sep + rest

  def __getitem__(self, name: str) -> Compiled:
    if (dev := self._opened.get(name)) is not None: return dev   # already canonical and open: the common case
    full = self.canonicalize(name)
    if (dev := self._opened.get(full)) is not None: return dev
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
        avail = self.available()
        if not avail: raise RuntimeError("no device is available; see `tinyplug list-plugins`")
        self._default = avail[0]
        if self._default == "PYTHON": print(SLOW_FALLBACK_HINT, file=sys.stderr)
    return self._default
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
