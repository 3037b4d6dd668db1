"""The machine the CPU renderer declares (machine.py): data caches read from sysfs (a fake tree here), the vector
registers from the target's LLVM features, the thread count from CPU_THREADS or the affinity mask."""
import os
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug_cpu_llvm.compiler import host_target
from tinyplug_cpu_llvm.machine import data_caches, n_threads, usable_cores, vector_registers

def _cache(root, index: int, level: int, kind: str, size: str) -> None:
  d = root / f"index{index}"
  d.mkdir()
  (d / "level").write_text(f"{level}\n"); (d / "type").write_text(f"{kind}\n"); (d / "size").write_text(f"{size}\n")

def test_data_caches_from_sysfs(tmp_path):
  _cache(tmp_path, 0, 1, "Data", "48K")
  _cache(tmp_path, 1, 1, "Instruction", "32K")
  _cache(tmp_path, 2, 2, "Unified", "2048K")
  _cache(tmp_path, 3, 3, "Unified", "105M")
  assert data_caches(tmp_path) == (48 << 10, 2 << 20, 105 << 20)

def test_data_caches_stop_at_a_missing_level(tmp_path):
  _cache(tmp_path, 0, 1, "Data", "32K")
  _cache(tmp_path, 1, 3, "Unified", "16M")
  assert data_caches(tmp_path) == (32 << 10,)   # no L2 listed: the L3 must not be taken for one

def test_data_caches_without_sysfs_fall_back_to_sysconf(tmp_path):
  got = data_caches(tmp_path / "missing")
  want = []
  for name in ("SC_LEVEL1_DCACHE_SIZE", "SC_LEVEL2_CACHE_SIZE", "SC_LEVEL3_CACHE_SIZE"):
    try: v = os.sysconf(name)
    except (ValueError, OSError): v = 0
    if v <= 0: break
    want.append(v)
  assert got == tuple(want)

def test_renderer_declares_the_host():
  r = Device["CPU"].renderer
  assert r.cache_bytes == data_caches() and r.cores == usable_cores()
  with Context(CPU_THREADS=3): assert r.threads == n_threads() == 3
  with Context(CPU_THREADS=0): assert r.threads == usable_cores()

def test_vector_registers_from_llvm_features():
  assert vector_registers("+64bit,+avx,+avx2,+avx512f,+fma") == (64, 32)
  assert vector_registers("+avx,+avx2,-avx512f,+fma") == (32, 16)     # AVX-512 turned off: AVX2's
  assert vector_registers("+avx2") == (32, 16)
  assert vector_registers("+sse2,+sse4.2") == (16, 16)
  assert vector_registers("+neon,+fp-armv8") == (16, 32)
  assert vector_registers("") == (0, 0)                                # a CPU named without features: unknown

def test_renderer_declares_the_host_vector_registers():
  assert (Device["CPU"].renderer.vector_bytes, Device["CPU"].renderer.vector_registers) == \
    vector_registers(host_target()[1])
  r = Device["CPU:LLVM:x86-64,+avx2"].renderer
  assert (r.vector_bytes, r.vector_registers) == (32, 16)
