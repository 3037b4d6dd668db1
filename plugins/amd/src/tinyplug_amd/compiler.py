"""AMDGPU LLVM IR -> a loadable code object: llvmlite's AMDGPU target makes a relocatable object (optimised at O3, a
freshly parsed module every time: emitting twice from one module aborts in LLVM), `ld.lld -shared` links it into the
ELF shared object that `hipModuleLoadData` loads. Cached in memory and on disk, keyed by LLVM's and the linker's
versions, the target and the source.

The linker: AMD_LLD when set; else ROCm's own (`$ROCM_PATH/llvm/bin/ld.lld`, `/opt/rocm/llvm/bin/ld.lld`); else the
newest `ld.lld-NN` (NN >= 19) or an `ld.lld` of version 19 or newer on PATH. Older linkers cannot link code object v5."""
from __future__ import annotations
import functools, hashlib, os, re, shutil, subprocess, tempfile, threading
from tinyplug.backend import Compiler
from tinyplug.caches import BoundedCache
from tinyplug.diskcache import cache_path, read_sealed, write_sealed
from tinyplug.helpers import CACHELEVEL, KERNEL_CACHE_SIZE, env_str
from tinyplug_amd.renderer import TRIPLE
from tinyplug_amd.targets import AMDArch, arch_info

MIN_LLD = 19
LLD_PACKAGE = "lld-19"

class AMDCompileError(RuntimeError):
  """The kernel did not compile or link (the message has LLVM's or the linker's words)."""

class LinkerNotFound(AMDCompileError):
  """No ld.lld that can link AMDGPU code object v5 was found."""

def _lld_version(path: str) -> int | None:
  try: out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError): return None
  m = re.search(r"LLD (\d+)\.", out)
  return int(m.group(1)) if m else None

def find_linker(path: str | None = None, rocm: str | None = None) -> str:
  """The ld.lld to link code objects with (see the module docstring); `path` / `rocm` stand in for PATH and
  ROCM_PATH (tests). Raises LinkerNotFound naming the package to install."""
  if (forced := env_str("AMD_LLD")):
    if _lld_version(forced) is None: raise LinkerNotFound(f"AMD_LLD={forced!r} is not an ld.lld that runs")
    return forced
  roots = [r for r in (rocm if rocm is not None else env_str("ROCM_PATH"), "/opt/rocm") if r]
  for root in roots:
    candidate = os.path.join(root, "llvm", "bin", "ld.lld")
    if os.access(candidate, os.X_OK): return candidate
  search = path if path is not None else os.environ.get("PATH", "")
  too_old = []
  for major in range(40, MIN_LLD - 1, -1):
    if (found := shutil.which(f"ld.lld-{major}", path=search)): return found
  if (found := shutil.which("ld.lld", path=search)):
    version = _lld_version(found)
    if version is not None and version >= MIN_LLD: return found
    too_old.append(f"{found} is LLD {version}")
  raise LinkerNotFound(
    "no linker for AMD GPU code objects: the amd plugin needs ld.lld " f"{MIN_LLD} or newer (code object v5)"
    + (f"; {', '.join(too_old)}" if too_old else "") + f". Install the Debian/Ubuntu package {LLD_PACKAGE} "
    f"(apt install {LLD_PACKAGE}), install ROCm (its llvm/bin/ld.lld is used), or set AMD_LLD to an ld.lld")

@functools.cache
def linker() -> tuple[str, str]:
  """(path, version line) of the linker found once per process."""
  path = find_linker()
  out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
  return path, out.splitlines()[0] if out else path

_llvm_lock = threading.Lock()

@functools.cache
def _target_machine(arch: AMDArch):
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch.name, features=arch.features, opt=3)

def _optimised_module(src: str, arch: AMDArch):
  import llvmlite.binding as llvm
  tm = _target_machine(arch)
  try: mod = llvm.parse_assembly(src)
  except RuntimeError as e: raise AMDCompileError(f"LLVM could not parse the AMDGPU IR: {e}\n--- IR ---\n{src}") from e
  mod.triple = TRIPLE
  mod.data_layout = str(tm.target_data)
  try: mod.verify()
  except RuntimeError as e: raise AMDCompileError(f"the AMDGPU IR is invalid: {e}\n--- IR ---\n{src}") from e
  pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
  pb.getModulePassManager().run(mod, pb)
  return tm, mod

def llvm_to_object(src: str, arch: str | AMDArch) -> bytes:
  """AMDGPU LLVM IR -> a relocatable ELF object for `arch`."""
  info = arch if isinstance(arch, AMDArch) else arch_info(arch)
  with _llvm_lock:
    tm, mod = _optimised_module(src, info)
    return tm.emit_object(mod)

def llvm_to_assembly(src: str, arch: str | AMDArch) -> str:
  """AMDGPU LLVM IR -> the GCN assembly LLVM writes for it (for reading, DEBUG=5; not what runs)."""
  info = arch if isinstance(arch, AMDArch) else arch_info(arch)
  with _llvm_lock:
    tm, mod = _optimised_module(src, info)
    return tm.emit_assembly(mod)

def link(obj: bytes, lld: str | None = None) -> bytes:
  """A relocatable AMDGPU object -> the code object (`ld.lld -shared`); every symbol must resolve."""
  lld = lld or linker()[0]
  with tempfile.TemporaryDirectory(prefix="tinyplug-amd-") as d:
    src, out = os.path.join(d, "kernel.o"), os.path.join(d, "kernel.hsaco")
    with open(src, "wb") as f: f.write(obj)
    res = subprocess.run([lld, "-shared", "--no-undefined", "-o", out, src], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
      raise AMDCompileError(f"{os.path.basename(lld)} could not link the kernel: {(res.stderr or res.stdout).strip()}")
    with open(out, "rb") as f: return f.read()

class CachedCodeObjects(Compiler):
  """compile_cached for the amd compilers: code objects in memory and sealed on disk (`<cache dir>/amd/<key>.hsaco`)
  under `key(src)`, which hashes the toolchain's identity, the target and the source."""
  identity: str
  arch: str
  def __init__(self):
    self._memory = BoundedCache(f"amd.{type(self).__name__}", KERNEL_CACHE_SIZE.value)
    self._lock = threading.Lock()

  def __reduce__(self):   # rebuilt from its target in BEAM's compile workers (both subclasses take the arch alone)
    return type(self), (self.arch,)

  def key(self, src: str) -> str:
    return hashlib.sha256("\0".join([type(self).__name__, self.identity, self.arch, src]).encode()).hexdigest()

  def compile_cached(self, src: str) -> bytes:
    with self._lock:
      if (hit := self._memory.get_lru(src)) is not None: return hit
      key = self.key(src)
      path = cache_path("amd", key + ".hsaco") if CACHELEVEL >= 1 else None
      binary = read_sealed(path, key, "amd") if path is not None else None
      if binary is None:
        binary = self.compile(src)
        if path is not None: write_sealed(path, key, binary)
      return self._memory.put(src, binary)

class AMDCompiler(CachedCodeObjects):
  """AMDGPU LLVM IR -> a code object for one target (`gfx1100`)."""
  compiles = 0   # LLVM + linker runs in this process (cache misses), for tests
  def __init__(self, arch: str | None = None):
    import llvmlite.binding as llvm
    super().__init__()
    self.target = arch_info(arch)
    self.arch = self.target.name
    self.lld, lld_version = linker()
    self.identity = f"llvm{'.'.join(map(str, llvm.llvm_version_info))}-{lld_version}-{self.target.features}"
    self.cachekey = f"amd-{self.identity}-{self.arch}"

  def compile(self, src: str) -> bytes:
    AMDCompiler.compiles += 1
    return link(llvm_to_object(src, self.target), self.lld)

def compiler_for(renderer: str, arch: str) -> Compiler:
  """The compiler for what a renderer writes: AMDGPU LLVM IR through llvmlite and ld.lld, HIP C through hiprtc."""
  if renderer == "HIP":
    from tinyplug_amd.hiprtc import HIPCompiler
    return HIPCompiler(arch)
  return AMDCompiler(arch)
