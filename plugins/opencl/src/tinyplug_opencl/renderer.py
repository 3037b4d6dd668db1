"""OpenCL C from a linear program (docs/architecture.md §3).

One pass over the UOps: buffers and variables become kernel parameters, SPECIAL ids become `get_group_id` /
`get_local_id` / `get_global_id`, RANGE/END become `for` loops, DEFINE_LOCAL a `__local` array at kernel scope,
DEFINE_REG a private array. Pure values used once are inlined; loads and values used several times get a name.

Storage types differ from value types in two places: bool lives in buffers as uchar (OpenCL forbids bool pointers
in kernel arguments), and half without cl_khr_fp16 lives in memory as half but is computed in float through
`vload_half` / `vstore_half`, each new value rounded back to half (so the bits are those of half math)."""
from __future__ import annotations
import math
from typing import Any
from tinyplug.backend import LAUNCH_GRID, Renderer
from tinyplug.helpers import strip_parens
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.ops import Ops, GroupOp, UOp

_TYPE_NAMES = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
               dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
               dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}
_VECTOR_WIDTHS = (2, 3, 4, 8, 16)
_SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.AND: "&", Ops.OR: "|",
          Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
_CALLS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.POW: "pow"}
_SPECIAL_FUNCS = {"gidx": "get_group_id", "lidx": "get_local_id", "idx": "get_global_id"}
_SWIZZLE = "0123456789abcdef"

def _nan_max(ctype: str, vector: bool) -> str:
  """NaN-propagating max, like torch.maximum (`fmax` returns the other operand when one is NaN)."""
  pick = "select(fmax(a, b), a + b, isnan(a) | isnan(b))" if vector else "(isnan(a) | isnan(b)) ? a + b : fmax(a, b)"
  return f"inline {ctype} tp_max_{ctype}({ctype} a, {ctype} b) {{ return {pick}; }}"

class OpenCLRenderer(Renderer):
  """OpenCL C 1.2. The limits default to what every OpenCL device offers; the CL device passes its real ones."""
  device = "CL"
  suffix = "CL"
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)

  def __init__(self, *, local_max: tuple[int, ...] = (256, 256, 64), max_work_group_size: int = 256,
               shared_max: int = 16384, extensions: frozenset[str] | tuple[str, ...] = (), vector_width: int = 4,
               device_name: str = ""):
    self.local_max = tuple(min(int(x), max_work_group_size) for x in local_max)
    self.max_work_group_size = int(max_work_group_size)
    self.shared_max = int(shared_max)
    self.extensions = frozenset(extensions)
    self.has_fp16 = "cl_khr_fp16" in self.extensions
    self.has_fp64 = "cl_khr_fp64" in self.extensions
    self.vector_width = int(vector_width)
    self.device_name = device_name
    supported = set(_TYPE_NAMES) - ({dtypes.float64} if not self.has_fp64 else set())
    self._dtypes = [dt for dt in _TYPE_NAMES if dt in supported]
    # vector types for the vectorize stage: not bool (no bool vectors in OpenCL C), half only with cl_khr_fp16
    # (without it half values live in floats and every rounding goes through vstore_half one lane at a time)
    vectors = supported - {dtypes.bool} - ({dtypes.float16} if not self.has_fp16 else set())
    self.vector_widths = {dt: (16, 8, 4, 2) for dt in vectors}

  def supported_dtypes(self) -> list[DType]: return list(self._dtypes)

  def __repr__(self) -> str:
    return (f"OpenCLRenderer(local_max={self.local_max}, shared_max={self.shared_max}, fp16={self.has_fp16}, "
            f"fp64={self.has_fp64})")

  # ---- type names ----
  def value_type(self, dt: DType) -> str:
    """The C type holding a value of `dt` in a variable."""
    sc = dt.scalar()
    if sc == dtypes.float16 and not self.has_fp16: sc = dtypes.float32
    if sc not in _TYPE_NAMES: raise NotImplementedError(f"OpenCL has no type for {dt!r}")
    if dt.count == 1: return _TYPE_NAMES[sc]
    if sc == dtypes.bool: raise NotImplementedError("vectors of bool are not supported by the OpenCL renderer")
    if dt.count not in _VECTOR_WIDTHS: raise NotImplementedError(f"OpenCL has no vectors of {dt.count} elements")
    return f"{_TYPE_NAMES[sc]}{dt.count}"

  def storage_type(self, dt: DType, global_mem: bool = True) -> str:
    """The C element type of a buffer (or local array) holding `dt`."""
    sc = dt.scalar()
    if sc == dtypes.bool: return "uchar"
    if sc == dtypes.float16: return "half" if global_mem or self.has_fp16 else "float"
    if sc not in _TYPE_NAMES: raise NotImplementedError(f"OpenCL has no type for {dt!r}")
    return _TYPE_NAMES[sc]

  def _half_storage(self, dt: DType) -> bool: return dt.scalar() == dtypes.float16 and not self.has_fp16
  def _half_buffer(self, mem: UOp) -> bool:
    """A global half buffer on a device without cl_khr_fp16: accessed with vload_half/vstore_half."""
    return mem.op is Ops.DEFINE_GLOBAL and self._half_storage(mem.dtype.base)

  # ---- constants ----
  def render_const(self, value: Any, dt: DType) -> str:
    sc = dt.scalar()
    if dt.count > 1: return f"(({self.value_type(dt)})({self.render_const(value, sc)}))"
    if sc == dtypes.bool: return "1" if value else "0"
    if dtypes.is_float(sc):
      if math.isnan(value): s = "NAN"
      elif math.isinf(value): s = "INFINITY" if value > 0 else "(-INFINITY)"
      else: s = repr(float(value)) + ("" if sc == dtypes.float64 else "f")
      if sc == dtypes.float64 and not math.isfinite(value): return f"((double){s})"
      if sc == dtypes.float16 and self.has_fp16: return f"((half){s})"
      return f"({s})" if s.startswith("-") else s
    value = int(value)
    if sc == dtypes.int64 and value == -2**63: return "(-9223372036854775807l-1)"
    if sc == dtypes.int32 and value == -2**31: return "(-2147483647-1)"
    suffix = {dtypes.int64: "l", dtypes.uint64: "ul", dtypes.uint32: "u"}.get(sc, "")
    s = f"{value}{suffix}"
    if sc in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16): return f"(({_TYPE_NAMES[sc]}){s})"
    return s if value >= 0 else f"({s})"

  # ---- ALU ----
  def render_alu(self, u: UOp, s: list[str]) -> str:
    text = self._render_alu(u, s)
    # half computed in float (no cl_khr_fp16): round every new value to half, so results are those of half math
    if self._half_storage(u.dtype) and u.op not in _EXACT_IN_HALF: return f"tp_round_half({text})"
    # C promotes char/short operands to int: bring the result back, so max() and friends see one type
    if u.dtype.scalar() in _SMALL_INTS and u.op not in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): return f"(({self.value_type(u.dtype)}){text})"
    return text

  def _render_alu(self, u: UOp, s: list[str]) -> str:
    op, dt = u.op, u.dtype
    is_bool, is_float = dt.scalar() == dtypes.bool, dtypes.is_float(dt)
    src_float = dtypes.is_float(u.src[0].dtype)
    if op is Ops.MAX:
      if is_bool: return f"({s[0]}|{s[1]})"
      return f"tp_max_{self.value_type(dt)}({s[0]}, {s[1]})" if is_float else f"max({s[0]}, {s[1]})"
    if op is Ops.NEG: return f"(!{s[0]})" if is_bool else f"(-{s[0]})"
    if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dt)}/{s[0]})"
    if op is Ops.WHERE:
      if dt.count > 1: return f"select({s[2]}, {s[1]}, {s[0]})"
      return f"({s[0]}?{s[1]}:{s[2]})"
    if op is Ops.MULACC: return f"(({s[0]}*{s[1]})+{s[2]})"
    if op is Ops.MOD and src_float: return f"fmod({s[0]}, {s[1]})"
    if op in _CALLS: return f"{_CALLS[op]}({', '.join(s)})"
    if is_bool and op is Ops.ADD: return f"({s[0]}|{s[1]})"
    if is_bool and op is Ops.MUL: return f"({s[0]}&{s[1]})"
    if op in _INFIX: return f"({s[0]}{_INFIX[op]}{s[1]})"
    raise NotImplementedError(f"the OpenCL renderer cannot render {op}")

  def render_cast(self, u: UOp, x: str) -> str:
    src_dt, dt = u.src[0].dtype, u.dtype
    if dt.count > 1: return f"convert_{self.value_type(dt)}({x})"
    if dt.scalar() == dtypes.float16 and not self.has_fp16:   # round to half precision, keep it in a float
      return f"tp_round_half((float)({x}))"
    return f"(({self.value_type(dt)})({x}))"

  def render_bitcast(self, u: UOp, x: str) -> str:
    if self._half_storage(u.dtype) or self._half_storage(u.src[0].dtype):
      if u.dtype.scalar() == dtypes.float16: return f"tp_half_from_bits(as_ushort({x}))"
      return f"as_{self.value_type(u.dtype)}(tp_half_to_bits({x}))"
    return f"as_{self.value_type(u.dtype)}({x})"

  # ---- memory ----
  def _access(self, mem: UOp, idx: str, dt: DType) -> tuple[str, str]:
    """(address for vload/vstore, element lvalue) of element idx of the array `mem` names."""
    return f"({self.names[mem]}+{idx})", f"{self.names[mem]}[{idx}]"

  def render_load(self, index: UOp, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return lval   # an array of vectors (a vector accumulator)
    if self._half_buffer(mem):
      return f"vload_half({idx}, {self.names[mem]})" if dt.count == 1 else f"vload_half{dt.count}(0, {ptr})"
    if dt.count > 1: return f"vload{dt.count}(0, {ptr})"
    if dt.scalar() == dtypes.bool: return f"((bool){lval})"
    return lval

  def render_store(self, index: UOp, value: str, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return f"{lval} = {value};"
    if self._half_buffer(mem):
      return f"vstore_half({value}, {idx}, {self.names[mem]});" if dt.count == 1 else \
        f"vstore_half{dt.count}({value}, 0, {ptr});"
    if dt.count > 1: return f"vstore{dt.count}({value}, 0, {ptr});"
    if dt.scalar() == dtypes.bool: return f"{lval} = (uchar)({value});"
    return f"{lval} = {value};"

  # ---- the program ----
  def expr(self, u: UOp) -> str:
    if u in self.names: return self.names[u]
    raise RuntimeError(f"OpenCL renderer: {u.op} is used before it is defined")

  def render(self, name: str, uops: list[UOp]) -> str:
    uops = _complete(uops)
    self.names: dict[UOp, str] = {}
    uses: dict[UOp, int] = {}
    for u in uops:
      for s in u.src: uses[s] = uses.get(s, 0) + 1
    params: list[tuple[int, str]] = []
    var_params: list[tuple[Any, str]] = []
    locals_: list[str] = []
    body: list[str] = []
    counters: dict[str, int] = {}
    depth = 1
    needs: set = set()

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
      if dt.scalar() == dtypes.float64 or (isinstance(dt, PtrDType) and dt.base.scalar() == dtypes.float64): needs.add("fp64")
      if dt.scalar() == dtypes.float16 or (isinstance(dt, PtrDType) and dt.base.scalar() == dtypes.float16): needs.add("fp16")
      if op is Ops.DEFINE_GLOBAL:
        self.names[u] = nm = f"data{u.arg}"
        params.append((u.arg, f"__global {self.storage_type(dt.base)}* restrict {nm}"))
      elif op is Ops.DEFINE_VAR:
        self.names[u] = u.arg[0]
        var_params.append((u.arg, f"{self.value_type(dt)} {u.arg[0]}"))
      elif op is Ops.DEFINE_LOCAL:
        nm = "".join(c if c.isalnum() or c == "_" else "_" for c in str(u.arg))
        self.names[u] = nm = nm if nm and not nm[0].isdigit() else f"temp{nm}"
        locals_.append(f"  __local {self.storage_type(dt.base, global_mem=False)} {nm}[{max(dt.size, 1)}];")
      elif op is Ops.DEFINE_REG:
        self.names[u] = nm = f"acc{u.arg}"
        line(f"{self.value_type(dt.base)} {nm}[{max(dt.size, 1)}];")
      elif op is Ops.CONST:
        self.names[u] = self.render_const(u.arg, dt)
      elif op is Ops.VCONST:
        self.names[u] = f"(({self.value_type(dt)})({', '.join(self.render_const(v, dt.scalar()) for v in u.arg)}))"
      elif op is Ops.SPECIAL:
        sname = u.arg[0]
        prefix = sname.rstrip("0123456789")
        if prefix not in _SPECIAL_FUNCS: raise NotImplementedError(f"unknown SPECIAL {sname!r}")
        self.names[u] = sname
        size = u.arg[1] if isinstance(u.arg[1], int) else "?"
        line(f"int {sname} = {_SPECIAL_FUNCS[prefix]}({sname[len(prefix):]}); /* {size} */")
      elif op is Ops.RANGE:
        axis = u.arg[0] if isinstance(u.arg, tuple) else u.arg
        self.names[u] = nm = f"ridx{axis}"
        line(f"for (int {nm} = 0; {nm} < {self.expr(u.src[0])}; {nm}++) {{")
        depth += 1
      elif op in (Ops.END, Ops.ENDIF):
        depth -= 1
        line("}")
      elif op is Ops.IF:
        line(f"if ({strip_parens(self.expr(u.src[0]))}) {{")
        depth += 1
      elif op is Ops.BARRIER:
        line("barrier(CLK_LOCAL_MEM_FENCE);")
      elif op is Ops.INDEX:
        self.names[u] = "<index>"   # rendered where it is loaded from or stored to
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
        if op is Ops.MAX and dtypes.is_float(dt): needs.add(("nanmax", self.value_type(dt), dt.count > 1))
        if op is Ops.CAST:
          text = self.render_cast(u, s[0])
          if "tp_round_half" in text: needs.add("halfbits")
        elif op is Ops.BITCAST:
          text = self.render_bitcast(u, s[0])
          if "tp_half" in text: needs.add("halfbits")
        elif op is Ops.VECTORIZE: text = f"(({self.value_type(dt)})({', '.join(s)}))"
        elif op is Ops.GEP:
          lanes = "".join(_SWIZZLE[i] for i in u.arg)
          text = f"{s[0]}.s{lanes}"
        else:
          text = self.render_alu(u, s)
          if "tp_round_half" in text: needs.add("halfbits")
        if uses.get(u, 0) == 1 and op is not Ops.GEP: self.names[u] = text
        else: define(u, "alu" if op not in (Ops.CAST, Ops.BITCAST) else "cast", text)
      elif op in (Ops.SINK, Ops.NOOP): pass
      else: raise NotImplementedError(f"the OpenCL renderer cannot render {op}")

    prelude: list[str] = []
    if "fp16" in needs and self.has_fp16: prelude.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if "fp64" in needs:
      if not self.has_fp64 and self.extensions:
        raise NotImplementedError(f"this OpenCL device ({self.device_name}) has no cl_khr_fp64: double is not supported")
      prelude.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    prelude += [_nan_max(n[1], n[2]) for n in sorted(x for x in needs if isinstance(x, tuple))]
    if "halfbits" in needs: prelude.append(_HALF_HELPERS)
    args = [p for _, p in sorted(params)] + [p for _, p in sorted(var_params)]
    head = f"__kernel void {name}({', '.join(args)}) {{"
    return "\n".join(prelude + [head] + locals_ + body + ["}"]) + "\n"

# without cl_khr_fp16 a half value lives in a float: rounding and bit access go through vstore_half/vload_half
# ops whose result is one of their (already half) operands, or exact: no rounding needed
_EXACT_IN_HALF = frozenset({Ops.MAX, Ops.NEG, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.TRUNC})

_HALF_HELPERS = """inline float tp_round_half(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
inline ushort tp_half_to_bits(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return h; }
inline float tp_half_from_bits(ushort h) { return vload_half(0, (__private half*)&h); }"""

def _complete(uops: list[UOp]) -> list[UOp]:
  """A hand-built list may leave out sources (the seeds render `[store]` with its operands unlisted): put each missing
  source just before its first user. A linear program from the pipeline is already complete and passes unchanged."""
  listed = set(uops)
  if all(s in listed for u in uops for s in u.src): return uops
  out: list[UOp] = []
  seen: set[UOp] = set()
  for u in uops:
    for x in u.toposort():
      if x not in seen and (x in listed and x is u or x not in listed): out.append(x); seen.add(x)
  return out
