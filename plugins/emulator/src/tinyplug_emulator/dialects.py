"""Source dialects the emulator compiles: what clang needs to turn one rendered kernel into a host shared object.

A dialect names the device whose renderer writes it (MOCK+CL runs the CL renderer's code), the renderer options that
describe the emulated device, the builtins library that implements its device functions on the runtime, and how to
add the entry thunk `void tp_entry(void **args, int *vars)` that calls the kernel with its real parameter types.
Adding a dialect (CUDA C, Metal through a stand-in header, LLVM IR with rewritten intrinsics) is one more entry in
DIALECTS; nothing else in the emulator changes."""
from __future__ import annotations
import os, re
from dataclasses import dataclass, field

_HERE = os.path.dirname(os.path.abspath(__file__))

class DialectError(ValueError):
  """The source is not a kernel this dialect understands (no kernel signature found)."""

@dataclass(frozen=True, eq=False)
class Dialect:
  name: str                                   # "opencl"
  device: str                                 # the device whose renderer writes this dialect: "CL"
  version: str                                # bump when the translation changes: part of every cache key
  compile_flags: tuple[str, ...]              # clang flags for the kernel and the builtins source
  builtins: str | None = None                 # file beside this module with the dialect's device functions
  headers: tuple[str, ...] = ()               # files beside this module the translation includes (cache keys)
  renderer_options: dict = field(default_factory=dict)   # keyword arguments for the renderer: the emulated device

  def with_entry(self, src: str) -> str:
    """The source with the entry thunk appended."""
    raise NotImplementedError
  def pointer_types(self, src: str) -> list[str]:
    """The element type (C spelling) of each buffer parameter, in order."""
    raise NotImplementedError
  def uses_barrier(self, src: str) -> bool:
    """Whether the kernel may reach a barrier: then every work-item runs as a fiber."""
    raise NotImplementedError
  def uses_local_memory(self, src: str) -> bool:
    """Whether the kernel declares work-group memory: then its groups run one after another on one host thread
    (that memory is one static array per kernel)."""
    raise NotImplementedError

_OPENCL_KERNEL = re.compile(r"(?:__kernel|kernel)\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{")

class OpenCLDialect(Dialect):
  """OpenCL C 1.2 through clang's own OpenCL front-end, for the host: the exact rendered text, no rewriting."""
  def _signature(self, src: str) -> tuple[str, list[str]]:
    m = _OPENCL_KERNEL.search(src)
    if m is None: raise DialectError("no `__kernel void name(...)` signature in the OpenCL C source")
    return m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()]
  def pointer_types(self, src: str) -> list[str]:
    drop = {"__global", "global", "const", "__constant", "constant", "volatile"}
    return [" ".join(w for w in p[:p.rindex("*")].split() if w not in drop) for p in self._signature(src)[1] if "*" in p]
  def with_entry(self, src: str) -> str:
    name, params = self._signature(src)
    args, n_ptr, n_var = [], 0, 0
    for p in params:
      if "*" in p:
        ptr_type = p[:p.rindex("*") + 1].replace("restrict", "").strip()
        if "__global" not in ptr_type and "global" not in ptr_type.split(): ptr_type = "__global " + ptr_type
        args.append(f"({ptr_type})args[{n_ptr}]")
        n_ptr += 1
      else:
        ctype = p.rsplit(None, 1)[0] if len(p.split()) > 1 else "int"
        args.append(f"({ctype})vars[{n_var}]")
        n_var += 1
    thunk = f"void tp_entry(__global void **args, int *vars) {{ {name}({', '.join(args)}); }}"
    return f"{src}\n{thunk}\n"
  def uses_barrier(self, src: str) -> bool: return re.search(r"\b(work_group_)?barrier\s*\(", src) is not None
  def uses_local_memory(self, src: str) -> bool: return re.search(r"\b(__local|local)\b", src) is not None


_CUDA_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)\s*\{")

class CUDADialect(Dialect):
  """CUDA C and HIP-style C, compiled as C++ with a stand-in header (cuda_prelude.h): ids, __syncthreads, __shared__
  memory, half as _Float16 rounded per operation, CUDA's vector structs and a few half intrinsics."""
  def _signature(self, src: str) -> tuple[str, list[str]]:
    m = _CUDA_KERNEL.search(src)
    if m is None: raise DialectError("no `__global__ void name(...)` signature in the CUDA C source")
    return m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()]
  def pointer_types(self, src: str) -> list[str]:
    drop = {"const", "volatile", "__restrict__", "__restrict", "restrict"}
    return [" ".join(w for w in p[:p.rindex("*")].split() if w not in drop) for p in self._signature(src)[1] if "*" in p]
  def with_entry(self, src: str) -> str:
    name, params = self._signature(src)
    args, n_ptr, n_var = [], 0, 0
    for p in params:
      if "*" in p:
        args.append(f"({p[:p.rindex('*') + 1].replace('__restrict__', '').strip()})args[{n_ptr}]")
        n_ptr += 1
      else:
        args.append(f"({p.rsplit(None, 1)[0] if len(p.split()) > 1 else 'int'})vars[{n_var}]")
        n_var += 1
    return f'{src}\nextern "C" void tp_entry(void **args, int *vars) {{ {name}({", ".join(args)}); }}\n'
  def uses_barrier(self, src: str) -> bool: return re.search(r"\b(__syncthreads|__barrier_sync|bar_sync)\s*\(", src) is not None
  def uses_local_memory(self, src: str) -> bool: return False   # __shared__ is thread_local: groups may run in parallel

OPENCL = OpenCLDialect(
  name="opencl", device="CL", version="1", builtins="opencl_builtins.cl",
  compile_flags=("-x", "cl", "-cl-std=CL1.2", "-Xclang", "-fdeclare-opencl-builtins", "-Xclang",
                 "-finclude-default-header", "-ffp-contract=off", "-O2", "-fPIC", "-w"),
  renderer_options={"extensions": ("cl_khr_fp16", "cl_khr_fp64"), "local_max": (256, 256, 64),
                    "max_work_group_size": 256, "shared_max": 32768, "device_name": "tinyplug emulator"})

# element sizes of the C scalar types buffers hold, for bounds reports
C_TYPE_SIZES = {"char": 1, "uchar": 1, "unsigned char": 1, "bool": 1, "short": 2, "ushort": 2, "half": 2, "int": 4,
                "uint": 4, "float": 4, "long": 8, "ulong": 8, "double": 8, "signed char": 1, "__half": 2,
                "unsigned int": 4, "unsigned short": 2, "long long": 8, "unsigned long long": 8}

CUDA = CUDADialect(
  name="cuda", device="CUDA", version="1", headers=("cuda_prelude.h",),
  compile_flags=("-x", "c++", "-std=c++17", "-O2", "-fPIC", "-ffp-contract=off", "-Xclang",
                 "-ffloat16-excess-precision=none", "-include", os.path.join(_HERE, "cuda_prelude.h"),
                 "-I", os.path.join(_HERE, "include"), "-w"),
  renderer_options={})

DIALECTS: dict[str, Dialect] = {"CL": OPENCL, "CUDA": CUDA}
