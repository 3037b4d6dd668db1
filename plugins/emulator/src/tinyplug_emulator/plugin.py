"""Registration module of the emulator plugin: devices MOCK+<device>, one per source dialect the emulator knows.

Cheap: imports only the core's hookspecs and the settings; clang is looked for by the probe, run on first use."""
from tinyplug.hookspecs import DeviceSpec, hookimpl
from tinyplug_emulator import settings  # noqa: F401  (declares the EMU_* settings for `tinyplug env`)

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "GPU emulator: a GPU renderer's exact source compiled by clang for the host, work-items "
                                  "as fibers (MOCK+CL; MOCK+CUDA, MOCK+AMD, MOCK+METAL once those renderers are installed)"}

EMULATED = {"CL": "OpenCL C", "CUDA": "CUDA C", "AMD": "LLVM IR (AMDGPU)", "METAL": "Metal Shading Language"}   # the device whose renderer's code runs, and the dialect it writes

def probe(target: str) -> tuple[bool, str]:
  """A suitable clang, and an active plugin that renders for the real device."""
  from tinyplug_emulator.toolchain import find_clang
  path, _, reason = find_clang()
  if path is None: return False, reason
  from tinyplug.plugins import get_plugin_manager
  from tinyplug_emulator.dialects import DIALECTS
  wanted = DIALECTS[target].renderer
  if not [s for s, _ in get_plugin_manager(check=False).renderers_for(target) if wanted in (None, s.name)]:
    which = f"the {wanted} renderer" if wanted else "a renderer"
    return False, f"no active plugin provides {which} for {target} (the emulator runs that renderer's code)"
  return True, ""

def _probe_for(target: str):
  def run() -> tuple[bool, str]: return probe(target)
  return run

@hookimpl
def tinyplug_register_devices(register) -> None:
  for target, language in EMULATED.items():
    register(DeviceSpec(name=f"MOCK+{target}", factory="tinyplug_emulator.device:EmulatorDevice", priority=-200,
                        probe=_probe_for(target),
                        description=f"emulator: the {target} renderer's {language} compiled by clang for the host, "
                                    "work-items as fibers, barrier/order/bounds checks"))
