"""Helpers that record real traces for the tests, through the same Recorder the plugin uses."""
from __future__ import annotations
import contextlib, os
from tinyplug import events
from tinyplug_viz_web.capture import Recorder
from tinyplug_viz_web.plugin import CAPTURED_KINDS

@contextlib.contextmanager
def recording(folder: str, run: str = "test-run"):
  """Record everything the core emits inside the block into `folder` (no plugin manager involved)."""
  rec = Recorder(os.path.abspath(folder), run, worker=False)
  subs = [(kind, getattr(rec, f"on_{kind}")) for kind in CAPTURED_KINDS]
  for kind, cb in subs: events.subscribe(kind, cb, "viz_web-test")
  try: yield rec
  finally:
    for kind, cb in subs: events.unsubscribe(kind, cb)
    rec.writer.close()

def add_two_vectors() -> None:
  """The seed's first example on hand-built UOps: (a + b).realize() on two empty float vectors of 3."""
  from tinyplug.engine.realize import realize
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  a = UOp.new_buffer("PYTHON", 3, dtypes.float)
  b = UOp.new_buffer("PYTHON", 3, dtypes.float)
  realize([UOp(Ops.ADD, dtypes.float, (a, b))])

def simplify_example() -> None:
  """A kernel whose symbolic pass removes a multiply by 1 and an add of 0 (the seed's third example)."""
  from tinyplug.engine.realize import realize
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  c = UOp.new_buffer("PYTHON", 16, dtypes.float)
  def k(v: float) -> UOp: return UOp.const(dtypes.float, v)
  # built with UOp(...) directly: the operators may already fold x*1 and x+0
  x = UOp(Ops.ADD, dtypes.float, (UOp(Ops.MUL, dtypes.float, (c, k(1.0))), k(0.0)))
  realize([UOp(Ops.MUL, dtypes.float, (x, k(2.0)))])

def big_rewrite(n_terms: int = 1250) -> None:
  """One graph_rewrite on a ~5,000-node graph (a balanced sum of x_i*1 + 0 terms) with n_terms*2 matches."""
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  from tinyplug.uop.rewrite import graph_rewrite
  from tinyplug.uop.symbolic import symbolic
  one, zero = UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 0)
  terms = [UOp(Ops.ADD, dtypes.int, (UOp(Ops.MUL, dtypes.int, (UOp.variable(f"v{i}", 0, 100 + i), one)), zero))
           for i in range(n_terms)]
  while len(terms) > 1:
    terms = [UOp(Ops.ADD, dtypes.int, (terms[i], terms[i + 1])) if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  with events.scope("kernel", "big_graph"):
    graph_rewrite(terms[0].sink(), symbolic, name="big symbolic")

EVIL_NAME = 'q" onmouseover="window.__pwned=1" x=".py'

def evil_pattern_file(folder: str) -> None:
  """A rewrite whose pattern lives in a file named like an HTML attribute injection (issue 19, attack 1)."""
  import importlib.util
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  from tinyplug.uop.rewrite import graph_rewrite
  path = os.path.join(folder, EVIL_NAME)
  with open(path, "w") as f:
    f.write("from tinyplug.uop.ops import Ops\nfrom tinyplug.uop.upat import UPat, PatternMatcher\n"
            "pm = PatternMatcher([(UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var('y'),)),)), lambda y: y)])\n")
  spec = importlib.util.spec_from_file_location("evil_patterns", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  x = UOp.variable("x", 0, 10)
  with events.scope("kernel", "evil_kernel"):
    graph_rewrite(UOp(Ops.NEG, dtypes.int, (UOp(Ops.NEG, dtypes.int, (x,)),)).sink(), mod.pm, name="evil pass")

def fusion_example() -> None:
  """A schedule with a row kernel (softmax over rows, on CPU) and reductions that need kernels of their own."""
  from tinyplug.tensor import Tensor
  x = Tensor.empty(4, 8)
  (x.softmax(-1) + (x @ Tensor.empty(8, 8)).max(0)).realize()
  Tensor.empty(2, 40000).softmax(-1).realize()   # rows over ROW_FUSE_MAX: one kernel per reduction

def many_steps(n: int = 4) -> None:
  """A kernel whose "expand" pass is n substitutes in a row (each swaps a shared constant), on a graph with a REDUCE
  whose arg is an enum: for step groups, folded constants, clean labels and substitute call sites."""
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  x, one = UOp.variable("x", 0, 10), UOp.const(dtypes.int, 1)
  rng = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 16),), 0)
  g = UOp(Ops.SINK, dtypes.void, (UOp(Ops.ADD, dtypes.int, (UOp(Ops.MUL, dtypes.int, (x, one)), one)),
                                  UOp(Ops.REDUCE, dtypes.int, (UOp(Ops.ADD, dtypes.int, (x, one)), rng), Ops.ADD)))
  with events.scope("kernel", "many_steps"):
    with events.scope("pass", "expand"):
      for i in range(n):
        new = UOp.const(dtypes.int, i + 2)
        g = g.substitute({one: new}, name="swap const")   # SUBSTITUTE_LINE
        one = new

def deep_chain(n: int = 300) -> None:
  """One rewrite of a chain of n*2 dependent ops (x*3+1, n times): a graph far deeper than wide."""
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  from tinyplug.uop.rewrite import graph_rewrite
  from tinyplug.uop.symbolic import symbolic
  x = UOp.variable("x", 0, 10)
  for i in range(n):
    x = UOp(Ops.ADD, dtypes.int, (UOp(Ops.MUL, dtypes.int, (x, UOp.const(dtypes.int, 3))), UOp.const(dtypes.int, i)))
  with events.scope("kernel", "deep_chain"):
    graph_rewrite(x.sink(), symbolic, name="deep symbolic")

def user_calls() -> None:
  """Work caused by two lines of user code (each realizes kernels), and a profile span nested in another."""
  from tinyplug.tensor import Tensor
  a = Tensor.empty(4, 4).exp().realize()   # USER_LINE_A
  (a.sum(0) * 2).realize()   # USER_LINE_B
  with events.profile_span("schedule", "outer span"):
    with events.profile_span("codegen", "inner span"):
      with events.profile_span("compile", "innermost span"): pass

def trace_lines(folder: str) -> list[str]:
  """The JSON lines of the (first) trace file of a run folder, decompressed."""
  from tinyplug_viz_web.reader import run_files
  import zlib
  data = open(run_files(folder)[0], "rb").read()
  d = zlib.decompressobj()
  return (d.decompress(data) + d.flush()).decode().splitlines()

def write_compressed(path: str, lines: list[str], finish: bool = True) -> None:
  """Write JSON lines as a trace file does: one zlib stream, sync-flushed after every line."""
  import zlib
  z = zlib.compressobj()
  with open(path, "wb") as f:
    for ln in lines: f.write(z.compress((ln + "\n").encode()) + z.flush(zlib.Z_SYNC_FLUSH))
    if finish: f.write(z.flush())
