"""The CUDA compilers: CUDA C -> cubin through NVRTC, cached in memory and on disk (sealed entries keyed by NVRTC's
version and headers, the architecture, the options and the source)."""
from __future__ import annotations
import hashlib, threading
from tinyplug.backend import Compiler
from tinyplug.diskcache import cache_path, read_sealed, write_sealed
from tinyplug.caches import BoundedCache
from tinyplug.helpers import CACHELEVEL, KERNEL_CACHE_SIZE
from tinyplug_cuda import nvrtc

class CUDACompiler(Compiler):
  """CUDA C -> a cubin for one architecture (`sm_80`)."""
  compiles = 0   # NVRTC runs in this process (cache misses), for tests
  def __init__(self, arch: str):
    self.arch = nvrtc.check_arch(arch)
    self.identity = nvrtc.identity()
    self.cachekey = f"cuda-{self.identity}-{self.arch}"
    self._memory = BoundedCache("cuda.cubins", KERNEL_CACHE_SIZE.value)   # source -> cubin, least recently used go first
    self._lock = threading.Lock()

  def __reduce__(self):   # rebuilt from its architecture in BEAM's compile workers
    return type(self), (self.arch,)

  def arch_for(self, src: str) -> str:
    """The architecture `src` is compiled for: the device's, or sm_90a where a sm_90 kernel uses wgmma (wgmma.py)."""
    from tinyplug_cuda.wgmma import arch_for
    return arch_for(src, self.arch)

  def key(self, src: str) -> str:
    arch = self.arch_for(src)
    return hashlib.sha256("\0".join([self.identity, arch, *nvrtc.options(arch), src]).encode()).hexdigest()

  def compile(self, src: str) -> bytes:
    CUDACompiler.compiles += 1
    return nvrtc.compile_cuda(src, self.arch_for(src))

  def compile_cached(self, src: str) -> bytes:
    with self._lock:
      if (hit := self._memory.get_lru(src)) is not None: return hit
      key = self.key(src)
      path = cache_path("cuda", key + ".cubin") if CACHELEVEL >= 1 else None
      binary = read_sealed(path, key, "cuda") if path is not None else None
      if binary is None:
        binary = self.compile(src)
        if path is not None: write_sealed(path, key, binary)
      return self._memory.put(src, binary)

def compiler_for(renderer: str, arch: str) -> Compiler:
  """The compiler for what a renderer writes: CUDA C through NVRTC, PTX through nvJitLink."""
  if renderer == "PTX":
    from tinyplug_cuda.ptx import PTXCompiler
    return PTXCompiler(arch)
  return CUDACompiler(arch)
