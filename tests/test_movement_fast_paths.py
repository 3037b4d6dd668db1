"""Movement ops on plain ints (session 30, build14): the makers' fast paths skip the symbolic helpers and make one
tensor per op, while symbolic arguments still take the general path; values against numpy, errors as before."""
import numpy as np
import pytest
import tinyplug.tensor as tensor_mod
from tinyplug import Tensor, Variable
from tinyplug.tensor_ops import graph, movement
from tinyplug.tensor_ops.graph import ShapeError
from tinyplug.uop.ops import Ops

def _data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# every movement op a user writes, with plain-int arguments, and numpy's answer
INT_CASES = {
  "pad": (lambda t: t.pad((1, 2, 0, 3)), lambda a: np.pad(a, ((0, 3), (1, 2)))),
  "pad_pairs": (lambda t: t.pad(((1, 0), (2, 2))), lambda a: np.pad(a, ((1, 0), (2, 2)))),
  "pad_last_dim": (lambda t: t.pad((2, 1)), lambda a: np.pad(a, ((0, 0), (2, 1)))),
  "T": (lambda t: t.T, lambda a: a.T),
  "permute": (lambda t: t.permute(1, 0), lambda a: a.transpose(1, 0)),
  "permute_negative": (lambda t: t.permute(-1, 0), lambda a: a.transpose(1, 0)),
  "reshape": (lambda t: t.reshape(2, 10), lambda a: a.reshape(2, 10)),
  "reshape_minus_one": (lambda t: t.reshape(-1, 5), lambda a: a.reshape(-1, 5)),
  "shrink": (lambda t: t.shrink(((1, 3), None)), lambda a: a[1:3]),
  "expand": (lambda t: t[:, :1].expand(3, 4, 2), lambda a: np.broadcast_to(a[:, :1], (3, 4, 2))),
  "flip": (lambda t: t.flip(0), lambda a: a[::-1]),
}

def _symbolic_helpers_refused(monkeypatch):
  def refuse(*args, **kwargs): raise AssertionError("a symbolic helper ran for plain ints")
  for name in ("ssimplify", "smin_of", "seq", "sle", "shape_eq", "sprod", "resolve"):
    monkeypatch.setattr(graph, name, refuse)
  for name in ("smin_of", "sprod", "smul"):
    monkeypatch.setattr(movement, name, refuse)

@pytest.mark.parametrize("name", INT_CASES)
def test_int_movement_skips_the_symbolic_helpers(name, monkeypatch):
  x = _data(4, 5) if name != "expand" else _data(4, 5, seed=1)
  t = Tensor(x).realize()
  op, ref = INT_CASES[name]
  _symbolic_helpers_refused(monkeypatch)
  out = op(t)
  monkeypatch.undo()
  np.testing.assert_array_equal(out.contiguous().numpy(), ref(x))

@pytest.mark.parametrize("name", ["pad", "T", "permute", "shrink", "flip", "reshape"])
def test_int_movement_node_is_made_with_its_shape_and_device(name):
  # the maker knows the new node's shape and device: nothing is worked out again from its sources later
  t = Tensor(_data(4, 5, seed=2)).realize()
  u = INT_CASES[name][0](t).uop
  assert u.op in (Ops.PAD, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.RESHAPE)
  assert u._cache is not None and u._cache.get("shape") == INT_CASES[name][1](np.zeros((4, 5))).shape
  assert u._cache.get("device") == t.device

def test_one_tensor_per_movement_op(monkeypatch):
  t = Tensor(_data(4, 1)).realize()
  made = []
  track = tensor_mod._track
  monkeypatch.setattr(tensor_mod, "_track", lambda x: (made.append(x), track(x)))
  out = t.expand(3, 4, 5)   # a reshape to (1, 4, 1) and an expand: nodes, not a tensor each
  assert len(made) == 1 and made[0] is out
  made.clear()
  t.pad((1, 1, 1, 1)).contiguous()
  assert len(made) == 2
  monkeypatch.undo()
  np.testing.assert_array_equal(out.numpy(), np.broadcast_to(_data(4, 1), (3, 4, 5)))

def test_symbolic_arguments_take_the_general_path(monkeypatch):
  calls = []
  simplify = graph.ssimplify
  monkeypatch.setattr(graph, "ssimplify", lambda x: (calls.append(x), simplify(x))[1])
  x = np.arange(20, dtype=np.float32).reshape(4, 5)
  v = Variable("v", 1, 4).bind(2)
  t = Tensor(x).realize()
  s = t.shrink(((0, v), None))
  assert calls and s.shape[0] is v
  calls.clear()
  p = t.pad(((v, 0), (0, 0)))
  assert calls
  np.testing.assert_array_equal(s.sum(1)[:2].numpy(), x[:2].sum(1))
  np.testing.assert_array_equal(p.sum().item(), x.sum())

@pytest.mark.parametrize("shape", [(4, 5), (3, 1, 4), (6,), ()])
def test_movement_of_symbolic_shapes_and_small_ranks(shape):
  # a tensor whose first size is a variable: permute, T, reshape and flip on it, with values read back concrete
  x = _data(*shape, seed=3) if shape else np.float32(1.5)
  t = Tensor(x).realize()
  np.testing.assert_array_equal(t.T.numpy(), x.T)
  np.testing.assert_array_equal(t.flip(tuple(range(t.ndim))).numpy(), np.flip(x) if shape else x)
  np.testing.assert_array_equal(t.reshape(-1).numpy(), x.reshape(-1))
  if not shape: return
  n = Variable("n", 1, shape[0]).bind(shape[0] - 1 if shape[0] > 1 else 1)
  s = t.shrink(((0, n),) + (None,) * (t.ndim - 1))
  flipped = s.T.T.flip(tuple(range(1, t.ndim))) if t.ndim > 1 else s.flip(0)
  k = n.unbind()[1]
  want = np.flip(x[:k], tuple(range(1, x.ndim))) if x.ndim > 1 else x[:k][::-1]
  np.testing.assert_allclose(flipped.contiguous().sum().item(), want.sum(), rtol=1e-5)

@pytest.mark.parametrize("padding", [(-1, 2, 0, 1), (1, -2, -1, 0), (-1, -1, -2, -2), (0, 0, 3, -1)])
def test_negative_and_shrinking_pads(padding):
  x = _data(4, 5, seed=4)
  l, r, top, bottom = padding
  want = np.pad(x, ((max(top, 0), max(bottom, 0)), (max(l, 0), max(r, 0))))
  want = want[-min(top, 0) or None:(want.shape[0] + min(bottom, 0)), -min(l, 0) or None:(want.shape[1] + min(r, 0))]
  np.testing.assert_array_equal(Tensor(x).pad(padding).numpy(), want)

def test_pads_of_1d_and_values():
  x = _data(5, seed=5)
  np.testing.assert_array_equal(Tensor(x).pad((2, 3)).numpy(), np.pad(x, (2, 3)))
  np.testing.assert_array_equal(Tensor(x).pad((2, 3), value=1.5).numpy(), np.pad(x, (2, 3), constant_values=1.5))
  np.testing.assert_array_equal(Tensor(x).pad((0, 0)).numpy(), x)
  np.testing.assert_array_equal(Tensor(x).pad([(1, 0)]).numpy(), np.pad(x, (1, 0)))
  np.testing.assert_array_equal(Tensor(x).pad([None]).numpy(), x)

def test_bad_movement_arguments_keep_their_errors():
  t = Tensor(_data(4, 5)).realize()
  for _ in range(2): t.pad((1, 1, 1, 1))   # (its plan kept: an equal padding of floats is not the same padding)
  with pytest.raises(ShapeError, match="one entry per dim"): t.pad((1.0, 1, 1, 1))
  with pytest.raises(ShapeError, match="even length"): t.pad((1, 1, 1))
  with pytest.raises(ShapeError, match="even length"): t.pad((1,) * 6)
  with pytest.raises(ShapeError, match="do not fit"): t.shrink(((1, 6), None))
  with pytest.raises(ShapeError, match="one entry per dim"): t.shrink(((1, 2),))
  with pytest.raises(IndexError, match="out of range"): t.permute(0, 2)
  with pytest.raises(ShapeError, match="not a permutation"): t.permute(0, 0)
  with pytest.raises(ShapeError, match="cannot reshape"): t.reshape(3, 7)
  with pytest.raises(ShapeError, match="cannot reshape"): t.reshape(-1, 3)
  with pytest.raises(ShapeError, match="only dims of size 1"): t.expand(4, 6)
  with pytest.raises(ShapeError, match="name a dim more than once"): t.flip(0, 0)
  with pytest.raises(ShapeError, match="cuts more than"): t.pad((0, 0, 1, -6), mode="circular")

def test_gradients_flow_through_int_movement():
  x = Tensor(_data(4, 5, seed=6), requires_grad=True)
  y = (x.pad((1, 1, 0, 2)).T.shrink(((1, 4), None)).flip(0) * 2).sum()
  y.backward()
  want = np.zeros((4, 5), np.float32)
  want[:, 0:3] = 2   # the shrink keeps padded columns 1..3, which are x's columns 0..2
  np.testing.assert_array_equal(x.grad.numpy(), want)
  Tensor.no_grad = True
  try: assert x.pad((1, 1)).requires_grad is False and x.T.requires_grad is False
  finally: Tensor.no_grad = False
  assert x.T.requires_grad is True and Tensor(np.ones(3)).pad((1, 1)).requires_grad is None

def test_contiguous_of_views_and_buffers():
  x = _data(4, 5, seed=7)
  t = Tensor(x).realize()
  assert t.contiguous() is t   # a buffer needs no copy
  c = t.T.contiguous()
  assert c.uop.op is Ops.CONTIGUOUS and c.shape == (5, 4)
  np.testing.assert_array_equal(c.numpy(), x.T)
  assert Tensor(2.0).contiguous().item() == 2.0

BASIC = [1, -1, (1, 2), slice(1, 3), (slice(None), -2), (slice(2, 1),), (slice(-3, None), 0, slice(1, 4)), (),
         (0, 0, 0)]
GENERAL = [slice(None, None, 2), (Ellipsis, 1), (None, 1), (np.int64(1),), (slice(3, 0, -1),), ([0, 2],)]

@pytest.mark.parametrize("index", BASIC + GENERAL, ids=repr)
def test_indexing_values(index):
  x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  np.testing.assert_array_equal(Tensor(x)[index].numpy(), x[index])

def test_basic_indexing_is_one_tensor(monkeypatch):
  t = Tensor(np.arange(60, dtype=np.float32).reshape(3, 4, 5)).realize()
  made = []
  track = tensor_mod._track
  monkeypatch.setattr(tensor_mod, "_track", lambda x: (made.append(x), track(x)))
  for index in BASIC:
    made.clear()
    t[index]
    assert len(made) == 1, index
  made.clear()
  t[::2]   # a step: the general path (a shrink, a pad, reshapes: a tensor each)
  assert len(made) > 1

def test_basic_indexing_errors_and_symbolic_sizes():
  t = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  with pytest.raises(IndexError, match="out of bounds"): t[3]
  with pytest.raises(IndexError, match="too many indices"): t[0, 0, 0]
  v = Variable("i", 1, 3).bind(2)
  s = t[:v]
  assert s.shape[0] is v
  np.testing.assert_array_equal(s.sum().item(), np.arange(8).sum())
