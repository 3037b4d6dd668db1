"""A base for C-like kernel languages (OpenCL C, CUDA C, Metal, HIP): one pass over the linear program, with what
differs between dialects in tables and small methods a subclass overrides.

The walk: buffers and variables become kernel parameters, SPECIAL ids become the dialect's id expressions, RANGE/END
`for` loops, DEFINE_LOCAL a shared array at kernel scope, DEFINE_REG a private array. A pure value used once is
inlined into its user; loads and values used several times get a name (`val0`, `alu3`, `cast1`, `acc_val2`).

What a dialect sets (class attributes):
  kernel_prefix     text before the kernel's name: "__kernel void", 'extern "C" __global__ void', "kernel void"
  type_names        scalar DType -> C type name; vector types are `vector_type.format(scalar=..., n=...)`
  vector_lengths    the vector lengths the language has
  buffer_param      a buffer parameter, from {type} (element type), {name} and {index}
  var_param         an int parameter, from {type}, {name} and {index}
  shared_decl       a work-group array, from {type}, {name} and {size}
  barrier_code      a work-group barrier statement
  special_code      SPECIAL prefix ("gidx", "lidx", "idx") -> the id expression, from {dim} (0..2) and {axis} (x/y/z)
  vector_ctor       a vector from scalars, from {type} and {args}
  infix_ops / call_ops   ALU op -> C operator / function name
  const_suffix      scalar DType -> literal suffix ("f", "l", "u", ...); inf_code / nan_code: the names of inf and NaN
  helper_prefix     how helper functions in the prelude start ("inline", "__device__ inline", ...)
  memory_ops        LOAD args the dialect renders itself in `render_memory_op` (CUDA's cp.async and ldmatrix)
and overrides, where the dialect needs more than a table: `value_type`, `storage_type`, `render_const`, `render_alu`,
`render_cast`, `render_bitcast`, `render_gep`, `render_load`, `render_store`, `render_shared`, `render_barrier`,
`render_memory_op`, `render_wmma` (a tensor core's WMMA, for a dialect that advertises `tensor_cores`), `note`
(per-uop bookkeeping, e.g. extensions a type needs), `prelude` (lines before the kernel) and `render_kernel_head`.

Helpers a method may ask for go into `self.needs` while rendering; `prelude()` turns them into text."""
from __future__ import annotations
import math
from typing import Any, Mapping
from tinyplug.backend import LAUNCH_GRID, Renderer
from tinyplug.helpers import strip_parens
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.ops import Ops, GroupOp, UOp

C_TYPE_NAMES: Mapping[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
  dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
  dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}
INFIX_OPS: Mapping[Ops, str] = {
  Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.AND: "&", Ops.OR: "|",
  Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
CALL_OPS: Mapping[Ops, str] = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
                               Ops.POW: "pow"}
SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
_COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)

class CStyleRenderer(Renderer):
  """Linear program -> one C-like kernel function (see the module docstring for what a dialect sets)."""
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  kernel_prefix: str = "void"
  type_names: Mapping[DType, str] = C_TYPE_NAMES
  vector_type: str = "{scalar}{n}"
  vector_lengths: tuple[int, ...] = (2, 3, 4)
  buffer_param: str = "{type}* restrict {name}"
  var_param: str = "{type} {name}"
  shared_decl: str = "{type} {name}[{size}];"
  barrier_code: str = ""
  special_code: Mapping[str, str] = {}
  vector_ctor: str = "(({type})({args}))"
  infix_ops: Mapping[Ops, str] = INFIX_OPS
  call_ops: Mapping[Ops, str] = CALL_OPS
  const_suffix: Mapping[DType, str] = {dtypes.float32: "f", dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}
  inf_code: str = "INFINITY"
  nan_code: str = "NAN"
  helper_prefix: str = "inline"
  memory_ops: frozenset = frozenset()   # LOAD args the dialect renders itself (render_memory_op)

  def supported_dtypes(self) -> list[DType]: return list(self.type_names)

  # ---- types ----
  def value_type(self, dt: DType) -> str:
    """The C type holding a value of `dt` in a variable."""
    sc = dt.scalar()
    if sc not in self.type_names: raise NotImplementedError(f"{type(self).__name__} has no type for {dt!r}")
    if dt.count == 1: return self.type_names[sc]
    if sc == dtypes.bool: raise NotImplementedError(f"{type(self).__name__} has no vectors of bool")
    if dt.count not in self.vector_lengths: raise NotImplementedError(f"{type(self).__name__} has no vectors of {dt.count} elements")
    return self.vector_type.format(scalar=self.type_names[sc], n=dt.count)

  def storage_type(self, dt: DType, global_mem: bool = True) -> str:
    """The C element type of a buffer (or local array) holding `dt`."""
    return self.value_type(dt.scalar())

  # ---- constants ----
  def render_const(self, value: Any, dt: DType) -> str:
    sc = dt.scalar()
    if dt.count > 1: return f"(({self.value_type(dt)})({self.render_const(value, sc)}))"
    if sc == dtypes.bool: return "1" if value else "0"
    if dtypes.is_float(sc):
      if math.isnan(value): s = self.nan_code
      elif math.isinf(value): s = self.inf_code if value > 0 else f"(-{self.inf_code})"
      else: s = repr(float(value)) + self.const_suffix.get(sc, "")
      if sc == dtypes.float64 and not math.isfinite(value): return f"((double){s})"
      if sc == dtypes.float16: return f"(({self.value_type(sc)}){s})"
      return f"({s})" if s.startswith("-") else s
    value = int(value)
    bits = sc.itemsize * 8
    if dtypes.is_int(sc) and not dtypes.is_unsigned(sc) and value == -2**(bits - 1) and bits >= 32:
      return f"({-(2**(bits - 1)) + 1}{self.const_suffix.get(sc, '')}-1)"   # the literal 2**(bits-1) does not fit
    s = f"{value}{self.const_suffix.get(sc, '')}"
    if sc in SMALL_INTS: return f"(({self.type_names[sc]}){s})"
    return s if value >= 0 else f"({s})"

  # ---- ALU ----
  def render_alu(self, u: UOp, s: list[str]) -> str:
    text = self._render_alu(u, s)
    # C promotes char/short operands to int: bring the result back, so max() and friends see one type
    if u.dtype.scalar() in SMALL_INTS and u.op not in _COMPARISONS: return f"(({self.value_type(u.dtype)}){text})"
    return text

  def _render_alu(self, u: UOp, s: list[str]) -> str:
    op, dt = u.op, u.dtype
    is_bool, is_float = dt.scalar() == dtypes.bool, dtypes.is_float(dt)
    src_float = dtypes.is_float(u.src[0].dtype)
    if op is Ops.MAX:
      if is_bool: return f"({s[0]}|{s[1]})"
      if is_float:
        self.needs.add(("nanmax", self.value_type(dt), dt.count > 1))
        return f"tp_max_{self.value_type(dt)}({s[0]}, {s[1]})"
      return f"max({s[0]}, {s[1]})"
    if op is Ops.NEG: return f"(!{s[0]})" if is_bool else f"(-{s[0]})"
    if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dt)}/{s[0]})"
    if op is Ops.WHERE: return self.render_where(u, s)
    if op is Ops.MULACC: return f"(({s[0]}*{s[1]})+{s[2]})"
    if op is Ops.MOD and src_float: return f"fmod({s[0]}, {s[1]})"
    if op in self.call_ops: return f"{self.call_ops[op]}({', '.join(s)})"
    if is_bool and op is Ops.ADD: return f"({s[0]}|{s[1]})"
    if is_bool and op is Ops.MUL: return f"({s[0]}&{s[1]})"
    if op in self.infix_ops: return f"({s[0]}{self.infix_ops[op]}{s[1]})"
    raise NotImplementedError(f"{type(self).__name__} cannot render {op}")

  def render_where(self, u: UOp, s: list[str]) -> str:
    return f"({s[0]}?{s[1]}:{s[2]})"

  def render_nan_max(self, ctype: str, vector: bool) -> str:
    """NaN-propagating max, like torch.maximum (`fmax` returns the other operand when one is NaN)."""
    pick = "select(fmax(a, b), a + b, isnan(a) | isnan(b))" if vector else "(isnan(a) | isnan(b)) ? a + b : fmax(a, b)"
    return f"{self.helper_prefix} {ctype} tp_max_{ctype}({ctype} a, {ctype} b) {{ return {pick}; }}"

  def render_cast(self, u: UOp, x: str) -> str:
    dt = u.dtype
    if dt.count > 1:   # lane by lane: C has no conversion of whole vectors
      lanes = [f"(({self.value_type(dt.scalar())})({self.render_gep(x, (i,), u.src[0].dtype)}))" for i in range(dt.count)]
      return self.vector_ctor.format(type=self.value_type(dt), args=", ".join(lanes))
    return f"(({self.value_type(dt)})({x}))"

  def render_bitcast(self, u: UOp, x: str) -> str:
    return f"__builtin_bit_cast({self.value_type(u.dtype)}, {x})"

  def render_wmma(self, u: UOp, s: list[str]) -> str:
    """The expression for WMMA `u` (arg: a TensorCore's name) from its operands' expressions."""
    raise NotImplementedError(f"{type(self).__name__} has no tensor core {u.arg!r}")

  def render_shared(self, u: UOp, name: str, ctype: str, size: int) -> str:
    """The declaration of work-group array `name` (DEFINE_LOCAL `u`, `size` elements of `ctype`)."""
    return self.shared_decl.format(type=ctype, name=name, size=size)

  def render_barrier(self, u: UOp) -> str:
    """A BARRIER's statement: the dialect's work-group barrier (arg None); a dialect with other kinds overrides."""
    if u.arg is not None: raise NotImplementedError(f"{type(self).__name__} has no barrier {u.arg!r}")
    return self.barrier_code

  def render_memory_op(self, u: UOp) -> str | None:
    """A LOAD whose arg is in `memory_ops` (its expression, or None where it only names an address for the STORE that
    uses it), or a STORE of such a LOAD (its statement)."""
    raise NotImplementedError(f"{type(self).__name__} has no memory instruction {u.arg!r}")

  def render_vectorize(self, dt: DType, parts: list[str]) -> str:
    return self.vector_ctor.format(type=self.value_type(dt), args=", ".join(parts))

  def render_gep(self, x: str, lanes: tuple[int, ...], dt: DType | None = None) -> str:
    if len(lanes) == 1 and lanes[0] < 4: return f"{x}.{'xyzw'[lanes[0]]}"
    raise NotImplementedError(f"{type(self).__name__} cannot take lanes {lanes} of a vector")

  # ---- memory ----
  def _access(self, mem: UOp, idx: str, dt: DType) -> tuple[str, str]:
    """(address, element lvalue) of element idx of the array `mem` names."""
    return f"({self.names[mem]}+{idx})", f"{self.names[mem]}[{idx}]"

  def render_load(self, index: UOp, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return lval   # an array of vectors (a vector accumulator)
    if dt.count > 1: return f"(*(({self.value_type(dt)}*){ptr}))"
    return lval

  def render_store(self, index: UOp, value: str, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return f"{lval} = {value};"
    if dt.count > 1: return f"*(({self.value_type(dt)}*){ptr}) = {value};"
    return f"{lval} = {value};"

  # ---- hooks around the walk ----
  def note(self, u: UOp) -> None:
    """Called for every uop before it is rendered (e.g. to record that a type needs an extension)."""

  def prelude(self) -> list[str]:
    """Lines before the kernel: the helpers `self.needs` asked for."""
    return [self.render_nan_max(n[1], n[2]) for n in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == "nanmax")]

  def render_kernel_head(self, name: str, params: list[str], uops: list[UOp]) -> str:
    return f"{self.kernel_prefix} {name}({', '.join(params)}) {{"

  def render_special(self, u: UOp) -> str:
    sname = u.arg[0]
    prefix = sname.rstrip("0123456789")
    if prefix not in self.special_code: raise NotImplementedError(f"unknown SPECIAL {sname!r}")
    dim = int(sname[len(prefix):])
    size = u.arg[1] if isinstance(u.arg[1], int) else "?"
    # int, or a 64-bit type where the kernel indexes 2^31 elements or more (the scheduler widens its index math)
    return f"{self.value_type(u.dtype)} {sname} = {self.special_code[prefix].format(dim=dim, axis='xyz'[dim])}; /* {size} */"

  # ---- the program ----
  def expr(self, u: UOp) -> str:
    if u in self.names: return self.names[u]
    raise RuntimeError(f"{type(self).__name__}: {u.op} is used before it is defined")

  def render(self, name: str, uops: list[UOp]) -> str:
    uops = complete_program(uops)
    self.names: dict[UOp, str] = {}
    self.needs: set = set()
    uses: dict[UOp, int] = {}
    for u in uops:
      for s in u.src: uses[s] = uses.get(s, 0) + 1
    params: list[tuple[int, str]] = []
    var_params: list[tuple[Any, str]] = []
    locals_: list[str] = []
    body: list[str] = []
    counters: dict[str, int] = {}
    depth = 1

    def fresh(prefix: str) -> str:
      counters[prefix] = counters.get(prefix, -1) + 1
      return f"{prefix}{counters[prefix]}"
    def line(text: str) -> None: body.append("  " * depth + text)
    def define(u: UOp, prefix: str, expr: str) -> None:
      nm = fresh(prefix)
      line(f"{self.value_type(u.dtype)} {nm} = {expr};")
      self.names[u] = nm

    for u in uops:
      op, dt = u.op, u.dtype
      self.note(u)
      if op is Ops.DEFINE_GLOBAL:
        self.names[u] = nm = f"data{u.arg}"
        params.append((u.arg, self.buffer_param.format(type=self.storage_type(dt.base), name=nm, index=u.arg)))
      elif op is Ops.DEFINE_VAR:
        self.names[u] = u.arg[0]
        var_params.append((u.arg, (self.value_type(dt), u.arg[0])))
      elif op is Ops.DEFINE_LOCAL:
        nm = "".join(c if c.isalnum() or c == "_" else "_" for c in str(u.arg))
        self.names[u] = nm = nm if nm and not nm[0].isdigit() else f"temp{nm}"
        locals_.append("  " + self.render_shared(u, nm, self.storage_type(dt.base, global_mem=False), max(dt.size, 1)))
      elif op is Ops.DEFINE_REG:
        self.names[u] = nm = f"acc{u.arg}"
        line(f"{self.value_type(dt.base)} {nm}[{max(dt.size, 1)}];")
      elif op is Ops.CONST:
        self.names[u] = self.render_const(u.arg, dt)
      elif op is Ops.VCONST:
        self.names[u] = self.render_vectorize(dt, [self.render_const(v, dt.scalar()) for v in u.arg])
      elif op is Ops.SPECIAL:
        self.names[u] = u.arg[0]
        line(self.render_special(u))
      elif op is Ops.RANGE:
        axis = u.arg[0] if isinstance(u.arg, tuple) else u.arg
        self.names[u] = nm = f"ridx{axis}"
        line(f"for ({self.value_type(dt)} {nm} = 0; {nm} < {self.expr(u.src[0])}; {nm}++) {{")
        depth += 1
      elif op in (Ops.END, Ops.ENDIF):
        depth -= 1
        line("}")
      elif op is Ops.IF:
        line(f"if ({strip_parens(self.expr(u.src[0]))}) {{")
        depth += 1
      elif op is Ops.BARRIER:
        line(self.render_barrier(u))
      elif op is Ops.INDEX:
        self.names[u] = "<index>"   # rendered where it is loaded from or stored to
      elif op is Ops.LOAD and u.arg in self.memory_ops:   # a dialect's own memory instruction (cp.async, ldmatrix)
        if (text := self.render_memory_op(u)) is not None: define(u, "val", text)
      elif op is Ops.STORE and u.src[1].op is Ops.LOAD and u.src[1].arg in self.memory_ops:
        text = self.render_memory_op(u)
        index = u.src[0]
        line(f"if ({strip_parens(self.expr(index.src[2]))}) {text}" if len(index.src) > 2 else text)
      elif op is Ops.LOAD:
        index = u.src[0]
        text = self.render_load(index, dt)
        if len(index.src) > 2:
          alt = self.expr(u.src[1]) if len(u.src) > 1 else self.render_const(0, dt)
          text = f"({self.expr(index.src[2])}?{text}:{alt})"
        define(u, "val" if index.src[0].op is not Ops.DEFINE_REG else "acc_val", text)
      elif op is Ops.STORE:
        index, value = u.src[0], self.expr(u.src[1])
        text = self.render_store(index, value, u.src[1].dtype)
        line(f"if ({strip_parens(self.expr(index.src[2]))}) {text}" if len(index.src) > 2 else text)
      elif op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST, Ops.VECTORIZE, Ops.GEP):
        s = [self.expr(x) for x in u.src]
        if op is Ops.CAST: text = self.render_cast(u, s[0])
        elif op is Ops.BITCAST: text = self.render_bitcast(u, s[0])
        elif op is Ops.VECTORIZE: text = self.render_vectorize(dt, s)
        elif op is Ops.GEP: text = self.render_gep(s[0], tuple(u.arg), u.src[0].dtype)
        else: text = self.render_alu(u, s)
        if uses.get(u, 0) == 1 and op is not Ops.GEP: self.names[u] = text
        else: define(u, "alu" if op not in (Ops.CAST, Ops.BITCAST) else "cast", text)
      elif op is Ops.WMMA:
        define(u, "wmma", self.render_wmma(u, [self.expr(x) for x in u.src]))
      elif op in (Ops.SINK, Ops.NOOP): pass
      else: raise NotImplementedError(f"{type(self).__name__} cannot render {op}")

    args = [p for _, p in sorted(params)]
    args += [self.var_param.format(type=t, name=n, index=len(params) + i) for i, (_, (t, n)) in enumerate(sorted(var_params))]
    head = self.render_kernel_head(name, args, uops)
    return "\n".join(self.prelude() + [head] + locals_ + body + ["}"]) + "\n"

def complete_program(uops: list[UOp]) -> list[UOp]:
  """A hand-built list may leave out sources (a hand-written example renders `[store]` with its operands unlisted): put each missing
  source just before its first user. A linear program from the pipeline is already complete and passes unchanged."""
  listed = set(uops)
  if all(s in listed for u in uops for s in u.src): return uops
  out: list[UOp] = []
  seen: set[UOp] = set()
  for u in uops:
    for x in u.toposort():
      if x not in seen and (x in listed and x is u or x not in listed): out.append(x); seen.add(x)
  return out

def is_ptr_of(dt: DType, scalar: DType) -> bool:
  """Whether `dt` is `scalar` (any vector width) or a pointer to it."""
  return dt.scalar() == scalar or (isinstance(dt, PtrDType) and dt.base.scalar() == scalar)
