"""Symbolic (variable-bound) shapes through Tensor, the scheduler and TinyJit, checked against numpy."""
import numpy as np
import pytest
from tinyplug import Tensor, TinyJit, Variable, dtypes
from tinyplug.engine.jit import JitError

def _data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_slice_by_bound_variable_reduces_like_numpy():
  x = _data(4, 10)
  for n in (1, 3, 7):
    v = Variable("n", 1, 10).bind(n)
    t = Tensor(x)[:, :v]
    assert t.shape[1] is v
    np.testing.assert_allclose(t.sum().item(), x[:, :n].sum(), rtol=1e-5)
    np.testing.assert_allclose(t.mean(axis=1)[:4].numpy(), x[:, :n].mean(axis=1), rtol=1e-5)
    if n > 1: np.testing.assert_allclose(t.var().item(), x[:, :n].var(ddof=1), rtol=1e-4)

def test_two_variables_and_a_sum_of_them():
  x = _data(20, 20)
  a, b, c = Variable("a", 1, 10).bind(3), Variable("b", 1, 10).bind(5), Variable("c", 0, 10).bind(2)
  t = Tensor(x)[:a + c, :b + c]
  np.testing.assert_allclose(t.mean().item(), x[:5, :7].mean(), rtol=1e-5)

def test_variable_as_a_tensor_value():
  v = Variable("w", 0, 10).bind(2)
  assert (Tensor(v) + 3).item() == 5
  assert Tensor(v * 4).item() == 8
  assert (Tensor(3) * v).item() == 6
  assert (v * Tensor.ones(3, dtype=dtypes.int8)).tolist() == [2, 2, 2]
  assert Tensor(v, dtype=dtypes.float32).item() == 2.0
  big = Variable("big", 0, 2**40, dtype=dtypes.int64).bind(2**35)
  assert Tensor(big + Variable("s", 0, 9).bind(3)).item() == 2**35 + 3

def test_unbound_variable_cannot_run():
  with pytest.raises(RuntimeError, match="unbound"): Tensor(Variable("u", 1, 10)).item()

def test_symbolic_tensor_reads_need_concrete_sizes():
  t = Tensor.ones(10).contiguous()[:Variable("n", 1, 10).bind(4)]
  with pytest.raises(ValueError, match="symbolic shape"): t.numpy()
  np.testing.assert_equal((t + 1)[:4].numpy(), np.full(4, 2.0))

def test_empty_is_allocated_for_the_largest_shape():
  v = Variable("i", 1, 10).bind(3)
  t = Tensor.empty(3, v)
  assert t.shape == (3, v)
  assert t.uop.base.buffer.size == 30

def test_full_and_pad_with_variables():
  v = Variable("x", 1, 10).bind(5)
  assert Tensor.full((3,), v).tolist() == [5, 5, 5]
  p = Variable("p", 1, 10).bind(2)
  padded = Tensor.ones(2, 2).contiguous().pad([p, p, p, p])
  np.testing.assert_allclose(padded.mean().item(), np.pad(np.ones((2, 2)), 2).mean(), rtol=1e-6)

@pytest.mark.parametrize("start,stop,step", [(0, 4, 1), (4, 7, 1), (0, 10, 2), (2, 14, 3)])
def test_arange_with_variable_bounds(start, stop, step):
  n = len(range(start, stop, step))
  b, e, s = Variable("b", 0, 5).bind(start), Variable("e", 4, 20).bind(stop), Variable("s", 1, 3).bind(step)
  assert Tensor.arange(b, e, s)[:n].tolist() == list(range(start, stop, step))

def test_cat_along_variable_sizes():
  x, y = _data(10, 3, seed=1), _data(10, 3, seed=2)
  i, j = Variable("i", 1, 10).bind(3), Variable("j", 1, 10).bind(4)
  out = Tensor(x)[:i].cat(Tensor(y)[:j], dim=0)
  np.testing.assert_allclose(out[:7].numpy(), np.concatenate([x[:3], y[:4]]), rtol=1e-6)

def test_split_along_a_variable_size_is_refused():
  t = Tensor.ones(10, 8).contiguous()[:Variable("a", 1, 10).bind(4)]
  with pytest.raises(AssertionError): t.chunk(2, dim=0)
  assert [c.shape[1] for c in t.chunk(2, dim=1)] == [4, 4]

def test_jit_replays_one_kernel_for_every_value():
  x = _data(3, 10)
  jf = TinyJit(lambda a: (a + 1).realize())
  for n in range(1, 7):
    out = jf(Tensor(x)[:, :Variable("i", 1, 10).bind(n)])
    np.testing.assert_allclose(out[:3, :n].numpy(), x[:, :n] + 1, rtol=1e-6)
  assert len(jf.jit_cache) == 1

def test_jit_matmul_and_two_variables():
  a, b = _data(10, 3, seed=3), _data(3, 10, seed=4)
  jf = TinyJit(lambda p, q: (p @ q + 1).realize())
  for i, j in [(2, 3), (4, 2), (3, 5), (5, 4)]:
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    out = jf(Tensor(a)[:vi], Tensor(b)[:, :vj])
    np.testing.assert_allclose(out[:i, :j].numpy(), a[:i] @ b[:, :j] + 1, rtol=1e-5, atol=1e-5)
  assert len(jf.jit_cache) == 1

def test_jit_takes_bound_variables_as_arguments():
  jf = TinyJit(lambda a, b: (Tensor(a + b) * 2).realize())
  for i in range(4):
    a = Variable("a", 0, 2**10).bind(i)
    b = Variable("b", 0, 2**40, dtype=dtypes.int64).bind(2**35)
    assert jf(a, b).item() == (2**35 + i) * 2

def test_jit_refuses_another_fixed_size():
  jf = TinyJit(lambda a, b: (a + b).realize())
  for n in range(1, 4):
    v = Variable("i", 1, 10).bind(n)
    jf(Tensor(_data(3, 10))[:, :v], Tensor(_data(3, 10))[:, :v])
  v = Variable("i", 1, 10).bind(7)
  with pytest.raises(JitError):
    jf(Tensor(_data(3, 7))[:, :v], Tensor(_data(4, 7))[:, :v])

def test_beam_search_leaves_variable_loops_alone():
  from tinyplug import Context
  x = _data(4, 10, seed=5)
  with Context(BEAM=1):
    v = Variable("n", 1, 10).bind(3)
    np.testing.assert_allclose(Tensor(x)[:, :v].sum().item(), x[:, :3].sum(), rtol=1e-5)
    np.testing.assert_allclose((Tensor(x)[:, :v] * 2)[:, :3].numpy(), x[:, :3] * 2, rtol=1e-6)

def test_check_oob_refuses_a_variable_shrink_that_may_pass_the_end():
  from tinyplug.helpers import Context
  x = _data(6, 6)
  t = Tensor(x).realize()
  with Context(CHECK_OOB=1):
    with pytest.raises(RuntimeError, match="CHECK_OOB.*out of bounds"):
      t.shrink(((Variable("r", 0, 6).bind(2), Variable("r", 0, 6).bind(2) + 1), None)).sum().item()
    r = Variable("r", 0, 5).bind(2)   # every value of r stays inside: built and run
    np.testing.assert_allclose(t.shrink(((r, r + 1), None)).sum().item(), x[2].sum(), rtol=1e-5)
    # masked reads (padding) are not judged
    np.testing.assert_allclose((t.pad(((1, 1), (2, 0))) + 1).numpy(), np.pad(x, ((1, 1), (2, 0))) + 1)
  v = Variable("r", 0, 6).bind(2)   # off (the default): no check
  np.testing.assert_allclose(t.shrink(((v, v + 1), None)).sum().item(), x[2].sum(), rtol=1e-5)

def test_variable_tensor_is_a_weak_int():
  """Tensor(bound variable) has tinygrad's weak int dtype: it takes the other operand's type, and is the default int
  when read or stored."""
  from tinyplug.dtype import DTYPES_DICT, least_upper_dtype
  v = Variable("w", 1, 10).bind(3)
  t = Tensor(v)
  assert t.dtype == dtypes.weakint and dtypes.is_int(t.dtype) and "weakint" not in DTYPES_DICT
  for other in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int64, dtypes.float16, dtypes.float32):
    assert least_upper_dtype(dtypes.weakint, other) == other
    out = t + Tensor([1, 2], dtype=other)
    assert out.dtype == other
    np.testing.assert_equal(out.numpy(), np.array([4, 5], dtype=out.numpy().dtype))
  assert least_upper_dtype(dtypes.weakint, dtypes.bool) == dtypes.weakint
  assert t.item() == 3 and isinstance(t.item(), int) and (t * 2 - 1).item() == 5 and (t * 2).dtype == dtypes.weakint
  assert Tensor(v, dtype=dtypes.float32).item() == 3.0 and Tensor(v, dtype=dtypes.float32).dtype == dtypes.float32
  assert t.realize().dtype == dtypes.default_int and t.item() == 3   # stored as the default int
  assert Tensor(Variable("l", 1, 10, dtypes.int64).bind(4)).dtype == dtypes.int64   # not the default int: stays strong
