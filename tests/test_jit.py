"""TinyJit: capture on call 2, replay with new inputs from call 3, refuse changed inputs, JIT=0 runs eagerly."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Context, Tensor, TinyJit, dtypes, nn
from tinyplug.engine.jit import JitError
from tinyplug.nn.optim import Adam, SGD
from tinyplug.nn.state import get_parameters, get_state_dict, load_state_dict
from tinyplug.tensor_ops.random import RNGState

def data(i: int, shape=(3, 4)) -> np.ndarray:
  return np.random.default_rng(i).standard_normal(shape).astype(np.float32)

def test_replay_uses_new_inputs_by_position(device):
  calls = []
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    calls.append(1)
    return (a * 2 + b).sum(axis=1).realize()
  for i in range(5):
    a, b = data(i), data(100 + i)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), (a * 2 + b).sum(axis=1), rtol=1e-5, atol=1e-6)
  assert len(calls) == 2        # the Python body ran on calls 1 and 2 only
  assert len(f.captured) >= 1

def test_multiple_outputs_and_kwargs():
  @TinyJit
  def f(x: Tensor, *, scale: Tensor) -> tuple[Tensor, Tensor]:
    return (x * scale).realize(), (x + scale).sum().realize()
  for i in range(4):
    x, s = data(i, (2, 2)), data(50 + i, (2, 2))
    y, z = f(Tensor(x), scale=Tensor(s))
    np.testing.assert_allclose(y.numpy(), x * s, rtol=1e-6)
    np.testing.assert_allclose(z.item(), (x + s).sum(), rtol=1e-5)

def test_inputs_that_are_views_or_lazy():
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).realize()
  for i in range(4):
    base = data(i, (4, 4))
    x = Tensor(base)[1:3].permute(1, 0) * 1   # lazy graph over a view
    np.testing.assert_allclose(f(x).numpy(), base[1:3].T + 1, rtol=1e-6)

def test_refuses_changed_shapes_and_dtypes():
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 2).realize()
  for i in range(3): f(Tensor(data(i)))
  with pytest.raises(JitError, match=r"argument 0 changed from shape \(3, 4\).*to shape \(4, 4\)"): f(Tensor(data(0, (4, 4))))
  with pytest.raises(JitError, match="dtype"): f(Tensor(data(0)).cast(dtypes.float16))
  with pytest.raises(JitError, match="captured with 1 tensor arguments"): f(Tensor(data(0)), Tensor(data(1)))
  np.testing.assert_allclose(f(Tensor(data(7))).numpy(), data(7) * 2)   # still usable afterwards

def test_jit_off_runs_eagerly():
  calls = []
  @TinyJit
  def f(x: Tensor) -> Tensor:
    calls.append(1)
    return (x - 1).realize()
  with Context(JIT=0):
    for i in range(4): np.testing.assert_allclose(f(Tensor(data(i))).numpy(), data(i) - 1)
  assert len(calls) == 4 and f.captured is None

def test_reset_and_method_decorator():
  class Model:
    def __init__(self): self.w = Tensor(data(0, (4, 2))).realize()
    @TinyJit
    def __call__(self, x: Tensor) -> Tensor: return (x @ self.w).realize()
  m = Model()
  for i in range(3): np.testing.assert_allclose(m(Tensor(data(i))).numpy(), data(i) @ data(0, (4, 2)), rtol=1e-5)
  Model.__call__.reset()
  assert Model.__call__.captured is None
  np.testing.assert_allclose(m(Tensor(data(9))).numpy(), data(9) @ data(0, (4, 2)), rtol=1e-5)

def test_duplicate_input_refused():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  x = Tensor(data(0))
  with pytest.raises(JitError, match="twice"): f(x, x)

class TinyNet:
  def __init__(self):
    self.conv = nn.Conv2d(1, 2, 3)
    self.bn = nn.BatchNorm2d(2)
    self.lin = nn.Linear(2 * 3 * 3, 3)
  def __call__(self, x: Tensor) -> Tensor:
    return self.lin(self.bn(self.conv(x)).relu().max_pool2d(2).flatten(1))

def _train(jit: bool, steps: int, opt_cls) -> tuple[list[float], dict[str, np.ndarray]]:
  Tensor.manual_seed(0)
  net = TinyNet()
  init = {k: v.numpy() for k, v in get_state_dict(net).items()}
  net = TinyNet()
  load_state_dict(net, {k: Tensor(v) for k, v in init.items()})
  opt = opt_cls(get_parameters(net))
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = net(x).sparse_categorical_crossentropy(y).backward()
      return loss.realize(*opt.schedule_step())
  fn = TinyJit(step)
  losses = []
  with Context(JIT=int(jit)):
    for i in range(steps):
      rng = np.random.default_rng(i)
      x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
      y = rng.integers(0, 3, 4).astype(np.int32)
      losses.append(fn(Tensor(x), Tensor(y)).item())
  return losses, {k: v.numpy() for k, v in get_state_dict(net).items()}

@pytest.mark.parametrize("opt_cls", [lambda ps: Adam(ps, lr=0.01), lambda ps: SGD(ps, lr=0.05, momentum=0.9)],
                         ids=["adam", "sgd"])
def test_jitted_training_equals_eager(opt_cls):
  eager_losses, eager_state = _train(False, 6, opt_cls)
  jit_losses, jit_state = _train(True, 6, opt_cls)
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5, atol=1e-6)
  for k in eager_state: np.testing.assert_allclose(jit_state[k], eager_state[k], rtol=1e-5, atol=1e-6, err_msg=k)
  assert int(jit_state["bn.num_batches_tracked"][0]) == 6   # state updated by replays too

@pytest.mark.slow
def test_jitted_training_every_device(device):
  eager_losses, _ = _train(False, 4, lambda ps: Adam(ps, lr=0.01))
  jit_losses, _ = _train(True, 4, lambda ps: Adam(ps, lr=0.01))
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5, atol=1e-6)

# ---------------- random numbers inside a jitted function ----------------

def _draws(jit: bool, fn, calls: int = 5) -> list[np.ndarray]:
  Tensor.manual_seed(3)
  f = TinyJit(fn)
  with Context(JIT=int(jit)):
    return [f(Tensor(data(i, (2, 3)))).numpy().copy() for i in range(calls)]

def test_rand_is_fresh_on_every_replay_and_matches_eager(device):
  def f(x: Tensor) -> Tensor: return (x * 0 + Tensor.rand(2, 3)).realize()
  eager, jitted = _draws(False, f), _draws(True, f)
  for e, j in zip(eager, jitted): np.testing.assert_array_equal(j, e)
  assert len({j.tobytes() for j in jitted}) == len(jitted)   # calls 3-5 are replays, each with new numbers

def test_several_draws_and_the_sequence_after_the_jit(device):
  """Two draws per call (rand and randn), then eager draws continue where the replays left off, like tinygrad."""
  def f(x: Tensor) -> Tensor: return (x + Tensor.rand(2, 3) * Tensor.randn(3)).realize()
  eager, jitted = _draws(False, f), _draws(True, f)
  for e, j in zip(eager, jitted): np.testing.assert_allclose(j, e, rtol=1e-6, atol=1e-6)
  after_jit = Tensor.rand(5).numpy()
  _draws(False, f)
  np.testing.assert_array_equal(after_jit, Tensor.rand(5).numpy())

def test_dropout_masks_change_between_replays():
  def f(x: Tensor) -> Tensor:
    with Tensor.train(): return x.dropout(0.5).realize()
  Tensor.manual_seed(0)
  jf = TinyJit(f)
  masks = [jf(Tensor.ones(64).contiguous()).numpy() != 0 for _ in range(5)]
  assert len({m.tobytes() for m in masks}) == 5 and all(10 < m.sum() < 54 for m in masks)
  Tensor.manual_seed(0)
  eager = [f(Tensor.ones(64).contiguous()).numpy() != 0 for _ in range(5)]
  for m, e in zip(masks, eager): np.testing.assert_array_equal(m, e)

def test_jitted_training_with_dropout_equals_eager():
  def train(jit: bool) -> list[float]:
    Tensor.manual_seed(0)
    lin = nn.Linear(6, 3)
    opt = SGD(get_parameters(lin), lr=0.1)
    def step(x: Tensor, y: Tensor) -> Tensor:
      with Tensor.train():
        opt.zero_grad()
        loss = lin(x.dropout(0.3)).sparse_categorical_crossentropy(y).backward()
        return loss.realize(*opt.schedule_step())
    fn = TinyJit(step)
    with Context(JIT=int(jit)):
      return [fn(Tensor(data(i, (4, 6))), Tensor(np.arange(4, dtype=np.int32) % 3)).item() for i in range(5)]
  np.testing.assert_allclose(train(True), train(False), rtol=1e-5, atol=1e-6)

def test_jit_off_with_rand_and_shape_errors_with_rand():
  def f(x: Tensor) -> Tensor: return (x + Tensor.rand(*x.shape)).realize()
  with Context(JIT=0):
    Tensor.manual_seed(1)
    jf = TinyJit(f)
    outs = [jf(Tensor(data(i))).numpy() for i in range(3)]
    assert jf.captured is None and len({o.tobytes() for o in outs}) == 3
  jf = TinyJit(f)
  for i in range(3): jf(Tensor(data(i)))
  counter = RNGState.counter
  with pytest.raises(JitError, match=r"shape \(3, 4\).*to shape \(2, 4\)"): jf(Tensor(data(0, (2, 4))))
  with pytest.raises(JitError, match="dtype"): jf(Tensor(data(0)).cast(dtypes.float16))
  assert RNGState.counter == counter   # a refused call draws nothing

# ---- prune, free_intermediates, counters ----

def test_prune_replays_only_what_depends_on_the_inputs():
  w = Tensor(np.arange(16, dtype=np.float32)).realize()
  def f(x): return ((w * 2).contiguous() + x).realize()
  plain, pruned = TinyJit(f), TinyJit(f, prune=True)
  for jf in (plain, pruned):
    for i in range(4):
      x = np.full(16, float(i), dtype=np.float32)
      np.testing.assert_allclose(jf(Tensor(x)).numpy(), np.arange(16) * 2 + x)
  assert len(pruned.jit_cache) == len(plain.jit_cache) - 1
  decorated = TinyJit(prune=True)(f)
  for i in range(3): out = decorated(Tensor(np.full(16, 1.0, dtype=np.float32)))
  np.testing.assert_allclose(out.numpy(), np.arange(16) * 2 + 1)
  assert len(decorated.jit_cache) == len(pruned.jit_cache)

def test_free_intermediates_gives_memory_back_and_replays_after():
  from tinyplug.helpers import GlobalCounters
  ext = Tensor([1.0, 24.0, 23.0, 45.0, 1.0]).realize()
  @TinyJit
  def f(x):
    t1 = (x * 2).contiguous().realize()
    return ((t1 + ext).contiguous().sum()).contiguous().realize()
  for i in range(4): assert f(Tensor([float(i), 1.0, 2.0, 3.0, 4.0])).item() == 114 + 2 * i
  before = GlobalCounters.mem_used
  f.captured.free_intermediates()
  assert before - GlobalCounters.mem_used >= 5 * 4 + 4 * 2   # t1, t1+ext, the sum
  assert f(Tensor([11.0, 1.0, 2.0, 3.0, 4.0])).item() == 136

def test_free_intermediates_keeps_in_place_updates():
  x = Tensor([1.0]).realize()
  @TinyJit
  def f(y):
    x.assign(x + y)
    return x.realize()
  for _ in range(5): f(Tensor([1.0]))
  f.captured.free_intermediates()
  f(Tensor([2.0]))
  assert x.item() == 8.0

def test_replay_counts_ops_and_memory():
  from tinyplug.helpers import GlobalCounters
  f = TinyJit(lambda a, b: ((a + b).realize() * 2).realize())
  a, b = Tensor(np.ones((8, 8), np.float32)).realize(), Tensor(np.ones((8, 8), np.float32)).realize()
  for _ in range(4):
    GlobalCounters.reset()
    f(a, b)
    assert GlobalCounters.global_ops > 0 and GlobalCounters.global_mem > 0

def test_misuse_errors():
  jf = TinyJit(lambda x: ((x + 1).realize(), 3))
  jf(Tensor([1.0]))
  with pytest.raises(JitError, match="returns a int"): jf(Tensor([1.0]))
  empty = TinyJit(lambda x: x)
  empty(Tensor([1.0]).realize())
  with pytest.raises(JitError, match="no kernels"): empty(Tensor([1.0]).realize())
  ok = TinyJit(lambda x: {"y": [(x * 2).realize(), None]})
  for i in range(3): out = ok(Tensor([float(i)]))
  assert out["y"][0].item() == 4.0
