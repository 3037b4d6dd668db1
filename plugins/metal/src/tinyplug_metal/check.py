"""A check of rendered MSL without Apple's compiler: clang's C++ for OpenCL with a `metal_stdlib` stand-in
(include/metal_stdlib) parses the kernel as C++ with Metal's address spaces mapped to OpenCL's and no generic
address space, so syntax errors, unknown functions and address-space mistakes (a `device` pointer cast to a
`thread` one, a `threadgroup` array passed as `device`) are errors. It proves the text is well formed and its
address spaces consistent, not that Apple's compiler accepts it (on a Mac, Metal compiles it for real).

One text rewrite, as in the emulator: Metal's vector constructors `float4(a, b, c, d)` become OpenCL's vector
literals `(float4)(a, b, c, d)` (C++ for OpenCL has no constructor syntax for vectors); nothing else changes.

`python -m tinyplug_metal.check kernel.metal ...` checks files; `check_msl(src)` raises MSLCheckError."""
from __future__ import annotations
import functools, os, re, shutil, subprocess, sys, tempfile
from tinyplug.helpers import env_str

STANDIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
CLANGS = ("clang-19", "clang-20", "clang-21", "clang-18", "clang")
FLAGS = ("-x", "clcpp", "-cl-std=clc++2021", "-fsyntax-only", "-Wno-unknown-attributes",
         # no generic address space: an unqualified pointer is private (Metal's `thread`), as in Metal
         "-Xclang", "-cl-ext=-__opencl_c_generic_address_space,-__opencl_c_pipes,-__opencl_c_device_enqueue")

_VECTOR_CTOR = re.compile(r"(?<![\w)])((?:float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)[234])\(")

def as_clcpp(src: str) -> str:
  """The source as clang checks it: vector constructors as OpenCL vector literals."""
  return _VECTOR_CTOR.sub(r"(\1)(", src)

class MSLCheckError(ValueError):
  """The kernel failed the check; the message has clang's diagnostics."""

@functools.cache
def find_clang() -> tuple[str | None, str]:
  """(path, '') of a clang that parses C++ for OpenCL 2021 (METAL_CHECK_CLANG, else clang-19, ...), or (None, why)."""
  names = [env_str("METAL_CHECK_CLANG")] if env_str("METAL_CHECK_CLANG") else list(CLANGS)
  for name in names:
    if (path := shutil.which(name)) is not None and _works(path): return path, ""
  return None, f"no clang that parses C++ for OpenCL 2021 found (tried {', '.join(names)}; set METAL_CHECK_CLANG)"

def _works(path: str) -> bool:
  probe = "#include <metal_stdlib>\nkernel void k(device float* a) { a[0] = 1.0f; }\n"
  try: out = subprocess.run([path, *FLAGS, "-I", STANDIN_DIR, "-"], input=probe,
                            capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.TimeoutExpired): return False
  return out.returncode == 0

def check_msl(src: str, name: str = "kernel.metal") -> None:
  """Raise MSLCheckError with clang's diagnostics if `src` fails the check (RuntimeError: no suitable clang)."""
  clang, why = find_clang()
  if clang is None: raise RuntimeError(why)
  with tempfile.TemporaryDirectory(prefix="tinyplug-mslcheck-") as tmp:
    path = os.path.join(tmp, name)
    with open(path, "w") as f: f.write(as_clcpp(src))
    out = subprocess.run([clang, *FLAGS, "-I", STANDIN_DIR, path], capture_output=True, text=True, timeout=120)
  if out.returncode != 0: raise MSLCheckError(f"{name} fails the MSL check:\n{out.stderr.replace(tmp + os.sep, '')}")

def main(argv: list[str]) -> int:
  if not argv:
    print("usage: python -m tinyplug_metal.check kernel.metal ...", file=sys.stderr)
    return 2
  failed = 0
  for p in argv:
    with open(p) as f: src = f.read()
    try: check_msl(src, os.path.basename(p))
    except MSLCheckError as e:
      failed += 1
      print(e, file=sys.stderr)
  return 1 if failed else 0

if __name__ == "__main__": sys.exit(main(sys.argv[1:]))
