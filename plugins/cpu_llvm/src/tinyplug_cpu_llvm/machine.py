"""What the host CPU looks like to the optimiser: its data caches, its vector registers and how many cores this process
may use. The renderer declares them (`cache_bytes`, `vector_bytes`, `vector_registers`, `threads`), so the heuristic
and the scheduler's pack pass size their register tiles, cache blocks and thread shares for this machine rather than
for the one they were tuned on."""
from __future__ import annotations
import os
from pathlib import Path
from tinyplug_cpu_llvm.plugin import CPU_THREADS

SYSFS_CACHES = "/sys/devices/system/cpu/cpu0/cache"

def _bytes(text: str) -> int:
  """sysfs sizes: `32K`, `1024K`, `32M`, or plain bytes."""
  text = text.strip().upper()
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
  return int(text.rstrip("KMG")) * scale

def data_caches(root: str | os.PathLike = SYSFS_CACHES) -> tuple[int, ...]:
  """Bytes of data cache per level as core 0 sees it, (L1d, L2, L3, ...): Linux's sysfs, else glibc's sysconf;
  () when neither says (the optimiser then keeps its defaults). An L3 is shared by the cores of its complex."""
  levels: dict[int, int] = {}
  try:
    for d in sorted(Path(root).glob("index*")):
      if (d / "type").read_text().strip() == "Instruction": continue
      levels[int((d / "level").read_text())] = _bytes((d / "size").read_text())
  except (OSError, ValueError): levels = {}
  if not levels:
    for level, name in ((1, "SC_LEVEL1_DCACHE_SIZE"), (2, "SC_LEVEL2_CACHE_SIZE"), (3, "SC_LEVEL3_CACHE_SIZE")):
      try: size = os.sysconf(name)
      except (ValueError, OSError, AttributeError): size = 0
      if size > 0: levels[level] = size
  # levels 1..n without a gap (a missing L2 would make the L3 look like one)
  out: list[int] = []
  while len(out) + 1 in levels: out.append(levels[len(out) + 1])
  return tuple(out)

def usable_cores() -> int:
  """Every core this process may run on (its affinity mask, which taskset and containers narrow)."""
  try: return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError): return os.cpu_count() or 1

def n_threads() -> int:
  """The threads a kernel is shared across: CPU_THREADS, or every usable core (0, the default)."""
  n = int(CPU_THREADS.value)
  return n if n > 0 else usable_cores()

def vector_registers(features: str) -> tuple[int, int]:
  """(bytes per vector register, how many) for an LLVM feature string (`+avx512f,+avx2,...`): AVX-512 32 x 64 bytes,
  AVX/AVX2 16 x 32, SSE 16 x 16, aarch64's NEON 32 x 16; (0, 0) where the string does not say (a CPU named without
  features: the compiler fills in `implied_features`). A feature turned off (`-avx512f`) does not count."""
  flags = set(features.split(","))
  for feature, regs in (("+avx512f", (64, 32)), ("+avx2", (32, 16)), ("+avx", (32, 16)), ("+neon", (16, 32)),
                        ("+sse2", (16, 16))):
    if feature in flags: return regs
  return 0, 0

# one function per feature: the instructions LLVM picks for it say whether the target has the feature
_PROBE_IR = """
define void @wide(ptr %p) {
  %v = load <16 x float>, ptr %p
  %s = fadd <16 x float> %v, %v
  store <16 x float> %s, ptr %p
  ret void
}
define void @ints(ptr %p, ptr %q) {
  %v = load <8 x i32>, ptr %p
  %w = load <8 x i32>, ptr %q
  %s = add <8 x i32> %v, %w
  store <8 x i32> %s, ptr %p
  ret void
}
define void @fused(ptr %p) {
  %v = load <8 x float>, ptr %p
  %s = call <8 x float> @llvm.fma.v8f32(<8 x float> %v, <8 x float> %v, <8 x float> %v)
  store <8 x float> %s, ptr %p
  ret void
}
define void @compares(ptr %p) {
  %v = load <2 x i64>, ptr %p
  %c = icmp sgt <2 x i64> %v, zeroinitializer
  %s = sext <2 x i1> %c to <2 x i64>
  store <2 x i64> %s, ptr %p
  ret void
}
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
"""

# (feature, text in the assembly of the probe's functions that only that feature produces)
_PROBED = (("+avx512f", "%zmm"), ("+avx2", "%ymm", "vpaddd"), ("+avx", "%ymm"), ("+fma", "vfmadd"),
           ("+sse4.2", "pcmpgtq"), ("+sse2", "%xmm"), ("+neon", ".4s"))

def implied_features(target_machine) -> str:
  """The features, among those the optimiser and the vector libm look for, of a target named by CPU alone
  (`CPU:LLVM:haswell`): LLVM knows them, the name does not spell them; read from the instructions LLVM's assembly
  uses for the probe's functions. "" where it shows none."""
  from tinyplug_cpu_llvm.compiler import init_llvm
  asm = target_machine.emit_assembly(init_llvm().parse_assembly(_PROBE_IR))
  lines = asm.splitlines()
  return ",".join(feature for feature, *marks in _PROBED if any(all(m in line for m in marks) for line in lines))
