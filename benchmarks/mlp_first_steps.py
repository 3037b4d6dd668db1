"""The first 5 steps of a small MLP training loop (784-128-10, Adam, batch 64, no TinyJit), as a user writes it
(issue 19, item 6). One line: import, setup (model and optimiser), each step, their sum, LLVM compiles, the loss.
Run it twice with the same XDG_CACHE_HOME: the second run is the warm-cache number.

    XDG_CACHE_HOME=/tmp/c python benchmarks/mlp_first_steps.py; XDG_CACHE_HOME=/tmp/c python benchmarks/mlp_first_steps.py
"""
import time, sys
T0 = time.perf_counter()
import numpy as np
from tinyplug import Tensor, nn
from tinyplug.nn.optim import Adam
T1 = time.perf_counter()
rng = np.random.default_rng(0)
class MLP:
  def __init__(self): self.l1, self.l2 = nn.Linear(784, 128), nn.Linear(128, 10)
  def __call__(self, x): return self.l2(self.l1(x).relu())
m = MLP()
opt = Adam(nn.state.get_parameters(m), lr=1e-3)
T2 = time.perf_counter()
times = []
with Tensor.train():
  for step in range(5):
    x = Tensor(rng.standard_normal((64, 784), dtype=np.float32))
    y = Tensor(rng.integers(0, 10, 64).astype(np.int32))
    st = time.perf_counter()
    opt.zero_grad()
    loss = m(x).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    l = loss.item()
    times.append(time.perf_counter() - st)
from tinyplug_cpu_llvm.compiler import LLVMCompiler
print(f"import {T1-T0:.2f}s setup {T2-T1:.2f}s steps " + " ".join(f"{t:.2f}" for t in times) + f" total5 {sum(times):.2f}s compiles {LLVMCompiler.compiles} loss {l:.3f}")
