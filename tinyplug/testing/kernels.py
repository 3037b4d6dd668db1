"""A zoo of kernels for a renderer's own tests: Tensor programs on the PYTHON device (built, never run there) that cover
every dtype, casts and bitcasts, integer division, math calls, NaN-propagating max, reductions through local memory
and barriers (GROUP actions), aligned and unaligned vector loads and stores (UPCAST), and a few models' kernels.

A GPU plugin renders them all and hands each to its real compiler (NVRTC, ld.lld, clang's MSL check, ...):

    from tinyplug.testing.kernels import kernel_zoo, render_kernels
    for name, build, opts in kernel_zoo(MyRenderer().supported_dtypes()):
      for spec in render_kernels(build(), MyRenderer(), opts): compile(spec.src)
"""
from __future__ import annotations
from typing import Any, Callable, Iterable
from tinyplug import Tensor, dtypes
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.uop.dtype import DType

DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
          dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]

# (id, build() -> Tensor, optimisation actions or None for the heuristic's)
Kernel = tuple[str, Callable[[], Tensor], "list[Opt] | None"]

def empty(*shape: int, dtype: DType = dtypes.float32) -> Tensor:
  """An empty tensor on PYTHON to build kernels from (nothing is computed)."""
  return Tensor.empty(*shape, dtype=dtype, device="PYTHON")

t = empty

def render_kernels(tensor: Tensor, renderer: Any, opts: list | None = None) -> list:
  """The ProgramSpecs of the kernels computing `tensor`, lowered and rendered for `renderer` (nothing runs)."""
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  items, _ = create_schedule([tensor.uop])
  return [get_program(item.ast, renderer, opts=opts) for item in items if item.ast.op.name == "SINK"]

def run_kernel(out: Tensor, device: str, opts: list | None = None, **settings: Any) -> tuple[Any, str]:
  """Compile the one kernel computing `out` (its inputs realized already) with exactly `opts`, run it once on
  `device` under `Context(**settings)`; (the result as a numpy array, the kernel's source)."""
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  (item,), _ = create_schedule([out.uop])
  dev = Device[device]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  with Context(**settings):
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy().reshape(out.shape), spec.src

def _casts(dts: list[DType]) -> list[Kernel]:
  """One kernel per source dtype, casting it to every other dtype (and each result to float)."""
  def build(a: DType) -> Tensor:
    x = t(8, dtype=a)
    return sum((x.cast(b).cast(dtypes.float32) for b in dts if b != a), start=t(8))
  return [(f"casts_from_{a.name}", lambda a=a: build(a), None) for a in dts]

h, bf, i8, i16, i32, i64 = dtypes.half, dtypes.bfloat16, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64
u8, u16, u32, u64, f64 = dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float64

KERNELS: list[Kernel] = [
  ("add_float", lambda: t(64) + t(64), None),
  ("mul_half", lambda: t(64, dtype=h) * t(64, dtype=h) + 1, None),
  ("mul_bf16", lambda: t(64, dtype=bf) * t(64, dtype=bf) - 2, None),
  ("math_float", lambda: t(32).exp() + t(32).log() + t(32).sin() + t(32).sqrt() + t(32).trunc(), None),
  ("math_half", lambda: (t(32, dtype=h).exp() * t(32, dtype=h).sin()).sqrt(), None),
  ("math_bf16", lambda: t(32, dtype=bf).exp2() + t(32, dtype=bf).log2(), None),
  ("math_double", lambda: (t(32, dtype=f64).exp() + t(32, dtype=f64).sin()).sqrt(), None),
  ("pow_mod_float", lambda: t(16).pow(t(16)) + (t(16) % 3.0), None),
  ("mod_double", lambda: (t(16, dtype=f64) % 2.5).float(), None),
  ("max_nan", lambda: t(16).maximum(t(16)) + t(16, dtype=h).maximum(t(16, dtype=h)).float(), None),
  ("where", lambda: (t(16) < t(16)).where(t(16), 0.5), None),
  ("where_bool", lambda: ((t(16) < t(16)) & t(16, dtype=dtypes.bool)).where(t(16), 0.5), None),
  ("cmp_bf16", lambda: t(16, dtype=bf) < t(16, dtype=bf), None),
  ("int_divmod", lambda: t(16, dtype=i32) // t(16, dtype=i32) + t(16, dtype=i32) % t(16, dtype=i32), None),
  ("uint_divmod", lambda: t(16, dtype=u64) // t(16, dtype=u64) + t(16, dtype=u8) % t(16, dtype=u8), None),
  ("long_divmod", lambda: t(16, dtype=u64) // t(16, dtype=u64) + (t(16, dtype=i64) % t(16, dtype=i64)).cast(u64), None),
  ("small_int_max", lambda: t(16, dtype=i8).maximum(t(16, dtype=i8)) + t(16, dtype=i16).maximum(3), None),
  ("shifts", lambda: (t(16, dtype=i32) << 3) ^ (t(16, dtype=u32) >> 2).cast(i32), None),
  ("bitcast_float_int", lambda: t(16).bitcast(i32) + 1, None),
  ("bitcast_half_short", lambda: t(16, dtype=h).bitcast(i16) + t(16, dtype=u16).bitcast(h).cast(i16), None),
  ("bitcast_bf16", lambda: t(16, dtype=bf).bitcast(u16).bitcast(bf) * 2, None),
  ("bitcast_double", lambda: t(16, dtype=f64).bitcast(i64) + t(16, dtype=u64).bitcast(f64).cast(i64), None),
  ("inf_nan_consts", lambda: t(16).maximum(float("inf")) + t(16).minimum(float("-inf")) + float("nan"), None),
  ("half_consts", lambda: t(16, dtype=h) * float("inf") + t(16, dtype=bf).cast(h), None),
  ("row_sum_grouptop", lambda: t(8, 256).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)]),
  ("row_max_group_local", lambda: t(16, 128).max(axis=1), [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]),
  ("half_sum_group", lambda: t(4, 512, dtype=h).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 128)]),
  ("bool_any_group", lambda: t(4, 256, dtype=dtypes.bool).any(axis=1), [Opt(OptOps.GROUPTOP, 0, 32)]),
  ("matmul_upcast", lambda: t(64, 64) @ t(64, 64), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)]),
  ("matmul_half_heuristic", lambda: t(32, 48, dtype=h) @ t(48, 40, dtype=h), None),
  ("upcast_unaligned", lambda: t(10, 6)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)]),
  ("upcast_int8", lambda: t(64, dtype=i8) + t(64, dtype=i8), [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_bf16", lambda: t(64, dtype=bf) + 1, [Opt(OptOps.UPCAST, 0, 4)]),
  ("upcast_half2", lambda: t(64, dtype=h) * 3, [Opt(OptOps.UPCAST, 0, 2)]),
  ("upcast_long2", lambda: t(64, dtype=i64) * 3, [Opt(OptOps.UPCAST, 0, 2)]),
  ("softmax", lambda: t(8, 64).softmax(axis=1), None),
  ("conv2d", lambda: t(1, 3, 12, 12).conv2d(t(4, 3, 3, 3)), None),
  ("argmax", lambda: t(8, 16).argmax(axis=1), None),
  ("cumsum", lambda: t(33).cumsum(), None),
]

def _dtypes_of(x: Tensor) -> set[DType]:
  return {u.dtype.scalar() for u in x.uop.toposort() if u.dtype != dtypes.void}

def kernel_zoo(supported: Iterable[DType] | None = None) -> list[Kernel]:
  """Every kernel of the zoo whose graph uses only `supported` dtypes (all of them when None), plus one cast kernel
  per supported dtype."""
  if supported is None: return KERNELS + _casts(DTYPES)
  ok = set(supported) | {dtypes.void, dtypes.index}
  keep = [k for k in KERNELS if _dtypes_of(k[1]()) <= ok]
  return keep + _casts([d for d in DTYPES if d in ok])

__all__ = ["DTYPES", "KERNELS", "Kernel", "empty", "kernel_zoo", "render_kernels"]
