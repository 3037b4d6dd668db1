"""Finding clang, running it, and the emulator's on-disk cache of shared objects.

Every shared object lives under `<cache dir>/emulator/` as `<key>.so` with a `<key>.so.sha256` beside it; the digest is
checked before the file is loaded, and a missing, damaged or mismatched entry is rebuilt, never loaded."""
from __future__ import annotations
import atexit, functools, hashlib, os, re, shlex, shutil, subprocess, tempfile, time
from tinyplug.diskcache import USED_AGAIN_AFTER, mark_used, note_write
from tinyplug.helpers import CACHELEVEL, cache_dir
from tinyplug_emulator.settings import EMU_CLANG
MIN_CLANG = 15   # OpenCL C with -fdeclare-opencl-builtins, __builtin_convertvector on half, x86 _Float16

class ToolchainError(RuntimeError):
  """clang is missing, too old, or failed on a kernel (the message carries clang's output)."""

@functools.cache
def _probe_clang(explicit: str) -> tuple[str | None, str, str]:
  """(path, version text, reason it cannot be used)."""
  names = [explicit] if explicit else ["clang"] + [f"clang-{v}" for v in range(22, MIN_CLANG - 1, -1)]
  best: tuple[int, str, str] | None = None
  reasons = []
  for name in names:
    path = shutil.which(name)
    if path is None: continue
    try: out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
      reasons.append(f"{path}: {e}")
      continue
    m = re.search(r"clang version (\d+)\.", out)
    if not m:
      reasons.append(f"{path}: unrecognised --version output")
      continue
    major = int(m.group(1))
    if major < MIN_CLANG:
      reasons.append(f"{path} is clang {major}, older than {MIN_CLANG}")
      continue
    if not _knows_flags(path):
      reasons.append(f"{path} (clang {major}) does not know {' '.join(REQUIRED_FLAGS[1::2])}")
      continue
    if best is None or major > best[0]: best = (major, path, out.splitlines()[0].strip())
    if explicit: break
  if best is None:
    looked = explicit or "clang, clang-22 ... clang-15"
    why = "; ".join(reasons) or f"none of {looked} is on PATH"
    return None, "", f"no suitable clang ({why}); install one (Debian: apt-get install clang-19) or set EMU_CLANG"
  return best[1], best[2], ""

# flags every kernel compile passes that older clangs lack (half/bf16 arithmetic rounded per operation, as on GPUs)
REQUIRED_FLAGS = ("-Xclang", "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none")

def _knows_flags(path: str) -> bool:
  try:
    return subprocess.run([path, *REQUIRED_FLAGS, "-x", "c", "-fsyntax-only", os.devnull], capture_output=True,
                          timeout=30).returncode == 0
  except (OSError, subprocess.SubprocessError): return False

def find_clang() -> tuple[str | None, str, str]:
  """(clang path or None, its version line, why it is unusable). Cached per EMU_CLANG value."""
  return _probe_clang(EMU_CLANG.value)

def clang() -> tuple[str, str]:
  """(path, version line) of the clang to use, or ToolchainError with the reason."""
  path, version, reason = find_clang()
  if path is None: raise ToolchainError(reason)
  return path, version

def run_clang(args: list[str], what: str, source: str | None = None) -> None:
  path, _ = clang()
  _run([path, *args], f"clang failed on {what}", source)

def build_library(compile_flags: list[str], src_path: str, link_args: list[str], out: str, what: str,
                  source: str | None = None) -> None:
  """Compile `src_path` to an object, then link `out` (a shared object) with `link_args`. Two steps, because clang runs
  its compiler in its own process only when it has a single job (a compile-and-link starts clang twice, ~30 ms of CPU
  each), and the link runs the linker command the driver would run, looked up once per process."""
  obj = out[:-len(".so")] + ".o"
  run_clang([*compile_flags, "-c", src_path, "-o", obj], what, source)
  link = linker_command(tuple(link_args))
  if link is None: return run_clang(["-shared", obj, *link_args, "-o", out], what, source)
  _run([obj if a == _OBJ else out if a == _OUT else a for a in link], f"the linker failed on {what}", source)

_OBJ, _OUT = "tinyplug-link-probe.o", "tinyplug-link-probe.so"

@functools.cache
def linker_command(link_args: tuple[str, ...]) -> list[str] | None:
  """The argv clang's driver runs to link a shared object from one object file and `link_args`, with the object and
  the output as the placeholders _OBJ and _OUT; None when its `-###` listing is not one linker job naming each once."""
  path, _ = clang()
  with tempfile.TemporaryDirectory(prefix="tinyplug-link-") as tmp:
    open(os.path.join(tmp, _OBJ), "wb").close()
    proc = subprocess.run([path, "-###", "-shared", _OBJ, *link_args, "-o", _OUT], capture_output=True, text=True,
                          cwd=tmp)
  jobs = [line for line in proc.stderr.splitlines() if line.startswith(" \"")]
  if proc.returncode != 0 or len(jobs) != 1: return None
  try: argv = shlex.split(jobs[0])
  except ValueError: return None
  return argv if argv.count(_OBJ) == 1 and argv.count(_OUT) == 1 else None

def _run(argv: list[str], failure: str, source: str | None) -> None:
  proc = subprocess.run(argv, capture_output=True, text=True)
  if proc.returncode != 0:
    detail = (proc.stderr or proc.stdout).strip()
    raise ToolchainError(f"{failure}:\n{detail}" + (f"\n--- source ---\n{source}" if source else ""))

# ---------------- the cache ----------------

def emulator_dir() -> str: return os.path.join(cache_dir(), "emulator")

def digest(data: bytes) -> str: return hashlib.sha256(data).hexdigest()

def verified_path(name: str) -> str | None:
  """The path of cached `<name>.so` when its checksum file matches its content, else None."""
  path = os.path.join(emulator_dir(), name + ".so")
  try:
    with open(path, "rb") as f: data, mtime = f.read(), os.fstat(f.fileno()).st_mtime
    with open(path + ".sha256") as f: expected = f.read().strip()
  except OSError: return None
  if digest(data) != expected: return None
  if mtime < time.time() - USED_AGAIN_AFTER:   # used again: the cache's size limit evicts older ones first
    for p in (path, path + ".sha256"): mark_used(p)
  return path

def store(name: str, data: bytes) -> str:
  """Write `<name>.so` and its checksum atomically; returns the path. Falls back to a private temporary directory
  when the cache directory cannot be written (a read-only home must not stop the emulator)."""
  for where in (emulator_dir, _private_dir):   # the fallback made only when needed: each one is a folder in /tmp
    try:
      base = where()
      os.makedirs(base, exist_ok=True)
      path = os.path.join(base, name + ".so")
      for target, payload in ((path, data), (path + ".sha256", digest(data).encode())):
        fd, tmp = tempfile.mkstemp(dir=base, suffix=".tmp")
        with os.fdopen(fd, "wb") as f: f.write(payload)
        os.replace(tmp, target)
      if base == emulator_dir(): note_write(len(data))
      return path
    except OSError: continue
  raise ToolchainError(f"cannot write the compiled kernel anywhere (tried {emulator_dir()} and {_private_dir()})")

@functools.cache
def _private_dir() -> str:
  """This process's folder for kernels the cache does not keep, removed at exit (a loaded library stays mapped)."""
  path = tempfile.mkdtemp(prefix="tinyplug-emulator-")
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  return path

# the bytes of the libraries every kernel links against, by path: the cache's size limit (another process's trim) may
# evict them while this process still links new kernels against them
_kept: dict[str, bytes] = {}

def keep(path: str) -> str:
  """Remember the bytes of the shared object at `path` (a support library), so `present` can put it back."""
  with open(path, "rb") as f: _kept[path] = f.read()
  return path

def present(path: str) -> str:
  """`path`, written back from the bytes `keep` remembered when the file is gone (evicted from the cache)."""
  if os.path.exists(path) or (data := _kept.get(path)) is None: return path
  name = os.path.basename(path)[:-len(".so")]
  if os.path.dirname(path) == emulator_dir(): return store(name, data)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f: f.write(data)
  return path

def build_shared(name: str, build) -> str:
  """The path of a verified `<name>.so`, building it with `build(out_path)` (into a temporary directory) when the
  cache has no good copy. With CACHELEVEL=0 the result goes to a private temporary directory only."""
  if CACHELEVEL >= 1 and (path := verified_path(name)) is not None: return path
  with tempfile.TemporaryDirectory(prefix="tinyplug-emu-") as tmp:
    out = os.path.join(tmp, name + ".so")
    build(out)
    with open(out, "rb") as f: data = f.read()
  if CACHELEVEL >= 1: return store(name, data)
  path = os.path.join(_private_dir(), name + ".so")
  with open(path, "wb") as f: f.write(data)
  return path
