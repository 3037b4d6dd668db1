"""Registration module of the metal plugin: named by the entry point, imported whenever tinyplug loads plugins.
It imports only `tinyplug.hookspecs` and `tinyplug.helpers`; the Objective-C runtime and Metal load on first use,
never here."""
from tinyplug.helpers import document_env
from tinyplug.hookspecs import DeviceSpec, RendererSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "Metal Shading Language renderer + Metal runtime through the Objective-C runtime "
                                  "(device METAL, macOS)"}

document_env("METAL_CHECK_CLANG", "", "the clang the metal plugin's MSL check (C++ for OpenCL with a metal_stdlib stand-in) "
             "runs; unset: clang-19, clang-20, clang-21, clang-18, clang on PATH, the first that parses")

def probe() -> tuple[bool, str]:
  """macOS, with a Metal GPU (MTLCreateSystemDefaultDevice returns one)."""
  from tinyplug_metal.objc import probe_metal
  return probe_metal()

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="METAL", factory="tinyplug_metal.runtime:MetalDevice", priority=50, probe=probe,
                      description="Apple GPU through the Metal framework (macOS), kernels compiled from MSL by Metal"))

@hookimpl
def tinyplug_register_renderers(register) -> None:
  register(RendererSpec(device="METAL", name="METAL", factory="tinyplug_metal.renderer:MetalRenderer", priority=10))
