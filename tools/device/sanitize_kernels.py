"""Kernels of each kind the cuda plugin renders (elementwise, grouped reductions through shared memory, a tiled
matmul, softmax, a conv, half math, a JIT'd training step), run under compute-sanitizer, values checked."""
import numpy as np
from tinyplug import Tensor, TinyJit, dtypes, nn
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 517), dtype=np.float32)
w = rng.standard_normal((517, 129), dtype=np.float32)
checks = {
  "chain": ((Tensor(x) * 2 + 1).relu().numpy(), np.maximum(x * 2 + 1, 0)),
  "row sum": (Tensor(x).sum(1).numpy(), x.sum(1)),
  "col max": (Tensor(x).max(0).numpy(), x.max(0)),
  "big sum": (Tensor(np.ones(1 << 21, np.float32)).sum().numpy(), np.float32(1 << 21)),
  "softmax": (Tensor(x).softmax(-1).numpy(), np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
  "matmul": ((Tensor(x) @ Tensor(w)).numpy(), x @ w),
  "half": ((Tensor(x, dtype=dtypes.half) * 3).float().numpy(), x.astype(np.float16).astype(np.float32) * 3),
  "argmax": (Tensor(x).argmax(1).numpy(), x.argmax(1)),
  "cumsum": (Tensor(x[:8]).cumsum(1).numpy(), x[:8].cumsum(1)),
}
# rows long enough to be shared by a work-group that combines in two rounds (float4 loads, two barriers)
rows = rng.standard_normal((64, 4096), dtype=np.float32)
checks["wide row max"] = (Tensor(rows).max(1).numpy(), rows.max(1))
checks["wide softmax"] = (Tensor(rows).softmax(-1).numpy(), np.exp(rows - rows.max(1, keepdims=True)) /
                          np.exp(rows - rows.max(1, keepdims=True)).sum(1, keepdims=True))
a16, b16 = rng.standard_normal((256, 128), dtype=np.float32), rng.standard_normal((128, 192), dtype=np.float32)
want16 = a16.astype(np.float16).astype(np.float32) @ b16.astype(np.float16).astype(np.float32)
checks["fp16 matmul (tensor cores)"] = ((Tensor(a16, dtype=dtypes.half) @ Tensor(b16, dtype=dtypes.half)).float().numpy(), want16)
# the staged tensor-core tile with STAGE's vector fills and padded tiles (16-byte loads scattered to the fragment slots)
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.testing.kernels import run_kernel
s16 = [rng.standard_normal((256, 256), dtype=np.float32).astype(np.float16) for _ in range(2)]
vector_fill = [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
               Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 15)]
staged = Tensor(s16[0]).realize().matmul(Tensor(s16[1]).realize(), dtype=dtypes.float)
checks["fp16 matmul (tensor cores, STAGE:15)"] = (run_kernel(staged, Device.DEFAULT, vector_fill)[0],
                                                  s16[0].astype(np.float32) @ s16[1].astype(np.float32))
# the asynchronous mode: cp.async into swizzled row-major tiles, ldmatrix, 3 and 4 stages, blocks in grouped order
for arg in (304, 80):
  staged = Tensor(s16[0]).realize().matmul(Tensor(s16[1]).realize(), dtype=dtypes.float)
  checks[f"fp16 matmul (tensor cores, STAGE:{arg})"] = (run_kernel(staged, Device.DEFAULT, vector_fill[:-1] + [Opt(OptOps.STAGE, None, arg)])[0],
                                                        s16[0].astype(np.float32) @ s16[1].astype(np.float32))
# Hopper only: the wgmma kernel (plugins/cuda/src/tinyplug_cuda/wgmma.py), 2 warpgroups, 3 stages, one group in flight
if Device["CUDA"].arch == "sm_90":
  from tinyplug.device import Buffer
  from tinyplug_cuda.wgmma import matmul_kernel, program
  wa, wb = (rng.standard_normal(s, dtype=np.float32).astype(np.float16) for s in ((256, 320), (320, 256)))
  WA, WB, WC = Buffer("CUDA", wa.size, dtypes.half).copyin(wa), Buffer("CUDA", wb.size, dtypes.half).copyin(wb), Buffer("CUDA", 256 * 256, dtypes.float)
  program(matmul_kernel(256, 256, 320, stages=3, inflight=1), "CUDA")(WC, WA, WB)
  checks["fp16 matmul (wgmma)"] = (WC.numpy().reshape(256, 256), wa.astype(np.float32) @ wb.astype(np.float32))
  # the optimiser's wgmma kernel: the wgmma cores (TC 3), STAGE's descriptor mode in 3 stages, grouped blocks
  was, Device["CUDA"].renderer.wgmma = Device["CUDA"].renderer.wgmma, True
  staged = Tensor(s16[0]).realize().matmul(Tensor(s16[1]).realize(), dtype=dtypes.float)
  wg_opts = [Opt(OptOps.TC, 0, 3), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 2352)]
  checks["fp16 matmul (wgmma, STAGE:2352)"] = (run_kernel(staged, Device.DEFAULT, wg_opts)[0],
                                               s16[0].astype(np.float32) @ s16[1].astype(np.float32))
  Device["CUDA"].renderer.wgmma = was
img, k = rng.standard_normal((4, 8, 20, 20), dtype=np.float32), rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
import torch
checks["conv"] = (Tensor(img).conv2d(Tensor(k), padding=1).numpy(), torch.nn.functional.conv2d(torch.tensor(img), torch.tensor(k), padding=1).numpy())
for name, (got, want) in checks.items():
  np.testing.assert_allclose(got, want, rtol=1e-2 if "fp16" in name else 1e-3, atol=1e-1 if "fp16" in name else 1e-3, err_msg=name)
Tensor.manual_seed(0)
lin = nn.Linear(32, 4); opt = nn.optim.SGD(nn.state.get_parameters(lin), lr=0.1)
xs, ys = Tensor.randn(64, 32), Tensor.randint(64, high=4)
@TinyJit
def step():
  Tensor.training = True
  opt.zero_grad(); loss = lin(xs).sparse_categorical_crossentropy(ys).backward(); opt.step()
  Tensor.training = False
  return loss.realize()
losses = [step().item() for _ in range(4)]
assert losses[-1] < losses[0], losses
print("SANITIZE-KERNELS OK", len(checks) + 1, "checks")
