"""Multi-device tensors (Tensor.shard): values against numpy, how each op keeps or loses the split, autograd,
optimisers, the JIT and realize, on two (or four) ordinals of the default device."""
import numpy as np
import pytest
from tinyplug import Device, Tensor, TinyJit, dtypes
from tinyplug.nn import Linear
from tinyplug.nn.optim import SGD, Adam
from tinyplug.nn.state import load_state_dict
from tinyplug.uop.ops import Ops

D = Device.DEFAULT
DEVS = (D, f"{D}:1")
DEVS4 = tuple(f"{D}:{i}" for i in range(1, 5))

@pytest.fixture(autouse=True)
def _second_device():
  try: Tensor.zeros(2, device=f"{D}:1").contiguous().realize()
  except Exception as e: pytest.skip(f"no second {D} device: {e}")

rng = np.random.default_rng(0)
A = rng.standard_normal((4, 6)).astype(np.float32)

def parts(t: Tensor) -> list[np.ndarray]:
  """Each device's part, read from its own device."""
  assert t.uop.op is Ops.MULTI
  return [Tensor.from_uop(u).numpy() for u in t.uop.src]

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_shard_values_and_parts(axis):
  t = Tensor(A).shard(DEVS, axis)
  assert t.device == DEVS and t.shape == A.shape and t.dtype == dtypes.float32
  assert t.uop.axis == (None if axis is None else axis % 2)
  np.testing.assert_equal(t.numpy(), A)
  t.realize()
  expected = [A, A] if axis is None else np.split(A, 2, axis=axis)
  for got, want in zip(parts(t), expected): np.testing.assert_equal(got, want)

def test_device_names():
  assert Device.canonicalize(f"{D}:0") == D
  assert Tensor([1.0]).shard((f"{D}:0", f"{D}:1")).device == DEVS
  assert Tensor([1.0, 2.0]).shard((D, D), 0).device == (D, D)   # the same device twice: two parts
  np.testing.assert_equal(Tensor([1.0, 2.0]).shard((D, D), 0).numpy(), [1.0, 2.0])
  assert Tensor([1.0]).shard((f"{D}:1",)).device == f"{D}:1"   # one device: a plain copy

def test_uneven_split_raises():
  with pytest.raises(RuntimeError, match="uneven.*axis 1.*4 devices"): Tensor(A).shard(DEVS4, 1)

def test_mixing_devices_raises():
  with pytest.raises(ValueError, match="different devices"): Tensor(A).shard(DEVS, 0) + Tensor(A)

def test_elementwise_runs_per_device_without_copies():
  x, y = Tensor(A).shard(DEVS, 1).realize(), Tensor(A * 2).shard(DEVS, 1).realize()
  z = x * y + 1
  items = z.schedule()
  assert sorted(it.bufs[0].device for it in items) == sorted(DEVS)
  assert all(it.ast.op is Ops.SINK for it in items)   # kernels only: each device computes its own part
  np.testing.assert_allclose(z.numpy(), A * A * 2 + 1, rtol=1e-6)

def test_elementwise_resplits_sources():
  split0, split1, whole = Tensor(A).shard(DEVS, 0), Tensor(A).shard(DEVS, 1), Tensor(A).shard(DEVS)
  assert (split0 + whole).uop.axis == 0 and (whole + split1).uop.axis == 1
  assert (split0 + split1).uop.axis == 1   # the last split source decides, as in tinygrad
  np.testing.assert_allclose((split0 + split1 * 2).numpy(), A * 3, rtol=1e-6)
  np.testing.assert_allclose((whole - split0).numpy(), np.zeros_like(A))
  np.testing.assert_allclose((split1.exp() + 0.5).numpy(), np.exp(A) + 0.5, rtol=1e-6)

@pytest.mark.parametrize("axis", [0, 1])
def test_reductions(axis):
  t = Tensor(A).shard(DEVS, axis)
  np.testing.assert_allclose(t.sum().numpy(), A.sum(), rtol=1e-5)
  assert t.sum(axis).uop.axis is None and t.sum(axis).device == DEVS   # over the split axis: an all-reduce
  assert t.sum(1 - axis).uop.axis == 0 if axis == 1 else t.sum(1 - axis).uop.axis == axis
  for ax in (0, 1):
    np.testing.assert_allclose(t.sum(ax).numpy(), A.sum(ax), rtol=1e-5)
    np.testing.assert_allclose(t.max(ax).numpy(), A.max(ax))
    np.testing.assert_allclose(t.mean(ax, keepdim=True).numpy(), A.mean(ax, keepdims=True), rtol=1e-5)
    np.testing.assert_equal(t.argmax(ax).numpy(), A.argmax(ax))
  all_reduced = t.sum(axis).realize()
  for p in parts(all_reduced): np.testing.assert_allclose(p, A.sum(axis), rtol=1e-5)   # every device holds the sum

def test_movement_keeps_or_loses_the_split():
  t = Tensor(A).shard(DEVS, 0)   # (4, 6) split along rows
  cases = [
    (t.reshape(2, 12), A.reshape(2, 12), 0),
    (t.reshape(4, 2, 3), A.reshape(4, 2, 3), 0),
    (t.reshape(1, 24), A.reshape(1, 24), 1),
    (t.reshape(6, 4), A.reshape(6, 4), 0),   # each device's 12 elements stay together
    (Tensor(A).shard(DEVS, 1).reshape(24), A.reshape(24), None),   # columns would mix: each device gathers the whole
    (t.T, A.T, 1),
    (t.reshape(4, 1, 6).expand(4, 3, 6), np.broadcast_to(A.reshape(4, 1, 6), (4, 3, 6)), 0),
    (t.pad(((0, 0), (1, 2))), np.pad(A, ((0, 0), (1, 2))), 0),
    (t.pad(((1, 0), (0, 0))), np.pad(A, ((1, 0), (0, 0))), None),
    (t[:, 1:4], A[:, 1:4], 0),
    (t[1:3], A[1:3], None),
    (t[2:4], A[2:4], None),   # exactly one device's part
    (t.flip(1), A[:, ::-1], 0),
    (t.flip(0), A[::-1], None),
  ]
  for got, want, axis in cases:
    assert got.uop.axis == axis, (got.shape, got.uop.axis, axis)
    np.testing.assert_equal(got.numpy(), want)

def test_gather_and_copies():
  t = Tensor(A).shard(DEVS, 1)
  one = t.to(D)
  assert one.device == D and one.uop.axis is None
  np.testing.assert_equal(one.numpy(), A)
  one.assign(one * 0).realize()   # the gathered tensor has buffers of its own
  np.testing.assert_equal(t.numpy(), A)
  other = t.to(DEVS4[2:])
  assert other.device == DEVS4[2:] and other.uop.axis is None
  np.testing.assert_equal(other.numpy(), A)
  assert Tensor(A).to(DEVS).device == DEVS and Tensor(A).to(DEVS).uop.axis is None
  np.testing.assert_equal(Tensor(A, device=DEVS).numpy(), A)
  np.testing.assert_equal(t.shard(DEVS, 0).numpy(), A)   # re-split
  assert t.shard(DEVS, 0).uop.axis == 0 and t.shard(DEVS, 1) is t
  assert t.tolist() == A.tolist() and Tensor([2.5]).shard(DEVS).item() == 2.5

def test_exact_gather_of_special_values():
  v = np.array([-0.0, 1.0, np.nan, -np.inf], dtype=np.float32)
  got = Tensor(v).shard(DEVS, 0).numpy()
  np.testing.assert_equal(np.signbit(got), np.signbit(v)); np.testing.assert_equal(got, v)
  np.testing.assert_equal(Tensor([True, False, False, True]).shard(DEVS, 0).numpy(), [True, False, False, True])
  np.testing.assert_equal(Tensor([-3, 7, 2**30, -1]).shard(DEVS, 0).numpy(), [-3, 7, 2**30, -1])
  h = np.array([1.5, -2.0, 65504.0, -0.0], dtype=np.float16)
  np.testing.assert_equal(Tensor(h).shard(DEVS, 0).numpy(), h)

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_matmul_with_split_weight(axis):
  x, w = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  out = Tensor(x).shard(DEVS) @ Tensor(w).shard(DEVS, axis)
  assert out.device == DEVS and out.uop.axis == (1 if axis == 1 else None)
  np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_gradient_is_split_like_its_tensor(axis):
  x, w = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  ws = Tensor(w).shard(DEVS, axis).requires_grad_()
  (Tensor(x).shard(DEVS) @ ws).relu().sum().backward()
  ref = Tensor(w, requires_grad=True)
  (Tensor(x) @ ref).relu().sum().backward()
  assert ws.grad.device == DEVS and ws.grad.uop.axis == ws.uop.axis
  np.testing.assert_allclose(ws.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6)

def test_gradient_through_shard():
  x = Tensor(A, requires_grad=True)
  (x.shard(DEVS, 1) ** 2).sum().backward()
  assert x.grad.device == D
  np.testing.assert_allclose(x.grad.numpy(), 2 * A, rtol=1e-6)

def test_optimizer_steps_match_one_device():
  x, y = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
  with Tensor.train():
    for opt_cls in (SGD, Adam):
      multi, single = Linear(6, 4), Linear(6, 4)
      for a, b in ((single.weight, multi.weight), (single.bias, multi.bias)): a.assign(b.detach().contiguous()).realize()
      multi.weight.shard_(DEVS, 0); multi.bias.shard_(DEVS, 0)
      opts = opt_cls([multi.weight, multi.bias], lr=0.05), opt_cls([single.weight, single.bias], lr=0.05)
      for _ in range(3):
        for model, opt, xin, yin in ((multi, opts[0], Tensor(x).shard(DEVS), Tensor(y).shard(DEVS, 1)),
                                     (single, opts[1], Tensor(x), Tensor(y))):
          opt.zero_grad()
          ((model(xin) - yin) ** 2).mean().backward()
          opt.step()
      assert multi.weight.device == DEVS and multi.weight.uop.axis == 0 and multi.weight.uop.op is Ops.MULTI
      np.testing.assert_allclose(multi.weight.numpy(), single.weight.numpy(), rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(multi.bias.numpy(), single.bias.numpy(), rtol=1e-5, atol=1e-6)

def test_realize_several_and_assign_in_place():
  a, b = Tensor(A).shard(DEVS, 1) + 1, Tensor(A).shard(DEVS) * 2
  a.realize(b)
  assert a.uop.op is Ops.MULTI and all(s.base.op is Ops.BUFFER for s in (*a.uop.src, *b.uop.src))
  bufs = [s.base for s in a.uop.src]
  a.assign(a * 3).realize()
  assert [s.base for s in a.uop.src] == bufs   # written into the same buffers
  np.testing.assert_allclose(a.numpy(), (A + 1) * 3, rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), A * 2)

def test_creation_on_several_devices():
  z = Tensor.zeros(4, 6, device=DEVS)
  assert z.device == DEVS and z.uop.axis is None
  np.testing.assert_equal(z.numpy(), np.zeros((4, 6)))
  s = Tensor(A).shard(DEVS, 1)
  for like, value in ((s.zeros_like(), 0), (s.ones_like(), 1), (s.full_like(7), 7)):
    assert like.device == DEVS and like.uop.axis == 1
    np.testing.assert_equal(like.numpy(), np.full(A.shape, value))
  assert s.empty_like().uop.axis == 1 and s.clone().uop.axis == 1
  np.testing.assert_equal(s.clone().numpy(), A)
  r = Tensor.rand(4, 4, device=DEVS).realize()
  p0, p1 = parts(r)
  np.testing.assert_equal(p0, p1)   # one draw, the same on every device
  np.testing.assert_equal(Tensor.arange(8, device=DEVS).numpy(), np.arange(8))

def test_jit_with_split_inputs():
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 2).sum(0).realize()
  for i in range(4):
    out = f(Tensor(A + i).shard(DEVS, 1))
    assert out.device == DEVS and out.uop.axis == 0
    np.testing.assert_allclose(out.numpy(), ((A + i) * 2).sum(0), rtol=1e-5)

def test_load_state_dict_keeps_or_takes_the_split():
  layer = Linear(6, 4)
  layer.weight.shard_(DEVS, 0)
  w = rng.standard_normal((4, 6)).astype(np.float32)
  load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(np.ones(4, np.float32))})
  assert layer.weight.device == DEVS and layer.weight.uop.axis == 0
  np.testing.assert_equal(layer.weight.numpy(), w)
  load_state_dict(layer, {"weight": Tensor(w * 2).shard(DEVS4, 0), "bias": Tensor(np.ones(4, np.float32))})
  assert layer.weight.device == DEVS4 and layer.weight.uop.axis == 0   # a split state dict keeps its own split
  np.testing.assert_equal(layer.weight.numpy(), w * 2)
  plain = Linear(6, 4)
  load_state_dict(plain, {"weight": Tensor(w).shard(DEVS, 1), "bias": Tensor(np.ones(4, np.float32)).shard(DEVS)})
  assert plain.weight.device == D
  np.testing.assert_equal(plain.weight.numpy(), w)

def test_the_user_guide_example_runs_as_written():
  """docs/user_guide.md's 'Several devices' example (on CPU and CPU:1) prints what the page says."""
  import subprocess, sys
  from pathlib import Path
  try: Tensor.zeros(2, device="CPU:1").contiguous().realize()
  except Exception as e: pytest.skip(f"no CPU device: {e}")
  text = (Path(__file__).parent.parent / "docs" / "user_guide.md").read_text()
  code = next(block.split("```", 1)[0] for block in text.split("```python\n")[1:] if "shard_(" in block)
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  lines = done.stdout.splitlines()
  assert lines[0] == "('CPU', 'CPU:1') 1 (16, 4)" and lines[1].startswith("(4, 8) [")

def test_full_without_a_buffer():
  t = Tensor.ones(2, 3, buffer=False)
  assert t.uop.base.op is Ops.CONST   # a broadcast constant, nothing stored
  np.testing.assert_equal(t.numpy(), np.ones((2, 3)))
  assert Tensor.full((2,), 7, buffer=True).uop.base.op is not Ops.CONST
  z = Tensor.zeros(4, device=DEVS, buffer=False)
  assert z.device == DEVS and all(p.base.op is Ops.CONST for p in z.uop.src)
  np.testing.assert_equal(z.numpy(), np.zeros(4))

def test_copying_constants_moves_no_data():
  """A value made of constants alone is made again on the target device: no copy runs."""
  t = Tensor.ones(4, buffer=False).pad(((1, 1),)).to(f"{D}:1")
  assert t.device == f"{D}:1"
  assert all(it.ast.op is Ops.SINK for it in t.schedule())
  np.testing.assert_equal(t.numpy(), [0, 1, 1, 1, 1, 0])
  assert any(it.ast.op is Ops.COPY for it in Tensor.ones(4).to(f"{D}:1").schedule())   # a buffer's values do move

def test_jit_draws_fresh_random_numbers_on_several_devices():
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + Tensor.rand(4, 6, device=DEVS)).realize()
  outs = [f(Tensor.zeros(4, 6).contiguous().shard(DEVS, 1)).numpy() for _ in range(4)]
  assert len({o.tobytes() for o in outs}) == 4 and all(((0 <= o) & (o < 1)).all() for o in outs)

def test_kernelize_a_split_tensor():
  t = Tensor(A).shard(DEVS, 1) * 2
  t.kernelize()
  assert t.uop.op is Ops.MULTI and all(p.base.op is Ops.AFTER for p in t.uop.src)
  np.testing.assert_equal(t.numpy(), A * 2)
