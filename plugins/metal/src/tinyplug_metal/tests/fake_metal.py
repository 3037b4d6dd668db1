"""A stand-in for the Objective-C runtime and Metal, in Python, for testing the METAL device's plumbing off macOS:
objects are integers, messages are dispatched by selector, every retain and release is counted. A command buffer
"runs" its dispatch with a Python function registered under the kernel's name, on the buffers' real memory. It
proves the runtime sends the right messages in the right order with the right arguments, not GPU behaviour."""
from __future__ import annotations
import ctypes, itertools, re
from typing import Any, Callable

class FakeMetal:
  def __init__(self, kernels: dict[str, Callable[..., None]]):
    self.kernels = kernels                 # name -> fn(buffers as ctypes arrays, values, grid, group)
    self.objects: dict[int, dict] = {}     # id -> {"kind": ..., "refs": n, ...}
    self._ids = itertools.count(0x1000, 0x10)
    self.log: list[tuple[str, str]] = []   # (kind, selector) of every message
    self.fail_next_launch = False
    self.device = self.new("device", refs=1)

  def new(self, kind: str, refs: int = 1, **fields: Any) -> int:
    oid = next(self._ids)
    self.objects[oid] = {"kind": kind, "refs": refs, **fields}
    return oid

  def live(self, kind: str) -> list[int]: return [o for o, v in self.objects.items() if v["kind"] == kind and v["refs"] > 0]

  # ---- the objc module's surface ----
  def cls(self, name: str) -> int: return self.new("class", refs=1, name=name)
  def nsstring(self, text: str) -> int: return self.new("string", refs=0, text=text)   # autoreleased
  def pystring(self, obj: int) -> str: return self.objects[obj]["text"] if obj else ""
  def error_text(self, err: int) -> str: return self.objects[err]["text"] if err else ""
  def system_default_device(self) -> int: return self.device
  def probe_metal(self) -> tuple[bool, str]: return True, ""

  def send(self, obj: int, sel: str, *args: Any) -> Any:
    from tinyplug_metal import objc
    if not obj: raise objc.MetalError(f"message {sel!r} sent to nil")
    assert sel in objc.SIGNATURES and sel.count(":") == len(args), sel
    o = self.objects[obj]
    assert o["refs"] > 0 or o["kind"] in ("string", "commandbuffer", "encoder"), f"{sel} sent to a released {o['kind']}"
    self.log.append((o["kind"], sel))
    kind = o["kind"]
    if sel == "retain": o["refs"] += 1; return obj
    if sel == "release": o["refs"] -= 1; assert o["refs"] >= 0, f"{kind} over-released"; return None
    if kind == "class" and sel == "new": return self.new(o["name"])
    if kind == "device":
      if sel == "newCommandQueue": return self.new("queue")
      if sel == "name": return self.nsstring("Fake M0")
      if sel == "hasUnifiedMemory": return True
      if sel == "maxThreadgroupMemoryLength": return 32768
      if sel == "newBufferWithLength:options:":
        assert args[1] == objc.STORAGE_SHARED
        return self.new("buffer", memory=(ctypes.c_uint8 * args[0])(), length=args[0])
      if sel == "newLibraryWithSource:options:error:":
        src, options, err = self.objects[args[0]]["text"], self.objects[args[1]], args[2]._obj
        assert options.get("fast_math") is False, "fast math must be off"
        if "#error" in src:
          err.value = self.nsstring("program_source:3:1: error: this kernel does not compile")
          return None
        return self.new("library", names=re.findall(r"kernel void (\w+)\(", src))
      if sel == "newComputePipelineStateWithFunction:error:":
        return self.new("pipeline", name=self.objects[args[0]]["name"])
    if kind == "MTLCompileOptions" and sel == "setFastMathEnabled:": o["fast_math"] = bool(args[0]); return None
    if kind == "library" and sel == "newFunctionWithName:":
      name = self.objects[args[0]]["text"]
      return self.new("function", name=name) if name in o["names"] else None
    if kind == "pipeline" and sel == "maxTotalThreadsPerThreadgroup": return 256
    if kind == "buffer":
      if sel == "contents": return ctypes.addressof(o["memory"])
    if kind == "queue" and sel == "commandBuffer": return self.new("commandbuffer", refs=0, status=0, encoders=[])
    if kind == "commandbuffer":
      if sel == "computeCommandEncoder":
        enc = self.new("encoder", refs=0, buffers={}, values={}, pipeline=None, dispatch=None, ended=False)
        o["encoders"].append(enc)
        return enc
      if sel == "commit":
        o["status"] = 2
        for enc in o["encoders"]:
          e = self.objects[enc]
          assert e["ended"], "committed before endEncoding"
          for b in e["buffers"].values(): self.objects[b]["refs"] += 1   # a command buffer keeps its resources
        return None
      if sel == "waitUntilCompleted":
        if o["status"] == 2: self._run(o)
        return None
      if sel == "status": return o["status"]
      if sel == "error": return self.nsstring("Internal Error (0000000e:Internal Error)") if o["status"] == 5 else None
      if sel == "GPUStartTime": return 100.0
      if sel == "GPUEndTime": return 100.0 + 0.25e-3
    if kind == "encoder":
      if sel == "setComputePipelineState:": o["pipeline"] = args[0]; return None
      if sel == "setBuffer:offset:atIndex:": assert args[1] == 0; o["buffers"][args[2]] = args[0]; return None
      if sel == "setBytes:length:atIndex:":
        assert args[1] == 4
        o["values"][args[2]] = args[0]._obj.value   # copied now, as Metal copies it
        return None
      if sel == "dispatchThreadgroups:threadsPerThreadgroup:":
        o["dispatch"] = ((args[0].width, args[0].height, args[0].depth), (args[1].width, args[1].height, args[1].depth))
        return None
      if sel == "endEncoding": o["ended"] = True; return None
    raise AssertionError(f"the fake has no {sel!r} for a {kind}")

  def _run(self, cb: dict) -> None:
    for enc in cb["encoders"]:
      e = self.objects[enc]
      name = self.objects[e["pipeline"]]["name"]
      bufs = [self.objects[e["buffers"][i]]["memory"] for i in sorted(e["buffers"])]
      assert sorted(e["buffers"]) == list(range(len(bufs))), "buffers must be bound at 0..n-1"
      values = [e["values"][i] for i in sorted(e["values"])]
      assert sorted(e["values"]) == list(range(len(bufs), len(bufs) + len(values))), "scalars follow the buffers"
      self.kernels[name](bufs, values, *e["dispatch"])
      for b in e["buffers"].values(): self.objects[b]["refs"] -= 1
    cb["status"] = 5 if self.fail_next_launch else 4
    self.fail_next_launch = False

def install(monkeypatch, fake: FakeMetal) -> None:
  """Route the runtime's Objective-C calls to `fake`."""
  import contextlib
  from tinyplug_metal import objc, runtime
  for name in ("cls", "nsstring", "pystring", "error_text", "system_default_device", "probe_metal"):
    monkeypatch.setattr(objc, name, getattr(fake, name))
  monkeypatch.setattr(runtime, "send", fake.send)
  monkeypatch.setattr(runtime, "autorelease_pool", contextlib.nullcontext)
