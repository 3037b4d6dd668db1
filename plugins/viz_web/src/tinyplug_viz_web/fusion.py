"""How a schedule split its tensor graph into kernels, and why: which kernel computes each node, which kernel reads
which, and for any two kernels the rule that kept them apart. Plain data from a loaded trace (the scheduler's
`decisions`, recorded by tinyplug.schedule.explain); shared by the web UI and `tinyplug viz cli`."""
from __future__ import annotations
from dataclasses import dataclass, field
from tinyplug_viz_web.reader import Context, Trace

STOP_OPS = frozenset({"BUFFER", "DEVICE", "UNIQUE", "AFTER", "DEFINE_VAR", "BIND"})
SHARED = -1          # a node computed by several kernels (each recomputes it), or a constant they share

@dataclass
class Split:
  """`group` (tensor-graph node id -> kernel index, or SHARED) and `reads` (kernel index -> the kernels whose output
  it reads) walk the tensor graph: they are computed on first use, not when a trace opens."""
  kernels: list[dict]                         # {i, name, ctx, node, rule, detail, loc}
  trace: Trace
  realized: dict[int, int]                    # node a kernel computes -> kernel index
  decisions: list[dict] = field(default_factory=list)
  by_node: dict[int, dict] = field(default_factory=dict)
  alias: dict[int, int] = field(default_factory=dict)   # a node made for the split step -> the node it stands for
  _walked: tuple[dict, dict] | None = None

  @property
  def group(self) -> dict[int, int]: return self._walk()[0]
  @property
  def reads(self) -> dict[int, set[int]]: return self._walk()[1]

  def _walk(self) -> tuple[dict, dict]:
    if self._walked is not None: return self._walked
    nodes, realized = self.trace.nodes, self.realized
    group: dict[int, int] = {}
    reads: dict[int, set[int]] = {k: set() for k in range(len(self.kernels))}
    for n, k in realized.items():
      stack, seen = [n], {n}
      while stack:
        x = stack.pop()
        if x in group and group[x] != k: group[x] = SHARED
        else: group.setdefault(x, k)
        for src in nodes[x].src:
          if src in realized: reads[k].add(realized[src]); continue
          if src in seen or nodes[src].op in STOP_OPS: continue
          seen.add(src)
          stack.append(src)
    for k in reads: reads[k].discard(k)
    for new, old in self.alias.items(): group[new] = group.get(old, SHARED)
    self._walked = (group, reads)
    return self._walked

def schedule_split(trace: Trace, c: Context, names: list[str]) -> Split | None:
  """The split of schedule context `c` (None when the trace has no decisions for it: an older trace, or a
  schedule reused from the cache, which runs no scheduler)."""
  s = c.schedule
  if s is None or not s.get("decisions"): return None
  by_node = {d["node"]: d for d in s["decisions"]}
  realized = {it["node"]: k for k, it in enumerate(s["items"]) if it.get("node") is not None}
  kernels = []
  for k, it in enumerate(s["items"]):
    d = by_node.get(it.get("node"), {})
    kernels.append({"i": k, "name": names[k], "ctx": it["ctx"], "node": it.get("node"), "rule": d.get("rule", ""),
                    "detail": d.get("detail", ""), "loc": f"{d['file']}:{d['line']}" if d else ""})
  return Split(kernels, trace, realized, s["decisions"], by_node)

def boundaries(split: Split) -> list[dict]:
  """Every producer -> consumer pair of kernels, with the rule that made the producer a kernel of its own."""
  out = []
  for b, srcs in sorted(split.reads.items()):
    for a in sorted(srcs):
      ka = split.kernels[a]
      out.append({"a": a, "b": b, "rule": ka["rule"], "detail": ka["detail"], "loc": ka["loc"]})
  return out

def why_not_fused(split: Split, a: int, b: int) -> dict:
  """Why kernels a and b are two kernels: {a, b, relation, rule, detail, loc, text}."""
  n = len(split.kernels)
  if not (0 <= a < n and 0 <= b < n): raise KeyError(f"kernels are numbered 0..{n - 1}, not {a} and {b}")
  ka, kb = split.kernels[a], split.kernels[b]
  if a == b: return {"a": a, "b": b, "relation": "same", "rule": "", "detail": "", "loc": "",
                     "text": f"{ka['name']} is one kernel"}
  if a in split.reads[b] or b in split.reads[a]:
    prod, cons = (ka, kb) if a in split.reads[b] else (kb, ka)
    return {"a": a, "b": b, "relation": "reads", "producer": prod["i"], "consumer": cons["i"], "rule": prod["rule"],
            "detail": prod["detail"], "loc": prod["loc"],
            "text": f"{cons['name']} reads the output of {prod['name']}; {prod['name']} is a kernel of its own because "
                    f"[{prod['rule']}] {prod['detail']}"}
  return {"a": a, "b": b, "relation": "independent", "rule": "independent", "loc": "",
          "detail": "neither reads the other's output; the scheduler fuses a producer into its consumer, never two "
                    "independent kernels",
          "text": f"{ka['name']} and {kb['name']} share no data (neither reads the other's output): the scheduler "
                  f"fuses a producer into its consumer, never two independent kernels. {ka['name']}: [{ka['rule']}] "
                  f"{ka['detail']}. {kb['name']}: [{kb['rule']}] {kb['detail']}"}

def find_kernel(split: Split, name: str) -> int:
  """A kernel's index from its number ("0"), its name ("E_4") or a unique part of it."""
  low = name.strip().lower()
  if low.isdigit() and int(low) < len(split.kernels): return int(low)
  exact = [k["i"] for k in split.kernels if k["name"].lower() == low]
  if exact: return exact[0]
  part = [k["i"] for k in split.kernels if low in k["name"].lower()]
  if len(part) == 1: return part[0]
  names = ", ".join(k["name"] for k in split.kernels)
  raise KeyError(f"no kernel {name!r} in this schedule ({'ambiguous' if part else 'kernels'}: {names})")
