"""Shared helpers for the cuda plugin's tests: NVRTC (skip where the wheel is missing), kernels rendered by the CUDA C
renderer through the real codegen pipeline (from graphs on the PYTHON device: nothing runs), the emulator."""
from __future__ import annotations
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen.kernel import Opt, OptOps

ARCHS = ("sm_75", "sm_80", "sm_90")

def nvrtc_or_skip():
  from tinyplug_cuda import nvrtc
  try: nvrtc.library_path()
  except nvrtc.NVRTCError as e: pytest.skip(str(e))
  return nvrtc

@pytest.fixture
def nvrtc():
  return nvrtc_or_skip()

def render_kernels(tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered for CUDA (nothing runs)."""
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  from tinyplug_cuda.renderer import CUDARenderer
  items, _ = create_schedule([tensor.uop])
  renderer = renderer or CUDARenderer()
  return [get_program(item.ast, renderer, opts=opts) for item in items if item.ast.op.name == "SINK"]

@pytest.fixture
def mock_cuda():
  """MOCK+CUDA as the default device for the test (skipped where the emulator is missing or unavailable)."""
  from tinyplug.device import Device
  dev = emulator_or_skip()
  with Device.use(dev): yield dev

def emulator_or_skip() -> str:
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  if pm.resolve_device("MOCK+CUDA") is None: pytest.skip("the emulator plugin is not installed")
  ok, reason = pm.device_available("MOCK+CUDA")
  if not ok: pytest.skip(f"MOCK+CUDA unavailable: {reason}")
  return "MOCK+CUDA"

# The kernels the tests render: Tensor programs on PYTHON (built, never run there) covering every dtype, casts and
# bitcasts, integer division, math calls, reductions through shared memory and barriers (GROUP actions), vector loads
# and stores (UPCAST, aligned or not). Each entry: (id, build() -> Tensor, opts or None).
DT = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
      dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]

def t(*shape, dtype=dtypes.float32) -> Tensor: return Tensor.empty(*shape, dtype=dtype, device="PYTHON")

def _casts():
  """One kernel per source dtype, casting it to every other dtype (and each result to float)."""
  def build(a):
    x = t(8, dtype=a)
    return sum((x.cast(b).cast(dtypes.float32) for b in DT if b != a), start=t(8))
  return [(f"casts_from_{a.name}", lambda a=a: build(a), None) for a in DT]

KERNELS = [
  ("add_float", lambda: t(64) + t(64), None),
  ("mul_half", lambda: t(64, dtype=dtypes.half) * t(64, dtype=dtypes.half) + 1, None),
  ("mul_bf16", lambda: t(64, dtype=dtypes.bfloat16) * t(64, dtype=dtypes.bfloat16) - 2, None),
  ("math_float", lambda: (t(32).exp() + t(32).log() + t(32).sin() + t(32).sqrt() + t(32).trunc()), None),
  ("math_half", lambda: (t(32, dtype=dtypes.half).exp() * t(32, dtype=dtypes.half).sin()).sqrt(), None),
  ("math_bf16", lambda: (t(32, dtype=dtypes.bfloat16).exp2() + t(32, dtype=dtypes.bfloat16).log2()), None),
  ("math_double", lambda: (t(32, dtype=dtypes.float64).exp() + t(32, dtype=dtypes.float64).sin()), None),
  ("pow_mod_float", lambda: t(16).pow(t(16)) + (t(16) % 3.0), None),
  ("max_nan", lambda: t(16).maximum(t(16)) + t(16, dtype=dtypes.half).maximum(t(16, dtype=dtypes.half)).float(), None),
  ("where", lambda: (t(16) < t(16)).where(t(16), 0.5), None),
  ("int_divmod", lambda: t(16, dtype=dtypes.int32) // t(16, dtype=dtypes.int32) + t(16, dtype=dtypes.int32) % t(16, dtype=dtypes.int32), None),
  ("uint_divmod", lambda: t(16, dtype=dtypes.uint64) // t(16, dtype=dtypes.uint64) + t(16, dtype=dtypes.uint8) % t(16, dtype=dtypes.uint8), None),
  ("small_int_max", lambda: t(16, dtype=dtypes.int8).maximum(t(16, dtype=dtypes.int8)) + t(16, dtype=dtypes.int16).maximum(3), None),
  ("shifts", lambda: (t(16, dtype=dtypes.int32) << 3) ^ (t(16, dtype=dtypes.uint32) >> 2).cast(dtypes.int32), None),
  ("bitcast_float_int", lambda: t(16).bitcast(dtypes.int32) + 1, None),
  ("bitcast_half_short", lambda: t(16, dtype=dtypes.half).bitcast(dtypes.int16) + t(16, dtype=dtypes.uint16).bitcast(dtypes.half).cast(dtypes.int16), None),
  ("bitcast_bf16", lambda: t(16, dtype=dtypes.bfloat16).bitcast(dtypes.uint16).bitcast(dtypes.bfloat16) * 2, None),
  ("bitcast_double", lambda: t(16, dtype=dtypes.float64).bitcast(dtypes.int64) + t(16, dtype=dtypes.uint64).bitcast(dtypes.float64).cast(dtypes.int64), None),
  ("inf_nan_consts", lambda: t(16).maximum(float("inf")) + t(16).minimum(float("-inf")) + float("nan"), None),
  ("half_consts", lambda: t(16, dtype=dtypes.half) * float("inf") + t(16, dtype=dtypes.bfloat16).cast(dtypes.half), None),
  ("row_sum_grouptop", lambda: t(8, 256).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)]),
  ("row_max_group_local", lambda: t(16, 128).max(axis=1), [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]),
  ("half_sum_group", lambda: t(4, 512, dtype=dtypes.half).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 128)]),
  ("matmul_upcast", lambda: t(64, 64) @ t(64, 64), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)]),
  ("matmul_half_heuristic", lambda: t(32, 48, dtype=dtypes.half) @ t(48, 40, dtype=dtypes.half), None),
  ("upcast_unaligned", lambda: t(10, 6)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)]),
  ("upcast_int8", lambda: t(64, dtype=dtypes.int8) + t(64, dtype=dtypes.int8), [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_bf16", lambda: t(64, dtype=dtypes.bfloat16) + 1, [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_half2", lambda: t(64, dtype=dtypes.half) * 3, [Opt(OptOps.UPCAST, 0, 2)]),
  ("softmax", lambda: t(8, 64).softmax(axis=1), None),
  ("conv2d", lambda: t(1, 3, 12, 12).conv2d(t(4, 3, 3, 3)), None),
  ("argmax", lambda: t(8, 16).argmax(axis=1), None),
  ("cumsum", lambda: t(33).cumsum(), None),
  *_casts(),
]


@pytest.fixture
def render():
  """`render(tensor, renderer=None, opts=None)` -> ProgramSpecs of the kernels computing `tensor`."""
  return render_kernels

@pytest.fixture
def tensor():
  """`tensor(*shape, dtype=float32)`: an empty Tensor on PYTHON to build kernels from."""
  return t

@pytest.fixture
def kernel_table():
  return KERNELS
