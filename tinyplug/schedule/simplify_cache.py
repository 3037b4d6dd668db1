"""Kernel simplification results on disk (CACHELEVEL >= 1), so a warm start does not rewrite every kernel AST again.

The scheduler simplifies each kernel's AST with the core's `symbolic` rules (index math: (x+3)+4 is x+7) before
anything is looked up by it; with the codegen cache warm that rewrite was most of a first step's scheduling. The
rules are pure (no settings, no context), so the result depends only on the AST and on tinyplug's source: the key
hashes those two. The value is the simplified graph in the rows form of the codegen cache (no pickle), stored only
when it reads back as the very same graph. Skipped while rewrites are recorded (the visualizer must see them)."""
from __future__ import annotations
import hashlib, json
from tinyplug import events
from tinyplug.diskcache import SealedTable, package_digest
from tinyplug.helpers import CACHELEVEL
from tinyplug.uop.ops import UOp
from tinyplug.uop.rows import NotStorable, build_uops, graph_rows, graph_text

SIMPLIFIED = SealedTable("codegen.sqlite", "simplified_v1", "kernel simplification")
_FORMAT = "1"

def simplify_key(ast: UOp) -> str | None:
  """The disk key of simplifying `ast`, or None when the disk cache is off or rewrites are being recorded."""
  if CACHELEVEL < 1 or events.enabled("rewrite"): return None
  return hashlib.sha256("\n".join([_FORMAT, package_digest("tinyplug"), graph_text(ast)]).encode()).hexdigest()

def _encode(root: UOp) -> bytes: return json.dumps(graph_rows(root), separators=(",", ":")).encode()
def _decode(data: bytes) -> UOp: return build_uops(json.loads(data))[-1]

def load(key: str) -> UOp | None:
  if (data := SIMPLIFIED.get(key)) is None: return None
  try: return _decode(data)
  except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:   # intact but unusable
    SIMPLIFIED.drop(key, f"unreadable graph ({type(e).__name__}: {e})")
    return None

def store(key: str, simplified: UOp) -> None:
  try: data = _encode(simplified)
  except NotStorable: return
  if _decode(data) is simplified: SIMPLIFIED.put(key, data)   # only what comes back as the very same graph
