"""The emulator's C runtime (runtime.c) through ctypes: built with clang on first use, cached, loaded once.

`launch` runs one kernel and turns the runtime's error record into an `EmulatorError` that names the kernel, the
work-item and (for bounds errors) the buffer and the element index."""
from __future__ import annotations
import ctypes, functools, os, threading
from dataclasses import dataclass
from typing import Sequence
from tinyplug_emulator.toolchain import build_shared, clang, digest, keep, run_clang

_HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_FLAGS = ["-O2", "-fPIC", "-shared", "-U_FORTIFY_SOURCE", "-fno-stack-protector", "-Wall"]
ORDERS = {"forward": 0, "reverse": 1, "shuffle": 2}
ERR_DIVERGENCE, ERR_BARRIER_SITES, ERR_OOB, ERR_SEGV, ERR_FPE, ERR_STACK, ERR_NO_FIBERS, ERR_ALLOC, ERR_KERNEL = range(1, 10)

class EmulatorError(RuntimeError):
  """A kernel did something a GPU would not survive or a test must know about (barrier divergence, an out-of-bounds
  access, a wild pointer); `kind` is "divergence", "barrier_sites", "bounds", "segfault", "fpe", "stack", "kernel" (a prelude function's report: a race with an asynchronous operation, a bad operand) or
  "internal"."""
  def __init__(self, kind: str, message: str):
    self.kind = kind
    super().__init__(message)

class TPBuffer(ctypes.Structure):
  _fields_ = [("base", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("itemsize", ctypes.c_uint64),
              ("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]

class TPError(ctypes.Structure):
  _fields_ = [("code", ctypes.c_int32), ("buffer", ctypes.c_int32), ("is_store", ctypes.c_int32),
              ("count_barrier", ctypes.c_int32), ("count_done", ctypes.c_int32), ("pad", ctypes.c_int32),
              ("index", ctypes.c_int64), ("address", ctypes.c_uint64), ("group", ctypes.c_int32 * 3),
              ("local", ctypes.c_int32 * 3), ("other_local", ctypes.c_int32 * 3)]

def _source(name: str) -> bytes:
  with open(os.path.join(_HERE, name), "rb") as f: return f.read()

def library_name(prefix: str, *parts: bytes | str) -> str:
  """A cache name that changes with the clang version and every input of the build."""
  _, version = clang()
  blob = b"\0".join(p.encode() if isinstance(p, str) else p for p in (version, *parts))
  return f"{prefix}-{digest(blob)[:24]}"

_load_lock = threading.Lock()

@functools.cache
def runtime_library() -> tuple[ctypes.CDLL, str]:
  """The loaded runtime (global symbols, so kernels and builtins resolve against it) and its path."""
  src = _source("runtime.c")
  name = library_name("runtime", src, " ".join(RUNTIME_FLAGS))
  def build(out: str) -> None:
    run_clang([*RUNTIME_FLAGS, os.path.join(_HERE, "runtime.c"), "-o", out, "-lpthread", f"-Wl,-soname,{name}.so"],
              "the emulator runtime")
  with _load_lock:
    path = keep(build_shared(name, build))
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
  lib.tp_launch_kernel.restype = ctypes.c_int32
  lib.tp_launch_kernel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                   ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint64, ctypes.POINTER(TPError)]
  lib.tp_alloc_guarded.restype = ctypes.c_void_p
  lib.tp_alloc_guarded.argtypes = [ctypes.c_uint64, ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64),
                                   ctypes.POINTER(ctypes.c_uint64)]
  lib.tp_free_guarded.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
  lib.tp_kernel_message.restype = ctypes.c_char_p
  return lib, path

def load_global(path: str) -> ctypes.CDLL:
  with _load_lock: return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)

@dataclass
class LaunchOptions:
  order: str = "forward"
  seed: int = 0
  threads: int = 1
  stack_bytes: int = 1 << 16

def launch(kernel: str, entry: int, handles: Sequence, vals: Sequence[int], groups: Sequence[int], local: Sequence[int],
           fibers: bool, serial_groups: bool, opts: LaunchOptions) -> None:
  """Run `entry` (the kernel's tp_entry) over groups x local work-items; raises EmulatorError on a reported fault."""
  lib, _ = runtime_library()
  n = len(handles)
  args = (ctypes.c_void_p * max(n, 1))(*[h.address for h in handles])
  vars_ = (ctypes.c_int32 * max(len(vals), 1))(*[int(v) for v in vals])
  g = (ctypes.c_uint32 * 3)(*[int(x) for x in (list(groups) + [1, 1, 1])[:3]])
  l_ = (ctypes.c_uint32 * 3)(*[int(x) for x in (list(local) + [1, 1, 1])[:3]])
  bufs = (TPBuffer * max(n, 1))(*[TPBuffer(h.address, h.nbytes, h.itemsize, h.lo, h.hi) for h in handles])
  err = TPError()
  code = lib.tp_launch_kernel(entry, args, vars_, g, l_, ORDERS[opts.order], opts.seed, int(fibers), opts.threads,
                              int(serial_groups), bufs, n, opts.stack_bytes, ctypes.byref(err))
  if code: raise _error(kernel, err, handles, tuple(g), tuple(l_))

def _where(err: TPError, local: tuple[int, ...]) -> str:
  grp, lid = tuple(err.group), tuple(err.local)
  gid = tuple(g * l + i for g, l, i in zip(grp, local, lid))
  return f"work-item local {lid} in group {grp} (global {gid})"

def _error(kernel: str, err: TPError, handles: Sequence, groups: tuple[int, ...], local: tuple[int, ...]) -> EmulatorError:
  where = _where(err, local)
  if err.code == ERR_DIVERGENCE:
    return EmulatorError("divergence", f"barrier divergence in kernel {kernel}: in group {tuple(err.group)}, "
                         f"{err.count_barrier} work-item(s) wait at a barrier (e.g. local {tuple(err.other_local)}) while "
                         f"{err.count_done} returned without reaching it (e.g. local {tuple(err.local)})")
  if err.code == ERR_BARRIER_SITES:
    return EmulatorError("barrier_sites", f"barrier divergence in kernel {kernel}: in group {tuple(err.group)}, work-items "
                         f"{tuple(err.other_local)} and {tuple(err.local)} wait at different barriers")
  if err.code == ERR_OOB:
    h = handles[err.buffer]
    what = "store to" if err.is_store else "load from"
    return EmulatorError("bounds", f"out-of-bounds {what} buffer {err.buffer} ({h.size} x {h.dtype_name}) at index "
                         f"{err.index} in kernel {kernel}, {where}")
  if err.code == ERR_STACK:
    return EmulatorError("stack", f"kernel {kernel} overflowed its work-item stack ({where}); raise EMU_STACK_KB")
  if err.code == ERR_SEGV:
    return EmulatorError("segfault", f"kernel {kernel} {'wrote' if err.is_store else 'read'} address {err.address:#x}, "
                         f"outside every buffer ({where}); EMU_BOUNDS=1 names the buffer")
  if err.code == ERR_FPE:
    return EmulatorError("fpe", f"kernel {kernel} raised an arithmetic trap the emulator could not complete ({where})")
  if err.code == ERR_KERNEL:
    message = runtime_library()[0].tp_kernel_message().decode(errors="replace")
    return EmulatorError("kernel", f"kernel {kernel}, {where}: {message}")
  if err.code == ERR_NO_FIBERS:
    return EmulatorError("internal", f"kernel {kernel} reached a barrier, but its source showed none: it ran without "
                         "fibers (a dialect's barrier detection is wrong)")
  return EmulatorError("internal", f"kernel {kernel}: the emulator could not allocate work-item stacks")
