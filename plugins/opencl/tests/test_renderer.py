"""The OpenCL C renderer on hand-built linear programs: what it writes, and (where a CL device exists) that it builds
and computes what numpy computes."""
import math
import numpy as np
import pytest
from tinyplug.uop import UOp, Ops, dtypes
from tinyplug_opencl import OpenCLRenderer

def g(i, dt=dtypes.float, n=16): return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), arg=i)
def c(v, dt=dtypes.int): return UOp.const(dt, v)
def load(buf, idx, dt=dtypes.float, gate=None, alt=None):
  index = UOp(Ops.INDEX, buf.dtype, (buf, idx) + ((gate,) if gate is not None else ()))
  return UOp(Ops.LOAD, dt, (index,) + ((alt,) if alt is not None else ()))
def store(buf, idx, val, gate=None):
  return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, idx) + ((gate,) if gate is not None else ())), val))

def test_seed_example_constant_add():
  const = UOp(Ops.CONST, dtypes.float, arg=1.0)
  add = UOp(Ops.ADD, dtypes.float, src=(const, const))
  src = OpenCLRenderer().render("example", [const, add])
  assert src.startswith("__kernel void example() {")
  assert "(1.0f+1.0f)" in src

def test_specials_and_signature():
  uops = [g(0), UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 16)), UOp(Ops.SPECIAL, dtypes.int, arg=("gidx1", 16)),
          UOp(Ops.SPECIAL, dtypes.int, arg=("lidx0", 4)), UOp(Ops.SPECIAL, dtypes.int, arg=("idx2", 8))]
  src = OpenCLRenderer().render("rendered", uops)
  assert "__kernel void rendered(__global float* restrict data0)" in src
  for text in ("int gidx0 = get_group_id(0); /* 16 */", "int gidx1 = get_group_id(1);", "int lidx0 = get_local_id(0);",
               "int idx2 = get_global_id(2);"):
    assert text in src

def test_store_of_constant_at_group_id():
  buf, gid = g(0), UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 16))
  src = OpenCLRenderer().render("rendered", [buf, gid, store(buf, gid, UOp(Ops.ADD, dtypes.float, (c(0.5, dtypes.float),) * 2))])
  assert "data0[gidx0] = (0.5f+0.5f);" in src

def test_local_memory_barrier_gates_and_loops():
  out, inp = g(0), g(1)
  lid = UOp(Ops.SPECIAL, dtypes.int, arg=("lidx0", 16))
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(16, local=True), arg="temp0")
  st = store(tmp, lid, load(inp, lid, gate=lid < 8, alt=c(-1.0, dtypes.float)))
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  r = UOp(Ops.RANGE, dtypes.int, (c(16),), (0, "reduce"))
  acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1), arg=0)
  slot = UOp(Ops.INDEX, acc.dtype, (acc, c(0)))
  init = UOp(Ops.STORE, dtypes.void, (slot, c(0.0, dtypes.float)))
  cur = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "in"))
  v = load(tmp, r)
  upd = UOp(Ops.STORE, dtypes.void, (slot, cur + v))
  end = UOp(Ops.END, dtypes.void, (r,))
  fin = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "out"))
  st2 = store(out, lid, fin, gate=lid.eq(0))
  uops = [out, inp, lid, tmp, c(8), lid < 8, c(-1.0, dtypes.float), st, bar, acc, c(0), slot, init, c(16), r, cur, v,
          cur + v, upd, end, fin, lid.eq(0), st2]
  src = OpenCLRenderer().render("k", uops)
  assert "  __local float temp0[16];" in src
  assert "barrier(CLK_LOCAL_MEM_FENCE);" in src
  assert "for (int ridx0 = 0; ridx0 < 16; ridx0++) {" in src
  assert "((lidx0<8)?data1[lidx0]:(-1.0f))" in src
  assert "if (lidx0==0) data0[lidx0] = " in src
  assert src.index("__local") < src.index("get_local_id")    # __local arrays at kernel scope, first

def test_nan_propagating_max_and_literals():
  a, b = UOp(Ops.DEFINE_VAR, dtypes.int, arg=("n", 0, 10)), g(0)
  x = load(b, c(0))
  m = UOp(Ops.MAX, dtypes.float, (x, c(math.nan, dtypes.float)))
  uops = [b, a, c(0), x, c(math.nan, dtypes.float), m, store(b, c(1), m),
          store(b, c(2), c(math.inf, dtypes.float)), store(b, c(3), c(-math.inf, dtypes.float))]
  src = OpenCLRenderer().render("k", uops)
  assert "isnan(a) | isnan(b)" in src and "tp_max_float(" in src and "fmax" in src
  assert "NAN" in src and "(-INFINITY)" in src
  assert "int n)" in src   # variables after the buffers
  r = OpenCLRenderer()
  assert r.render_const(-2**31, dtypes.int) == "(-2147483647-1)"
  assert r.render_const(-2**63, dtypes.long) == "(-9223372036854775807l-1)"
  assert r.render_const(3, dtypes.uint) == "3u" and r.render_const(3, dtypes.ulong) == "3ul"
  assert r.render_const(True, dtypes.bool) == "1"

def test_bool_buffers_are_uchar_and_half_needs_no_extension_without_fp16():
  bo, h = g(0, dtypes.bool), g(1, dtypes.half)
  x = load(h, c(0), dtypes.half)
  cmp = UOp(Ops.CMPLT, dtypes.bool, (x, c(1.0, dtypes.half)))
  uops = [bo, h, c(0), x, c(1.0, dtypes.half), cmp, store(bo, c(0), cmp), store(h, c(1), x)]
  src = OpenCLRenderer().render("k", uops)
  assert "__global uchar* restrict data0" in src and "__global half* restrict data1" in src
  assert "vload_half(0, data1)" in src and "vstore_half(" in src and "(uchar)(" in src
  assert "cl_khr_fp16" not in src
  src16 = OpenCLRenderer(extensions=("cl_khr_fp16",)).render("k", uops)
  assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src16 and "vload_half" not in src16

def test_double_pragma_and_refusal_without_fp64():
  d = g(0, dtypes.double)
  uops = [d, c(0), store(d, c(0), c(1.5, dtypes.double))]
  assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in OpenCLRenderer(extensions=("cl_khr_fp64",)).render("k", uops)
  with pytest.raises(NotImplementedError, match="fp64"):
    OpenCLRenderer(extensions=("cl_khr_byte_addressable_store",)).render("k", uops)

def test_vectors_and_casts_bitcasts():
  f4 = dtypes.float.vec(4)
  buf = g(0)
  vidx = UOp(Ops.INDEX, dtypes.float.ptr(16).vec(4), (buf, c(4)))
  v = UOp(Ops.LOAD, f4, (vidx,))
  vv = UOp(Ops.VECTORIZE, f4, tuple(UOp(Ops.GEP, dtypes.float, (v,), (i,)) for i in (3, 2, 1, 0)))
  w = UOp(Ops.MUL, f4, (vv, UOp.const(f4, 2.0)))
  i4 = UOp(Ops.CAST, dtypes.int.vec(4), (w,))
  b = UOp(Ops.BITCAST, dtypes.int, (UOp(Ops.GEP, dtypes.float, (w,), (0,)),))
  uops = [buf, c(4), vidx, v] + list(vv.src) + [vv, UOp.const(f4, 2.0), w, i4, w.src[0], b.src[0], b,
          UOp(Ops.STORE, dtypes.void, (vidx, w))]
  src = OpenCLRenderer().render("k", uops)
  assert "vload4(0, (data0+4))" in src and "vstore4(" in src and "((float4)(2.0f))" in src
  assert "convert_int4(" in src and "as_int(" in src and ".s3" in src

def test_renderer_limits():
  r = OpenCLRenderer(local_max=(4096, 4096, 4096), max_work_group_size=1024, shared_max=65536)
  assert r.local_max == (1024, 1024, 1024) and r.shared_max == 65536 and r.has_local and r.has_shared
  assert dtypes.float64 not in r.supported_dtypes()

# ---- the rendered code runs (CL only) ----

def test_rendered_local_reduction_runs(cl, run_source):
  out, inp = g(0, n=4), g(1, n=64)
  gid = UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 4))
  lid = UOp(Ops.SPECIAL, dtypes.int, arg=("lidx0", 16))
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(16, local=True), arg="temp0")
  x = load(inp, gid * 16 + lid)
  st = store(tmp, lid, x)
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  r = UOp(Ops.RANGE, dtypes.int, (c(16),), (0, "reduce"))
  acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1), arg=0)
  slot = UOp(Ops.INDEX, acc.dtype, (acc, c(0)))
  cur, v = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "in")), load(tmp, r)
  new = UOp(Ops.MAX, dtypes.float, (cur, v))
  uops = [out, inp, gid, lid, tmp, c(16), gid * 16, gid * 16 + lid, x, st, bar, acc, c(0), slot,
          UOp(Ops.STORE, dtypes.void, (slot, c(-math.inf, dtypes.float))), r, cur, v, new,
          UOp(Ops.STORE, dtypes.void, (slot, new)), UOp(Ops.END, dtypes.void, (r,)),
          (fin := UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "out"))), lid.eq(0), store(out, gid, fin, gate=lid.eq(0))]
  src = OpenCLRenderer().render("rmax", uops)
  data = np.random.default_rng(0).standard_normal(64).astype(np.float32)
  data[20] = np.nan
  res, _ = run_source(src, "rmax", [np.zeros(4, np.float32), data], global_size=(4, 1, 1), local_size=(16, 1, 1))
  ref = data.reshape(4, 16).max(1)
  np.testing.assert_array_equal(res, ref)    # NaN propagates like numpy/torch, not like fmax
  assert np.isnan(res[1])
