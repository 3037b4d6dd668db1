"""tinygrad's public module paths and names, and the layers/optimisers added for them, checked against PyTorch/numpy."""
from __future__ import annotations
import importlib, os, tempfile
import numpy as np
import pytest
import torch
from tinyplug import Tensor, nn, dtypes
from tinyplug.helpers import Context, TRAINING, temp
from tinyplug.uop.ops import UOp, Ops
from tests.test_nn import check_layer, rand

# ---------------- module paths ----------------

@pytest.mark.parametrize("module, names", [
  ("tinyplug.dtype", ["DType", "dtypes", "DTYPES_DICT", "least_upper_dtype", "ConstType", "to_dtype"]),
  ("tinyplug.helpers", ["getenv", "Context", "ContextVar", "GlobalCounters", "DEBUG", "JIT", "temp", "TRAINING"]),
  ("tinyplug.device", ["Device", "Buffer"]),
  ("tinyplug.nn", ["ConvTranspose1d", "InstanceNorm", "LSTMCell", "LayerNorm2d"]),
  ("tinyplug.nn.optim", ["Muon", "LAMB", "Adam", "SGD", "AdamW"]),
  ("tinyplug.engine.jit", ["TinyJit", "JitError"]),
  ("tinyplug.uop.ops", ["UOp", "Ops", "GroupOp", "UPat", "PatternMatcher", "graph_rewrite"]),
])
def test_public_module_paths(module, names):
  mod = importlib.import_module(module)
  missing = [n for n in names if not hasattr(mod, n)]
  assert not missing, f"{module} lacks {missing}"

def test_dtypes_dict_and_groups():
  from tinyplug.dtype import DTYPES_DICT
  assert DTYPES_DICT["float32"] is dtypes.float32 and DTYPES_DICT["half"] is dtypes.float16
  assert "void" not in DTYPES_DICT and all(isinstance(k, str) for k in DTYPES_DICT)
  assert set(dtypes.floats) == {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, *dtypes.fp8s}
  assert DTYPES_DICT["fp8e4m3"] is dtypes.fp8e4m3 and len(dtypes.fp8s) == 4
  assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints) and len(dtypes.ints) == 8
  assert set(dtypes.all) == set(dtypes.floats) | set(dtypes.ints) | {dtypes.bool}

def test_temp_path():
  assert temp("x.bin") == os.path.join(tempfile.gettempdir(), "x.bin")
  assert temp("x", append_user=True).startswith(os.path.join(tempfile.gettempdir(), "x."))

def test_uop_const_takes_value_first():
  c = UOp.const(2.0, dtypes.float)
  assert c.op is Ops.CONST and c.arg == 2.0 and c.dtype == dtypes.float
  assert UOp.const(dtypes.float, 2.0) is c          # the older (dtype, value) order still works
  assert UOp.const(3).dtype == dtypes.int and UOp.const(True).dtype == dtypes.bool
  assert UOp.const(300, dtypes.uint8).arg == 300 % 256

# ---------------- TRAINING is Tensor.training ----------------

def test_training_context_var_is_tensor_training():
  assert Tensor.training is False
  with Context(TRAINING=1):
    assert Tensor.training is True
    assert (Tensor.ones(1000).dropout(0.5).numpy() == 0).any()
  with Tensor.train():
    assert TRAINING.value == 1
  assert Tensor.training is False and (Tensor.ones(10).dropout(0.5).numpy() == 1).all()

# ---------------- layers ----------------

@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1), dict(stride=3, output_padding=1, bias=False)])
def test_conv_transpose1d(kwargs):
  check_layer(nn.ConvTranspose1d(3, 4, 3, **kwargs), torch.nn.ConvTranspose1d(3, 4, 3, **kwargs), rand(2, 3, 7), rtol=1e-4,
              atol=1e-4)

@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 4, 3, 2)])
def test_instancenorm(shape):
  torch_layer = (torch.nn.InstanceNorm2d if len(shape) == 4 else torch.nn.InstanceNorm3d)(3, affine=True)
  ours = nn.InstanceNorm(3)
  ours.weight, ours.bias = Tensor(rand(3, seed=1)), Tensor(rand(3, seed=2))
  check_layer(ours, torch_layer, rand(*shape), atol=1e-4)

@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(bias):
  ours, theirs = nn.LSTMCell(5, 4, bias=bias), torch.nn.LSTMCell(5, 4, bias=bias)
  for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ()):
    getattr(theirs, name).data = torch.tensor(getattr(ours, name).numpy())
  x, h0, c0 = rand(3, 5), rand(3, 4, seed=1), rand(3, 4, seed=2)
  h, c = ours(Tensor(x), (Tensor(h0), Tensor(c0)))
  th, tc = theirs(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
  np.testing.assert_allclose(h.numpy(), th.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(c.numpy(), tc.detach().numpy(), atol=1e-5)
  h, c = ours(Tensor(x))   # no state: zeros
  th, tc = theirs(torch.tensor(x))
  np.testing.assert_allclose(h.numpy(), th.detach().numpy(), atol=1e-5)

# ---------------- Muon ----------------

def _torch_muon_float32(monkeypatch):
  """torch's Muon runs its Newton-Schulz steps in bfloat16; ours in the parameter's dtype. Compare in float32."""
  import torch.optim._muon as M
  def ns(grad, coef, steps, eps):
    a, b, c = coef
    x = grad.float().T if grad.size(0) > grad.size(1) else grad.float()
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
      gram = x @ x.T
      x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if grad.size(0) > grad.size(1) else x
  monkeypatch.setattr(M, "_zeropower_via_newtonschulz", ns)

@pytest.mark.parametrize("opts", [dict(lr=0.01), dict(lr=0.1, weight_decay=0.01, nesterov=False),
                                  dict(lr=0.05, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), momentum=0.9)])
@pytest.mark.parametrize("shape", [(4, 6), (6, 4)])
def test_muon_matches_torch(monkeypatch, opts, shape):
  from tinyplug.nn.optim import Muon
  _torch_muon_float32(monkeypatch)
  w0, x0 = rand(*shape), rand(3, shape[0], seed=1)
  wt = torch.tensor(w0, requires_grad=True)
  ot = torch.optim.Muon([wt], **opts)
  w = Tensor(w0.copy(), requires_grad=True)
  o = Muon([w], **opts)
  with Tensor.train():
    for _ in range(3):
      ot.zero_grad(); (torch.tensor(x0) @ wt).relu().sum().backward(); ot.step()
      o.zero_grad(); (Tensor(x0) @ w).relu().sum().backward(); o.step()
  np.testing.assert_allclose(w.numpy(), wt.detach().numpy(), atol=1e-5)

def test_muon_rejects_vectors():
  from tinyplug.nn.optim import Muon
  with pytest.raises(ValueError, match="matrices"): Muon([Tensor.ones(3, requires_grad=True)])

# ---------------- TRANSCENDENTAL ----------------

def test_transcendental_2_uses_the_polynomials():
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  from tinyplug.engine.realize import get_runner
  x = np.linspace(-3, 3, 101, dtype=np.float32)
  plain = Tensor(x).exp2().sin().numpy()
  with Context(TRANSCENDENTAL=2):
    forced = Tensor(x).exp2().sin().numpy()
    t = (Tensor(x) + 1).log2()
    from tinyplug.schedule import create_schedule
    items, _ = create_schedule([t.uop])
    ast = [i.ast for i in items if i.ast.op is Ops.SINK][-1]
    uops = get_program(ast, Device[Device.DEFAULT].renderer).uops
    assert not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) for u in uops)
  want = np.sin(np.exp2(x.astype(np.float64)))
  np.testing.assert_allclose(forced, want, atol=1e-5)
  np.testing.assert_allclose(plain, want, atol=1e-5)
