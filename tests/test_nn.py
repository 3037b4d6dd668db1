"""nn layers and losses against PyTorch: the same weights in both, the same input, forward and backward compared.

Variants run on the default device; one test per layer and loss runs on every device (the `device` fixture)."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from tinyplug import Tensor, nn
from tinyplug.nn import losses
from tinyplug.nn.state import get_state_dict

RTOL, ATOL = 1e-4, 1e-5

def _np(t: Tensor | torch.Tensor) -> np.ndarray:
  return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()

def copy_weights(ours, theirs) -> None:
  """Copy every tensor of our layer into the torch module's parameter/buffer of the same name."""
  tsd = dict(theirs.named_parameters()) | dict(theirs.named_buffers())
  for name, t in get_state_dict(ours).items():
    if name in tsd: tsd[name].data = torch.tensor(t.numpy()).to(tsd[name].dtype)

def check_layer(ours, theirs, x: np.ndarray, grad_of_weights: tuple[str, ...] = ("weight", "bias"),
                rtol: float = RTOL, atol: float = ATOL, int_input: bool = False) -> None:
  copy_weights(ours, theirs)
  sd = get_state_dict(ours)
  for name in grad_of_weights:
    if sd.get(name) is not None: sd[name].requires_grad_(True)
  xt = Tensor(x, requires_grad=not int_input)
  xtt = torch.tensor(x, requires_grad=not int_input)
  out, tout = ours(xt), theirs(xtt)
  np.testing.assert_allclose(_np(out), _np(tout), rtol=rtol, atol=atol)
  # a non-uniform upstream gradient, so that sum-like mistakes show
  seed = np.linspace(-1, 1, math.prod(tout.shape), dtype=np.float32).reshape(tout.shape)
  (out * Tensor(seed)).sum().backward()
  (tout * torch.tensor(seed)).sum().backward()
  if not int_input: np.testing.assert_allclose(_np(xt.grad), _np(xtt.grad), rtol=rtol, atol=atol)
  tparams = dict(theirs.named_parameters())
  for name in grad_of_weights:
    if sd.get(name) is None: continue
    np.testing.assert_allclose(_np(sd[name].grad), _np(tparams[name].grad), rtol=rtol, atol=atol, err_msg=name)

def rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ---------------- layers ----------------

@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
  check_layer(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias), rand(4, 5))

def test_linear_batched_input(device):
  check_layer(nn.Linear(4, 2), torch.nn.Linear(4, 2), rand(2, 3, 4))

@pytest.mark.parametrize("kwargs", [
  dict(), dict(stride=2, padding=1), dict(padding=(1, 0), bias=False), dict(dilation=2, padding=2),
  dict(groups=2), dict(padding="same")])
def test_conv2d(kwargs):
  cin, cout = (2, 4)
  check_layer(nn.Conv2d(cin, cout, 3, **kwargs), torch.nn.Conv2d(cin, cout, 3, **kwargs), rand(2, cin, 6, 5))

def test_conv2d_rectangular_kernel(device):
  check_layer(nn.Conv2d(1, 2, (3, 2)), torch.nn.Conv2d(1, 2, (3, 2)), rand(1, 1, 5, 4))

@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)])
def test_conv_transpose2d(kwargs):
  check_layer(nn.ConvTranspose2d(2, 4, 3, **kwargs), torch.nn.ConvTranspose2d(2, 4, 3, **kwargs), rand(2, 2, 4, 3))

def test_conv_transpose2d_every_device(device):
  kwargs = dict(stride=2, padding=1)
  check_layer(nn.ConvTranspose2d(2, 3, 3, **kwargs), torch.nn.ConvTranspose2d(2, 3, 3, **kwargs), rand(1, 2, 3, 3))

def test_conv_transpose2d_subpixel_every_device(device):
  # k4 s2: one sub-pixel convolution (output axes (q, r) per dim), its gradient from the convolution it transposes
  kwargs = dict(stride=2, padding=1)
  check_layer(nn.ConvTranspose2d(2, 3, 4, **kwargs), torch.nn.ConvTranspose2d(2, 3, 4, **kwargs), rand(1, 2, 3, 3))

def test_conv_init_bounds():
  """Kaiming-uniform with a=sqrt(5): weights within 1/sqrt(fan_in), as PyTorch initialises them."""
  Tensor.manual_seed(0)
  conv = nn.Conv2d(4, 8, 3)
  bound = 1 / math.sqrt(4 * 9)
  w, b = conv.weight.numpy(), conv.bias.numpy()
  assert w.shape == (8, 4, 3, 3) and b.shape == (8,)
  assert np.abs(w).max() <= bound + 1e-6 and np.abs(w).max() > 0.8 * bound
  assert np.abs(b).max() <= bound + 1e-6
  assert abs(w.std() - bound / math.sqrt(3)) < 0.2 * bound   # uniform(-b, b) has std b/sqrt(3)

def test_linear_init_bounds():
  Tensor.manual_seed(1)
  lin = nn.Linear(100, 50)
  bound = 1 / math.sqrt(100)
  assert np.abs(lin.weight.numpy()).max() <= bound + 1e-6 and np.abs(lin.bias.numpy()).max() <= bound + 1e-6

@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm2d_train_and_eval(affine):
  ours, theirs = nn.BatchNorm2d(3, affine=affine), torch.nn.BatchNorm2d(3, affine=affine)
  x = rand(4, 3, 2, 2) * 2 + 1
  with Tensor.train():
    check_layer(ours, theirs.train(), x)
    ours.running_mean.realize(ours.running_var, ours.num_batches_tracked)
    # the running statistics moved like PyTorch's
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=RTOL, atol=ATOL)
    assert ours.num_batches_tracked.numpy().tolist() == [1]
  theirs.eval()
  x2 = rand(2, 3, 2, 2, seed=1)
  out = ours(Tensor(x2))
  np.testing.assert_allclose(out.numpy(), theirs(torch.tensor(x2)).detach().numpy(), rtol=RTOL, atol=ATOL)

def test_batchnorm_running_stats_over_steps(device):
  ours, theirs = nn.BatchNorm(2, momentum=0.3), torch.nn.BatchNorm1d(2, momentum=0.3)
  with Tensor.train():
    for i in range(3):
      x = rand(5, 2, seed=i) * (i + 1)
      ours(Tensor(x)).realize(ours.running_mean, ours.running_var)
      theirs(torch.tensor(x))
  np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=RTOL, atol=ATOL)

def test_batchnorm_without_running_stats():
  ours = nn.BatchNorm2d(2, track_running_stats=False)
  theirs = torch.nn.BatchNorm2d(2, track_running_stats=False).eval()
  assert "running_mean" not in get_state_dict(ours)
  x = rand(3, 2, 2, 2)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=RTOL, atol=ATOL)

@pytest.mark.parametrize("shape", [4, (3, 4)])
def test_layernorm(shape):
  check_layer(nn.LayerNorm(shape), torch.nn.LayerNorm(shape), rand(2, 3, 4) * 3)

def test_layernorm_no_affine(device):
  check_layer(nn.LayerNorm(4, elementwise_affine=False), torch.nn.LayerNorm(4, elementwise_affine=False), rand(3, 4))

def test_groupnorm(device):
  check_layer(nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4), rand(2, 4, 3, 2) + 0.5)

def test_rmsnorm(device):
  check_layer(nn.RMSNorm(4), torch.nn.RMSNorm(4, eps=1e-6), rand(2, 3, 4))

def test_embedding(device):
  ours, theirs = nn.Embedding(7, 3), torch.nn.Embedding(7, 3)
  idx = np.array([[0, 3, 6], [3, 3, 1]], dtype=np.int64)
  copy_weights(ours, theirs)
  ours.weight.requires_grad_(True)
  out, tout = ours(Tensor(idx.astype(np.int32))), theirs(torch.tensor(idx))
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=RTOL, atol=ATOL)
  seed = rand(*tout.shape, seed=3)
  (out * Tensor(seed)).sum().backward()
  (tout * torch.tensor(seed)).sum().backward()
  np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=RTOL, atol=ATOL)

def test_embedding_rejects_float_indices():
  with pytest.raises(TypeError, match="integer"): nn.Embedding(3, 2)(Tensor([0.0, 1.0]))

def test_dropout_train_and_eval():
  x = Tensor.ones(1000)
  assert (nn.Dropout(0.5)(x).numpy() == 1).all()   # evaluation: identity
  with Tensor.train():
    y = nn.Dropout(0.25)(x).numpy()
  kept = y != 0
  assert 0.6 < kept.mean() < 0.9
  np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)

def test_layer_errors():
  with pytest.raises(ValueError, match="divisible"): nn.Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="divisible"): nn.GroupNorm(3, 4)
  with pytest.raises(ValueError, match="does not end with"): nn.LayerNorm(5)(Tensor.ones(2, 4))
  with pytest.raises(ValueError, match="padding"): nn.Conv2d(1, 1, 3, padding="full")

def test_tinygrad_names():
  for name in ("Linear", "Conv2d", "ConvTranspose2d", "BatchNorm", "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
               "Embedding"):
    assert callable(getattr(nn, name))
  assert nn.optim.Adam and nn.state.get_parameters

# ---------------- losses ----------------

LOGITS = rand(6, 5) * 2
LABELS = np.array([0, 4, 2, 2, 1, 3], dtype=np.int32)

def _loss_pair(fn, tfn, x: np.ndarray, *rest_ours, **kw):
  xt, xtt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  out = fn(xt, *rest_ours[0])
  tout = tfn(xtt, *rest_ours[1])
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=RTOL, atol=ATOL)
  out.sum().backward() if out.shape else out.backward()
  tout.sum().backward()
  np.testing.assert_allclose(xt.grad.numpy(), xtt.grad.numpy(), rtol=RTOL, atol=ATOL)

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sparse_categorical_crossentropy(reduction, smoothing):
  _loss_pair(lambda x, y: losses.sparse_categorical_crossentropy(x, y, label_smoothing=smoothing, reduction=reduction),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, label_smoothing=smoothing, reduction=reduction),
             LOGITS, (Tensor(LABELS),), (torch.tensor(LABELS, dtype=torch.long),))

def test_sparse_categorical_crossentropy_ignore_index(device):
  labels = LABELS.copy(); labels[1] = -1
  _loss_pair(lambda x, y: losses.sparse_categorical_crossentropy(x, y),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, ignore_index=-1),
             LOGITS, (Tensor(labels),), (torch.tensor(labels, dtype=torch.long),))

@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_tensor_method_ignores_labels_outside_the_classes(device, smoothing):
  # an ignored label of -1 (or torch's -100) is no class: the pick must not read it
  labels = LABELS.copy(); labels[1] = -1
  _loss_pair(lambda x, y: x.sparse_categorical_crossentropy(y, label_smoothing=smoothing),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, ignore_index=-1, label_smoothing=smoothing),
             LOGITS, (Tensor(labels),), (torch.tensor(labels, dtype=torch.long),))
  labels = LABELS.copy(); labels[3] = -100   # cross_entropy's default ignore_index, as torch's
  _loss_pair(lambda x, y: x.cross_entropy(y, label_smoothing=smoothing),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, label_smoothing=smoothing),
             LOGITS, (Tensor(labels),), (torch.tensor(labels, dtype=torch.long),))

@pytest.mark.parametrize("loss", [
  lambda x, y: x.sparse_categorical_crossentropy(y),
  lambda x, y: x.cross_entropy(y),
  lambda x, y: x.log_softmax().nll_loss(y),
  lambda x, y: losses.sparse_categorical_crossentropy(x, y),
])
def test_a_label_outside_the_classes_raises_on_every_call(device, loss):
  # the first call builds the loss's graph template, later ones replay it: each must check its own labels
  x = Tensor(LOGITS)
  for good in (LABELS, LABELS[::-1].copy()): assert np.isfinite(loss(x, Tensor(good)).item())
  for bad in (5, 7):
    labels = LABELS.copy(); labels[2] = bad
    with pytest.raises(IndexError, match="class label: index .* out of range for size 5"): loss(x, Tensor(labels))

def test_tensor_method_matches_ours(device):
  x, y = Tensor(LOGITS), Tensor(LABELS)
  np.testing.assert_allclose(x.sparse_categorical_crossentropy(y).numpy(),
                             losses.sparse_categorical_crossentropy(x, y).numpy(), rtol=RTOL)

@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_indices_and_probabilities(smoothing):
  _loss_pair(lambda x, y: losses.cross_entropy(x, y, label_smoothing=smoothing),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, label_smoothing=smoothing),
             LOGITS, (Tensor(LABELS),), (torch.tensor(LABELS, dtype=torch.long),))
  probs = np.abs(rand(6, 5, seed=2)); probs /= probs.sum(1, keepdims=True)
  _loss_pair(lambda x, y: losses.cross_entropy(x, y, label_smoothing=smoothing),
             lambda x, y: torch.nn.functional.cross_entropy(x, y, label_smoothing=smoothing),
             LOGITS, (Tensor(probs),), (torch.tensor(probs),))

def test_cross_entropy_spatial(device):
  x, y = rand(2, 3, 4), np.array([[0, 1, 2, 1], [2, 2, 0, 1]], dtype=np.int32)
  _loss_pair(losses.cross_entropy, torch.nn.functional.cross_entropy, x, (Tensor(y),),
             (torch.tensor(y, dtype=torch.long),))

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
  logp = torch.log_softmax(torch.tensor(LOGITS), 1).numpy()
  w = np.array([1.0, 2.0, 0.5, 1.0, 3.0], dtype=np.float32)
  _loss_pair(lambda x, y: losses.nll_loss(x, y, weight=Tensor(w), reduction=reduction),
             lambda x, y: torch.nn.functional.nll_loss(x, y, weight=torch.tensor(w), reduction=reduction),
             logp, (Tensor(LABELS),), (torch.tensor(LABELS, dtype=torch.long),))

def test_nll_loss_ignore_index(device):
  logp = torch.log_softmax(torch.tensor(LOGITS), 1).numpy()
  _loss_pair(lambda x, y: losses.nll_loss(x, y, ignore_index=2),
             lambda x, y: torch.nn.functional.nll_loss(x, y, ignore_index=2),
             logp, (Tensor(LABELS),), (torch.tensor(LABELS, dtype=torch.long),))

def test_binary_crossentropy(device):
  p = 1 / (1 + np.exp(-rand(4, 3)))
  y = (rand(4, 3, seed=5) > 0).astype(np.float32)
  _loss_pair(losses.binary_crossentropy, torch.nn.functional.binary_cross_entropy, p, (Tensor(y),), (torch.tensor(y),))

def test_binary_crossentropy_logits(device):
  x, y = rand(4, 3) * 5, (rand(4, 3, seed=5) > 0).astype(np.float32)
  pw = np.array([1.0, 2.0, 0.5], dtype=np.float32)
  _loss_pair(losses.binary_crossentropy_logits, torch.nn.functional.binary_cross_entropy_with_logits, x,
             (Tensor(y),), (torch.tensor(y),))
  _loss_pair(lambda a, b: losses.binary_crossentropy_logits(a, b, pos_weight=Tensor(pw)),
             lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b, pos_weight=torch.tensor(pw)), x,
             (Tensor(y),), (torch.tensor(y),))

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse(reduction):
  y = rand(3, 4, seed=9)
  _loss_pair(lambda a, b: losses.mse(a, b, reduction=reduction),
             lambda a, b: torch.nn.functional.mse_loss(a, b, reduction=reduction), rand(3, 4), (Tensor(y),),
             (torch.tensor(y),))

def test_loss_errors():
  with pytest.raises(ValueError, match="reduction"): losses.mse(Tensor.ones(2), Tensor.ones(2), reduction="avg")
  with pytest.raises(ValueError, match="expected labels of shape"):
    losses.sparse_categorical_crossentropy(Tensor(LOGITS), Tensor([1, 2]))
  with pytest.raises(TypeError, match="integers"):
    losses.sparse_categorical_crossentropy(Tensor(LOGITS), Tensor(LABELS.astype(np.float32)))
