"""A realized output's UNIQUE and BUFFER nodes interned by the UNIQUE (issue 20, session 20): no ucache entry, key
tuple or callback per output, the Tensor registry as plain weak references, a one-op runner's node taken by
Tensor.realize without a becomes map. Hash-consing holds on every way a node is made; values against numpy; outputs
freed by reference counts alone (the collector off)."""
import gc, pickle, weakref
import numpy as np
from tinyplug.tensor import Tensor, live_tensors
from tinyplug import tensor as tensor_mod
from tinyplug.device import OUTPUT_POOL, buffer_of
from tinyplug.helpers import GlobalCounters
from tinyplug.uop import UOp, dtypes
from tinyplug.uop import ops as uop_ops
from tinyplug.uop.ops import Ops, UOpMeta, uop_finder, uop_maker

def test_a_new_output_adds_no_ucache_entry_and_its_nodes_carry_no_callback():
  t = Tensor(np.zeros(4, np.float32)).realize()
  for _ in range(3): t = (t + 1.0).realize()
  gc.collect()
  before = len(UOpMeta.ucache)
  for _ in range(50): t = (t + 1.0).realize()
  # the ADD nodes came and went; the outputs' BUFFER and UNIQUE nodes never entered ucache
  assert len(UOpMeta.ucache) <= before
  buf, unique = t.uop, t.uop.src[0]
  assert buf.op is Ops.BUFFER and unique.op is Ops.UNIQUE
  for node in (buf, unique):
    assert all(r.__callback__ is None for r in weakref.getweakrefs(node))
  assert all(r.__callback__ is None for r in weakref.getweakrefs(t))
  np.testing.assert_array_equal(t.numpy(), np.full(4, 53.0, np.float32))

def test_the_generic_constructor_finds_the_same_unique_and_buffer():
  b = UOp.new_buffer("CPU", 6, dtypes.float32)
  u, dev = b.src
  assert UOp(Ops.UNIQUE, dtypes.void, arg=u.arg) is u
  assert UOp(Ops.BUFFER, dtypes.float32, (u, dev), 6) is b
  assert b.replace() is b and u.replace() is u
  # other fields over the same UNIQUE are other nodes, each found again while it lives
  b2 = UOp(Ops.BUFFER, dtypes.int32, (u, dev), 6)
  b3 = UOp(Ops.BUFFER, dtypes.float32, (u, dev), 12)
  assert len({id(b), id(b2), id(b3)}) == 3
  assert UOp(Ops.BUFFER, dtypes.int32, (u, dev), 6) is b2 and UOp(Ops.BUFFER, dtypes.float32, (u, dev), 12) is b3
  assert uop_maker(Ops.BUFFER, dtypes.float32, 6)((u, dev)) is b
  assert uop_finder(Ops.BUFFER, dtypes.float32, 6)((u, dev)) is b
  assert uop_finder(Ops.UNIQUE, dtypes.void, u.arg)(()) is u
  assert uop_finder(Ops.BUFFER, dtypes.float32, 7)((u, dev)) is None
  assert b.shape == (6,) and b.device == "CPU" and b3.shape == (12,)

def test_a_unique_and_buffer_die_by_count_and_are_made_anew_after():
  gc.disable()
  try:
    b = UOp.new_buffer("CPU", 5, dtypes.float32)
    n, dev = b.src[0].arg, b.src[1]
    gone_b, gone_u = weakref.ref(b), weakref.ref(b.src[0])
    del b
    assert gone_b() is None and gone_u() is None
    again = UOp(Ops.UNIQUE, dtypes.void, arg=n)
    assert again.op is Ops.UNIQUE and again.arg == n and again is UOp(Ops.UNIQUE, dtypes.void, arg=n)
    assert UOp(Ops.BUFFER, dtypes.float32, (again, dev), 5) is UOp(Ops.BUFFER, dtypes.float32, (again, dev), 5)
  finally: gc.enable()

def test_a_new_unique_skips_a_number_a_live_node_holds():
  nxt = next(uop_ops._unique_ids)
  taken = [UOp(Ops.UNIQUE, dtypes.void, arg=nxt + k) for k in range(1, 4)]   # as if rebuilt from another process
  fresh = [UOp.unique() for _ in range(4)]
  assert all(f is not t for f in fresh for t in taken)
  assert len({f.arg for f in fresh} | {t.arg for t in taken}) == 7
  b = UOp.new_buffer("CPU", 2, dtypes.float32)
  assert b.src[0].arg not in {t.arg for t in taken}

def test_the_unique_table_is_swept_and_keeps_the_live_ones():
  before = len(uop_ops._unique_nodes)   # (earlier tests' nodes: in a suite worker, hundreds may still live)
  keep = [UOp.unique() for _ in range(10)]
  held = [UOp.new_buffer("CPU", 1, dtypes.float32) for _ in range(300)]
  for _ in range(5000): UOp.new_buffer("CPU", 1, dtypes.float32)
  # the dead ones do not wait long (each entry is an object the collector counts)
  assert len(uop_ops._unique_nodes) <= before + len(held) + len(keep) + 2 * uop_ops._YOUNG_UNIQUES + 1024
  assert all(UOp(Ops.UNIQUE, dtypes.void, arg=k.arg) is k for k in keep)
  assert all(UOp(Ops.BUFFER, dtypes.float32, b.src, 1) is b for b in held)

def test_pickled_buffer_and_unique_in_this_process():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  u = x.uop.src[0]
  assert pickle.loads(pickle.dumps(u)) is u   # a bare UNIQUE is found again by its number
  y = pickle.loads(pickle.dumps(x))
  assert y.uop is not x.uop and y.uop.src[0] is not u   # a buffer comes back as a new one, with its values
  np.testing.assert_array_equal(y.numpy(), np.arange(6, dtype=np.float32))

def test_live_tensors_after_many_temporaries_and_their_frees():
  a = Tensor(np.ones(3, np.float32)).realize()
  gc.disable()
  try:
    for _ in range(5000): a + 1.0
    gone = weakref.ref(t := a * 2.0)
    del t
    assert gone() is None   # a temporary goes by its count alone: the registry holds no strong reference
  finally: gc.enable()
  assert len(tensor_mod._live_refs) <= 2 * tensor_mod._YOUNG_TENSORS + tensor_mod._full_sweep_at
  live = live_tensors()
  assert any(t is a for t in live) and len(tensor_mod._live_refs) <= len(live) + 1

def test_tiny_ops_leave_the_collector_nearly_idle():
  # every object a tiny op makes is freed by its count, and the dead references that wait for a sweep are few: the
  # collector's young count seldom reaches its threshold (alone: 3 collections in 30000 ops, main 0; with both
  # registries swept every 4096 entries, 158; in the whole suite's worker, 5 in 5000)
  t = Tensor(np.zeros(1, np.float32)).realize()
  for _ in range(300): t = (t + 1.0).realize()
  gc.collect()
  started = []
  def count(phase, info): started.append(phase == "start")
  gc.callbacks.append(count)
  try:
    for _ in range(20000): t = (t + 1.0).realize()
  finally: gc.callbacks.remove(count)
  assert sum(started) < 40, f"{sum(started)} collections in 20000 tiny ops"
  np.testing.assert_array_equal(t.numpy(), np.array([20300.0], np.float32))

def test_backward_finds_its_targets_among_many_dead_tensors():
  rng = np.random.default_rng(1)
  w_np = rng.standard_normal((4, 3)).astype(np.float32)
  w = Tensor(w_np, requires_grad=True).realize()
  for _ in range(5000): w + 1.0
  x = rng.standard_normal((2, 4)).astype(np.float32)
  (Tensor(x) @ w).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), np.repeat(x.sum(0)[:, None], 3, 1), rtol=1e-6)

def test_realize_keeps_other_holders_of_the_op_right():
  t = Tensor(np.zeros(3, np.float32)).realize()
  y = t + 1.0
  z = y * 2.0            # a graph over y's node: y's realize must point z's graph at the buffer too
  y.realize()
  assert y.uop.op is Ops.BUFFER
  np.testing.assert_array_equal(z.numpy(), np.full(3, 2.0, np.float32))
  a = t + 3.0
  b = Tensor(a.uop)      # a second tensor holding the same node, made after it
  a.realize()
  assert b.uop is a.uop and b.uop.op is Ops.BUFFER
  np.testing.assert_array_equal(b.numpy(), np.full(3, 3.0, np.float32))

def test_tiny_ops_free_outputs_and_memory_by_count():
  t = Tensor(np.zeros(2, np.float32)).realize()
  for _ in range(5): t = (t + 1.0).realize()
  gc.collect()   # (earlier tests' cyclic garbage freed now, not by a collection after mem_used is read)
  gc.disable()
  try:
    mem = GlobalCounters.mem_used
    refs = []
    for _ in range(300):
      prev = t
      t = (t + 1.0).realize()
      refs.append((weakref.ref(prev.uop), weakref.ref(buffer_of(prev.uop)), weakref.ref(prev.uop.src[0])))
      del prev
      # the plan keeps its last OUTPUT_POOL outputs for the next calls, but never one a weak reference points at: an
      # output older than that went by its count alone, its node, UNIQUE and Buffer
      if len(refs) > OUTPUT_POOL: assert all(r() is None for r in refs[-OUTPUT_POOL - 1])
    assert GlobalCounters.mem_used == mem
  finally: gc.enable()
  np.testing.assert_array_equal(t.numpy(), np.full(2, 305.0, np.float32))

def test_a_tensor_pickled_with_its_old_number_loads():
  x = Tensor(np.arange(4, dtype=np.float32), requires_grad=True).realize()
  state = x.__getstate__()
  slots = dict(state[1] if type(state) is tuple else state)
  slots["_tid"] = 12345   # (what a pickle made before session 20 holds)
  y = Tensor.__new__(Tensor)
  y.__setstate__((None, slots))
  assert y.requires_grad is True and not hasattr(y, "_tid")
  np.testing.assert_array_equal(y.numpy(), np.arange(4, dtype=np.float32))
  z = pickle.loads(pickle.dumps(x))
  np.testing.assert_array_equal(z.numpy(), np.arange(4, dtype=np.float32))
