"""The vectorize stage (tinyplug/passes/vectorize.py): upcast/unroll lanes become vector UOps within the widths a
renderer declares, values stay equal to numpy on every device, and the PYTHON interpreter runs the vector programs
that GPU-style renderers get."""
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.passes.vectorize import Vectorizer, split_offset
from tinyplug.device import Device
from tinyplug.runtime.python import PythonRenderer
from tinyplug.schedule import create_schedule
from tinyplug.uop import UOp, Ops, dtypes

RNG = np.random.default_rng(0)

def _f32(*shape): return RNG.standard_normal(shape).astype(np.float32)

# name: (inputs, tensor program, numpy reference)
CASES = {
  "chain": ((_f32(64, 64), _f32(64, 64), _f32(64, 64)), lambda a, b, c: ((a * b) + c).relu() * 0.5,
            lambda a, b, c: np.maximum(a * b + c, 0) * 0.5),
  "sum_all": ((_f32(4096),), lambda a: a.sum(), lambda a: a.sum()),
  "sum_rows": ((_f32(33, 70),), lambda a: a.sum(1), lambda a: a.sum(1)),
  "max_cols": ((_f32(64, 48),), lambda a: a.max(0), lambda a: a.max(0)),
  "matmul": ((_f32(48, 32), _f32(32, 64)), lambda a, b: a @ b, lambda a, b: a @ b),
  "matmul_odd": ((_f32(13, 7), _f32(7, 11)), lambda a, b: a @ b, lambda a, b: a @ b),
  "odd_sizes": ((_f32(7, 13),), lambda a: a.exp2() + 1, lambda a: np.exp2(a) + 1),
  "shifted": ((_f32(66),), lambda a: a[1:65] * a[:64], lambda a: a[1:65] * a[:64]),
  "padded": ((_f32(16, 16),), lambda a: a.pad(((1, 0), (1, 2))) + 1, lambda a: np.pad(a, ((1, 0), (1, 2))) + 1),
  # reads one to the left and right of each element of a zero-padded row: the edge lanes are gated per lane
  "padded_neighbours": ((_f32(8, 32),), lambda a: a.pad(((0, 0), (1, 1)))[:, :32] * 2 + a.pad(((0, 0), (1, 1)))[:, 2:],
                        lambda a: np.pad(a, ((0, 0), (1, 1)))[:, :32] * 2 + np.pad(a, ((0, 0), (1, 1)))[:, 2:]),
  "transposed": ((_f32(32, 16),), lambda a: a.permute(1, 0) * 2, lambda a: a.T * 2),
  "where": ((_f32(8, 64), _f32(8, 64)), lambda a, b: (a < b).where(a, b) + a.maximum(b),
            lambda a, b: np.where(a < b, a, b) + np.maximum(a, b)),
  # a stride-2 convolution: its channels vectorize, each lane stored on its own or by one scatter (LLVM)
  "strided_conv": ((_f32(2, 4, 9, 9), _f32(16, 4, 3, 3)), lambda x, w: x.conv2d(w, stride=2),
                   lambda x, w: np.einsum("bcyxij,ocij->boyx", np.lib.stride_tricks.sliding_window_view(x, (3, 3), (2, 3))[:, :, ::2, ::2], w)),
  # lanes at descending addresses: one vector load reversed where the renderer shuffles lanes (LLVM)
  "flipped": ((_f32(8, 64), _f32(8, 64)), lambda a, b: a.flip(1) * 2 + b, lambda a, b: a[:, ::-1] * 2 + b),
  "flipped_padded": ((_f32(6, 37),), lambda a: a.flip(1).pad(((0, 0), (2, 3))) + 1,
                     lambda a: np.pad(a[:, ::-1], ((0, 0), (2, 3))) + 1),
  "int_math": ((RNG.integers(-50, 50, (16, 32)).astype(np.int32),), lambda a: (a * 3 + 1) // 2 + a.sum(1, keepdim=True),
               lambda a: (a * 3 + 1) // 2 + a.sum(1, keepdims=True)),
}

def _check(name: str, device: str) -> None:
  inputs, prog, ref = CASES[name]
  got = prog(*(Tensor(x, device=device) for x in inputs)).numpy()
  want = ref(*inputs)
  if np.issubdtype(want.dtype, np.integer): np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("name", list(CASES))
def test_values_match_numpy(device, name):
  _check(name, device)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.int8, dtypes.int64, dtypes.float64, dtypes.bool],
                         ids=lambda d: d.name)
def test_dtypes_match_numpy(device, dt):
  a, b = RNG.standard_normal((8, 40)) * 4, RNG.standard_normal((8, 40)) * 4
  npdt = {dtypes.float16: np.float16, dtypes.int8: np.int8, dtypes.int64: np.int64, dtypes.float64: np.float64,
          dtypes.bool: np.bool_}[dt]
  if device == "CL" and dt == dtypes.float64 and not getattr(Device["CL"].renderer, "has_fp64", False):
    pytest.skip("this OpenCL device has no double")
  an, bn = a.astype(npdt), b.astype(npdt)
  ta, tb = Tensor(an, device=device), Tensor(bn, device=device)
  if dt == dtypes.bool:
    np.testing.assert_array_equal((ta ^ tb).numpy(), an ^ bn)
    return
  got = (ta * tb + ta).numpy()
  want = an * bn + an
  if dt == dtypes.float16:   # half math rounds every step to half, also where it runs in float (CL without fp16)
    np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(ta.sum().numpy().astype(np.float64), an.astype(np.float64).sum(),
                             rtol=2e-3 if dt == dtypes.float16 else 1e-6)

# ---------------- generated code ----------------

def _kernels(out: Tensor, renderer, opts=None) -> list:
  sched, _ = create_schedule([out.uop])
  return [get_program(si.ast, renderer, opts=opts) for si in sched if si.ast.op is Ops.SINK]

def _run_with_opts(out: Tensor, opts) -> np.ndarray:
  """Run `out`'s kernels on its device, the last one compiled with exactly `opts`, the others as the heuristic has them."""
  sched, _ = create_schedule([out.uop])
  dev = Device[out.device]
  for si in sched:
    assert si.ast.op is Ops.SINK, "inputs must be realized first"
    spec = get_program(si.ast, dev.renderer, opts=opts if si is sched[-1] else None)
    bufs = [b.ensure_allocated() for b in si.bufs]
    prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy()[:out.numel()].reshape(out.shape)

def _vector_uops(spec) -> set:
  return {u.op for u in spec.uops if u.dtype.count > 1 or getattr(u.dtype, "v", 1) > 1}

def test_llvm_source_has_vector_types():
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  a, b = Tensor(_f32(64, 64), device="PYTHON"), Tensor(_f32(64, 64), device="PYTHON")
  (spec,) = _kernels(a * b + a, LLVMRenderer())
  assert "load <4 x float>" in spec.src and "store <4 x float>" in spec.src
  (spec,) = _kernels(Tensor(_f32(16, 256), device="PYTHON").sum(1), LLVMRenderer(), opts=[Opt(OptOps.UNROLL, 0, 8)])
  assert "alloca [1 x <8 x float>]" in spec.src and "fadd reassoc contract <8 x float>" in spec.src

def test_llvm_per_lane_gates_are_one_masked_load():
  # a padded row read at an offset: its edge lanes are gated, its middle ones not; one masked vector load, whose
  # mask is an integer of lane bits (not a mask register shuffled lane by lane)
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  inputs, prog, _ = CASES["padded_neighbours"]
  (spec,) = _kernels(prog(Tensor(inputs[0], device="PYTHON")), LLVMRenderer(), opts=[Opt(OptOps.UPCAST, 1, 16)])
  assert "@llvm.masked.load.v16f32.p0(" in spec.src and "bitcast i16 " in spec.src
  assert "insertelement <16 x i1>" not in spec.src

def test_llvm_flipped_lanes_are_one_load_reversed():
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  inputs, prog, _ = CASES["flipped"]
  (spec,) = _kernels(prog(*(Tensor(x, device="PYTHON") for x in inputs)), LLVMRenderer(), opts=[Opt(OptOps.UPCAST, 1, 8)])
  assert "shufflevector <8 x float> %" in spec.src and "<8 x i32> <i32 7, i32 6, i32 5, i32 4, i32 3, i32 2, i32 1, i32 0>" in spec.src
  assert "load float" not in spec.src and spec.src.count("load <8 x float>") == 2

def test_llvm_strided_stores_vectorize_along_channels():
  # a stride-2 convolution's tile of 4 row positions by 16 output channels: the stores run along the row, whose lanes
  # read every other input element (gathers); grouped a channel plane apart instead, the lanes read one input value
  # and 16 consecutive weights (the weight copy conv2d reads has the output channel innermost): vector math
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  x, w = Tensor(_f32(2, 8, 17, 17), device="PYTHON").realize(), Tensor(_f32(16, 8, 3, 3), device="PYTHON").realize()
  sched, _ = create_schedule([x.conv2d(w, stride=2).uop])
  spec = get_program(sched[-1].ast, LLVMRenderer(), opts=[Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 1, 16)])
  assert "fmul contract <16 x float>" in spec.src and "fmul contract float" not in spec.src
  # stored turned round: each channel's 4 positions, one lane of each of the 4 accumulators, as one vector
  assert spec.src.count("store <4 x float>") == 16 and "@llvm.masked.scatter" not in spec.src

def test_llvm_channel_vectors_stored_as_rows():
  # a 7-position tile by 16 channels (a 28-wide row's tile): the math in channel vectors, each channel's 7 outputs
  # stored as 4 + 2 + 1 consecutive floats put together from the accumulators' lanes; the values against numpy
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  x, w = _f32(2, 8, 15, 15), _f32(16, 8, 3, 3)
  out = Tensor(x, device="PYTHON").conv2d(Tensor(w, device="PYTHON"), stride=2)
  sched, _ = create_schedule([out.uop])
  opts = [Opt(OptOps.UPCAST, 3, 7), Opt(OptOps.UPCAST, 1, 16)]
  spec = get_program(sched[-1].ast, LLVMRenderer(), opts=opts)
  assert "fmul contract <16 x float>" in spec.src and "@llvm.masked.scatter" not in spec.src
  assert [spec.src.count(f"store {t} %") for t in ("<4 x float>", "<2 x float>", "float")] == [16, 16, 16]
  # each 4-lane row two shuffles of pairs of accumulators, merged (not an extract and an insert per lane)
  assert spec.src.count("shufflevector <4 x float>") == 16 and "insertelement <4 x float>" not in spec.src
  xc, wc = Tensor(x, device="CPU").realize(), Tensor(w, device="CPU").realize()
  got = _run_with_opts(xc.conv2d(wc, stride=2), opts)
  want = np.einsum("bcyxij,ocij->boyx", np.lib.stride_tricks.sliding_window_view(x, (3, 3), (2, 3))[:, :, ::2, ::2], w)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def test_opencl_source_has_vector_types():
  pytest.importorskip("tinyplug_opencl")
  from tinyplug_opencl.renderer import OpenCLRenderer
  a, b = Tensor(_f32(48, 32), device="PYTHON"), Tensor(_f32(32, 64), device="PYTHON")
  (spec,) = _kernels(a @ b, OpenCLRenderer())
  assert "float4 acc0[1];" in spec.src and "vload4(0, " in spec.src and "vstore4(" in spec.src
  # no bool vectors in OpenCL C: comparisons stay per lane, on lanes of the vector loads
  (spec,) = _kernels((a[:, :16] < 0).where(a[:, :16], 1.0), OpenCLRenderer())
  assert "vload4(0, " in spec.src and "bool4" not in spec.src

def test_renderer_without_vector_widths_gets_scalars():
  class ScalarRenderer(PythonRenderer): vector_widths = {}
  a, b = Tensor(_f32(48, 32), device="PYTHON"), Tensor(_f32(32, 64), device="PYTHON")
  for spec in _kernels(a @ b, ScalarRenderer()) + _kernels((a * 2).sum(1), ScalarRenderer()):
    assert not _vector_uops(spec), spec.src
  assert any(_vector_uops(spec) for spec in _kernels(a @ b, PythonRenderer()))

def test_declared_widths_limit_vectors():
  class Only2(PythonRenderer): vector_widths = {dtypes.float32: (2,)}
  a = Tensor(_f32(16, 16), device="PYTHON")
  (spec,) = _kernels(a * 3, Only2(), opts=[Opt(OptOps.UPCAST, 1, 8)])
  widths = {u.dtype.count for u in spec.uops if u.dtype.count > 1}
  assert widths == {2}
  assert sum(u.op is Ops.STORE for u in spec.uops) == 4    # 8 lanes as four float2 stores

# ---------------- GPU renderers' programs on the PYTHON interpreter ----------------

def _run_lowered(renderer, out: Tensor) -> np.ndarray:
  """Lower every kernel of `out` (on PYTHON buffers) for `renderer` and run the programs on the PYTHON interpreter."""
  sched, becomes = create_schedule([out.uop])
  dev = Device["PYTHON"]
  for si in sched:
    assert si.ast.op is Ops.SINK, "inputs must be realized first"
    spec = get_program(si.ast, renderer)
    bufs = [b.ensure_allocated() for b in si.bufs]
    dev.make_program(spec, b"")(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
  return bufs[0].numpy()[:out.numel()].reshape(out.shape)

@pytest.mark.parametrize("name", ["chain", "sum_all", "sum_rows", "matmul", "matmul_odd", "padded", "shifted", "where",
                                  "padded_neighbours"])
def test_opencl_programs_on_python_interpreter(name):
  pytest.importorskip("tinyplug_opencl")
  from tinyplug_opencl.renderer import OpenCLRenderer
  inputs, prog, ref = CASES[name]
  out = prog(*(Tensor(x, device="PYTHON").realize() for x in inputs))
  np.testing.assert_allclose(_run_lowered(OpenCLRenderer(), out), ref(*inputs), rtol=1e-4, atol=1e-4)

# ---------------- the pass on hand-built graphs ----------------

def _store_graph(offsets: list[int], gates=None) -> UOp:
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(64), (), 0)
  src = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(64), (), 1)
  i = UOp(Ops.SPECIAL, dtypes.index, (), ("gidx0", 8))
  stores = []
  for k, off in enumerate(offsets):
    idx = i * 8 + off if off else i * 8
    load_index = UOp(Ops.INDEX, src.dtype, (src, idx) + ((gates[k],) if gates else ()))
    val = UOp(Ops.LOAD, dtypes.float, (load_index,)) * 2.0
    stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, idx)), val)))
  return UOp(Ops.SINK, dtypes.void, tuple(stores))

def test_split_offset_sees_constant_differences():
  i = UOp(Ops.SPECIAL, dtypes.index, (), ("gidx0", 8))
  j = UOp(Ops.SPECIAL, dtypes.index, (), ("gidx1", 8))
  assert split_offset((i * 4 + 3) + j)[0] == split_offset(j + i * 4)[0]
  assert split_offset((i * 4 + 3) + j)[1] - split_offset(j + i * 4)[1] == 3

def test_contiguous_stores_become_one_vector_store():
  out = Vectorizer(PythonRenderer()).stores(_store_graph([0, 1, 2, 3]))
  (store,) = out.src
  assert store.src[0].dtype.v == 4 and store.src[1].dtype == dtypes.float.vec(4)
  assert any(u.op is Ops.LOAD and u.dtype == dtypes.float.vec(4) for u in out.toposort())

def test_per_lane_gates_make_a_masked_vector_load_where_bools_vectorize():
  g = [UOp(Ops.SPECIAL, dtypes.index, (), ("gidx1", 2)) < k for k in range(4)]
  out = Vectorizer(PythonRenderer()).stores(_store_graph([0, 1, 2, 3], gates=g))
  (store,) = out.src
  assert store.src[1].dtype == dtypes.float.vec(4)
  (load,) = [u for u in out.toposort() if u.op is Ops.LOAD]
  assert load.dtype == dtypes.float.vec(4) and load.src[0].src[2].dtype == dtypes.bool.vec(4)   # one gate per lane

def test_strided_loads_and_per_lane_gates_fall_back_to_lanes():
  class NoBoolVectors(PythonRenderer):   # like OpenCL: no bool vectors, so no vector of gates either
    vector_widths = {dt: w for dt, w in PythonRenderer.vector_widths.items() if dt != dtypes.bool}
  g = [UOp(Ops.SPECIAL, dtypes.index, (), ("gidx1", 2)) < k for k in range(4)]
  out = Vectorizer(NoBoolVectors()).stores(_store_graph([0, 1, 2, 3], gates=g))
  (store,) = out.src
  assert store.src[1].dtype == dtypes.float.vec(4)
  assert not any(u.op is Ops.LOAD and u.dtype.count > 1 for u in out.toposort())   # per-lane gates: scalar loads
  assert any(u.op is Ops.VECTORIZE and len(set(u.src)) == 4 for u in out.toposort())
  # stores at every other address are not contiguous: they stay scalar
  assert len(Vectorizer(PythonRenderer()).stores(_store_graph([0, 2, 4, 6])).src) == 4

def test_llvm_costly_math_over_gathered_rows_keeps_a_vector_accumulator():
  # 8 rows of a 10-class logsumexp side by side: each step gathers one element of each row (stride 10), and the exp
  # then runs on the 8 lanes at once into an `<8 x float>` sum, rather than 8 scalar exps into 8 scalar sums
  pytest.importorskip("tinyplug_cpu_llvm")
  from tinyplug_cpu_llvm.renderer import LLVMRenderer
  a = _f32(64, 10)
  (spec,) = _kernels(Tensor(a).realize().logsumexp(1), LLVMRenderer(), opts=[Opt(OptOps.UPCAST, 0, 8)])
  assert "alloca [1 x <8 x float>]" in spec.src and "fadd reassoc contract <8 x float>" in spec.src
  assert "fmul contract <8 x float>" in spec.src    # the exp's polynomial, lane-wise
  # the max before it takes no costly math: its lanes keep scalar accumulators (a gathered vector max is slower)
  assert spec.src.count("alloca [1 x float]") == 8
  m = a.max(1, keepdims=True)
  np.testing.assert_allclose(_run_with_opts(Tensor(a).realize().logsumexp(1), [Opt(OptOps.UPCAST, 0, 8)]),
                             np.log(np.exp(a - m).sum(1)) + m[:, 0], rtol=2e-6, atol=2e-6)
