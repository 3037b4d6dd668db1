"""Codegen results on disk, so a warm start skips codegen as it already skips compiling (CACHELEVEL >= 1).

A kernel's ProgramSpec is stored under a key that hashes everything its lowering depends on: the kernel AST (its
full text, with its name), the renderer (class and settings), the ordered pass pipeline, the explicit optimisation
actions, every setting except DEBUG (ContextVars and documented environment variables), and the source files of tinyplug, of the renderer's package and of every
plugin pass; a change to any of them misses instead of reusing stale code. The linear program is stored too
(runtimes read it) in a JSON form of our own, never pickle; a program that would not come back as the very same
UOps is not stored. Entries are checked against their digest before use (tinyplug.diskcache)."""
from __future__ import annotations
import hashlib, json
from dataclasses import fields
from typing import Any
from tinyplug.backend import ProgramSpec, Renderer
from tinyplug.uop.ops import UOp
from tinyplug.uop.rows import NotStorable, build_uops, enc_arg, enc_dtype, graph_text
from tinyplug.diskcache import SealedTable, modules_text, pass_modules, renderer_text, settings_text

PROGRAMS = SealedTable("codegen.sqlite", "programs_v1", "codegen")
_FORMAT = "2"


# ---------------- the key ----------------

def key_context(renderer: Renderer, steps: tuple) -> tuple[str, str]:
  """What every key of this renderer and pipeline shares (its renderer, passes, settings and sources), as the text
  before and after a kernel's name and actions: worked out once for a batch of kernels lowered together."""
  from tinyplug.hookspecs.passes import pipeline_fingerprint
  modules = {"tinyplug", type(renderer).__module__} | pass_modules(steps)
  return (renderer_text(renderer) + "\n" + pipeline_fingerprint(steps),
          "\n".join([settings_text(), *modules_text(modules)]))

def program_key(name: str, ast: UOp, renderer: Renderer, opts: Any, steps: tuple,
                context: tuple[str, str] | None = None) -> str:
  """The key of `ast` lowered for `renderer`; `context`: key_context(renderer, steps), when the caller has it."""
  head, tail = key_context(renderer, steps) if context is None else context
  text = "\n".join([_FORMAT, name, head, repr(opts), tail, graph_text(ast)])
  return hashlib.sha256(text.encode()).hexdigest()

# ---------------- the value: a ProgramSpec as JSON ----------------

def encode(spec: ProgramSpec) -> bytes:
  """The spec as two lines of JSON, its launch fields and then the linear program's rows (a warm start parses only
  the first: the rows are ~85% of the parse); NotStorable when something has no JSON form or would not come back the
  same."""
  index = {u: i for i, u in enumerate(spec.uops)}
  if len(index) != len(spec.uops) or any(s not in index for u in spec.uops for s in u.src): raise NotStorable("uops")
  doc = {"name": spec.name, "src": spec.src, "global_size": list(spec.global_size),
         "local_size": None if spec.local_size is None else list(spec.local_size),
         "vars": [index[v] for v in spec.vars], "outs": list(spec.outs), "ins": list(spec.ins),
         "opts": [[o.op.name, o.axis, o.arg] for o in spec.applied_opts], "estimates": spec.estimates,
         "thread_split": spec.thread_split, "work": spec.work, "shared_trips": spec.shared_trips,
         "buffers": spec.buffer_count}
  rows = [[u.op.name, enc_dtype(u.dtype), enc_arg(u.arg), [index[s] for s in u.src]] for u in spec.uops]
  data = json.dumps(doc, separators=(",", ":")).encode() + b"\n" + json.dumps(rows, separators=(",", ":")).encode()
  back = decode(data)
  if back.uops != spec.uops or any(a is not b for a, b in zip(back.uops, spec.uops)) or back != spec:
    raise NotStorable("the program does not come back the same")
  return data

class StoredProgram(ProgramSpec):
  """A ProgramSpec read back from the cache whose linear program (`uops`) is built from the stored rows the first
  time something reads it (the rows' JSON is parsed then too). Runtimes that launch from `src` and the launch fields
  (cpu_llvm, the GPU runtimes) never do, so a warm start skips parsing and building ~150 UOps per kernel; the python
  and emulator runtimes read them and get the very same UOps as an eager decode. Compares and hashes as the
  ProgramSpec it stands for."""
  def __getattr__(self, name: str) -> Any:
    rows = self.__dict__.get("_rows") if name == "uops" else None
    if rows is None: raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    uops = build_uops(json.loads(rows))
    object.__setattr__(self, "uops", uops)
    self.__dict__.pop("_rows", None)
    return uops
  def __eq__(self, other: Any) -> bool:
    if not isinstance(other, ProgramSpec): return NotImplemented
    return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(ProgramSpec) if f.compare)
  __hash__ = ProgramSpec.__hash__
  @property
  def buffer_count(self) -> int: return self.__dict__["_buffer_count"]
  @property
  def shared_trips(self) -> int | None:   # stored with the program (an entry from before it: from the UOps)
    return self.__dict__["_shared_trips"] if "_shared_trips" in self.__dict__ else ProgramSpec.shared_trips.fget(self)

def decode(data: bytes, lazy: bool = False) -> ProgramSpec:
  """The ProgramSpec of `encode`'s bytes; with `lazy`, a StoredProgram that builds its UOps when they are read."""
  from tinyplug.codegen.kernel import Opt, OptOps
  head, newline, rows_text = bytes(data).partition(b"\n")
  if not newline: raise ValueError("no program rows")
  doc = json.loads(head)
  lazy = lazy and doc["thread_split"] is not None and doc["work"] is not None and not doc["vars"]
  uops = None if lazy else build_uops(json.loads(rows_text))
  values = dict(name=doc["name"], uops=uops, src=doc["src"], global_size=tuple(doc["global_size"]),
                local_size=None if doc["local_size"] is None else tuple(doc["local_size"]),
                vars=() if lazy else tuple(uops[i] for i in doc["vars"]), outs=tuple(doc["outs"]),
                ins=tuple(doc["ins"]),
                applied_opts=tuple(Opt(OptOps[n], a, g) for n, a, g in doc["opts"]), estimates=doc["estimates"],
                thread_split=doc["thread_split"], work=doc["work"])
  if not lazy: return ProgramSpec(**values)
  if type(buffers := doc["buffers"]) is not int: raise TypeError("buffers")
  spec = object.__new__(StoredProgram)
  for k, v in values.items():
    if k != "uops": object.__setattr__(spec, k, v)
  object.__setattr__(spec, "_rows", rows_text)
  object.__setattr__(spec, "_buffer_count", buffers)
  if "shared_trips" in doc:
    if not isinstance(trips := doc["shared_trips"], (int, type(None))): raise TypeError("shared_trips")
    object.__setattr__(spec, "_shared_trips", trips)
  return spec

def load(key: str) -> ProgramSpec | None:
  return None if (data := PROGRAMS.get(key)) is None else _decoded(key, data)

def load_many(keys: list[str]) -> dict[str, ProgramSpec]:
  """`load` of many keys in one read: {key: program} of those found and usable."""
  found = {key: _decoded(key, data) for key, data in PROGRAMS.get_many(keys).items()}
  return {key: spec for key, spec in found.items() if spec is not None}

def _decoded(key: str, data: bytes) -> ProgramSpec | None:
  try: return decode(data, lazy=True)
  except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:   # intact but unusable (an older form)
    PROGRAMS.drop(key, f"unreadable program ({type(e).__name__}: {e})")
    return None

def store(key: str, spec: ProgramSpec) -> None:
  try: PROGRAMS.put(key, encode(spec))
  except NotStorable: pass
