"""Graph templates (tensor_ops/template.py): a composite method's graph is built once per input signature and
rebuilt over new inputs; results, gradients and gradient flags must be those of building it afresh."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import Tensor
from tinyplug.tensor_ops import template
from tinyplug.tensor_ops.template import graph_template

def _conv_pair(seed: int, **kw):
  rng = np.random.default_rng(seed)
  x, w, b = rng.standard_normal((2, 3, 7, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32), \
    rng.standard_normal(4).astype(np.float32)
  return x, w, b

@pytest.mark.parametrize("bias_as", ["positional", "keyword", "none"])
def test_conv2d_template_reused_with_new_inputs(device, bias_as):
  outs = []
  for seed in range(3):   # the same signature three times: built once, rebuilt twice
    x, w, b = _conv_pair(seed)
    tx, tw, tb = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
    if bias_as == "positional": out = tx.conv2d(tw, tb, padding=1)
    elif bias_as == "keyword": out = tx.conv2d(tw, bias=tb, padding=1)
    else: out = tx.conv2d(tw, padding=1)
    out.square().sum().backward()
    px, pw, pb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ref = F.conv2d(px, pw, pb if bias_as != "none" else None, padding=1)
    ref.square().sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-3)
    if bias_as != "none": np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-4, atol=1e-3)
    outs.append(out.numpy())
  assert not np.allclose(outs[0], outs[1])   # really the new inputs, not the first call's

def test_gradient_flags_and_modes_are_part_of_the_key():
  x, w, _ = _conv_pair(0)
  assert Tensor(x, requires_grad=True).conv2d(Tensor(w)).requires_grad is True
  assert Tensor(x, requires_grad=False).conv2d(Tensor(w, requires_grad=False)).requires_grad is False
  Tensor.no_grad = True
  try: assert Tensor(x, requires_grad=True).conv2d(Tensor(w, requires_grad=True)).requires_grad is False
  finally: Tensor.no_grad = False
  assert Tensor(x, requires_grad=True).conv2d(Tensor(w, requires_grad=True)).requires_grad is True

@pytest.mark.parametrize("kw,ref", [
  (dict(padding=1), lambda x, w: F.conv2d(x, w, padding=1)),
  (dict(padding=[1, 0]), lambda x, w: F.conv2d(x, w, padding=(1, 0))),
  (dict(stride=2), lambda x, w: F.conv2d(x, w, stride=2)),
  (dict(dilation=2, padding=2), lambda x, w: F.conv2d(x, w, dilation=2, padding=2)),
  (dict(padding=(1, 2, 0, 1)), lambda x, w: F.conv2d(F.pad(x, (1, 2, 0, 1)), w)),
], ids=["pad1", "pad_list", "stride2", "dilation2", "pad_flat4"])
def test_other_arguments_pick_other_templates(kw, ref):
  x, w, _ = _conv_pair(1)
  for _ in range(2):   # the second call comes from the template
    got = Tensor(x).conv2d(Tensor(w), **kw).numpy()
    np.testing.assert_allclose(got, ref(torch.tensor(x), torch.tensor(w)).numpy(), rtol=1e-4, atol=1e-4)

def test_built_once_list_arguments_frozen_unhashable_ones_skip():
  calls = []
  @graph_template
  def scaled(self, scale):
    calls.append(1)
    return self * scale[0]
  a, b, c = Tensor([1.0, 2.0]), Tensor([3.0, 4.0]), Tensor([5.0, 6.0])
  assert scaled(a, (2.0,)).tolist() == [2.0, 4.0] and len(calls) == 1   # the first call runs the method as it is
  assert scaled(b, (2.0,)).tolist() == [6.0, 8.0] and len(calls) == 2   # the second builds the template (over b)
  assert scaled(c, (2.0,)).tolist() == [10.0, 12.0] and len(calls) == 2   # later ones rebuild it
  assert scaled(a, [3.0]).tolist() == [3.0, 6.0] and scaled(b, [3.0]).tolist() == [9.0, 12.0] and len(calls) == 4
  assert scaled(c, [3.0]).tolist() == [15.0, 18.0] and len(calls) == 4   # a list is frozen into the key
  assert scaled(a, np.array([5.0])).tolist() == [5.0, 10.0] and len(calls) == 5   # unhashable: built directly
  assert scaled(a, np.array([5.0])).tolist() == [5.0, 10.0] and len(calls) == 6

def test_a_template_holds_no_memory():
  from tinyplug.engine.realize import has_buffer
  x, w, b = _conv_pair(2)
  for _ in range(2): Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).realize()
  holders = [h for built in template._templates.values() for h in built.holders]
  assert holders and all(h.base.op.name == "BUFFER" and not has_buffer(h.base) for h in holders)

def test_rebuilt_output_brings_its_schedule_key_and_aliased_inputs_do_not():
  from tinyplug.schedule.cache import structure
  from tinyplug.uop.ops import Ops, UOp
  from tinyplug.uop.dtype import dtypes
  @graph_template
  def mix(self, other):
    return (self * 2 + other.flip(0)).relu().sum(0)
  rng = np.random.default_rng(3)
  an, bn = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  ref = lambda x, y: np.maximum(x * 2 + y[::-1], 0).sum(0)
  mix(b, a)   # a template is built on the second call of a signature
  for x, y, xn, yn in [(a, b, an, bn), (b, a, bn, an), (a, a, an, an), (b, b, bn, bn), (a, b, an, bn)]:
    out = mix(x, y)
    hint = (out.uop._cache or {}).get("sink_structure")
    assert (hint is not None) == (x is not y)   # the same buffer twice is another graph: walked as usual
    if hint is not None:   # the hint is what walking the graph gives
      sink = UOp(Ops.SINK, dtypes.void, (out.uop,))
      walked = list(sink.toposort())
      key, nodes = structure(sink)
      assert len(nodes) == len(walked) and set(nodes) == set(walked)
      del out.uop._cache["sink_structure"]
      assert structure(sink) == (key, walked)   # the very key and order a walk finds
      out.uop._cache["sink_structure"] = hint
    np.testing.assert_allclose(out.numpy(), ref(xn, yn), rtol=1e-5, atol=1e-5)
  lazy_in = a + 1
  lazy = mix(lazy_in, b)   # an input that is a graph, not a buffer: no hint (and its graph is not walked), still right
  assert "sink_structure" not in (lazy.uop._cache or {}) and "view_key" not in (lazy_in.uop._cache or {})
  np.testing.assert_allclose(lazy.numpy(), ref(an + 1, bn), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)),
                                   ((2, 1, 5, 7), (3, 7, 4))], ids=["2d", "vec_mat", "mat_vec", "dot", "batched"])
def test_matmul_template_values_and_gradients(device, sa, sb):
  """Tensor.dot is a graph template: every call after the first rebuilds its graph; values and gradients match torch."""
  for seed in range(3):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = ta @ tb
    (out * out).sum().backward()
    pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ref = pa @ pb
    (ref * ref).sum().backward()
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ta.grad.numpy(), pa.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_matmul_template_same_tensor_dtypes_and_errors(device):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  for _ in range(2):   # a graph over one input twice, or over a view of the other, is not the a @ b graph
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ ta).numpy(), a @ a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ ta.T).numpy(), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((tb @ ta).numpy(), b @ a, rtol=1e-5, atol=1e-5)
  ia, ib = np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(8, dtype=np.int32).reshape(4, 2)
  got = Tensor(ia) @ Tensor(ib)
  assert got.dtype == Tensor(ia).dtype
  np.testing.assert_array_equal(got.numpy(), ia @ ib)
  np.testing.assert_allclose(Tensor(ia).dot(Tensor(ib), dtype="float32").numpy(), (ia @ ib).astype(np.float32))
  assert (Tensor(a, requires_grad=True) @ Tensor(b)).requires_grad is True
  assert (Tensor(a) @ Tensor(b)).requires_grad is None
  with pytest.raises(ValueError, match=r"matmul shapes \(4, 4\) and \(3, 4\) do not match"): Tensor(a) @ Tensor(b[:3])
  with pytest.raises(ValueError, match="at least 1 dim"): Tensor(a) @ Tensor(2.0)

def test_matmul_with_symbolic_sizes_skips_the_template(device):
  from tinyplug import UOp
  n = UOp.variable("n", 1, 8).bind(3)
  x = np.arange(24, dtype=np.float32).reshape(8, 3)
  out = Tensor(x)[:n] @ Tensor(np.ones((3, 2), np.float32))
  assert isinstance(out.shape[0], UOp) and out.shape[1] == 2   # the size stays the variable
  np.testing.assert_allclose(out[:3].numpy(), x[:3] @ np.ones((3, 2), np.float32))

@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"axis": [1, -1], "keepdim": True}, {"dtype": "float64"}],
                         ids=["all", "axis0", "axes_keepdim", "dtype"])
def test_sum_template_values_gradients_and_hint(device, kw):
  """Tensor.sum is a graph template: new inputs of one signature reuse it; values and gradients match torch, and a
  sum over a buffer brings its schedule key (the scheduler does not walk it)."""
  for seed in range(3):
    x = np.random.default_rng(seed).standard_normal((3, 4, 5)).astype(np.float32)
    tx = Tensor(x, requires_grad=True).realize()
    out = tx.sum(**kw)
    if seed > 0: assert "sink_structure" in (out.uop._cache or {})   # built by the second call, used from then on
    (out * out).sum().backward()
    px = torch.tensor(x, requires_grad=True)
    tkw = {"dim": kw["axis"], "keepdim": kw.get("keepdim", False)} if "axis" in kw else {}
    ref = px.sum(**tkw, dtype=torch.float64 if "dtype" in kw else None)
    (ref * ref).sum().backward()
    assert out.shape == tuple(ref.shape) and out.dtype == Tensor(ref.detach().numpy()).dtype
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-5, atol=1e-5)

def test_sum_template_keeps_narrow_and_int_rules(device):
  h = np.linspace(-2, 2, 12, dtype=np.float16).reshape(3, 4)
  i8 = np.arange(-6, 6, dtype=np.int8).reshape(3, 4) * 20
  for _ in range(2):
    got = Tensor(h).sum(1)
    assert got.dtype == Tensor(h).dtype
    np.testing.assert_allclose(got.numpy(), h.astype(np.float32).sum(1), rtol=1e-3)
    got = Tensor(i8).sum()
    assert got.dtype.itemsize >= 4
    assert got.item() == int(i8.astype(np.int64).sum())
  assert Tensor(np.zeros((0, 3), np.float32)).sum(0).numpy().tolist() == [0.0, 0.0, 0.0]

@pytest.mark.parametrize("name,kw", [("softmax", {}), ("softmax", {"axis": 0}), ("log_softmax", {}),
                                     ("logsumexp", {"axis": 1}), ("mean", {}), ("mean", {"axis": 0, "keepdim": True}),
                                     ("max", {"axis": 1}), ("min", {})])
def test_reduction_templates_values_and_gradients(device, name, kw):
  """softmax, log_softmax, logsumexp, mean and max are graph templates: repeated calls on new inputs match torch,
  gradients included."""
  tkw = {("dim" if k == "axis" else k): v for k, v in kw.items()}
  for seed in range(3):
    x = np.random.default_rng(seed).standard_normal((4, 6)).astype(np.float32)
    tx = Tensor(x, requires_grad=True).realize()
    out = getattr(tx, name)(**kw)
    (out * out).sum().backward()
    px = torch.tensor(x, requires_grad=True)
    if name in ("softmax", "log_softmax"): ref = getattr(px, name)(tkw.get("dim", -1))
    elif name == "logsumexp": ref = px.logsumexp(**tkw)
    elif name in ("max", "min") and "dim" in tkw: ref = getattr(px, name)(**tkw).values
    else: ref = getattr(px, name)(**tkw)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "leaky_relu", "elu", "gelu", "quick_gelu", "silu",
                                  "softplus", "mish", "relu6", "hardswish"])
def test_activation_templates_values_and_gradients(device, name):
  """Activations are graph templates: repeated calls on new inputs (NaN included) match torch, gradients too."""
  import torch.nn.functional as TF
  refs = {"gelu": lambda t: TF.gelu(t, approximate="tanh"), "quick_gelu": lambda t: t * torch.sigmoid(1.702 * t),
          "silu": TF.silu, "softplus": TF.softplus, "mish": TF.mish, "relu6": TF.relu6, "hardswish": TF.hardswish,
          "elu": TF.elu, "leaky_relu": TF.leaky_relu}
  for seed in range(3):
    x = (np.random.default_rng(seed).standard_normal((3, 7)) * 4).astype(np.float32)
    tx = Tensor(x, requires_grad=True).realize()
    out = getattr(tx, name)()
    out.sum().backward()
    px = torch.tensor(x, requires_grad=True)
    ref = refs[name](px) if name in refs else getattr(torch, name)(px)
    ref.sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-5)
  if name == "relu":
    assert np.isnan(Tensor(np.array([np.nan, -1.0], np.float32)).relu().numpy()[0])

def test_template_key_keeps_float_and_int_arguments_apart(device):
  ints = Tensor(np.array([-3, 4], np.int32))
  as_float = ints.leaky_relu(1.0)   # an int tensor times 1.0 is a float tensor
  as_int = ints.leaky_relu(1)       # ... times 1 stays int: not the template of the call before
  assert as_float.dtype != as_int.dtype and as_int.dtype == ints.dtype
  np.testing.assert_array_equal(as_int.numpy(), [-3, 4])
  x = Tensor(np.array([-2.0, 3.0], np.float32))
  np.testing.assert_array_equal(x.leaky_relu(0.0).numpy(), [0.0, 3.0])
  assert np.signbit(x.leaky_relu(-0.0).numpy()[0]) != np.signbit(x.leaky_relu(0.0).numpy()[0])   # -2 * -0.0 is +0.0

def test_float_minus_scalar_is_exact(device):
  x = np.array([-0.0, 0.0, 1.5, np.inf, np.nan, 1e-38], np.float32)
  for c in (0.0, -0.0, 0.25, 3, np.float32(2.5).item()):
    got = (Tensor(x) - c).numpy()
    np.testing.assert_array_equal(got, x - np.float32(c))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x - np.float32(c)))
  u = Tensor(np.array([1, 5], np.uint8))
  np.testing.assert_array_equal((u - 3).numpy(), np.array([1, 5], np.uint8) - np.uint8(3))   # ints keep their path

def test_linear_and_layernorm_templates(device):
  """linear and layernorm are graph templates: repeated calls on new inputs match torch, gradients included (a bias
  given or not, a 1-D weight scaling elementwise)."""
  import torch.nn.functional as TF
  for seed in range(3):
    rng = np.random.default_rng(seed)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (6, 3), (3,)))
    tx, tw, tb = (Tensor(a, requires_grad=True).realize() for a in (x, w, b))
    px, pw, pb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out, ref = tx.linear(tw, tb).layernorm(), TF.layer_norm(px @ pw + pb, (3,), eps=1e-5)
    (out * out).sum().backward(); (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    for t, p in ((tx, px), (tw, pw), (tb, pb)): np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(tx.linear(tw).numpy(), x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.linear(Tensor(x[0])).numpy(), x * x[0], rtol=1e-6)

@pytest.mark.parametrize("correction", [0, 1])
def test_var_and_batchnorm_templates(device, correction):
  """var and batchnorm are graph templates: repeated steps on new inputs match torch, gradients included; another
  shape, correction or gradient flag gets a graph of its own."""
  import torch.nn.functional as TF
  before = len(template._templates)
  for seed in range(5):   # the templates built on the second call; the gradient's recipe recorded, then replayed
    x = np.random.default_rng(seed).standard_normal((2, 3, 4, 5)).astype(np.float32)
    tx = Tensor(x, requires_grad=True).realize()
    var = tx.var((0, 2, 3), correction=correction)
    out = tx.batchnorm(None, None, tx.mean((0, 2, 3)), var.add(1e-5).rsqrt())
    (out * out).sum().backward()
    px = torch.tensor(x, requires_grad=True)
    pvar = px.var((0, 2, 3), correction=correction)
    ref = (px - px.mean((0, 2, 3)).reshape(1, 3, 1, 1)) * (pvar + 1e-5).rsqrt().reshape(1, 3, 1, 1)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(var.numpy(), pvar.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-4)
  assert len(template._templates) > before
  x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
  for rg in (False, True, True):   # another shape and gradient flag: not the template above
    tx = Tensor(x, requires_grad=rg).realize()
    np.testing.assert_allclose(tx.var(0, correction=correction).numpy(), x.var(0, ddof=correction), rtol=1e-5)
    np.testing.assert_allclose(tx.std(1, keepdim=True).numpy(), x.std(1, ddof=1, keepdims=True), rtol=1e-5)
  tx = Tensor(x, requires_grad=True).realize()
  tx.var(0, correction=correction).sum().backward()
  px = torch.tensor(x, requires_grad=True)
  px.var(0, correction=correction).sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(TF.batch_norm(px, None, None, training=True).detach().numpy(),
                             tx.batchnorm(None, None, tx.mean(0), tx.var(0, correction=0).add(1e-5).rsqrt()).numpy(),
                             rtol=1e-4, atol=1e-5)

def test_a_tensor_argument_and_none_are_apart_in_the_key(device):
  """batchnorm(w, None, ...) and batchnorm(None, w, ...) are different graphs (a weight or a bias) over inputs of the
  same shapes: each call, repeated past the template's build, gives its own values."""
  rng = np.random.default_rng(0)
  x, m, s, w = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3, 4), (3,), (3,), (3,)))
  tx, tm, ts, tw = (Tensor(a).realize() for a in (x, m, s, w))
  c = lambda a: a.reshape(1, 3, 1)
  for _ in range(3):
    np.testing.assert_allclose(tx.batchnorm(tw, None, tm, ts).numpy(), (x - c(m)) * c(w) * c(s), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tx.batchnorm(None, tw, tm, ts).numpy(), (x - c(m)) * c(s) + c(w), rtol=1e-5, atol=1e-6)

def test_gradient_key_tells_inputs_sharing_a_buffer_apart(device):
  """batchnorm over its own input's statistics (x's buffer under x, the mean and the variance) and over another
  tensor's (the same shapes and flags: the inputs' structure keys are equal, only which buffers repeat differs): the
  gradient walk's keys differ (equal keys would replay one's gradient recipe over the other's nodes), and in turns
  each step's gradients match torch."""
  from tinyplug import gradient_template
  rng = np.random.default_rng(0)
  keys = {}
  for step in range(8):
    x, y = (rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(2))
    tx, ty = (Tensor(a, requires_grad=True).realize() for a in (x, y))
    px, py = (torch.tensor(a, requires_grad=True) for a in (x, y))
    ts, ps = (tx, px) if step % 2 else (ty, py)   # whose statistics
    out = tx.batchnorm(None, None, ts.mean((0, 2, 3)), ts.var((0, 2, 3), correction=0).add(1e-5).rsqrt())
    ref = (px - ps.mean((0, 2, 3)).reshape(1, 3, 1, 1)) * \
      (ps.var((0, 2, 3), correction=0) + 1e-5).rsqrt().reshape(1, 3, 1, 1)
    key, nodes, _ = gradient_template._walk(out.uop)
    if key is not None: keys.setdefault(step % 2, set()).add((key, len(nodes)))
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-4)
    if ts is ty: np.testing.assert_allclose(ty.grad.numpy(), py.grad.numpy(), rtol=1e-3, atol=1e-4)
  assert keys[0] and keys[1] and not {k for k, _ in keys[0]} & {k for k, _ in keys[1]}

def test_no_template_is_built_while_tinyjit_captures(device):
  """A jitted function's graphs are built twice (the plain run, the capture) and then replayed: a template built in
  the capture would never be used. Values stay right through the replays."""
  from tinyplug import TinyJit
  @TinyJit
  def f(x): return (x.softmax(-1) * 2).realize()
  before = len(template._templates)
  for i in range(4):
    xn = np.random.default_rng(i).standard_normal((3, 11)).astype(np.float32)
    got = f(Tensor(xn).realize()).numpy()
    e = np.exp(xn - xn.max(-1, keepdims=True))
    np.testing.assert_allclose(got, 2 * e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
  assert len(template._templates) == before
