"""The metal plugin off macOS (this CI): registered, `unavailable` with the reason, DEV=METAL says so, nothing else
breaks; and the parts of the runtime that can be tested without Apple's frameworks (the message-signature table,
argument packing, error paths). On a Mac the probe passes instead and test_on_metal.py runs."""
from __future__ import annotations
import ctypes, json, os, subprocess, sys
import pytest
from tinyplug.plugins import get_plugin_manager
from tinyplug_metal import objc
from tinyplug_metal.runtime import MetalCompiler, numbered, pack_launch, pack_values

ON_MAC = sys.platform == "darwin"

def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tinyplug", *args], capture_output=True, text=True, timeout=300,
                        env={**os.environ, **env})

def test_registered_with_its_renderer():
  pm = get_plugin_manager()
  assert pm.resolve_device("METAL") == "METAL" and pm.resolve_device("metal") == "METAL"
  assert [spec.name for spec, _ in pm.renderers_for("METAL")] == ["METAL"]

@pytest.mark.skipif(ON_MAC, reason="this is macOS")
def test_off_macos_the_plugin_is_unavailable_with_the_reason():
  ok, reason = objc.probe_metal()
  assert not ok and reason.startswith("Metal needs macOS (this is ") and reason.endswith(objc.MOCK_HINT)
  out = cli("list-plugins", "--json")
  assert out.returncode == 0, out.stderr
  doc = json.loads(out.stdout)
  entries = doc["plugins"] if isinstance(doc, dict) else doc
  metal = next(p for p in entries if p["id"] == "metal")
  assert metal["status"] == "unavailable" and "Metal needs macOS" in metal["reason"] and "DEV=MOCK+METAL" in metal["reason"]
  assert {p["id"]: p["status"] for p in entries}["python"] == "builtin"

@pytest.mark.skipif(ON_MAC, reason="this is macOS")
def test_dev_metal_says_why_and_other_devices_keep_working():
  code = ("from tinyplug import Tensor\n"
          "try: Tensor([1.0, 2.0]).realize()\n"
          "except RuntimeError as e: print('ERR', e)\n"
          "print((Tensor([1.0, 2.0], device='PYTHON') * 3).tolist())\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, "DEV": "METAL"})
  assert out.returncode == 0, out.stderr
  assert "ERR device METAL is unavailable" in out.stdout and "Metal needs macOS" in out.stdout
  assert "[3.0, 6.0]" in out.stdout

@pytest.mark.skipif(ON_MAC, reason="this is macOS")
def test_the_runtime_imports_and_refuses_cleanly_off_macos():
  from tinyplug_metal.runtime import MetalDevice
  with pytest.raises(RuntimeError, match="Metal needs macOS"): MetalDevice()
  with pytest.raises(objc.MetalUnavailable, match="Metal needs macOS"): objc.cls("NSString")
  with pytest.raises(objc.MetalUnavailable, match="Metal needs macOS"): objc.send(1234, "retain")

def test_every_message_signature_is_consistent():
  assert objc.check_signatures() == []
  assert objc.SIGNATURES["dispatchThreadgroups:threadsPerThreadgroup:"] == (None, (objc.MTLSize, objc.MTLSize))
  # the function types the runtime casts objc_msgSend to: (self, _cmd, *arguments)
  proto = objc.prototype("setBuffer:offset:atIndex:")
  assert proto._restype_ is None and proto._argtypes_ == (objc.id_t, ctypes.c_void_p, objc.id_t, objc.NSUInteger, objc.NSUInteger)
  assert objc.prototype("GPUEndTime")._restype_ is ctypes.c_double

def test_the_table_catches_its_own_mistakes(monkeypatch):
  monkeypatch.setitem(objc.SIGNATURES, "setBytes:length:", (None, (ctypes.c_void_p, objc.NSUInteger, objc.NSUInteger)))
  monkeypatch.setitem(objc.SIGNATURES, "maxThreadsPerThreadgroup", (objc.MTLSize, ()))
  assert objc.check_signatures() == ["setBytes:length:: 2 colon(s) but 3 argument type(s)",
                                     "maxThreadsPerThreadgroup: returns a struct"]
  with pytest.raises(objc.MetalError, match="no signature for the Objective-C selector 'newSamplerState'"):
    objc.prototype("newSamplerState")
  with pytest.raises(objc.MetalError, match="message 'commit' sent to nil"): objc.send(None, "commit")

def test_launch_and_argument_packing():
  grid, group = pack_launch((4, 2), (32,))
  assert (grid.width, grid.height, grid.depth, group.width, group.height, group.depth) == (4, 2, 1, 32, 1, 1)
  assert ctypes.sizeof(objc.MTLSize) == 24   # three NSUIntegers, passed by value
  grid, group = pack_launch((1, 1, 1), None)
  assert (group.width, group.height, group.depth) == (1, 1, 1)
  with pytest.raises(ValueError, match="1 to 3 positive sizes"): pack_launch((4, 0, 1), (1,))
  with pytest.raises(ValueError, match="1 to 3 positive sizes"): pack_launch((1, 1, 1, 1), (1,))
  vals = pack_values((5, -1, 2**31 - 1))
  assert [v.value for v in vals] == [5, -1, 2**31 - 1] and all(ctypes.sizeof(v) == 4 for v in vals)
  with pytest.raises(ValueError, match="must fit 32 bits"): pack_values((2**31,))

def test_compiler_hands_metal_the_source():
  src = "kernel void k(device float* a [[buffer(0)]]) { a[0] = 1.0f; }\n"
  assert MetalCompiler().compile_cached(src) == src.encode()
  assert numbered("a\nb") == "    1 | a\n    2 | b"
