"""The small and skinny matmuls of a training step on CPUs: where the innermost output axis is read as vectors (the
weight gradient `x.T @ g`, the input gradient `g @ W`), the register tile of a small reduction is one vector wide
(`Renderer.vector_bytes`) by SMALL_VECTOR_ROWS rows; where both inputs are read along the reduction (`x @ W.T`) it
is read as vectors, summed across lanes once per output.
A bias gradient (a sum down the columns) reads a vector of outputs per step. Decisions for fake machines fed through
the CPU renderer; values against numpy, odd sizes included."""
import numpy as np
import pytest
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import SMALL_VECTOR_ROWS, heuristic_opts, vector_lanes
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(11)

def _operands(kind: str, m: int, n: int, k: int, empty: bool):
  """(x, y) with x @ y the layer's matmul: `fwd` x @ W.T, `wgrad` g.T @ x (the batch is k), `igrad` g @ W."""
  def t(*shape):
    if empty: return Tensor.empty(*shape, device="CPU"), None
    a = RNG.standard_normal(shape).astype(np.float32)
    return Tensor(a, device="CPU"), a
  if kind == "fwd": (x, xn), (w, wn) = t(m, k), t(n, k); return (x, w.T), (xn, None if empty else wn.T)
  if kind == "wgrad": (g, gn), (x, xn) = t(k, m), t(k, n); return (g.T, x), (None if empty else gn.T, xn)
  (g, gn), (w, wn) = t(m, k), t(k, n)
  return (g, w), (gn, wn)

def kernel(kind: str, m: int, n: int, k: int) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  (a, b), _ = _operands(kind, m, n, k, empty=True)
  items, _ = create_schedule([(a @ b).uop])
  return Kernel(items[-1].ast, Device["CPU"].renderer)

@pytest.mark.parametrize("kind,m,n,k", [("wgrad", 64, 64, 128), ("igrad", 128, 64, 64), ("wgrad", 64, 32, 128),
                                        ("wgrad", 128, 784, 64), ("igrad", 64, 784, 128), ("igrad", 64, 9216, 10)])
@pytest.mark.parametrize("regs,lanes", [((64, 32), 16), ((32, 16), 8)], ids=["avx512", "avx2"])
def test_vector_row_tile_is_one_vector_by_four_rows(vector_machine, kind, m, n, k, regs, lanes):
  vector_machine(*regs)
  kr = kernel(kind, m, n, k)
  assert vector_lanes(kr) == lanes
  assert heuristic_opts(kr) == [Opt(OptOps.UPCAST, 1, lanes), Opt(OptOps.UPCAST, 0, SMALL_VECTOR_ROWS)]

def test_the_lane_budget_stays_where_the_vector_row_has_too_few_rows(vector_machine):
  vector_machine(64, 32)
  # 10 rows: no 4 divides them (a 10-output layer's weight gradient); a row shorter than a vector
  assert heuristic_opts(kernel("igrad", 10, 64, 64)) == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2),
                                                         Opt(OptOps.UNROLL, 0, 4)]
  assert Opt(OptOps.UPCAST, 1, 16) not in heuristic_opts(kernel("igrad", 128, 10, 64))
  # ... and a large weight gradient of 10 rows keeps its whole-axis tile
  assert heuristic_opts(kernel("wgrad", 10, 9216, 64)) == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 10)]

@pytest.mark.parametrize("k,unroll", [(64, 8), (32, 4), (128, 16), (784, 16), (8, 4)])
def test_forward_sums_vectors_of_the_reduction_with_enough_steps(vector_machine, k, unroll):
  # x @ W.T reads both inputs along the reduction: vector loads of it, summed across lanes once per output, so the
  # vector is as wide as leaves REDUCE_VECTOR_STEPS steps (or the narrowest that divides a short one)
  vector_machine(64, 32)
  fwd = kernel("fwd", 128, 64, k)
  assert vector_lanes(fwd) == 0   # W read across its rows along the output row: gathers
  assert heuristic_opts(fwd)[:3] == [Opt(OptOps.UNROLL, 0, unroll), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)]

def test_forward_of_a_ten_output_layer_sums_vectors(vector_machine):
  # not taken for a convolution's odd row (the small-window tile): 5 outputs of the row, 2 rows
  vector_machine(64, 32)
  assert heuristic_opts(kernel("fwd", 64, 10, 9216)) == [Opt(OptOps.UNROLL, 0, 16), Opt(OptOps.UPCAST, 1, 5),
                                                         Opt(OptOps.UPCAST, 0, 2)]
  # an odd reduction has no vectors to read: the lane tile
  assert all(o.op is not OptOps.UNROLL for o in heuristic_opts(kernel("fwd", 13, 10, 37)))

def test_forward_of_a_computed_input_sums_vectors_too(vector_machine):
  vector_machine(64, 32)
  schedule._templates.clear()
  x, w = Tensor.empty(128, 64, device="CPU"), Tensor.empty(64, 64, device="CPU")
  items, _ = create_schedule([(x.relu() @ w.T).uop])   # the ReLU fused into the matmul's first input
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))[0] == Opt(OptOps.UNROLL, 0, 8)
  items, _ = create_schedule([((x.reshape(128, 1, 64) - w.reshape(1, 64, 64)).abs().sum(-1)).uop])   # no product
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))[0].op is not OptOps.UNROLL

def test_a_fused_input_widens_the_vector_row(vector_machine):
  # each input value behind a ReLU is computed again per tile that reads it: fewer, wider tiles
  vector_machine(64, 32)
  schedule._templates.clear()
  g, x = Tensor.empty(128, 64, device="CPU"), Tensor.empty(128, 64, device="CPU")
  items, _ = create_schedule([(g.T @ x.relu()).uop])
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer)) == [Opt(OptOps.UPCAST, 1, 32),
                                                                           Opt(OptOps.UPCAST, 0, 4)]
  vector_machine(32, 16)   # AVX2: 4 rows of 2 vectors, their loads and a broadcast fit 16 registers
  items, _ = create_schedule([(g.T @ x.relu()).uop])
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer)) == [Opt(OptOps.UPCAST, 1, 16),
                                                                           Opt(OptOps.UPCAST, 0, 4)]
  vector_machine(32, 8)    # 8 registers: one vector wide
  items, _ = create_schedule([(g.T @ x.relu()).uop])
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))[0] == Opt(OptOps.UPCAST, 1, 8)

def test_a_renderer_without_vector_registers_keeps_the_lane_budget(vector_machine):
  vector_machine(0, 0)
  kr = kernel("wgrad", 64, 64, 128)
  assert vector_lanes(kr) == 0
  assert heuristic_opts(kr) == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4)]

def test_large_matmuls_keep_the_register_tile(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(kernel("igrad", 1024, 1024, 1024))[:2] == [Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8)]

# odd sizes: rows no multiple of 4 (10, 7, 13), rows padded to a vector (40 -> 48, 50 -> 64 is not), skinny ones
VALUES = [("wgrad", 64, 64, 128), ("wgrad", 10, 64, 128), ("wgrad", 7, 40, 33), ("wgrad", 13, 50, 31),
          ("wgrad", 128, 784, 64), ("wgrad", 10, 800, 64), ("igrad", 128, 64, 10), ("igrad", 10, 64, 64),
          ("igrad", 6, 48, 17), ("igrad", 33, 784, 128), ("igrad", 64, 9216, 10), ("fwd", 128, 64, 64),
          ("fwd", 13, 10, 37), ("fwd", 128, 64, 32), ("fwd", 30, 36, 72), ("fwd", 64, 128, 784), ("fwd", 7, 12, 8)]

@pytest.mark.parametrize("kind,m,n,k", VALUES)
def test_training_matmul_values(kind, m, n, k):
  schedule._templates.clear()
  (a, b), (an, bn) = _operands(kind, m, n, k, empty=False)
  np.testing.assert_allclose((a @ b).numpy(), an @ bn, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("m,n,k", [(128, 64, 64), (30, 48, 40), (64, 32, 128)])
def test_training_step_shapes_with_relu_values(m, n, k):
  # the fused ReLU inputs of a step's gradient and forward matmuls
  schedule._templates.clear()
  gn, xn, wn = (RNG.standard_normal(s).astype(np.float32) for s in ((k, m), (k, n), (n, m)))
  g, x, w = (Tensor(a, device="CPU") for a in (gn, xn, wn))
  np.testing.assert_allclose((g.T @ x.relu()).numpy(), gn.T @ np.maximum(xn, 0), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose((g.relu() @ w.T).numpy(), np.maximum(gn, 0) @ wn.T, rtol=1e-4, atol=1e-3)

def test_a_column_sum_reads_a_vector_of_outputs(vector_machine):
  # a bias gradient: the batch reduced, the outputs contiguous
  vector_machine(64, 32)
  schedule._templates.clear()
  items, _ = create_schedule([Tensor.empty(128, 64, device="CPU").sum(0).uop])
  # the row whole (4 vectors: tests/test_heuristic_columns.py), each step of the reduction one contiguous read
  assert heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer)) == [Opt(OptOps.UPCAST, 0, 64)]
  items, _ = create_schedule([Tensor.empty(128, 64, device="CPU").sum(1).uop])   # along the rows: no column lanes
  assert Opt(OptOps.UPCAST, 0, 16) not in heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))

@pytest.mark.parametrize("shape", [(128, 64), (37, 48), (1000, 33), (256, 784), (5, 16), (64, 10)])
def test_column_sum_values(shape):
  schedule._templates.clear()
  a = RNG.standard_normal(shape).astype(np.float32)
  t = Tensor(a, device="CPU")
  np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose((t.relu() * 2).mean(0).numpy(), (np.maximum(a, 0) * 2).mean(0), rtol=1e-4, atol=1e-4)

def _host_has_avx2() -> bool:
  from tinyplug_cpu_llvm.compiler import host_target
  return "+avx2" in host_target()[1].split(",")

@pytest.mark.skipif(not _host_has_avx2(), reason="the host cannot run AVX2 code")
@pytest.mark.parametrize("kind,m,n,k", [("wgrad", 64, 64, 128), ("igrad", 128, 40, 64), ("fwd", 128, 64, 64),
                                        ("fwd", 64, 10, 800)])
def test_avx2_target_training_matmul_values(kind, m, n, k):
  # 16 vector registers of 32 bytes: 8-lane vector rows, 8-lane reduction vectors
  dev = "CPU:LLVM:x86-64,+avx2,+fma"
  schedule._templates.clear()
  (a, b), (an, bn) = _operands(kind, m, n, k, empty=False)
  np.testing.assert_allclose((a.to(dev).relu() @ b.to(dev)).numpy(), np.maximum(an, 0) @ bn, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(a.to(dev).sum(0).numpy(), an.sum(0), rtol=1e-4, atol=1e-3)
