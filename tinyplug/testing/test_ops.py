"""Every Tensor op against PyTorch, forward and backward, on every device under test (the `device` fixture of
tinyplug/testing/conftest.py, or the repo's tests/conftest.py). Dtypes a device's renderer lacks are skipped."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug.testing.helpers_ops import check_op, requires_dtypes
from tinyplug import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("device")

UNARY_SHAPES = [(), (0,), (45,), (3, 4), (2, 0, 3)]

# name, torch, tinyplug, input range, atol, rtol
UNARY = [
  ("neg", lambda x: -x, None, (-3, 3), 1e-6, 1e-6),
  ("abs", torch.abs, Tensor.abs, (-3, 3), 1e-6, 1e-6),
  ("sqrt", torch.sqrt, Tensor.sqrt, (0.1, 4), 1e-6, 1e-5),
  ("rsqrt", torch.rsqrt, Tensor.rsqrt, (0.1, 4), 1e-5, 1e-5),
  ("exp", torch.exp, Tensor.exp, (-4, 4), 1e-5, 1e-5),
  ("exp2", torch.exp2, Tensor.exp2, (-4, 4), 1e-5, 1e-5),
  ("log", torch.log, Tensor.log, (0.05, 5), 1e-5, 1e-5),
  ("log2", torch.log2, Tensor.log2, (0.05, 5), 1e-5, 1e-5),
  ("sin", torch.sin, Tensor.sin, (-6, 6), 1e-5, 1e-5),
  ("cos", torch.cos, Tensor.cos, (-6, 6), 1e-5, 1e-5),
  ("tan", torch.tan, Tensor.tan, (-1.3, 1.3), 1e-5, 1e-4),
  ("sigmoid", torch.sigmoid, Tensor.sigmoid, (-6, 6), 1e-6, 1e-5),
  ("tanh", torch.tanh, Tensor.tanh, (-4, 4), 1e-6, 1e-5),
  ("relu", torch.relu, Tensor.relu, (-3, 3), 1e-6, 1e-6),
  ("leaky_relu", lambda x: F.leaky_relu(x, 0.01), Tensor.leaky_relu, (-3, 3), 1e-6, 1e-6),
  ("leaky_relu_0.2", lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2), (-3, 3), 1e-6, 1e-6),
  ("elu", F.elu, Tensor.elu, (-3, 3), 1e-6, 1e-5),
  ("celu", F.celu, Tensor.celu, (-3, 3), 1e-6, 1e-5),
  ("selu", F.selu, Tensor.selu, (-3, 3), 1e-5, 1e-4),
  ("gelu", lambda x: F.gelu(x, approximate="tanh"), Tensor.gelu, (-4, 4), 1e-5, 1e-5),
  ("quick_gelu", lambda x: x * torch.sigmoid(1.702 * x), Tensor.quick_gelu, (-4, 4), 1e-6, 1e-5),
  ("silu", F.silu, Tensor.silu, (-4, 4), 1e-6, 1e-5),
  ("swish", F.silu, Tensor.swish, (-4, 4), 1e-6, 1e-5),
  ("softplus", F.softplus, Tensor.softplus, (-8, 8), 1e-6, 1e-5),
  ("softplus_beta", lambda x: F.softplus(x, beta=2.0), lambda x: x.softplus(2.0), (-8, 8), 1e-6, 1e-5),
  ("mish", F.mish, Tensor.mish, (-4, 4), 1e-6, 1e-5),
  ("hardtanh", F.hardtanh, Tensor.hardtanh, (-3, 3), 1e-6, 1e-6),
  ("relu6", F.relu6, Tensor.relu6, (-3, 9), 1e-6, 1e-6),
  ("hardsigmoid", F.hardsigmoid, Tensor.hardsigmoid, (-5, 5), 1e-6, 1e-6),
  ("hardswish", F.hardswish, Tensor.hardswish, (-5, 5), 1e-6, 1e-5),
  ("softsign", F.softsign, Tensor.softsign, (-3, 3), 1e-6, 1e-5),
  ("logsigmoid", F.logsigmoid, Tensor.logsigmoid, (-6, 6), 1e-6, 1e-5),
  ("reciprocal", torch.reciprocal, Tensor.reciprocal, (0.5, 3), 1e-6, 1e-5),
  ("square", torch.square, Tensor.square, (-3, 3), 1e-6, 1e-6),
  ("sign", torch.sign, Tensor.sign, (-3, 3), 1e-6, 1e-6),
  ("floor", torch.floor, Tensor.floor, (-5, 5), 0, 0),
  ("ceil", torch.ceil, Tensor.ceil, (-5, 5), 0, 0),
  ("trunc", torch.trunc, Tensor.trunc, (-5, 5), 0, 0),
  ("round", torch.round, Tensor.round, (-5, 5), 0, 0),
  ("frac", torch.frac, Tensor.frac, (-5, 5), 1e-6, 1e-6),
  ("clip", lambda x: x.clip(-0.5, 0.7), lambda x: x.clip(-0.5, 0.7), (-2, 2), 1e-6, 1e-6),
  ("clamp_min", lambda x: x.clamp(min=0.3), lambda x: x.clamp(0.3), (-2, 2), 1e-6, 1e-6),
  ("pow_2", lambda x: x ** 2, None, (-3, 3), 1e-6, 1e-6),
  ("pow_3", lambda x: x ** 3, None, (-3, 3), 1e-5, 1e-6),
  ("pow_neg1", lambda x: x ** -1, None, (0.5, 3), 1e-6, 1e-6),
  ("pow_half", lambda x: x ** 0.5, None, (0.1, 3), 1e-6, 1e-6),
  ("pow_frac", lambda x: x ** 1.7, None, (0.1, 3), 1e-5, 1e-5),
  ("rpow", lambda x: 2.5 ** x, None, (-3, 3), 1e-5, 1e-5),
  ("log10", torch.log10, Tensor.log10, (0.05, 5), 1e-6, 1e-5),
]

@pytest.mark.parametrize("name,torch_fn,tiny_fn,rng,atol,rtol", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
def test_unary(name, torch_fn, tiny_fn, rng, atol, rtol, shape):
  check_op([shape], torch_fn, tiny_fn, low=rng[0], high=rng[1], atol=atol, rtol=rtol, grad_atol=max(atol, 1e-5))

def test_round_half_to_even():
  check_op(None, torch.round, Tensor.round, vals=[[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -3.7]], grad=False)

def test_special_values():
  vals = [[0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]]
  for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.abs, torch.exp, torch.sigmoid, torch.relu, torch.sign):
    check_op(None, fn, getattr(Tensor, fn.__name__), vals=vals, grad=False)
  check_op(None, torch.sqrt, Tensor.sqrt, vals=[[0.0, 4.0, -1.0, math.inf]], grad=False)
  check_op(None, torch.log, Tensor.log, vals=[[0.0, 1.0, -1.0, math.inf]], grad=False)
  check_op(None, torch.reciprocal, Tensor.reciprocal, vals=[[0.0, -0.0, 2.0, math.inf]], grad=False)

BINARY_SHAPES = [((3,), (3,)), ((), ()), ((2, 3), (3,)), ((4, 1), (1, 5)), ((), (2, 3)), ((0, 3), (1, 3)), ((2, 1, 3), (4, 1))]

BINARY = [
  ("add", lambda a, b: a + b, (-3, 3)),
  ("sub", lambda a, b: a - b, (-3, 3)),
  ("mul", lambda a, b: a * b, (-3, 3)),
  ("div", lambda a, b: a / b, (0.5, 3)),
  ("maximum", lambda a, b: a.maximum(b), (-3, 3)),
  ("minimum", lambda a, b: a.minimum(b), (-3, 3)),
  ("pow", lambda a, b: a ** b, (0.2, 2)),
  ("lerp", lambda a, b: a.lerp(b, 0.3), (-3, 3)),
]

@pytest.mark.parametrize("name,fn,rng", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
def test_binary(name, fn, rng, shapes):
  check_op(shapes, fn, low=rng[0], high=rng[1], atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((), (4,))], ids=str)
def test_comparisons(op, shapes):
  fn = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}[op]
  check_op(shapes, fn, dtype=np.int32, low=-2, high=2)
  check_op(None, fn, vals=[np.array([1.0, 2.0, math.nan, 3.0], np.float32), np.array([1.0, 3.0, 1.0, math.nan], np.float32)])

def test_scalar_operands():
  check_op([(3, 4)], lambda x: 2 * x + 1 - x / 3, atol=1e-6, rtol=1e-6)
  check_op([(3, 4)], lambda x: 1 - x, atol=1e-6)
  check_op([(3, 4)], lambda x: 2 / x, low=0.5, high=2, atol=1e-6, rtol=1e-5)
  check_op([(3, 4)], lambda x: x > 0.5)
  check_op([(5,)], lambda x: (x * 3) // 2, dtype=np.int32, low=-9, high=9)

def test_where():
  check_op([(3, 4), (3, 4), (4,)], lambda c, x, y: torch.where(c > 0, x, y), lambda c, x, y: (c > 0).where(x, y))
  check_op([(2, 3)], lambda x: torch.where(x > 0, x, 0.5), lambda x: (x > 0).where(x, 0.5))
  check_op([(2, 3)], lambda x: torch.where(x > 0, 2.0, x), lambda x: (x > 0).where(2.0, x))
  check_op([(2, 3)], lambda x: torch.where(x > 0, 1, 0), lambda x: (x > 0).where(1, 0))

# ---- integers ----

INT_BINARY = [
  ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
  ("floordiv", lambda a, b: a // b), ("mod", lambda a, b: a % b), ("truediv", lambda a, b: a / b),
  ("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b),
  ("maximum", lambda a, b: a.maximum(b)), ("minimum", lambda a, b: a.minimum(b)),
]

@pytest.mark.parametrize("name,fn", INT_BINARY, ids=[b[0] for b in INT_BINARY])
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64])
def test_int_binary(name, fn, dtype):
  a = np.array([-7, 7, -7, 7, 0, 5, -5, 3, -100, 100, 9, -1], dtype=dtype)
  b = np.array([2, 2, -2, -2, 3, -3, 3, 5, 7, -7, 3, 4], dtype=dtype)
  check_op(None, fn, vals=[a, b], atol=1e-6, rtol=1e-6)
  check_op(None, fn, vals=[a.reshape(3, 4), b[:4]], atol=1e-6, rtol=1e-6)

def test_int_unary_and_shifts():
  a = np.array([-7, 7, 0, 5, -5, 3, -100, 100], dtype=np.int32)
  for fn in (lambda x: -x, lambda x: ~x, lambda x: x.abs(), lambda x: x.sign(), lambda x: x * x, lambda x: x ** 3):
    check_op(None, fn, vals=[a])
  check_op(None, lambda x: x << 3, vals=[a])
  check_op(None, lambda x: x >> 2, vals=[a])
  check_op(None, lambda a, b: a << b, vals=[np.abs(a), np.array([0, 1, 2, 3, 4, 5, 6, 7], np.int32)])

def test_unsigned_and_bool():
  u = np.array([0, 1, 200, 255, 17], dtype=np.uint8)
  v = np.array([3, 255, 100, 1, 17], dtype=np.uint8)
  for fn in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a.maximum(b),
             lambda a, b: a.minimum(b), lambda a, b: a < b, lambda a, b: a & b, lambda a, b: a ^ b):
    check_op(None, fn, vals=[u, v])
  p, q = np.array([True, False, True, False]), np.array([True, True, False, False])
  for fn in (lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: a == b, lambda a, b: a * b,
             lambda a, b: a.logical_not(), lambda a, b: ~a, lambda a, b: a.maximum(b), lambda a, b: a.minimum(b)):
    check_op(None, fn, vals=[p, q])

@pytest.mark.parametrize("src,dst", [(np.float32, "int32"), (np.float32, "float16"), (np.int32, "float32"), (np.int32, "int8"),
                                     (np.int32, "bool"), (np.float32, "bool"), (np.bool_, "float32"), (np.int8, "int64"),
                                     (np.float32, "uint8"), (np.float16, "float32"), (np.int32, "float64")])
def test_cast(src, dst):
  requires_dtypes(np.dtype(src).name, dst)
  vals = np.array([-3.7, -1.2, 0, 0.5, 1, 2.9, 100.4], dtype=np.float32)
  if dst == "uint8": vals = np.abs(vals)
  check_op(None, lambda x: x.to(getattr(torch, dst)), lambda x: x.cast(dst), vals=[vals.astype(src)], grad=False)

def test_cast_gradient():
  requires_dtypes("float16", "float64")
  check_op([(3, 4)], lambda x: (x.half() * 2).float(), lambda x: (x.half() * 2).float(), atol=1e-2, rtol=1e-2)
  check_op([(3, 4)], lambda x: x.double().exp().float(), lambda x: x.double().exp().float(), atol=1e-6, rtol=1e-6)

def test_bitcast():
  a = np.array([1.0, -2.5, 0.0, 3.25], dtype=np.float32)
  np.testing.assert_array_equal(Tensor(a).bitcast("int32").numpy(), a.view(np.int32))
  np.testing.assert_array_equal(Tensor(a.view(np.uint32)).bitcast("float32").numpy(), a)

_UINT = {1: ("uint8", np.uint8, torch.int8), 2: ("uint16", np.uint16, torch.int16), 8: ("uint64", np.uint64, torch.int64)}

@pytest.mark.parametrize("to", ["uint8", "int8", "int16", "float16", "bfloat16", "int64", "float64"])
def test_bitcast_changing_size(device, to):
  # like torch's view(dtype): the last dim scales, little-endian bytes; and back again to the same bits
  requires_dtypes(to)
  a = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
  want = torch.tensor(a).view(getattr(torch, to))
  got = Tensor(a).bitcast(to)
  assert got.shape == tuple(want.shape) and got.dtype.itemsize == want.element_size()
  uname, npu, tint = _UINT[want.element_size()]
  np.testing.assert_array_equal(got.bitcast(uname).numpy(), want.view(tint).numpy().view(npu))
  np.testing.assert_array_equal(got.bitcast("float32").numpy(), a)

def test_bitcast_errors():
  with pytest.raises(ValueError, match="does not divide"): Tensor.ones(3, 3).bitcast("float64")
  with pytest.raises(ValueError, match="bool"): Tensor.ones(2, 4, dtype="uint8").bitcast("bool").bitcast("int32")

def test_half_math():
  requires_dtypes("float16")
  check_op([(4, 5), (4, 5)], lambda a, b: a * b + a, dtype=np.float16, atol=1e-2, rtol=1e-2, grad=False)
  check_op([(4, 5)], lambda x: x.exp().sum(1), dtype=np.float16, atol=5e-2, rtol=1e-2, grad=False)
  check_op([(4, 5)], lambda x: x * x, dtype=np.float16, atol=1e-2, rtol=1e-2)

# ---- movement ----

MOVEMENT = [
  ("reshape", (2, 3, 4), lambda x: x.reshape(4, 6)),
  ("reshape_-1", (2, 3, 4), lambda x: x.reshape(-1, 4)),
  ("reshape_0d", (), lambda x: x.reshape(1, 1)),
  ("reshape_to_0d", (1,), lambda x: x.reshape(())),
  ("permute", (2, 3, 4), lambda x: x.permute(2, 0, 1)),
  ("permute_neg", (2, 3, 4), lambda x: x.permute(-1, -3, -2)),
  ("expand", (3, 1), lambda x: x.expand(3, 4)),
  ("expand_new_dims", (3, 1), lambda x: x.expand(2, 3, 5)),
  ("expand_minus1", (3, 1), lambda x: x.expand(-1, 4)),
  ("transpose", (2, 3, 4), lambda x: x.transpose(0, 2)),
  ("T", (3, 5), lambda x: x.T),
  ("flatten", (2, 3, 4), lambda x: x.flatten()),
  ("flatten_1", (2, 3, 4), lambda x: x.flatten(1)),
  ("unflatten", (2, 12), lambda x: x.unflatten(1, (3, 4))),
  ("squeeze", (1, 3, 1, 4), lambda x: x.squeeze()),
  ("squeeze_dim", (1, 3, 1, 4), lambda x: x.squeeze(2)),
  ("unsqueeze", (3, 4), lambda x: x.unsqueeze(1)),
  ("unsqueeze_neg", (3, 4), lambda x: x.unsqueeze(-1)),
  ("flip", (3, 4), lambda x: x.flip(0)),
  ("flip_both", (3, 4), lambda x: x.flip((0, 1))),
  ("repeat", (2, 3), lambda x: x.repeat(2, 1, 3)),
  ("permute_then_add", (3, 4), lambda x: x.permute(1, 0) + x.T * 2),
  ("flip_then_mul", (5,), lambda x: x.flip(0) * x),
  ("expand_then_sum", (3, 1), lambda x: x.expand(3, 4).sum(0)),
  ("contiguous", (3, 4), lambda x: x.permute(1, 0).contiguous() * 2),
  ("movedim", (2, 3, 4), lambda x: x.movedim(0, 2)),
]

@pytest.mark.parametrize("name,shape,fn", MOVEMENT, ids=[m[0] for m in MOVEMENT])
def test_movement(name, shape, fn):
  check_op([shape], fn)

@pytest.mark.parametrize("padding,value", [((1, 2), 0.0), ((1, 1, 2, 0), 0.0), ((1, 2, 0, 1), 3.5), ((-1, 2), 0.0),
                                           ((0, -2, -1, 1), 1.0)], ids=str)
def test_pad(padding, value):
  check_op([(3, 4)], lambda x: F.pad(x, padding, value=value), lambda x: x.pad(padding, value=value))

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,padding", [((2, 7), (2, 3)), ((2, 3, 5, 6), (1, 2, 0, 3)), ((1, 2, 5, 6), (3, 0, 4, 1)),
                                           ((1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 2))])
def test_pad_modes(mode, shape, padding):
  check_op([shape], lambda x: F.pad(x, padding, mode=mode), lambda x: x.pad(padding, mode=mode))

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [(-1, 2, 2, -1), (2, -1, 1, -2), (1, -2, 2, -1), (-2, 0, 0, -3)], ids=str)
def test_pad_modes_negative(mode, padding):
  """A negative amount cuts elements away: off the padded result (reflect, replicate), before wrapping (circular)."""
  check_op([(2, 3, 5, 6)], lambda x: F.pad(x, padding, mode=mode), lambda x: x.pad(padding, mode=mode))

def test_pad_fully_padded_read():
  """A read that falls entirely in the padding is simplified away: the kernel must still run with its buffers in
  order (a kernel that lost a parameter once took the host process down)."""
  check_op([(3, 3, 3, 3)], lambda x: F.pad(x, (-1, 2, -3, 4)), lambda x: x.pad((-1, 2, -3, 4)))
  check_op([(3, 3, 3, 3)], lambda x: F.pad(x, (-1, 2, -3, 4), value=5.0), lambda x: x.pad((-1, 2, -3, 4), value=5.0))
  check_op([(3, 3), (3, 3)], lambda x, y: F.pad(x, (0, 0, -3, 3)) + y, lambda x, y: x.pad(((-3, 3), None)) + y)

def test_pad_mode_errors():
  x = Tensor.ones(2, 3)
  with pytest.raises(NotImplementedError, match="not one of"): x.pad((1, 1), mode="mirror")   # as torch
  with pytest.raises(ValueError, match="too large"): x.pad((3, 0), mode="reflect")   # reflect needs pad < size
  with pytest.raises(ValueError, match="too large"): x.pad((0, 4), mode="circular")
  with pytest.raises(ValueError, match="cuts more"): x.pad((-2, -2), mode="replicate")
  assert x.pad((5, 5), mode="replicate").shape == (2, 13)

def test_pad_pairs_and_shrink():
  check_op([(3, 4)], lambda x: F.pad(x, (2, 1, 0, 1)), lambda x: x.pad(((0, 1), (2, 1))))
  check_op([(3, 4)], lambda x: F.pad(x, (0, 0, 1, 1)), lambda x: x.pad((None, None)).pad(((1, 1), None)))
  check_op([(5, 6)], lambda x: x[1:4, 2:5], lambda x: x.shrink(((1, 4), (2, 5))))
  check_op([(5, 6)], lambda x: x[:, 2:5], lambda x: x.shrink((None, (2, 5))))

GETITEM = [
  ("int", lambda x: x[1]), ("neg_int", lambda x: x[-1]), ("int_int", lambda x: x[1, 2]),
  ("slice", lambda x: x[1:3]), ("slice_step", lambda x: x[::2]), ("slice_step3", lambda x: x[1:, ::3]),
  ("empty_slice", lambda x: x[3:1]), ("neg_slice", lambda x: x[-3:-1, -2:]),
  ("none", lambda x: x[None]), ("none_mid", lambda x: x[:, None, 1]), ("ellipsis", lambda x: x[..., 1]),
  ("ellipsis_none", lambda x: x[None, ..., None]), ("all", lambda x: x[:, :, :]),
  ("mixed", lambda x: x[1:, None, ::2, -1]),
]

@pytest.mark.parametrize("name,fn", GETITEM, ids=[g[0] for g in GETITEM])
def test_getitem(name, fn):
  check_op([(4, 5, 6)], fn)

NEG_STEP = [("rev", lambda x: x[::-1]), ("rev2", lambda x: x[::-2]), ("rev_range", lambda x: x[5:1:-1]),
            ("rev_range3", lambda x: x[-1:0:-3]), ("rev_2d", lambda x: x[::-1, 1::-1])]

@pytest.mark.parametrize("name,fn", NEG_STEP, ids=[g[0] for g in NEG_STEP])
def test_getitem_negative_step(name, fn):
  # torch has no negative steps: compare with numpy through flip
  x = np.random.default_rng(3).uniform(-1, 1, (7, 6)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  out = fn(t)
  np.testing.assert_array_equal(out.numpy(), fn(x))
  seed = np.random.default_rng(4).uniform(size=out.shape).astype(np.float32)
  (out * Tensor(seed)).sum().backward()
  expected = np.zeros_like(x)
  fn(expected)[...] = seed   # fn's result is a view of expected: the upstream gradient lands at the selected positions
  np.testing.assert_array_equal(t.grad.numpy(), expected)

TENSOR_INDEX = [
  ("idx0", lambda x, i: x[i]), ("idx1", lambda x, i: x[:, i]), ("idx_last", lambda x, i: x[..., i]),
  ("two", lambda x, i: x[i, i]), ("two_apart", lambda x, i: x[i, :, i]), ("int_and_idx", lambda x, i: x[1, i]),
  ("idx_2d", lambda x, i: x[i.reshape(2, 2)]), ("idx_none", lambda x, i: x[None, i]),
]

@pytest.mark.parametrize("name,fn", TENSOR_INDEX, ids=[g[0] for g in TENSOR_INDEX])
def test_getitem_tensor(name, fn):
  idx = np.array([0, 3, -1, 2], dtype=np.int32)
  x = np.random.default_rng(5).uniform(-1, 1, (4, 4, 4)).astype(np.float32)
  xt, xp = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  ot, op = fn(xt, torch.tensor(idx, dtype=torch.int64)), fn(xp, Tensor(idx))
  np.testing.assert_allclose(op.numpy(), ot.detach().numpy())
  ot.sum().backward(); op.sum().backward()
  np.testing.assert_allclose(xp.grad.numpy(), xt.grad.numpy())

def test_getitem_list_and_bool_mask():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(Tensor(x)[[0, 2]].numpy(), x[[0, 2]])
  mask = x > 5
  np.testing.assert_array_equal(Tensor(x)[Tensor(mask)].numpy(), x[mask])

NESTED_INDEX = [lambda x: x[((0,),)], lambda x: x[(((0,),),)], lambda x: x[(1, 0), 2, (3, 1)], lambda x: x[[[[0]]], 1, 2, [[1]]],
                lambda x: x[1, (2, 1, 0), None, (0, 1, 2)], lambda x: x[[True, False, 1]]]

@pytest.mark.parametrize("fn", NESTED_INDEX, ids=range(len(NESTED_INDEX)))
def test_getitem_nested_tuples_are_advanced_indices(fn):
  """A tuple inside the index tuple (at any depth) is a list of indices, as in numpy and torch."""
  check_op([(3, 4, 5, 6)], fn)

def test_getitem_index_errors():
  x = Tensor.ones(10, 11, 12)
  with pytest.raises(IndexError, match="boolean mask of shape"): x[[True, False]]
  with pytest.raises(IndexError, match="boolean mask of shape"): x[Tensor([True, False])]
  with pytest.raises(IndexError, match="must be integer or bool"): x[[1.1]]

def test_cat_stack_split():
  check_op([(2, 3), (4, 3), (1, 3)], lambda a, b, c: torch.cat([a, b, c]), lambda a, b, c: a.cat(b, c))
  check_op([(2, 3), (2, 1)], lambda a, b: torch.cat([a, b], dim=-1), lambda a, b: a.cat(b, dim=-1))
  check_op([(2, 0), (2, 3)], lambda a, b: torch.cat([a, b], dim=1), lambda a, b: a.cat(b, dim=1))
  check_op([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], dim=1), lambda a, b: Tensor.stack(a, b, dim=1))
  check_op([(), ()], lambda a, b: torch.stack([a, b]), lambda a, b: a.stack(b))
  check_op([(7, 2)], lambda x: x.split(3), lambda x: x.split(3))
  check_op([(7, 2)], lambda x: x.split([2, 5]), lambda x: x.split([2, 5]))
  check_op([(2, 7)], lambda x: x.chunk(3, dim=1), lambda x: x.chunk(3, dim=1))
  check_op(None, lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), vals=[np.array([1, 2], np.int32), np.array([3], np.int32)])
  check_op(None, lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), vals=[np.array([True]), np.array([False, True])])

def test_roll_gather_one_hot():
  check_op([(4, 5)], lambda x: torch.roll(x, 2, 1), lambda x: x.roll(2, 1))
  check_op([(4, 5)], lambda x: torch.roll(x, (-1, 3), (0, 1)), lambda x: x.roll((-1, 3), (0, 1)))
  idx = np.array([[0, 2, 1], [3, 3, 0]], dtype=np.int64)
  check_op([(2, 4)], lambda x: torch.gather(x, 1, torch.tensor(idx)), lambda x: x.gather(1, Tensor(idx.astype(np.int32))))
  idx0 = np.array([[1, 0, 1, 1]], dtype=np.int64)
  check_op([(2, 4)], lambda x: torch.gather(x, 0, torch.tensor(idx0)), lambda x: x.gather(0, Tensor(idx0.astype(np.int32))))
  labels = np.array([0, 3, 1, 3], dtype=np.int32)
  np.testing.assert_array_equal(Tensor(labels).one_hot(5).numpy(), F.one_hot(torch.tensor(labels, dtype=torch.int64), 5).numpy())
  np.testing.assert_array_equal(Tensor(labels).one_hot().numpy(), F.one_hot(torch.tensor(labels, dtype=torch.int64)).numpy())

# ---- reductions ----

REDUCE_AXES = [None, 0, 1, -1, (0, 2), (1, -1)]

@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod", "var", "std", "logsumexp"])
@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce(op, axis, keepdim):
  def torch_fn(x):
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis))
    if op in ("max", "min"): return (torch.amax if op == "max" else torch.amin)(x, dim=axes, keepdim=keepdim)
    if op == "logsumexp": return torch.logsumexp(x, dim=axes, keepdim=keepdim)
    if op == "prod":  # torch.prod takes one dim: move the reduced dims last and flatten them
      kept = [i for i in range(x.ndim) if i not in axes]
      out = x.permute(*kept, *axes).reshape(*[x.shape[i] for i in kept], -1).prod(-1)
      return out.reshape([1 if i in axes else s for i, s in enumerate(x.shape)]) if keepdim else out
    return getattr(x, op)(dim=axis, keepdim=keepdim)
  low, high = (0.5, 1.5) if op == "prod" else (-2, 2)
  check_op([(3, 4, 5)], torch_fn, lambda x: getattr(x, op)(axis, keepdim=keepdim), low=low, high=high, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("shape", [(), (1,), (45,), (3, 1, 2)], ids=str)
def test_reduce_shapes(shape):
  check_op([shape], lambda x: x.sum(), atol=1e-5)
  check_op([shape], lambda x: torch.amax(x), lambda x: x.max())
  check_op([shape], lambda x: x.mean(), atol=1e-6)

def test_reduce_size_zero():
  check_op([(0,)], lambda x: x.sum(), atol=0)
  check_op([(2, 0)], lambda x: x.sum(1), atol=0)
  check_op([(0, 3)], lambda x: x.sum(1), atol=0)
  check_op([(0, 3)], lambda x: x.prod(0), atol=0)
  assert Tensor.zeros(2, 0).max(1).tolist() == [-math.inf, -math.inf]
  assert math.isnan(Tensor.zeros(0).mean().item())

def test_reduce_ints_and_bools():
  a = np.array([[1, -5, 3], [7, 2, -2]], dtype=np.int32)
  for fn in (lambda x: x.sum(), lambda x: x.sum(0), lambda x: x.prod(1)):
    check_op(None, fn, vals=[a])
  check_op(None, lambda x: torch.amax(x, 1), lambda x: x.max(1), vals=[a])
  check_op(None, lambda x: torch.amin(x, 0), lambda x: x.min(0), vals=[a])
  check_op(None, lambda x: x.float().mean(), lambda x: x.mean(), vals=[a])
  check_op(None, lambda x: x.sum(), vals=[a.astype(np.int8)])
  u = np.array([[3, 200], [0, 255]], dtype=np.uint8)
  check_op(None, lambda x: torch.amin(x, 1), lambda x: x.min(1), vals=[u])
  b = np.array([[True, False, True], [False, False, True]])
  for fn in (lambda x: x.any(), lambda x: x.all(), lambda x: x.any(1), lambda x: x.all(0), lambda x: x.sum(), lambda x: x.sum(1)):
    check_op(None, fn, vals=[b])

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin(axis):
  x = np.array([[1.0, 5.0, 5.0, -2.0], [7.0, 0.0, 7.0, 3.0], [-1.0, -1.0, -3.0, -1.0]], dtype=np.float32)
  for name in ("argmax", "argmin"):
    check_op(None, lambda t: getattr(t, name)(axis), lambda t: getattr(t, name)(axis), vals=[x], grad=False)
    check_op(None, lambda t: getattr(t, name)(axis, keepdim=True), lambda t: getattr(t, name)(axis, keepdim=True), vals=[x])
  check_op(None, lambda t: t.argmax(axis), lambda t: t.argmax(axis), vals=[x.astype(np.int32)])

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(axis):
  check_op([(4, 6)], lambda x: x.cumsum(axis), lambda x: x.cumsum(axis), atol=1e-5)
  check_op(None, lambda x: x.cumsum(axis), lambda x: x.cumsum(axis), vals=[np.arange(12, dtype=np.int32).reshape(3, 4) - 5])
  check_op([(3, 4)], lambda x: x.cumprod(axis), lambda x: x.cumprod(axis), low=0.5, high=1.5, atol=1e-5)

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_logcumsumexp(axis):
  check_op([(4, 6)], lambda x: torch.logcumsumexp(x, axis), lambda x: x.logcumsumexp(axis), low=-40, high=40, atol=1e-5,
           grad_atol=1e-5)

def test_logcumsumexp_far_apart():
  """Each prefix is shifted by its own maximum: e^-100 next to e^0 must not turn the first prefix into -inf."""
  check_op(None, lambda x: torch.logcumsumexp(x, 0), lambda x: x.logcumsumexp(0), vals=[[0.0, 100.0, -50.0]], atol=1e-6)
  check_op(None, lambda x: torch.logcumsumexp(x, 0), lambda x: x.logcumsumexp(0), vals=[[-math.inf, -math.inf, 1.0]],
           grad=False)

@pytest.mark.parametrize("base, exponent", [([0.0], [0.0]), ([0.0], [0.3]), ([0.0], [-0.3]), ([-math.inf, math.inf, 0.0], [0.0] * 3),
                                            ([1.5, -2.5, 0.5], [1.3, 2.0, -0.7])], ids=str)
def test_pow_gradients_at_zero_and_infinity(base, exponent):
  """torch's conventions: d/dx is 0 where the exponent is 0, d/dy is 0 where the base is 0 and y >= 0, never NaN."""
  check_op(None, lambda x, y: x ** y, vals=[base, exponent])

@pytest.mark.parametrize("exponent", [0.3, -0.3, 3.3, 5.5])
def test_pow_const_at_zero_and_negative_infinity(exponent):
  check_op(None, lambda x: x ** exponent, vals=[[0.0, -math.inf, 2.0]])

@pytest.mark.parametrize("exponent", [0.5, 1.5, 2.0, -1.0, 0.0])
def test_int_tensor_to_a_float_power_is_float(exponent):
  check_op(None, lambda x: x ** exponent, vals=[np.array([1, 2, 3, 4], dtype=np.int32)], grad=False)

def test_sigmoid_and_tanh_gradients_far_out():
  """No requires_grad needed for the stable gradients (backward fills every float tensor)."""
  check_op(None, torch.sigmoid, Tensor.sigmoid, vals=[[-300.0, -90.0, 0.0, 90.0, 300.0]])
  check_op(None, torch.tanh, Tensor.tanh, vals=[[-300.0, -40.0, 0.0, 40.0, 300.0]])

def test_min_and_argmin_at_the_smallest_int():
  """min/argmin/minimum of signed ints must not negate (-(-2**31) overflows): ~x reverses the order exactly."""
  lo = np.iinfo(np.int32).min
  for vals in ([0, lo], [lo, 0], [3, 2, 2]):
    check_op(None, lambda x: torch.amin(x), lambda x: x.min(), vals=[np.array(vals, dtype=np.int32)], grad=False)
    check_op(None, lambda x: x.argmin().int(), lambda x: x.argmin(), vals=[np.array(vals, dtype=np.int32)], grad=False)
  check_op(None, torch.minimum, Tensor.minimum, grad=False,
           vals=[np.array([-1234, 0, 1234, 2**31 - 1, lo], dtype=np.int32), np.array(lo, dtype=np.int32)])

def test_cumsum_long_and_0d():
  check_op([(45,)], lambda x: x.cumsum(0), atol=1e-5)
  check_op([(0,)], lambda x: x.cumsum(0))

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis):
  check_op([(3, 5)], lambda x: x.softmax(axis), lambda x: x.softmax(axis), atol=1e-6, rtol=1e-5)
  check_op([(3, 5)], lambda x: x.log_softmax(axis), lambda x: x.log_softmax(axis), atol=1e-6, rtol=1e-5)
  check_op([(3, 5)], lambda x: (x * 30).softmax(axis), lambda x: (x * 30).softmax(axis), atol=1e-6, rtol=1e-5)

# ---- nn ----

MATMUL = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((2, 2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 2)),
          ((5, 3), (2, 3, 4)), ((1, 1), (1, 1)), ((0, 3), (3, 2)), ((2, 0), (0, 3))]

@pytest.mark.parametrize("shapes", MATMUL, ids=str)
def test_matmul(shapes):
  check_op(shapes, lambda a, b: a @ b, atol=1e-5, rtol=1e-5)

def test_matmul_ints_and_dot():
  a, b = np.arange(6, dtype=np.int32).reshape(2, 3) - 2, np.arange(12, dtype=np.int32).reshape(3, 4) - 6
  check_op(None, lambda x, y: x @ y, vals=[a, b])
  check_op([(2, 3), (3, 4)], lambda x, y: x.matmul(y), lambda x, y: x.dot(y), atol=1e-5)
  check_op([(3, 4), (4, 5)], lambda x, y: torch.matmul(x, y), lambda x, y: y.matmul(x, reverse=True), atol=1e-5)

def test_linear():
  check_op([(4, 3), (5, 3), (5,)], lambda x, w, b: F.linear(x, w, b), lambda x, w, b: x.linear(w.T, b), atol=1e-5)
  check_op([(2, 4, 3), (5, 3)], lambda x, w: F.linear(x, w), lambda x, w: x.linear(w.T), atol=1e-5)
  check_op([(4, 3), (3,)], lambda x, w: x * w, lambda x, w: x.linear(w), atol=1e-6)

CONV = [
  dict(x=(1, 1, 5, 5), w=(1, 1, 3, 3)),
  dict(x=(2, 3, 6, 5), w=(4, 3, 3, 2), padding=1),
  dict(x=(2, 2, 7, 7), w=(2, 2, 3, 3), stride=2),
  dict(x=(1, 2, 7, 8), w=(3, 2, 2, 3), stride=(2, 3), padding=(1, 2)),
  dict(x=(1, 2, 9, 9), w=(2, 2, 3, 3), dilation=2),
  dict(x=(2, 4, 5, 5), w=(6, 2, 3, 3), groups=2, padding=1),
  dict(x=(1, 3, 6, 6), w=(3, 1, 3, 3), groups=3, stride=2, dilation=(1, 2)),
  dict(x=(1, 1, 4, 4), w=(2, 1, 4, 4), bias=True),
  dict(x=(1, 1, 5, 5), w=(1, 1, 1, 1), stride=3),
]

@pytest.mark.parametrize("cfg", CONV, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_conv2d(cfg):
  kw = {k: cfg[k] for k in ("stride", "padding", "dilation", "groups") if k in cfg}
  shapes = [cfg["x"], cfg["w"]] + ([(cfg["w"][0],)] if cfg.get("bias") else [])
  check_op(shapes, lambda x, w, *b: F.conv2d(x, w, *b, **kw), lambda x, w, *b: x.conv2d(w, *b, **kw), atol=1e-5, rtol=1e-4)

@pytest.mark.parametrize("output_padding, stride", [((1, 1), (2, 3)), ((2, 1), (3, 2))], ids=str)
def test_conv_transpose2d_output_padding(output_padding, stride):
  """The input gradient here is a kernel with several reductions over the same loops, one of which needs no output
  loop: it once reused values of another loop nest (invalid LLVM IR)."""
  check_op([(2, 4, 6, 5), (4, 4, 3, 3), (4,)],
           lambda x, w, b: F.conv_transpose2d(x, w, b, output_padding=output_padding, stride=stride),
           lambda x, w, b: x.conv_transpose2d(w, b, output_padding=output_padding, stride=stride), atol=1e-5, rtol=1e-4)

def test_conv2d_flat_padding_and_conv1d():
  check_op([(1, 2, 5, 6), (3, 2, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (1, 0, 2, 1)), w),
           lambda x, w: x.conv2d(w, padding=(1, 0, 2, 1)), atol=1e-5, rtol=1e-4)
  check_op([(2, 3, 9), (4, 3, 3)], lambda x, w: F.conv1d(x, w, stride=2, padding=1),
           lambda x, w: x.conv2d(w, stride=2, padding=1), atol=1e-5, rtol=1e-4)

POOL = [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=(2, 3), stride=(1, 2)), dict(kernel_size=3, padding=1, stride=2),
        dict(kernel_size=2, dilation=2, stride=1), dict(kernel_size=2, ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), dict(kernel_size=(2, 3), stride=(2, 2), ceil_mode=True),
        dict(kernel_size=2, stride=3, padding=1, ceil_mode=True), dict(kernel_size=2, dilation=2, stride=2, ceil_mode=True)]

@pytest.mark.parametrize("cfg", POOL, ids=str)
def test_pool2d(cfg):
  check_op([(2, 2, 7, 6)], lambda x: F.max_pool2d(x, **cfg), lambda x: x.max_pool2d(**cfg), atol=1e-6)
  if "dilation" in cfg: return  # torch has no dilated avg_pool2d
  check_op([(2, 2, 7, 6)], lambda x: F.avg_pool2d(x, **cfg), lambda x: x.avg_pool2d(**cfg), atol=1e-6)
  if cfg.get("padding"):
    check_op([(2, 2, 7, 6)], lambda x: F.avg_pool2d(x, **cfg, count_include_pad=False),
             lambda x: x.avg_pool2d(**cfg, count_include_pad=False), atol=1e-6)

def test_sequential_and_losses():
  check_op([(4, 3)], lambda x: torch.relu(x * 2).sum(1), lambda x: x.sequential([lambda t: t * 2, Tensor.relu]).sum(1))
  labels = np.array([0, 2, 1, 2], dtype=np.int64)
  check_op([(4, 3)], lambda x: F.cross_entropy(x, torch.tensor(labels)),
           lambda x: x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32))), atol=1e-6, rtol=1e-5)
  check_op([(4, 3)], lambda x: F.cross_entropy(x, torch.tensor(labels), label_smoothing=0.1),
           lambda x: x.cross_entropy(Tensor(labels.astype(np.int32)), label_smoothing=0.1), atol=1e-6, rtol=1e-5)
  check_op([(4, 3), (4, 3)], lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()),
           lambda x, y: x.binary_crossentropy_logits(y.sigmoid()), atol=1e-6, rtol=1e-5)
  check_op([(4, 6)], lambda x: F.layer_norm(x, (6,)), lambda x: x.layernorm(), atol=1e-5, rtol=1e-4)

def test_losses_torch_options():
  """pos_weight, class dim 1 for N-d logits, probabilities of a 1-d input, and mismatched probabilities refused."""
  pw = np.linspace(0.25, 7, 5).astype(np.float32)
  check_op([(6, 5), (6, 5)], lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), pos_weight=torch.tensor(pw)),
           lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), pos_weight=Tensor(pw)), atol=1e-6, rtol=1e-5)
  for shape in [(7,), (6, 5), (3, 4, 2, 2)]:
    check_op([shape, shape], lambda x, y: F.cross_entropy(x, y.softmax(1 if len(shape) > 1 else 0)),
             lambda x, y: x.cross_entropy(y.softmax(1 if len(shape) > 1 else 0)), atol=1e-5, rtol=1e-5)
  labels = np.random.default_rng(0).integers(0, 4, (3, 2, 2))
  check_op([(3, 4, 2, 2)], lambda x: F.cross_entropy(x, torch.tensor(labels)),
           lambda x: x.cross_entropy(Tensor(labels.astype(np.int32))), atol=1e-5, rtol=1e-5)
  with pytest.raises(RuntimeError, match="do not match"): Tensor.ones(4, 3).cross_entropy(Tensor.ones(4, 1))

@pytest.mark.parametrize("cfg, out", [(dict(kernel_size=(5, 5), stride=(6, 5)), (14, 13)),
                                      (dict(kernel_size=(3, 3), stride=(3, 2), padding=1), (14, 13)),
                                      (dict(kernel_size=2), (9, 9, 14, 13))], ids=str)
def test_max_pool_indices_and_unpool(cfg, out):
  def torch_fn(x):
    v, i = F.max_pool2d(x, return_indices=True, **cfg)
    return F.max_unpool2d(v, i, **cfg, output_size=out), i.int()
  def tiny_fn(x):
    v, i = x.max_pool2d(return_indices=True, **cfg)
    return Tensor.max_unpool2d(v, i, **cfg, output_size=out), i.cast(dtypes.int32)
  for got, want in zip(tiny_fn(Tensor(a := np.random.default_rng(1).standard_normal((2, 3, 14, 13)).astype(np.float32))),
                       torch_fn(torch.tensor(a))):
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)

@pytest.mark.parametrize("nd", [1, 3])
def test_pools_of_other_dims(nd):
  """A kernel_size of n ints pools the last n dims, as torch's avg_pool1d/3d and max_pool1d/3d."""
  shape, k = ((2, 3, 11), (3,)) if nd == 1 else ((1, 2, 9, 8, 10), (3, 3, 2))
  avg, mx = (F.avg_pool1d, F.max_pool1d) if nd == 1 else (F.avg_pool3d, F.max_pool3d)
  check_op([shape], lambda x: avg(x, k, stride=2, padding=1, count_include_pad=False),
           lambda x: x.avg_pool2d(k, stride=2, padding=1, count_include_pad=False), atol=1e-6)
  check_op([shape], lambda x: mx(x, k, stride=2), lambda x: x.max_pool2d(k, stride=2), atol=1e-6)

def test_argument_errors_are_runtime_errors_too():
  with pytest.raises(RuntimeError, match="indexing"): Tensor.ones(3).meshgrid(indexing="bad")
  with pytest.raises(RuntimeError, match="rounding_mode"): Tensor.ones(3).div(2, rounding_mode="typo")
  with pytest.raises(RuntimeError, match="bool"): Tensor.linspace(5, 10, 3, dtype="bool")
  with pytest.raises(ValueError, match="non-negative"): Tensor.linspace(1, 2, -1)

def test_meshgrid():
  for indexing in ("ij", "xy"):
    want = torch.meshgrid(torch.arange(3.0), torch.tensor(10.0), torch.arange(4.0), indexing=indexing)
    got = Tensor.arange(3.0).meshgrid(Tensor(10.0), Tensor.arange(4.0), indexing=indexing)
    assert len(got) == 3 and all(np.array_equal(g.numpy(), w.numpy()) for g, w in zip(got, want))

def test_attention_grouped_heads_and_errors():
  check_op([(2, 6, 4, 8), (2, 2, 4, 8), (2, 2, 4, 3)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
           lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), atol=1e-5, rtol=1e-4)
  q = Tensor.ones(1, 5, 2, 4)
  with pytest.raises(RuntimeError, match="cannot be grouped"): q.scaled_dot_product_attention(Tensor.ones(1, 2, 2, 4), Tensor.ones(1, 2, 2, 4), enable_gqa=True)
  with pytest.raises(RuntimeError, match="not both"): q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(2, 2), is_causal=True)

def test_tril_triu_and_attention():
  for d in (-1, 0, 2):
    check_op([(4, 5)], lambda x: x.triu(d), lambda x: x.triu(d))
    check_op([(2, 3, 4)], lambda x: x.tril(d), lambda x: x.tril(d))
  check_op([(2, 4, 8), (2, 5, 8), (2, 5, 3)], F.scaled_dot_product_attention, Tensor.scaled_dot_product_attention,
           atol=1e-5, rtol=1e-4)
  check_op([(2, 4, 8), (2, 4, 8), (2, 4, 3)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), atol=1e-5, rtol=1e-4)
