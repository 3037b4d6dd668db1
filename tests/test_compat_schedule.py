"""Tensor.schedule()/schedule_linear() that are not run (or run late) never change the values tensors hold."""
from __future__ import annotations
import numpy as np
from tinyplug import Tensor
from tinyplug.engine.realize import run_schedule
from tinyplug.uop.ops import Ops

def test_random_tensor_keeps_its_values_after_a_dependent_schedule():
  # the bug: r pointed at a scheduled (never run) buffer while x was drawn afresh when read
  Tensor.manual_seed(3)
  x = Tensor.randn(40, 40)
  r = (x + 1) * 2
  r.schedule()
  xn, rn = x.numpy(), r.numpy()
  np.testing.assert_allclose(rn, (xn + 1) * 2, atol=1e-5)
  np.testing.assert_equal(x.numpy(), xn)

def test_unrun_schedule_runs_before_other_work_and_not_twice():
  a = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  a += 10
  items = a.schedule()
  b = Tensor([5.0, 5.0, 5.0]) + 1
  assert b.tolist() == [6.0, 6.0, 6.0]          # realizing something else first runs the pending schedule
  assert a.tolist() == [11.0, 12.0, 13.0]
  run_schedule(items)                              # already ran: not applied a second time
  assert a.tolist() == [11.0, 12.0, 13.0]

def test_schedule_run_explicitly_gives_the_values():
  x = Tensor.rand(8)
  y = x * 3
  run_schedule(y.schedule())
  np.testing.assert_allclose(y.numpy(), x.numpy() * 3, rtol=1e-6)

def test_schedule_linear_form():
  lin = (Tensor([1.0, 2.0]) + Tensor([3.0, 4.0])).contiguous().schedule_linear()
  assert lin.op is Ops.LINEAR and all(c.op is Ops.CALL for c in lin.src)
  assert any(c.src[0].op is Ops.SINK for c in lin.src)
