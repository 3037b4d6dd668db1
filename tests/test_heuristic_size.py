"""The heuristic weighs code size (tinyplug/passes/heuristic.py): a register tile's expanded kernel stays within
EXPAND_BUDGET, `x @ w.T` unrolls its contiguous reduction instead of a tile of gathers, a short second axis is upcast
whole; the values stay those of numpy, and the size estimate agrees with what the expand stage builds."""
import numpy as np
import pytest
from tinyplug.codegen import KernelContext, get_program, run_pipeline
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.heuristic import EXPAND_BUDGET, expanded_size, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from machine_fakes import forget_built_graphs

RNG = np.random.default_rng(1)

@pytest.fixture(autouse=True)
def avx512(avx512_machine):
  """Every decision below is AVX-512's, whatever the host."""
  return avx512_machine

def item(t: Tensor):
  items, _ = create_schedule([t.uop])
  assert len(items) == 1, items   # inputs are realized already
  return items[0]

def lower_and_run(t: Tensor):
  """The heuristic's program for the one kernel of `t`, run on CPU: (values, program, expanded graph size)."""
  it, dev = item(t), Device["CPU"]
  spec = get_program(it.ast, dev.renderer)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in it.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
  ctx = KernelContext(dev.renderer)
  expanded = run_pipeline(it.ast, dev.renderer, ctx, until="symbolic_postopt")   # the graph the expand stage built
  return bufs[0].numpy().reshape(t.shape), spec, len(expanded.toposort())

def expanded_with(ast, opts: list[Opt]) -> int:
  k = Kernel(ast, Device["CPU"].renderer)
  for o in opts: k.apply_opt(o)
  return expanded_size(k.sink)

def cpu(a: np.ndarray) -> Tensor: return Tensor(a, device="CPU").realize()

def test_estimate_matches_the_expand_stage():
  r = Device["CPU"].renderer
  a, b = cpu(RNG.random((128, 64), dtype=np.float32)), cpu(RNG.random((64, 96), dtype=np.float32))
  x, w = cpu(RNG.random((8, 4, 12, 12), dtype=np.float32)), cpu(RNG.random((16, 4, 3, 3), dtype=np.float32))
  cases = [(a @ b, [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2)]),
           (x.conv2d(w), [Opt(OptOps.UPCAST, 3, 10), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 3)]),
           ((a.exp() * 2).sin(), [Opt(OptOps.UPCAST, 1, 16)])]
  for t, opts in cases:
    ast = item(t).ast
    real = len(run_pipeline(ast, r, KernelContext(r, opts=opts), until="symbolic_postopt").toposort())
    assert 0.8 * real <= expanded_with(ast, opts) <= 1.25 * real, (opts, expanded_with(ast, opts), real)
    assert expanded_size(Kernel(ast, r).sink) == len(ast.toposort())   # nothing upcast: the AST itself

def test_heavy_reduction_tile_stays_within_the_budget():
  # a pow per pair of rows: every lane of the register tile copies the whole body (a 512x512x64 one with the plain
  # matmul's 32x8 tile was ~5,900 UOps expanded, 6,500 in the program, 2.4 s of LLVM); a small budget keeps this fast
  a, b = RNG.random((256, 1, 64), dtype=np.float32), RNG.random((1, 256, 64), dtype=np.float32)
  t = ((cpu(a) - cpu(b)).abs() ** 1.5).sum(-1)
  with Context(EXPAND_BUDGET=1024):
    got, spec, expanded = lower_and_run(t)
  np.testing.assert_allclose(got, (np.abs(a - b) ** 1.5).sum(-1), rtol=1e-4)
  assert expanded <= 1.25 * 1024 and any(o.op is OptOps.UPCAST for o in spec.applied_opts)
  assert expanded_with(item(t).ast, list(spec.applied_opts)) <= 1024
  with Context(EXPAND_BUDGET=0):   # no cap: the tile the work budget allows, larger
    uncapped = heuristic_opts(Kernel(item(t).ast, Device["CPU"].renderer))
  assert expanded_with(item(t).ast, uncapped) > 1024

def test_matmul_with_a_transposed_weight_unrolls_the_reduction():
  # x @ w.T (a linear layer's forward): both inputs contiguous along k, so the reduction becomes vector loads;
  # the plain matmul tile (32x8 lanes of gathers, 256 scalar accumulators) was ~2,400 program UOps (a larger one packs
  # W first: tests/test_heuristic_attention.py)
  x, w = RNG.standard_normal((128, 128)).astype(np.float32), RNG.standard_normal((512, 128)).astype(np.float32)
  got, spec, _ = lower_and_run(cpu(x) @ cpu(w).T)
  np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-3)
  assert Opt(OptOps.UNROLL, 0, 16) in spec.applied_opts and len(spec.uops) < 1000
  # a plain matmul keeps its wide register tile
  x2 = RNG.standard_normal((256, 128)).astype(np.float32)
  plain = heuristic_opts(Kernel(item(cpu(x2) @ cpu(w.T.copy())).ast, Device["CPU"].renderer))
  assert Opt(OptOps.UPCAST, 1, 32) in plain and not any(o.op is OptOps.UNROLL for o in plain)

def test_linear_with_bias_and_an_odd_width_unrolls_the_reduction():
  # a bias added after `x @ w.T` is read along the row; only the loads that walk the reduction decide the tile, so a
  # 1000-wide layer keeps the unrolled reduction (it had taken a padded tile of gathers: 4x slower)
  x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((64, 256), (1000, 256), (1000,)))
  got, spec, _ = lower_and_run(cpu(x).linear(cpu(w).T, cpu(b)))
  np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-3)
  assert Opt(OptOps.UNROLL, 0, 16) in spec.applied_opts and not any(o.op is OptOps.PADTO for o in spec.applied_opts)

def test_heavy_epilogue_keeps_the_row_tile():
  # gelu's gradient fused after `g @ W` (a transformer MLP's backward): its code runs once per output, outside the
  # reduction's loop, and takes up to EPILOGUE_BUDGET_TIMES the budget, so the tile keeps several rows (one row,
  # which the whole-kernel budget had left, was 4.5x slower); the loop's part stays within EXPAND_BUDGET
  import torch
  from tinyplug.passes.heuristic import EPILOGUE_BUDGET_TIMES, expanded_sizes
  pre, g, w = (RNG.standard_normal(s).astype(np.float32) for s in ((64, 512), (64, 128), (128, 512)))
  p = Tensor(pre, device="CPU", requires_grad=True)
  (p.gelu() @ cpu(w).T).backward(cpu(g))
  items, _ = create_schedule([p.grad.uop])
  (ast,) = [it.ast for it in items if Kernel(it.ast, Device["CPU"].renderer).reduce_axes]
  opts = heuristic_opts(Kernel(ast, Device["CPU"].renderer))
  rows = [o.arg for o in opts if o.op is OptOps.UPCAST and o.axis == 0]
  assert rows and rows[0] >= 4, opts
  k = Kernel(ast, Device["CPU"].renderer)
  for o in opts: k.apply_opt(o)
  total, in_loop = expanded_sizes(k.sink)
  assert in_loop <= EXPAND_BUDGET.value < total <= EPILOGUE_BUDGET_TIMES * EXPAND_BUDGET.value
  tp = torch.tensor(pre, requires_grad=True)
  (torch.nn.functional.gelu(tp, approximate="tanh") @ torch.tensor(w).T).backward(torch.tensor(g))
  np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_loop_part_of_the_estimate():
  # a matmul's loads and multiply-adds are in its loop, its output's addresses and store are not; an elementwise
  # kernel has no loop
  from tinyplug.passes.heuristic import expanded_sizes
  a, b = cpu(RNG.random((128, 64), dtype=np.float32)), cpu(RNG.random((64, 96), dtype=np.float32))
  k = Kernel(item(a @ b).ast, Device["CPU"].renderer)
  for o in (Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4)): k.apply_opt(o)
  total, in_loop = expanded_sizes(k.sink)
  assert 0 < in_loop < total and in_loop >= 4 * 16   # at least the tile's products
  assert expanded_sizes(Kernel(item(a.exp()).ast, Device["CPU"].renderer).sink)[1] == 0

def test_short_second_axis_is_upcast_whole():
  # a 9216->10 linear layer's weight gradient: all 10 rows in the tile, so the 9216-wide input is read once
  g, x = RNG.standard_normal((64, 10)).astype(np.float32), RNG.standard_normal((64, 9216)).astype(np.float32)
  got, spec, _ = lower_and_run(cpu(g).T @ cpu(x))
  np.testing.assert_allclose(got, g.T @ x, rtol=1e-4, atol=1e-3)
  assert Opt(OptOps.UPCAST, 0, 10) in spec.applied_opts and Opt(OptOps.UPCAST, 1, 16) in spec.applied_opts

def test_elementwise_rows_are_not_capped():
  # a heavy elementwise row (a random init's hash) is still upcast 13 wide: its lanes become one vector (1.7x faster
  # than by 2 in an A/B), though the expanded graph is over the budget
  t = Tensor.rand(512, 26, device="CPU")
  items, _ = create_schedule([t.uop])
  opts = heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))
  assert Opt(OptOps.UPCAST, 1, 13) in opts and expanded_with(items[-1].ast, opts) > EXPAND_BUDGET.value

def phase_kernels(t: Tensor) -> list:
  from tinyplug.passes.heuristic import _gated_by_parity
  items, _ = create_schedule([t.uop])
  asts = [it.ast for it in items if it.ast.op.name == "SINK"]
  return [a for a in asts if (k := Kernel(a, Device["CPU"].renderer)).loop_axes and not k.reduce_axes and _gated_by_parity(k)]

def test_phase_interleave_is_upcast_by_its_stride():
  # a stride-2 convolution's input gradient interleaves its phases (every other element from another buffer, gated
  # by `% 2`): the row and the axis above upcast by 2 (each copy one phase, its gate a constant), then the row by 4
  # (16 wide: 8 per phase) or by its whole phase row (26 wide: 13), no remainder left in the program; a 38-wide row
  # (19 per phase) stays a loop; the gradients match torch
  import torch
  for size, lanes in ((16, 4), (26, 13), (38, None)):
    xs, ws = RNG.standard_normal((2, 3, size, size)).astype(np.float32), RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    x, w = Tensor(xs, device="CPU", requires_grad=True), Tensor(ws, device="CPU")
    x.conv2d(w, stride=2).square().sum().backward()
    (ast,) = phase_kernels(x.grad)
    opts = heuristic_opts(Kernel(ast, Device["CPU"].renderer))
    if lanes is None: assert opts == [], opts
    else:
      assert opts == [Opt(OptOps.UPCAST, 3, 2), Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 3, lanes)], opts
      src = get_program(ast, Device["CPU"].renderer, opts=opts).src
      assert "srem" not in src and "load <4 x float>" in src   # 13 lanes load as 8 + 4 + 1
    tx = torch.tensor(xs, requires_grad=True)
    torch.nn.functional.conv2d(tx, torch.tensor(ws), stride=2).square().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_conv_transpose_phases_match_torch():
  from tinyplug.tensor_ops.nn import _phased_conv_transpose
  # conv_transpose2d interleaves one convolution per output phase: strides 2 and 3, odd sizes, rows the phase rule
  # upcasts (24 and 18 wide) and rows it leaves a loop (38 wide: 19 per phase; 19 wide at stride 3); values match torch
  import torch
  cases = [((2, 6, 5, 12), (6, 4, 4, 4), 2, 1, True), ((2, 6, 7, 9), (6, 4, 4, 4), 2, 1, True),
           ((2, 6, 7, 19), (6, 4, 4, 4), 2, 1, False), ((2, 5, 7, 8), (5, 3, 3, 3), 3, 0, True),
           ((1, 3, 5, 7), (3, 2, 3, 3), 3, 1, False)]
  for xsh, wsh, stride, pad, phased in cases:
    xs, ws = RNG.standard_normal(xsh).astype(np.float32), RNG.standard_normal(wsh).astype(np.float32)
    # the per-phase form (k4 s2 now runs as one sub-pixel kernel, tests/test_subpixel_conv_transpose.py)
    out = _phased_conv_transpose(cpu(xs), cpu(ws), 1, (stride,) * 2, (1, 1), (pad,) * 2, (0, 0))
    asts = phase_kernels(out)
    assert asts and all(bool(heuristic_opts(Kernel(a, Device["CPU"].renderer))) == phased for a in asts), (xsh, stride)
    want = torch.nn.functional.conv_transpose2d(torch.tensor(xs), torch.tensor(ws), stride=stride, padding=pad).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

def test_long_reduction_takes_a_26_wide_row_whole():
  # a convolution over 64 channels with a 26-wide output row: the whole row (two vectors) with 4 output channels;
  # a one-channel convolution of the same width keeps half the row (13); values match torch
  import torch
  from tinyplug.passes.heuristic import _small_window_tile
  xs, ws = RNG.standard_normal((2, 64, 28, 28)).astype(np.float32), RNG.standard_normal((8, 64, 3, 3)).astype(np.float32)
  got, spec, _ = lower_and_run(cpu(xs).conv2d(cpu(ws)))
  assert Opt(OptOps.UPCAST, 3, 26) in spec.applied_opts and Opt(OptOps.UPCAST, 1, 4) in spec.applied_opts
  want = torch.nn.functional.conv2d(torch.tensor(xs), torch.tensor(ws)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
  one = cpu(xs[:, :1]).conv2d(cpu(ws[:, :1]))
  assert Opt(OptOps.UPCAST, 3, 13) in _small_window_tile(Kernel(item(one).ast, Device["CPU"].renderer))

def test_vector_channels_take_a_wider_tile(vector_machine):
  # a strided convolution's weight gradient reads the output gradient through a copy with the channel innermost:
  # its channel lanes are vectors, so the 3x3 tile takes 16 of them (past SMALL_TILE_BUDGET); values match torch.
  # On AVX-512 (AVX2 reads a copy blocked by channels, one vector of them: tests/test_conv_avx2.py)
  import torch
  vector_machine(64, 32)
  forget_built_graphs()
  xs, ws = RNG.standard_normal((4, 8, 13, 13)).astype(np.float32), RNG.standard_normal((32, 8, 3, 3)).astype(np.float32)
  x, w = Tensor(xs, device="CPU", requires_grad=True), Tensor(ws, device="CPU", requires_grad=True)
  x.conv2d(w, stride=2).sum().backward()
  items, _ = create_schedule([w.grad.uop])
  progs = [get_program(it.ast, Device["CPU"].renderer) for it in items if it.ast.op.name == "SINK"]
  (wgrad,) = [p for p in progs if p.name.startswith("r_32_8_3_3_")]   # (cout, cin, 3, 3), summed over batch and rows
  assert Opt(OptOps.UPCAST, 0, 16) in wgrad.applied_opts and "fmul contract <16 x float>" in wgrad.src
  xt, wt = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
  torch.nn.functional.conv2d(xt, wt, stride=2).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_strided_row_takes_a_short_row_and_wide_channels():
  # a stride-2 convolution reads its 12-wide output row from every other input element: lanes along it are gathers,
  # so the tile is 4 of the row by 16 output channels (whose weights do not depend on the row), and its math is
  # vectors along those channels (the weight is read from a copy with the output channel innermost, the first
  # kernel); values match torch
  import torch
  xs, ws = RNG.standard_normal((2, 8, 26, 26)).astype(np.float32), RNG.standard_normal((32, 8, 3, 3)).astype(np.float32)
  t = cpu(xs).conv2d(cpu(ws), stride=2)
  items, _ = create_schedule([t.uop])
  assert [it.ast.op.name for it in items] == ["SINK", "SINK"]
  spec = get_program(items[-1].ast, Device["CPU"].renderer)
  assert Opt(OptOps.UPCAST, 3, 4) in spec.applied_opts and Opt(OptOps.UPCAST, 1, 16) in spec.applied_opts
  assert Opt(OptOps.UPCAST, 2, 2) in spec.applied_opts   # two rows: 8 vector accumulators
  assert "fmul contract <16 x float>" in spec.src and "fmul contract float" not in spec.src
  want = torch.nn.functional.conv2d(torch.tensor(xs), torch.tensor(ws), stride=2).numpy()
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-3)
