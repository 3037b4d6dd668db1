"""CPU benchmark: tinyplug's CPU device (cpu_llvm plugin) side by side with numpy, PyTorch and tinygrad.

  python benchmarks/cpu_bench.py                  # everything; prints a markdown table
  python benchmarks/cpu_bench.py --only tinyplug,numpy --quick
  python benchmarks/cpu_bench.py --only tinyplug,numpy --workloads matmul_2048,softmax   # some workloads only
  python benchmarks/cpu_bench.py --only tinyplug --variant "before:PYTHONPATH=/tmp/old:/tmp/old/plugins/cpu_llvm/src"
                                                  # tinyplug again under other settings (another checkout, env vars)
  python benchmarks/cpu_bench.py --pass-sets      # tinyplug with each optimisation pass set off: what each one buys
  python benchmarks/cpu_bench.py --only tinyplug,numpy,torch --workloads sum0,var0,bn_stats   # reductions (REDUCTIONS)

Each framework runs in its own subprocess (so env vars like DEV apply and memory is not shared) and reports the
best wall time of a few runs of each workload, synchronised (the result is computed, not just scheduled).
The roofline figures come from hand-written LLVM IR run through the cpu_llvm runtime on every core: a triad
(a = b + s*c) for memory bandwidth and independent vector FMA chains for peak fp32 FLOP/s.
Never run from tests: it takes minutes."""
from __future__ import annotations
import argparse, json, os, re, subprocess, sys, time

N_ELEM = 16 * 1024 * 1024
WORKLOADS = {   # name: (description, flops, bytes moved at minimum)
  "matmul_512": ("fp32 matmul 512", 2 * 512**3, 3 * 4 * 512**2),
  "matmul_1024": ("fp32 matmul 1024", 2 * 1024**3, 3 * 4 * 1024**2),
  "matmul_2048": ("fp32 matmul 2048", 2 * 2048**3, 3 * 4 * 2048**2),
  "chain_16M": ("((a*b)+c).relu()*0.5, 16M", 4 * N_ELEM, 4 * 4 * N_ELEM),
  "sum_16M": ("sum of 16M floats", N_ELEM, 4 * N_ELEM),
  "softmax_4096": ("row softmax 4096x4096", 5 * 4096**2, 2 * 4 * 4096**2),
  "conv2d": ("conv2d b32 3->32 32x32 k3 p1", 2 * 32 * 32 * 32 * 32 * 27, 4 * (32 * 3 * 32 * 32 + 32 * 32 * 32 * 32)),
  **{key: (desc, 0, 4 * n) for key, (desc, n) in {   # reductions along other axes than the innermost (issue 20)
    "sum0": ("sum(0) 4096x4096", 4096**2), "sum1": ("sum(1) 4096x4096", 4096**2),
    "sum_mid": ("sum(1) 16x4096x256", 16 * 4096 * 256), "mean0": ("mean(0) 4096x4096", 4096**2),
    "max0": ("max(0) 4096x4096", 4096**2), "max_mid": ("max(1) 16x4096x256", 16 * 4096 * 256),
    "bn_stats": ("mean, var over (0,2,3) 64x64x56x56", 64 * 64 * 56 * 56),
    "loss_rows": ("logsumexp(1) 128x10 (a loss)", 128 * 10),
    "argmax0": ("argmax(0) 4096x4096", 4096**2), "argmax1": ("argmax(1) 4096x4096", 4096**2),
    "var0": ("var(0) 4096x4096", 4096**2), "std1": ("std(1) 4096x4096", 4096**2),
    "cumsum0": ("cumsum(0) 1024x1024", 1024**2), "cumsum1": ("cumsum(1) 1024x1024", 1024**2),
    "lse1": ("logsumexp(1) 4096x4096", 4096**2), "layernorm": ("layernorm(-1) 4096x4096", 4096**2)}.items()},
  "first_result": ("new elementwise graph: time to first result", 0, 0),
  "tiny_op": ("cost per tiny realized op", 0, 0),
}
# the op sweep (issue 20): more ops at one realistic size each; inputs from SWEEP_INPUTS, one expression per framework
B8 = 8 * 64 * 56 * 56   # elements of an (8, 64, 56, 56) activation
SWEEP = {
  "transpose": ("x.T contiguous, 4096x4096", 0, 2 * 4 * 4096**2),
  "nhwc": ("NCHW -> NHWC contiguous, 8x64x56x56", 0, 2 * 4 * B8),
  "maxpool_k2": ("max_pool2d k2 s2, 8x64x56x56", B8, 4 * B8 * 5 // 4),
  "maxpool_k3": ("max_pool2d k3 s2 p1, 8x64x56x56", 9 * B8 // 4, 4 * B8 * 5 // 4),
  "avgpool_k2": ("avg_pool2d k2 s2, 8x64x56x56", B8, 4 * B8 * 5 // 4),
  "avgpool_k3": ("avg_pool2d k3 s2 p1, 8x64x56x56", 9 * B8 // 4, 4 * B8 * 5 // 4),
  "conv_64": ("conv2d b8 64->64 56x56 k3 p1", 2 * B8 * 64 * 9, 8 * B8),
  "conv_s2": ("conv2d b8 64->128 56x56 k3 s2 p1", 2 * B8 * 128 * 9 // 4, 4 * B8 * 3 // 2),
  "conv_1x1": ("conv2d 1x1 b8 64->256 56x56", 2 * B8 * 256, 4 * B8 * 5),
  "conv_dw": ("depthwise conv2d b8 64 56x56 k3 p1", 2 * B8 * 9, 8 * B8),
  "convt": ("conv_transpose2d b8 64->32 28x28 k4 s2 p1", 2 * 8 * 64 * 28 * 28 * 32 * 16, 4 * 8 * (64 * 28 * 28 + 32 * 56 * 56)),
  "bmm_attn": ("batched q @ k^T 8x12x128x64", 2 * 96 * 128 * 128 * 64, 4 * 96 * (2 * 128 * 64 + 128 * 128)),
  "sdpa": ("scaled_dot_product_attention 8x12x128x64", 4 * 96 * 128 * 128 * 64, 4 * 96 * 4 * 128 * 64),
  # causal: the FLOPs of the lower half (what is needed), not of the whole matrix
  "sdpa_causal": ("sdpa is_causal 8x12x128x64", 2 * 96 * 128 * 128 * 64, 4 * 96 * 4 * 128 * 64),
  "sdpa_causal_1k": ("sdpa is_causal 1x8x1024x64", 2 * 8 * 1024 * 1024 * 64, 4 * 8 * 4 * 1024 * 64),
  "embed": ("x[idx]: 4096 rows of a 50k x 512 table", 0, 2 * 4 * 4096 * 512),
  "vecmat": ("v @ W, 4096 @ 4096x4096 (one token's layer)", 2 * 4096**2, 4 * 4096**2),
  "cat": ("cat 4 x (4096, 1024) on dim 1", 0, 2 * 4 * 4096**2),
  "stack": ("stack 4 x (1024, 4096)", 0, 2 * 4 * 4096**2),
  "pad": ("pad H, W by 1, 8x64x56x56", 0, 2 * 4 * B8),
  "where": ("where(c, a, b), 16M", N_ELEM, 13 * N_ELEM),
  "cast_f16": ("cast float32 -> float16, 16M", 0, 6 * N_ELEM),
  "cast_i32": ("cast float32 -> int32, 16M", 0, 8 * N_ELEM),
  "gelu": ("gelu (tanh), 16M", 10 * N_ELEM, 8 * N_ELEM),
  "silu": ("silu, 16M", 4 * N_ELEM, 8 * N_ELEM),
  "tanh": ("tanh, 16M", 4 * N_ELEM, 8 * N_ELEM),
  "interp": ("bilinear resize 8x64x56x56 -> 112x112", 0, 4 * 5 * B8),
  "sort": ("sort rows, 1024x1024", 0, 2 * 4 * 1024**2),
  "topk": ("topk 16 of rows, 1024x1024", 0, 4 * 1024**2),
}
WORKLOADS.update(SWEEP)

def SWEEP_INPUTS(name: str, rng) -> tuple:
  """The numpy inputs of a sweep workload (the same values for every framework)."""
  import numpy as np
  r = lambda *shape: rng.random(shape, dtype=np.float32)
  act = lambda: r(8, 64, 56, 56)
  return {
    "transpose": lambda: (r(4096, 4096),), "nhwc": lambda: (act(),), "maxpool_k2": lambda: (act(),),
    "maxpool_k3": lambda: (act(),), "avgpool_k2": lambda: (act(),), "avgpool_k3": lambda: (act(),),
    "conv_64": lambda: (act(), r(64, 64, 3, 3)), "conv_s2": lambda: (act(), r(128, 64, 3, 3)),
    "conv_1x1": lambda: (act(), r(256, 64, 1, 1)), "conv_dw": lambda: (act(), r(64, 1, 3, 3)),
    "convt": lambda: (r(8, 64, 28, 28), r(64, 32, 4, 4)),
    "bmm_attn": lambda: (r(8, 12, 128, 64), r(8, 12, 128, 64)),
    "sdpa": lambda: (r(8, 12, 128, 64), r(8, 12, 128, 64), r(8, 12, 128, 64)),
    "sdpa_causal": lambda: (r(8, 12, 128, 64), r(8, 12, 128, 64), r(8, 12, 128, 64)),
    "sdpa_causal_1k": lambda: (r(1, 8, 1024, 64), r(1, 8, 1024, 64), r(1, 8, 1024, 64)),
    "embed": lambda: (r(50000, 512), rng.integers(0, 50000, 4096).astype(np.int32)),
    "vecmat": lambda: (r(4096), r(4096, 4096)),
    "cat": lambda: tuple(r(4096, 1024) for _ in range(4)), "stack": lambda: tuple(r(1024, 4096) for _ in range(4)),
    "pad": lambda: (act(),), "where": lambda: (rng.random(N_ELEM) < 0.5, r(N_ELEM), r(N_ELEM)),
    "cast_f16": lambda: (r(N_ELEM),), "cast_i32": lambda: ((r(N_ELEM) * 1000),),
    "gelu": lambda: (r(N_ELEM) * 4 - 2,), "silu": lambda: (r(N_ELEM) * 4 - 2,), "tanh": lambda: (r(N_ELEM) * 4 - 2,),
    "interp": lambda: (act(),), "sort": lambda: (r(1024, 1024),), "topk": lambda: (r(1024, 1024),),
  }[name]()

TENSOR_SWEEP = {   # tinyplug and tinygrad (the same Tensor API); each returns the unrealized result
  "transpose": lambda x: x.T.contiguous(), "nhwc": lambda x: x.permute(0, 2, 3, 1).contiguous(),
  "maxpool_k2": lambda x: x.max_pool2d(2, 2), "maxpool_k3": lambda x: x.max_pool2d(3, 2, padding=1),
  "avgpool_k2": lambda x: x.avg_pool2d(2, 2), "avgpool_k3": lambda x: x.avg_pool2d(3, 2, padding=1),
  "conv_64": lambda x, w: x.conv2d(w, padding=1), "conv_s2": lambda x, w: x.conv2d(w, stride=2, padding=1),
  "conv_1x1": lambda x, w: x.conv2d(w), "conv_dw": lambda x, w: x.conv2d(w, groups=64, padding=1),
  "convt": lambda x, w: x.conv_transpose2d(w, stride=2, padding=1),
  "bmm_attn": lambda q, k: q @ k.transpose(-2, -1),
  "sdpa": lambda q, k, v: q.scaled_dot_product_attention(k, v),
  "sdpa_causal": lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
  "sdpa_causal_1k": lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
  "embed": lambda t, i: t[i], "cat": lambda a, b, c, d: a.cat(b, c, d, dim=1), "stack": lambda a, b, c, d: a.stack(b, c, d),
  "vecmat": lambda v, w: v @ w,
  "pad": lambda x: x.pad((1, 1, 1, 1)).contiguous(), "where": lambda c, a, b: c.where(a, b),
  "cast_f16": lambda x: x.cast("float16"), "cast_i32": lambda x: x.cast("int32"),
  "gelu": lambda x: x.gelu(), "silu": lambda x: x.silu(), "tanh": lambda x: x.tanh(),
  "interp": lambda x: x.interpolate((112, 112), mode="linear"), "sort": lambda x: x.sort(-1)[0],
  "topk": lambda x: x.topk(16)[0],
}

def _torch_sweep(torch):
  F = torch.nn.functional
  return {
    "transpose": lambda x: x.t().contiguous(), "nhwc": lambda x: x.permute(0, 2, 3, 1).contiguous(),
    "maxpool_k2": lambda x: F.max_pool2d(x, 2, 2), "maxpool_k3": lambda x: F.max_pool2d(x, 3, 2, padding=1),
    "avgpool_k2": lambda x: F.avg_pool2d(x, 2, 2), "avgpool_k3": lambda x: F.avg_pool2d(x, 3, 2, padding=1),
    "conv_64": lambda x, w: F.conv2d(x, w, padding=1), "conv_s2": lambda x, w: F.conv2d(x, w, stride=2, padding=1),
    "conv_1x1": lambda x, w: F.conv2d(x, w), "conv_dw": lambda x, w: F.conv2d(x, w, groups=64, padding=1),
    "convt": lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
    "bmm_attn": lambda q, k: q @ k.transpose(-2, -1),
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "sdpa_causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "sdpa_causal_1k": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "embed": lambda t, i: t[i.long()], "cat": lambda a, b, c, d: torch.cat((a, b, c, d), 1), "vecmat": lambda v, w: v @ w,
    "stack": lambda a, b, c, d: torch.stack((a, b, c, d)),
    "pad": lambda x: F.pad(x, (1, 1, 1, 1)), "where": lambda c, a, b: torch.where(c, a, b),
    "cast_f16": lambda x: x.half(), "cast_i32": lambda x: x.int(),
    "gelu": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "tanh": torch.tanh,
    "interp": lambda x: F.interpolate(x, size=(112, 112), mode="bilinear"), "sort": lambda x: x.sort(-1)[0],
    "topk": lambda x: x.topk(16)[0],
  }

def _numpy_sweep(np):
  def pool(x, k, s, p, op, fill):
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill) if p else x
    return op(np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s], axis=(-2, -1))
  def sdpa(q, k, v, causal=False):
    s = (q @ k.swapaxes(-2, -1)) * (1 / np.sqrt(q.shape[-1]))
    if causal: s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True)); return (e / e.sum(-1, keepdims=True)) @ v
  return {
    "transpose": lambda x: np.ascontiguousarray(x.T), "nhwc": lambda x: np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
    "maxpool_k2": lambda x: x.reshape(8, 64, 28, 2, 28, 2).max((3, 5)),
    "maxpool_k3": lambda x: pool(x, 3, 2, 1, np.max, -np.inf),
    "avgpool_k2": lambda x: x.reshape(8, 64, 28, 2, 28, 2).mean((3, 5)),
    "avgpool_k3": lambda x: pool(x, 3, 2, 1, np.mean, 0),
    "bmm_attn": lambda q, k: q @ k.swapaxes(-2, -1), "sdpa": sdpa,
    "sdpa_causal": lambda q, k, v: sdpa(q, k, v, True), "sdpa_causal_1k": lambda q, k, v: sdpa(q, k, v, True),
    "embed": lambda t, i: t[i], "cat": lambda a, b, c, d: np.concatenate((a, b, c, d), 1), "vecmat": lambda v, w: v @ w,
    "stack": lambda a, b, c, d: np.stack((a, b, c, d)),
    "pad": lambda x: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), "where": np.where,
    "cast_f16": lambda x: x.astype(np.float16), "cast_i32": lambda x: x.astype(np.int32),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x))),
    "silu": lambda x: x / (1 + np.exp(-x)), "tanh": np.tanh,
    "sort": lambda x: np.sort(x, -1), "topk": lambda x: -np.sort(-np.partition(x, -16, -1)[:, -16:], -1),
  }

def _run_sweep(ops: dict, wrap, sync, rng_seed: int = 1) -> dict:
  """Time each selected sweep workload that `ops` has: inputs wrapped (and realized) first, best of a few runs."""
  import numpy as np
  out = {}
  for name in SWEEP:
    if not want(name) or name not in ops: continue
    args = [wrap(a) for a in SWEEP_INPUTS(name, np.random.default_rng(rng_seed))]
    try: out[name] = best_time(lambda: sync(ops[name](*args)))
    except Exception as e: print(f"{name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    del args
  return out
PEERS = {   # name: (worker kind, extra environment)
  "tinyplug": ("tinyplug", {"DEV": "CPU"}),
  "numpy": ("numpy", {}),
  "torch": ("torch", {}),
  "tinygrad-clang": ("tinygrad", {"DEV": "CPU"}),
  "tinygrad-llvm": ("tinygrad", {"DEV": "CPU:LLVM"}),
}

# tinyplug with a first-party pass set turned off (TINY_PLUGINS=-<id>), and with all of them off (the core stages alone)
PASS_SETS = ("heuristic", "simplify", "vectorize", "fuse_rows", "split_reduce", "materialize")
PEERS.update({f"tinyplug-{p}": ("tinyplug", {"DEV": "CPU", "TINY_PLUGINS": f"-{p}"}) for p in PASS_SETS})
PEERS["tinyplug-all"] = ("tinyplug", {"DEV": "CPU", "TINY_PLUGINS": ",".join(f"-{p}" for p in PASS_SETS)})
DEFAULT_PEERS = ("tinyplug", "numpy", "torch", "tinygrad-clang", "tinygrad-llvm")

SELECTED: set[str] = set(WORKLOADS)   # --workloads narrows this

def want(key: str) -> bool: return key in SELECTED

def best_time(fn, reps: int = 5, budget_s: float = 3.0, warmup: int = 1, min_s: float = 0.3) -> float:
  """Best of at least `reps` runs; fast workloads keep running until `min_s` has passed (up to 1000 runs), so a
  sub-millisecond time is the best of many, not of 5 (the same rule for every framework)."""
  for _ in range(warmup): fn()
  times: list[float] = []
  start = time.perf_counter()
  while not times or (time.perf_counter() - start < budget_s and
                      (len(times) < reps or (time.perf_counter() - start < min_s and len(times) < 1000))):
    st = time.perf_counter(); fn(); times.append(time.perf_counter() - st)
  return min(times)

# ---------------- workers: one per framework, in their own process ----------------

RED_SHAPES = {"sq": (4096, 4096), "mid": (16, 4096, 256), "bn": (64, 64, 56, 56), "loss": (128, 10),
              "cum": (1024, 1024)}
# workload: (input, op, axis); ops: sum, mean, max, argmax, var, std, cumsum, lse (logsumexp), ln (layernorm), bn
# (batchnorm's statistics: mean and biased variance over the axes)
REDUCTIONS = {
  "sum0": ("sq", "sum", 0), "sum1": ("sq", "sum", 1), "sum_mid": ("mid", "sum", 1), "mean0": ("sq", "mean", 0),
  "max0": ("sq", "max", 0), "max_mid": ("mid", "max", 1), "bn_stats": ("bn", "bn", (0, 2, 3)),
  "loss_rows": ("loss", "lse", 1), "argmax0": ("sq", "argmax", 0), "argmax1": ("sq", "argmax", 1),
  "var0": ("sq", "var", 0), "std1": ("sq", "std", 1), "cumsum0": ("cum", "cumsum", 0), "cumsum1": ("cum", "cumsum", 1),
  "lse1": ("sq", "lse", 1), "layernorm": ("sq", "ln", -1)}

def _reduction_fn(lib: str, op: str, axis):
  """The workload's op in `lib`'s API: "tensor" (tinyplug, tinygrad), "numpy" or "torch"."""
  if lib == "tensor":
    return {"sum": lambda x: x.sum(axis), "mean": lambda x: x.mean(axis), "max": lambda x: x.max(axis),
            "argmax": lambda x: x.argmax(axis), "var": lambda x: x.var(axis), "std": lambda x: x.std(axis),
            "cumsum": lambda x: x.cumsum(axis), "lse": lambda x: x.logsumexp(axis), "ln": lambda x: x.layernorm(axis),
            "bn": lambda x: (x.mean(axis), x.var(axis, correction=0))}[op]
  if lib == "numpy":
    import numpy as np
    def ln(x):
      y = x - x.mean(axis, keepdims=True); return y / np.sqrt((y * y).mean(axis, keepdims=True) + 1e-5)
    def lse(x):
      m = x.max(axis, keepdims=True); return np.log(np.exp(x - m).sum(axis)) + m.squeeze(axis)
    return {"sum": lambda x: x.sum(axis), "mean": lambda x: x.mean(axis), "max": lambda x: x.max(axis),
            "argmax": lambda x: x.argmax(axis), "var": lambda x: x.var(axis, ddof=1),
            "std": lambda x: x.std(axis, ddof=1),
            "cumsum": lambda x: x.cumsum(axis), "lse": lse, "ln": ln, "bn": lambda x: (x.mean(axis), x.var(axis))}[op]
  import torch
  F = torch.nn.functional
  return {"sum": lambda x: x.sum(axis), "mean": lambda x: x.mean(axis), "max": lambda x: x.amax(axis),
          "argmax": lambda x: x.argmax(axis), "var": lambda x: x.var(axis), "std": lambda x: x.std(axis),
          "cumsum": lambda x: x.cumsum(axis), "lse": lambda x: x.logsumexp(axis),
          "ln": lambda x: F.layer_norm(x, x.shape[-1:]), "bn": lambda x: torch.var_mean(x, axis, correction=0)}[op]

def _reductions(lib: str, make, run) -> dict:
  """Times the selected REDUCTIONS: `make(shape)` builds a random float32 input, `run(result)` computes it."""
  out, inputs = {}, {}
  for key, (shape, op, axis) in REDUCTIONS.items():
    if not want(key): continue
    if shape not in inputs: inputs[shape] = make(RED_SHAPES[shape])
    fn, x = _reduction_fn(lib, op, axis), inputs[shape]
    out[key] = best_time(lambda: run(fn(x)))
  return out

def _tensor_workloads(Tensor, sync, quick: bool) -> dict:
  """tinyplug and tinygrad share the Tensor API."""
  import numpy as np
  rng = np.random.default_rng(0)
  out = {}
  sizes = (512, 1024) if quick else (512, 1024, 2048)
  for n in sizes:
    if not want(f"matmul_{n}"): continue
    a, b = Tensor(rng.random((n, n), dtype=np.float32)).realize(), Tensor(rng.random((n, n), dtype=np.float32)).realize()
    out[f"matmul_{n}"] = best_time(lambda: sync((a @ b).realize()), reps=3 if n >= 2048 else 5)
  a, b, c = [Tensor(rng.random(N_ELEM, dtype=np.float32)).realize() for _ in range(3)]
  if want("chain_16M"): out["chain_16M"] = best_time(lambda: sync((((a * b) + c).relu() * 0.5).realize()))
  if want("sum_16M"): out["sum_16M"] = best_time(lambda: sync(a.sum().realize()))
  x = Tensor(rng.random((4096, 4096), dtype=np.float32)).realize()
  if want("softmax_4096"): out["softmax_4096"] = best_time(lambda: sync(x.softmax(-1).realize()))
  xi = Tensor(rng.random((32, 3, 32, 32), dtype=np.float32)).realize()
  w = Tensor(rng.random((32, 3, 3, 3), dtype=np.float32)).realize()
  if want("conv2d"): out["conv2d"] = best_time(lambda: sync(xi.conv2d(w, padding=1).realize()))
  small = Tensor(rng.random(1024, dtype=np.float32)).realize()
  def first():   # a constant never seen before: a new kernel to schedule, lower and compile
    k = float(rng.random()) + 1.0
    st = time.perf_counter(); sync(((small * k) + 1.0).exp().realize()); return time.perf_counter() - st
  if want("first_result"): first(); out["first_result"] = min(first() for _ in range(5))
  t = Tensor(np.zeros(1, np.float32)).realize()
  def tiny():
    nonlocal t
    for _ in range(200): t = (t + 1.0).realize()
    sync(t)
  if want("tiny_op"): out["tiny_op"] = best_time(tiny) / 200
  def realize(r):
    for t in (r if isinstance(r, tuple) else (r,)): sync(t.realize())
  out.update(_reductions("tensor", lambda shape: Tensor(rng.random(shape, dtype=np.float32)).realize(), realize))
  out.update(_run_sweep(TENSOR_SWEEP, lambda a: Tensor(a).realize(), lambda t: sync(t.realize())))
  return out

def worker_tinyplug(quick: bool) -> dict:
  from tinyplug.tensor import Tensor
  out = _tensor_workloads(Tensor, lambda t: t, quick)
  out.update(rooflines())
  return out

def worker_tinygrad(quick: bool) -> dict:
  from tinygrad import Tensor, Device
  dev = Device[Device.DEFAULT]
  return _tensor_workloads(Tensor, lambda t: dev.synchronize(), quick)

def worker_numpy(quick: bool) -> dict:
  import numpy as np
  rng = np.random.default_rng(0)
  out = {}
  for n in ((512, 1024) if quick else (512, 1024, 2048)):
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    if want(f"matmul_{n}"): out[f"matmul_{n}"] = best_time(lambda: a @ b)
  a, b, c = [rng.random(N_ELEM, dtype=np.float32) for _ in range(3)]
  if want("chain_16M"): out["chain_16M"] = best_time(lambda: np.maximum((a * b) + c, 0) * 0.5)
  if want("sum_16M"): out["sum_16M"] = best_time(lambda: a.sum())
  x = rng.random((4096, 4096), dtype=np.float32)
  def softmax():
    e = np.exp(x - x.max(-1, keepdims=True)); return e / e.sum(-1, keepdims=True)
  if want("softmax_4096"): out["softmax_4096"] = best_time(softmax)
  xi, w = rng.random((32, 3, 32, 32), dtype=np.float32), rng.random((32, 3, 3, 3), dtype=np.float32)
  def conv():   # im2col + matmul, the usual numpy way
    p = np.pad(xi, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))   # (32, 3, 32, 32, 3, 3)
    return np.einsum("bchwij,ocij->bohw", cols, w, optimize=True)
  if want("conv2d"): out["conv2d"] = best_time(conv)
  small = rng.random(1024, dtype=np.float32)
  if want("first_result"): out["first_result"] = best_time(lambda: np.exp(small * 1.5 + 1.0))
  t = np.zeros(1, np.float32)
  if want("tiny_op"): out["tiny_op"] = best_time(lambda: [t + 1.0 for _ in range(200)]) / 200
  out.update(_reductions("numpy", lambda shape: rng.random(shape, dtype=np.float32), lambda r: r))
  out.update(_run_sweep(_numpy_sweep(np), lambda a: a, lambda r: r))
  return out

def peer_threads() -> int:
  """The threads the peers get: as many as tinyplug runs on (CPU_THREADS, else every core this process may use)."""
  n = int(os.environ.get("CPU_THREADS", "0") or 0)
  if n > 0: return n
  try: return len(os.sched_getaffinity(0))
  except (AttributeError, OSError): return os.cpu_count() or 1

def worker_torch(quick: bool) -> dict:
  import numpy as np, torch
  torch.set_num_threads(peer_threads())
  g = torch.Generator().manual_seed(0)
  out = {}
  for n in ((512, 1024) if quick else (512, 1024, 2048)):
    a, b = torch.rand(n, n, generator=g), torch.rand(n, n, generator=g)
    if want(f"matmul_{n}"): out[f"matmul_{n}"] = best_time(lambda: a @ b)
  a, b, c = [torch.rand(N_ELEM, generator=g) for _ in range(3)]
  if want("chain_16M"): out["chain_16M"] = best_time(lambda: (((a * b) + c).relu() * 0.5))
  if want("sum_16M"): out["sum_16M"] = best_time(lambda: a.sum())
  x = torch.rand(4096, 4096, generator=g)
  if want("softmax_4096"): out["softmax_4096"] = best_time(lambda: x.softmax(-1))
  xi, w = torch.rand(32, 3, 32, 32, generator=g), torch.rand(32, 3, 3, 3, generator=g)
  if want("conv2d"): out["conv2d"] = best_time(lambda: torch.nn.functional.conv2d(xi, w, padding=1))
  small = torch.rand(1024, generator=g)
  if want("first_result"): out["first_result"] = best_time(lambda: ((small * 1.5) + 1.0).exp())
  t = torch.zeros(1)
  if want("tiny_op"): out["tiny_op"] = best_time(lambda: [t + 1.0 for _ in range(200)]) / 200
  out.update(_reductions("torch", lambda shape: torch.rand(*shape, generator=g), lambda r: r))
  out.update(_run_sweep(_torch_sweep(torch), torch.from_numpy, lambda r: r))
  return out

# ---------------- rooflines, measured with hand-written IR on the cpu_llvm runtime ----------------

_TRIAD = """
define void @triad(ptr noalias %a, ptr noalias %b, ptr noalias %c, i32 %n, i32 %core_id, i32 %n_cores) {
entry:
  %n64 = sext i32 %n to i64
  %c64 = sext i32 %core_id to i64
  %k64 = sext i32 %n_cores to i64
  %s0 = mul i64 %n64, %c64
  %start = sdiv i64 %s0, %k64
  %c1 = add i64 %c64, 1
  %s1 = mul i64 %n64, %c1
  %stop = sdiv i64 %s1, %k64
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%next, %body]
  %done = icmp sge i64 %i, %stop
  br i1 %done, label %exit, label %body
body:
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %pc = getelementptr inbounds float, ptr %c, i64 %i
  %vb = load float, ptr %pb, align 4
  %vc = load float, ptr %pc, align 4
  %m = fmul float %vc, 3.0
  %s = fadd float %vb, %m
  %pa = getelementptr inbounds float, ptr %a, i64 %i
  store float %s, ptr %pa, align 4
  %next = add nuw nsw i64 %i, 1
  br label %loop
exit:
  ret void
}
"""

def _fma_ir(chains: int = 12, width: int = 16) -> str:
  t = f"<{width} x float>"
  phis, body, outs = [], [], []
  for k in range(chains):
    phis.append(f"  %acc{k} = phi {t} [zeroinitializer, %entry], [%nacc{k}, %loop]")
    body.append(f"  %nacc{k} = call {t} @llvm.fma.v{width}f32({t} %acc{k}, {t} %x, {t} %y)")
  sums = [f"%nacc{k}" for k in range(chains)]
  red = []
  while len(sums) > 1:
    a, b = sums.pop(), sums.pop()
    red.append(f"  %r{len(red)} = fadd {t} {a}, {b}"); sums.insert(0, f"%r{len(red)-1}")
  return f"""
define void @fma_peak(ptr noalias %out, i32 %iters, i32 %core_id, i32 %n_cores) {{
entry:
  %p = getelementptr inbounds float, ptr %out, i32 0
  %s = load float, ptr %p, align 4
  %xi = insertelement {t} poison, float %s, i32 0
  %x = shufflevector {t} %xi, {t} poison, <{width} x i32> zeroinitializer
  %y = fadd {t} %x, %x
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%next, %loop]
{chr(10).join(phis)}
{chr(10).join(body)}
  %next = add i32 %i, 1
  %c = icmp slt i32 %next, %iters
  br i1 %c, label %loop, label %exit
exit:
{chr(10).join(red)}
  %lane = extractelement {t} {sums[0]}, i32 0
  %q = mul i32 %core_id, 16
  %po = getelementptr inbounds float, ptr %out, i32 %q
  store float %lane, ptr %po, align 4
  ret void
}}
declare {t} @llvm.fma.v{width}f32({t}, {t}, {t})
""", chains * width * 2

def rooflines() -> dict:
  import ctypes, numpy as np
  from tinyplug.device import Device
  from tinyplug_cpu_llvm.compiler import symbol_for
  from tinyplug_cpu_llvm.runtime import n_threads
  dev = Device["CPU"]
  def load(src: str, argtypes):
    addr = dev.load(symbol_for(src), dev.compiler.compile_cached(src))
    return ctypes.CFUNCTYPE(None, *argtypes)(addr)
  nt = n_threads()
  triad = load(_TRIAD, [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 3)
  n = 64 * 1024 * 1024
  a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)
  t = best_time(lambda: dev.pool.run(triad, [a.ctypes.data, b.ctypes.data, c.ctypes.data, n], nt), reps=5)
  src, flops_per_iter = _fma_ir()
  fma = load(src, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32])
  out, iters = np.ones(16 * max(nt, 4), np.float32), 2_000_000   # each core stores its lane at out[16 * core]
  tf = best_time(lambda: dev.pool.run(fma, [out.ctypes.data, iters], nt), reps=5)
  return {"roof_bandwidth_GBs": 3 * 4 * n / t / 1e9, "roof_gflops": flops_per_iter * iters * nt / tf / 1e9, "threads": nt}

WORKERS = {"tinyplug": worker_tinyplug, "numpy": worker_numpy, "torch": worker_torch, "tinygrad": worker_tinygrad}

# ---------------- driver ----------------

def parse_variant(text: str) -> tuple[str, dict[str, str]]:
  """`NAME:KEY=VALUE[,KEY=VALUE...]`: tinyplug run again with these environment variables, shown as peer NAME."""
  name, _, pairs = text.partition(":")
  # a comma starts the next pair only before KEY=, so values may hold commas (TINY_PLUGINS=-a,-b)
  env = dict(pair.split("=", 1) for pair in re.split(r",(?=[A-Za-z_][A-Za-z0-9_]*=)", pairs) if pair)
  if not name or name in PEERS or not env: raise SystemExit(f"--variant {text!r}: want NEW_NAME:KEY=VALUE[,KEY=VALUE]")
  return name, {"DEV": "CPU", **env}

def run_peer(name: str, quick: bool) -> dict | str:
  kind, env = PEERS[name]
  cmd = [sys.executable, __file__, "--worker", kind, "--workloads", ",".join(SELECTED)] + (["--quick"] if quick else [])
  try:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, **env})
  except subprocess.TimeoutExpired: return "timed out"
  if p.returncode != 0: return (p.stderr.strip().splitlines() or ["failed"])[-1][:100]
  return json.loads(p.stdout.strip().splitlines()[-1])

def fmt_time(s: float) -> str:
  return f"{s*1e6:.1f} us" if s < 1e-3 else f"{s*1e3:.2f} ms" if s < 1 else f"{s:.2f} s"

def table(results: dict, peers: list[str]) -> str:
  tp = results.get("tinyplug", {})
  tp = tp if isinstance(tp, dict) else {}
  others = [p for p in peers if p != "tinyplug"]
  head = ["workload", "tinyplug"] + [f"{p}" for p in others] + [f"{p} / tinyplug" for p in others] + ["tinyplug % of roof"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  bw, peak = tp.get("roof_bandwidth_GBs"), tp.get("roof_gflops")
  for key, (desc, flops, nbytes) in WORKLOADS.items():
    if key not in SELECTED: continue
    row = [desc, fmt_time(tp[key]) if key in tp else "-"]
    for p in others:
      r = results.get(p)
      row.append(fmt_time(r[key]) if isinstance(r, dict) and key in r else "-")
    for p in others:   # > 1: tinyplug is faster
      r = results.get(p)
      row.append(f"{r[key] / tp[key]:.2f}x" if isinstance(r, dict) and key in r and key in tp else "-")
    roof = "-"
    if key in tp and bw and peak and (flops or nbytes):
      t_min = max(flops / (peak * 1e9), nbytes / (bw * 1e9))
      roof = f"{100 * t_min / tp[key]:.1f}%"
    row.append(roof)
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--worker", choices=sorted(WORKERS))
  ap.add_argument("--only", default=",".join(DEFAULT_PEERS), help="comma list of: " + ", ".join(PEERS))
  ap.add_argument("--pass-sets", action="store_true", help="tinyplug as is, and with each optimisation pass set off "
                  "(tinyplug-<id>: TINY_PLUGINS=-<id>; tinyplug-all: all of them off); X / tinyplug > 1: the pass set "
                  "makes it that much faster")
  ap.add_argument("--quick", action="store_true", help="skip the 2048 matmul")
  ap.add_argument("--workloads", default="", help="comma list of words; run the workloads whose key contains one "
                  f"({', '.join(WORKLOADS)})")
  ap.add_argument("--rounds", type=int, default=1, help="run every peer this many times, taking turns, and keep each "
                  "workload's best (a machine whose speed swings hurts whoever runs during a slow spell)")
  ap.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE]: also run tinyplug with "
                  "these environment variables as peer NAME (PYTHONPATH=<another checkout> compares two versions)")
  args = ap.parse_args()
  variants = [parse_variant(text) for text in args.variant]
  for name, env in variants: PEERS[name] = ("tinyplug", env)
  if args.workloads:
    words = [w for w in args.workloads.split(",") if w]
    SELECTED.intersection_update(k for k in WORKLOADS if any(w in k for w in words))
  if args.worker:
    print(json.dumps(WORKERS[args.worker](args.quick)))
    return
  peers = [p for p in args.only.split(",") if p] + [name for name, _ in variants]
  if args.pass_sets: peers = ["tinyplug"] + [f"tinyplug-{p}" for p in PASS_SETS] + ["tinyplug-all"]
  try:
    from first_step import _cpu_name
    print(f"CPU: {_cpu_name()}", file=sys.stderr)
  except Exception: pass
  results: dict = {}
  for rnd in range(max(1, args.rounds)):
    for p in peers:
      print(f"running {p} ..." + (f" (round {rnd + 1})" if args.rounds > 1 else ""), file=sys.stderr, flush=True)
      r = run_peer(p, args.quick)
      if not isinstance(r, dict): print(f"  {p}: {r}", file=sys.stderr)
      prev = results.get(p)
      if isinstance(prev, dict) and isinstance(r, dict):
        # times: the best of the rounds; rooflines: the highest
        results[p] = {k: (max if k.startswith("roof") else min)(prev[k], r[k]) if k in prev and k != "threads" else r[k]
                      for k in r}
      elif not isinstance(prev, dict): results[p] = r
  tp = results.get("tinyplug")
  if isinstance(tp, dict):
    print(f"rooflines ({tp['threads']} threads, hand-written LLVM IR): triad {tp['roof_bandwidth_GBs']:.1f} GB/s, "
          f"fp32 FMA peak {tp['roof_gflops']:.1f} GFLOP/s")
  print(table(results, peers))
  for p, r in results.items():
    if not isinstance(r, dict): print(f"- {p}: not run ({r})")

if __name__ == "__main__": main()
