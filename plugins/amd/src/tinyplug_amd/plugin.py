"""Registration module of the amd plugin: named by the entry point, imported whenever tinyplug loads plugins.
It imports only `tinyplug.hookspecs` and `tinyplug.helpers`; llvmlite, the linker and HIP load on first use, never here."""
from tinyplug.helpers import document_env
from tinyplug.hookspecs import DeviceSpec, RendererSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "LLVM IR for AMDGPU (llvmlite + ld.lld code objects) and HIP C renderers + HIP runtime "
                                  "(device AMD)"}

document_env("AMD_ARCH", "", "AMD GPU the amd plugin compiles for when no GPU is open (gfx1100, gfx942, gfx1201, ...; "
             "default gfx1100); with a GPU its own gcnArchName is used")
document_env("AMD_LLD", "", "the ld.lld the amd plugin links code objects with (default: ROCm's llvm/bin/ld.lld, else "
             "the newest ld.lld-NN >= 19 on PATH)")
document_env("ROCM_PATH", "", "a ROCm installation to take libamdhip64.so and ld.lld from (then /opt/rocm is tried)")
document_env("AMD_DEVICE", "", "ordinal of the GPU DEV=AMD opens when there are several (also `DEV=AMD:1`)")

def probe() -> tuple[bool, str]:
  """ROCm's HIP runtime (libamdhip64.so) loads, initialises and sees at least one AMD GPU."""
  from tinyplug_amd.hip import probe_hip
  return probe_hip()

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="AMD", factory="tinyplug_amd.runtime:AMDDevice", priority=50, probe=probe, aliases=("HIP",),
                      description="AMD GPU through ROCm's HIP runtime (libamdhip64.so), code objects from LLVM's AMDGPU "
                                  "target linked by ld.lld"))

@hookimpl
def tinyplug_register_renderers(register) -> None:
  register(RendererSpec(device="AMD", name="LLVM", factory="tinyplug_amd.renderer:AMDGPURenderer", priority=10))
  register(RendererSpec(device="AMD", name="HIP", factory="tinyplug_amd.hip_renderer:HIPRenderer", priority=0))
