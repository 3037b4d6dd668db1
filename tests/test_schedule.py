"""Kernel boundaries: what fuses into one kernel, what becomes its own, and what the schedule items look like."""
import re
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.uop import Ops
from tinyplug.codegen.naming import kernel_name
from tinyplug.engine.realize import run_schedule

def kernels(*ts: Tensor) -> list:
  """The compute kernels of the tensors' schedule; the schedule is run, so the tensors hold their values after."""
  items = ts[0].schedule(*ts[1:])
  run_schedule(items)
  return [si for si in items if si.ast.op is Ops.SINK]

def fresh(*shape: int) -> Tensor:
  return Tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1).realize()

def test_elementwise_chain_is_one_kernel(device):
  x = fresh(10, 10)
  out = ((x + 1) * 2 - 1) / 2
  assert len(kernels(out)) == 1
  np.testing.assert_allclose(out.numpy(), ((x.numpy() + 1) * 2 - 1) / 2)

def test_reduce_of_elementwise_is_one_kernel(device):
  a = fresh(8, 5)
  out = (a * 2 + 1).sum(0)
  ks = kernels(out)
  assert len(ks) == 1 and kernel_name(ks[0].ast).startswith("r_")
  np.testing.assert_allclose(out.numpy(), (a.numpy() * 2 + 1).sum(0))

def test_elementwise_after_reduce_fuses(device):
  a = fresh(4, 6)
  out = a.sum(1).sqrt() + 1
  assert len(kernels(out)) == 1
  np.testing.assert_allclose(out.numpy(), np.sqrt(a.numpy().sum(1)) + 1, rtol=1e-6)

def test_expanded_reduce_is_its_own_kernel(device):
  from tinyplug.schedule.fusion import runs_loops
  a = fresh(4, 6)
  out = a - a.max(1, keepdim=True)   # the max is needed by every element of its row
  # loop-running devices compute it inside the row's kernel, once per row (test_schedule_rows.py)
  assert len(kernels(out)) == (1 if runs_loops(device) else 2)
  np.testing.assert_allclose(out.numpy(), a.numpy() - a.numpy().max(1, keepdims=True))

def test_movement_ops_fuse(device):
  a = fresh(3, 4, 5)
  out = (a.permute(2, 0, 1).flip(0).pad(((1, 1), (0, 0), (0, 2))) * 3)[1:5, :, 1:4].reshape(4, 9)
  assert len(kernels(out)) == 1
  ref = (np.pad(a.numpy().transpose(2, 0, 1)[::-1], ((1, 1), (0, 0), (0, 2))) * 3)[1:5, :, 1:4].reshape(4, 9)
  np.testing.assert_allclose(out.numpy(), ref)

def test_contiguous_is_a_boundary(device):
  a = fresh(5, 5)
  mid = (a + 1).contiguous()
  out = mid * 2
  assert len(kernels(out)) == 2

def test_two_outputs_share_one_schedule(device):
  a = fresh(6)
  b, c = a + 1, a * 2
  ks = kernels(b, c)
  assert len(ks) == 2
  assert b.tolist() == (a.numpy() + 1).tolist() and c.tolist() == (a.numpy() * 2).tolist()

def test_kernel_names(device):
  a = fresh(4, 4)
  # the same loop sizes in a different kernel get n1, n2, ... appended
  assert re.fullmatch(r"E_4_4(n\d+)?", kernel_name(kernels(a + 1)[0].ast))
  assert re.fullmatch(r"r_4_4(n\d+)?", kernel_name(kernels(a.sum(1))[0].ast))

def test_schedule_items_name_their_buffers(device):
  x, y = Tensor([1, 2, 3, 4]).realize(), Tensor([5, 6, 7, 8]).realize()
  items = ((x + y) * 2).schedule()
  run_schedule(items)
  assert len(items) == 1
  assert items[0].ast.op is Ops.SINK and len(items[0].bufs) == 3
  assert all(b.size == 4 for b in items[0].bufs)

def test_kernelize_then_realize(device):
  t = Tensor([1, 2, 3, 4])
  r = t + 3 + 4
  r.kernelize()
  assert r.uop.op is Ops.AFTER and r.uop.src[1].op is Ops.KERNEL
  ast = r.uop.src[1].arg.ast
  assert ast.op is Ops.SINK
  # constant folding happened before codegen: one ADD of 7 per element
  consts = {u.arg for u in ast.toposort() if u.op is Ops.CONST and u.dtype.name == "int"}
  assert 3 not in consts or 7 in consts
  assert r.tolist() == [8, 9, 10, 11]

def test_kernelize_a_view_of_its_buffer(device):
  """A 2-D result is a reshape of its buffer: kernelize puts that view over the kernel's AFTER."""
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  r = Tensor(a) * 2
  r.kernelize()
  assert r.uop.op is Ops.RESHAPE and r.uop.src[0].op is Ops.AFTER and r.uop.src[0].src[1].op is Ops.KERNEL
  np.testing.assert_equal(r.numpy(), a * 2)
  s = Tensor(a)[:, 1:3].contiguous() + 1
  s.kernelize()
  np.testing.assert_equal(s.numpy(), a[:, 1:3] + 1)

def test_shared_work_is_realized_once(device):
  t = Tensor([1, 2, 3, 4])
  A, B = t * 4, t * 4
  assert A is not B and A.uop is B.uop
  A.realize()
  assert A.uop is B.uop and B.uop.op in (Ops.BUFFER, Ops.RESHAPE)
  assert B.tolist() == [4, 8, 12, 16]

def test_assign_writes_in_place(device):
  a = Tensor.zeros(4).contiguous().realize()
  buf = a.uop
  a.assign(a + 1).realize()
  a.assign(a * 3).realize()
  assert a.uop is buf and a.tolist() == [3.0] * 4

@pytest.mark.parametrize("n", [1, 7, 64])
def test_full_reduction(device, n):
  a = fresh(n)
  assert a.sum().item() == pytest.approx(float(n * (n + 1) / 2))
  assert a.max().item() == float(n)

@pytest.mark.parametrize("assign_first", [True, False])
def test_read_before_assign_sees_the_old_value(device, assign_first):
  w = Tensor([1.0, 2.0, 3.0]).realize()
  old_sum = (w * 1).sum()        # reads w before the update below
  w.assign(w * 10)
  Tensor.realize(*((w, old_sum) if assign_first else (old_sum, w)))
  assert old_sum.item() == 6.0 and w.tolist() == [10.0, 20.0, 30.0]

def test_assigns_that_read_each_others_old_values(device):
  # what an optimizer step does: every new value is computed from the old values of all parameters
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  a_old, b_old = Tensor.from_uop(a.uop), Tensor.from_uop(b.uop)
  a.assign(a_old - b_old * 2)
  b.assign(b_old - a_old * 3)
  Tensor.realize(a, b)
  assert a.tolist() == [-5.0, -6.0] and b.tolist() == [0.0, -2.0]

def test_assign_onto_a_pending_assign(device):
  a = Tensor.zeros(3)
  a.assign(a + 1).realize()
  assert a.tolist() == [1.0, 1.0, 1.0] and a.uop.op is Ops.BUFFER

def test_reading_a_pending_assign_runs_it_once(device):
  a = Tensor.zeros(2).realize()
  a.assign(a + 1)
  assert a.numpy().tolist() == [1.0, 1.0]
  assert (a * 1).numpy().tolist() == [1.0, 1.0]

def test_huge_reduction_is_split_in_two(device):
  n = 1 << 17
  a = Tensor(np.arange(n, dtype=np.float32) % 7).realize()
  ks = kernels(s := a.sum())
  assert len(ks) == 2          # partial sums over a loop that threads or work-groups can share, then their sum
  assert s.item() == float((np.arange(n) % 7).sum())
  b = Tensor(np.arange(2 * n, dtype=np.float32).reshape(2, n)).realize()
  np.testing.assert_array_equal(b.max(1).numpy(), b.numpy().max(1))
