"""The Metal renderer: what it writes, for hand-built programs and for kernels from the real pipeline."""
from __future__ import annotations
import re
import pytest
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.uop import UOp, Ops, dtypes
from tinyplug_metal import MetalRenderer

def g(i, dt=dtypes.float, n=16): return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), arg=i)
def c(v, dt=dtypes.int): return UOp.const(dt, v)
def index(buf, idx): return UOp(Ops.INDEX, buf.dtype, (buf, idx))
def store(buf, idx, val): return UOp(Ops.STORE, dtypes.void, (index(buf, idx), val))
def load(buf, idx, dt=dtypes.float): return UOp(Ops.LOAD, dt, (index(buf, idx),))

def test_signature_bindings_and_position_attributes():
  n = UOp(Ops.DEFINE_VAR, dtypes.int, arg=("n", 0, 9))
  gid, lid = UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 16)), UOp(Ops.SPECIAL, dtypes.int, arg=("lidx1", 8))
  a, b = g(0), g(1)
  src = MetalRenderer().render("k", [a, b, n, gid, lid, store(a, gid + lid, load(b, lid) + n.cast(dtypes.float))])
  assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
  assert ("kernel void k(device float* data0 [[buffer(0)]], device float* data1 [[buffer(1)]], "
          "constant int& n [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], "
          "uint3 lid [[thread_position_in_threadgroup]]) {") in src
  assert "int gidx0 = gid.x;" in src and "int lidx1 = lid.y;" in src
  # a kernel with no local ids takes no threadgroup position
  assert "thread_position_in_threadgroup" not in MetalRenderer().render("k2", [a, gid, store(a, gid, c(1.0, dtypes.float))])

def test_threadgroup_memory_and_barrier(render, tensor):
  (spec,) = render(tensor(8, 256).sum(axis=1), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  assert re.search(r"^  threadgroup float \w+\[64\];$", spec.src, re.M)
  assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in spec.src

def test_vector_access_names_its_address_space_and_only_when_aligned(render, tensor):
  (spec,) = render(tensor(64) * 2, opts=[Opt(OptOps.UPCAST, 0, 4)])
  assert "(*((device float4*)(data1+" in spec.src and "*((device float4*)(data0+" in spec.src
  (spec,) = render(tensor(10, 6)[:, 1:5] * 2, opts=[Opt(OptOps.UPCAST, 1, 4)])
  assert "(device float4*)(data1" not in spec.src and "float4(data1[" in spec.src   # unaligned load: lane by lane
  assert "*((device float4*)(data0+(gidx0*4)))" in spec.src   # the output is aligned
  (spec,) = render(tensor(64, dtype=dtypes.half) * 3, opts=[Opt(OptOps.UPCAST, 0, 2)])
  assert "device half2*" in spec.src

def test_dtypes_metal_has():
  r = MetalRenderer()
  assert dtypes.float64 not in r.supported_dtypes()
  assert {dtypes.half, dtypes.bfloat16, dtypes.int64, dtypes.uint8, dtypes.bool} <= set(r.supported_dtypes())
  assert dtypes.bfloat16 not in r.vector_widths and dtypes.bool not in r.vector_widths
  assert dtypes.bfloat16 not in MetalRenderer(bfloat=False).supported_dtypes()   # before MSL 3.1 (macOS 14)
  assert r.vector_widths[dtypes.float32] == (4, 2) and r.vector_widths[dtypes.int64] == (2,)

def test_bool_lives_in_buffers_as_uchar(render, tensor):
  (spec,) = render(tensor(16) < tensor(16))
  assert "device uchar* data0 [[buffer(0)]]" in spec.src and "= (uchar)(" in spec.src

def test_bfloat_computes_through_float_and_half_math_calls_too(render, tensor):
  (spec,) = render(tensor(16, dtype=dtypes.bfloat16) * tensor(16, dtype=dtypes.bfloat16))
  assert re.search(r"\(\(bfloat\)\(\(float\)\(\w+\)\*\(float\)\(\w+\)\)\)", spec.src), spec.src
  (spec,) = render(tensor(16, dtype=dtypes.half).sqrt())
  assert "((half)sqrt((float)(" in spec.src

def test_integer_division_never_traps():
  a, b = g(0, dtypes.int), g(1, dtypes.int)
  x = load(b, c(0), dtypes.int)
  src = MetalRenderer().render("k", [a, b, store(a, c(0), UOp(Ops.IDIV, dtypes.int, (x, load(b, c(1), dtypes.int))))])
  assert "==0)||(" in src and "(uint)0-(uint)(" in src   # x/0 -> x, INT_MIN/-1 wraps without signed overflow

def test_constants():
  r = MetalRenderer()
  assert r.render_const(float("inf"), dtypes.float32) == "INFINITY"
  assert r.render_const(float("nan"), dtypes.half) == "((half)NAN)"
  assert r.render_const(1.5, dtypes.bfloat16) == "((bfloat)1.5f)"
  assert r.render_const(-2**63, dtypes.int64) == "(-9223372036854775807l-1)"
  assert r.render_const(7, dtypes.uint64) == "7ul" and r.render_const(3, dtypes.uint32) == "3u"

def test_more_bindings_than_metal_has_is_a_clear_error():
  bufs = [g(i) for i in range(32)]
  uops = bufs + [store(bufs[0], c(0), load(bufs[1], c(0)))]
  with pytest.raises(NotImplementedError, match=r"kernel k takes 32 buffers and scalars; Metal binds at most 31"):
    MetalRenderer().render("k", uops)
  src = MetalRenderer().render("k", bufs[:31] + uops[32:])
  assert "[[buffer(30)]]" in src and "[[buffer(31)]]" not in src
