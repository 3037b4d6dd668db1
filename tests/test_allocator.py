"""The allocator keeps big freed blocks for reuse (LRU): the same memory comes back for the same size."""
import os
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.device import HostAllocator, ReuseAllocator
from tinyplug.helpers import Context

class CountingRaw(HostAllocator):
  fail = False
  def __init__(self): self.allocs, self.frees = 0, 0
  def alloc(self, nbytes):
    if self.fail and self.frees == 0: raise MemoryError("device full")
    self.allocs += 1
    return super().alloc(nbytes)
  def free(self, handle, nbytes): self.frees += 1

class Counting(ReuseAllocator):
  """The core's reuse cache around a plugin's raw allocator, as every device gets it."""
  def __init__(self): super().__init__(CountingRaw())
  allocs = property(lambda self: self.raw.allocs)
  frees = property(lambda self: self.raw.frees)

def test_big_block_is_reused_for_the_same_size():
  a = Counting()
  h = a.alloc(1 << 20)
  a.free(h, 1 << 20)
  assert a.frees == 0 and a.alloc(1 << 20) is h and a.allocs == 1
  assert a.alloc(1 << 20) is not h and a.allocs == 2   # the kept block was handed out already

def test_small_blocks_and_other_sizes_are_fresh():
  a = Counting()
  h = a.alloc(64)
  a.free(h, 64)
  assert a.frees == 1 and a.alloc(64) is not h
  big = a.alloc(1 << 20)
  a.free(big, 1 << 20)
  assert a.alloc((1 << 20) + 4) is not big

def test_lru_off_and_cap_free_at_once():
  a = Counting()
  with Context(LRU=0):
    a.free(a.alloc(1 << 20), 1 << 20)
  assert a.frees == 1
  with Context(LRU_MAX=1 << 20):
    x, y = a.alloc(1 << 20), a.alloc(1 << 20)
    a.free(x, 1 << 20); a.free(y, 1 << 20)
  assert a.frees == 2   # only one block fits under the cap

class GPULikeRaw(CountingRaw):
  reuse_min, reuse_max = 0, 3 << 20   # a driver whose alloc/free are slow: keep every size, more of them

def test_the_device_chooses_what_is_kept_unless_the_user_does():
  a = ReuseAllocator(GPULikeRaw())
  small = a.alloc(64)
  a.free(small, 64)
  assert a.raw.frees == 0 and a.alloc(64) is small   # small blocks are kept on such a device
  blocks = [a.alloc(1 << 20) for _ in range(4)]
  for h in blocks: a.free(h, 1 << 20)
  assert a.raw.frees == 1   # its own cap: three of the four fit
  with Context(LRU_MIN=1 << 16):
    tiny = a.alloc(32)
    a.free(tiny, 32)
  assert a.raw.frees == 2   # the user's LRU_MIN wins over the device's
  with Context(LRU_MAX=0):
    h = a.alloc(5 << 20)
    a.free(h, 5 << 20)
  assert a.raw.frees == 3

class HostLikeRaw(CountingRaw):
  reuse_small = 2   # a host device: a few small blocks of each size kept

def test_a_few_small_blocks_are_kept_per_size_unless_lru_min_is_set():
  a = ReuseAllocator(HostLikeRaw())
  hs = [a.alloc(64) for _ in range(3)]
  for h in hs: a.free(h, 64)
  assert a.raw.frees == 1   # two kept, the third freed
  got = {id(a.alloc(64)), id(a.alloc(64))}
  assert got == {id(hs[0]), id(hs[1])} and a.raw.allocs == 3
  with Context(LRU_MIN=1 << 16):
    a.free(a.alloc(64), 64)
  assert a.raw.frees == 2   # the user's LRU_MIN: small blocks freed at once
  with Context(LRU=0):
    a.free(a.alloc(32), 32)
  assert a.raw.frees == 3

def test_a_kept_small_block_comes_zeroed_unless_a_kernel_writes_all_of_it():
  a = ReuseAllocator(HostLikeRaw())
  h = a.alloc(64)
  h[:] = 7
  a.free(h, 64)
  assert a.alloc(64) is h and not h.any()   # Tensor.empty of a tiny tensor reads zeros
  h[:] = 7
  a.free(h, 64)
  assert a.alloc(64, written=True) is h and (h == 7).all()   # a plan's output: not cleared for nothing
  big = a.alloc(1 << 20)
  big[:8] = 3
  a.free(big, 1 << 20)
  assert a.alloc(1 << 20) is big and (big[:8] == 3).all()   # big blocks come back as they are either way

def test_a_tiny_plan_output_over_a_dirty_block_holds_the_kernels_values():
  # a plan's outputs reuse kept blocks without zeroing: the kernel's values are all that is read
  x = Tensor(np.arange(13, dtype=np.float32)).realize()
  for _ in range(3): dirty = [(x * 3.0 - 1.0).realize() for _ in range(4)]
  del dirty
  for k in range(5):
    y = (x.max() + float(k)).realize()
    np.testing.assert_array_equal(y.numpy(), np.float32(12 + k))
    s = x.sum().realize()
    assert s.numpy() == np.arange(13, dtype=np.float32).sum()

def test_reused_small_outputs_hold_the_right_values():
  # (a shape of its own: other tests' schedules of these graphs stay as they are)
  t = Tensor(np.zeros(11, np.float32)).realize()
  kept = [(t + float(i)).realize() for i in range(8)]   # their blocks are freed below and handed out again
  del kept
  for i in range(20): t = (t * 2.0 + 1.0).realize()
  want = np.zeros(11, np.float32)
  for _ in range(20): want = want * 2 + 1
  np.testing.assert_array_equal(t.numpy(), want)
  e = Tensor.empty(11).realize()   # memory from Tensor.empty holds whatever was there; a kernel writes all of it
  np.testing.assert_array_equal((e * 0.0 + 5.0).numpy(), np.full(11, 5.0, np.float32))

def test_release_kept_and_retry_after_a_failed_alloc():
  a = Counting()
  a.free(a.alloc(1 << 20), 1 << 20)
  a.raw.fail = True
  a.alloc(2 << 20)   # fails once, gives the kept block back, succeeds
  assert a.frees == 1
  b = Counting()
  b.raw.fail = True
  with pytest.raises(MemoryError, match="device full"): b.alloc(1 << 20)   # nothing kept: the error is the device's

def test_reused_memory_gives_correct_results(device):
  # the same big output size again and again: values stay right though the memory is recycled
  n = 1 << 19
  x = np.random.default_rng(0).random(n, dtype=np.float32)
  t = Tensor(x)
  for k in range(3):
    np.testing.assert_allclose(((t * (k + 1)) + 1).numpy(), x * (k + 1) + 1, rtol=1e-6)

def test_host_blocks_are_zeroed_writable_and_big_ones_come_from_the_os():
  import tracemalloc
  from tinyplug.backend import HOST_MMAP_MIN, host_block
  small = host_block(100)
  tracemalloc.start()
  try:
    big = host_block(HOST_MMAP_MIN * 4)
    traced = tracemalloc.get_traced_memory()[1]
  finally: tracemalloc.stop()
  assert traced < HOST_MMAP_MIN   # an OS mapping, not Python heap
  for b in (small, big):
    assert b.dtype == np.uint8 and b.flags.writeable and not b.any()
    b[:] = 3
    assert int(b.sum()) == 3 * b.size
  assert big.ctypes.data % 4096 == 0

def _mapping_of(address: int) -> dict[str, str]:
  """The /proc/self/smaps entry of the mapping holding `address`: its header's permissions and its fields."""
  entry: dict[str, str] | None = None
  with open("/proc/self/smaps") as f:
    for line in f:
      head = line.split()
      if "-" in head[0] and not head[0].endswith(":"):
        if entry is not None: return entry
        lo, hi = (int(x, 16) for x in head[0].split("-"))
        if lo <= address < hi: entry = {"perms": head[1]}
      elif entry is not None: entry[head[0].rstrip(":")] = " ".join(head[1:])
  assert entry is not None, f"no mapping holds {address:#x}"
  return entry

@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mapping's flags from /proc/self/smaps")
def test_host_blocks_are_private_and_ask_for_huge_pages_even_below_one():
  from tinyplug.backend import HOST_CHUNK, HOST_MMAP_MIN, huge_page_bytes, host_block
  if not huge_page_bytes(): pytest.skip("the OS declares no transparent huge pages")
  # (a block of a chunk's size or more is a mapping of its own; a smaller one is cut from the arena's current chunk,
  # wherever earlier blocks of the process left off)
  big, small = host_block(HOST_CHUNK + 2 * huge_page_bytes()), host_block(HOST_MMAP_MIN)
  big[:] = 5
  assert int(big[::4096].sum()) == 5 * len(big[::4096]) and not small.any()
  for block in (big, small):
    flags = _mapping_of(block.ctypes.data)
    assert flags["perms"][3] == "p"   # private: a shared anonymous mapping is shared memory, which gets no huge pages
    assert "hg" in flags["VmFlags"].split()   # madvise(MADV_HUGEPAGE)
  assert big.ctypes.data % huge_page_bytes() == 0   # a mapping of its own, from a huge page's start

def _arena_blocks(sizes):
  from tinyplug.backend import host_block
  return [host_block(n) for n in sizes]

def test_arena_blocks_never_overlap_a_live_block_and_come_zeroed():
  from tinyplug.backend import HOST_MMAP_MIN, host_arena
  if host_arena() is None: pytest.skip("no transparent huge pages: one mapping per block")
  rng = np.random.default_rng(0)
  live = []
  for k in range(60):
    (block,) = _arena_blocks([int(rng.integers(HOST_MMAP_MIN, 3 << 20))])
    assert not block.any()   # fresh memory, though freed blocks were written before
    block[:] = 7
    live.append(block)
    if k % 3 == 2: del live[int(rng.integers(len(live)))]
    spans = sorted((b.ctypes.data, b.ctypes.data + len(b)) for b in live)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert all(b.ctypes.data % 4096 == 0 and int(b[::4096].sum()) == 7 * len(b[::4096]) for b in live)

def test_arena_gives_a_chunk_back_once_its_blocks_are_gone():
  import gc, weakref
  from tinyplug.backend import HOST_CHUNK, host_arena
  if host_arena() is None: pytest.skip("no transparent huge pages: one mapping per block")
  first = _arena_blocks([HOST_CHUNK // 4] * 2)
  chunk = weakref.ref(first[0].base)
  assert first[1].base is chunk()   # carved from one mapping
  rest = _arena_blocks([HOST_CHUNK // 2] * 3)   # fills that chunk and moves on to the next
  del first[0]
  gc.collect()
  assert chunk() is not None and not first[0].any()   # one block left in it keeps it
  first.clear()
  gc.collect()
  assert chunk() is None and all(not b.any() for b in rest)

def _huge_pages_on() -> bool:
  try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f: return "[never]" not in f.read()
  except OSError: return False

@pytest.mark.skipif(not _huge_pages_on(), reason="the OS gives no transparent huge pages")
def test_first_touch_of_many_megabyte_blocks_faults_per_huge_page():
  import resource
  blocks = _arena_blocks([(1 << 20) + 64] * 48)   # 48 MB in buffers a first training step makes (4 KB pages: 12300)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  for b in blocks: b[::4096] = 1
  assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 3000

def test_arena_keeps_spare_chunks_faulted_in_ahead():
  """Once SPARES_AFTER chunks are in use a thread maps the next ones and faults their pages in, so a block cut from
  one costs its caller no page faults (a first training step's kernels took them); the blocks still come zeroed.
  Without spares no thread starts."""
  import sys, time
  from tinyplug.backend import HOST_CHUNK, SPARES_AFTER, HostArena, huge_page_bytes
  if not huge_page_bytes() or not sys.platform.startswith("linux"): pytest.skip("no huge pages (or no mincore)")
  plain = HostArena(huge_page_bytes())
  for _ in range(SPARES_AFTER + 1): plain.take(HOST_CHUNK // 2 + 4096)   # a chunk each
  assert not plain.filling and plain.spare == []
  arena = HostArena(huge_page_bytes(), spares=2)
  early = [arena.take(HOST_CHUNK // 2 + 4096) for _ in range(SPARES_AFTER - 1)]
  assert not arena.filling and arena.spare == []   # a process with few chunks keeps no spares
  first = arena.take(HOST_CHUNK // 2)
  deadline = time.monotonic() + 30
  while (arena.filling or len(arena.spare) < 2) and time.monotonic() < deadline: time.sleep(0.01)
  spares = {c.ctypes.data for c in arena.spare}
  assert len(spares) == 2
  block = arena.take(HOST_CHUNK // 2 + 4096)   # does not fit beside `first`: the next chunk, a spare
  assert block.ctypes.data in spares and _resident_pages(block) == len(block) // 4096   # in memory before any touch
  assert not block.any() and not first.any() and not any(b.any() for b in early)
  assert _resident_pages(arena.take(HOST_CHUNK)) == 0   # a block of a mapping of its own: faulted in by its user

def _resident_pages(block) -> int:
  """How many of the 4 KB pages of `block` (page aligned) are in memory now (mincore)."""
  import ctypes
  libc = ctypes.CDLL(None, use_errno=True)
  pages = -(-len(block) // 4096)
  vec = (ctypes.c_ubyte * pages)()
  assert libc.mincore(ctypes.c_void_p(block.ctypes.data), ctypes.c_size_t(len(block)), vec) == 0, ctypes.get_errno()
  return sum(v & 1 for v in vec)
