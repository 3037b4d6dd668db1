"""The cuda plugin without a GPU (this CI): registered, `unavailable` with the reason and how to fix it, DEV=CUDA
says the same, and nothing else breaks. With a driver and a GPU the probe passes instead (not seen here)."""
from __future__ import annotations
import json, os, subprocess, sys
import pytest
from tinyplug.backend import parse_gpu_name
from tinyplug.plugins import get_plugin_manager
from tinyplug_cuda.driver import probe_driver

HAS_GPU = probe_driver()[0]

def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tinyplug", *args], capture_output=True, text=True, timeout=300,
                        env={**os.environ, **env})

def test_registered_with_both_renderers_cuda_c_first():
  pm = get_plugin_manager()
  assert pm.resolve_device("CUDA") == "CUDA" and pm.resolve_device("nv") == "CUDA"
  assert [spec.name for spec, _ in pm.renderers_for("CUDA")] == ["CUDA", "PTX"]   # CUDA C is the default

@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_without_a_driver_the_plugin_is_unavailable_with_the_reason():
  out = cli("list-plugins", "--json")
  assert out.returncode == 0, out.stderr
  doc = json.loads(out.stdout)
  entries = doc["plugins"] if isinstance(doc, dict) else doc
  cuda = next(p for p in entries if p["id"] == "cuda")
  assert cuda["status"] == "unavailable"
  assert "libcuda.so.1" in cuda["reason"] and "DEV=MOCK+CUDA" in cuda["reason"]
  others = {p["id"]: p["status"] for p in entries}
  assert others["cpu_llvm"] == "active" and others["python"] == "builtin"

@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_dev_cuda_says_how_to_get_it_and_other_devices_keep_working():
  code = ("from tinyplug import Tensor\n"
          "try: Tensor([1.0, 2.0]).realize()\n"
          "except RuntimeError as e: print('ERR', e)\n"
          "print((Tensor([1.0, 2.0], device='CPU') * 3).tolist())\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DEV": "CUDA"})
  assert out.returncode == 0, out.stderr
  assert "ERR device CUDA is unavailable" in out.stdout and "install the NVIDIA driver" in out.stdout
  assert "[3.0, 6.0]" in out.stdout

def test_device_names():
  assert parse_gpu_name("CUDA", ["CUDA", "PTX"], "CUDA_DEVICE") == (None, 0)
  assert parse_gpu_name("CUDA:1", ["CUDA", "PTX"], "CUDA_DEVICE") == (None, 1)
  assert parse_gpu_name("CUDA:ptx", ["CUDA", "PTX"], "CUDA_DEVICE") == ("PTX", 0)
  assert parse_gpu_name("CUDA:PTX:2", ["CUDA", "PTX"], "CUDA_DEVICE") == ("PTX", 2)
  with pytest.raises(ValueError, match="neither a GPU ordinal nor one of CUDA's renderers"):
    parse_gpu_name("CUDA:OPENCL", ["CUDA", "PTX"], "CUDA_DEVICE")
