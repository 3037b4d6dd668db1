"""The example device `EXAMPLE`: kernels as plain C, compiled by the system's C compiler into a shared library and
called through ctypes. Every part is a subclass of the core's contract (`tinyplug.backend`): the renderer is the
core's C-style base with C's tables, memory is host memory, and the program runs its loops on one thread.
Imported only when the device is first used."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import time
from typing import Any

from tinyplug.backend import LAUNCH_LOOPS, Compiled, Compiler, HostAllocator, ProgramSpec
from tinyplug.renderer.cstyle import CStyleRenderer
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops
from tinyplug_example.plugin import find_cc

_C_TYPES = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
            dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
            dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float32: "float",
            dtypes.float64: "double"}

_PRELUDE = """#include <math.h>
#include <stdbool.h>
#define max(a, b) ((a) > (b) ? (a) : (b))"""


class CRenderer(CStyleRenderer):
  """C99 for the host: loops, scalars only; what C lacks (integer max) comes from the prelude."""
  device = "EXAMPLE"
  suffix = "c"
  launch = LAUNCH_LOOPS          # the program runs its own loops: no launch ids, no work-groups
  has_local = False
  has_shared = False
  kernel_prefix = "void"
  type_names = _C_TYPES          # no half or bfloat16: supported_dtypes() leaves them out
  buffer_param = "{type}* restrict {name}"
  helper_prefix = "static inline"

  def _render_alu(self, u, s: list[str]) -> str:
    # C traps on x/0 and INT_MIN/-1; tinyplug's semantics (as on GPUs and the other devices): x/0 is x, x%0 is 0
    if u.op in (Ops.IDIV, Ops.MOD) and not dtypes.is_float(u.dtype):
      a, b = s
      signed = not dtypes.is_unsigned(u.dtype)
      if u.op is Ops.IDIV:
        return f"(({b})==0 ? ({a}) : " + (f"({b})==-1 ? -({a}) : " if signed else "") + f"({a})/({b}))"
      return f"(({b})==0" + (f" || ({b})==-1" if signed else "") + f" ? 0 : ({a})%({b}))"
    if u.op in self.call_ops and u.dtype.scalar() == dtypes.float32:   # expf, not exp in double: float math as elsewhere
      return f"{self.call_ops[u.op]}f({', '.join(s)})"
    return super()._render_alu(u, s)

  def render_bitcast(self, u, x: str) -> str:   # through a union: portable C
    src, dst = self.value_type(u.src[0].dtype), self.value_type(u.dtype)
    return f"((union {{ {src} a; {dst} b; }}){{ .a = {x} }}).b"

  def prelude(self) -> list[str]: return [_PRELUDE] + super().prelude()


class CCompiler(Compiler):
  """C source -> a shared library's bytes (`cc -O2 -shared`, wrapping signed overflow as the other devices do)."""
  def __init__(self, cc: str):
    self.cc = cc
    self.cachekey = f"example-{os.path.basename(cc)}"

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      args = [self.cc, "-O2", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-x", "c", "-", "-o", out, "-lm"]
      res = subprocess.run(args, input=src.encode(), capture_output=True)
      if res.returncode != 0:
        raise RuntimeError(f"EXAMPLE: {os.path.basename(self.cc)} failed:\n{res.stderr.decode()}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()


class CProgram:
  """A loaded kernel: `prg(*buffers, vals=..., wait=...)` calls it with the buffers' addresses and the variables."""
  def __init__(self, spec: ProgramSpec, lib: bytes):
    fd, path = tempfile.mkstemp(suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f: f.write(lib)
      self.dll = ctypes.CDLL(path)
    finally: os.unlink(path)   # the loaded library stays mapped; a file left for __del__ outlived the process
    self.fn = getattr(self.dll, spec.name)
    self.fn.restype = None

  def __call__(self, *bufs: Any, global_size=None, local_size=None, vals=(), wait: bool = False) -> float:
    args = [ctypes.c_void_p(b.ctypes.data) for b in bufs] + [ctypes.c_int(int(v)) for v in vals]
    st = time.perf_counter()
    self.fn(*args)
    return time.perf_counter() - st


class ExampleDevice(Compiled):
  def __init__(self, name: str = "EXAMPLE"):
    cc = find_cc()
    if cc is None: raise RuntimeError("no C compiler found (set CC, or install clang or gcc)")
    super().__init__(name, HostAllocator(), CRenderer(), CCompiler(cc))

  def make_program(self, spec: ProgramSpec, lib: bytes) -> CProgram: return CProgram(spec, lib)

  def describe(self) -> str: return f"C kernels built by {self.compiler.cc}"
