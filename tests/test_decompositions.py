"""Decompositions of ops a renderer lacks (tinyplug/codegen/decompositions.py), run on the PYTHON interpreter with a
renderer that declares no transcendentals, against numpy, in ulps, over the whole float range and its special values.

The same device runs the shared Tensor op suite: importing this module as a pytest plugin registers it as
`PYTHON:NOTRANS`:

    PYTHONPATH=tests TINYPLUG_TEST_DEVICES=PYTHON:NOTRANS python -m pytest -p test_decompositions tests/test_ops.py
"""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.codegen import get_program
from tinyplug.codegen.decompositions import decompose_for
from tinyplug.device import Device
from tinyplug.runtime.python import PythonDevice, PythonProgram, PythonRenderer
from tinyplug.uop.dtype import DType, dtypes, to_np_dtype
from tinyplug.uop.ops import GroupOp, Ops, UOp

TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW})

def renderer_without(missing: frozenset[Ops]) -> PythonRenderer:
  """A PYTHON renderer that declares every ALU op native except `missing`."""
  return type("PartialRenderer", (PythonRenderer,), {"native_ops": frozenset(GroupOp.ALU) - missing})()

class NoTransRenderer(PythonRenderer):
  native_ops = frozenset(GroupOp.ALU) - TRANSCENDENTAL

class NoTransDevice(PythonDevice):
  def __init__(self, name: str):
    super().__init__(name)
    self.renderer = NoTransRenderer()

def register_notrans_device(name: str = "PYTHON:NOTRANS") -> str:
  Device._opened[name] = NoTransDevice(name)
  return name

def pytest_configure(config):
  """Used as a plugin (`-p test_decompositions`): the device exists before the op suite picks its devices."""
  register_notrans_device()

# ---------------- running one elementwise kernel ----------------

def run_kernel(build, inputs: list[np.ndarray], in_dtype: DType, out_dtype: DType, renderer) -> tuple[np.ndarray, tuple]:
  """out[i] = build(*loads)[i]: lowered for `renderer` and run by the interpreter. Returns the output and the uops."""
  n = len(inputs[0])
  rng = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n),), (0, "loop"))
  def load(i: int) -> UOp:
    buf = UOp(Ops.DEFINE_GLOBAL, in_dtype.ptr(n), arg=i + 1)
    return UOp(Ops.LOAD, in_dtype, (UOp(Ops.INDEX, in_dtype.ptr(n), (buf, rng)),))
  out_buf = UOp(Ops.DEFINE_GLOBAL, out_dtype.ptr(n), arg=0)
  value = build(*[load(i) for i in range(len(inputs))])
  ast = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out_dtype.ptr(n), (out_buf, rng)), value)).sink()
  spec = get_program(ast, renderer)
  out = np.zeros(n, to_np_dtype(out_dtype))
  args = [np.ascontiguousarray(x, dtype=to_np_dtype(in_dtype)) for x in inputs]
  PythonProgram(spec.name, spec.uops)(out, *args, global_size=spec.global_size, local_size=spec.local_size)
  return out, spec.uops

def run_op(op: Ops, dtype: DType, *inputs: np.ndarray, renderer=None) -> np.ndarray:
  renderer = renderer or NoTransRenderer()
  out_dtype = dtypes.bool if op in GroupOp.Comparison else dtype
  out, uops = run_kernel(lambda *s: UOp(op, out_dtype, s), list(inputs), dtype, out_dtype, renderer)
  assert not {u.op for u in uops} - renderer.native_ops & GroupOp.ALU, "the program uses an op the renderer lacks"
  return out

def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
  """|got - ref| in units of the spacing of floats at ref (0 where both are the same inf or both nan)."""
  with np.errstate(all="ignore"):
    spacing = np.spacing(np.abs(ref)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64)) / spacing
  same = (got == ref) | (np.isnan(got) & np.isnan(ref))
  return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))

def assert_ulp(got: np.ndarray, ref: np.ndarray, x: np.ndarray, max_ulp: float, what: str) -> None:
  np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{what}: nan positions differ")
  err = ulp_error(got, ref)
  worst = int(np.argmax(err))
  assert err[worst] <= max_ulp, f"{what}: {err[worst]:.2f} ulp at x={x[worst]!r}: got {got[worst]!r}, numpy {ref[worst]!r}"

# ---------------- inputs ----------------

NP_FLOAT = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}

def special_values(npdt) -> np.ndarray:
  fi = np.finfo(npdt)
  return np.array([0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny, fi.tiny / 3, fi.max, -fi.max,
                   np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 3.0, -3.0, 1e-30, np.pi, -np.pi / 2], dtype=npdt)

def every_positive_float(npdt, n: int, rng) -> np.ndarray:
  """Random bit patterns of positive finite floats: every binade, denormals included, equally often."""
  ints = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}[npdt]
  top = int(np.array(np.inf, dtype=npdt).view(ints))
  return rng.integers(0, top, size=n, dtype=ints).view(npdt)

def exp2_inputs(npdt, rng) -> np.ndarray:
  fi = np.finfo(npdt)
  lo, hi = fi.minexp - fi.nmant - 2, fi.maxexp + 1       # from well below the denormals to past overflow
  edges = [fi.maxexp, fi.maxexp - 1e-3, np.nextafter(npdt(fi.maxexp), npdt(0)), fi.minexp, fi.minexp - fi.nmant,
           fi.minexp - fi.nmant - 1, fi.minexp - 0.5, -0.5, 0.5, 1e-8]
  return np.concatenate([special_values(npdt), np.array(edges, npdt), rng.uniform(-1, 1, 500).astype(npdt),
                         rng.uniform(lo, hi, 2000).astype(npdt)])

def log2_inputs(npdt, rng) -> np.ndarray:
  return np.concatenate([special_values(npdt), -every_positive_float(npdt, 50, rng), every_positive_float(npdt, 2000, rng),
                         rng.uniform(0.5, 2, 500).astype(npdt), np.nextafter(npdt(1), npdt([0, 2]))])

def sin_inputs(npdt, rng) -> np.ndarray:
  big = 1e4 if npdt != np.float16 else 1e3
  near_multiples = (np.arange(-6000, 6000, 7) * (np.pi / 2)).astype(npdt)
  return np.concatenate([special_values(npdt), rng.uniform(-10, 10, 1000).astype(npdt),
                         rng.uniform(-big, big, 1000).astype(npdt), rng.uniform(-1e-3, 1e-3, 200).astype(npdt),
                         near_multiples if npdt != np.float16 else np.zeros(0, npdt)])

def sqrt_inputs(npdt, rng) -> np.ndarray:
  return np.concatenate([special_values(npdt), -every_positive_float(npdt, 50, rng), every_positive_float(npdt, 2000, rng),
                         rng.uniform(0, 4, 500).astype(npdt)])

# ---------------- exp2, log2, sin, sqrt against numpy ----------------

UNARY = {Ops.EXP2: (np.exp2, exp2_inputs), Ops.LOG2: (np.log2, log2_inputs), Ops.SIN: (np.sin, sin_inputs),
         Ops.SQRT: (np.sqrt, sqrt_inputs)}
# numpy's own float32 exp2 and sin are up to ~2 ulp off; float16 rounds a float32 result once more
MAX_ULP = {dtypes.float32: 3.0, dtypes.float64: 2.0, dtypes.float16: 1.0}

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_unary_matches_numpy(op: Ops, dtype: DType):
  npfn, make_inputs = UNARY[op]
  npdt = NP_FLOAT[dtype]
  x = make_inputs(npdt, np.random.default_rng(0))
  got = run_op(op, dtype, x)
  with np.errstate(all="ignore"): ref = npfn(x)
  if op is Ops.SIN:   # float64: accurate over |x| < 2**27*pi/2, bounded past it (float32 reduces by Payne-Hanek there)
    keep = ~(np.abs(x.astype(np.float64)) > {dtypes.float64: 2.1e8}.get(dtype, np.inf))
    x, got, ref = x[keep], got[keep], np.where(np.isinf(x[keep]), np.nan, ref[keep])
  assert_ulp(got, ref, x, MAX_ULP[dtype], f"{op.name} {dtype.name}")
  rtol = {dtypes.float32: 1e-6, dtypes.float64: 1e-14, dtypes.float16: 1e-3}[dtype]
  finite = np.isfinite(ref) & (np.abs(ref) >= np.finfo(npdt).tiny)
  np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=0)

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_exp2_overflow_underflow_and_specials(dtype: DType):
  npdt = NP_FLOAT[dtype]
  fi = np.finfo(npdt)
  x = np.array([fi.maxexp, fi.maxexp + 5, 1e30, np.inf, -np.inf, -1e30, fi.minexp - fi.nmant - 2, np.nan,
                fi.minexp - fi.nmant, fi.minexp - 1], npdt)
  got = run_op(Ops.EXP2, dtype, x)
  expected = np.array([np.inf, np.inf, np.inf, np.inf, 0, 0, 0, np.nan, fi.smallest_subnormal, fi.tiny / 2], npdt)
  np.testing.assert_array_equal(got, expected)

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_exp2_of_inputs_whose_result_is_zero_has_no_underflowing_multiply(dtype: DType, monkeypatch):
  # a masked softmax takes exp of -inf on half its lanes: a multiply of two nonzero numbers into the denormals (or
  # 0) costs a microcode assist on some cores (exp of -inf was ~2.7x slower than of 0 on Zen 3)
  from tinyplug.runtime import python as interp
  npdt, underflows = NP_FLOAT[dtype], []
  plain = interp._alu
  def watched(op, out_dtype, src, src_dtypes):
    out = plain(op, out_dtype, src, src_dtypes)
    if op in (Ops.MUL, Ops.MULACC) and dtypes.is_float(out_dtype):
      a, b, prod = (np.asarray(v, dtype=npdt) for v in (src[0], src[1], np.multiply(src[0], src[1])))
      hit = (a != 0) & (b != 0) & np.isfinite(a) & np.isfinite(b) & (np.abs(prod) < np.finfo(npdt).tiny)
      if hit.any(): underflows.append((a[hit], b[hit]))
    return out
  monkeypatch.setattr(interp, "_alu", watched)
  fi = np.finfo(npdt)
  x = np.array([-np.inf, -1e30, -1000.0, fi.minexp - fi.nmant - 3, 0.0, 1.0], npdt)
  np.testing.assert_array_equal(run_op(Ops.EXP2, dtype, x), np.exp2(x))
  assert not underflows, underflows

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_exp2_within_one_ulp_of_the_exact_result(dtype: DType):
  """Against exp2 in long double (numpy's own float32 exp2 is ~2 ulp off): the whole range, dense near 0, both
  overflow and underflow edges, every denormal binade, and every integer (2**q exact). The interpreter rounds every
  multiply and add of the polynomial (no fma): 1.13 ulp at worst for float32, 1.05 for float64 (the Taylor degree-7
  polynomial before was 1.04); with fma (the CPU) it is within 1 ulp (plugins/cpu_llvm/tests/test_vector_libm.py)."""
  npdt = NP_FLOAT[dtype]
  fi = np.finfo(npdt)
  rng = np.random.default_rng(3)
  lo, hi = fi.minexp - fi.nmant - 3, fi.maxexp + 1
  x = np.concatenate([rng.uniform(lo, hi, 20000), rng.uniform(-1, 1, 5000), rng.uniform(lo, fi.minexp, 5000),
                      rng.uniform(fi.maxexp - 1, fi.maxexp, 2000), np.arange(lo, hi), np.arange(lo, hi) + 0.5]).astype(npdt)
  got = run_op(Ops.EXP2, dtype, x)
  ref = np.exp2(x.astype(np.longdouble))
  with np.errstate(over="ignore"): rounded = ref.astype(npdt)
  np.testing.assert_array_equal(np.isinf(got), np.isinf(rounded))
  finite = np.isfinite(rounded)
  err = np.abs(got[finite].astype(np.longdouble) - ref[finite]) / np.spacing(np.abs(rounded[finite])).astype(np.longdouble)
  worst = int(np.argmax(err))
  assert err[worst] <= 1.2, f"{err[worst]:.3f} ulp at x={x[finite][worst]!r}"
  ints = (x == np.round(x)) & finite
  np.testing.assert_array_equal(got[ints], rounded[ints])

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_log2_specials_and_denormals(dtype: DType):
  npdt = NP_FLOAT[dtype]
  fi = np.finfo(npdt)
  x = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, fi.smallest_subnormal, fi.tiny, 1.0, 0.25], npdt)
  got = run_op(Ops.LOG2, dtype, x)
  expected = np.array([-np.inf, -np.inf, np.nan, np.nan, np.inf, np.nan, fi.minexp - fi.nmant, fi.minexp, 0, -2], npdt)
  np.testing.assert_array_equal(got, expected)

def test_sin_float32_past_cody_waite_range():
  # Payne-Hanek from 2**16 on: every float32 exponent, both signs, the switch-over point and the largest float
  rng = np.random.default_rng(5)
  x = np.concatenate([np.exp2(rng.uniform(15, 127.99, 3000)) * rng.choice([-1, 1], 3000),
                      [2.0**16, np.nextafter(np.float32(2**16), np.float32(0)), 102943.7, 3.4028235e38, -3.4028235e38]])
  x = x.astype(np.float32)
  got = run_op(Ops.SIN, dtypes.float32, x)
  np.testing.assert_allclose(got, np.sin(x.astype(np.float64)), atol=2e-7, rtol=0)

def test_sin_float64_up_to_2e8():
  rng = np.random.default_rng(6)
  x = np.concatenate([rng.uniform(-2.1e8, 2.1e8, 2000), np.exp2(rng.uniform(20, 27.6, 1000)),
                      np.arange(1, 200) * (np.pi / 2) * 1e6])
  np.testing.assert_allclose(run_op(Ops.SIN, dtypes.float64, x), np.sin(x), atol=1e-15, rtol=0)

def test_sin_of_inf_and_nan_is_nan_and_huge_inputs_stay_bounded():
  x = np.array([np.inf, -np.inf, np.nan, 3e38, -3e38, 1e9], np.float32)
  got = run_op(Ops.SIN, dtypes.float32, x)
  assert np.isnan(got[:3]).all() and (np.abs(got[3:]) <= 1).all()

# ---------------- the other decompositions ----------------

def test_pow_matches_numpy():
  rng = np.random.default_rng(1)
  special_a = [0, 0, 0, 1, 1, -2, -2, -2, np.inf, np.nan, 4]
  special_b = [2, -1, 0, np.nan, 7, 3, 2, 0.5, -1, 0, np.inf]
  a = np.concatenate([rng.uniform(0.1, 10, 300), -rng.uniform(0.1, 10, 100), special_a])
  b = np.concatenate([rng.uniform(-5, 5, 300), rng.integers(-5, 6, 100), special_b])
  for dtype, rtol in ((dtypes.float32, 1e-5), (dtypes.float64, 1e-12)):
    x, y = a.astype(NP_FLOAT[dtype]), b.astype(NP_FLOAT[dtype])
    got = run_op(Ops.POW, dtype, x, y)
    with np.errstate(all="ignore"): ref = np.power(x, y)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=0, err_msg=dtype.name)   # nan positions must match too

def test_sqrt_with_native_transcendentals_except_sqrt():
  x = np.array([0, 1, 2, 1e-40, 3e38, np.inf, -1, np.nan], np.float32)
  got = run_op(Ops.SQRT, dtypes.float32, x, renderer=renderer_without(frozenset({Ops.SQRT})))
  with np.errstate(invalid="ignore"): np.testing.assert_allclose(got, np.sqrt(x), rtol=2e-7)

@pytest.mark.parametrize("op,missing", [(Ops.MULACC, Ops.MULACC), (Ops.CMPEQ, Ops.CMPEQ), (Ops.SUB, Ops.SUB),
                                        (Ops.SUB, frozenset({Ops.SUB, Ops.NEG})), (Ops.RECIPROCAL, Ops.RECIPROCAL),
                                        (Ops.FDIV, Ops.FDIV), (Ops.NEG, Ops.NEG)],
                         ids=lambda x: "+".join(sorted(o.name for o in x)) if isinstance(x, frozenset) else str(x))
def test_simple_decompositions(op: Ops, missing):
  missing = missing if isinstance(missing, frozenset) else frozenset({missing})
  rng = np.random.default_rng(2)
  arity = 3 if op is Ops.MULACC else 1 if op in GroupOp.Unary else 2
  inputs = [rng.uniform(-4, 4, 64).astype(np.float32) for _ in range(arity)]
  if op is Ops.CMPEQ: inputs[1][::2] = inputs[0][::2]
  got = run_op(op, dtypes.float32, *inputs, renderer=renderer_without(missing))
  ref = {Ops.MULACC: lambda a, b, c: a * b + c, Ops.CMPEQ: np.equal, Ops.SUB: np.subtract, Ops.NEG: np.negative,
         Ops.RECIPROCAL: lambda a: np.float32(1) / a, Ops.FDIV: np.divide}[op](*inputs)
  np.testing.assert_allclose(got, ref, rtol=3e-7)

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64, dtypes.uint32], ids=lambda d: d.name)
@pytest.mark.parametrize("divisor", [1, 2, 8, 1024])
def test_idiv_and_mod_by_powers_of_two_follow_c(dtype: DType, divisor: int):
  npdt = to_np_dtype(dtype)
  x = np.array([0, 1, 7, 8, 9, 1023, 1025, 12345, np.iinfo(npdt).max] + ([] if dtypes.is_unsigned(dtype) else
               [-1, -7, -8, -9, -1025, -12345, np.iinfo(npdt).min]), dtype=npdt)
  renderer = renderer_without(frozenset({Ops.IDIV, Ops.MOD}))
  for op in (Ops.IDIV, Ops.MOD):
    got, uops = run_kernel(lambda a: UOp(op, dtype, (a, UOp.const(dtype, divisor))), [x], dtype, dtype, renderer)
    assert not {u.op for u in uops} & {Ops.IDIV, Ops.MOD}
    q = np.array([int(v / divisor) if abs(int(v)) < 2**52 else -(-int(v) // divisor) if v < 0 else int(v) // divisor
                  for v in x.tolist()], dtype=object)
    ref = q if op is Ops.IDIV else np.array(x.tolist(), dtype=object) - q * divisor
    np.testing.assert_array_equal(got.astype(object), ref, err_msg=f"{op.name} by {divisor}")

def test_missing_ops_that_cannot_be_decomposed_raise():
  with pytest.raises(NotImplementedError, match="IDIV"):
    run_kernel(lambda a: a // UOp.const(dtypes.int32, 3), [np.arange(4)], dtypes.int32, dtypes.int32,
               renderer_without(frozenset({Ops.IDIV})))
  with pytest.raises(NotImplementedError, match="RECIPROCAL"):
    run_op(Ops.RECIPROCAL, dtypes.float32, np.ones(4, np.float32),
           renderer=renderer_without(frozenset({Ops.RECIPROCAL, Ops.FDIV})))

# ---------------- the graph ----------------

def test_native_renderers_keep_their_ops():
  x = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(1), arg=0)
  sink = UOp(Ops.LOAD, dtypes.float, (UOp(Ops.INDEX, dtypes.float.ptr(1), (x, UOp.const(dtypes.int, 0))),)).exp2().sink()
  assert decompose_for(sink, PythonRenderer()) is sink
  assert decompose_for(sink, renderer_without(frozenset({Ops.SIN}))) is sink

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("op", sorted(TRANSCENDENTAL - {Ops.POW}), ids=lambda o: o.name)
def test_decomposed_graph_has_no_missing_ops_and_right_int_widths(op: Ops, dtype: DType):
  x = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(4), arg=0)
  loads = [UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, dtype.ptr(4), (x, UOp.const(dtypes.int, i))),)) for i in range(4)]
  value = UOp(op, dtype.vec(4), (UOp(Ops.VECTORIZE, dtype.vec(4), tuple(loads)),))
  out = decompose_for(value.sink(), NoTransRenderer())
  nodes = list(out.toposort())
  assert not {u.op for u in nodes} & TRANSCENDENTAL
  compute = dtypes.float64 if dtype == dtypes.float64 else dtypes.float32
  bit_ints = {u.dtype.scalar() for u in nodes if u.op is Ops.BITCAST and dtypes.is_int(u.dtype)}
  assert all(d.itemsize == compute.itemsize for d in bit_ints)                     # ints as wide as the float
  assert all(u.dtype.count == 4 for u in nodes if u.op in GroupOp.ALU)           # vectors stay vectors
  if dtype in (dtypes.float16, dtypes.bfloat16):
    assert out.src[0].op is Ops.CAST and out.src[0].dtype == dtype.vec(4) and out.src[0].src[0].dtype == compute.vec(4)

def test_vector_program_runs():
  n = 16
  x = np.linspace(-20, 20, 4 * n).astype(np.float32)
  g_in = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(4 * n), arg=1)
  g_out = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(4 * n), arg=0)
  r = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n),), (0, "loop"))
  idx = [r * 4 + j for j in range(4)]                     # 4 lanes per iteration, gathered into a float4
  vec = UOp(Ops.VECTORIZE, dtypes.float.vec(4),
            tuple(UOp(Ops.LOAD, dtypes.float, (UOp(Ops.INDEX, dtypes.float.ptr(4 * n), (g_in, i)),)) for i in idx))
  y = vec.sin() + vec.exp2().log2()
  sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float.ptr(4 * n), (g_out, i)),
                                                                       UOp(Ops.GEP, dtypes.float, (y,), (j,))))
                                          for j, i in enumerate(idx)))
  spec = get_program(sink, NoTransRenderer())
  assert not {u.op for u in spec.uops} & TRANSCENDENTAL
  out = np.zeros(4 * n, np.float32)
  PythonProgram(spec.name, spec.uops)(out, x, global_size=spec.global_size, local_size=spec.local_size)
  np.testing.assert_allclose(out, np.sin(x) + np.log2(np.exp2(x)), rtol=1e-6, atol=1e-6)

def test_realize_on_a_registered_device():
  from tinyplug.engine.realize import buffer_of, realize
  name = register_notrans_device()
  x = np.linspace(-3, 3, 32).astype(np.float32)
  a = UOp.new_buffer(name, 32, dtypes.float)
  buffer_of(a).copyin(x)
  out = UOp(Ops.SIN, dtypes.float, (UOp(Ops.EXP2, dtypes.float, (a,)),))
  got = buffer_of(realize([out])[out]).numpy()
  np.testing.assert_allclose(got, np.sin(np.exp2(x)), rtol=1e-6, atol=1e-7)
