"""The METAL device's plumbing against a Python stand-in for the Objective-C runtime and Metal (fake_metal.py):
buffers, copies through shared memory, compile errors, the launch's bindings and geometry, scalar arguments,
asynchronous command buffers, timing, GPU errors and reference counts. Not GPU behaviour: on a Mac,
test_on_metal.py runs the same device for real."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.backend import ProgramSpec
from tinyplug_metal.objc import MetalError
from tinyplug_metal.tests.fake_metal import FakeMetal, install

def scale_kernel(bufs, values, grid, group):
  """out[i] = in[i] * n, for i < grid*group threads (the fake's version of the kernel `scale`)."""
  out, inp = (np.frombuffer(b, np.float32) for b in bufs)
  n = grid[0] * group[0]
  out[:n] = inp[:n] * values[0]

SRC = "kernel void scale(device float* data0 [[buffer(0)]], device float* data1 [[buffer(1)]], constant int& n [[buffer(2)]]) {}\n"

@pytest.fixture
def fake(monkeypatch):
  f = FakeMetal({"scale": scale_kernel})
  install(monkeypatch, f)
  return f

@pytest.fixture
def dev(fake):
  from tinyplug_metal.runtime import MetalDevice
  return MetalDevice("METAL")

def spec(src=SRC, name="scale"): return ProgramSpec(name, (), src, (2, 1, 1), (8, 1, 1))

def test_device_renderer_and_shared_buffers(fake, dev):
  assert dev.gpu_name == "Fake M0" and dev.unified and dev.renderer.shared_max == 32768
  assert "Fake M0 (unified memory)" in dev.describe()
  raw = dev.allocator.raw
  buf = raw.alloc(64)
  a = np.arange(16, dtype=np.float32)
  raw.copyin(buf, memoryview(a).cast("B"))
  assert np.array_equal(np.frombuffer(fake.objects[buf.obj]["memory"], np.float32), a)   # one memmove into contents
  got = np.empty(16, np.float32)
  raw.copyout(memoryview(got).cast("B"), buf)
  assert np.array_equal(got, a)
  raw.copyin(buf, memoryview((a + 1).tobytes()))   # read-only source (bytes)
  raw.copyout(memoryview(got).cast("B"), buf)
  assert np.array_equal(got, a + 1)
  raw.copyin(buf, memoryview(b""))   # nothing to copy: no wait, no memmove
  raw.free(buf, 64)
  assert not fake.live("buffer")

def test_launch_binds_buffers_then_scalars_and_times_on_the_gpu(fake, dev):
  raw = dev.allocator.raw
  out, inp = raw.alloc(64), raw.alloc(64)
  a = np.arange(16, dtype=np.float32)
  raw.copyin(inp, memoryview(a).cast("B"))
  prg = dev.make_program(spec(), dev.compiler.compile_cached(SRC))
  assert prg(out, inp, global_size=(2, 1, 1), local_size=(8, 1, 1), vals=(3,)) is None   # committed, not waited for
  assert len(dev.in_flight) == 1
  seconds = prg(out, inp, global_size=(2, 1, 1), local_size=(8, 1, 1), vals=(3,), wait=True)
  assert seconds == pytest.approx(0.25e-3) and not dev.in_flight
  got = np.empty(16, np.float32)
  raw.copyout(memoryview(got).cast("B"), out)
  assert np.array_equal(got, a * 3)
  sels = [s for k, s in fake.log if k == "encoder"]
  assert sels[:6] == ["setComputePipelineState:", "setBuffer:offset:atIndex:", "setBuffer:offset:atIndex:",
                      "setBytes:length:atIndex:", "dispatchThreadgroups:threadsPerThreadgroup:", "endEncoding"]
  assert not [o for o, v in fake.objects.items() if v["kind"] == "commandbuffer" and v["refs"] > 0]   # all released

def test_copyin_waits_for_kernels_in_flight(fake, dev):
  raw = dev.allocator.raw
  out, inp = raw.alloc(64), raw.alloc(64)
  raw.copyin(inp, memoryview(np.ones(16, np.float32)).cast("B"))
  prg = dev.make_program(spec(), dev.compiler.compile_cached(SRC))
  prg(out, inp, global_size=(2, 1, 1), local_size=(8, 1, 1), vals=(2,))
  raw.copyin(inp, memoryview(np.full(16, 5, np.float32)).cast("B"))   # after the kernel read the ones
  got = np.empty(16, np.float32)
  raw.copyout(memoryview(got).cast("B"), out)
  assert np.array_equal(got, np.full(16, 2, np.float32))

def test_compile_errors_carry_metals_message_and_the_numbered_source(dev):
  bad = "#include <metal_stdlib>\nusing namespace metal;\n#error\nkernel void scale() {}\n"
  want = r"(?s)Metal could not compile kernel scale: program_source:3:1: error: this kernel does not compile.*    3 \| #error"
  with pytest.raises(MetalError, match=want):
    dev.make_program(spec(bad), bad.encode())
  with pytest.raises(MetalError, match="has no kernel named other"): dev.make_program(spec(SRC, "other"), SRC.encode())

def test_too_many_threads_and_gpu_failures_are_clear_errors(fake, dev):
  raw = dev.allocator.raw
  out, inp = raw.alloc(64), raw.alloc(64)
  prg = dev.make_program(spec(), SRC.encode())
  with pytest.raises(MetalError, match=r"threadgroup of 512 threads is more than this pipeline's maxTotalThreadsPerThreadgroup \(256\)"):
    prg(out, inp, global_size=(1, 1, 1), local_size=(16, 32, 1), vals=(1,))
  fake.fail_next_launch = True
  prg(out, inp, global_size=(2, 1, 1), local_size=(8, 1, 1), vals=(1,))
  with pytest.raises(MetalError, match=r"kernel scale failed on the GPU: Internal Error"): dev.synchronize()
  assert not dev.in_flight

def test_programs_release_what_they_made(fake, dev):
  prg = dev.make_program(spec(), SRC.encode())
  del prg
  assert not fake.live("library") and not fake.live("function") and not fake.live("pipeline")
  assert not fake.live("MTLCompileOptions")
