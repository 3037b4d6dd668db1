"""No core module imports a layer above its own (docs/architecture.md lists the layers), lazily or not; imports
only a type checker reads (under `if TYPE_CHECKING:`) do not count."""
import pathlib, re

CORE = pathlib.Path(__file__).resolve().parents[1] / "tinyplug"

# lowest first; a module may import its own layer and the ones below it
LAYERS = [
  {"uop", "dtype", "helpers", "events", "hookspecs", "caches", "diskcache", "cache_limit"},
  {"backend", "plugins"},
  {"renderer", "device", "runtime"},
  {"schedule"},
  {"codegen"},
  {"search", "passes"},
  {"engine.realize"},
  {"tensor", "tensor_ops", "gradient", "gradient_template"},
  {"engine.jit", "nn"},
  {"cli", "doctor", "testing", "__main__", "__init__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
IMPORT = re.compile(r"^(\s*)(?:from\s+(tinyplug(?:\.\w+)*)\s+import\s+([\w, ()]+)|import\s+(tinyplug(?:\.\w+)*))", re.M)

def layer_of(parts: list[str]) -> str:
  if not parts: return "__init__"
  if parts[0] == "engine": return "engine." + parts[1] if len(parts) > 1 and parts[1] in ("jit", "realize") else "engine.realize"
  return parts[0]

def imports(path: pathlib.Path):
  text = path.read_text()
  type_only = [m.span() for m in re.finditer(r"^if TYPE_CHECKING:\n(?:[ \t]+.*\n)+", text, re.M)]
  for m in IMPORT.finditer(text):
    if any(a <= m.start() < b for a, b in type_only): continue
    target = (m.group(2) or m.group(4)).split(".")[1:]
    if m.group(2) == "tinyplug":   # from tinyplug import events, helpers, ...
      for name in re.findall(r"\w+", m.group(3)): yield [name]
    else: yield target

def test_no_module_imports_a_higher_layer():
  bad = []
  for path in CORE.rglob("*.py"):
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__": parts = parts[:-1]
    mine = layer_of(parts)
    for target in imports(path):
      theirs = layer_of(target)
      if theirs in RANK and RANK[theirs] > RANK[mine]: bad.append(f"{'/'.join(parts)} ({mine}) imports tinyplug.{'.'.join(target)} ({theirs})")
  assert bad == []

def test_every_core_module_has_a_layer():
  for path in CORE.rglob("*.py"):
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__": parts = parts[:-1]
    assert layer_of(parts) in RANK, path

def test_only_ir_facts_live_in_a_uops_own_cache():
  # a layer's own state about nodes (buffers, a trace's node ids) lives in a UOpMap or a NodeField; a UOp's cache is for
  # IR facts and NodeField values, written only by the uop package; plugins never touch it
  writes = re.compile(r"\b_cache\s*\[[^]]*\]\s*=(?!=)|__setattr__\([^)]*[\"']_cache[\"']")
  bad = [str(p) for p in CORE.rglob("*.py") if "uop" not in p.relative_to(CORE).parts[:1] and writes.search(p.read_text())]
  plugins = CORE.parent / "plugins"
  bad += [str(p) for p in plugins.glob("*/src/**/*.py") if re.search(r"\._cache\b|\._cached\(", p.read_text())]
  assert bad == []

def test_uop_map_forgets_a_node_with_the_node():
  import gc
  from tinyplug.uop import UOp, UOpMap, dtypes
  m: UOpMap[str] = UOpMap()
  a = UOp.const(dtypes.int32, 123456789)
  m[a] = "kept"
  assert m.get(a) == "kept" and a in m and len(m) == 1 and list(m.items()) == [(a, "kept")]
  del a
  gc.collect()
  assert len(m) == 0
  b = UOp.const(dtypes.int32, 987654321)
  assert m.get(b, "none") == "none" and m.setdefault(b, "x") == "x" and m.pop(b) == "x" and b not in m
