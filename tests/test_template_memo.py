"""A graph template's wrapper remembers its last deferred call (issue 20, session 29; tensor_ops/template.py): the same
method with the same arguments over the same buffer view again (a loop's `x.sum(1)`) takes the template without
building and hashing its key. Every part of the key is still compared per call: the view, the arguments (by identity,
immutable ones only), the tensor's gradient flag, no_grad, TRAINING; an evicted template is never used. Values against
numpy on every call."""
import numpy as np
from tinyplug import Context, Tensor
from tinyplug.tensor_ops import template
from tinyplug.helpers import TRAINING

RNG = np.random.default_rng(29)

def _key_builds(monkeypatch) -> list:
  """A list that grows by one each time a wrapper builds a template key (its arguments' key part)."""
  calls: list = []
  real = template._args_key
  def counted(args, tt):
    calls.append(args)
    return real(args, tt)
  monkeypatch.setattr(template, "_args_key", counted)
  return calls

def test_a_repeated_call_builds_no_key_and_is_right_every_call(monkeypatch):
  a = RNG.standard_normal((128, 10)).astype(np.float32)
  x = Tensor(a).realize()
  for _ in range(3): x.sum(1).realize()   # (the template is built on the second call)
  calls = _key_builds(monkeypatch)
  for _ in range(20): np.testing.assert_allclose(x.sum(1).realize().numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
  assert calls == []

def test_every_part_of_the_key_is_still_compared(monkeypatch):
  a, b = RNG.standard_normal((2, 64, 40)).astype(np.float32)
  x, y = Tensor(a).realize(), Tensor(b).realize()
  for _ in range(3): x.max(1).realize()
  calls = _key_builds(monkeypatch)
  np.testing.assert_array_equal(x.max(0).realize().numpy(), a.max(0))       # another axis
  np.testing.assert_array_equal(y.max(1).realize().numpy(), b.max(1))       # another buffer
  np.testing.assert_array_equal(x.max(True).numpy(), a.max(1))              # True is not 1 (an int): keyed again
  x.requires_grad = True
  assert x.max(1).requires_grad is True                                    # the gradient flag
  x.requires_grad = None
  with Context(TRAINING=1): np.testing.assert_array_equal(x.max(1).numpy(), a.max(1))
  Tensor.no_grad = True
  try: assert x.max(1).requires_grad is not True
  finally: Tensor.no_grad = False
  assert len(calls) == 6
  np.testing.assert_array_equal(x.max(1).numpy(), a.max(1))

def test_an_evicted_template_is_not_used():
  a = RNG.standard_normal((16, 12)).astype(np.float32)
  x = Tensor(a).realize()
  for _ in range(3): x.sum(0).realize()
  before = x.sum(0)._defer[0]
  template._templates.clear()
  assert before.evicted
  for _ in range(3):   # (the first call after the reset only marks the key seen; the second builds it again)
    out = x.sum(0)
    assert out._defer is None or out._defer[0] is not before
    np.testing.assert_allclose(out.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)

def test_templates_over_pooled_outputs_stay_right():
  """A loop of `x.sum(1).realize().max(0)`: the max's memo remembers a pooled output of the sum's plan (weakly: a
  holder to the pool while it lives); values right every call, and a held output keeps its values."""
  a = RNG.standard_normal((128, 10)).astype(np.float32)
  x = Tensor(a).realize()
  for _ in range(6):
    y = x.sum(1).realize()
    np.testing.assert_allclose(y.max(0).realize().numpy(), a.sum(1).max(0), rtol=1e-5, atol=1e-5)
  kept = x.sum(1).realize()
  want = kept.numpy().copy()
  kept.max(0)   # remembered over kept's node
  for _ in range(6): x.sum(1).realize()
  np.testing.assert_array_equal(kept.numpy(), want)
