"""Pools and interpolate are graph templates (tensor_ops/template.py): from the second call with a signature, the
graph is rebuilt over the call's own inputs without running the method. Every call on new values, the input lazy or a
buffer, must still give torch's values and gradients."""
import numpy as np
import pytest
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import template

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(19)

POOLS = [
  ("max_pool2d", dict(kernel_size=2), dict(kernel_size=2)),
  ("max_pool2d", dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=2, padding=1)),
  ("max_pool2d", dict(kernel_size=(3, 2), stride=1, ceil_mode=True), dict(kernel_size=(3, 2), stride=1, ceil_mode=True)),
  ("avg_pool2d", dict(kernel_size=2), dict(kernel_size=2)),
  ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=2, padding=1)),
  ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
   dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True)),
]

def _calls(build_ours, build_torch, shape, rounds=4, lazy=False):
  for _ in range(rounds):
    a = RNG.standard_normal(shape).astype(np.float32)
    g = None
    x = Tensor(a, requires_grad=True)
    src = x * 1.5 + 0.25 if lazy else x   # a lazy input: the template's input is an expression, not a buffer
    out = build_ours(src)
    g = RNG.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    tout = build_torch(tx * 1.5 + 0.25 if lazy else tx)
    (tout * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("name,ours,theirs", POOLS)
def test_pool_template_calls_match_torch(name, ours, theirs, lazy):
  _calls(lambda x: getattr(x, name)(**ours), lambda x: getattr(F, name)(x, **theirs), (2, 3, 11, 10), lazy=lazy)

def test_pool_calls_come_from_one_template():
  x = Tensor(RNG.standard_normal((2, 3, 8, 8)).astype(np.float32))
  template._templates.clear()   # (a long test run may have filled it: its oldest entries would make room)
  for _ in range(3): x.max_pool2d(3, 2, padding=1).realize(); x.avg_pool2d(3, 2, padding=1).realize()
  assert len(template._templates) == 2   # one each, their insides built inline

@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("size,mode,align", [((16, 20), "linear", False), ((16, 20), "linear", True),
                                             ((5, 7), "linear", False), ((16, 20), "nearest", False),
                                             ((13, 9), "nearest-exact", False)])
def test_interpolate_template_calls_match_torch(size, mode, align, lazy):
  tmode = {"linear": "bilinear"}.get(mode, mode)
  kw = {"align_corners": align} if mode == "linear" else {}
  _calls(lambda x: x.interpolate(size, mode=mode, **kw), lambda x: F.interpolate(x, size, mode=tmode, **kw),
         (2, 3, 8, 10), lazy=lazy)

def test_uint8_interpolate_template_calls_match_torch():
  for _ in range(4):
    a = RNG.integers(0, 256, (1, 3, 9, 12), dtype=np.uint8)
    got = Tensor(a).interpolate((17, 5), mode="linear").numpy()
    want = F.interpolate(torch.from_numpy(a), (17, 5), mode="bilinear", antialias=False).numpy()
    np.testing.assert_array_equal(got, want)

@pytest.mark.parametrize("op", ["cat", "stack"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_and_stack_template_calls_match_torch(op, dim):
  for i in range(4):
    arrays = [RNG.standard_normal((3, 4, 5)).astype(np.float32) for _ in range(3)]
    xs = [Tensor(a, requires_grad=True) for a in arrays]
    ins = [x * 2.0 if i % 2 else x for x in xs]   # lazy inputs every other call
    out = getattr(ins[0], op)(*ins[1:], dim=dim) if i < 2 else getattr(Tensor, op)(ins, dim=dim)
    g = RNG.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout = getattr(torch, op)([t * 2.0 if i % 2 else t for t in ts], dim=dim)
    (tout * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6)
    for x, t in zip(xs, ts): np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)

def test_cat_template_keeps_dtypes_and_checks_shapes():
  for _ in range(3):
    a, b = RNG.integers(-5, 5, (2, 3)).astype(np.int32), RNG.standard_normal((2, 2)).astype(np.float32)
    out = Tensor(a).cat(Tensor(b), dim=1)
    assert out.dtype == Tensor(b).dtype
    np.testing.assert_allclose(out.numpy(), np.concatenate([a.astype(np.float32), b], 1))
    m = RNG.random((2, 3)) < 0.5
    np.testing.assert_array_equal(Tensor(m).cat(Tensor(m), dim=0).numpy(), np.concatenate([m, m], 0))
  for _ in range(3):
    with pytest.raises(Exception, match="differ outside that dim"): Tensor.cat(Tensor.ones(2, 3), Tensor.ones(3, 3), dim=1)

@pytest.mark.parametrize("size,mode,align", [((16, 20), "linear", False), ((5, 7), "linear", True),
                                             ((16, 20), "nearest", False)])
def test_interpolate_runs_from_its_plan_with_the_weights_it_holds(size, mode, align):
  # the weights are buffers the template holds: a realize plan takes them (before, they were copies from the host,
  # which a plan refuses, and every call walked the graph); buffer and lazy inputs alternate, so a lazy input's own
  # buffer is never taken for one of them
  from tinyplug.engine import plan
  tmode = {"linear": "bilinear"}.get(mode, mode)
  kw = {"align_corners": align} if mode == "linear" else {}
  hits = plan.counters["hits"]
  for i in range(8):
    a = RNG.standard_normal((2, 3, 8, 10)).astype(np.float32)
    x = Tensor(a).realize()
    got = (x * 2.0 if i % 2 else x).interpolate(size, mode=mode, **kw).realize().numpy()
    t = torch.from_numpy(a)
    want = F.interpolate(t * 2.0 if i % 2 else t, size, mode=tmode, **kw).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert plan.counters["hits"] - hits >= 2   # the buffer inputs' later calls, at least

def test_uint8_interpolate_runs_from_its_plan():
  from tinyplug.engine import plan
  hits = plan.counters["hits"]
  for _ in range(4):
    a = RNG.integers(0, 256, (1, 3, 9, 12), dtype=np.uint8)
    got = Tensor(a).realize().interpolate((17, 5), mode="linear").realize().numpy()
    np.testing.assert_array_equal(got, F.interpolate(torch.from_numpy(a), (17, 5), mode="bilinear").numpy())
  assert plan.counters["hits"] - hits >= 2

def test_interpolate_in_a_jitted_function_matches_torch():
  from tinyplug.engine.jit import TinyJit
  step = TinyJit(lambda x: (x.interpolate((16, 20), mode="linear") * 0.5).realize())
  for _ in range(5):
    a = RNG.standard_normal((2, 3, 8, 10)).astype(np.float32)
    want = F.interpolate(torch.from_numpy(a), (16, 20), mode="bilinear").numpy() * 0.5
    np.testing.assert_allclose(step(Tensor(a).realize()).numpy(), want, rtol=1e-5, atol=1e-5)
