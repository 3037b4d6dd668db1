"""Shared helpers for the amd plugin's tests: kernels rendered by the AMDGPU renderer through the real codegen pipeline
(from graphs on the PYTHON device: nothing runs), the toolchain (skip with the reason where ld.lld >= 19 or
llvm-readelf is missing), and MOCK+AMD for running the renderer's exact IR on the emulator."""
from __future__ import annotations
import shutil
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen.kernel import Opt, OptOps

def linker_or_skip() -> str:
  from tinyplug_amd.compiler import LinkerNotFound, find_linker
  try: return find_linker()
  except LinkerNotFound as e: pytest.skip(str(e))

@pytest.fixture
def lld() -> str:
  return linker_or_skip()

@pytest.fixture
def readelf() -> str:
  found = next((p for p in (shutil.which(f"llvm-readelf-{v}") for v in range(30, 18, -1)) if p), None) or \
    shutil.which("llvm-readelf")
  if found is None: pytest.skip("llvm-readelf not found (Debian/Ubuntu: apt install llvm-19)")
  return found

def render_kernels(tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered for AMDGPU (nothing runs)."""
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  from tinyplug_amd.renderer import AMDGPURenderer
  items, _ = create_schedule([tensor.uop])
  renderer = renderer or AMDGPURenderer()
  return [get_program(item.ast, renderer, opts=opts) for item in items if item.ast.op.name == "SINK"]

@pytest.fixture
def render():
  """`render(tensor, renderer=None, opts=None)` -> ProgramSpecs of the kernels computing `tensor`."""
  return render_kernels

def emulator_or_skip() -> str:
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  if pm.resolve_device("MOCK+AMD") is None: pytest.skip("the emulator plugin is not installed")
  ok, reason = pm.device_available("MOCK+AMD")
  if not ok: pytest.skip(f"MOCK+AMD unavailable: {reason}")
  return "MOCK+AMD"

@pytest.fixture
def mock_amd():
  """MOCK+AMD as the default device for the test (skipped where the emulator or clang is missing)."""
  from tinyplug.device import Device
  dev = emulator_or_skip()
  with Device.use(dev): yield dev

# The kernels the tests render: Tensor programs on PYTHON (built, never run there) covering every dtype, casts and
# bitcasts, integer division, math, reductions through LDS with barriers (GROUP actions), private accumulators,
# vector loads and stores (UPCAST). Each entry: (id, build() -> Tensor, opts or None).
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
  ("math_double", lambda: (t(32, dtype=dtypes.float64).exp() + t(32, dtype=dtypes.float64).sin()).sqrt(), None),
  ("pow_mod_float", lambda: t(16).pow(t(16)) + (t(16) % 3.0) + (t(16, dtype=dtypes.float64) % 2.5).float(), None),
  ("max_nan", lambda: t(16).maximum(t(16)) + t(16, dtype=dtypes.half).maximum(t(16, dtype=dtypes.half)).float(), None),
  ("where", lambda: (t(16) < t(16)).where(t(16), 0.5), None),
  ("int_divmod", lambda: t(16, dtype=dtypes.int32) // t(16, dtype=dtypes.int32) + t(16, dtype=dtypes.int32) % t(16, dtype=dtypes.int32), None),
  ("int64_divmod", lambda: t(16, dtype=dtypes.uint64) // t(16, dtype=dtypes.uint64) + t(16, dtype=dtypes.int64) % t(16, dtype=dtypes.int64).cast(dtypes.uint64), None),
  ("shifts", lambda: (t(16, dtype=dtypes.int32) << 3) ^ (t(16, dtype=dtypes.uint32) >> 2).cast(dtypes.int32), None),
  ("bitcasts", lambda: t(16).bitcast(dtypes.int32) + t(16, dtype=dtypes.half).bitcast(dtypes.int16).cast(dtypes.int32), None),
  ("bitcast_bf16_double", lambda: t(16, dtype=dtypes.bfloat16).bitcast(dtypes.uint16).bitcast(dtypes.bfloat16).cast(dtypes.float64) + t(16, dtype=dtypes.uint64).bitcast(dtypes.float64), None),
  ("inf_nan_consts", lambda: t(16).maximum(float("inf")) + t(16).minimum(float("-inf")) + float("nan"), None),
  ("row_sum_grouptop", lambda: t(8, 256).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)]),
  ("row_max_group_local", lambda: t(16, 128).max(axis=1), [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]),
  ("half_sum_group", lambda: t(4, 512, dtype=dtypes.half).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 128)]),
  ("matmul_upcast", lambda: t(64, 64) @ t(64, 64), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)]),
  ("matmul_half_heuristic", lambda: t(32, 48, dtype=dtypes.half) @ t(48, 40, dtype=dtypes.half), None),
  ("upcast_unaligned", lambda: t(10, 6)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)]),
  ("upcast_int8", lambda: t(64, dtype=dtypes.int8) + t(64, dtype=dtypes.int8), [Opt(OptOps.UPCAST, 0, 4)]),
  ("softmax", lambda: t(8, 64).softmax(axis=1), None),
  ("conv2d", lambda: t(1, 3, 12, 12).conv2d(t(4, 3, 3, 3)), None),
  ("argmax", lambda: t(8, 16).argmax(axis=1), None),
  ("cumsum", lambda: t(33).cumsum(), None),
  *_casts(),
]

@pytest.fixture
def kernel_table():
  return KERNELS
