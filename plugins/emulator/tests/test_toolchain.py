"""How a kernel becomes a shared object: one clang run that compiles (its compiler in the same process), then the
linker command clang's driver would have run for the link, so a kernel starts clang once, not twice."""
from __future__ import annotations
import os, shlex, stat, subprocess, sys
import numpy as np

def _driver_link_job(flags: list[str], src: str, link_args: list[str], out: str) -> tuple[list[str], str]:
  """The linker job of clang's own compile-and-link of `src`, and the temporary object it links."""
  from tinyplug_emulator.toolchain import clang
  path, _ = clang()
  proc = subprocess.run([path, "-###", *flags, "-shared", src, "-x", "none", *link_args, "-o", out],
                        capture_output=True, text=True, check=True)
  jobs = [shlex.split(line) for line in proc.stderr.splitlines() if line.startswith(' "')]
  link = jobs[-1]
  objects = [a for a in link if a.endswith(".o") and os.path.basename(a).startswith(os.path.basename(src)[:-3])]
  assert len(jobs) == 2 and len(objects) == 1, jobs
  return link, objects[0]

def test_the_link_runs_the_drivers_own_linker_command(emu, tmp_path):
  """Same linker, same libraries, same order as the one-step compile-and-link the kernels were built with before."""
  from tinyplug_emulator.toolchain import _OBJ, _OUT, linker_command
  src = tmp_path / "k.cl"
  src.write_text("__kernel void k(__global float* restrict d) { d[0] = 1.0f; }\n")
  libs = emu.compiler.support_libraries()
  link_args = [*libs, "-lm", f"-Wl,-rpath,{os.path.dirname(libs[0])}"]
  out = str(tmp_path / "k.so")
  driver, obj = _driver_link_job(list(emu.dialect.compile_flags), str(src), link_args, out)
  ours = linker_command(tuple(link_args))
  assert ours is not None
  assert [obj if a == _OBJ else out if a == _OUT else a for a in ours] == driver

WRAPPER = """#!/bin/sh
echo "$@" >> {log}
exec {clang} "$@"
"""

KERNEL = """
import numpy as np
from tinyplug.device import Device
from tinyplug_emulator.settings import EMU_CLANG
dev = Device["MOCK+CL"]
dev.compiler.support_libraries()
open(EMU_CLANG.value + ".log", "w").close()   # from here on: the kernel's clang runs only
from tinyplug import Tensor
x = Tensor(np.arange(6, dtype=np.float32) + {tag}, device="MOCK+CL")
print((x * 3 + 1).numpy().tolist())
print((x - 2).numpy().tolist())
"""

def test_a_kernel_build_starts_clang_once_and_the_kernel_runs(emu, tmp_path):
  """In a fresh process with its own cache, two kernels: each one's only clang run compiles (`-c`), and the driver
  is asked for its linker command once (`-###`); the kernels compute the right values."""
  from tinyplug_emulator.toolchain import clang
  wrapper = tmp_path / "clang"
  wrapper.write_text(WRAPPER.format(log=f"{wrapper}.log", clang=clang()[0]))
  wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
  tag = int.from_bytes(os.urandom(2), "little")
  env = {**os.environ, "EMU_CLANG": str(wrapper), "XDG_CACHE_HOME": str(tmp_path / "cache")}
  r = subprocess.run([sys.executable, "-c", KERNEL.format(tag=tag)], env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  x = np.arange(6, dtype=np.float32) + tag
  assert r.stdout.split("\n")[:2] == [str((x * 3 + 1).tolist()), str((x - 2).tolist())]
  runs = [line.split() for line in (tmp_path / "clang.log").read_text().splitlines()]
  compiles = [a for a in runs if "-c" in a and "-shared" not in a]
  listings = [a for a in runs if "-###" in a]
  assert len(compiles) == 2 and len(listings) == 1 and len(runs) == 3, runs

def test_without_a_usable_listing_the_driver_links(emu, monkeypatch, tmp_path):
  """A clang whose `-###` listing is not understood still builds kernels: the link goes through the driver."""
  from tinyplug_emulator import toolchain
  from tinyplug_emulator.device import EmulatorCompiler
  monkeypatch.setattr(toolchain, "linker_command", lambda link_args: None)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  src = "__kernel void fallback_link(__global float* restrict d) { d[get_global_id(0)] = 7.0f; }\n"
  compiler = EmulatorCompiler(emu.dialect)
  lib = compiler.compile_cached(src)
  from tinyplug.device import ProgramSpec
  spec = ProgramSpec(name="fallback_link", uops=(), src=src, global_size=(4, 1, 1), local_size=(1, 1, 1), outs=(0,))
  buf = emu.allocator.alloc(16)
  try:
    emu.make_program(spec, lib)(buf, global_size=(4, 1, 1), local_size=(1, 1, 1))
    out = np.empty(4, np.float32)
    emu.allocator.copyout(memoryview(out).cast("B"), buf)
  finally: emu.allocator.free(buf, 16)
  assert out.tolist() == [7.0] * 4
