"""Registration of the built-in PYTHON reference interpreter device (cheap: the interpreter loads on first use)."""
from tinyplug.hookspecs import DeviceSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "reference interpreter: runs linear programs with numpy; the device of last resort"}

@hookimpl
def tinyplug_register_devices(register) -> None:
  register(DeviceSpec(name="PYTHON", factory="tinyplug.runtime.python:PythonDevice", priority=-100,
                      description="numpy interpreter of linear programs, with GPU semantics (ids, local memory)"))
