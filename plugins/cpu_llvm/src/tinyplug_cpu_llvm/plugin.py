"""Registration of the CPU device (LLVM IR, compiled with llvmlite). Cheap: llvmlite loads on first use."""
from tinyplug.helpers import ContextVar
from tinyplug.hookspecs import DeviceSpec, RendererSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "CPU backend: LLVM IR compiled with llvmlite for the host CPU, multi-threaded"}

CPU_THREADS = ContextVar("CPU_THREADS", 0, "threads the CPU device runs large kernels on; 0 means every core this process may use")
CPU_SPIN_US = ContextVar("CPU_SPIN_US", 2000, "microseconds an idle CPU worker thread waits for the next kernel before it sleeps")

def probe() -> tuple[bool, str]:
  """llvmlite installed? (found, not imported: importing it loads libLLVM)"""
  import importlib.util
  if importlib.util.find_spec("llvmlite") is None: return False, "llvmlite is not installed (pip install llvmlite)"
  return True, ""

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="CPU", factory="tinyplug_cpu_llvm.runtime:CPUDevice", priority=100, probe=probe,
                      aliases=("LLVM",), description="host CPU: LLVM IR via llvmlite, JIT-loaded, all cores"))

@hookimpl
def tinyplug_register_renderers(register) -> None:
  register(RendererSpec(device="CPU", name="LLVM", factory="tinyplug_cpu_llvm.renderer:LLVMRenderer", priority=10))
