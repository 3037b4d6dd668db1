"""Registration module of the opencl plugin: named by the entry point, imported whenever tinyplug loads plugins.
It imports only `tinyplug.hookspecs` and `tinyplug.helpers`; the driver is loaded by the probe or the device, never here."""
from tinyplug.helpers import document_env
from tinyplug.hookspecs import DeviceSpec, RendererSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "OpenCL C renderer + libOpenCL runtime (device CL, alias GPU)"}

document_env("CL_DEVICE", "", "OpenCL device used by CL when there are several: an index (0, 1, ...) in platform order "
             "or a substring of the device name (opencl plugin)")

def probe() -> tuple[bool, str]:
  """Cheap availability check: the ICD loader library exists and reports at least one platform with a device."""
  from tinyplug_opencl.cl import probe_platforms
  return probe_platforms()

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="CL", factory="tinyplug_opencl.runtime:CLDevice", priority=5, probe=probe, aliases=("GPU",),
                      description="OpenCL through the system libOpenCL (any ICD: PoCL, NVIDIA, AMD, Intel)"))

@hookimpl
def tinyplug_register_renderers(register) -> None:
  register(RendererSpec(device="CL", name="OPENCL", factory="tinyplug_opencl.renderer:OpenCLRenderer"))
