"""Answers that used to be silently wrong, on every device: argmax with NaN, out-of-range indices, setitem with
duplicate indices, tanh near 0, integer division and remainder by 0 and -1, cat of nothing."""
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes
from tinyplug.uop.ops import Ops
from tinyplug.testing.helpers_ops import requires_dtypes

NAN = float("nan")

@pytest.mark.parametrize("data", [[1.0, NAN, 3.0], [NAN, 5.0, NAN], [2.0, 7.0, float("inf"), NAN], [[1.0, NAN], [4.0, 3.0]]])
def test_argmax_argmin_with_nan_give_the_first_nan(device, data):
  a = np.array(data, dtype=np.float32)
  assert Tensor(a).argmax().item() == np.argmax(a) == torch.tensor(a).argmax().item()
  assert Tensor(a).argmin().item() == np.argmin(a)
  if a.ndim == 2:
    np.testing.assert_array_equal(Tensor(a).argmax(1).numpy(), np.argmax(a, 1))
    np.testing.assert_array_equal(Tensor(a).argmin(0).numpy(), np.argmin(a, 0))

@pytest.mark.parametrize("shape, dtype", [((7, 37), np.float32), ((33, 8), np.float32), ((5, 1031), np.float32),
                                          ((3, 17, 9), np.float16)])
def test_argmax_rows_with_nan_ties_and_inf_match_numpy(device, shape, dtype):
  """Rows with one or several NaNs (among -inf, ties, +inf), rows all -inf, rows of ties, along every axis."""
  rng = np.random.default_rng(sum(shape))
  a = rng.integers(-3, 3, size=shape).astype(dtype)               # small integers: many ties
  flat = a.reshape(-1, shape[-1])
  flat[0, :] = -np.inf
  flat[1, rng.integers(shape[-1], size=2)] = np.nan
  flat[2, :] = np.nan
  flat[-1, [0, -1]] = [np.inf, np.nan]
  flat[::4, 1] = -np.inf
  for axis in range(a.ndim):
    np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), np.argmax(a, axis), err_msg=f"axis {axis}")
    np.testing.assert_array_equal(Tensor(a).argmin(axis).numpy(), np.argmin(a, axis), err_msg=f"axis {axis}")
    np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), torch.tensor(a).argmax(axis).numpy())

def test_argmax_finds_nan_rows_without_a_pass_of_their_own(monkeypatch):
  """No reduction of its own to find the NaN rows: on the CPU NaN's order key is above +inf's (one int64 max per
  row); in the two-pass form GPUs get, max propagates NaN, so argmax is the row max and one pass for the index
  (both passes one row kernel on the CPU: fuse_rows)."""
  from tinyplug import schedule
  from tinyplug.tensor_ops import reduce as reduce_ops, template
  def forget(): template._templates.clear(); template._seen.clear(); schedule._templates.clear()
  a = Tensor(np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)).realize()
  for keyed in (True, False):
    monkeypatch.setattr(reduce_ops, "_keyed_argmax", lambda device, keyed=keyed: keyed)
    forget()
    items = a.argmax(1).schedule()
    assert len(items) == 1
    assert sum(u.op is Ops.REDUCE for u in items[0].ast.toposort()) == (1 if keyed else 2)
  forget()

def test_out_of_range_indices_raise_like_torch(device):
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  with pytest.raises(IndexError, match="index 5 is out of range for size 3"): x[:, [0, 5]]
  with pytest.raises(IndexError, match="index -3 is out of range for size 2"): x[Tensor([-3])]
  with pytest.raises(IndexError, match="index 2 is out of range for size 2"): x[[2]]
  with pytest.raises(IndexError, match="gather along dim 1: index 3"): x.gather(1, Tensor([[0, 3], [1, 1]]))
  with pytest.raises(IndexError, match="gather along dim 1: index -1"): x.gather(1, Tensor([[0, -1], [1, 1]]))
  with pytest.raises(IndexError, match="one_hot: index 4 is out of range for size 4"): Tensor([1, 4]).one_hot(4)
  # in range (negative indices count from the end) still matches torch
  t = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  np.testing.assert_array_equal(x[:, [0, -1]].numpy(), t[:, [0, -1]].numpy())
  np.testing.assert_array_equal(x[Tensor([-2, 1])].numpy(), t[torch.tensor([-2, 1])].numpy())
  idx = Tensor([1, 0]).realize()                       # a realized index tensor is checked too
  np.testing.assert_array_equal(x[idx].numpy(), t[[1, 0]].numpy())
  with pytest.raises(IndexError): x[(idx + 5).realize()]

@pytest.mark.parametrize("index, value", [([0, 0, 1], [1.0, 2.0, 3.0]), ([2, 0, 2, 2], [1.0, 2.0, 3.0, 4.0]),
                                          ([1, -2], [5.0, 6.0])])
def test_setitem_with_duplicate_indices_last_write_wins(device, index, value):
  x, ref = Tensor.zeros(3).contiguous(), np.zeros(3, dtype=np.float32)
  x[index] = Tensor(value)
  ref[index] = value
  t = torch.zeros(3)
  t[torch.tensor(index)] = torch.tensor(value)
  np.testing.assert_array_equal(x.numpy(), ref)
  np.testing.assert_array_equal(ref, t.numpy())

def test_setitem_2d_duplicates(device):
  x, ref = Tensor.ones(3, 4).contiguous(), np.ones((3, 4), dtype=np.float32)
  rows, cols, vals = [0, 2, 0], [1, 3, 1], [7.0, 8.0, 9.0]
  x[rows, cols] = Tensor(vals)
  ref[rows, cols] = vals
  np.testing.assert_array_equal(x.numpy(), ref)
  x[[1, 1]] = Tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])     # whole rows, twice
  ref[[1, 1]] = [[1.0, 2, 3, 4], [5, 6, 7, 8]]
  np.testing.assert_array_equal(x.numpy(), ref)

def test_tanh_keeps_relative_precision_near_zero(device):
  x = np.array([1e-8, -1e-6, 3e-5, 1e-3, -0.1, 0.2499, 0.25, 0.3, 1.0, -3.0, 10.0], dtype=np.float32)
  got = Tensor(x).tanh().numpy()
  want = np.tanh(x.astype(np.float64))
  np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
  xt = Tensor(x, requires_grad=True)
  (g,) = xt.tanh().sum().gradient(xt)
  np.testing.assert_allclose(g.numpy(), 1 - want ** 2, rtol=1e-5, atol=1e-7)
  big = Tensor([100.0, 1e20, -50.0], requires_grad=True)       # the series' branch must not poison the gradient
  (gb,) = big.tanh().sum().gradient(big)
  assert big.tanh().tolist() == [1.0, 1.0, -1.0] and gb.tolist() == [0.0, 0.0, 0.0]
  far = Tensor([-100.0, -50.0, 100.0], requires_grad=True)    # sigmoid's gradient was NaN once exp2 overflowed
  (gs,) = far.sigmoid().sum().gradient(far)
  tf = torch.tensor([-100.0, -50.0, 100.0], requires_grad=True)
  torch.sigmoid(tf).sum().backward()
  np.testing.assert_allclose(gs.numpy(), tf.grad.numpy(), rtol=1e-5, atol=0)

def test_tanh_keeps_each_dtypes_precision():
  """float32's rational fit is float32-accurate only: halves compute it in float32 (in float16 its x^12 terms overflow
  and its small coefficients vanish: 0.02 off at -9), float64 keeps the series and the sigmoid."""
  x = np.linspace(-9.5, 9.5, 4001)
  got16 = Tensor(x.astype(np.float16)).tanh().numpy().astype(np.float64)
  np.testing.assert_allclose(got16, np.tanh(x.astype(np.float16).astype(np.float64)), rtol=0, atol=5e-4)
  got64 = Tensor(x, dtype=dtypes.float64).tanh().numpy()
  np.testing.assert_allclose(got64, np.tanh(x), rtol=1e-9, atol=1e-15)   # (the series to x^11 near 0.25: 2e-10)

def test_float16_cos_and_tan_shift_in_float32():
  """cos is sin(pi/2 - x): in float16 that shift already rounds (by 0.004 at -17, whose cos came out 3% off: a case
  tinygrad's dtype tests found), so halves shift in float32; tan is sin / cos."""
  x = np.linspace(-100, 100, 20001).astype(np.float16)
  want = np.cos(x.astype(np.float64))
  np.testing.assert_allclose(Tensor(x).cos().numpy().astype(np.float64), want, rtol=0, atol=1e-3)
  assert abs(float(Tensor(np.array([-17.0], np.float16)).cos().numpy()[0]) - np.cos(-17.0)) < 5e-4
  ok = np.abs(want) > 0.05
  np.testing.assert_allclose(Tensor(x).tan().numpy().astype(np.float64)[ok], np.tan(x.astype(np.float64))[ok], rtol=5e-3)

def test_tanh_gradient_is_built_from_its_value():
  """1 - t^2 from the forward's value: differentiating the series, the clamps and both branches through tripled gelu's
  backward in a matmul's epilogue."""
  x = Tensor(np.linspace(-3, 3, 64, dtype=np.float32), requires_grad=True).realize()
  for act in (Tensor.tanh, Tensor.gelu):
    t = act(x)
    (g,) = t.sum().gradient(x)
    assert len(g.uop.toposort()) <= len(t.uop.toposort()) + 20, act.__name__
  t = x.tanh()
  (g,) = t.sum().gradient(x)
  np.testing.assert_allclose(g.numpy(), 1 - np.tanh(np.linspace(-3, 3, 64, dtype=np.float64)) ** 2, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("dt, npdt", [(dtypes.int32, np.int32), (dtypes.int8, np.int8), (dtypes.int64, np.int64),
                                      (dtypes.uint32, np.uint32)])
def test_integer_division_edge_cases_agree_on_every_device(device, dt, npdt):
  """x % 0 is 0 and x // 0 (truncating) is x; INT_MIN % -1 is 0 and INT_MIN / -1 wraps to INT_MIN."""
  info = np.iinfo(npdt)
  signed = info.min < 0
  a = [info.min, info.min, -7 if signed else 9, 7, 0, 5, info.max]
  b = [-1 if signed else 1, 0, 0, 0, 0, 3, 2]
  ta, tb = Tensor(np.array(a, dtype=npdt), dtype=dt), Tensor(np.array(b, dtype=npdt), dtype=dt)
  def tdiv(x, y): return (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)   # C's truncating division
  want_mod = [0 if y in (0, -1) else x - y * tdiv(x, y) for x, y in zip(a, b)]
  want_mod = [r + y if r and (r < 0) != (y < 0) else r for r, y in zip(want_mod, b)]   # Python's sign rule
  want_div = [x if y == 0 else x if (y == -1 and x == info.min) else tdiv(x, y) for x, y in zip(a, b)]
  with np.errstate(over="ignore"):
    assert (ta % tb).tolist() == want_mod
    assert ta.div(tb, rounding_mode="trunc").tolist() == want_div

def test_cat_and_stack_of_nothing_say_so():
  with pytest.raises(ValueError, match="cat needs at least one tensor"): Tensor.cat()
  with pytest.raises(ValueError, match="stack needs at least one tensor"): Tensor.stack()
  a, b = Tensor([1.0, 2.0]), Tensor([3.0])
  assert Tensor.cat(a, b).tolist() == a.cat(b).tolist() == [1.0, 2.0, 3.0]
  assert Tensor.stack(a, a).tolist() == [[1.0, 2.0], [1.0, 2.0]]

@pytest.mark.parametrize("npdt", [np.float32, np.float16, np.float64])
def test_adding_and_subtracting_zeros_keep_ieee_signs(device, npdt):
  """-0.0 + 0.0 is +0.0: only x + (-0.0) and x - (+0.0) leave every x as it is."""
  requires_dtypes(np.dtype(npdt).name)
  x = np.array([-0.0, 0.0, -1.5, 2.0], dtype=npdt)
  forms = {"x + 0": lambda t: t + 0.0, "0 + x": lambda t: 0.0 + t, "x - 0": lambda t: t - 0.0, "x + -0": lambda t: t + -0.0,
           "x - -0": lambda t: t - -0.0}
  for name, f in forms.items():
    got, want = f(Tensor(x)).numpy(), f(x)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)
    np.testing.assert_array_equal(got, want, err_msg=name)
