"""`Tensor.rearrange`: einops-style axis patterns ("b c (h w) -> b (c h) w") as one reshape, permute, reshape."""
from __future__ import annotations
import math, re
from typing import Any

_TOKEN = re.compile(r"\.\.\.|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+|\S")

def _parse(side: str, pattern: str) -> list[list[str]]:
  """Groups of one side: `b (h w) 1` -> [["b"], ["h", "w"], []] (a "1" is a group without names)."""
  groups: list[list[str]] = []
  current: list[str] | None = None
  for tok in _TOKEN.findall(side):
    if tok == "(":
      if current is not None: raise ValueError(f"rearrange {pattern!r}: nested parentheses")
      current = []
    elif tok == ")":
      if current is None: raise ValueError(f"rearrange {pattern!r}: ')' without '('")
      groups.append(current); current = None
    elif tok == "..." or tok.isidentifier() or tok.isdigit():
      if tok.isdigit() and tok != "1":
        raise ValueError(f"rearrange {pattern!r}: only 1 may stand for an axis, not {tok}")
      name = [] if tok == "1" else [tok]
      if current is None: groups.append(name)
      else: current.extend(name)
    else: raise ValueError(f"rearrange {pattern!r}: unexpected {tok!r}")
  if current is not None: raise ValueError(f"rearrange {pattern!r}: '(' without ')'")
  return groups

def _expand_ellipsis(groups: list[list[str]], n: int) -> list[list[str]]:
  out: list[list[str]] = []
  for g in groups:
    if g == ["..."]: out.extend([[f"...{i}"] for i in range(n)])
    elif "..." in g: out.append([x for name in g for x in ([f"...{i}" for i in range(n)] if name == "..." else [name])])
    else: out.append(g)
  return out

def rearrange(t: Any, pattern: str, **sizes: int) -> Any:
  if pattern.count("->") != 1: raise ValueError(f"rearrange {pattern!r}: needs one '->'")
  lhs_s, rhs_s = pattern.split("->")
  lhs, rhs = _parse(lhs_s, pattern), _parse(rhs_s, pattern)
  n_ell = t.ndim - (len(lhs) - 1) if any(g == ["..."] for g in lhs) else 0
  lhs, rhs = _expand_ellipsis(lhs, n_ell), _expand_ellipsis(rhs, n_ell)
  if len(lhs) != t.ndim:
    raise ValueError(f"rearrange {pattern!r}: {len(lhs)} axes on the left, the tensor has {t.ndim}")
  left = [x for g in lhs for x in g]
  right = [x for g in rhs for x in g]
  if len(set(left)) != len(left) or len(set(right)) != len(right) or set(left) != set(right):
    raise ValueError(f"rearrange {pattern!r}: each name must appear once on each side")
  known = dict(sizes)
  for g, dim in zip(lhs, t.shape):
    missing = [x for x in g if x not in known]
    rest = math.prod(known[x] for x in g if x in known)
    if len(missing) > 1: raise ValueError(f"rearrange {pattern!r}: give the sizes of all but one of {g}")
    if missing:
      if rest == 0 or dim % rest: raise ValueError(f"rearrange {pattern!r}: {g} does not split a dim of size {dim}")
      known[missing[0]] = dim // rest
    elif rest != dim: raise ValueError(f"rearrange {pattern!r}: {g or '1'} has size {rest}, the dim {dim}")
  x = t.reshape(tuple(known[n] for n in left))
  x = x.permute(tuple(left.index(n) for n in right))
  return x.reshape(tuple(math.prod(known[n] for n in g) for g in rhs))
