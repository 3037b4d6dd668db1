"""Short training runs: the loss falls and the model learns (real digits, when scikit-learn is installed)."""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest
from tinyplug import Tensor, TinyJit, nn
from tinyplug.nn.optim import Adam, SGD
from tinyplug.nn.state import get_parameters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def test_mlp_learns_digits():
  sklearn_datasets = pytest.importorskip("sklearn.datasets")
  d = sklearn_datasets.load_digits()
  X, Y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
  X_train, Y_train, X_test, Y_test = X[:1400], Y[:1400], X[1400:], Y[1400:]
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(64, 32), nn.Linear(32, 10)
  opt = Adam(get_parameters([l1, l2]), lr=0.01)
  @TinyJit
  @Tensor.train()
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  rng = np.random.default_rng(0)
  losses = []
  for _ in range(120):
    idx = rng.integers(0, len(X_train), 64)
    losses.append(step(Tensor(X_train[idx]), Tensor(Y_train[idx])).item())
  assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
  acc = (l2(l1(Tensor(X_test)).relu()).argmax(axis=1).numpy() == Y_test).mean()
  assert acc > 0.85, f"test accuracy {acc:.3f}"

def test_cnn_loss_falls():
  """Two 3x3 convs + linear (the example's shape, smaller), SGD with momentum on a fixed batch."""
  Tensor.manual_seed(1)
  c1, c2, lin = nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3), nn.Linear(4, 2)
  opt = SGD(get_parameters([c1, c2, lin]), lr=0.05, momentum=0.9)
  rng = np.random.default_rng(0)
  y = np.array([0, 1, 0, 1], dtype=np.int32)
  x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32) + y[:, None, None, None] * 0.5
  losses = []
  with Tensor.train():
    for _ in range(8):
      opt.zero_grad()
      out = lin(c2(c1(Tensor(x)).relu().max_pool2d(2)).relu().flatten(1))
      loss = out.sparse_categorical_crossentropy(Tensor(y)).backward()
      losses.append(loss.realize(*opt.schedule_step()).item())
  assert losses[-1] < 0.7 * losses[0], losses

@pytest.mark.slow
def test_mnist_example_runs():
  env = dict(os.environ, STEPS="12", BS="16", EVAL_BS="128", DATASETS_OFFLINE="1")   # never the network in tests
  r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mnist.py")], env=env, capture_output=True,
                     text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "mnist: " in r.stderr and "test accuracy" in r.stdout and "step    12/12" in r.stdout
