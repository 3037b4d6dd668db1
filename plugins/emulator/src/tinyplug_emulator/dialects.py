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
  builtins_flags: tuple[str, ...] | None = None   # clang flags for the builtins file (default: compile_flags)
  renderer_options: dict = field(default_factory=dict)   # keyword arguments for the renderer: the emulated device
  renderer: str | None = None                 # the registered renderer (name) that writes this dialect; None: the
                                              # device's default renderer

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
  def uses_barrier(self, src: str) -> bool:   # a warp's mma exchanges fragments through barriers too (cuda_prelude.h)
    return re.search(r"\b(__syncthreads|__barrier_sync|bar_sync|tp_mma_\w+|tp_ldmatrix\w*)\s*[(<]", src) is not None
  def uses_local_memory(self, src: str) -> bool: return False   # __shared__ is thread_local: groups may run in parallel

# GPU intrinsics -> (runtime function, dimension); the id functions return i64 in the runtime, i32 here
_LLVM_INTRINSICS = {
  **{f"llvm.amdgcn.workitem.id.{d}": ("tp_local_id", i) for i, d in enumerate("xyz")},
  **{f"llvm.amdgcn.workgroup.id.{d}": ("tp_group_id", i) for i, d in enumerate("xyz")},
  **{f"llvm.nvvm.read.ptx.sreg.tid.{d}": ("tp_local_id", i) for i, d in enumerate("xyz")},
  **{f"llvm.nvvm.read.ptx.sreg.ctaid.{d}": ("tp_group_id", i) for i, d in enumerate("xyz")},
  **{f"llvm.nvvm.read.ptx.sreg.ntid.{d}": ("tp_local_size", i) for i, d in enumerate("xyz")},
  **{f"llvm.nvvm.read.ptx.sreg.nctaid.{d}": ("tp_num_groups", i) for i, d in enumerate("xyz")},
}
_LLVM_BARRIERS = ("llvm.amdgcn.s.barrier", "llvm.nvvm.barrier0")
# wave operations -> (LLVM type of the result, operand types, the builtin that computes them through memory)
_LLVM_WAVE_OPS = {
  "llvm.amdgcn.wmma.f32.16x16x16.f16": ("<8 x float>", ("<16 x half>", "<16 x half>", "<8 x float>"),
                                        "tp_wmma_f32_16x16x16_f16"),
}
_LLVM_DEFINE = re.compile(r"^define\s+(?:[\w\s]*?\s)?void\s+@([\w.$]+)\s*\(([^)]*)\)", re.M)
_LLVM_REWRITES = [   # (pattern, replacement), applied in order to the whole module
  (re.compile(r"^\s*target (datalayout|triple)\s*=.*$", re.M), ""),           # the host's own
  (re.compile(r"(unnamed_addr |local_unnamed_addr )?addrspace\(3\) global"), r"thread_local \1global"),  # work-group memory
  (re.compile(r",\s*addrspace\(\d+\)"), ""),                                 # an alloca's address space (AMDGPU: 5)
  (re.compile(r"\s*addrspace\(\d+\)"), ""),                                  # one flat address space
  (re.compile(r"\baddrspacecast\b"), "bitcast"),
  (re.compile(r"\b(amdgpu_kernel|ptx_kernel|spir_kernel|amdgpu_cs|amdgpu_gfx)\s+"), ""),
  (re.compile(r'\s*"(target-cpu|target-features|tune-cpu)"="[^"]*"'), ""),
]

class LLVMIRDialect(Dialect):
  """LLVM IR written for AMDGPU or NVPTX, lowered to the host: the work-item/group id and barrier intrinsics become
  runtime calls (the barrier stays `convergent`), address spaces are dropped (work-group memory, addrspace(3), becomes
  thread_local), GPU calling conventions and target attributes are removed; then clang compiles it like C."""
  def _signature(self, src: str) -> tuple[str, list[str]]:
    kernels = [m for m in _LLVM_DEFINE.finditer(src) if not m.group(1).startswith("tp.")]
    if not kernels: raise DialectError("no `define void @name(...)` kernel in the LLVM IR")
    m = kernels[0]
    return m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()]
  def pointer_types(self, src: str) -> list[str]:
    return ["bytes" for p in self._signature(src)[1] if p.split()[0] == "ptr"]   # opaque pointers carry no type
  def with_entry(self, src: str) -> str:
    used = [name for name in _LLVM_INTRINSICS if f"@{name}(" in src]
    barriers = [name for name in _LLVM_BARRIERS if f"@{name}(" in src]
    waves = {m.group(0)[1:]: base for base in _LLVM_WAVE_OPS for m in re.finditer(rf"@{re.escape(base)}(\.[\w.]+)?(?=\()", src)}
    unknown = sorted(set(re.findall(r"@(llvm\.(?:amdgcn|nvvm|r600)\.[\w.]+)", src)) - set(used) - set(barriers) - set(waves))
    if unknown: raise DialectError(f"the emulator has no lowering for the GPU intrinsic(s) {', '.join(unknown)}")
    text = "\n".join(line for line in src.splitlines()
                     if not (line.startswith("declare") and any(f"@{n}(" in line for n in used + barriers + list(waves))))
    for pattern, repl in _LLVM_REWRITES: text = pattern.sub(repl, text)
    helpers = []
    for name in used:
      func, dim = _LLVM_INTRINSICS[name]
      text = text.replace(f"@{name}(", f"@tp.{name}(")
      helpers.append(f"define internal i32 @tp.{name}() alwaysinline {{\n  %v = call i64 @{func}(i32 {dim})\n"
                     f"  %t = trunc i64 %v to i32\n  ret i32 %t\n}}")
    for name in barriers: text = text.replace(f"call void @{name}(", "call void @tp_barrier(")
    runtime_decls = {f"declare i64 @{f}(i32)" for f, _ in (_LLVM_INTRINSICS[n] for n in used)}
    if barriers: runtime_decls.add("declare void @tp_barrier() convergent nounwind")
    for name, base in waves.items():
      text = text.replace(f"@{name}(", f"@tp.{base}(")
      helper, decl = _wave_op_helper(base)
      helpers.append(helper)
      runtime_decls.add(decl)
    name, params = self._signature(text)
    loads, args, n_ptr, n_var = [], [], 0, 0
    for k, p in enumerate(params):
      ty = p.split()[0]
      if ty == "ptr":
        loads += [f"  %a{k}.p = getelementptr ptr, ptr %args, i64 {n_ptr}", f"  %a{k} = load ptr, ptr %a{k}.p"]
        n_ptr += 1
      else:
        loads += [f"  %a{k}.p = getelementptr i32, ptr %vars, i64 {n_var}", f"  %a{k}.w = load i32, ptr %a{k}.p"]
        loads.append(f"  %a{k} = {'sext i32 %a' + str(k) + '.w to ' + ty if ty != 'i32' else 'add i32 0, %a' + str(k) + '.w'}")
        n_var += 1
      args.append(f"{ty} %a{k}")
    thunk = "\n".join(["define void @tp_entry(ptr %args, ptr %vars) {", *loads, f"  call void @{name}({', '.join(args)})",
                       "  ret void", "}"])
    return "\n".join([text, *sorted(runtime_decls), *helpers, thunk]) + "\n"
  def uses_barrier(self, src: str) -> bool:   # a wave operation exchanges lanes through barriers too
    return any(f"@{n}(" in src for n in _LLVM_BARRIERS) or any(f"@{n}" in src for n in _LLVM_WAVE_OPS)
  def uses_local_memory(self, src: str) -> bool: return False   # addrspace(3) globals become thread_local

def _wave_op_helper(base: str) -> tuple[str, str]:
  """An IR function taking the wave operation's vector operands, passing them through memory to its builtin (C has no
  portable ABI for vectors of half), and the builtin's declaration."""
  result, operands, builtin = _LLVM_WAVE_OPS[base]
  params = ", ".join(f"{t} %x{i}" for i, t in enumerate(operands))
  lines = [f"define internal {result} @tp.{base}({params}) convergent {{"]
  for i, t in enumerate(operands): lines += [f"  %p{i} = alloca {t}", f"  store {t} %x{i}, ptr %p{i}"]
  lines += [f"  %out = alloca {result}", f"  call void @{builtin}({', '.join(f'ptr %p{i}' for i in range(len(operands)))}, ptr %out)",
            f"  %r = load {result}, ptr %out", f"  ret {result} %r", "}"]
  return "\n".join(lines), f"declare void @{builtin}({', '.join(['ptr'] * (len(operands) + 1))}) convergent nounwind"

_METAL_KERNEL = re.compile(r"\bkernel\s+void\s+(\w+)\s*\(")
_METAL_IDS = {"threadgroup_position_in_grid": "get_group_id", "thread_position_in_threadgroup": "get_local_id",
              "thread_position_in_grid": "get_global_id", "threads_per_threadgroup": "get_local_size",
              "threadgroups_per_grid": "get_num_groups"}
_METAL_VECTOR_CTOR = re.compile(r"(?<![\w)])((?:float|half|int|uint|short|ushort|char|uchar|long|ulong|bool)[2348])\(")

class MetalDialect(Dialect):
  """Metal Shading Language through clang's C++ for OpenCL with a `metal_stdlib` stand-in (include/metal_stdlib):
  Metal's address spaces are OpenCL's, the built-ins are the OpenCL ones. The one rewrite: Metal's vector
  constructors `float4(a, b, c, d)` become OpenCL vector literals `(float4)(a, b, c, d)`. Kernel parameters with a
  position attribute ([[thread_position_in_threadgroup]] ...) are filled from the work-item's ids by the thunk, and
  scalar `constant int& n [[buffer(k)]]` parameters from the launch's int values."""
  def _signature(self, src: str) -> tuple[str, list[str]]:
    m = _METAL_KERNEL.search(src)
    if m is None: raise DialectError("no `kernel void name(...)` signature in the Metal source")
    depth, i = 1, m.end()
    while depth and i < len(src):
      depth += {"(": 1, ")": -1}.get(src[i], 0)
      i += 1
    return m.group(1), [p.strip() for p in src[m.end():i - 1].split(",") if p.strip()]
  def pointer_types(self, src: str) -> list[str]:
    drop = {"device", "const", "constant", "volatile"}
    return [" ".join(w for w in p[:p.rindex("*")].split() if w not in drop) for p in self._signature(src)[1] if "*" in p]
  def with_entry(self, src: str) -> str:
    name, params = self._signature(src)
    args, n_ptr, n_var = [], 0, 0
    for p in params:
      attr = re.search(r"\[\[\s*(\w+)", p)
      decl = re.sub(r"\[\[.*?\]\]", "", p).strip()
      if attr and attr.group(1) in _METAL_IDS:
        fn, ty = _METAL_IDS[attr.group(1)], decl.split()[0]
        lanes = ", ".join(f"({ty[:-1]}){fn}({d})" for d in range(3))
        args.append(f"({ty})({lanes})" if ty[-1] == "3" else f"({ty}){fn}(0)")
      elif "*" in decl:
        args.append(f"({decl[:decl.rindex('*') + 1]})args[{n_ptr}]")
        n_ptr += 1
      elif "&" in decl and decl.split()[0] == "constant":   # a scalar (`constant int& n [[buffer(k)]]`): the int in vars,
        # reached through an integer so the private -> constant address-space change is explicit (one flat space here)
        args.append(f"*({decl[:decl.rindex('&')]}*)(__SIZE_TYPE__)(vars + {n_var})")
        n_var += 1
      else:
        raise DialectError(f"the emulator passes only buffers, constant scalars and thread positions to Metal kernels, "
                           f"not {p!r}")
    body = _METAL_VECTOR_CTOR.sub(r"(\1)(", src)
    return f'{body}\nextern "C" void tp_entry(__global void **args, int *vars) {{ {name}({", ".join(args)}); }}\n'
  def uses_barrier(self, src: str) -> bool: return re.search(r"\bthreadgroup_barrier\s*\(", src) is not None
  def uses_local_memory(self, src: str) -> bool: return re.search(r"\bthreadgroup\s+\w+\s+\w+\s*\[", src) is not None

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
  name="cuda", device="CUDA", version="9", headers=("cuda_prelude.h", "include/cuda_fp16.h", "include/cuda_bf16.h"),
  compile_flags=("-x", "c++", "-std=c++17", "-O2", "-fPIC", "-ffp-contract=off", "-Xclang",
                 "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none", "-include", os.path.join(_HERE, "cuda_prelude.h"),
                 "-I", os.path.join(_HERE, "include"), "-w"),
  renderer="CUDA", renderer_options={})

LLVM_IR = LLVMIRDialect(name="llvm-ir", device="AMD", version="3", compile_flags=("-x", "ir", "-O2", "-fPIC", "-w"),
                        builtins="amdgpu_builtins.c", builtins_flags=("-x", "c", "-O2", "-fPIC", "-ffp-contract=off", "-w"))

METAL = MetalDialect(
  name="metal", device="METAL", version="2", builtins="opencl_builtins.cl", headers=("include/metal_stdlib",),
  builtins_flags=OPENCL.compile_flags,   # the same library as OpenCL C: C++ for OpenCL mangles built-ins alike
  compile_flags=("-x", "clcpp", "-cl-std=clc++2021", "-Xclang", "-fdeclare-opencl-builtins", "-Xclang",
                 "-finclude-default-header", "-I", os.path.join(_HERE, "include"), "-ffp-contract=off", "-O2", "-fPIC",
                 "-Xclang", "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none", "-w"),
  renderer="METAL", renderer_options={})

# the cuda plugin's PTX renderer writes LLVM IR for NVPTX: `MOCK+CUDA:PTX` runs it through the same lowering
NVPTX_IR = LLVMIRDialect(name="llvm-ir", device="CUDA", version="3", compile_flags=LLVM_IR.compile_flags, renderer="PTX")

# the amd plugin's HIP renderer writes plain HIP C: the CUDA dialect's prelude covers it (`MOCK+AMD:HIP`)
HIP = CUDADialect(name="hip", device="AMD", version="1", headers=CUDA.headers, compile_flags=CUDA.compile_flags,
                  renderer="HIP", renderer_options={})

DIALECTS: dict[str, Dialect] = {"CL": OPENCL, "CUDA": CUDA, "AMD": LLVM_IR, "METAL": METAL}
# other renderers of a device, selected by name (`MOCK+CUDA:PTX`): (device, renderer name) -> dialect
RENDERER_DIALECTS: dict[tuple[str, str], Dialect] = {("CUDA", "PTX"): NVPTX_IR, ("AMD", "HIP"): HIP}

def dialect_for(target: str, renderer: str | None = None) -> Dialect:
  """The dialect of `target`'s default renderer, or of the renderer named (`MOCK+CUDA:PTX`)."""
  if target not in DIALECTS: raise ValueError(f"the emulator has no dialect for {target!r} (known: {', '.join(DIALECTS)})")
  if renderer is None or renderer == DIALECTS[target].renderer: return DIALECTS[target]
  if (found := RENDERER_DIALECTS.get((target, renderer))) is None:
    known = [DIALECTS[target].renderer or "(default)"] + [r for d, r in RENDERER_DIALECTS if d == target]
    raise ValueError(f"the emulator runs no renderer {renderer!r} for {target} (known: {', '.join(known)})")
  return found
