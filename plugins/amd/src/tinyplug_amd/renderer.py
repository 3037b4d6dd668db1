"""LLVM IR for AMD GPUs (`amdgcn-amd-amdhsa`), on the core's LLVM IR base (`tinyplug.renderer.llvmir`): the AMDGPU
parts are the builder's hooks.

- Buffers are `ptr addrspace(1)` kernel arguments (global memory), cast once to flat pointers the body addresses;
  LLVM's address-space inference turns the flat accesses back into global ones.
- Work-group memory is an `addrspace(3)` (LDS) global per DEFINE_LOCAL; private arrays are `addrspace(5)` allocas.
- Launch ids come from `llvm.amdgcn.workgroup.id.*` (group) and `llvm.amdgcn.workitem.id.*` (work-item in group).
- A barrier is a work-group-scope release fence, `llvm.amdgcn.s.barrier`, and an acquire fence: `s_barrier` alone
  orders execution, not memory, so the fences make LDS writes before it visible after it.
- `amdgpu-flat-work-group-size` is the kernel's exact work-group size, so LLVM budgets registers for it.
- The module asks for code object v5 (`amdhsa_code_object_version` = 500): what Debian's ld.lld-19 links and ROCm 6
  loads (LLVM 22's default, v6, needs a newer linker).
- exp2, log2, sin and pow are left to the core's decompositions: AMDGPU's hardware versions are approximations, and
  the double ones are library calls that do not exist without ROCm's device libraries."""
from __future__ import annotations
from typing import Any
from tinyplug.backend import LAUNCH_GRID
from tinyplug.renderer.llvmir import LLVMFunctionBuilder, LLVMIRRenderer, mem_type
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug_amd.targets import AMDArch, arch_info

TRIPLE = "amdgcn-amd-amdhsa"
CODE_OBJECT_VERSION = 500
_ID_INTRINSICS = {"gidx": "workgroup.id", "lidx": "workitem.id"}

class AMDGPUBuilder(LLVMFunctionBuilder):
  def build(self) -> str:
    self.lds: list[str] = []
    return super().build()

  def buffer_param(self, u: UOp) -> str:
    self.r[u] = f"%data{u.arg}.flat"
    self.allocas.append(f"%data{u.arg}.flat = addrspacecast ptr addrspace(1) %data{u.arg} to ptr")
    return f"ptr addrspace(1) noalias %data{u.arg}"

  def render_special(self, u: UOp) -> str:
    name = u.arg[0]
    prefix, dim = name.rstrip("0123456789"), int(name.lstrip("gilxd"))
    if prefix not in _ID_INTRINSICS:
      raise NotImplementedError(f"the AMDGPU renderer launches work-groups: {name} is not a group or local id")
    fn = f"@llvm.amdgcn.{_ID_INTRINSICS[prefix]}.{'xyz'[dim]}"
    self.decls[fn] = f"declare i32 {fn}() nounwind readnone speculatable"
    v = self.op(f"call i32 {fn}()")
    return v if u.dtype.itemsize != 8 else self.op(f"zext i32 {v} to i64")   # i64 in a kernel over 2^31+ elements

  def define_local(self, u: UOp) -> str:
    k = len(self.lds)
    self.lds.append(f"@lds{k} = internal addrspace(3) global [{max(u.dtype.size, 1)} x {mem_type(u.dtype.base)}] "
                    "undef, align 16")
    self.allocas.append(f"%lds{k} = addrspacecast ptr addrspace(3) @lds{k} to ptr")
    return f"%lds{k}"

  def define_reg(self, u: UOp) -> str:
    name = f"%reg{len(self.allocas)}"
    self.allocas.append(f"{name}.private = alloca [{max(u.dtype.size, 1)} x {mem_type(u.dtype.base)}], align 16, "
                        "addrspace(5)")
    self.allocas.append(f"{name} = addrspacecast ptr addrspace(5) {name}.private to ptr")
    return name

  def render_barrier(self, u: UOp) -> None:
    self.decls["@llvm.amdgcn.s.barrier"] = "declare void @llvm.amdgcn.s.barrier() convergent nounwind"
    self.emit('fence syncscope("workgroup") release')
    self.emit("call void @llvm.amdgcn.s.barrier()")
    self.emit('fence syncscope("workgroup") acquire')

  def function_attributes(self) -> str:
    return f'{self.renderer.function_attrs} "amdgpu-flat-work-group-size"="1,{work_group_size(self.uops)}"'

  def footer(self) -> list[str]:
    # (the compiler sets the triple and data layout: they must come first in a module)
    return [*self.lds, "!llvm.module.flags = !{!0}",
            f'!0 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION}}}']

def work_group_size(uops: list[UOp]) -> int:
  """Work-items per group: the product of the local ids' sizes (1 for a kernel without them)."""
  n = 1
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"): n *= int(u.arg[1])
  return n

class AMDTarget:
  """What the AMD renderers share: the device, its grid/work-group launch and limits. `arch` ("gfx1100"; default
  AMD_ARCH, else gfx1100) is the GPU they write for; the limits default to those of every HIP device, the AMD device
  passes its own. Vectors carry loads and stores only: math runs per lane, as the hardware does."""
  device = "AMD"
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)
  vector_alu = False

  def __init__(self, arch: str | None = None, *, local_max: tuple[int, ...] = (1024, 1024, 1024),
               max_threads: int = 1024, shared_max: int | None = None):
    self.target: AMDArch = arch_info(arch)
    self.arch = self.target.name
    self.local_max = tuple(min(int(x), max_threads) for x in local_max)
    self.shared_max = int(shared_max if shared_max is not None else self.target.lds)

class AMDGPURenderer(AMDTarget, LLVMIRRenderer):
  """LLVM IR for amdgcn-amd-amdhsa (what AMDCompiler turns into a code object); arguments as AMDTarget's."""
  suffix = "ll"
  calling_convention = "amdgpu_kernel"
  native_ops = frozenset(GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
  builder = AMDGPUBuilder

  def __init__(self, arch: str | None = None, **limits: Any):
    super().__init__(arch, **limits)
    # loads and stores of up to 16 bytes (LLVM splits those it cannot prove aligned); no bool vectors
    self.vector_widths = {dt: tuple(w for w in (4, 2) if w * dt.itemsize <= 16)
                          for dt in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                     dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)}

  def __repr__(self) -> str:
    return f"AMDGPURenderer(arch={self.arch!r}, local_max={self.local_max}, shared_max={self.shared_max})"
