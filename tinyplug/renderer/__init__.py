"""Renderers: the `Renderer` contract (from `tinyplug.backend`) and shared bases a backend subclasses.

- `tinyplug.renderer.cstyle.CStyleRenderer`: C-like kernel languages (OpenCL C, CUDA C, Metal, HIP) from tables.
- `tinyplug.renderer.llvmir.LLVMIRRenderer`: LLVM IR text (CPU; the base for AMDGPU and NVPTX targets).

Both produce text only: no compiler or driver is imported here."""
from tinyplug.backend import LAUNCH_GRID, LAUNCH_IDS, LAUNCH_LOOPS, ProgramSpec, Renderer

__all__ = ["Renderer", "ProgramSpec", "LAUNCH_LOOPS", "LAUNCH_IDS", "LAUNCH_GRID"]
