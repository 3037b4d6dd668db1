"""Dtype behaviour as tinygrad code expects it: default dtypes as settings, unknown names, conversions without
library calls, half precision in reductions, and the renderer's table of native ops."""
import numpy as np
import pytest
import torch
from tinyplug import Context, Tensor, dtypes
from tinyplug.device import Device

def test_float64_to_half_on_cpu_rounds_like_numpy():
  # LLVM would lower this conversion to a compiler-rt call the CPU kernels cannot reach (it crashed)
  x = np.concatenate([np.random.default_rng(2).standard_normal(2000) * 1e3, [65504.0, 65520.0, 65519.99, 1e300, -np.inf,
                                                                              np.nan, 2.0**-25, 2.0**-24 * 1.5, -0.0]])
  with np.errstate(over="ignore"): ref = x.astype(np.float16)
  got = Tensor(x, dtype=dtypes.float64, device="CPU").cast(dtypes.float16).numpy()
  np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))

def test_code_for_op_lists_native_alu_ops():
  from tinyplug.uop.ops import GroupOp, Ops
  r = Device["CPU"].renderer
  assert Ops.SQRT in r.code_for_op and Ops.ADD in r.code_for_op and set(r.code_for_op) <= GroupOp.ALU
  class Narrow(type(r)): native_ops = frozenset({Ops.ADD, Ops.MUL, Ops.CAST})
  assert set(Narrow.code_for_op.fget(Narrow())) == {Ops.ADD, Ops.MUL}   # type: ignore[attr-defined]

def test_default_dtype_settings():
  with Context(DEFAULT_FLOAT=dtypes.half, DEFAULT_INT="int16"):
    assert dtypes.default_float is dtypes.half and Tensor([1.5]).dtype == dtypes.half
    assert dtypes.default_int is dtypes.int16 and Tensor([1]).dtype == dtypes.int16
  assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32
  with Context(DEFAULT_FLOAT="int32"), pytest.raises(ValueError, match="DEFAULT_FLOAT"): Tensor([1.5])

def test_unknown_dtype_is_value_and_attribute_error():
  with pytest.raises(AttributeError, match="unknown dtype 'typo'"): Tensor([3], dtype="typo")
  with pytest.raises(ValueError): Tensor([3]).cast("typo")

def test_var_of_half_divides_in_float32():
  # 70000 elements: the count does not fit a half (it would become inf and the variance 0)
  t = Tensor([[0.0, 1.0]], dtype=dtypes.half).expand(35000, 2).contiguous()
  assert t.var().dtype == dtypes.half
  np.testing.assert_allclose(t.var().numpy(), 0.25, rtol=1e-3)
  x = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).var(1).numpy(), torch.tensor(x).var(1).numpy(), rtol=1e-5)
  ref = torch.tensor(x).std(0, correction=0).numpy()
  np.testing.assert_allclose(Tensor(x).std(0, correction=0).numpy(), ref, rtol=1e-5)

def test_bitcast_size_mismatch_is_runtime_error():
  with pytest.raises(RuntimeError, match="does not divide"): Tensor.empty(3, dtype=dtypes.int8).bitcast(dtypes.float16)

def test_arange_int_dtype_range():
  t = Tensor.arange(2**31, 2**31 + 3)
  assert t.dtype == dtypes.int64 and t.tolist() == [2**31, 2**31 + 1, 2**31 + 2]
  assert Tensor.arange(-128, 128, dtype=dtypes.int8).tolist() == list(range(-128, 128))
  for args in ((129,), (-129, 128), (128, 0, -1)):
    with pytest.raises(OverflowError, match="does not fit"): Tensor.arange(*args, dtype=dtypes.int8)
  with pytest.raises(OverflowError): Tensor.arange(2**33, dtype=dtypes.int32)

@pytest.mark.parametrize("dt,np_dt", [(dtypes.int32, np.int32), (dtypes.int8, np.int8), (dtypes.int64, np.int64)])
def test_min_and_minimum_at_the_signed_minimum(dt, np_dt):
  info = np.iinfo(np_dt)
  x = np.array([-5, 0, info.max, info.min, 7], dtype=np_dt)
  y = np.array([0, info.min, 3, 5, info.max], dtype=np_dt)
  assert Tensor(x, dtype=dt).min().item() == info.min and Tensor(x, dtype=dt).argmin().item() == 3
  np.testing.assert_array_equal(Tensor(x, dtype=dt).minimum(Tensor(y, dtype=dt)).numpy(), np.minimum(x, y))
  np.testing.assert_array_equal(Tensor(x.reshape(1, 5), dtype=dt).min(axis=0).numpy(), x)

@pytest.mark.parametrize("exponent", [0.5, 1.5, 2.0, -1.0, 0.0, 3, 0])
def test_int_tensor_to_a_python_number(exponent):
  ref = torch.tensor([1, 2, 3, 4], dtype=torch.int32) ** exponent
  got = Tensor([1, 2, 3, 4], dtype=dtypes.int32) ** exponent
  assert got.numpy().dtype == ref.numpy().dtype
  np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)

def test_lists_convert_like_a_c_cast():
  data = [1 << 33, 1 << 32, (1 << 32) - 1, 1, -(1 << 33), -1]
  assert Tensor(data, dtype=dtypes.uint32).tolist() == np.array(data).astype(np.uint32).tolist()
  assert Tensor(data, dtype=dtypes.int32).tolist() == np.array(data).astype(np.int32).tolist()
  assert Tensor([-1, 0, 1], dtype=dtypes.uint8).tolist() == [255, 0, 1]
  assert Tensor([-3.5, -2.5, 1.5], dtype=dtypes.int32).tolist() == [-3, -2, 1]
  big = [65504.0, 65519.0, 65520.0, -70000.0, float("nan")]
  with np.errstate(over="ignore"): ref = np.array(big).astype(np.float16)
  np.testing.assert_array_equal(Tensor(big, dtype=dtypes.float16).numpy(), ref)

def test_list_of_ints_past_the_default_int_is_64_bit():
  t = Tensor([0, 2**31 + 2])
  assert t.dtype == dtypes.int64 and t.tolist() == [0, 2**31 + 2]
  assert Tensor([1, 2]).dtype == dtypes.int32 and Tensor([2**63 + 2]).dtype == dtypes.uint64
  with pytest.raises(ValueError, match="64 bits"): Tensor([0, 2**64 + 2])
