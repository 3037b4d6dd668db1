"""Gradient templates (tinyplug/gradient_template.py): a graph of a structure differentiated before gets its gradient
graph rebuilt from a recipe. The rebuilt gradients must be the very nodes a fresh derivation gives (hash-consing makes
that an identity check), for every rule, and backward() must behave as without templates."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import Tensor
from tinyplug import gradient_template as gt
from tinyplug.gradient import custom_gradient, derive_gradient
from tinyplug.helpers import Context
from tinyplug.schedule.cache import _walk
from tinyplug.tensor_ops import graph, template
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

pytestmark = pytest.mark.usefixtures("device")

@pytest.fixture(autouse=True)
def fresh_templates():
  gt._templates.clear()
  gt._seen.clear()
  yield

def _seed(t: Tensor):
  return graph.const(1.0, t.dtype, t.device, ())

class _Counting:
  def __init__(self): self.calls = 0
  def __call__(self, *args):
    self.calls += 1
    return derive_gradient(*args)

def _inputs(shapes, rng, dtype=np.float32):
  return [Tensor(rng.uniform(0.5, 1.5, s).astype(dtype), requires_grad=True).realize() for s in shapes]

LOSSES = {
  "arith": ([(3, 4), (3, 4)], lambda a, b: ((a * b - a / b + (-b)) * 0.5).sum()),
  "transcendental": ([(5,)], lambda x: (x.exp() + x.log() + x.sqrt() + x.sin() + x.reciprocal()).sum()),
  "maximum ties": ([(4,), (4,)], lambda a, b: a.maximum(b.detach() * 0 + 1.0).sum() + a.maximum(b).sum()),
  "where and compare": ([(6,)], lambda x: (x > 1.0).where(x * 2, x * x).sum()),
  "cast": ([(4,)], lambda x: (x.cast("float16") * 3).cast("float32").sum()),
  "movement": ([(2, 3, 4)], lambda x: (x.permute(2, 0, 1).reshape(4, 6).pad(((1, 0), (0, 2)))[1:, 2:5].flip(0)
                                       .expand(2, 4, 3) * 1.5).sum()),
  "reductions": ([(3, 5)], lambda x: x.max(1).sum() + x.prod(0).sum() + x.mean()
                 + x.sum(1, keepdim=True).square().sum()),
  "custom rules": ([(4, 4)], lambda x: (x - 1).relu().sum() + x.sigmoid().sum() + (x ** 2.5).sum() + (x ** x).sum()),
  "matmul": ([(4, 5), (5, 3)], lambda a, b: (a @ b).tanh().square().sum()),
  "conv and pools": ([(2, 3, 8, 8), (4, 3, 3, 3)], lambda x, w: x.conv2d(w, padding=1, stride=2).max_pool2d(2).sum()
                     + x.avg_pool2d(2).square().sum()),
  "layernorm": ([(8, 16)], lambda x: x.layernorm().square().sum()),
  "mse": ([(8, 16), (8, 16)], lambda a, b: ((a - b) ** 2).mean()),
  "cross entropy": ([(8, 10)], lambda x: x.sparse_categorical_crossentropy(Tensor(np.arange(8, dtype=np.int32) % 10))),
  "softmax": ([(4, 9)], lambda x: (x.softmax(-1) * x).sum()),
  "cumsum and gather": ([(6, 5)], lambda x: x.cumsum(1).sum()
                        + x[Tensor(np.array([0, 2, 2, 5], dtype=np.int32))].sum()),
  "contiguous and detach": ([(3, 3)], lambda x: (x.contiguous() * x.detach() + x.exp().contiguous()).sum()),
}

@pytest.mark.parametrize("name", list(LOSSES))
def test_replayed_gradient_is_the_derived_graph(name):
  shapes, fn = LOSSES[name]
  rng = np.random.default_rng(0)
  derive = _Counting()
  keys = []
  for _ in range(4):
    xs = _inputs(shapes, rng)
    loss = fn(*xs)
    keys.append(gt._walk(loss.uop)[0])
    targets = {x.uop for x in xs} | {loss.uop}
    got = gt.gradient(loss.uop, _seed(loss), targets, derive)
    want = derive_gradient(loss.uop, _seed(loss), targets)
    assert got.keys() == want.keys() and all(got[t] is want[t] for t in want)
    for g in got.values():   # a structure a replay attached (one new gradient) is the one a walk finds
      if (hint := (g._cache or {}).get("sink_structure")) is not None:
        walked = _walk(UOp(Ops.SINK, dtypes.void, (g,)))
        assert hint[0] == walked[0] and list(hint[1]) == walked[1][:-2]
      if (hint := (g._cache or {}).get("sinks_structure")) is not None:   # several realized together
        walked = _walk(UOp(Ops.SINK, dtypes.void, hint[0]))
        assert hint[1] == walked[0] and list(hint[2]) == walked[1][:-1]
  # seen, recorded, then replayed twice; a loss that a graph template makes (`.sum()`, a loss function) over a lazy
  # input is keyed by the template (a composite key) once there is one, and an op over other templates' outputs by
  # theirs: where the first call built one of them, the key changes once, and that costs one derivation more
  assert derive.calls == 2 + sum(a != b for a, b in zip(keys, keys[1:])) and keys[-1] == keys[-2]
  # and the replayed values are right (against torch)
  ref = [torch.tensor(x.numpy(), requires_grad=True) for x in xs]
  grads = [Tensor.from_uop(got[x.uop]).numpy() for x in xs]
  if name in ("matmul", "mse", "softmax", "layernorm"):   # the ones torch spells the same
    if name == "layernorm": torch.nn.functional.layer_norm(ref[0], (16,), eps=1e-5).square().sum().backward()
    else: fn(*ref).backward()
    for g, r in zip(grads, ref): np.testing.assert_allclose(g, r.grad.numpy(), rtol=1e-3, atol=1e-4)

def test_shapes_dtypes_and_targets_do_not_collide():
  rng = np.random.default_rng(1)
  derive = _Counting()
  def check(shape, dtype, pick):
    a, b = _inputs([shape, shape], rng, dtype)
    loss = (a * b.exp()).sum()
    targets = {t.uop for t in pick(a, b)}
    got = gt.gradient(loss.uop, _seed(loss), targets, derive)
    want = derive_gradient(loss.uop, _seed(loss), targets)
    assert got.keys() == want.keys() and all(got[t] is want[t] for t in want)
    if a.uop in got:
      np.testing.assert_allclose(Tensor.from_uop(got[a.uop]).numpy().astype(np.float32),
                                 np.exp(b.numpy().astype(np.float32)), rtol=2e-3)
  for _ in range(3):
    for shape in ((3, 4), (4, 3), (12,)):
      for dtype in (np.float32, np.float16):
        for pick in (lambda a, b: (a,), lambda a, b: (b,), lambda a, b: (a, b)):
          check(shape, dtype, pick)
  assert len(gt._templates) == 3 * 2 * 3

def test_backward_steps_accumulate_like_without_templates():
  rng = np.random.default_rng(2)
  data = [rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 4), (4,))]
  batches = [(rng.standard_normal((5, 16)).astype(np.float32), rng.integers(0, 4, 5).astype(np.int32))
             for _ in range(5)]
  def run(templates: int):
    with Context(GRADIENT_TEMPLATES=templates):
      w1, w2, b = [Tensor(d, requires_grad=True).realize() for d in data]
      for i, (x, y) in enumerate(batches):
        if i == 3: w1.grad = None   # a zeroed .grad starts again; the others keep adding up
        loss = (Tensor(x) @ w1).relu().matmul(w2).add(b).sparse_categorical_crossentropy(Tensor(y))
        loss.backward()
        Tensor.realize(w1.grad, w2.grad, b.grad)
      return [w1.grad.numpy(), w2.grad.numpy(), b.grad.numpy()]
  with_t, without = run(1), run(0)
  assert len(gt._templates) >= 1
  for a, b in zip(with_t, without): np.testing.assert_array_equal(a, b)
  # against torch
  tw = [torch.tensor(d, requires_grad=True) for d in data]
  for i, (x, y) in enumerate(batches):
    if i == 3: tw[0].grad = None
    logits = torch.relu(torch.tensor(x) @ tw[0]) @ tw[1] + tw[2]
    torch.nn.functional.cross_entropy(logits, torch.tensor(y).long()).backward()
  for a, t in zip(with_t, tw): np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_requires_grad_and_no_grad_change_the_targets():
  rng = np.random.default_rng(3)
  for step in range(5):
    a, b = _inputs([(4,), (4,)], rng)
    Tensor.no_grad = True
    try: c = b * 2   # made under no_grad: not a target (the gradient still flows through it into b)
    finally: Tensor.no_grad = False
    if step >= 3: b.requires_grad = False
    (a * b * c).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.numpy() * b.numpy() * 2, rtol=1e-6)
    if step >= 3: assert b.grad is None
    else: np.testing.assert_allclose(b.grad.numpy(), a.numpy() * b.numpy() * 4, rtol=1e-6)
    assert c.grad is None

def test_caller_seed_and_a_seed_sharing_the_graph():
  rng = np.random.default_rng(4)
  for _ in range(4):
    x, = _inputs([(5,)], rng)
    seed = rng.standard_normal(5).astype(np.float32)
    (x * 3).backward(Tensor(seed))
    np.testing.assert_allclose(x.grad.numpy(), 3 * seed, rtol=1e-6)
    x.grad = None
    y = x * 2
    y.backward(y)   # the starting gradient is a node of the forward graph itself
    np.testing.assert_allclose(x.grad.numpy(), 4 * x.numpy(), rtol=1e-6)

def test_realized_intermediates_and_repeated_gradient_calls():
  rng = np.random.default_rng(5)
  for _ in range(4):
    x, = _inputs([(6,)], rng)
    h = (x * 2).realize()   # realized: the loss's graph reads its buffer
    loss = (h * x).sum()
    g1, = loss.gradient(x)
    g2, gh = loss.gradient(x, h)   # the same graph again, other targets; nothing is used up
    np.testing.assert_allclose(g1.numpy(), h.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g2.numpy(), h.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gh.numpy(), x.numpy(), rtol=1e-6)

_draws = []

def _noisy(g, out, x):
  # makes a buffer of its own, different every call: such a gradient cannot be replayed
  noise = np.full(x.shape, float(len(_draws) + 1), dtype=np.float32)
  _draws.append(noise)
  return (g * Tensor(noise),)

def test_a_custom_gradient_that_makes_buffers_is_derived_every_time():
  rng = np.random.default_rng(6)
  _draws.clear()
  derive = _Counting()
  for i in range(4):
    x, = _inputs([(3,)], rng)
    loss = custom_gradient(x * 1.0, (x,), _noisy).sum()
    got = gt.gradient(loss.uop, _seed(loss), {x.uop}, derive)
    assert Tensor.from_uop(got[x.uop]).tolist() == [i + 1.0] * 3
  assert derive.calls == 4 and gt._REFUSED in gt._templates.values()

def test_templates_off_derives_every_time():
  rng = np.random.default_rng(7)
  derive = _Counting()
  with Context(GRADIENT_TEMPLATES=0):
    for _ in range(3):
      x, = _inputs([(3,)], rng)
      loss = (x * x).sum()
      gt.gradient(loss.uop, _seed(loss), {x.uop}, derive)
  assert derive.calls == 3 and len(gt._templates) == 0

def test_a_template_holds_no_buffer():
  import gc, weakref
  from tinyplug.helpers import Context
  rng = np.random.default_rng(8)
  with Context(LRU=0):   # (no realize plan keeps its last outputs for reuse either: device.OUTPUT_POOL)
    for _ in range(3):
      x, = _inputs([(64,)], rng)
      (x.exp() * x).sum().backward()
      x.grad.realize()
    ref = weakref.ref(x.uop.base)
    del x
    gc.collect()
    assert ref() is None and len(gt._templates) == 1

def test_a_single_replayed_gradient_brings_its_scheduler_structure():
  from tinyplug.schedule.cache import structure
  rng = np.random.default_rng(9)
  labels = Tensor(np.arange(6, dtype=np.int32) % 4).realize()
  for i in range(4):
    x, = _inputs([(6, 4)], rng)
    loss = x.sparse_categorical_crossentropy(labels)
    loss.backward()
    sink = UOp(Ops.SINK, dtypes.void, (x.grad.uop,))
    hinted = (x.grad.uop._cache or {}).get("sink_structure") is not None
    assert hinted == (i >= 2)   # replays only
    key, nodes = structure(sink)
    walked = _walk(sink)
    assert key == walked[0] and all(a is b for a, b in zip(nodes, walked[1])) and len(nodes) == len(walked[1])
    np.testing.assert_allclose(x.grad.numpy(), _softmax_ce_grad(x.numpy(), labels.numpy()), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("reverse", [False, True], ids=["forward order", "reverse order"])
def test_replayed_gradients_realized_together_bring_their_structure(reverse):
  # Tensor.realize(*[p.grad for p in params]): the schedule's key comes from the replay, in either order, no walk
  from tinyplug.schedule.cache import structure
  rng = np.random.default_rng(11)
  replayed = []
  for i in range(5):
    x, w, b = _inputs([(2, 3, 6, 6), (4, 3, 3, 3), (4,)], rng)
    x.conv2d(w, b, padding=1, stride=2).square().sum().backward()
    ts = [x, w, b][::-1] if reverse else [x, w, b]
    sink = UOp(Ops.SINK, dtypes.void, tuple(t.grad.uop for t in ts))
    replayed.append((ts[0].grad.uop._cache or {}).get("sinks_structure") is not None)
    key, nodes = structure(sink)
    walked = _walk(sink)
    assert key == walked[0] and len(nodes) == len(walked[1]) and all(a is b for a, b in zip(nodes, walked[1]))
    Tensor.realize(*[t.grad for t in ts])
    xt, wt, bt = (torch.tensor(t.numpy(), requires_grad=True) for t in (x, w, b))
    torch.nn.functional.conv2d(xt, wt, bt, padding=1, stride=2).square().sum().backward()
    for t, r in zip((x, w, b), (xt, wt, bt)): np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-4)
  # derived first (once or twice: a template's composite key may come from the second call on), then replays only
  assert not replayed[0] and replayed[-2:] == [True, True] and replayed == sorted(replayed)
  # another order than the two recorded walks as before
  x.conv2d(w, b, padding=1, stride=2).square().sum().backward()
  sink = UOp(Ops.SINK, dtypes.void, (w.grad.uop, x.grad.uop, b.grad.uop))
  key, nodes = structure(sink)
  assert key == _walk(sink)[0]

def _softmax_ce_grad(x, y):
  p = np.exp(x - x.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  p[np.arange(len(y)), y] -= 1
  return p / len(y)

def test_second_derivatives_replay():
  rng = np.random.default_rng(10)
  for _ in range(4):
    x, = _inputs([(5,)], rng)
    g, = (x * x * x).sum().gradient(x)
    gg, = g.sum().gradient(x)   # the gradient graph differentiated again
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-5)
    np.testing.assert_allclose(gg.numpy(), 6 * x.numpy(), rtol=1e-5)
  assert len(gt._templates) == 2

def test_backward_twice_on_one_loss_adds_up():
  rng = np.random.default_rng(11)
  for _ in range(3):
    x, = _inputs([(4,)], rng)
    loss = (x.exp() * x).sum()
    for k in range(1, 4):   # the graph is not used up: each call adds the same gradient again
      loss.backward()
      np.testing.assert_allclose(x.grad.numpy(), k * np.exp(x.numpy()) * (1 + x.numpy()), rtol=1e-5)

def _is_composite(loss: Tensor) -> bool:
  key = gt._walk(loss.uop)[0]
  return key is not None and key[0][0] == template._COMPOSITE

def test_a_loss_over_a_new_label_tensor_replays_with_right_values():
  # the usual eager step: logits a buffer, labels a new Tensor from data each step (a copy of a host buffer, not a
  # buffer view): the loss template's composite key, no walk of the whole graph; values, shapes, dtypes change
  rng = np.random.default_rng(12)
  template._templates.clear()
  template._seen.clear()
  derive = _Counting()
  for shape, dtype in [((8, 10), np.float32)] * 5 + [((5, 10), np.float32)] * 5 + [((8, 10), np.float16)] * 5:
    x = Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True).realize()
    y = rng.integers(0, 10, shape[0]).astype(np.int32)
    loss = x.sparse_categorical_crossentropy(Tensor(y))
    grads = gt.gradient(loss.uop, _seed(loss), {x.uop}, derive)
    want = derive_gradient(loss.uop, _seed(loss), {x.uop})
    assert grads.keys() == want.keys() and all(grads[t] is want[t] for t in want)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(Tensor.from_uop(grads[x.uop]).numpy().astype(np.float32),
                               _softmax_ce_grad(x.numpy().astype(np.float32), y), rtol=tol, atol=tol)
  assert _is_composite(loss)
  # each (shape, dtype): derived on its first call (no loss template yet: a walked key), then the composite key seen,
  # recorded, replayed twice; the key tells the three apart
  assert derive.calls == 3 * 3 and len(gt._templates) == 3

def test_backward_over_new_labels_matches_torch_and_follows_requires_grad():
  rng = np.random.default_rng(13)
  w = Tensor(rng.standard_normal((6, 4)).astype(np.float32), requires_grad=True).realize()
  for step in range(5):
    xd, yd = rng.standard_normal((3, 6)).astype(np.float32), rng.integers(0, 4, 3).astype(np.int32)
    x = Tensor(xd, requires_grad=step >= 3)   # from step 3 on the input is a target too
    w.grad = None
    loss = (x @ w).sparse_categorical_crossentropy(Tensor(yd))
    loss.backward()
    tw, tx = torch.tensor(w.numpy(), requires_grad=True), torch.tensor(xd, requires_grad=True)
    torch.nn.functional.cross_entropy(tx @ tw, torch.tensor(yd).long()).backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    if step >= 3: np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    else: assert x.grad is None

def test_inputs_sharing_a_buffer_are_walked_as_one_graph():
  # two template inputs over one buffer: gradients right, and the composite key says which nodes they share
  rng = np.random.default_rng(14)
  for _ in range(4):
    xd = rng.uniform(0.5, 1.5, (4, 4)).astype(np.float32)
    x = Tensor(xd, requires_grad=True).realize()
    y = x.exp()
    loss = y.dot(y.T * 2).sum()
    assert not _is_composite(loss.contiguous()) and gt._walk(loss.uop)[0] is not None
    loss.backward()
    tx = torch.tensor(xd, requires_grad=True)
    ty = tx.exp()
    (ty @ (ty.T * 2)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
  y, z = (Tensor(np.ones((4, 4), np.float32)).exp() for _ in range(2))
  token = object()
  shared = template.composite_walk(token, [y.uop, y.T.uop], [], y.uop)
  apart = template.composite_walk(token, [y.uop, z.T.uop], [], y.uop)
  # the same parts' keys (buffers left out), but where the walk meets a node holding a buffer again is part of the key
  assert shared[0][:-1] == apart[0][:-1] and shared[0][-1][0] == template._REPEATS and shared[0] != apart[0]
  assert len(shared[1]) < len(apart[1])

def test_a_loss_graph_is_freed_without_the_cyclic_gc():
  # the walk kept on the loss's node must not refer to the node: its graph (the label buffers) would wait for a
  # collection; freed at once, a step's buffers go back to the allocator for the next step
  import gc, weakref
  rng = np.random.default_rng(15)
  x = Tensor(rng.standard_normal((6, 5)).astype(np.float32), requires_grad=True).realize()
  gc.disable()
  try:
    for i in range(4):
      y = Tensor(rng.integers(0, 5, 6).astype(np.int32))
      loss = x.sparse_categorical_crossentropy(y)
      refs = [weakref.ref(loss.uop), weakref.ref(y.uop.base)]   # (realize() points them at new nodes)
      loss.backward()
      x.grad.realize()
      del loss, y
      # (the first call derives through the Tensor methods, which keep their first label graph)
      assert i == 0 or all(r() is None for r in refs), i
      x.grad = None
  finally: gc.enable()

def test_an_op_over_gathers_is_keyed_without_walking_the_one_hot_graph(monkeypatch):
  # `w[idx].square().sum()` over new index tensors (an embedding step): the sum's input is one op over the gather
  # template's output, whose key is composed from the gather's, so backward() walks only the index's own nodes,
  # never the one-hot graph below the gather (~120 nodes a step); gradients are np.add.at's, repeated rows too
  from tinyplug.schedule import cache
  rng = np.random.default_rng(15)
  wd = rng.standard_normal((50, 8)).astype(np.float32)
  w = Tensor(wd, requires_grad=True).realize()
  walked: list[int] = []
  def counting_walk(sink, _walk=cache._walk):
    found = _walk(sink)
    walked.append(0 if found is None else len(found[1]))
    return found
  monkeypatch.setattr(cache, "_walk", counting_walk)
  import tinyplug.gradient as gradient_rules
  derive = _Counting()
  monkeypatch.setattr(gradient_rules, "derive_gradient", derive)
  for step in range(5):
    idx = rng.integers(-50, 50, (4, 6))
    idx[0, :2] = idx[1, 3]   # the same row picked three times
    w.grad = None
    loss = w[Tensor(idx.astype(np.int32))].square().sum()
    walked.clear()
    loss.backward()
    if step >= 3: assert max(walked, default=0) < 20, walked   # (step 2 records the template: one walk)
    want = np.zeros_like(wd)
    np.add.at(want, idx, 2 * wd[idx])
    np.testing.assert_array_equal(w.grad.numpy(), want)
  # derived at steps 0 (the gather template is built then: a walked key) to 2 (the composite key seen, recorded)
  assert _is_composite(loss) and derive.calls == 3
