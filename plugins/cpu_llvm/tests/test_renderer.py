"""The LLVM IR renderer on hand-built linear programs, run and compared with numpy."""
import math, struct
import numpy as np
import pytest
from tinyplug.uop import UOp, Ops, dtypes

def glob(i, dt, size): return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=i)
def c(v, dt=dtypes.int): return UOp(Ops.CONST, dt, arg=v)
def rng(n, axis=0, kind="loop"): return UOp(Ops.RANGE, dtypes.int, (n if isinstance(n, UOp) else c(n),), (axis, kind))
def end(r): return UOp(Ops.END, dtypes.void, (r,))
def idx(buf, i, gate=None, vec=1):
  dt = buf.dtype if vec == 1 else buf.dtype.vec(vec)
  return UOp(Ops.INDEX, dt, (buf, i) + ((gate,) if gate is not None else ()))
def load(ix, dt, alt=None): return UOp(Ops.LOAD, dt, (ix,) + ((alt,) if alt is not None else ()))
def store(ix, v): return UOp(Ops.STORE, dtypes.void, (ix, v))
def alu(op, dt, *src): return UOp(op, dt, tuple(src))

def elementwise(fn, in_dts, out_dt, n):
  """out[i] = fn(*[in_k[i]]) as a one-loop program."""
  out = glob(0, out_dt, n)
  ins = [glob(k + 1, dt, n) for k, dt in enumerate(in_dts)]
  r = rng(n)
  vals = [load(idx(b, r), dt) for b, dt in zip(ins, in_dts)]
  res = fn(*vals)
  return [out, *ins, r, *[v.src[0] for v in vals], *vals, *_between(vals, res), idx(out, r), store(idx(out, r), res), end(r)]

def _between(vals, res):
  """The nodes of res (toposorted) that are not loads/indexes/consts already emitted."""
  skip = set(vals) | {v.src[0] for v in vals}
  return [u for u in res.toposort() if u not in skip and u.op not in (Ops.DEFINE_GLOBAL, Ops.RANGE, Ops.CONST)
          and not (u.op is Ops.INDEX)]

def run_elementwise(run, fn, arrays, out_dt, np_out):
  from tinyplug.uop.dtype import to_np_dtype
  n = len(arrays[0])
  uops = elementwise(fn, [_dt(a) for a in arrays], out_dt, n)
  out = np.zeros(n, dtype=to_np_dtype(out_dt))
  run(uops, [out, *arrays])
  return out

def _dt(a):
  from tinyplug.uop.dtype import from_np_dtype
  return from_np_dtype(a.dtype)

def test_render_hand_built_list():
  from tinyplug_cpu_llvm import LLVMRenderer
  const = UOp(Ops.CONST, dtypes.float, arg=1.0)
  add = UOp(Ops.ADD, dtypes.float, src=(const, const))
  src = LLVMRenderer().render("example", [const, add])
  assert "define void @example(" in src and "fadd" in src and "0x3FF0000000000000" in src

def test_add_loop(run):
  a, b = np.random.rand(1000).astype(np.float32), np.random.rand(1000).astype(np.float32)
  out = run_elementwise(run, lambda x, y: alu(Ops.ADD, dtypes.float, x, y), [a, b], dtypes.float, None)
  np.testing.assert_array_equal(out, a + b)

def test_reduction_with_register_accumulator(run):
  N, M = 37, 53
  out, inp = glob(0, dtypes.float, N), glob(1, dtypes.float, N * M)
  r, k = rng(N, 0), rng(M, 1, "reduce")
  acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1), arg=0)
  slot = idx(acc, c(0))
  rm = alu(Ops.MUL, dtypes.int, r, c(M))
  i = alu(Ops.ADD, dtypes.int, rm, k)
  x = load(idx(inp, i), dtypes.float)
  cur = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "in"))
  upd = alu(Ops.ADD, dtypes.float, cur, x)
  fin = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "out"))
  uops = [out, inp, r, idx(out, r), acc, slot, store(slot, c(0.0, dtypes.float)), rm, k, i, idx(inp, i), x, cur, upd,
          store(slot, upd), end(k), fin, store(idx(out, r), fin), end(r)]
  a = np.random.rand(N * M).astype(np.float32)
  o = np.zeros(N, np.float32)
  run(uops, [o, a])
  np.testing.assert_allclose(o, a.reshape(N, M).sum(1), rtol=1e-5)

def test_gated_load_with_alt_and_gated_store(run):
  N = 16
  out, inp, out2 = glob(0, dtypes.float, N), glob(1, dtypes.float, 8), glob(2, dtypes.float, N)
  r = rng(N)
  gate = alu(Ops.CMPLT, dtypes.bool, r, c(8))
  ix = idx(inp, r, gate)
  v = load(ix, dtypes.float, c(-1.0, dtypes.float))
  sg = idx(out2, r, gate)
  uops = [out, inp, out2, r, gate, ix, v, idx(out, r), store(idx(out, r), v), sg, store(sg, v), end(r)]
  a = np.arange(8, dtype=np.float32) + 1
  o, o2 = np.zeros(N, np.float32), np.full(N, 7, np.float32)
  run(uops, [o, a, o2])
  np.testing.assert_array_equal(o, np.concatenate([a, -np.ones(8, np.float32)]))
  np.testing.assert_array_equal(o2, np.concatenate([a, np.full(8, 7, np.float32)]))

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int8, dtypes.int64])
def test_int_division_truncates_like_c(run, dt):
  from tinyplug.uop.dtype import to_np_dtype
  npdt = to_np_dtype(dt)
  a = np.array([7, -7, 7, -7, 0, 5, -128 if dt == dtypes.int8 else -100], dtype=npdt)
  b = np.array([2, 2, -2, -2, 3, 0, -1], dtype=npdt)
  q = run_elementwise(run, lambda x, y: alu(Ops.IDIV, dt, x, y), [a, b], dt, None)
  m = run_elementwise(run, lambda x, y: alu(Ops.MOD, dt, x, y), [a, b], dt, None)
  assert list(q[:5]) == [3, -3, -3, 3, 0] and list(m[:5]) == [1, -1, 1, -1, 0]
  assert q[5] == 5 and m[5] == 0          # x/0 does not trap: x, x%0 = 0 (like the PYTHON device)
  assert q[6] == (-128 if dt == dtypes.int8 else 100)   # INT_MIN/-1 wraps

def test_unsigned_division_and_shifts(run):
  a = np.array([4000000000, 7, 255], dtype=np.uint32)
  b = np.array([3, 2, 16], dtype=np.uint32)
  q = run_elementwise(run, lambda x, y: alu(Ops.IDIV, dtypes.uint32, x, y), [a, b], dtypes.uint32, None)
  np.testing.assert_array_equal(q, a // b)
  s = run_elementwise(run, lambda x, y: alu(Ops.SHR, dtypes.uint32, x, y), [a, np.array([1, 1, 4], np.uint32)],
                      dtypes.uint32, None)
  np.testing.assert_array_equal(s, a >> np.array([1, 1, 4], np.uint32))
  si = np.array([-16, 16, -1], np.int32)
  s2 = run_elementwise(run, lambda x, y: alu(Ops.SHR, dtypes.int32, x, y), [si, np.array([2, 2, 1], np.int32)],
                       dtypes.int32, None)
  np.testing.assert_array_equal(s2, si >> np.array([2, 2, 1], np.int32))

def test_nan_semantics(run):
  nan = float("nan")
  a = np.array([nan, 1.0, 2.0, nan, -0.0, 3.0], np.float32)
  b = np.array([1.0, nan, 1.0, nan, 0.0, np.inf], np.float32)
  mx = run_elementwise(run, lambda x, y: alu(Ops.MAX, dtypes.float, x, y), [a, b], dtypes.float, None)
  np.testing.assert_array_equal(mx, np.maximum(a, b))
  ne = run_elementwise(run, lambda x, y: alu(Ops.CMPNE, dtypes.bool, x, y), [a, b], dtypes.bool, None)
  np.testing.assert_array_equal(ne, a != b)
  lt = run_elementwise(run, lambda x, y: alu(Ops.CMPLT, dtypes.bool, x, y), [a, b], dtypes.bool, None)
  np.testing.assert_array_equal(lt, a < b)
  eq = run_elementwise(run, lambda x, y: alu(Ops.CMPEQ, dtypes.bool, x, y), [a, b], dtypes.bool, None)
  np.testing.assert_array_equal(eq, a == b)

CASTS = [(np.float32, dtypes.int32), (np.float32, dtypes.int64), (np.float32, dtypes.bool), (np.float32, dtypes.float64),
         (np.float32, dtypes.float16), (np.int32, dtypes.float32), (np.uint32, dtypes.float32), (np.int32, dtypes.int8),
         (np.int8, dtypes.int32), (np.uint8, dtypes.int32), (np.bool_, dtypes.float32), (np.bool_, dtypes.int32),
         (np.float64, dtypes.float32), (np.float16, dtypes.float32), (np.int64, dtypes.float64), (np.int32, dtypes.bool),
         (np.float32, dtypes.uint8), (np.uint64, dtypes.float32)]

@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{s.__name__}->{d.name}" for s, d in CASTS])
def test_cast(run, src, dst):
  from tinyplug.uop.dtype import to_np_dtype
  vals = {np.bool_: [True, False, True, True]}.get(src, [0, 1, 100, 7] if np.issubdtype(src, np.unsignedinteger) else
                                                   [0, -3, 100, 7] if np.issubdtype(src, np.integer) else
                                                   [0.0, -3.75, 100.5, 7.25] if dst != dtypes.uint8 else [0.0, 3.75, 200.5, 7.25])
  a = np.array(vals, dtype=src)
  out = run_elementwise(run, lambda x: UOp(Ops.CAST, dst, (x,)), [a], dst, None)
  np.testing.assert_array_equal(out, a.astype(to_np_dtype(dst)))

def test_bfloat16_round_trip_and_math(run):
  a = np.array([1.0, -2.5, 3.14159, 1e30, float("inf"), float("nan"), 1.00390625, 1.01171875], np.float32)
  bits = run_elementwise(run, lambda x: UOp(Ops.CAST, dtypes.bfloat16, (x,)), [a], dtypes.bfloat16, None)
  u = a.view(np.uint32).astype(np.uint64)
  expect = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  expect[5] = bits[5]   # any NaN
  np.testing.assert_array_equal(bits, expect)
  assert (bits[5] & 0x7F80) == 0x7F80 and (bits[5] & 0x7F) != 0
  # bf16 in, float out: loads widen the raw bits
  out, inp = glob(0, dtypes.float, 8), glob(1, dtypes.bfloat16, 8)
  r = rng(8)
  v = load(idx(inp, r), dtypes.bfloat16)
  s = alu(Ops.ADD, dtypes.bfloat16, v, v)
  f = UOp(Ops.CAST, dtypes.float, (s,))
  o = np.zeros(8, np.float32)
  run([out, inp, r, idx(inp, r), v, s, f, idx(out, r), store(idx(out, r), f), end(r)], [o, bits])
  widened = (bits.astype(np.uint32) << 16).view(np.float32)
  np.testing.assert_array_equal(o[:5], widened[:5] * 2)

@pytest.mark.parametrize("op,fn", [(Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin), (Ops.SQRT, np.sqrt),
                                   (Ops.RECIPROCAL, np.reciprocal), (Ops.TRUNC, np.trunc), (Ops.NEG, np.negative)])
@pytest.mark.parametrize("npdt", [np.float32, np.float64, np.float16])
def test_transcendental_and_unary(run, op, fn, npdt):
  from tinyplug.uop.dtype import from_np_dtype
  a = np.array([0.5, 1.0, 2.25, 3.7, 10.0, -1.5, 0.0], npdt)
  dt = from_np_dtype(np.dtype(npdt))
  with np.errstate(all="ignore"): expect = fn(a)
  out = run_elementwise(run, lambda x: alu(op, dt, x), [a], dt, None)
  np.testing.assert_allclose(out, expect, rtol=2e-3 if npdt == np.float16 else 1e-6, equal_nan=True)

def test_pow_and_mulacc(run):
  a, b = np.array([2.0, 3.0, 0.5], np.float32), np.array([3.0, 0.5, -2.0], np.float32)
  p = run_elementwise(run, lambda x, y: alu(Ops.POW, dtypes.float, x, y), [a, b], dtypes.float, None)
  np.testing.assert_allclose(p, a ** b, rtol=1e-6)
  m = run_elementwise(run, lambda x, y: alu(Ops.MULACC, dtypes.float, x, y, x), [a, b], dtypes.float, None)
  np.testing.assert_allclose(m, a * b + a, rtol=1e-6)

def test_vectors(run):
  N = 64
  out, a, b = glob(0, dtypes.float, N), glob(1, dtypes.float, N), glob(2, dtypes.float, N)
  r = rng(N // 4)
  base = alu(Ops.MUL, dtypes.int, r, c(4))
  f4 = dtypes.float.vec(4)
  va = load(idx(a, base, vec=4), f4)
  vb = load(idx(b, base, vec=4), f4)
  ab = alu(Ops.ADD, f4, va, vb)
  s = alu(Ops.MUL, f4, ab, UOp(Ops.CONST, f4, arg=2.0))
  # reverse the lanes through GEP + VECTORIZE, then max with a VCONST
  lanes = [UOp(Ops.GEP, dtypes.float, (s,), (i,)) for i in range(4)]
  rev = UOp(Ops.VECTORIZE, f4, tuple(reversed(lanes)))
  m = alu(Ops.MAX, f4, rev, UOp(Ops.VCONST, f4, arg=(1.0, 2.0, 3.0, 4.0)))
  cmp = alu(Ops.CMPLT, dtypes.bool.vec(4), m, UOp(Ops.CONST, f4, arg=5.0))
  w = alu(Ops.WHERE, f4, cmp, UOp(Ops.CONST, f4, arg=0.0), m)
  oi = idx(out, base, vec=4)
  uops = [out, a, b, r, base, va.src[0], va, vb.src[0], vb, ab, s, *lanes, rev, m, cmp, w, oi, store(oi, w), end(r)]
  x, y = np.random.rand(N).astype(np.float32) * 4, np.random.rand(N).astype(np.float32) * 4
  o = np.zeros(N, np.float32)
  src = run(uops, [o, x, y])
  assert "<4 x float>" in src
  e = ((x + y) * 2).reshape(-1, 4)[:, ::-1]
  e = np.maximum(e, np.array([1, 2, 3, 4], np.float32))
  np.testing.assert_allclose(o.reshape(-1, 4), np.where(e < 5, 0, e), rtol=1e-6)

def test_vector_gated_load_and_gather(run):
  N = 8
  out, a = glob(0, dtypes.float, N), glob(1, dtypes.float, N)
  i4 = dtypes.int.vec(4)
  iv = UOp(Ops.VCONST, i4, arg=(7, 0, 3, 9))
  gate = alu(Ops.CMPLT, dtypes.bool.vec(4), iv, UOp(Ops.CONST, i4, arg=8))
  ix = UOp(Ops.INDEX, a.dtype, (a, iv, gate))
  v = load(ix, dtypes.float.vec(4), UOp(Ops.CONST, dtypes.float.vec(4), arg=-1.0))
  oi = idx(out, c(0), vec=4)
  x = np.arange(N, dtype=np.float32) * 10
  o = np.zeros(N, np.float32)
  run([out, a, iv, gate, ix, v, oi, store(oi, v)], [o, x])
  np.testing.assert_array_equal(o[:4], [70, 0, 30, -1])

def test_define_var_loop_bound(run):
  out = glob(0, dtypes.int, 100)
  n = UOp(Ops.DEFINE_VAR, dtypes.int, arg=("n", 1, 100))
  r = rng(n)
  v = alu(Ops.MUL, dtypes.int, r, r)
  o = np.full(100, -1, np.int32)
  run([out, n, r, v, idx(out, r), store(idx(out, r), v), end(r)], [o], vals=(10,))
  np.testing.assert_array_equal(o[:10], np.arange(10) ** 2)
  assert (o[10:] == -1).all()

def test_if_endif(run):
  out = glob(0, dtypes.int, 10)
  r = rng(10)
  cond = alu(Ops.CMPLT, dtypes.bool, c(4), r)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  o = np.zeros(10, np.int32)
  run([out, r, cond, iff, idx(out, r), store(idx(out, r), r), UOp(Ops.ENDIF, dtypes.void, (iff,)), end(r)], [o])
  np.testing.assert_array_equal(o, np.where(np.arange(10) > 4, np.arange(10), 0))

def test_bitcast_and_exact_constants(run):
  a = np.array([1.0, -2.0, float("inf")], np.float32)
  out = run_elementwise(run, lambda x: UOp(Ops.BITCAST, dtypes.int32, (x,)), [a], dtypes.int32, None)
  np.testing.assert_array_equal(out, a.view(np.int32))
  third = 1 / 3
  d = run_elementwise(run, lambda x: alu(Ops.ADD, dtypes.double, x, c(third, dtypes.double)), [np.zeros(2)],
                      dtypes.double, None)
  assert d[0] == third
  f = run_elementwise(run, lambda x: alu(Ops.ADD, dtypes.float, x, c(0.1, dtypes.float)), [np.zeros(2, np.float32)],
                      dtypes.float, None)
  assert f[0] == np.float32(0.1)

def test_bool_buffers(run):
  a = np.array([True, False, True, False]); b = np.array([True, True, False, False])
  out = run_elementwise(run, lambda x, y: alu(Ops.XOR, dtypes.bool, x, y), [a, b], dtypes.bool, None)
  np.testing.assert_array_equal(out, a ^ b)
  out = run_elementwise(run, lambda x, y: alu(Ops.WHERE, dtypes.bool, x, y, x), [a, b], dtypes.bool, None)
  np.testing.assert_array_equal(out, np.where(a, b, a))

def test_reassociation_only_for_contiguous_reductions():
  from tinyplug_cpu_llvm import LLVMRenderer
  def reduce_prog(stride):
    out, inp = glob(0, dtypes.float, 4), glob(1, dtypes.float, 4 * 64)
    r, k = rng(4, 0), rng(64, 1, "reduce")
    acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1), arg=0)
    slot = idx(acc, c(0))
    i = alu(Ops.ADD, dtypes.int, alu(Ops.MUL, dtypes.int, k, c(stride)), alu(Ops.MUL, dtypes.int, r, c(max(64 // stride, 1))))
    x = load(idx(inp, i), dtypes.float)
    cur = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "in"))
    upd = alu(Ops.ADD, dtypes.float, cur, x)
    fin = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "out"))
    return [out, inp, r, idx(out, r), acc, slot, store(slot, c(0.0, dtypes.float)), k, i.src[0], i.src[1], i,
            idx(inp, i), x, cur, upd, store(slot, upd), end(k), fin, store(idx(out, r), fin), end(r)]
  assert "fadd reassoc contract" in LLVMRenderer().render("k", reduce_prog(1))
  assert "fadd reassoc contract" in LLVMRenderer().render("k", reduce_prog(4))   # within a cache line: fine
  assert "reassoc" not in LLVMRenderer().render("k", reduce_prog(64))            # a column walk: keep the order

@pytest.mark.parametrize("op,fn,lo,hi", [(Ops.EXP2, np.exp2, -140, 130), (Ops.LOG2, np.log2, 1e-30, 1e30),
                                         (Ops.SIN, np.sin, -1e4, 1e4)])
@pytest.mark.parametrize("npdt", [np.float32, np.float64])
def test_vectorised_transcendentals(run, op, fn, lo, hi, npdt):
  """Long enough for the vector (libmvec) path; special values included."""
  from tinyplug.uop.dtype import from_np_dtype
  rng = np.random.default_rng(0)
  a = rng.uniform(lo, hi, 4099).astype(npdt)
  if op is Ops.LOG2: a = np.exp(rng.uniform(np.log(lo), np.log(hi), 4099)).astype(npdt)
  a[:6] = [np.inf, -np.inf, np.nan, 0.0, -1.0, 1.0]
  dt = from_np_dtype(np.dtype(npdt))
  out = run_elementwise(run, lambda x: alu(op, dt, x), [a], dt, None)
  with np.errstate(all="ignore"): expect = fn(a.astype(np.float64)).astype(npdt)
  tol = 4 * np.finfo(npdt).eps
  np.testing.assert_allclose(out, expect, rtol=tol, atol=tol if op is Ops.SIN else 0, equal_nan=True)
