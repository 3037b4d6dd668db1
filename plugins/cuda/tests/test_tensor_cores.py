"""Tensor cores of the CUDA C renderer: mma.sync m16n8k16 (f16/bf16 -> f32) from sm_80 on. The fragment layouts it
declares match the PTX ISA's formulas; the kernels with WMMAs compile with NVRTC for sm_80 and sm_90 (the PTX holds
the instruction); the emulator runs them (every lane's fragments through scratch and barriers) and matches numpy in
every work-item order; BEAM tries TC actions, TC=0 never. The values on a GPU: tinyplug/testing/test_tensor_cores.py
(DEV=CUDA, run by `pytest --pyargs tinyplug.testing` on a machine with one)."""
from __future__ import annotations
import dataclasses, re
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import KernelContext, get_program, run_pipeline
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug.uop.ops import Ops
from tinyplug.testing.kernels import run_kernel
from tinyplug_cuda.renderer import CUDARenderer
from tinyplug_cuda.tensor_cores import MMA_M16N8K16

RNG = np.random.default_rng(0)

def ptx_isa_position(matrix: int, lane: int, i: int) -> tuple[int, int]:
  """(row, col) of element i of `lane`'s fragment, as the PTX ISA writes it for mma.m16n8k16 with f16/bf16."""
  g, t = lane >> 2, lane % 4
  if matrix == 0: return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
  if matrix == 1: return 2 * t + (i & 1) + 8 * (i >> 1), g
  return g + 8 * (i >> 1), 2 * t + (i & 1)

@pytest.mark.parametrize("tc", MMA_M16N8K16, ids=lambda tc: tc.name)
def test_declared_layout_is_the_ptx_isa_one(tc):
  tc.check()
  assert tc.elements == (8, 4, 4) and tc.threads == 32 and tc.dims == (16, 8, 16)
  for matrix, count in enumerate(tc.elements):
    for lane in range(32):
      for i in range(count): assert tc.position(matrix, lane, i) == ptx_isa_position(matrix, lane, i)

def test_a_layout_that_misses_elements_is_refused():
  tc = MMA_M16N8K16[0]
  broken = dataclasses.replace(tc, element_offsets=(tc.element_offsets[0], ((0, 0),) * 4, tc.element_offsets[2]))
  with pytest.raises(ValueError, match="matrix B do not cover"): broken.check()

def test_advertised_from_sm_80():
  mma = [(dtypes.half, dtypes.float32), (dtypes.bfloat16, dtypes.float32), (dtypes.half, dtypes.half)]
  assert CUDARenderer("sm_75").tensor_cores == ()
  for r in (CUDARenderer("sm_80"), CUDARenderer("sm_86"), CUDARenderer("sm_90", wgmma=False)):
    assert [(tc.dtype_in, tc.dtype_out) for tc in r.tensor_cores] == mma
  # Hopper adds the wgmma cores (TC 3 and 4) after the mma.sync ones, so TC 0-2 mean the same on every arch
  assert [(tc.dtype_in, tc.dtype_out) for tc in CUDARenderer("sm_90").tensor_cores] == \
    mma + [(dtypes.half, dtypes.float32), (dtypes.bfloat16, dtypes.float32)]

# (input dtype, result dtype of the matmul, the tensor core's index, its name, its PTX instruction)
MMA = "mma.sync.aligned.m16n8k16.row.col"
CORES = [(dtypes.half, dtypes.float32, 0, "mma_m16n8k16_f16_f32", f"{MMA}.f32.f16.f16.f32"),
         (dtypes.bfloat16, dtypes.float32, 1, "mma_m16n8k16_bf16_f32", f"{MMA}.f32.bf16.bf16.f32"),
         (dtypes.half, dtypes.half, 2, "mma_m16n8k16_f16_f16", f"{MMA}.f16.f16.f16.f16")]

@pytest.mark.parametrize("dtype,acc,index,name,instruction", CORES, ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_matmul_renders_the_mma_and_compiles(nvrtc, render, tensor, arch, dtype, acc, index, name, instruction):
  out = tensor(64, 64, dtype=dtype).matmul(tensor(64, 48, dtype=dtype), dtype=acc)
  (spec,) = render(out, renderer=CUDARenderer(arch))
  assert spec.applied_opts[0] == Opt(OptOps.TC, 0, index)
  assert instruction in spec.src
  call = spec.src.split("__global__")[1].split(f"tp_{name}(")[1].split(")")[0]   # the kernel calls it
  assert "acc_val" in call.split(", ")[12]   # C is the accumulator (the WMMA accumulates: no ADD after it)
  assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"
  assert instruction in nvrtc.compile_cuda(spec.src, arch, ptx=True).decode()

def test_a_fully_unrolled_k_chains_the_wmmas(render, tensor):
  (spec,) = render(tensor(32, 32, dtype=dtypes.half) @ tensor(32, 16, dtype=dtypes.half), renderer=CUDARenderer("sm_80"),
                   opts=[Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 2)])
  first, second = [c.split(")")[0].split(", ")[12:] for c in spec.src.split("__global__")[1].split("tp_mma_m16n8k16_f16_f32(")[1:]]
  assert first == ["0.0f"] * 4 and all(c.startswith("alu") for c in second)
  assert not re.search(r"float \w+ = \(\w+\+\w+\)", spec.src)   # no float ADD: the tensor core sums

def test_sm_75_has_none(nvrtc, render, tensor):
  out = tensor(64, 32, dtype=dtypes.half) @ tensor(32, 48, dtype=dtypes.half)
  (spec,) = render(out, renderer=CUDARenderer("sm_75"))
  assert "mma" not in spec.src and not any(o.op is OptOps.TC for o in spec.applied_opts)
  nvrtc.compile_cuda(spec.src, "sm_75")
  with pytest.raises(KernelOptError, match="no tensor cores"):
    render(out, renderer=CUDARenderer("sm_75"), opts=[Opt(OptOps.TC, 0, 0)])

def _opt_graph(out: Tensor, renderer):
  (item,), _ = create_schedule([out.uop])
  return run_pipeline(item.ast, renderer, KernelContext(renderer), until="opt")

def test_tc_refuses_what_it_cannot_run(tensor):
  r = CUDARenderer("sm_80")
  h = dtypes.half
  def apply(out, opts):
    k = Kernel(_opt_graph(out, r), r)
    for o in opts: k.apply_opt(o)
  tc = [Opt(OptOps.TC, 0, 0)]
  with pytest.raises(KernelOptError, match="0 way"): apply(tensor(24, 16, dtype=h) @ tensor(16, 8, dtype=h), tc)
  with pytest.raises(KernelOptError, match="0 way"): apply(tensor(32, 16) @ tensor(16, 8), tc)   # float32
  with pytest.raises(KernelOptError, match="0 way"): apply(tensor(32, 16, dtype=h).sum(1), [Opt(OptOps.TC, 0, 0)])
  with pytest.raises(KernelOptError, match="first action"):
    apply(tensor(32, 16, dtype=h) @ tensor(16, 8, dtype=h), [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.TC, 0, 0)])
  apply(tensor(24, 16, dtype=h) @ tensor(16, 8, dtype=h), [Opt(OptOps.PADTO, 0, 16), *tc])   # padded: fits
  with pytest.raises(KernelOptError, match="does not exist"): apply(tensor(32, 16, dtype=h) @ tensor(16, 8, dtype=h), [Opt(OptOps.TC, 0, 5)])
  with pytest.raises(KernelOptError, match="tensor cores"):
    apply(tensor(32, 64, dtype=h) @ tensor(64, 8, dtype=h), [Opt(OptOps.TC, 0, 0), Opt(OptOps.GROUPTOP, 0, 2)])
  with Context(TC=0), pytest.raises(KernelOptError, match="TC=0"):
    apply(tensor(32, 16, dtype=h) @ tensor(16, 8, dtype=h), [Opt(OptOps.TC, 0, 0)])

def test_beam_tries_tc_first_and_not_with_tc_0(tensor):
  from tinyplug.search.runner import apply_all, candidate_actions
  r = CUDARenderer("sm_80")
  k = Kernel(_opt_graph(tensor(64, 32, dtype=dtypes.half) @ tensor(32, 48, dtype=dtypes.half), r), r)
  tcs = [a for a in candidate_actions(k) if a.op is OptOps.TC]
  assert tcs == [Opt(OptOps.TC, 0, 0), Opt(OptOps.TC, 1, 0)] and all(apply_all(k, [a]) is not None for a in tcs)
  after = apply_all(k, [tcs[0]])
  assert not any(a.op is OptOps.TC for a in candidate_actions(after))   # TC is a first action only
  assert {STAGE, PREFETCH} <= set(candidate_actions(after))
  assert STAGE not in candidate_actions(apply_all(after, [STAGE]))
  assert STAGE not in candidate_actions(k)
  assert any(apply_all(after, [a]) is not None for a in candidate_actions(after))   # the tiles split further
  with Context(TC=0): assert not any(a.op is OptOps.TC for a in candidate_actions(k))

def _run(out: Tensor, opts, device: str = "MOCK+CUDA") -> tuple[np.ndarray, str]:
  """The one kernel computing `out`, with exactly `opts`, on `device` (the emulator: in all three work-item orders;
  its EMU_ORDER exists only where the emulator plugin is loaded, not on a GPU machine without a new enough clang)."""
  return run_kernel(out, device, opts, **({"EMU_ORDER": "check"} if device.startswith("MOCK+") else {}))

TC0 = Opt(OptOps.TC, 0, 0)
EMULATED_KERNELS = [
  ((16, 8, 16), [TC0]),
  ((32, 16, 64), [Opt(OptOps.TC, 1, 0)]),   # the other assignment: B's columns as the tensor core's M
  ((64, 64, 64), [TC0, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2),
                  Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2)]),
  ((48, 24, 32), [TC0, Opt(OptOps.PADTO, 0, 2)]),
  ((32, 16, 32), [TC0, Opt(OptOps.UNROLL, 0, 2)]),   # K fully unrolled: the two WMMAs chain D into C
  ((24, 12, 40), [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.PADTO, 1, 8), Opt(OptOps.PADTO, 2, 16), TC0]),   # padded first
]
STAGE, PREFETCH = Opt(OptOps.STAGE), Opt(OptOps.STAGE, None, 1)
VECTOR_FILL = Opt(OptOps.STAGE, None, 15)   # prefetch, 16-byte fills of A and B, padded rows: the heuristic's default
# A and B through shared memory (STAGE): with a register tile, K unroll and warps; STAGE before the tile actions (it
# is built last); fewer A slots than threads (the fill is gated); padded M, N and K (the fill carries the gates)
STAGED_KERNELS = [
  ((64, 64, 64), [TC0, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2),
                  Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), STAGE]),
  ((128, 256, 96), [TC0, STAGE, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
                    Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 2)]),
  ((32, 32, 32), [TC0, Opt(OptOps.LOCAL, 1, 4), STAGE]),
  ((24, 12, 40), [Opt(OptOps.PADTO, 0, 32), Opt(OptOps.PADTO, 1, 16), Opt(OptOps.PADTO, 2, 16), TC0,
                  Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), STAGE]),
]
# the same with the next K step prefetched (STAGE arg 1); a single K step has nothing to prefetch (staged plainly)
STAGED_KERNELS += [(shape, [PREFETCH if o == STAGE else o for o in opts]) for shape, opts in STAGED_KERNELS] + \
  [((32, 32, 16), [TC0, Opt(OptOps.LOCAL, 1, 4), PREFETCH])]
# the vector fills (STAGE bits 2 and 4: A and B read in 16-byte pieces, scattered to the slots) and the pad (8), with
# and without prefetch; the padded kernel's gated loads and the tile smaller than a round of the threads keep the
# slot-by-slot fill (still padded)
VECTOR, ALL = Opt(OptOps.STAGE, None, 6), Opt(OptOps.STAGE, None, 15)
STAGED_KERNELS += [(shape, [ALL if o == STAGE else o for o in opts]) for shape, opts in STAGED_KERNELS[:4]] + \
  [(STAGED_KERNELS[1][0], [VECTOR if o == STAGE else o for o in STAGED_KERNELS[1][1]])]

def _check_mma_kernel(shape, opts, device):
  m, n, k = shape
  a, b = RNG.standard_normal((m, k)).astype(np.float16), RNG.standard_normal((k, n)).astype(np.float16)
  got, src = _run(Tensor(a, device=device).realize().matmul(Tensor(b, device=device).realize(), dtype=dtypes.float), opts,
                  device)
  assert "tp_mma_m16n8k16_f16_f32(" in src
  np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("shape,opts", EMULATED_KERNELS + STAGED_KERNELS, ids=str)
def test_emulator_runs_the_mma(mock_cuda, shape, opts): _check_mma_kernel(shape, opts, "MOCK+CUDA")

def test_staged_kernel_reads_fragments_from_shared_memory(mock_cuda):
  a, b = RNG.standard_normal((64, 64)).astype(np.float16), RNG.standard_normal((64, 64)).astype(np.float16)
  _, src = _run(Tensor(a).realize().matmul(Tensor(b).realize(), dtype=dtypes.float), STAGED_KERNELS[0][1])
  body = src.split("__global__")[1]
  assert body.count("__shared__") == 2 and body.count("__syncthreads();") == 1   # one barrier per K step
  fill, reads = body.split("__syncthreads();")
  # the fill writes whole fragments (A: 8 halves, B: 4) as vectors; after the barrier only shared memory is read
  assert re.search(r"^\s*\*\(\(half8\*\)\(stage0\+", fill, re.M)
  assert re.search(r"^\s*\*\(\(half4\*\)\(stage1\+", fill, re.M)
  assert "(*((half8*)(stage0+" in reads and "(*((half4*)(stage1+" in reads and "data1" not in reads.split("}")[0]

def test_vector_fill_reads_16_byte_pieces(mock_cuda):
  """STAGE:15: both tiles are read from global memory as 16-byte vectors only, scattered to the fragment slots of
  padded shared tiles (an empty slot after each 32), and the fragments are still read as vectors."""
  a, b = RNG.standard_normal((64, 64)).astype(np.float16), RNG.standard_normal((64, 64)).astype(np.float16)
  opts = [ALL if o == STAGE else o for o in STAGED_KERNELS[0][1]]
  got, src = _run(Tensor(a).realize().matmul(Tensor(b).realize(), dtype=dtypes.float), opts)
  np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3)
  body = src.split("__global__")[1]
  # A: 256 slots of 8 halves, B: 512 of 4; each padded by 1/32, twice
  assert "half stage0[4224];" in body and "half stage1[4224];" in body
  for data in ("data1", "data2"):
    assert re.search(rf"\(\*\(\(half8\*\)\({data}\+", body) and f"{data}[" not in body
    assert not re.search(rf"\(half[24]\*\)\({data}\+", body)
  assert "(*((half8*)(stage0+" in body and "(*((half4*)(stage1+" in body

def test_digits_describe_the_tiles():
  from tinyplug.codegen.tc_staging import _digits
  x = np.arange(48)
  f = (x % 4) * 16 + ((x // 4) % 3) * 1 + (x // 12) * 100
  assert _digits(f, (8, 48)) is None   # 8 is not a digit boundary of f
  assert _digits(f, (4, 12)) == ((1, 4, 16), (4, 3, 1), (12, 4, 100))
  x = np.arange(64)
  assert _digits(x * 3, (8, 32)) == ((1, 8, 3), (8, 4, 24), (32, 2, 96))   # split at the breaks
  assert _digits(np.array([0, 1, 3, 2]), ()) is None   # not a sum of digits

@pytest.mark.parametrize("pad,most", [(False, {"A": 4, "B": 8}), (True, {"A": 2, "B": 1})])
def test_vector_fills_of_the_default_spread_their_stores_over_the_banks(tensor, pad, most):
  """The 4096 default's tiles: every thread's 16-byte piece starts on a 16-byte boundary, each warp reads whole
  64-byte runs or more, and a warp's scattered stores into shared memory meet at most `most` distinct words in one
  bank (address order would give A 8 and B 16; the pad takes B's to none)."""
  from tinyplug.codegen import tc_staging as st
  r = CUDARenderer("sm_90")
  k = Kernel(_opt_graph(tensor(4096, 4096, dtype=dtypes.half).matmul(tensor(4096, 4096, dtype=dtypes.half),
                                                                     dtype=dtypes.float), r), r)
  for o in [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 2),
            Opt(OptOps.LOCAL, 0, 2)]: k.apply_opt(o)
  threads = st._thread_ranges(k.sink)
  wmma = next(u for u in k.sink.toposort() if u.op is Ops.WMMA)
  def value(digits, x): return sum(((x // lo) % radix) * coef for lo, radix, coef in digits)
  for i, (name, loads) in enumerate((("A", wmma.src[:8]), ("B", wmma.src[8:12]))):
    tile = st._plan(i, tuple(loads), threads, pad, True, r).tile
    assert tile is not None and tile.width == 8 and tile.threads == 128 and tile.count == 4096
    lanes = np.arange(32) * 8
    offsets = np.sort(value(tile.offset, lanes))
    assert (offsets % 8 == 0).all() and all(len(set(offsets[g:g + 4] - np.arange(4) * 8)) == 1 for g in range(0, 32, 4))
    for v in range(8):
      words = np.unique((tile.position0 + value(tile.position, lanes + v)) // 2)
      assert np.bincount(words % 32).max() <= most[name]

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("arg,pieces", [(3, 8), (7, 16), (15, 16)])
def test_the_default_with_vector_fills_compiles(nvrtc, render, tensor, arch, arg, pieces):
  """The 4096 default's tile with STAGE:3 (B in 16-byte pieces), 7 (A too), 15 (and padded): NVRTC compiles it, and the
  PTX reads global memory with 16-byte loads only (4 pieces of each tile per thread, before the loop and in it)."""
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  opts = [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 2),
          Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, arg)]
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer(arch), opts=opts)
  ptx = nvrtc.compile_cuda(spec.src, arch, ptx=True).decode()
  assert len(re.findall(r"ld\.global\.(?:nc\.)?v4\.", ptx)) == pieces
  assert not re.findall(r"ld\.global\.(?:nc\.)?[ub]16", ptx)
  assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"

@pytest.mark.parametrize("dtype,acc,index,name,instruction", CORES, ids=lambda x: x if isinstance(x, str) else "")
def test_staged_kernels_of_every_core_run_on_the_emulator(mock_cuda, dtype, acc, index, name, instruction):
  a, b = RNG.standard_normal((64, 96)).astype(np.float32), RNG.standard_normal((96, 48)).astype(np.float32)
  ta, tb = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
  opts = [Opt(OptOps.TC, 0, index), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.LOCAL, 0, 2),
          Opt(OptOps.LOCAL, 1, 3), PREFETCH]
  got, src = _run(ta.matmul(tb, dtype=acc), opts)
  assert f"tp_{name}(" in src and "__syncthreads();" in src
  tol = dict(rtol=1e-2, atol=5e-2) if acc == dtypes.half else dict(rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(got.astype(np.float32), ta.float().numpy() @ tb.float().numpy(), **tol)

@pytest.mark.parametrize("dtype,acc,index,name,instruction", CORES, ids=lambda x: x if isinstance(x, str) else "")
def test_vector_fills_of_every_core_run_on_the_emulator_and_compile(mock_cuda, nvrtc, dtype, acc, index, name,
                                                                   instruction):
  """STAGE:15 with each core: both tiles read as 8-lane vectors (half8, bf16x8), the values match, NVRTC compiles it."""
  a, b = RNG.standard_normal((64, 96)).astype(np.float32), RNG.standard_normal((96, 64)).astype(np.float32)
  ta, tb = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
  opts = [Opt(OptOps.TC, 0, index), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 0, 2),
          Opt(OptOps.LOCAL, 1, 2), ALL]
  got, src = _run(ta.matmul(tb, dtype=acc), opts)
  assert len(re.findall(r"\(\((?:half8|bf16x8)\*\)\(data[12]\+", src)) == 4 and not re.search(r"= data[12]\[", src)
  tol = dict(rtol=1e-2, atol=5e-2) if acc == dtypes.half else dict(rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(got.astype(np.float32), ta.float().numpy() @ tb.float().numpy(), **tol)
  assert nvrtc.compile_cuda(src, "sm_80")[:4] == b"\x7fELF"

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_default_for_a_big_matmul_is_staged_and_compiles(nvrtc, render, tensor, arch):
  """4096^3 fp16 on mma.sync (sm_80, and sm_90 without wgmma: test_descriptor_staging.py has its default): 4x8 WMMAs per warp (64x64), K step 32, 2x2 warps (a 128x128 block), A and B through 48 KB of
  shared memory in 3 stages filled by cp.async and read by ldmatrix, the blocks in grouped order (tc_async.py);
  NVRTC compiles it."""
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer(arch, wgmma=False))
  assert list(spec.applied_opts) == [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
                               Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 304)]
  assert "((gidx1/8)*8)+(gidx0%8)" in spec.src   # 8 block rows a group
  assert spec.local_size == (32, 2, 2) and spec.global_size == (32, 32, 1)
  assert "half stage0[12288];" in spec.src and "half stage1[12288];" in spec.src   # 3 x 128x32 (A), 3 x 32x128 (B)
  loop = spec.src.split("for (int ridx")[1]
  # each trip waits for its step's copies and the work-group, copies the step 2 ahead, then reads its fragments
  assert loop.index("tp_cp_async_wait<1>(); __syncthreads();") < loop.index("tp_cp_async16(stage0+") < \
    loop.index("tp_cp_async_commit();") < loop.index("tp_ldmatrix<half8, 4>(stage0+")
  assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_fragment_order_default_without_async_copies(nvrtc, render, tensor, arch):
  """The same with STAGE:15 (the default where the renderer has no cp.async): 33 KB of double-buffered, padded shared
  memory in fragment order filled with 16-byte loads, the next K step prefetched; NVRTC compiles it."""
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  opts = [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 2),
          Opt(OptOps.LOCAL, 0, 2), VECTOR_FILL]
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer(arch), opts=opts)
  assert "half stage0[8448];" in spec.src and "half stage1[8448];" in spec.src   # 8192 + a slot of padding per 32
  loop = spec.src.split("for (int ridx")[1]
  # the fill of the next K step is loaded (as 16-byte vectors) before the barrier, the step's fragments read after it
  assert loop.index("(*((half8*)(data1+") < loop.index("__syncthreads();") < loop.index("(*((half8*)(stage0+")
  assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"

def test_odd_sizes_are_padded_to_the_block(nvrtc, render, tensor):
  """1000^3: M, N and K padded to 1024 (2.4% more work) get the full default tile; to the core's tile only (1008, 63
  tiles of 16) no tile action divided them: one warp of one WMMA."""
  a, b = tensor(1000, 1000, dtype=dtypes.half), tensor(1000, 1000, dtype=dtypes.half)
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer("sm_90"))
  assert list(spec.applied_opts)[:4] == [Opt(OptOps.PADTO, 0, 128), Opt(OptOps.PADTO, 1, 128),
                                         Opt(OptOps.PADTO, 2, 32), TC0]
  assert spec.applied_opts[-1] == VECTOR_FILL and spec.local_size == (32, 2, 2)   # gated tiles fill slot by slot
  assert nvrtc.compile_cuda(spec.src, "sm_90")[:4] == b"\x7fELF"

def test_the_default_runs_padded_and_staged_on_the_emulator(mock_cuda):
  a, b = RNG.standard_normal((120, 60)).astype(np.float16), RNG.standard_normal((60, 250)).astype(np.float16)
  got, src = _run(Tensor(a).realize().matmul(Tensor(b).realize(), dtype=dtypes.float), None)   # the heuristic's
  assert "__launch_bounds__(128)" in src and "half stage0[8448];" in src   # 128x256x64: 4 warps a block, staged
  np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3)

def test_stage_refuses_what_it_cannot_stage(render, tensor):
  r = CUDARenderer("sm_80")
  h = dtypes.half
  def apply(out, opts):
    k = Kernel(_opt_graph(out, r), r)
    for o in opts: k.apply_opt(o)
    return k.finished_sink()
  mm = tensor(64, 64, dtype=h) @ tensor(64, 64, dtype=h)
  with pytest.raises(KernelOptError, match="apply TC first"): apply(mm, [STAGE])
  with pytest.raises(KernelOptError, match="staged already"): apply(mm, [TC0, STAGE, STAGE])
  with pytest.raises(KernelOptError, match="arg is 0"): apply(mm, [TC0, Opt(OptOps.STAGE, None, 4096)])
  # two halves of A (64 slots of 8 halves) and of B (64 slots of 4): 3 KB
  small = CUDARenderer("sm_80", shared_max=2048)
  with pytest.raises(KernelOptError, match="3072 bytes of shared memory; the device has 2048"):
    render(mm, renderer=small, opts=[TC0, Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.LOCAL, 1, 2), STAGE])

def _gpu_with_tensor_cores():
  from tinyplug_cuda.driver import probe_driver
  if not probe_driver()[0]: pytest.skip(f"no NVIDIA GPU: {probe_driver()[1][:80]}")
  if not Device["CUDA"].renderer.tensor_cores: pytest.skip(f"{Device['CUDA'].renderer.arch} has no mma.sync m16n8k16")

@pytest.mark.parametrize("shape,opts", EMULATED_KERNELS + STAGED_KERNELS + [
  ((512, 256, 1024), [TC0, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4),
                      Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 2)]),
  ((512, 256, 1024), [TC0, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
                      Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 2), PREFETCH])], ids=str)
def test_gpu_runs_the_same_kernels(shape, opts):
  """On a real GPU (skipped without one): the hardware's mma agrees with numpy, so the declared layouts are its own."""
  _gpu_with_tensor_cores()
  _check_mma_kernel(shape, opts, "CUDA")

def test_gpu_runs_the_f16_accumulating_mma():
  _gpu_with_tensor_cores()
  _check_f16_accumulating_mma("CUDA")

def _check_beam_with_tensor_cores(device: str, n: int):
  a, b = RNG.standard_normal((n, n)).astype(np.float16), RNG.standard_normal((n, n // 2)).astype(np.float16)
  ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
  seen = []
  from tinyplug import events
  def on_kernel(e): seen.append(e["opts"])
  events.subscribe("kernel", on_kernel)
  try:
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1): got = (ta @ tb).numpy()
  finally: events.unsubscribe("kernel", on_kernel)
  assert any(any(o.op is OptOps.TC for o in opts) for opts in seen)   # TC candidates were compiled and timed
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=0.1)

@pytest.mark.slow
def test_emulator_beam_searches_with_tensor_core_actions(mock_cuda):
  """BEAM=1 times TC candidates like any other (timed on the emulator: which one wins is not asserted)."""
  _check_beam_with_tensor_cores("MOCK+CUDA", 16)

def test_gpu_beam_searches_with_tensor_core_actions():
  """BEAM=1 on a real GPU, TC actions among its candidates: whatever it picks, the result is right (which actions win
  is a timing, not asserted; benchmarks/cuda_matmul.py --beam 2 shows it)."""
  _gpu_with_tensor_cores()
  _check_beam_with_tensor_cores("CUDA", 256)

def _check_f16_accumulating_mma(device: str):
  a, b = RNG.standard_normal((32, 64)).astype(np.float16), RNG.standard_normal((64, 24)).astype(np.float16)
  got, src = _run(Tensor(a, device=device).realize().matmul(Tensor(b, device=device).realize(), dtype=dtypes.half),
                  [Opt(OptOps.TC, 0, 2), Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UNROLL, 0, 2)], device)
  assert "tp_mma_m16n8k16_f16_f16(" in src
  # half accumulators: each K-tile's sum is rounded to half (the reference sums in float)
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=5e-2)

def test_emulator_runs_the_f16_accumulating_mma(mock_cuda): _check_f16_accumulating_mma("MOCK+CUDA")

def test_emulator_runs_the_bf16_mma(mock_cuda):
  a, b = RNG.standard_normal((32, 48)).astype(np.float32), RNG.standard_normal((48, 16)).astype(np.float32)
  ta, tb = Tensor(a).cast(dtypes.bfloat16).realize(), Tensor(b).cast(dtypes.bfloat16).realize()
  got, src = _run(ta.matmul(tb, dtype=dtypes.float), [Opt(OptOps.TC, 0, 1), Opt(OptOps.UPCAST, 1, 2)])
  assert "tp_mma_m16n8k16_bf16_f32(" in src
  np.testing.assert_allclose(got, ta.float().numpy() @ tb.float().numpy(), rtol=1e-5, atol=1e-4)

def test_debug_2_names_the_tensor_cores(mock_cuda, capsys):
  a, b = RNG.standard_normal((32, 48)).astype(np.float16), RNG.standard_normal((48, 24)).astype(np.float16)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  with Context(DEBUG=2): got = (ta @ tb).numpy()
  assert "tensor cores: mma_m16n8k16_f16_f32" in capsys.readouterr().out
  np.testing.assert_allclose(got.astype(np.float32), (a.astype(np.float32) @ b.astype(np.float32)), rtol=1e-2, atol=5e-2)
