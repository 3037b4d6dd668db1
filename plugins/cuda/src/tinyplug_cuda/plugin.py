"""Registration module of the cuda plugin: named by the entry point, imported whenever tinyplug loads plugins.
It imports only `tinyplug.hookspecs` and `tinyplug.helpers`; NVRTC and the driver load on first use, never here."""
from tinyplug.helpers import document_env
from tinyplug.hookspecs import DeviceSpec, RendererSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "CUDA C (NVRTC) and PTX (LLVM NVPTX) renderers + CUDA driver runtime (device CUDA)"}

document_env("CUDA_ARCH", "", "GPU architecture the cuda plugin compiles for when no GPU is open (sm_75, sm_80, sm_90, ...; "
             "default sm_80); with a GPU its own sm_XY is used")
document_env("CUDA_PATH", "", "a CUDA toolkit to take NVRTC and the half/bf16 headers from when the nvidia-cuda-nvrtc / "
             "nvidia-cuda-runtime wheels are not installed (then /usr/local/cuda, /opt/cuda are tried)")
document_env("CUDA_WGMMA", "1", "on sm_90 (H100/H200) the CUDA C renderer adds Hopper's wgmma tensor cores (sm_90a) and the "
             "heuristic runs fp16/bf16 matmuls whose sizes tile on them (STAGE's descriptor mode); 0: mma.sync only")
document_env("CUDA_DEVICE", "", "ordinal of the GPU DEV=CUDA opens when there are several (also `DEV=CUDA:1`)")

def probe() -> tuple[bool, str]:
  """The NVIDIA driver (libcuda.so.1) loads, initialises and sees at least one GPU."""
  from tinyplug_cuda.driver import probe_driver
  return probe_driver()

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="CUDA", factory="tinyplug_cuda.runtime:CUDADevice", priority=150, probe=probe, aliases=("NV",),
                      description="NVIDIA GPU through the CUDA driver API (libcuda.so.1), kernels compiled by NVRTC"))

@hookimpl
def tinyplug_register_renderers(register) -> None:
  register(RendererSpec(device="CUDA", name="CUDA", factory="tinyplug_cuda.renderer:CUDARenderer", priority=10))
  register(RendererSpec(device="CUDA", name="PTX", factory="tinyplug_cuda.ptx:PTXRenderer", priority=0))
