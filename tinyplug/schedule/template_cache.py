"""Schedule templates on disk (CACHELEVEL >= 1), so a warm start does not schedule a graph an earlier process did.

A template (cache.py) is a graph's schedule in terms of positions in its structure: kernel ASTs over parameters, the
buffers it makes, what each realized node becomes. Within a process the structure key finds it; on disk the key
hashes that structure written out without ids (each node's op, dtype, arg and sources by position), the scheduler's
pass fingerprint and the source of tinyplug and of the modules its passes come from, every setting, and the
renderer of each device in the graph (the pack pass reads its machine). The value is JSON of our own, never pickle,
stored only when it reads back as the very same template; entries are checked against their digest before use
(tinyplug.diskcache). Skipped while rewrites or schedules are recorded (the visualizer shows the scheduler's work)."""
from __future__ import annotations
import hashlib, json
from typing import Any
from tinyplug import events
from tinyplug.diskcache import SealedTable, modules_text, pass_modules, renderer_text, settings_text
from tinyplug.helpers import CACHELEVEL
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp, uop_maker
from tinyplug.uop.rows import NotStorable, build_uops, dec_arg, enc_arg, enc_dtype, graph_rows, _dec_dtype_fast
from tinyplug.schedule.cache import Template

TEMPLATES = SealedTable("codegen.sqlite", "schedule_templates_v1", "schedule templates")
_FORMAT = "1"

def _on() -> bool:
  return CACHELEVEL >= 1 and not events.enabled("rewrite") and not events.enabled("schedule")

_CUSTOM_GRAD = Ops.CUSTOM_GRAD._value_

def _structure_rows(key: tuple, nodes: list[UOp]) -> list:
  """The structure key with each dtype written out (the key holds its id): the same text in every process. A custom
  gradient's rule (a function) is left out: the scheduler drops the marker before anything else."""
  texts: dict[int, Any] = {}
  rows = []
  for (op, dtid, arg, srcs), n in zip(key, nodes):
    if (dt := texts.get(dtid)) is None: dt = texts[dtid] = enc_dtype(n.dtype)
    rows.append([op, dt, None if op == _CUSTOM_GRAD else enc_arg(arg), srcs])
  return rows

def _devices(nodes: list[UOp]) -> list[str]:
  names: set[str] = set()
  for n in nodes:
    if n.op is Ops.DEVICE: names.update([n.arg] if isinstance(n.arg, str) else n.arg)
  return sorted(names)

def _renderer_text(device: str) -> str:
  """The renderer's part of the key; '-' for a device that runs no kernels (a file's DISK device: the passes see no
  renderer there either)."""
  from tinyplug.device import renderer_of
  return "-" if (r := renderer_of(device)) is None else renderer_text(r)

def template_key(found: tuple) -> str | None:
  """The disk key of the schedule of the graph whose structure() is `found`, or None (no disk cache, rewrites being
  recorded, or something in the graph has no stable text)."""
  if not _on() or len(found[0]) != len(found[1]): return None
  from tinyplug.schedule.passes import schedule_key, schedule_steps
  try: structure = json.dumps(_structure_rows(found[0], found[1]), separators=(",", ":"))
  except NotStorable: return None
  text = "\n".join([_FORMAT, schedule_key(), settings_text(), *modules_text({"tinyplug"} | pass_modules(schedule_steps())),
                    *(f"{d}: {_renderer_text(d)}" for d in _devices(found[1])), structure])
  return hashlib.sha256(text.encode()).hexdigest()

# ---------------- the value ----------------

def _enc_step(step: Any) -> Any:
  if type(step) is int: return step
  _, srcs, op, dtype, arg = step
  return [op.name, enc_dtype(dtype), enc_arg(arg), list(srcs)]

def _dec_step(x: Any) -> Any:
  if type(x) is int: return x
  op, dt, arg, srcs = x
  op, dtype, arg = Ops[op], _dec_dtype_fast(dt), dec_arg(arg)
  return (uop_maker(op, dtype, arg), tuple(srcs), op, dtype, arg)

def encode(t: Template) -> bytes:
  """The template as JSON bytes (every kernel AST in one graph, shared nodes once); NotStorable when something has no
  JSON form or would not come back the same."""
  asts = list(dict.fromkeys(ast for ast, *_ in t.items if ast is not None))
  at = {a: i for i, a in enumerate(asts)}
  doc = {"outs": [[dev, size, enc_dtype(dt)] for dev, size, dt in t.outs],
         "asts": graph_rows(UOp(Ops.SINK, dtypes.void, tuple(asts))) if asts else [],
         "items": [[-1 if ast is None else at[ast], list(refs), meta, enc_arg(copy_arg), var_vals]
                   for ast, refs, meta, copy_arg, var_vals in t.items],
         "becomes": [[p, [_enc_step(s) for s in recipe]] for p, recipe in t.becomes]}
  try: data = json.dumps(doc, separators=(",", ":")).encode()
  except (TypeError, ValueError) as e: raise NotStorable(f"template ({e})") from e
  if not _same(decode(data), t): raise NotStorable("the template does not come back the same")
  return data

def decode(data: bytes) -> Template:
  doc = json.loads(data)
  asts = build_uops(doc["asts"])[-1].src if doc["asts"] else ()
  outs = tuple((dev, size, _dec_dtype_fast(dt)) for dev, size, dt in doc["outs"])
  items = tuple((None if a < 0 else asts[a], tuple(refs), meta, dec_arg(copy_arg), var_vals)
                for a, refs, meta, copy_arg, var_vals in doc["items"])
  becomes = tuple((p, tuple(_dec_step(s) for s in recipe)) for p, recipe in doc["becomes"])
  return Template(outs, items, becomes)

def _plain(t: Template) -> tuple:
  """The template without its makers (functions, new each time) and with each AST by identity (both alive: the same
  graph read back is the very same nodes)."""
  steps = lambda r: tuple(s if type(s) is int else s[1:] for s in r)
  return (t.outs, tuple((id(a), refs, meta, ca, vv) for a, refs, meta, ca, vv in t.items),
          tuple((p, steps(r)) for p, r in t.becomes))

def _same(a: Template, b: Template) -> bool: return _plain(a) == _plain(b)

def load(key: str) -> Template | None:
  """The template an earlier process stored under `key` (template_key), or None."""
  if (data := TEMPLATES.get(key)) is None: return None
  try: return decode(data)
  except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:   # intact but unusable
    TEMPLATES.drop(key, f"unreadable template ({type(e).__name__}: {e})")
    return None

def store(key: str, template: Template) -> None:
  try: TEMPLATES.put(key, encode(template))
  except NotStorable: pass
