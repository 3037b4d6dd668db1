"""The amd plugin without ROCm (this CI): registered with its renderer, `unavailable` with the reason and how to fix
it, DEV=AMD says the same, and nothing else breaks. With ROCm and a GPU the probe passes instead (not seen here)."""
from __future__ import annotations
import json, os, subprocess, sys
import pytest
from tinyplug.backend import parse_gpu_name
from tinyplug.plugins import get_plugin_manager
from tinyplug_amd.hip import probe_hip
from tinyplug_amd.runtime import pack_arguments

HAS_GPU = probe_hip()[0]

def test_registered_with_the_llvm_renderer_first():
  pm = get_plugin_manager()
  assert pm.resolve_device("AMD") == "AMD" and pm.resolve_device("hip") == "AMD"
  assert [spec.name for spec, _ in pm.renderers_for("AMD")][0] == "LLVM"

@pytest.mark.skipif(HAS_GPU, reason="ROCm and an AMD GPU are present")
def test_without_rocm_the_plugin_is_unavailable_with_the_reason():
  out = subprocess.run([sys.executable, "-m", "tinyplug", "list-plugins", "--json"], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  doc = json.loads(out.stdout)
  entries = doc["plugins"] if isinstance(doc, dict) else doc
  amd = next(p for p in entries if p["id"] == "amd")
  assert amd["status"] == "unavailable"
  assert "libamdhip64.so" in amd["reason"] and "install ROCm" in amd["reason"] and "DEV=MOCK+AMD" in amd["reason"]
  assert {p["id"]: p["status"] for p in entries}["cpu_llvm"] == "active"

@pytest.mark.skipif(HAS_GPU, reason="ROCm and an AMD GPU are present")
def test_dev_amd_says_how_to_get_it_and_other_devices_keep_working():
  code = ("from tinyplug import Tensor\n"
          "try: Tensor([1.0, 2.0]).realize()\n"
          "except RuntimeError as e: print('ERR', e)\n"
          "print((Tensor([1.0, 2.0], device='CPU') * 3).tolist())\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DEV": "AMD"})
  assert out.returncode == 0, out.stderr
  assert "ERR device AMD is unavailable" in out.stdout and "install ROCm" in out.stdout
  assert "[3.0, 6.0]" in out.stdout

def test_device_names(monkeypatch):
  monkeypatch.delenv("AMD_DEVICE", raising=False)
  assert parse_gpu_name("AMD", ["LLVM"], "AMD_DEVICE") == (None, 0)
  assert parse_gpu_name("AMD:1", ["LLVM"], "AMD_DEVICE") == (None, 1)
  assert parse_gpu_name("AMD:llvm:2", ["LLVM"], "AMD_DEVICE") == ("LLVM", 2)
  monkeypatch.setenv("AMD_DEVICE", "3")
  assert parse_gpu_name("AMD", ["LLVM"], "AMD_DEVICE") == (None, 3)
  with pytest.raises(ValueError, match="neither a GPU ordinal nor one of AMD's renderers"):
    parse_gpu_name("AMD:CUDA", ["LLVM"], "AMD_DEVICE")

def test_kernel_arguments_are_packed_as_the_kernarg_segment():
  import ctypes
  args = pack_arguments([ctypes.c_void_p(0x1000), ctypes.c_void_p(0x2000)], [7, -1])
  raw = bytes(args)
  assert len(raw) == 24   # two 8-byte pointers, two 4-byte ints
  assert int.from_bytes(raw[0:8], "little") == 0x1000 and int.from_bytes(raw[8:16], "little") == 0x2000
  assert int.from_bytes(raw[16:20], "little", signed=True) == 7 and int.from_bytes(raw[20:24], "little", signed=True) == -1
