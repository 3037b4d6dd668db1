"""Hopper's wgmma through the optimiser: the wgmma tensor cores (tensor_cores.WGMMA, on sm_90 unless CUDA_WGMMA=0 or
`CUDARenderer(wgmma=False)`), STAGE's descriptor mode (bit 2048 + 16: tinyplug/codegen/tc_wgmma.py) and the
heuristic's and BEAM's use of them. Kernels rendered for sm_90 run on the emulator (which decodes each wgmma's
descriptors as the PTX ISA defines them) against numpy and compile with NVRTC for sm_90a; what cannot be staged so is
refused with the reason."""
from __future__ import annotations
import dataclasses
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.device import Device
from tinyplug.schedule import create_schedule
from tinyplug_cuda.renderer import CUDARenderer

RNG = np.random.default_rng(90)
WG = CUDARenderer("sm_90", wgmma=True)
F16, BF16 = 3, 4   # the wgmma cores' TC numbers (after the three mma.sync ones)
def STAGE(arg): return Opt(OptOps.STAGE, None, arg)
def TILE(core=F16, local=2, extra=()): return [Opt(OptOps.TC, 0, core), Opt(OptOps.UNROLL, 0, 4), *extra] + \
  ([Opt(OptOps.LOCAL, 0, local)] if local > 1 else [])

def _item(m, n, k, dtype=dtypes.half, out=dtypes.float, trans_b=False, device="MOCK+CUDA"):
  """A matmul of `dtype` inputs accumulated in float, its result cast to `out`: its schedule item and the reference."""
  a = RNG.standard_normal((m, k)).astype(np.float32)
  b = RNG.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
  with Device.use(device):
    ta, tb = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
    tb = tb.T if trans_b else tb
    c = ta.matmul(tb, dtype=dtypes.float).cast(out)
    (item,), _ = create_schedule([c.uop])
  ref = ta.float().numpy() @ tb.float().numpy()
  return item, ref if out == dtypes.float else ref.astype(np.float16).astype(np.float32)

def _run(item, opts, renderer=WG):
  """(result, source) of the kernel with `opts` rendered by `renderer`, run on the emulator."""
  spec = get_program(item.ast, renderer, opts=opts)
  dev = Device["MOCK+CUDA"]
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  out = bufs[0].numpy()
  if item.bufs[0].dtype == dtypes.bfloat16: out = (out.astype(np.uint32) << 16).view(np.float32)
  return out.astype(np.float32), spec

CASES = [
  ((128, 128, 128), TILE() + [STAGE(2048 + 16 + 32)]),                       # 2 warpgroups, 3 stages, 2 K steps
  ((256, 128, 192), TILE() + [STAGE(2048 + 16 + 64 + 256)]),                 # 4 stages, blocks in grouped order
  ((128, 256, 128), TILE(extra=[Opt(OptOps.UPCAST, 1, 2)]) + [STAGE(2048 + 16)]),   # two 64x128 cores along N
  ((256, 128, 128), TILE(local=1, extra=[Opt(OptOps.UPCAST, 0, 2)]) + [STAGE(2048 + 48)]),   # two along M, 1 warpgroup
  ((64, 128, 320), TILE(local=1) + [STAGE(2048 + 16 + 96)]),                 # one warpgroup, 5 stages
  # K steps of 128 (UNROLL 8): A's rows and B's row groups two 64x64 blocks each
  ((128, 128, 384), [Opt(OptOps.TC, 0, F16), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.LOCAL, 0, 2), STAGE(2048 + 48)]),
  ((256, 256, 256), [Opt(OptOps.TC, 0, F16), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.UPCAST, 1, 2),
                     Opt(OptOps.LOCAL, 0, 2), STAGE(2048 + 16 + 256)]),
  # 2 x 2 warpgroups (LOCAL along N too): B's descriptors move with the N warpgroup
  ((128, 256, 128), TILE(extra=[Opt(OptOps.LOCAL, 1, 2)]) + [STAGE(2048 + 48)]),
]

@pytest.mark.parametrize("shape,opts", CASES, ids=str)
def test_emulator_matches_numpy(mock_cuda, shape, opts):
  item, ref = _item(*shape)
  got, spec = _run(item, opts)
  assert "tp_wgmma_chain<half, 128, 0, 1, 1, 0>(" in spec.src and "tp_wgmma_chain<half, 128, 0, 1, 0, 1>(" in spec.src
  assert "tp_fence_proxy_async(); __syncthreads();" in spec.src and "tp_cp_async16(wgmma0+" in spec.src
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("dtype,out", [(dtypes.bfloat16, dtypes.float), (dtypes.half, dtypes.half)])
def test_other_dtypes_and_the_heuristics_kernel(mock_cuda, dtype, out):
  item, ref = _item(256, 128, 192, dtype, out)
  k = Kernel(item.ast, WG)
  from tinyplug.passes.heuristic import heuristic_opts
  opts = heuristic_opts(k)
  assert opts[0] == Opt(OptOps.TC, 0, BF16 if dtype == dtypes.bfloat16 else F16) and opts[-1].arg & 2048
  got, _ = _run(item, opts)
  tol = 1e-5 if out == dtypes.float else 2 ** -10
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=tol, atol=tol * np.abs(ref).max() + 1e-4)

def test_a_wrong_descriptor_gives_wrong_values(mock_cuda):
  from tinyplug_emulator.native import EmulatorError
  item, ref = _item(128, 128, 192)
  spec = get_program(item.ast, WG, opts=CASES[0][1])
  dev = Device["MOCK+CUDA"]
  for old, new in ((", 8192, 1024, 1)", ", 4096, 1024, 1)"), (", 16, 1024, 1)", ", 16, 2048, 1)"),
                   (", 16, 1024, 1)", ", 16, 1024, 3)"), ("tp_wgmma_chain<half, 128, 0, 1, 0, 1>(", "tp_wgmma_chain<half, 64, 0, 1, 0, 1>(")):
    assert old in spec.src
    broken = dataclasses.replace(spec, src=spec.src.replace(old, new))
    prg = dev.make_program(broken, dev.compiler.compile_cached(broken.src))
    bufs = [b.ensure_allocated() for b in item.bufs]
    try: prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
    except EmulatorError: continue   # a descriptor reaching past the tiles into a stage being copied: a race
    assert not np.allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-3, atol=1e-2), (old, new)

RENDERED = [CASES[0][1], CASES[2][1], TILE() + [STAGE(2048 + 16 + 64 + 256)], TILE(core=BF16) + [STAGE(2048 + 48)]]

@pytest.mark.parametrize("opts,trans", [(o, (False, False)) for o in RENDERED] + [(RENDERED[0], (True, True))], ids=str)
def test_nvrtc_compiles_the_4096_kernels_for_sm90a(nvrtc, opts, trans):
  from tinyplug_cuda.compiler import CUDACompiler
  dtype = dtypes.bfloat16 if opts[0].arg == BF16 else dtypes.half
  with Device.use("PYTHON"):
    a, b = Tensor.empty(4096, 4096, dtype=dtype), Tensor.empty(4096, 4096, dtype=dtype)
    out = (a.T if trans[0] else a).matmul(b.T if trans[1] else b)
    (item,), _ = create_schedule([out.uop])
  spec = get_program(item.ast, WG, opts=opts)
  assert "wgmma.mma_async.sync.aligned.m64n128k16.f32" in spec.src
  comp = CUDACompiler("sm_90")
  assert comp.arch_for(spec.src) == "sm_90a" and comp.compile(spec.src)[:4] == b"\x7fELF"

def test_wgmma_is_on_by_default_on_sm90_and_the_switch_turns_it_off(monkeypatch):
  assert CUDARenderer("sm_90").wgmma and CUDARenderer("sm_90").descriptor_cores == WG.descriptor_cores
  monkeypatch.setenv("CUDA_WGMMA", "0")
  assert not CUDARenderer("sm_90").wgmma and not CUDARenderer("sm_90").descriptor_cores
  assert CUDARenderer("sm_90", wgmma=True).wgmma   # the argument wins over the variable

def test_heuristic_picks_wgmma_only_on_sm90_with_the_switch():
  from tinyplug.passes.heuristic import heuristic_opts
  with Device.use("PYTHON"):
    out = Tensor.empty(512, 512, dtype=dtypes.half).matmul(Tensor.empty(512, 512, dtype=dtypes.half))
    (item,), _ = create_schedule([out.uop])
  picks = {(r.arch, r.wgmma): next((o.arg for o in heuristic_opts(Kernel(item.ast, r)) if o.op is OptOps.TC), None)
           for r in (WG, CUDARenderer("sm_90", wgmma=False), CUDARenderer("sm_80", wgmma=True),
                     CUDARenderer("sm_75", wgmma=True))}
  assert picks == {("sm_90", True): F16, ("sm_90", False): 0, ("sm_80", True): 0, ("sm_75", True): None}
  assert not CUDARenderer("sm_80", wgmma=True).descriptor_cores and not CUDARenderer("sm_90", wgmma=False).descriptor_cores
  assert WG.descriptor_cores == {"wgmma_m64n128k16_f16_f32", "wgmma_m64n128k16_bf16_f32"}

def test_ptx_renderer_has_no_descriptor_cores():
  from tinyplug_cuda.ptx import PTXRenderer
  r = PTXRenderer("sm_90")
  assert not r.descriptor_cores and not any(t.threads == 128 for t in r.tensor_cores)

@pytest.mark.parametrize("opts,why", [
  (TILE() + [STAGE(48)], "reads its operands from shared memory through descriptors: stage with bit 2048"),
  (TILE() + [STAGE(2048)], "add 16"),
  (TILE() + [STAGE(2048 + 16 + 128)], "always swizzled"),
  ([Opt(OptOps.TC, 0, F16), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 0, 2), STAGE(2048 + 16)], "K step of 32"),
  ([Opt(OptOps.TC, 0, F16), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 0, 2),
    STAGE(2048 + 16 + 96)], "5 stages need"),
  ([Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 2), STAGE(2048 + 16)], "stages the operands of a descriptor tensor core"),
])
def test_refusals(opts, why):
  item, _ = _item(128, 128, 128, device="PYTHON")
  with pytest.raises(KernelOptError, match=why): get_program(item.ast, WG, opts=opts)

@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
def test_transposed_operands_read_as_the_other_major(mock_cuda, trans_a, trans_b):
  """A stored K x M is M-major (imm-trans-a 1), B stored N x K K-major (imm-trans-b 0): the descriptors say so."""
  a = RNG.standard_normal((192, 128) if trans_a else (128, 192)).astype(np.float16)
  b = RNG.standard_normal((256, 192) if trans_b else (192, 256)).astype(np.float16)
  with Device.use("MOCK+CUDA"):
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    c = (ta.T if trans_a else ta).matmul(tb.T if trans_b else tb, dtype=dtypes.float)
    (item,), _ = create_schedule([c.uop])
  ref = (a.T if trans_a else a).astype(np.float32) @ (b.T if trans_b else b).astype(np.float32)
  got, spec = _run(item, TILE(extra=[Opt(OptOps.UPCAST, 1, 2)]) + [STAGE(2048 + 48)])
  assert f"tp_wgmma_chain<half, 128, {int(trans_a)}, {int(not trans_b)}, 1, 0>(" in spec.src
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-5, atol=1e-4)

def test_unstaged_wgmma_is_not_rendered():
  item, _ = _item(128, 128, 128, device="PYTHON")
  with pytest.raises(NotImplementedError, match="stage its operands with STAGE bit 2048"):
    get_program(item.ast, WG, opts=TILE())

def test_beam_searches_descriptor_kernels_staged_only():
  from tinyplug.search.runner import TC_SEARCH, tensor_core_kernels
  item, _ = _item(512, 512, 256, device="PYTHON")
  kernels = tensor_core_kernels(Kernel(item.ast, WG))
  on_wgmma = [ks for ks in kernels if ks[0].arg in (F16, BF16)]
  assert on_wgmma and all(ks[-1].op is OptOps.STAGE and ks[-1].arg in TC_SEARCH["descriptor_stage"] for ks in on_wgmma)
  assert {ks[-1].arg for ks in on_wgmma} == set(TC_SEARCH["descriptor_stage"])
  assert any(ks[0].arg == 0 for ks in kernels)   # the mma.sync kernels stay in the search
  assert not any(ks[0].arg in (F16, BF16) for ks in tensor_core_kernels(Kernel(item.ast, CUDARenderer("sm_90", wgmma=False))))

@pytest.mark.parametrize("shape,opts", CASES + [((1024, 512, 2048), None)], ids=str)
def test_gpu_matches_numpy(shape, opts):
  """On an H100/H200 (skipped elsewhere): the kernels the emulator checked, and the heuristic's, on the hardware."""
  from tinyplug_cuda.driver import probe_driver
  if not probe_driver()[0]: pytest.skip(f"no NVIDIA GPU: {probe_driver()[1][:80]}")
  dev = Device["CUDA"]
  if dev.arch != "sm_90": pytest.skip(f"wgmma needs sm_90, the GPU is {dev.arch}")
  item, ref = _item(*shape, device="CUDA")
  r = CUDARenderer("sm_90", wgmma=True, shared_max=dev.renderer.shared_max)
  spec = get_program(item.ast, r, opts=opts)
  assert any(o.op is OptOps.STAGE and o.arg & 2048 for o in spec.applied_opts)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-5, atol=1e-4 * np.sqrt(shape[2]))

def _heuristic_run(build, ref):
  """Render the last kernel of `build()` with the heuristic's actions for WG, run it on the emulator: (opts, result)."""
  with Device.use("MOCK+CUDA"):
    items, _ = create_schedule([build().uop])
  item = items[-1]
  spec = get_program(item.ast, WG)
  dev = Device["MOCK+CUDA"]
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return spec.applied_opts, bufs[0].numpy().astype(np.float32).reshape(ref.shape)

h = lambda *s: RNG.standard_normal(s).astype(np.float16)
f32 = lambda x: x.astype(np.float32)

@pytest.mark.parametrize("what", ["batched", "one warpgroup", "B transposed", "A transposed", "bias and relu"])
def test_heuristic_kernels_on_the_emulator(mock_cuda, what):
  """The heuristic's kernels for shapes around the 128x128 tile, operands stored either way, an epilogue."""
  a, b = (h(2, 128, 128), h(2, 128, 128)) if what == "batched" else (h(64, 128), h(128, 256)) \
    if what == "one warpgroup" else (h(128, 128), h(128, 128))
  bias = RNG.standard_normal(128).astype(np.float32)
  T = lambda x: Tensor(x).realize()
  build, ref = {   # (the graph, its reference), built for this case only
    "batched": lambda: (lambda: T(a).matmul(T(b), dtype=dtypes.float), f32(a) @ f32(b)),
    "one warpgroup": lambda: (lambda: T(a).matmul(T(b), dtype=dtypes.float), f32(a) @ f32(b)),
    "B transposed": lambda: (lambda: T(a).matmul(T(b).T, dtype=dtypes.float), f32(a) @ f32(b).T),
    "A transposed": lambda: (lambda: T(a).T.matmul(T(b), dtype=dtypes.float), f32(a).T @ f32(b)),
    "bias and relu": lambda: (lambda: (T(a).matmul(T(b), dtype=dtypes.float) + T(bias)).relu(),
                              np.maximum(f32(a) @ f32(b) + bias, 0)),
  }[what]()
  opts, got = _heuristic_run(build, ref)
  tc = next(o.arg for o in opts if o.op is OptOps.TC)
  assert tc == F16, opts
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("renderer,opts,why", [
  (CUDARenderer("sm_80", wgmma=True), [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 4), STAGE(2048 + 16)],
   "bit 2048 stages the operands of a descriptor tensor core .* this kernel runs on another"),
  (CUDARenderer("sm_80", wgmma=True), TILE(), "tensor core 3 does not exist"),
  (CUDARenderer("sm_90", wgmma=False), TILE(), "tensor core 3 does not exist"),   # the switch off
  (CUDARenderer("sm_75", wgmma=True), [Opt(OptOps.TC, 0, 0)], "the renderer has no tensor cores"),
])
def test_refused_off_hopper(renderer, opts, why):
  item, _ = _item(128, 128, 128, device="PYTHON")
  with pytest.raises(KernelOptError, match=why): get_program(item.ast, renderer, opts=opts)

def test_refused_on_the_ptx_renderer():
  from tinyplug_cuda.ptx import PTXRenderer
  item, _ = _item(128, 128, 128, device="PYTHON")
  with pytest.raises(KernelOptError, match="the renderer has no tensor cores"):
    get_program(item.ast, PTXRenderer("sm_90"), opts=TILE())

def test_odd_sizes_are_refused_or_padded_off_wgmma():
  """M = 100: no wgmma tile divides it; padded to 128 first, the operands are gated and cp.async cannot copy them."""
  item, _ = _item(100, 128, 128, device="PYTHON")
  with pytest.raises(KernelOptError, match="way\\(s\\) to run on wgmma_m64n128k16_f16_f32"):
    get_program(item.ast, WG, opts=TILE())
  with pytest.raises(KernelOptError, match="read through a gate"):
    get_program(item.ast, WG, opts=[Opt(OptOps.PADTO, 0, 128)] + TILE() + [STAGE(2048 + 16)])
  assert Opt(OptOps.TC, 0, 0) in get_program(item.ast, WG).applied_opts   # the heuristic keeps mma.sync there
