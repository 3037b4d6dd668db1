#!/usr/bin/env python3
"""Train a small CNN on handwritten digits with Adam and TinyJit, and report the test accuracy.

    python examples/mnist.py                 # default device (CPU via LLVM when installed)
    STEPS=200 BS=64 LR=0.002 python examples/mnist.py
    VIZ=1 python examples/mnist.py           # browse the graph rewrites and the profile
    JIT=0 python examples/mnist.py           # no kernel replay: every step re-traces the Python

The data is MNIST when it can be downloaded (or is cached), else scikit-learn's bundled 8x8 digits upscaled to
28x28; the first line says which. The model is two 3x3 convolutions and a linear layer.
"""
from __future__ import annotations
import sys, time
import numpy as np
from tinyplug import Tensor, TinyJit, Device, GlobalCounters
from tinyplug import nn
from tinyplug.helpers import getenv
from tinyplug.nn.datasets import mnist_numpy
from tinyplug.nn.optim import Adam
from tinyplug.nn.state import get_parameters

class Model:
  def __init__(self, batchnorm: bool = False):
    self.c1, self.c2 = nn.Conv2d(1, 16, 3), nn.Conv2d(16, 32, 3)
    self.bn1, self.bn2 = (nn.BatchNorm(16), nn.BatchNorm(32)) if batchnorm else (None, None)
    self.l1 = nn.Linear(32 * 5 * 5, 10)
  def __call__(self, x: Tensor) -> Tensor:
    x = (x.float() / 255.0 - 0.1307) / 0.3081                    # uint8 pixels -> normalised floats
    x = self.c1(x)                                               # (N, 16, 26, 26)
    if self.bn1 is not None: x = self.bn1(x)
    x = x.relu().max_pool2d(2)                                   # (N, 16, 13, 13)
    x = self.c2(x)                                               # (N, 32, 11, 11)
    if self.bn2 is not None: x = self.bn2(x)
    x = x.relu().max_pool2d(2)                                   # (N, 32, 5, 5)
    return self.l1(x.flatten(1))

class Progress:
  """A one-line progress bar: `step 120/400 [#####.....] 30% loss 0.12 acc 96.9% | 8.3 steps/s eta 34s`."""
  def __init__(self, total: int, width: int = 24, out=sys.stdout):
    self.total, self.width, self.out, self.start = total, width, out, time.perf_counter()
    self.interactive = out.isatty()
    self.last_print = 0.0
  def update(self, done: int, text: str) -> None:
    now = time.perf_counter()
    if not self.interactive and done != self.total and now - self.last_print < 5.0: return   # logs: every 5 s
    self.last_print = now
    frac = done / self.total
    rate = done / max(now - self.start, 1e-9)
    eta = (self.total - done) / rate if rate > 0 else 0.0
    bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
    line = f"step {done:5d}/{self.total} [{bar}] {frac*100:3.0f}% {text} | {rate:5.1f} steps/s eta {eta:4.0f}s"
    self.out.write(("\r" + line) if self.interactive else (line + "\n"))
    self.out.flush()
  def close(self) -> None:
    if self.interactive: self.out.write("\n")

def augment(x: np.ndarray, rng: np.random.Generator, max_shift: int = 2) -> np.ndarray:
  """Shift each image by up to `max_shift` pixels (zero fill): cheap augmentation for the small digits set."""
  out = np.zeros_like(x)
  n, _, h, w = x.shape
  dy, dx = rng.integers(-max_shift, max_shift + 1, size=(2, n))
  for i in range(n):
    ys, yd = (slice(0, h - dy[i]), slice(dy[i], h)) if dy[i] >= 0 else (slice(-dy[i], h), slice(0, h + dy[i]))
    xs, xd = (slice(0, w - dx[i]), slice(dx[i], w)) if dx[i] >= 0 else (slice(-dx[i], w), slice(0, w + dx[i]))
    out[i, :, yd, xd] = x[i, :, ys, xs]
  return out

def main() -> float:
  t_start = time.perf_counter()
  data = mnist_numpy()
  small = len(data.X_train) < 10000
  BS, LR = getenv("BS", 64), getenv("LR", 0.002 if small else 0.001)
  STEPS = getenv("STEPS", 500 if small else 1000)
  EVAL_BS = getenv("EVAL_BS", 512)
  print(f"device {Device.DEFAULT}; {STEPS} steps of batch {BS}, Adam lr {LR}")

  Tensor.manual_seed(getenv("SEED", 42))
  rng = np.random.default_rng(getenv("SEED", 42))
  model = Model(batchnorm=bool(getenv("BN", 0)))
  opt = Adam(get_parameters(model), lr=LR)

  @TinyJit
  @Tensor.train()
  def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    opt.zero_grad()
    out = model(x)
    loss = out.sparse_categorical_crossentropy(y).backward()
    acc = (out.argmax(axis=1) == y).float().mean()
    return loss.realize(acc, *opt.schedule_step()), acc

  @TinyJit
  def eval_step(x: Tensor) -> Tensor: return model(x).argmax(axis=1).realize()

  def test_accuracy() -> float:
    preds = []
    n_full = len(data.X_test) // EVAL_BS * EVAL_BS
    for i in range(0, n_full, EVAL_BS): preds.append(eval_step(Tensor(data.X_test[i:i + EVAL_BS])).numpy())
    if n_full < len(data.X_test): preds.append(model(Tensor(data.X_test[n_full:])).argmax(axis=1).numpy())
    return float((np.concatenate(preds) == data.Y_test).mean())

  bar = Progress(STEPS)
  loss_avg = acc_avg = None
  t_train = time.perf_counter()
  for step in range(1, STEPS + 1):
    idx = rng.integers(0, len(data.X_train), size=BS)
    x = augment(data.X_train[idx], rng) if small else data.X_train[idx]
    loss, acc = train_step(Tensor(x), Tensor(data.Y_train[idx]))
    loss_v, acc_v = loss.item(), acc.item()
    loss_avg = loss_v if loss_avg is None else 0.9 * loss_avg + 0.1 * loss_v
    acc_avg = acc_v if acc_avg is None else 0.9 * acc_avg + 0.1 * acc_v
    bar.update(step, f"loss {loss_avg:6.3f} train acc {acc_avg*100:5.1f}%")
  bar.close()
  train_s = time.perf_counter() - t_train
  test_acc = test_accuracy()
  total_s = time.perf_counter() - t_start
  print(f"test accuracy {test_acc*100:.2f}% on {len(data.X_test)} images of {data.source.split(' (')[0]}; "
        f"training {train_s:.1f}s ({STEPS/train_s:.1f} steps/s, {GlobalCounters.kernel_count} kernels run), "
        f"total {total_s:.1f}s")
  target = getenv("TARGET_EVAL_ACC_PCT", 0.0)
  if target and test_acc * 100 < target:
    raise SystemExit(f"test accuracy {test_acc*100:.2f}% is below the target {target}%")
  return test_acc

if __name__ == "__main__":
  main()
