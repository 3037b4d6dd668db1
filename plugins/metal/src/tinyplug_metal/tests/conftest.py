"""Shared helpers for the metal plugin's tests: kernels rendered by the Metal renderer through the real codegen
pipeline (from graphs on the PYTHON device: nothing runs there), the MSL check, the emulator and, on a Mac, Metal."""
from __future__ import annotations
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen.kernel import Opt, OptOps

def pytest_configure(config) -> None:
  # outside the repository (`pytest --pyargs tinyplug_metal.tests`) its pyproject's marker list is not read
  config.addinivalue_line("markers", "slow: takes seconds (runs the op suite in a subprocess)")

def render_kernels(tensor: Tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered as MSL (nothing runs)."""
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  from tinyplug_metal.renderer import MetalRenderer
  items, _ = create_schedule([tensor.uop])
  renderer = renderer or MetalRenderer()
  return [get_program(item.ast, renderer, opts=opts) for item in items if item.ast.op.name == "SINK"]

def t(*shape, dtype=dtypes.float32) -> Tensor: return Tensor.empty(*shape, dtype=dtype, device="PYTHON")

# every dtype Metal has (no float64)
DT = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
      dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32]

def _casts():
  def build(a):
    x = t(8, dtype=a)
    return sum((x.cast(b).cast(dtypes.float32) for b in DT if b != a), start=t(8))
  return [(f"casts_from_{a.name}", lambda a=a: build(a), None) for a in DT]

# The kernels the tests render and check: (id, build() -> Tensor, opts or None). They cover every dtype, casts and
# bitcasts, integer division, math calls, NaN-propagating max, reductions through threadgroup memory with barriers
# (GROUP actions), aligned and unaligned vector loads and stores (UPCAST), and whole models' kernels.
KERNELS = [
  ("add_float", lambda: t(64) + t(64), None),
  ("mul_half", lambda: t(64, dtype=dtypes.half) * t(64, dtype=dtypes.half) + 1, None),
  ("mul_bf16", lambda: t(64, dtype=dtypes.bfloat16) * t(64, dtype=dtypes.bfloat16) - 2, None),
  ("math_float", lambda: t(32).exp() + t(32).log() + t(32).sin() + t(32).sqrt() + t(32).trunc(), None),
  ("math_half", lambda: (t(32, dtype=dtypes.half).exp() * t(32, dtype=dtypes.half).sin()).sqrt(), None),
  ("math_bf16", lambda: t(32, dtype=dtypes.bfloat16).exp2() + t(32, dtype=dtypes.bfloat16).log2(), None),
  ("pow_mod_float", lambda: t(16).pow(t(16)) + (t(16) % 3.0), None),
  ("max_nan", lambda: t(16).maximum(t(16)) + t(16, dtype=dtypes.half).maximum(t(16, dtype=dtypes.half)).float(), None),
  ("where_bool", lambda: ((t(16) < t(16)) & (t(16, dtype=dtypes.bool))).where(t(16), 0.5), None),
  ("cmp_bf16", lambda: (t(16, dtype=dtypes.bfloat16) < t(16, dtype=dtypes.bfloat16)), None),
  ("int_divmod", lambda: t(16, dtype=dtypes.int32) // t(16, dtype=dtypes.int32) + t(16, dtype=dtypes.int32) % t(16, dtype=dtypes.int32), None),
  ("long_divmod", lambda: t(16, dtype=dtypes.uint64) // t(16, dtype=dtypes.uint64)
                          + (t(16, dtype=dtypes.int64) % t(16, dtype=dtypes.int64)).cast(dtypes.uint64), None),
  ("small_int_max", lambda: t(16, dtype=dtypes.int8).maximum(t(16, dtype=dtypes.int8)) + t(16, dtype=dtypes.int16).maximum(3), None),
  ("shifts", lambda: (t(16, dtype=dtypes.int32) << 3) ^ (t(16, dtype=dtypes.uint32) >> 2).cast(dtypes.int32), None),
  ("bitcasts", lambda: t(16).bitcast(dtypes.int32) + t(16, dtype=dtypes.half).bitcast(dtypes.int16).cast(dtypes.int32), None),
  ("bitcast_bf16", lambda: t(16, dtype=dtypes.bfloat16).bitcast(dtypes.uint16).bitcast(dtypes.bfloat16) * 2, None),
  ("inf_nan_consts", lambda: t(16).maximum(float("inf")) + t(16).minimum(float("-inf")) + float("nan"), None),
  ("half_consts", lambda: t(16, dtype=dtypes.half) * float("inf") + t(16, dtype=dtypes.bfloat16).cast(dtypes.half), None),
  ("row_sum_grouptop", lambda: t(8, 256).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)]),
  ("row_max_group_local", lambda: t(16, 128).max(axis=1), [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]),
  ("half_sum_group", lambda: t(4, 512, dtype=dtypes.half).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 128)]),
  ("bool_any_group", lambda: t(4, 256, dtype=dtypes.bool).any(axis=1), [Opt(OptOps.GROUPTOP, 0, 32)]),
  ("matmul_upcast", lambda: t(64, 64) @ t(64, 64), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)]),
  ("matmul_half_heuristic", lambda: t(32, 48, dtype=dtypes.half) @ t(48, 40, dtype=dtypes.half), None),
  ("upcast_unaligned", lambda: t(10, 6)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)]),
  ("upcast_char", lambda: t(64, dtype=dtypes.int8) + t(64, dtype=dtypes.int8), [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_bf16", lambda: t(64, dtype=dtypes.bfloat16) + 1, [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_half2", lambda: t(64, dtype=dtypes.half) * 3, [Opt(OptOps.UPCAST, 0, 2)]),
  ("upcast_long2", lambda: t(64, dtype=dtypes.int64) * 3, [Opt(OptOps.UPCAST, 0, 2)]),
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

@pytest.fixture
def msl_check():
  """`msl_check(src, name)`: the clang C++-for-OpenCL check with the metal_stdlib stand-in (skipped without clang)."""
  from tinyplug_metal.check import check_msl, find_clang
  path, why = find_clang()
  if path is None: pytest.skip(why)
  return check_msl

def device_or_skip(name: str) -> str:
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  if pm.resolve_device(name) is None: pytest.skip(f"no plugin provides {name}")
  ok, reason = pm.device_available(name)
  if not ok: pytest.skip(f"{name} unavailable: {reason}")
  return name

@pytest.fixture
def mock_metal():
  """MOCK+METAL as the default device for the test (skipped without the emulator or clang)."""
  from tinyplug.device import Device
  dev = device_or_skip("MOCK+METAL")
  with Device.use(dev): yield dev

@pytest.fixture
def metal():
  """METAL (a Mac's GPU) as the default device for the test; skipped elsewhere."""
  from tinyplug.device import Device
  dev = device_or_skip("METAL")
  with Device.use(dev): yield dev
