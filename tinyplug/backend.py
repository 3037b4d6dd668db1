"""The backend contract: what a device plugin implements, as base classes the core reads.

A backend is a `Compiled` device made of four parts, each a subclass of a class below:

  Allocator   raw device memory: alloc / free / copyin / copyout (the core adds a reuse cache around it)
  Renderer    linear program -> source text; its class attributes declare what the target can do
  Compiler    source text -> binary bytes (cached by the core's callers through `compile_cached`)
  Program     what `Compiled.make_program(spec, binary)` returns: a callable that launches the kernel

`ProgramSpec` is what codegen hands the device: the linear program, the rendered source and the launch policy
(global/local sizes, the loop a multi-threaded runtime may share out, the work estimate). `SearchStrategy`
(re-exported from `tinyplug.hookspecs.search`) is the contract of a kernel search plugin.

This module imports only the IR (`tinyplug.uop`) and helpers: every layer may import it. docs/plugin_guide.md walks
through a backend written against it; examples/plugin_example has a complete one."""
from __future__ import annotations
import functools, math, mmap, os, threading
import numpy as _np
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable
from tinyplug.helpers import ContextVar, env_str
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp

__all__ = ["Allocator", "ReuseAllocator", "HostAllocator", "Renderer", "TensorCore", "Compiler", "Program", "ProgramSpec", "Compiled",
           "GraphLaunch", "LaunchGraph",
           "LAUNCH_LOOPS", "LAUNCH_IDS", "LAUNCH_GRID", "SearchStrategy", "shareable_loop", "loop_work", "parse_gpu_name"]

LRU = ContextVar("LRU", 1, "1 keeps freed device memory of at least LRU_MIN bytes for reuse by an allocation of the same size")
LRU_MIN = ContextVar("LRU_MIN", -1, "the smallest freed block (bytes) kept for reuse; -1: the device's own choice")
LRU_MAX = ContextVar("LRU_MAX", -1, "at most this many freed bytes are kept per device; -1: the device's own choice")

# ---------------- memory ----------------

class Allocator:
  """Raw memory of one device, on opaque handles. A plugin implements all four methods; `free` really frees
  (the core keeps freed blocks for reuse itself, see `ReuseAllocator`)."""
  reusable: bool = True   # False: the core hands back no freed block (e.g. each block needs a fresh guard page)
  # what the core keeps for reuse unless LRU_MIN/LRU_MAX say otherwise: a device whose alloc/free are slow or
  # synchronizing (a GPU driver's) keeps small blocks too and more of them
  reuse_min: int = 1 << 16
  reuse_max: int = 1 << 30
  # blocks smaller than reuse_min kept per size all the same, unless LRU_MIN is set (a host device whose small blocks
  # come from numpy: a tiny op's output then costs a list pop instead of an allocation, an address and a slice)
  reuse_small: int = 0
  def alloc(self, nbytes: int) -> Any:
    """A new block of at least `nbytes` bytes (its contents are undefined); raise (e.g. MemoryError) when full."""
    raise NotImplementedError
  def free(self, handle: Any, nbytes: int) -> None:
    """Give a block from `alloc(nbytes)` back to the device."""
  def copyin(self, dest: Any, src: memoryview) -> None:
    """Copy the bytes of `src` (a byte memoryview) to the start of block `dest`."""
    raise NotImplementedError
  def copyout(self, dest: memoryview, src: Any) -> None:
    """Copy the first `len(dest)` bytes of block `src` into `dest` (a writable byte memoryview); the device
    is synchronized before this is called."""
    raise NotImplementedError
  def wrap(self, address: int, nbytes: int) -> Any:
    """Optional: a handle on `nbytes` of this device's memory at `address` that someone else allocated and owns
    (`Tensor.from_blob`); the core never frees it."""
    raise NotImplementedError(f"{type(self).__name__} cannot use memory it did not allocate (Tensor.from_blob)")
  def clear(self, handle: Any, nbytes: int) -> None:
    """Zero the first `nbytes` of block `handle` (a kept small block handed out again comes zeroed, as a fresh one
    of a host allocator does); override where the device has a faster way."""
    self.copyin(handle, memoryview(bytes(nbytes)))

class ReuseAllocator(Allocator):
  """The core's reuse cache around a plugin's allocator; every `Compiled` device gets one.

  Freed blocks of at least LRU_MIN bytes are kept (up to LRU_MAX bytes in all; each defaults to the plugin
  allocator's `reuse_min`/`reuse_max`) and handed out again for the same size: a big output then lands in memory
  that is already mapped instead of faulting in (and zeroing) fresh pages.
  So, as in torch and tinygrad, memory from `Tensor.empty` holds whatever was there; small blocks come fresh or zeroed."""
  def __init__(self, raw: Allocator):
    self.raw = raw
    self._kept: dict[int, list] = {}
    self._kept_bytes = 0
  def alloc(self, nbytes: int, written: bool = False) -> Any:
    """A block of `nbytes`. `written`: every byte is written before anything reads it (a realize plan's kernel
    output), so a kept small block is handed out as it is."""
    if nbytes < 1: nbytes = 1
    if (blocks := self._kept.get(nbytes)) and self.raw.reusable:
      self._kept_bytes -= nbytes
      handle = blocks.pop()
      # a small block (kept by `reuse_small` only) comes zeroed, as fresh small blocks do (`Tensor.empty` of a tiny
      # tensor on a host device reads zeros)
      if not written and nbytes < self.raw.reuse_min: self.raw.clear(handle, nbytes)
      return handle
    try: return self.raw.alloc(nbytes)
    except Exception:
      if not self._kept_bytes: raise
      self.release_kept()   # out of memory, perhaps: give the kept blocks back and try once more
      return self.raw.alloc(nbytes)
  def free(self, handle: Any, nbytes: int) -> None:
    if nbytes < 1: nbytes = 1
    raw = self.raw
    lo = raw.reuse_min if (user_lo := LRU_MIN.value) < 0 else user_lo
    hi = raw.reuse_max if (user_hi := LRU_MAX.value) < 0 else user_hi
    if nbytes < lo:   # a small block (every tiny op's output): freed at once, or a few kept per size
      if (k := raw.reuse_small) and user_lo < 0 and LRU.value and raw.reusable and \
         len(blocks := self._kept.setdefault(nbytes, [])) < k and self._kept_bytes + nbytes <= hi:
        blocks.append(handle)
        self._kept_bytes += nbytes
      else: raw.free(handle, nbytes)
      return
    if LRU.value and raw.reusable and self._kept_bytes + nbytes <= hi:
      self._kept.setdefault(nbytes, []).append(handle)
      self._kept_bytes += nbytes
    else: raw.free(handle, nbytes)
  def release_kept(self) -> None:
    """Free every kept block for real."""
    for nbytes, blocks in self._kept.items():
      for handle in blocks: self.raw.free(handle, nbytes)
    self._kept, self._kept_bytes = {}, 0
  def copyin(self, dest: Any, src: memoryview) -> None: self.raw.copyin(dest, src)
  def copyout(self, dest: memoryview, src: Any) -> None: self.raw.copyout(dest, src)
  def wrap(self, address: int, nbytes: int) -> Any: return self.raw.wrap(address, nbytes)
  def __getattr__(self, name: str) -> Any:   # a plugin's extra methods (e.g. a device-side copy) stay reachable
    if name == "raw": raise AttributeError(name)
    return getattr(self.raw, name)

# from this size on, host memory for device buffers comes straight from the OS (anonymous mmap): page aligned, zeroed
# lazily, returned when freed (with the other blocks of its chunk), and not counted as Python heap (tracemalloc), like
# any device's memory
HOST_MMAP_MIN = 1 << 18

# where the OS does not say its transparent huge page size (/sys/kernel/mm/transparent_hugepage/hpage_pmd_size)
DEFAULT_HUGE_PAGE = 2 << 20

@functools.cache
def huge_page_bytes() -> int:
  """The OS's transparent huge page size, read once; 0 where it has none (or a platform's mmap cannot ask for it)."""
  if not hasattr(mmap, "MADV_HUGEPAGE") or not hasattr(mmap, "MAP_PRIVATE"): return 0
  try:
    with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f: return int(f.read())
  except (OSError, ValueError): return DEFAULT_HUGE_PAGE

_PRIVATE = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}

# blocks smaller than this are carved one after another from shared chunks of huge pages (HostArena); bigger ones get
# huge pages of their own
HOST_CHUNK = 8 << 20

class HostArena:
  """Host blocks from HOST_MMAP_MIN bytes in huge pages, many per page: a first training step's ~120 new 0.25-4 MB
  buffers (160 MB) fault ~80 times instead of ~40000 (gpt of benchmarks/first_step.py on a Zen 3 VM: ~0.2 s -> ~20
  ms). Blocks are cut from the current 2 MB aligned chunk in turn and never reused within it (so each comes zeroed);
  a chunk goes back to the OS once every block cut from it is gone (each holds the mapping, as a numpy base). With
  `spares`, a thread keeps that many chunks mapped and faulted in ahead once SPARES_AFTER chunks were cut."""
  def __init__(self, huge: int, spares: int = 0):
    self.huge, self.chunk, self.used = huge, None, 0
    self.lock = threading.Lock()
    self.spares, self.spare, self.filling, self.chunks = spares, [], False, 0
    if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=self._forked)
  def _forked(self) -> None:   # a child has none of its parent's threads: a fill under way never ends there
    self.lock, self.filling = threading.Lock(), False
  def mapping(self, nbytes: int) -> Any:
    """`nbytes` (a multiple of the huge page) of fresh memory starting on a huge page boundary."""
    block = mmap.mmap(-1, nbytes + self.huge, **_PRIVATE)
    try: block.madvise(mmap.MADV_HUGEPAGE)
    except OSError: pass   # a kernel without transparent huge pages: small pages, as before
    whole = _np.frombuffer(block, dtype=_np.uint8)
    start = -whole.ctypes.data % self.huge
    return whole[start:start + nbytes]
  def take(self, nbytes: int) -> Any:
    size = -(-nbytes // 4096) * 4096   # every block starts on a page, as a mapping of its own did
    if size >= HOST_CHUNK: return self.mapping(-(-size // self.huge) * self.huge)[:nbytes]
    with self.lock:
      if self.chunk is None or self.used + size > len(self.chunk): self.chunk, self.used = self._next_chunk(), 0
      block, self.used = self.chunk[self.used:self.used + nbytes], self.used + size
    return block
  def _next_chunk(self) -> Any:
    """A spare chunk (faulted in already) or a new one; from the SPARES_AFTER-th chunk on the spares are made up again
    on a thread (lock held)."""
    chunk = self.spare.pop() if self.spare else None
    self.chunks += 1
    if self.spares and self.chunks >= SPARES_AFTER and not self.filling:
      self.filling = True
      threading.Thread(target=self._fill, daemon=True, name="tinyplug-host-pages").start()
    return self.mapping(HOST_CHUNK) if chunk is None else chunk
  def _fill(self) -> None:
    """Map spare chunks and fault their pages in (zeroed, so a block cut from them is still zero-filled) while the
    caller works: a first step's ~20 new chunks took 0.1-0.6 s of page faults in its kernels' first runs on a VM."""
    import ctypes
    try:
      while True:
        with self.lock:
          if len(self.spare) >= self.spares:
            self.filling = False
            return
        chunk = self.mapping(HOST_CHUNK)
        ctypes.memset(chunk.ctypes.data, 0, len(chunk))   # (a foreign call: the GIL is let go)
        with self.lock: self.spare.append(chunk)
    except BaseException:
      with self.lock: self.filling = False
      raise

@functools.cache
def host_arena() -> HostArena | None:
  return HostArena(huge, HOST_SPARE_CHUNKS) if (huge := huge_page_bytes()) else None

# chunks the arena keeps faulted in ahead (their memory stays mapped: 16 MB), from a process's SPARES_AFTER-th chunk
# on: a small model's few chunks (the cnn of first_step.py: 2 in its first step) would pay for spares it never uses
HOST_SPARE_CHUNKS = 2
SPARES_AFTER = 3

def host_block(nbytes: int) -> Any:
  """A zero-filled numpy uint8 array of `nbytes` for a host-side device buffer (big ones are page-aligned mmaps).
  Mappings are private (an anonymous shared mapping is shared memory: its pages fault in ~3x slower and are never
  huge) and, where the OS has transparent huge pages, come from the HostArena."""
  if nbytes < HOST_MMAP_MIN: return _np.zeros(nbytes, dtype=_np.uint8)   # every small output of a CPU op: no imports
  if (arena := host_arena()) is not None: return arena.take(nbytes)
  return _np.frombuffer(mmap.mmap(-1, nbytes, **_PRIVATE), dtype=_np.uint8)

def host_view(address: int, nbytes: int) -> Any:
  """A numpy byte array over `nbytes` of this process's memory at `address` (not copied, not owned)."""
  import ctypes
  if not nbytes: return _np.zeros(0, dtype=_np.uint8)
  return _np.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=_np.uint8)

class HostAllocator(Allocator):
  """Memory in this process, as zero-filled numpy byte arrays (used by PYTHON and host-side CPU backends)."""
  def alloc(self, nbytes: int) -> Any: return host_block(nbytes)
  def wrap(self, address: int, nbytes: int) -> Any: return host_view(address, nbytes)
  def copyin(self, dest: Any, src: memoryview) -> None:
    import numpy as np
    dest[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: Any) -> None:
    import numpy as np
    np.frombuffer(dest, dtype=np.uint8)[:] = src[:len(dest)]

# ---------------- renderers ----------------

# launch models: how the output axes of a kernel are run
LAUNCH_LOOPS = "loops"   # the program runs every output loop itself (CPU); a runtime may share out the outermost one
LAUNCH_IDS = "ids"       # output axes become SPECIAL launch ids; no work-group tuning by the heuristic (an interpreter)
LAUNCH_GRID = "grid"     # output axes become group ids x local ids; the heuristic builds work-groups (GPUs)
LAUNCH_MODELS = (LAUNCH_LOOPS, LAUNCH_IDS, LAUNCH_GRID)

def _all_scalar_dtypes() -> list[DType]:
  return [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
          dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]

@dataclass(frozen=True)
class TensorCore:
  """A matrix multiply-accumulate instruction that `threads` threads (a warp, a wave) run together:
  D (M x N, `dtype_out`) = A (M x K, `dtype_in`) @ B (K x N, `dtype_in`) + C (M x N, `dtype_out`).

  Each thread holds a fragment of every matrix: `elements` (a, b, c) values of A, B and C/D. Where a value lives is
  given as data, per matrix: `lane_bits[m][j]` is the (row, col) step that bit j of the thread's lane number adds, and
  `element_offsets[m][i]` the (row, col) of its element i in lane 0; so element i of lane l is at
  `element_offsets[m][i] + sum of lane_bits[m][j] over the bits j set in l` (m: 0 = A, 1 = B, 2 = C/D). Rows and
  columns are those of the matrix itself: A's are (m, k), B's (k, n), C's (m, n). `check()` proves the map covers
  C/D exactly once, and A and B wholly, each element as often as every other (some instructions, RDNA3's WMMA, want
  A and B in two halves of the wave both: a lane bit that steps nothing).

  The TC action emits `UOp(Ops.WMMA, dtype_out.vec(c), (*a, *b, *c), arg=name)`: the renderer turns it into the
  instruction (each thread passes its own elements and gets its elements of D back)."""
  name: str                          # unique among the renderer's tensor cores: the WMMA op's arg
  dims: tuple[int, int, int]         # M, N, K
  dtype_in: DType
  dtype_out: DType
  threads: int                       # lanes that run one instruction together
  lane_bits: tuple[tuple[tuple[int, int], ...], ...]          # [matrix][bit] -> (row, col) step
  element_offsets: tuple[tuple[tuple[int, int], ...], ...]    # [matrix][element] -> (row, col) in lane 0

  @property
  def elements(self) -> tuple[int, int, int]:
    """Values each thread holds of A, B and C/D."""
    a, b, c = (len(offsets) for offsets in self.element_offsets)
    return (a, b, c)

  def shapes(self) -> tuple[tuple[int, int], ...]:
    m, n, k = self.dims
    return ((m, k), (k, n), (m, n))

  def position(self, matrix: int, lane: int, element: int) -> tuple[int, int]:
    """(row, col) of `element` of `lane`'s fragment of `matrix` (0 = A, 1 = B, 2 = C/D)."""
    row, col = self.element_offsets[matrix][element]
    for j, (dr, dc) in enumerate(self.lane_bits[matrix]):
      if lane >> j & 1: row, col = row + dr, col + dc
    return row, col

  def check(self) -> None:
    """Raise ValueError unless the fragments cover C/D exactly once and A and B evenly (see the class docstring)."""
    from collections import Counter
    if self.threads & (self.threads - 1): raise ValueError(f"{self.name}: {self.threads} threads is not a power of two")
    for m, ((rows, cols), count) in enumerate(zip(self.shapes(), self.elements)):
      if len(self.lane_bits[m]) != self.threads.bit_length() - 1:
        raise ValueError(f"{self.name}: matrix {'ABC'[m]} needs {self.threads.bit_length() - 1} lane steps")
      seen = Counter(self.position(m, lane, i) for lane in range(self.threads) for i in range(count))
      copies = set(seen.values())
      if set(seen) != {(r, c) for r in range(rows) for c in range(cols)} or len(copies) != 1 or (m == 2 and copies != {1}):
        how = "once" if m == 2 else "evenly"
        raise ValueError(f"{self.name}: the fragments of matrix {'ABC'[m]} do not cover its {rows}x{cols} elements {how}")

class Renderer:
  """Turns a linear program (docs/architecture.md §4) into source text for one target.

  Every capability the core asks about is declared here with its default; a renderer overrides the ones its target
  has, as class attributes or (for limits only known once a device is open) instance attributes set in __init__.
  The core reads these names and nothing else."""
  device: str = ""                 # the device it renders for, e.g. "CL"
  suffix: str = ""                 # a short name for the source language (file suffix, display)
  # ---- launch model ----
  launch: str = LAUNCH_LOOPS       # one of LAUNCH_MODELS: loops on the host / launch ids / group x local ids
  has_local: bool = False          # work-groups: LOCAL actions and `lidx` ids (with launch ids or a grid)
  has_shared: bool = False         # memory shared by a work-group, with barriers: GROUP reductions (DEFINE_LOCAL)
  # a work-group's work-items run side by side (a GPU's SIMT lanes), so the heuristic shares a reduction across them;
  # False where they run one after another (OpenCL on a CPU: a shared sum of 16M floats was 12x slower on PoCL)
  parallel_work_items: bool = True
  global_max: tuple[int, ...] | None = None   # the largest launch grid per dimension (None: no limit)
  local_max: tuple[int, ...] | None = None    # the largest work-group per dimension
  shared_max: int = 0              # bytes of shared memory per work-group (0: no declared limit)
  max_registers: int = 0           # 32-bit registers per work-item; the search skips tiles whose accumulators need more
  # ---- what code it can express ----
  native_ops: frozenset[Ops] | None = None    # ALU ops it renders; others are decomposed first (None: every op)
  vector_widths: Mapping[DType, tuple[int, ...]] = {}   # vector widths per scalar dtype, widest first ({}: scalars)
  vector_alu: bool = True          # False: vectors only carry loads and stores; math runs per lane (SIMT GPUs)
  # a STORE of a vector to an INDEX with a vector of offsets is one scatter; False: the vectorizer stores such lanes
  # (a tile's output channels, a plane apart) one STORE each
  scatter_stores: bool = False
  # a GEP may pick several lanes of a vector in any order (a shuffle): a load of lanes at descending addresses (a
  # flipped axis) is then one vector load, its lanes reversed; False: each such lane loaded on its own
  lane_shuffles: bool = False
  # a sum of one-hot matches (`x[idx]`'s gradient, scatter_reduce's sum) tests this many indices at once, their matches
  # OR-ed into one branch, and only a group with a match is run index by index (linearize's `scan_matches`: a few
  # compares per group where the target vectorizes the OR); 0: one branch per index (GPUs, where it is unmeasured)
  match_scan_lanes: int = 0
  # the gradients of row gathers (`x[idx]` on dim 0, nn.Embedding) are real scatter-adds (Ops.SCATTER_ADD): a loop
  # over the indices in order (an "ordered" range: never upcast, unrolled or shared out) around a loop over the row;
  # False: the one-hot sum over (rows x indices) above (GPUs, where the ordered loop would run on one thread)
  row_scatter_add: bool = False
  tensor_cores: tuple[TensorCore, ...] = ()   # matrix-multiply instructions the TC action may use (see TensorCore)
  # asynchronous 16-byte copies into shared memory and warp-wide matrix loads from it (CUDA's cp.async and ldmatrix):
  # STAGE's asynchronous mode (codegen/tc_async.py; what it renders: docs/plugin_guide.md)
  async_copy: bool = False
  # tensor cores (by name) whose A and B the instruction reads from shared memory through descriptors (Hopper's wgmma):
  # their WMMAs run only once STAGE's descriptor mode (bit 2048, codegen/tc_wgmma.py) has staged the operands
  descriptor_cores: frozenset = frozenset()
  # whether the heuristic runs a matmul on a descriptor core (where one matches) rather than on the others
  prefer_descriptor_cores: bool = False
  extra_matcher: Any = None        # a PatternMatcher run in the "final" stage (the renderer's own lowering)
  # float dtypes it lists in supported_dtypes() (they work) but has no type for: the core's "dtypes" stage still
  # turns them into bits in memory and float32 math, as for the dtypes left out of supported_dtypes()
  emulated: frozenset[DType] = frozenset()
  # ---- the machine (loop-running renderers): the heuristic sizes cache blocks and thread shares by these, the
  # scheduler's pack pass decides by them; a renderer that does not know keeps the defaults ----
  cache_bytes: tuple[int, ...] = ()   # data cache per level as one core sees it, (L1d, L2, L3); () unknown
  threads: int = 1                    # threads a kernel's THREAD axis is shared across
  vector_bytes: int = 0               # the widest vector register, in bytes (64: AVX-512, 32: AVX2); 0 unknown
  vector_registers: int = 0           # how many of them (32 with AVX-512 or on aarch64, 16 with AVX2); 0 unknown

  def supported_dtypes(self) -> list[DType]:
    """The scalar dtypes this target computes and stores (default: all but the fp8 ones). Float dtypes left out still
    work: the core's "dtypes" stage keeps them as bits in memory and computes in float32 (fp8, bfloat16, float16)."""
    return _all_scalar_dtypes()
  @property
  def code_for_op(self) -> Mapping[Ops, str]:
    """The ALU ops this target renders itself, as tinygrad names the table (op -> its name): `Ops.SQRT in
    renderer.code_for_op`. The core decomposes the others first (`native_ops`)."""
    ops = GroupOp.ALU if self.native_ops is None else frozenset(self.native_ops) & GroupOp.ALU
    return MappingProxyType({op: op.name.lower() for op in sorted(ops)})
  def render(self, name: str, uops: list[UOp]) -> str:
    """Source text of one kernel function `name` running `uops` (a linear program in execution order)."""
    raise NotImplementedError

  # derived facts, in one place: the core asks these instead of combining attributes itself
  @property
  def runs_loops(self) -> bool:
    """Output axes stay loops inside the program (CPU-style)."""
    return self.launch == LAUNCH_LOOPS
  @property
  def uses_work_groups(self) -> bool:
    """The heuristic and search build work-groups, and THREAD (a host-loop split) does not apply."""
    return self.launch == LAUNCH_GRID

# renderers with at most this many vector registers (AVX2's 16; not AVX-512's 32) get the tiles and layouts measured
# for them on a Zen 3 core: the heuristic's row bands, blocked vector axes and unpadded cache blocks, and
# tensor_ops/layout.py's copies blocked by channels
NARROW_MAX_REGISTERS = 16

# on x86 cores, addresses a multiple of this many bytes apart share an L1 set and look alike to the check of a load
# against earlier stores (4K aliasing): rows that far apart are padded or tiled apart where vectors are narrow
ALIAS_BYTES = 4096

def narrow_vectors(renderer: Any) -> bool:
  """Whether `renderer` runs loops with at most NARROW_MAX_REGISTERS vector registers (AVX2)."""
  return bool(renderer is not None and renderer.runs_loops and renderer.vector_bytes and renderer.vector_registers and
              renderer.vector_registers <= NARROW_MAX_REGISTERS)

# ---------------- compilers ----------------

class Compiler:
  """Turns source into a binary. `cachekey` names the compiler and its settings for on-disk caches (None: no cache)."""
  cachekey: str | None = None
  # True: `compile_program` may run on a thread of the engine's own while the caller lowers the next kernels (its
  # work must release the GIL to gain anything, as llvmlite's calls do); it must be safe beside any other call
  background: bool = False
  def compile(self, src: str) -> bytes:
    """A binary for `src`; raise an error naming the problem when the source does not compile."""
    return src.encode()
  def compile_cached(self, src: str) -> bytes:
    """`compile(src)`, from a cache when this source was compiled before (default: no cache)."""
    return self.compile(src)
  def compile_program(self, spec: ProgramSpec) -> bytes:
    """What the engine calls for a kernel: a compiler may use the spec's launch fields (e.g. a quicker tier for
    a kernel with little `work`). Default: `compile_cached(spec.src)`."""
    return self.compile_cached(spec.src)
  def cached_program(self, spec: ProgramSpec) -> bytes | None:
    """`compile_program(spec)` when a cache holds it, without compiling; None otherwise (default: always None). The
    engine compiles ahead (`background`) only what this does not find."""
    return None
  def cached_programs(self, specs: list[ProgramSpec]) -> list[bytes | None]:
    """cached_program of each spec (a compiler with a disk cache reads them at once)."""
    return [self.cached_program(s) for s in specs]

# ---------------- programs ----------------

def shareable_loop(uops: list[UOp] | tuple[UOp, ...]) -> UOp | None:
  """The outermost output loop when threads may share it out: it is opened first, at depth 0, and every global
  store happens inside it. A loop-running renderer that splits work across threads splits this one."""
  loops = [u for u in uops if u.op is Ops.RANGE and u.arg[1] != "reduce"]
  if not loops: return None
  first = min(loops, key=lambda u: u.arg)
  if first.arg[1] == "ordered": return None   # SCATTER_ADD's loop over its indices: shared out, repeats would race
  open_loops: list[UOp] = []
  for u in uops:
    if u.op is Ops.RANGE:
      if not open_loops and u is not first: return None
      open_loops.append(u)
    elif u.op is Ops.END and open_loops: open_loops.pop()
    elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      if first not in open_loops: return None
  return first

def loop_work(uops: list[UOp] | tuple[UOp, ...]) -> int:
  """Loop-body executions of a linear program (an upper bound when loop ends are variables)."""
  sizes: list[int] = []
  work = 0
  for u in uops:
    if u.op is Ops.RANGE:
      end = u.src[0]
      if end.op is Ops.CONST: n = int(end.arg)
      elif end.op is Ops.DEFINE_VAR: n = int(end.arg[2])
      else: n = 1 << 20
      sizes.append(max(n, 0))
      work += math.prod(sizes)
    elif u.op is Ops.END and sizes: sizes.pop()
  return work

@dataclass(frozen=True)
class ProgramSpec:
  """A lowered kernel: the linear program, its source, and how to launch it.

  global_size / local_size: the launch grid in groups and the work-group (renderers with launch ids).
  vars: the DEFINE_VARs, passed after the buffers. outs / ins: buffer parameters written / only read.
  thread_split: the outermost output loop may be shared out among threads (`shareable_loop`); loop-running
    runtimes with threads split it. work: loop-body executions, what threading and compile tiers decide on.
    Both are worked out from `uops` when not given.
  estimates: ops and mem (bytes) for DEBUG=2."""
  name: str
  uops: tuple[UOp, ...]
  src: str
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] | None = None
  vars: tuple[UOp, ...] = ()
  outs: tuple[int, ...] = (0,)
  ins: tuple[int, ...] = ()
  applied_opts: tuple = ()
  estimates: dict = field(default_factory=dict, compare=False)
  thread_split: bool | None = None
  work: int | None = None
  def __post_init__(self):
    if self.thread_split is None: object.__setattr__(self, "thread_split", shareable_loop(self.uops) is not None)
    if self.work is None: object.__setattr__(self, "work", loop_work(self.uops))
  @property
  def buffer_count(self) -> int:
    """How many buffer parameters the kernel takes (one pointer each, before the variables)."""
    return len({u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL})
  @property
  def shared_trips(self) -> int | None:
    """Iterations of the loop threads share (`shareable_loop`), None when there is none or its end is not a
    constant."""
    loop = shareable_loop(self.uops)
    return int(loop.src[0].arg) if loop is not None and loop.src[0].op is Ops.CONST else None
  @property
  def thread_parts(self) -> int | None:
    """The size of the kernel's THREAD axis (an explicit THREAD action), or None: the runtime's own rule."""
    return next((int(o.arg) for o in self.applied_opts if getattr(o.op, "name", "") == "THREAD"), None)

@runtime_checkable
class Program(Protocol):
  """What `Compiled.make_program` returns: launches the kernel on raw buffer handles (DEFINE_GLOBAL order) and
  variable values (`spec.vars` order); returns the kernel's run time in seconds when `wait`, else may return None."""
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None, local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None: ...

def launcher(prg: Program, global_size: tuple[int, ...] | None, local_size: tuple[int, ...] | None) -> Any:
  """A function (handles, vals) -> None launching `prg` on this grid without waiting: the program's own
  `launcher(global_size, local_size)` where it has one (arguments prepared once: what a realize plan calls over and
  over), else a call of the program."""
  if (own := getattr(prg, "launcher", None)) is not None and (fn := own(global_size, local_size)) is not None: return fn
  def launch(handles: list, vals: tuple) -> None:
    prg(*handles, global_size=global_size, local_size=local_size, vals=vals, wait=False)
  return launch

class GraphLaunch(Protocol):
  """One recorded kernel launch as `Compiled.make_graph` sees it (TinyJit's captured launches): the program and what
  it is called with. `handles` and `vals` may change between replays; the rest never does."""
  prg: Program
  name: str
  handles: list[Any]                       # raw buffer handles, DEFINE_GLOBAL order
  vals: tuple[int, ...]                    # variable values, `spec.vars` order
  global_size: tuple[int, ...] | None
  local_size: tuple[int, ...] | None

class LaunchGraph:
  """A device's replay of a fixed list of kernel launches as one unit (a CUDA graph): built once by
  `Compiled.make_graph(launches)`, it keeps the launch objects and reads their current `handles`/`vals` when told
  they changed. Launches run in list order, each after the previous one has finished (stream order)."""
  def __call__(self, changed: Sequence[int], wait: bool = False) -> float | None:
    """Run every launch once more. `changed`: indices of the launches whose `handles` or `vals` may differ from the
    previous run (update those first). Returns the whole run's device time in seconds when `wait`, else None.
    Raising is safe: the caller replays the launches one by one from then on."""
    raise NotImplementedError

# ---------------- devices ----------------

class Compiled:
  """A device: allocator + renderer + compiler + a way to run a compiled program.

  `allocator` is the plugin's raw allocator wrapped in the core's reuse cache (`self.allocator.raw` is the plugin's).
  Pass `runtime` (a `(name, binary) -> Program` callable) or override `make_program`."""
  def __init__(self, name: str, allocator: Allocator, renderer: Renderer, compiler: Compiler, runtime: Any = None):
    self.name, self.renderer, self.compiler, self.runtime = name, renderer, compiler, runtime
    self.allocator = allocator if isinstance(allocator, ReuseAllocator) else ReuseAllocator(allocator)
  def make_program(self, spec: ProgramSpec, lib: bytes) -> Program:
    """A callable `prg(*raw_buffers, global_size=, local_size=, vals=(), wait=False) -> seconds | None`."""
    if self.runtime is None: raise NotImplementedError(f"device {self.name} cannot run programs")
    return self.runtime(spec.name, lib)
  def synchronize(self) -> None:
    """Wait until every launched kernel and copy has finished."""
  def make_graph(self, launches: Sequence[GraphLaunch]) -> LaunchGraph | None:
    """Optional: one `LaunchGraph` replaying `launches` (2 or more kernels of this device, in order) as one unit,
    or None where that does not pay or the device cannot (the default). TinyJit asks once per run of kernels between
    copies; an exception here is reported under DEBUG and the launches are replayed one by one."""
    return None
  def describe(self) -> str:
    """One line on what this device is and how it runs (for `tinyplug doctor`); empty if nothing to say."""
    return ""
  def count(self) -> int:
    """How many devices of this kind the machine has (`<DEV>:0` .. `<DEV>:<count-1>`); 1 unless the runtime knows."""
    return 1

def parse_gpu_name(name: str, renderers: Sequence[str], ordinal_env: str) -> tuple[str | None, int]:
  """`<DEV>[:<renderer>][:<ordinal>]`, in either order -> (the renderer's name, upper case, or None for the device's
  default; the GPU's ordinal, else the `ordinal_env` variable's, else 0)."""
  family, renderer, ordinal = name.split(":")[0], None, None
  for part in [p for p in name.split(":")[1:] if p]:
    if part.isdigit() and ordinal is None: ordinal = int(part)
    elif part.upper() in renderers and renderer is None: renderer = part.upper()
    else:
      examples = ", ".join([family, f"{family}:1", *(f"{family}:{r}:1" for r in renderers)])
      raise ValueError(f"{name!r}: {part!r} is neither a GPU ordinal nor one of {family}'s renderers "
                       f"({', '.join(renderers)}); "
                       f"write one of {examples}")
  return renderer, int(env_str(ordinal_env) or 0) if ordinal is None else ordinal

from tinyplug.hookspecs.search import SearchStrategy  # noqa: E402  (the search contract lives with its hook)
