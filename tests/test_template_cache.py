"""Schedule templates on disk (schedule/template_cache.py): a warm start reads a graph's schedule back instead of
scheduling it again (most of a transformer's warm first step). What comes back is the very template the scheduler
made; anything the schedule depends on changes the key; an unusable entry is dropped and the graph scheduled."""
import numpy as np
import pytest
import tinyplug.schedule as sched
from tinyplug import Tensor
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import template_cache
from tinyplug.schedule.cache import structure
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

@pytest.fixture
def cache_home(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  sched._templates.clear()
  yield tmp_path
  sched._templates.clear()

def _graphs() -> list:
  a = Tensor(np.arange(48, dtype=np.float32).reshape(6, 8)).realize()
  w = Tensor(np.ones((8, 5), np.float32)).realize()
  return [[(a @ w).relu().sum(1).uop], [a.softmax(-1).uop, (a * 2.5).max(0).uop], [a[2:5].flip(0).contiguous().uop],
          [a.pad(((1, 2), (0, 3))).cumsum(1).uop]]

def _found(targets: list) -> tuple:
  return structure(UOp(Ops.SINK, dtypes.void, tuple(targets)))

def test_a_schedule_read_back_is_the_schedulers(cache_home):
  for targets in _graphs():
    items, becomes = sched.create_schedule(targets)   # stores its template
    found = _found(targets)
    made = sched._templates.get((found[0], sched.schedule_key()))
    back = template_cache.load(template_cache.template_key(found))
    assert made is not None and back is not None and template_cache._same(back, made)
    assert all(a[0] is b[0] for a, b in zip(back.items, made.items))   # the very same kernel ASTs
    got, got_becomes = back.instantiate(found[1])
    assert [it.ast for it in got] == [it.ast for it in items] and got_becomes.keys() == becomes.keys()

def test_a_new_process_gets_the_same_schedule_without_scheduling(cache_home, monkeypatch):
  a = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
  want = Tensor(a).softmax(-1).sum(0).numpy()
  sched._templates.clear()   # as a new process: only the disk knows the graph
  monkeypatch.setattr(sched, "_schedule_breaking_cycles", lambda targets: pytest.fail("scheduled again"))
  np.testing.assert_array_equal(Tensor(a).softmax(-1).sum(0).numpy(), want)

def test_the_key_follows_what_the_schedule_depends_on(cache_home, monkeypatch):
  targets = _graphs()[0]
  key = template_cache.template_key(_found(targets))
  assert key is not None and key == template_cache.template_key(_found(targets))
  with Context(SCALAR_ARGS=0): assert template_cache.template_key(_found(targets)) != key   # a setting
  with Context(CACHELEVEL=0): assert template_cache.template_key(_found(targets)) is None
  r = Device["CPU"].renderer
  caches = r.cache_bytes
  monkeypatch.setattr(r, "cache_bytes", tuple(2 * c for c in caches))   # another machine (the pack pass)
  assert template_cache.template_key(_found(targets)) != key
  monkeypatch.setattr(r, "cache_bytes", caches)
  assert template_cache.template_key(_found(targets)) == key
  from tinyplug import diskcache
  monkeypatch.setitem(diskcache._source_digests, "tinyplug", "edited")   # tinyplug's source changed
  assert template_cache.template_key(_found(targets)) != key

def test_other_constants_and_buffers_are_other_keys(cache_home):
  x = Tensor(np.ones(4, np.float32)).realize()
  y = Tensor(np.ones(4, np.float32)).realize()
  keys = [template_cache.template_key(_found([u])) for u in ((x * 0.0).uop, (x * -0.0).uop, (x * 2).uop, (x + y).uop,
                                                              (x + x).uop, (x.cast("int32") * 2).uop)]
  assert None not in keys and len(set(keys)) == len(keys)
  z = Tensor(np.zeros(4, np.float32)).realize()
  assert template_cache.template_key(_found([(z * 0.0).uop])) == keys[0]   # other buffers, the same structure

def test_a_custom_gradients_rule_is_left_out_of_the_key(cache_home):
  """The scheduler drops a custom gradient's marker first: the graph of a model using one (gelu's, attention's) is
  stored like any other."""
  x = Tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
  (x.gelu() * x).sum().backward()
  found = _found([x.grad.uop])
  assert found is not None and template_cache.template_key(found) is not None

def test_an_unusable_entry_is_dropped_and_the_graph_scheduled(cache_home, monkeypatch, capfd):
  targets = _graphs()[1]
  key = template_cache.template_key(_found(targets))
  template_cache.TEMPLATES.put(key, b'{"outs": [["CPU", 4, ["NOT_A_DTYPE", 1]]], "asts": [], "items": [], "becomes": []}')
  assert template_cache.load(key) is None   # its digest matches: intact but unusable
  assert "unreadable template" in capfd.readouterr().err and template_cache.TEMPLATES.get(key) is None
  runs = []
  real = sched._schedule_breaking_cycles
  monkeypatch.setattr(sched, "_schedule_breaking_cycles", lambda t: (runs.append(t), real(t))[1])
  sched.create_schedule(targets)
  assert len(runs) == 1 and template_cache.load(key) is not None   # scheduled, and stored again

def test_off_while_the_visualizer_records(cache_home):
  from tinyplug import events
  targets = _graphs()[0]
  listener = lambda e: None
  events.subscribe("schedule", listener)
  try: assert template_cache.template_key(_found(targets)) is None
  finally: events.unsubscribe("schedule", listener)
  assert template_cache.template_key(_found(targets)) is not None

def test_a_schedule_from_disk_counts_as_seen_for_scalar_arguments(cache_home, monkeypatch):
  """A graph whose schedule came from disk notes its constants as the first ones, as scheduling it would: the same
  graph with another constant then gets a parameter (one kernel for every value), as in the process that stored it."""
  from tinyplug.caches import BoundedCache
  from tinyplug.schedule import scalars
  monkeypatch.setattr(scalars, "_seen", BoundedCache("test.scalar_args", 64))   # (other tests' graphs keep theirs)
  x = Tensor(np.arange(5, dtype=np.float32)).realize()
  sched.create_schedule([(x * 2.5).uop])
  sched._templates.clear(); scalars._seen.clear()   # as a new process
  sched.create_schedule([(x * 2.5).uop])   # from disk
  items, _ = sched.create_schedule([(x * 3.5).uop])
  assert any(it.var_vals for it in items)   # 3.5 is a kernel argument
  np.testing.assert_array_equal((x * 4.5).numpy(), np.arange(5, dtype=np.float32) * np.float32(4.5))

def test_graphs_over_a_file_are_keyed_and_run(cache_home, tmp_path):
  # a DISK device runs no kernels and has no renderer: its part of the key says so (asking it for one raised, so a
  # write to a file and a slice read back failed whenever the disk cache was on)
  a = np.arange(30, dtype=np.float32)
  t = Tensor(a).to(f"disk:{tmp_path / 'data.bin'}")
  part = t[10:20]
  np.testing.assert_array_equal(part.to(Device.DEFAULT).numpy(), a[10:20])
  np.testing.assert_array_equal(part.numpy(), a[10:20])
  sched._templates.clear()
  np.testing.assert_array_equal(t[5:8].to(Device.DEFAULT).numpy(), a[5:8])   # again, the schedules from disk
