"""Every ALU op, cast and bitcast on CL gives what the PYTHON reference device gives (C semantics: truncating integer
division, NaN-propagating max, bool stored as bytes), for the dtypes OpenCL has."""
import numpy as np
import pytest
from tinyplug.uop import UOp, Ops, dtypes
from tinyplug.uop.dtype import to_np_dtype
from tinyplug.engine.realize import buffer_of, realize

def inputs(dt, n=64, seed=0):
  rng = np.random.default_rng(seed)
  npdt = to_np_dtype(dt)
  if dt == dtypes.bool: return rng.integers(0, 2, n).astype(bool)
  if dtypes.is_float(dt):
    x = (rng.standard_normal(n) * 3).astype(npdt)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0]
    return x
  info = np.iinfo(npdt)
  x = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(npdt)
  x[:3] = [info.min, info.max, 0] if info.min < 0 else [0, info.max, 1]
  return x

def on(device, arrays, make):
  bufs = []
  for a in arrays:
    dt = next(d for d in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                          dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64) if to_np_dtype(d) == a.dtype)
    u = UOp.new_buffer(device, a.size, dt)
    buffer_of(u).copyin(a)
    bufs.append(u)
  out = make(*bufs)
  return buffer_of(realize([out])[out]).numpy()

def same(cl, make, *arrays, exact=True):
  ref = on("PYTHON", arrays, make)
  got = on("CL", arrays, make)
  assert got.dtype == ref.dtype
  if exact or not np.issubdtype(ref.dtype, np.floating): np.testing.assert_array_equal(got, ref)
  else: np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6, equal_nan=True)

def alu(op, dt=None):
  return lambda *s: UOp(op, dt or (dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else s[-1].dtype), tuple(s))

FLOAT_BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.MOD]
INT_BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE,
              Ops.CMPEQ]

@pytest.mark.parametrize("op", FLOAT_BINARY, ids=str)
def test_float_binary(cl, op):
  same(cl, alu(op), inputs(dtypes.float, seed=1), inputs(dtypes.float, seed=2), exact=op is not Ops.FDIV)

@pytest.mark.parametrize("op", [Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC], ids=str)
def test_float_unary(cl, op):
  same(cl, alu(op), inputs(dtypes.float), exact=op in (Ops.NEG, Ops.TRUNC))

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.int8, dtypes.uint8, dtypes.int16], ids=str)
@pytest.mark.parametrize("op", INT_BINARY, ids=str)
def test_int_binary(cl, op, dt):
  a, b = inputs(dt, seed=1), inputs(dt, seed=2)
  if op in (Ops.IDIV, Ops.MOD):
    b[(b == 0) | (b == np.iinfo(b.dtype).min)] = 3   # (the PYTHON device's IDIV is off by one at INT_MIN divisors)
    a[0] = 7 if dtypes.is_unsigned(dt) else -7   # no INT_MIN / -1 (undefined in C)
  if op is Ops.MUL and dt.itemsize >= 4: a, b = a % 1000, b % 1000    # no signed overflow (undefined in C)
  if op in (Ops.ADD, Ops.SUB) and dt.itemsize >= 4: a, b = a // 2, b // 2
  same(cl, alu(op), a, b)

def test_shifts_and_where(cl):
  a = inputs(dtypes.int32) % 1000
  b = np.abs(a) % 8
  same(cl, alu(Ops.SHR), a, b)
  same(cl, alu(Ops.SHL), a, b)
  c, x, y = inputs(dtypes.bool), inputs(dtypes.float, seed=3), inputs(dtypes.float, seed=4)
  same(cl, lambda c_, x_, y_: UOp(Ops.WHERE, dtypes.float, (c_, x_, y_)), c, x, y)
  same(cl, alu(Ops.AND), inputs(dtypes.bool, seed=1), inputs(dtypes.bool, seed=2))
  same(cl, alu(Ops.OR), inputs(dtypes.bool, seed=1), inputs(dtypes.bool, seed=2))
  same(cl, alu(Ops.MAX), inputs(dtypes.bool, seed=1), inputs(dtypes.bool, seed=2))

@pytest.mark.parametrize("src,dst", [(dtypes.float, dtypes.int32), (dtypes.int32, dtypes.float), (dtypes.float, dtypes.bool),
                                     (dtypes.bool, dtypes.float), (dtypes.int32, dtypes.int8), (dtypes.uint8, dtypes.int64),
                                     (dtypes.float, dtypes.half), (dtypes.half, dtypes.float), (dtypes.int64, dtypes.int32)],
                         ids=str)
def test_casts(cl, src, dst):
  a = inputs(src)
  if dtypes.is_float(src) and dtypes.is_int(dst): a = np.nan_to_num(a, posinf=5, neginf=-5)   # out of range: undefined in C
  same(cl, lambda x: UOp(Ops.CAST, dst, (x,)), a)

def test_bitcasts(cl):
  same(cl, lambda x: UOp(Ops.BITCAST, dtypes.int32, (x,)), np.nan_to_num(inputs(dtypes.float)))
  same(cl, lambda x: UOp(Ops.BITCAST, dtypes.float, (x,)), inputs(dtypes.int32) % 2**20)
  same(cl, lambda x: UOp(Ops.BITCAST, dtypes.uint16, (x,)), np.nan_to_num(inputs(dtypes.half)))   # NaN payloads may differ

def test_half_math_rounds_like_half(cl):
  # without cl_khr_fp16 the math runs in float, but each result is rounded to half: the same bits as half math
  h = np.nan_to_num(inputs(dtypes.half), posinf=10, neginf=-10).astype(np.float16)
  ref = on("PYTHON", [h, h], lambda a, b: UOp(Ops.ADD, dtypes.half, (UOp(Ops.MUL, dtypes.half, (a, b)), a)))
  got = on("CL", [h, h], lambda a, b: UOp(Ops.ADD, dtypes.half, (UOp(Ops.MUL, dtypes.half, (a, b)), a)))
  assert got.dtype == np.float16
  np.testing.assert_array_equal(got, ref)

def test_double_when_the_device_has_fp64(cl):
  if not cl.renderer.has_fp64: pytest.skip("device has no cl_khr_fp64")
  same(cl, lambda a, b: UOp(Ops.MAX, dtypes.double, (UOp(Ops.FDIV, dtypes.double, (a, b)), a)),
       inputs(dtypes.double, seed=1), inputs(dtypes.double, seed=2), exact=False)

def test_small_int_results_keep_their_type(cl):
  # C promotes uchar^uchar to int; max(uchar, int) would be ambiguous in OpenCL C
  a, b = inputs(dtypes.uint8, seed=1), inputs(dtypes.uint8, seed=2)
  same(cl, lambda x, y: UOp(Ops.MAX, dtypes.uint8, (x, UOp(Ops.XOR, dtypes.uint8, (y, x)))), a, b)
  a, b = inputs(dtypes.int16, seed=1), inputs(dtypes.int16, seed=2)
  same(cl, lambda x, y: UOp(Ops.MAX, dtypes.int16, (UOp(Ops.ADD, dtypes.int16, (x, y)), x)), a, b)
