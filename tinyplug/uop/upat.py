"""UPat (patterns over UOps) and PatternMatcher (a table of pattern -> rewrite function, dispatched by op)."""
from __future__ import annotations
import itertools, sys
from typing import Any, Callable, Iterable
from tinyplug.uop.dtype import DType
from tinyplug.uop.ops import Ops, GroupOp, UOp, _canonical_dtype, op_mask

class UPat:
  """Matches UOps by op, dtype, arg and sources; `name` captures the matched UOp for the rewrite function.

  src forms: a tuple matches sources in order, a list matches them in any order (used for commutative ops),
  a single UPat matches every source (any number of them), None matches any sources."""
  __slots__ = ("op", "dtype", "arg", "name", "src", "repeat", "allowed_len", "early_reject", "alternatives", "location")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False):
    self.op: frozenset[Ops] | None = None if op is None else frozenset((op,)) if isinstance(op, Ops) else frozenset(op)
    self.dtype: tuple[DType, ...] | None = None if dtype is None else (dtype,) if isinstance(dtype, DType) else tuple(dtype)
    self.arg, self.name, self.alternatives = arg, name, None
    # where the pattern was written, shown for every match it makes: the outermost frame of the first file outside
    # this module, so a row built by a helper (like `_bin(...)`) points at its line in the table, not at the helper
    f = sys._getframe(1)
    while f.f_back is not None and f.f_code.co_filename == __file__: f = f.f_back
    while f.f_back is not None and f.f_back.f_code.co_filename == f.f_code.co_filename: f = f.f_back
    self.location: tuple[str, int] = (f.f_code.co_filename, f.f_lineno)
    self.repeat: UPat | None = src if isinstance(src, UPat) else None
    # every ordering of the sources that is worth trying
    self.src: list[tuple[UPat, ...]] | None
    if isinstance(src, list): self.src = _unique_permutations(src)
    elif isinstance(src, tuple): self.src = [src]
    else: self.src = None
    self.allowed_len = len(src) if isinstance(src, (tuple, list)) and not allow_any_len else -1
    # ops the sources must contain: lets the matcher skip this pattern without recursing
    self.early_reject: frozenset[Ops] = frozenset(next(iter(p.op)) for p in (src if isinstance(src, (tuple, list)) else ())
                                                  if p.op is not None and len(p.op) == 1 and p.alternatives is None)

  # ---- constructors ----
  @staticmethod
  def any(*pats: UPat) -> UPat:
    """Matches if any of `pats` matches."""
    ret = UPat()
    ret.alternatives = pats
    return ret
  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True) -> UPat:
    return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat: return UPat(Ops.CONST, dtype, arg=b)
  @staticmethod
  def sink(*pats: UPat, name: str | None = None) -> UPat: return UPat(Ops.SINK, src=pats, name=name)

  # ---- operator sugar: UPat.cvar("a") + UPat.cvar("b") ----
  def alu(self, op: Ops, *src: UPat) -> UPat:
    srcs = (self, *src)
    return UPat(op, None, list(srcs) if op in GroupOp.Commutative else srcs)
  def _up(self, x: Any) -> UPat: return x if isinstance(x, UPat) else UPat.const(None, x)
  def __add__(self, x): return self.alu(Ops.ADD, self._up(x))
  def __radd__(self, x): return self._up(x).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.SUB, self._up(x))
  def __rsub__(self, x): return self._up(x).alu(Ops.SUB, self)
  def __mul__(self, x): return self.alu(Ops.MUL, self._up(x))
  def __rmul__(self, x): return self._up(x).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self._up(x))
  def __truediv__(self, x): return self.alu(Ops.FDIV, self._up(x))
  def __mod__(self, x): return self.alu(Ops.MOD, self._up(x))
  def __neg__(self): return self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, self._up(x))
  def __and__(self, x): return self.alu(Ops.AND, self._up(x))
  def __or__(self, x): return self.alu(Ops.OR, self._up(x))
  def __xor__(self, x): return self.alu(Ops.XOR, self._up(x))
  def __lshift__(self, x): return self.alu(Ops.SHL, self._up(x))
  def __rshift__(self, x): return self.alu(Ops.SHR, self._up(x))
  def eq(self, x): return self.alu(Ops.CMPEQ, self._up(x))
  def ne(self, x): return self.alu(Ops.CMPNE, self._up(x))
  def maximum(self, x): return self.alu(Ops.MAX, self._up(x))
  def where(self, x, y): return self.alu(Ops.WHERE, self._up(x), self._up(y))
  def cast(self, dtype: DType | None = None, name: str | None = None): return UPat(Ops.CAST, dtype, (self,), name=name)
  def named(self, name: str) -> UPat:
    ret = UPat.__new__(UPat)
    for k in UPat.__slots__: setattr(ret, k, getattr(self, k))
    ret.name = name
    return ret

  def __repr__(self) -> str:
    if self.alternatives is not None: return f"UPat.any({', '.join(map(repr, self.alternatives))})"
    ops = None if self.op is None else tuple(sorted(self.op))
    fields = [f"op={ops[0] if ops and len(ops) == 1 else ops}"]
    if self.dtype is not None: fields.append(f"dtype={self.dtype}")
    if self.arg is not None: fields.append(f"arg={self.arg!r}")
    if self.name is not None: fields.append(f"name={self.name!r}")
    if self.src is not None: fields.append(f"src={self.src[0]!r}")
    if self.repeat is not None: fields.append(f"src={self.repeat!r}")
    return f"UPat({', '.join(fields)})"

  # ---- matching ----
  def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every way this pattern matches `uop`, as capture dicts extending `store`."""
    if self.alternatives is not None:
      return [r for alt in self.alternatives for r in alt.match(uop, dict(store))]
    if (self.op is not None and uop.op not in self.op) or \
       (self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype) or \
       (self.arg is not None and self.arg != uop.arg) or \
       (self.allowed_len != -1 and len(uop.src) != self.allowed_len): return []
    if self.name is not None:
      if (prev := store.get(self.name)) is None: store[self.name] = uop
      elif prev is not uop: return []
    if self.repeat is not None:
      stores = [store]
      for s in uop.src:
        stores = [r for st in stores for r in self.repeat.match(s, st)]
        if not stores: return []
      return stores
    if self.src is None: return [store]
    if len(self.src) == 1:
      stores = [store]
      for p, s in zip(self.src[0], uop.src):
        stores = [r for st in stores for r in p.match(s, st)]
        if not stores: return []
      return stores
    res: list[dict[str, UOp]] = []
    for order in self.src:
      stores = [dict(store)]
      for p, s in zip(order, uop.src):
        stores = [r for st in stores for r in p.match(s, st)]
        if not stores: break
      res.extend(stores)
    return res

def _unique_permutations(pats: list[UPat]) -> list[tuple[UPat, ...]]:
  seen, out = set(), []
  for perm in itertools.permutations(pats):
    key = tuple(map(id, perm))
    if key not in seen: seen.add(key); out.append(perm)
  return out

def _owner_of(fn: Callable) -> str:
  """The plugin a rewrite function comes from, judged by its top-level package."""
  top = (getattr(fn, "__module__", None) or "?").split(".")[0]
  if top == "tinyplug": return "core"
  return top[len("tinyplug_"):] if top.startswith("tinyplug_") else top

class Pattern:
  """One row of a PatternMatcher: the pattern, its rewrite function, and where it came from."""
  __slots__ = ("upat", "fn", "takes_ctx", "file", "line", "owner", "_matcher")
  def __init__(self, upat: UPat, fn: Callable, owner: str | None):
    self.upat, self.fn, self._matcher = upat, fn, None
    code = getattr(fn, "__code__", None)
    self.takes_ctx = code is not None and "ctx" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    # the pattern's own line; the rewrite function's first line when the pattern was built elsewhere (a helper)
    self.file, self.line = upat.location if upat.location[0] != __file__ else \
      ((code.co_filename, code.co_firstlineno) if code is not None else ("?", 0))
    self.owner = owner or _owner_of(fn)
  @property
  def location(self) -> str: return f"{self.file}:{self.line}"
  @property
  def matcher(self) -> Callable[[UOp, Any], Any]:
    """`matcher(uop, ctx)`: the first non-None result of fn over every way the pattern matches, else None."""
    if self._matcher is None: self._matcher = compile_row(self.upat, self.fn, self.takes_ctx) or self._interpret
    return self._matcher
  def _interpret(self, uop: UOp, ctx: Any) -> Any:
    early = self.upat.early_reject
    if early and not early <= {s.op for s in uop.src}: return None
    for store in self.upat.match(uop, {}):
      if (ret := (self.fn(ctx=ctx, **store) if self.takes_ctx else self.fn(**store))) is not None: return ret
    return None

class PatternMatcher:
  """A table of (UPat, fn) rows. `rewrite(u)` returns the first non-None fn result whose pattern matches u.

  fn receives the named captures as keyword arguments, plus `ctx` if it has a parameter of that name.
  Rows are dispatched by op (a row for MUL is never tried on an ADD) and each pattern is compiled to a
  specialized Python function on first use (see compile_row); UPat.match is the reference interpreter."""
  def __init__(self, patterns: list[tuple[UPat, Callable]] | list[Pattern], owner: str | None = None):
    self.rows: list[Pattern] = [p if isinstance(p, Pattern) else Pattern(p[0], p[1], owner) for p in patterns]
    # dispatch table: for each op, the indices of the rows that could match it, in table order
    self._row_ids: dict[Ops, list[int]] = {op: [] for op in Ops}
    for i, row in enumerate(self.rows):
      for op in _ops_of(row.upat): self._row_ids[op].append(i)
    self._pdict: _OpTable | None = None

  @property
  def pdict(self) -> dict[Ops, Callable[[UOp, Any], Any]]:
    """op -> one compiled function `match(u, ctx)` that runs every row that could match that op, in table order
    (compiled the first time a node with that op is seen)."""
    if self._pdict is None: self._pdict = _OpTable(self)
    return self._pdict
  @property
  def patterns(self) -> list[tuple[UPat, Callable]]: return [(r.upat, r.fn) for r in self.rows]
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rows + other.rows)
  def __len__(self) -> int: return len(self.rows)
  def __reduce__(self):
    # lambdas and local rewrite functions travel as their code (uop/pickling.py); compiled matchers are rebuilt
    from tinyplug.uop.pickling import portable
    return _unpickle_matcher, ([(r.upat, portable(r.fn), r.owner) for r in self.rows],)

  def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
    return (self.pdict.by_value[uop.op._value_] or self.pdict[uop.op])(uop, ctx)

  def rewrite_tracked(self, uop: UOp, ctx: Any = None) -> tuple[UOp | None, Pattern | None]:
    """Like rewrite, and also says which row matched (for tracing)."""
    for i in self._row_ids[uop.op]:
      row = self.rows[i]
      if (ret := row.matcher(uop, ctx)) is not None: return ret, row
    return None, None

def _unpickle_matcher(rows: list[tuple[UPat, Callable, str]]) -> PatternMatcher:
  return PatternMatcher([Pattern(upat, fn, owner) for upat, fn, owner in rows])

# ---------------- compiling a UPat into a Python function ----------------

def _no_match(uop: UOp, ctx: Any) -> None: return None

class _OpTable(dict):
  """op -> compiled matcher of all the rows for that op; missing ops are compiled on first lookup.
  `by_value[op._value_]` holds the same functions (None until compiled) for the engine's hot loop."""
  def __init__(self, pm: PatternMatcher):
    super().__init__()
    self.pm = pm
    self.by_value: list[Callable | None] = [None] * (max(o._value_ for o in Ops) + 1)
  def __missing__(self, op: Ops) -> Callable[[UOp, Any], Any]:
    rows = [self.pm.rows[i] for i in self.pm._row_ids[op]]
    fn = self[op] = self.by_value[op._value_] = compile_rows(rows, op) if rows else _no_match
    return fn

def compile_rows(rows: list[Pattern], op: Ops) -> Callable[[UOp, Any], Any]:
  """One function that tries each row in turn on a node whose op is `op` (so the rows' own root op test is
  left out) and returns the first non-None result. A row the compiler cannot handle calls its interpreter."""
  comp = _Compiler(None, False)
  lines = ["def _match(u0, ctx):"]
  for i, row in enumerate(rows):
    fn_name = comp.const(row.fn)
    try: lines += comp.gen(row.upat, "u0", (), comp.fn_caller(fn_name, row.takes_ctx), 1, root_op_known=True)
    except _NotCompilable:
      lines += [f"  _ret = {comp.const(row._interpret)}(u0, ctx)", "  if _ret is not None: return _ret"]
  lines.append("  return None")
  try: return comp.finish(lines, f"<matcher for {op}: {len(rows)} rows>")
  except (SyntaxError, RecursionError, MemoryError):  # too deep to compile: fall back to one call per row
    matchers = [row.matcher for row in rows]
    def match(u: UOp, ctx: Any) -> Any:
      for m in matchers:
        if (ret := m(u, ctx)) is not None: return ret
      return None
    return match

class _NotCompilable(Exception):
  pass

def compile_row(upat: UPat, fn: Callable, takes_ctx: bool) -> Callable[[UOp, Any], Any] | None:
  """Turns one (UPat, fn) row into `match(u0, ctx)`: nested ifs that test op, length, arg, dtype and names and
  call fn where the whole pattern matches. Alternatives (UPat.any, source orders of a list) are tried in turn,
  each followed by the rest of the pattern, so matches come in the same order as UPat.match gives them.
  Returns None for the rare shapes it leaves to the interpreter (a repeated source pattern with names)."""
  try: return _Compiler(fn, takes_ctx).build(upat)
  except (_NotCompilable, SyntaxError, RecursionError, MemoryError): return None

class _Compiler:
  def __init__(self, fn: Callable, takes_ctx: bool):
    self.env: dict[str, Any] = {"_fn": fn, "_id": id}
    self.takes_ctx, self.nvars = takes_ctx, 0
  def const(self, obj: Any) -> str:
    name = f"_k{len(self.env)}"
    self.env[name] = obj
    return name
  def var(self) -> str:
    self.nvars += 1
    return f"u{self.nvars}"

  def build(self, upat: UPat) -> Callable:
    lines = ["def _match(u0, ctx):"] + self.gen(upat, "u0", (), self.fn_caller("_fn", self.takes_ctx), 1) + ["  return None"]
    return self.finish(lines, f"<upat {upat!r:.200}>")

  def finish(self, lines: list[str], filename: str) -> Callable:
    exec(compile("\n".join(lines), filename, "exec"), self.env)
    return self.env["_match"]

  @staticmethod
  def fn_caller(fn_name: str, takes_ctx: bool) -> Callable[[tuple[str, ...], int], list[str]]:
    def call_fn(bound: tuple[str, ...], ind: int) -> list[str]:
      kwargs = ", ".join([f"{n}=c_{n}" for n in bound] + (["ctx=ctx"] if takes_ctx else []))
      pad = "  " * ind
      return [f"{pad}_ret = {fn_name}({kwargs})", f"{pad}if _ret is not None: return _ret"]
    return call_fn

  def gen(self, p: UPat, v: str, bound: tuple[str, ...], cont: Callable, ind: int, root_op_known: bool = False) -> list[str]:
    """Lines that check `p` against the UOp in local `v`, then run cont(bound names, indent) on success."""
    if p.alternatives is not None:
      return [line for alt in p.alternatives for line in self.gen(alt, v, bound, cont, ind)]
    if p.name is not None and not p.name.isidentifier(): raise _NotCompilable(p.name)
    conds: list[str] = []
    if p.name is not None and p.name in bound: conds.append(f"{v} is c_{p.name}")
    if p.op is not None and not root_op_known: conds.append(self.op_cond(p.op, v))
    if p.allowed_len != -1: conds.append(f"len({v}.src) == {p.allowed_len}")
    if p.arg is not None: conds.append(f"{v}.arg == {self.const(p.arg)}")
    out: list[str] = []
    if conds:
      out.append(f"{'  ' * ind}if {' and '.join(conds)}:")
      ind += 1
    if p.dtype is not None:
      check = _DTypeCheck(p.dtype)
      pad = "  " * ind
      out += [f"{pad}_h = {self.const(check.seen)}.get(_id({v}.dtype))", f"{pad}if _h is None: _h = {self.const(check)}({v}.dtype)",
              f"{pad}if _h:"]
      ind += 1
    pad = "  " * ind
    if p.name is not None and p.name not in bound:
      out.append(f"{pad}c_{p.name} = {v}")
      bound = bound + (p.name,)
    if p.repeat is not None:
      if _has_names(p.repeat): raise _NotCompilable("named repeated source")
      if (cond := self.simple_cond(p.repeat, "_s")) is None:
        cond = f"{self.const(_Compiler(_true, False).build(p.repeat))}(_s, None)"
      out.append(f"{pad}if all([{cond} for _s in {v}.src]):")
      out += cont(bound, ind + 1)
    elif p.src is None: out += cont(bound, ind)
    else:
      n = len(p.src[0])
      kids = [self.var() for _ in range(n)]
      if p.allowed_len != -1 and n > 0: out.append(f"{pad}{', '.join(kids)}, = {v}.src")
      for order in p.src: out += self.gen_sources(list(order), kids, 0, v, p.allowed_len == -1, bound, cont, ind)
    return out or [f"{'  ' * ind}pass"]

  def simple_cond(self, p: UPat, v: str) -> str | None:
    """One boolean expression for a pattern that only looks at op, arg and length (None if it needs more)."""
    if p.alternatives is not None or p.name is not None or p.dtype is not None or p.src is not None or p.repeat is not None:
      return None
    conds = ["True"]
    if p.op is not None: conds.append(self.op_cond(p.op, v))
    if p.allowed_len != -1: conds.append(f"len({v}.src) == {p.allowed_len}")
    if p.arg is not None: conds.append(f"{v}.arg == {self.const(p.arg)}")
    return " and ".join(conds[1:] or conds)

  def op_cond(self, ops: frozenset[Ops], v: str) -> str:
    if len(ops) == 1: return f"{v}.op is {self.const(next(iter(ops)))}"
    return f"{self.const(op_mask(ops))}[{v}.op._value_]"

  def gen_sources(self, pats: list[UPat], kids: list[str], i: int, v: str, any_len: bool, bound, cont, ind) -> list[str]:
    if i == len(pats): return cont(bound, ind)
    nxt = lambda b, j: self.gen_sources(pats, kids, i + 1, v, any_len, b, cont, j)
    if not any_len: return self.gen(pats[i], kids[i], bound, nxt, ind)
    # allow_any_len: like zip, sources past the end of the node are not checked
    pad = "  " * ind
    return [f"{pad}if len({v}.src) > {i}:", f"{pad}  {kids[i]} = {v}.src[{i}]"] + self.gen(pats[i], kids[i], bound, nxt, ind + 1) + \
           [f"{pad}else:"] + cont(bound, ind + 1)

def _true(**kwargs) -> bool: return True

def _has_names(p: UPat) -> bool:
  if p.name is not None: return True
  subs = list(p.alternatives or ()) + ([p.repeat] if p.repeat is not None else []) + [q for order in (p.src or ()) for q in order]
  return any(_has_names(q) for q in subs)

class _DTypeCheck:
  """`check(dtype)`: does dtype (or its scalar) belong to the pattern's dtypes? Hashing or comparing DTypes field
  by field is slow, so answers for canonical dtypes (the ones UOps hold, which live forever) are kept in `seen`
  by id, and the generated code looks there first."""
  __slots__ = ("dtypes", "seen")
  def __init__(self, dts: tuple[DType, ...]): self.dtypes, self.seen = dts, {}
  def __call__(self, dt: DType) -> bool:
    ok = dt in self.dtypes or dt.scalar() in self.dtypes
    if _canonical_dtype(dt) is dt: self.seen[id(dt)] = ok
    return ok

def _ops_of(p: UPat) -> frozenset[Ops]:
  if p.alternatives is not None: return frozenset().union(*(_ops_of(a) for a in p.alternatives))
  return GroupOp.All if p.op is None else p.op
