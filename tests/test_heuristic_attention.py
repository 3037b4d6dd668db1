"""Attention on CPUs (issue 20): `q @ k^T` reads k across its rows (both inputs contiguous along the reduction), so a
large enough one packs k^T into column panels first (passes/pack.py: `should_pack_transposed`) and then runs the
outer-product register tile of `g @ W`; softmax's row reductions over the scores read them as vectors
(`_row_reduce_vector`), and its exp rows are a whole vector register wide (`math_lanes`). Decisions for fake
machines (AVX-512, AVX2, NEON) fed through the CPU renderer; values against torch."""
import numpy as np
import pytest
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import cpu_tile, heuristic_opts
from tinyplug.passes.pack import should_pack_transposed
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(20)

MACHINES = {"avx512": (64, 32), "avx2": (32, 16), "neon": (16, 32)}   # vector bytes, vector registers

def _items(t: Tensor) -> list:
  schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
  return create_schedule([t.uop])[0]

def _kernels(t: Tensor) -> list[Kernel]:
  return [Kernel(it.ast, Device["CPU"].renderer) for it in _items(t)]

def _sizes(axes) -> list[int]: return [r.src[0].arg for r in axes]

@pytest.mark.parametrize("machine", MACHINES)
def test_q_kt_packs_k_and_takes_the_outer_product_tile(vector_machine, machine):
  r = vector_machine(*MACHINES[machine])
  width, rows = cpu_tile(r)
  q, k = Tensor.empty(8, 12, 128, 64, device="CPU"), Tensor.empty(8, 12, 128, 64, device="CPU")
  ks = _kernels(q @ k.transpose(-2, -1))
  # the panels of k^T (a copy, no reduction), then the matmul; before, one kernel read k across its rows
  assert len(ks) == 2 and not ks[0].reduce_axes and _sizes(ks[0].loop_axes) == [8, 12, 128 // width, 64, width]
  mm = ks[1]
  # k's panels are read along the output row: the tile of `g @ W`, no reduction unrolled into lanes
  opts = heuristic_opts(mm)
  assert opts[:2] == [Opt(OptOps.UPCAST, 3, width), Opt(OptOps.UPCAST, 2, rows)], opts
  assert not any(o.op is OptOps.UNROLL for o in opts)

@pytest.mark.parametrize("machine,head,tile", [("avx512", 64, (64, 4)), ("avx2", 32, (32, 2)), ("neon", 16, (16, 4)),
                                               ("avx2", 64, (16, 4)), ("avx512", 128, (32, 8))])
def test_attn_v_takes_a_row_of_up_to_two_tiles_whole(vector_machine, machine, head, tile):
  # attn @ v: v read along its rows; a row of at most twice the CPU tile's width is taken whole, with as many rows as
  # keep cpu_tile's count of vector accumulators (before: 32 x 8 on AVX-512, v's rows read in halves by two tiles);
  # a wider row keeps the CPU tile
  vector_machine(*MACHINES[machine])
  a, v = Tensor.empty(8, 12, 128, 128, device="CPU"), Tensor.empty(8, 12, 128, head, device="CPU")
  (mm,) = _kernels(a @ v)
  assert heuristic_opts(mm)[:2] == [Opt(OptOps.UPCAST, 3, tile[0]), Opt(OptOps.UPCAST, 2, tile[1])]

@pytest.mark.parametrize("machine", MACHINES)
def test_k_cut_from_a_qkv_buffer_packs_too(vector_machine, machine):
  # q, k and v cut from one projection's output (`qkv.reshape(b, t, 3, h, d).permute(2, 0, 3, 1, 4)`): k's view
  # starts part way into the buffer (a shrink), still contiguous along the reduction; it was left unpacked
  r = vector_machine(*MACHINES[machine])
  width, _ = cpu_tile(r)
  qkvn = RNG.standard_normal((8, 128, 3 * 4 * 64)).astype(np.float32)
  q, k, _v = Tensor(qkvn, device="CPU").realize().reshape(8, 128, 3, 4, 64).permute(2, 0, 3, 1, 4)
  s = q @ k.transpose(-2, -1)
  ks = _kernels(s)
  panels = [kn for kn in ks if not kn.reduce_axes and _sizes(kn.loop_axes)[-1] == width]
  assert len(panels) == 1 and _sizes(panels[0].loop_axes) == [8, 4, 128 // width, 64, width]
  qt, kt, _ = torch.from_numpy(qkvn).reshape(8, 128, 3, 4, 64).permute(2, 0, 3, 1, 4)
  np.testing.assert_allclose(s.numpy(), (qt @ kt.transpose(-2, -1)).numpy(), rtol=1e-4, atol=1e-4)

def test_should_pack_transposed_weighs_work_rows_and_panels(vector_machine):
  r = vector_machine(64, 32)   # panels of 32
  assert should_pack_transposed(96, 128, 128, 64, r)        # attention scores 8x12x128x64
  assert should_pack_transposed(1, 256, 512, 128, r)        # a linear layer x @ W.T of 2^24 multiply-adds
  assert not should_pack_transposed(1, 128, 512, 128, r)    # half that work: the dot-product tile stays
  assert not should_pack_transposed(4096, 32, 128, 64, r)   # 32 rows of A: the copy is reused too little
  assert not should_pack_transposed(96, 128, 32, 64, r)     # one panel: laid out so already
  assert not should_pack_transposed(96, 128, 120, 64, r)    # no whole panels
  # a renderer without caches or vector registers declared: nothing to pack for
  assert not should_pack_transposed(96, 128, 128, 64, None)

def test_small_q_kt_keeps_the_dot_product_tile(vector_machine):
  vector_machine(64, 32)
  q, k = Tensor.empty(1, 2, 128, 64, device="CPU"), Tensor.empty(1, 2, 128, 64, device="CPU")
  ks = _kernels(q @ k.transpose(-2, -1))
  assert len(ks) == 1 and heuristic_opts(ks[0])[0] == Opt(OptOps.UNROLL, 0, 8)

@pytest.mark.parametrize("machine", MACHINES)
def test_softmax_rows_of_scores_read_vectors(vector_machine, machine):
  r = vector_machine(*MACHINES[machine])
  lanes = r.vector_bytes // 4
  q, k, v = (Tensor.empty(8, 12, 128, 64, device="CPU") for _ in range(3))
  ks = _kernels(q.scaled_dot_product_attention(k, v))
  rows = [kr for kr in ks if _sizes(kr.loop_axes) == [8, 12, 128] and _sizes(kr.reduce_axes) == [128]]
  assert len(rows) == 2   # the max, then the sum of exps
  for kr in rows:   # before: unrolled by 4 into scalar lanes whatever the machine
    assert heuristic_opts(kr) == [Opt(OptOps.UNROLL, 0, lanes)]
  exp_rows = [kr for kr in ks if _sizes(kr.loop_axes) == [8, 12, 128, 128] and not kr.reduce_axes]
  assert len(exp_rows) == 1 and heuristic_opts(exp_rows[0]) == [Opt(OptOps.UPCAST, 3, lanes)]

def test_a_long_row_sum_reads_one_row_at_a_time(vector_machine):
  vector_machine(64, 32)
  (kr,) = _kernels(Tensor.empty(1024, 1024, device="CPU").sum(1))
  assert heuristic_opts(kr) == [Opt(OptOps.UNROLL, 0, 16)]   # one stream per row, a 16-lane accumulator

def _torch_sdpa(q, k, v, **kw):
  return torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), **kw).numpy()

@pytest.mark.parametrize("shape", [(8, 12, 128, 64), (7, 5, 37, 29), (1, 1, 128, 64), (2, 3, 96, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_torch(shape, causal):
  q, k, v = (RNG.standard_normal(shape).astype(np.float32) for _ in range(3))
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=causal).numpy()
  np.testing.assert_allclose(got, _torch_sdpa(q, k, v, is_causal=causal), rtol=1e-4, atol=1e-4)

def test_sdpa_with_a_bool_mask_matches_torch():
  q, k, v = (RNG.standard_normal((2, 4, 128, 64)).astype(np.float32) for _ in range(3))
  mask = RNG.random((128, 128)) < 0.7
  mask[:, 0] = True   # no row wholly masked
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(mask)).numpy()
  want = _torch_sdpa(q, k, v, attn_mask=torch.from_numpy(mask))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def test_sdpa_fp16_matches_torch():
  q, k, v = (RNG.standard_normal((2, 4, 128, 64)).astype(np.float16) for _ in range(3))
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).numpy()
  want = _torch_sdpa(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)

@pytest.mark.parametrize("shape", [(8, 12, 128, 64), (1, 2, 37, 29)])
def test_q_kt_and_x_wt_match(shape):
  q, k = RNG.standard_normal(shape).astype(np.float32), RNG.standard_normal(shape).astype(np.float32)
  np.testing.assert_allclose((Tensor(q) @ Tensor(k).transpose(-2, -1)).numpy(), q @ np.swapaxes(k, -1, -2),
                             rtol=1e-4, atol=1e-3)
  x, w = RNG.standard_normal((256, 128)).astype(np.float32), RNG.standard_normal((512, 128)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("shape", [(2, 3, 128, 64), (8, 12, 128, 64)])   # the second packs k^T (and dO @ v^T)
def test_sdpa_gradients_match_torch(shape):
  q, k, v = (RNG.standard_normal(shape).astype(np.float32) for _ in range(3))
  g = RNG.standard_normal(shape).astype(np.float32)
  tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
  (tq.scaled_dot_product_attention(tk, tv, is_causal=True) * Tensor(g)).sum().backward()
  pq, pk, pv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
  (torch.nn.functional.scaled_dot_product_attention(pq, pk, pv, is_causal=True) * torch.from_numpy(g)).sum().backward()
  for mine, ref in ((tq, pq), (tk, pk), (tv, pv)):
    np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-3, atol=1e-3)

@pytest.mark.parametrize("machine", MACHINES)
def test_an_input_gradient_g_wt_packs_w_too(vector_machine, machine):
  # autograd builds x.grad = g @ W.T as (m, k, n) summed over the middle axis: the same matmul as q @ k^T once its
  # reduction is moved last, so W (stored N x K for it) is packed into panels as well
  r = vector_machine(*MACHINES[machine])
  width, _ = cpu_tile(r)
  x, w = Tensor.empty(64, 4096, device="CPU", requires_grad=True), Tensor.empty(4096, 128, device="CPU")
  ((x @ w) * Tensor.empty(64, 128, device="CPU")).sum().backward()   # an upstream gradient that is data
  ks = _kernels(x.grad)
  assert len(ks) == 2 and not ks[0].reduce_axes and _sizes(ks[0].loop_axes) == [4096 // width, 128, width]
  assert not any(o.op is OptOps.UNROLL for o in heuristic_opts(ks[1]))

def test_packed_input_gradients_match_torch():
  x_np, w_np = RNG.standard_normal((64, 2048)).astype(np.float32), RNG.standard_normal((2048, 96)).astype(np.float32)
  g_np = RNG.standard_normal((64, 96)).astype(np.float32)
  x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
  xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
  ((x @ w) * Tensor(g_np)).sum().backward()
  ((xt @ wt) * torch.tensor(g_np)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"mask": True}, {"float_mask": True}])
def test_sdpa_repeated_calls_use_each_calls_inputs(kw):
  # from the second call with a signature, the graph is a template's (rebuilt over the call's own inputs, never run
  # through the method's body): every call on new values still gives torch's result
  shape = (2, 3, 64, 32)
  for _ in range(4):
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for _ in range(3))
    mask = None
    if kw.get("mask"): mask = RNG.random((64, 64)) < 0.6; mask[:, 0] = True
    if kw.get("float_mask"): mask = RNG.standard_normal((64, 64)).astype(np.float32)
    got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), None if mask is None else Tensor(mask),
                                                 is_causal=kw.get("is_causal", False)).numpy()
    want = _torch_sdpa(q, k, v, attn_mask=None if mask is None else torch.from_numpy(mask),
                       is_causal=kw.get("is_causal", False))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def test_sdpa_template_holds_the_gradient():
  shape = (1, 2, 37, 29)
  for _ in range(3):   # the third call runs from the template
    q, k, v = (RNG.standard_normal(shape).astype(np.float32) for _ in range(3))
    tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
    tq.scaled_dot_product_attention(tk, tv).square().sum().backward()
    pq, pk, pv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(pq, pk, pv).square().sum().backward()
    for mine, ref in ((tq, pq), (tk, pk), (tv, pv)):
      np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-3, atol=1e-3)

def test_sdpa_dropout_draws_new_numbers_every_call():
  q, k, v = (Tensor(RNG.standard_normal((1, 2, 32, 16)).astype(np.float32)) for _ in range(3))
  plain = q.scaled_dot_product_attention(k, v).numpy()
  with Tensor.train():
    outs = [q.scaled_dot_product_attention(k, v, dropout_p=0.5).numpy() for _ in range(4)]
  for a, b in zip(outs, outs[1:]): assert not np.allclose(a, b)   # a template would repeat one mask
  assert all(not np.allclose(o, plain) for o in outs)
  # out of training, dropout is off: the plain result
  np.testing.assert_allclose(q.scaled_dot_product_attention(k, v, dropout_p=0.5).numpy(), plain, rtol=1e-6)
