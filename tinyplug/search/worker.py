"""A BEAM compile worker (`python -m tinyplug.search.worker`, started by `tinyplug.search.pool`): reads candidates
from stdin, lowers each with codegen and compiles it with the job's compiler, writes (ProgramSpec, binary) to
stdout. It never opens a device: the job carries the renderer and compiler the parent's device uses (pickled; a
plugin's compiler rebuilds itself from its settings) and the parent's settings (every ContextVar's value)."""
from __future__ import annotations
import os, pickle, sys
from typing import Any, BinaryIO

def _load_job(job: bytes) -> tuple[Any, Any, Any]:
  """(renderer, compiler, kernel graph) of a job, with the parent's settings applied; raises when they differ in a
  way that would build other programs than the parent would (another plugin set)."""
  from tinyplug.codegen import pipeline_key
  from tinyplug.helpers import ContextVar
  renderer, compiler, sink, settings, key = pickle.loads(job)
  for name, value in settings.items():
    if (var := ContextVar.registry.get(name)) is not None: var.value = value
  if (mine := pipeline_key()) != key:
    raise RuntimeError(f"the worker's pass pipeline ({mine[:12]}) is not the parent's ({key[:12]}): another plugin set")
  return renderer, compiler, sink

def serve(inp: BinaryIO, out: BinaryIO) -> None:
  from tinyplug.codegen import get_program
  from tinyplug.search.pool import read_frame, write_frame
  job_key, state = None, None
  while (msg := read_frame(inp)) is not None:
    key, job, opts = msg
    if job is not None:
      try: job_key, state = key, _load_job(job)
      except Exception as e:
        job_key, state = None, None
        write_frame(out, ("refused", f"{type(e).__name__}: {e}"))
        continue
    if key != job_key or state is None:
      write_frame(out, ("refused", "the worker does not hold this job"))
      continue
    renderer, compiler, sink = state
    try:
      spec = get_program(sink, renderer, opts=opts)
      reply = ("ok", spec, compiler.compile_program(spec))
    except Exception as e: reply = ("error", f"{type(e).__name__}: {e}")
    write_frame(out, reply)

def main() -> None:
  # the protocol owns the real stdout; anything printed (DEBUG lines, a compiler's chatter) goes to stderr
  out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  from tinyplug.codegen import pipeline_key
  pipeline_key()   # the plugins and the pass pipeline load now, while the parent gets its first candidates ready
  from tinyplug.search.pool import READY, write_frame
  write_frame(out, READY)   # the parent's build bound starts now, not while this process imported
  try: serve(sys.stdin.buffer, out)
  except KeyboardInterrupt: pass

if __name__ == "__main__":
  main()
