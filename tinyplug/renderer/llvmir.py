"""A base for renderers that write LLVM IR: a linear program becomes one LLVM function, as text (no llvmlite here).

The function is `void @name(ptr noalias %data0, ..., i32 %<var>, ...)`: buffers first (DEFINE_GLOBAL order), then the
DEFINE_VARs sorted by name. With `split_threads` (the CPU) two more parameters `i32 %core_id, i32 %n_cores` follow
and the loop threads may share (`tinyplug.backend.shareable_loop`) iterates only the share
`[n*core_id/n_cores, n*(core_id+1)/n_cores)` of its range (both ends clamped to [0, n], which tells LLVM the
counter's range), so a runtime can run the same function on several threads; `core_id=0, n_cores=1` runs everything.

How values are held:
- bool is `i1` in registers and `i8` in memory; bfloat16 is `float` in registers (rounded to bfloat16 after every
  operation that makes one) and `i16` in memory; half is LLVM's native `half`.
- Vectors (`dtype.count > 1`) are LLVM vectors `<n x T>`; vector loads/stores address consecutive elements.
- Loops are phi-node loops; DEFINE_REG / DEFINE_LOCAL are allocas in the entry block (SROA turns them into registers).

What a target changes: a subclass of `LLVMIRRenderer` sets `builder` to a subclass of `LLVMFunctionBuilder` and
overrides its hooks: `buffer_param` (how a buffer parameter is declared: a GPU's global address space),
`extra_params` (more function parameters), `render_special` (launch ids, e.g. intrinsics for AMDGPU/NVPTX),
`define_local` (work-group memory: a GPU's shared-memory global instead of an alloca), `define_reg` (a private
array: AMDGPU's allocas live in addrspace(5)),
`render_barrier` (a work-group barrier; nothing on a loop-running target), `float_call` (a math library call for an
op), `footer` (attribute groups, globals), `function_attributes` (one kernel's attribute group, by default the
renderer's); and on the renderer `function_attrs` (the function's attribute group) and
`calling_convention` (e.g. `ptx_kernel`, `amdgpu_kernel`)."""
from __future__ import annotations
import math, re, struct
from tinyplug.backend import LAUNCH_LOOPS, Renderer, shareable_loop
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.minifloat import FORMATS, UOpOps, encode
from tinyplug.uop.ops import Ops, GroupOp, UOp
from tinyplug.uop.upat import PatternMatcher, UPat

_SCALAR_TYPES = {
  dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
  dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
  dtypes.float16: "half", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double", dtypes.void: "void",
}
_MEMORY_TYPES = {**_SCALAR_TYPES, dtypes.bool: "i8", dtypes.bfloat16: "i16"}
_FLOAT_BITS = {"half": 16, "float": 32, "double": 64}
_MANGLE = {"half": "f16", "float": "f32", "double": "f64"}

def _vec(t: str, n: int) -> str: return t if n == 1 else f"<{n} x {t}>"

def reg_type(dt: DType) -> str:
  """The LLVM type that holds a value of `dt` in a register."""
  if isinstance(dt, PtrDType): return "ptr"
  return _vec(_SCALAR_TYPES[dt.scalar()], dt.count)

def mem_type(dt: DType) -> str:
  """The LLVM type that holds a value of `dt` in memory."""
  return _vec(_MEMORY_TYPES[dt.scalar()], dt.count)

def _float_hex(v: float, t: str) -> str:
  """Exact LLVM float literal: doubles (and floats, which LLVM writes as the double of equal value) in hex."""
  if t == "half": return f"0xH{struct.unpack('<H', struct.pack('<e', v))[0]:04X}"
  if t == "float":
    try: v = struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError: v = math.copysign(math.inf, v)
  return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"

def _bf16_round_py(v: float) -> float:
  if math.isnan(v): return v
  try: bits = struct.unpack("<I", struct.pack("<f", v))[0]
  except OverflowError: return math.copysign(math.inf, v)
  bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
  return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]

def scalar_literal(v, dt: DType) -> str:
  """An LLVM constant (without its type) for a scalar of `dt`."""
  sc = dt.scalar()
  if sc == dtypes.bool: return "true" if v else "false"
  if dtypes.is_float(sc):
    v = float(v)
    if sc == dtypes.bfloat16: v = _bf16_round_py(v)
    return _float_hex(v, _SCALAR_TYPES[sc])
  v, bits = int(v), sc.itemsize * 8
  v &= (1 << bits) - 1
  return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)

def literal(v, dt: DType) -> str:
  """A constant of `dt` without its type; a vector dtype with a scalar value is a splat."""
  if dt.count == 1: return scalar_literal(v, dt)
  vals = v if isinstance(v, tuple) else (v,) * dt.count
  t = reg_type(dt.scalar())
  return "<" + ", ".join(f"{t} {scalar_literal(x, dt.scalar())}" for x in vals) + ">"

def _ident(name: str) -> str: return re.sub(r"[^A-Za-z0-9_.]", "_", name) or "kernel"

# what the LLVM IR base renders: every scalar type, in vectors of up to 64 bytes (LLVM splits them on narrower targets)
LLVM_VECTOR_WIDTHS = {dt: tuple(w for w in (16, 8, 4, 2) if w * dt.itemsize <= 64) for dt in _SCALAR_TYPES if dt != dtypes.void}

def double_to_half(x: UOp, c: UOp) -> UOp | None:
  """A float64 -> float16 CAST rounded from the float64 bits in integer math (once, as C rounds): LLVM lowers that
  fptrunc to a compiler-rt call (__truncdfhf2) which a kernel loaded without compiler-rt cannot reach."""
  if c.dtype.scalar() != dtypes.float16 or x.dtype.scalar() != dtypes.float64: return None
  n = x.dtype.count
  return encode(x, FORMATS[dtypes.float16], UOpOps(n), dtypes.float64).cast(dtypes.uint16.vec(n)).bitcast(c.dtype)

class LLVMIRRenderer(Renderer):
  """Linear program -> LLVM IR text, one function (see the module docstring)."""
  suffix = "ll"
  launch = LAUNCH_LOOPS
  vector_widths = LLVM_VECTOR_WIDTHS
  scatter_stores = True              # llvm.masked.scatter
  split_threads: bool = False        # add (core_id, n_cores) and share out the shareable loop
  function_attrs: str = 'nounwind "no-trapping-math"="true"'
  calling_convention: str = ""       # written after `define`: a GPU kernel's (ptx_kernel, amdgpu_kernel)
  extra_matcher = PatternMatcher([(UPat(Ops.CAST, src=(UPat.var("x"),), name="c"), double_to_half)])
  builder: type[LLVMFunctionBuilder]
  def render(self, name: str, uops: list[UOp]) -> str:
    return self.builder(name, list(uops), self).build()

class LLVMFunctionBuilder:
  """Builds one function; a target subclasses it for its hooks (see the module docstring)."""
  def __init__(self, name: str, uops: list[UOp], renderer: LLVMIRRenderer):
    self.name, self.uops, self.renderer = name, uops, renderer
    self.lines: list[str] = []          # the body, after the entry label
    self.allocas: list[str] = []        # go first in the entry block
    self.decls: dict[str, str] = {}     # intrinsic name -> declaration
    self.r: dict[UOp, str] = _Values()  # value of each uop, as an operand (without its type)
    self.gates: dict[UOp, str | None] = {}
    self.block = "entry"
    self.tmp = 0
    self.loops: dict[UOp, tuple] = {}   # RANGE -> (index name, header label, exit label, pre block, phi line, start)
    self.ifs: list[str] = []
    self.open_ranges: list[UOp] = []
    self.contiguous: dict[UOp, bool] = {}
    self.split_range = shareable_loop(uops) if renderer.split_threads else None
    self.address_math = self._address_math()
    self.reduction_tree = self._reduction_trees()

  # ---- small helpers ----
  def new(self, prefix: str = "t") -> str:
    self.tmp += 1
    return f"%{prefix}{self.tmp}"
  def emit(self, line: str) -> None: self.lines.append("  " + line)
  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name
  def op(self, instr: str, prefix: str = "t") -> str:
    out = self.new(prefix)
    self.emit(f"{out} = {instr}")
    return out
  def intrinsic(self, base: str, dt: DType, nargs: int) -> str:
    t = reg_type(dt)
    sc = _SCALAR_TYPES[dt.scalar()]
    suffix = (f"v{dt.count}" if dt.count > 1 else "") + _MANGLE.get(sc, sc)
    fname = f"@llvm.{base}.{suffix}"
    self.decls[fname] = f"declare {t} {fname}({', '.join([t] * nargs)})"
    return fname
  def call(self, base: str, dt: DType, *args: str, flags: str = "") -> str:
    fn = self.intrinsic(base, dt, len(args))
    t = reg_type(dt)
    return self.op(f"call {flags}{t} {fn}({', '.join(f'{t} {a}' for a in args)})")
  def splat(self, v, dt: DType) -> str: return literal(v, dt)

  # ---- hooks a target overrides ----
  def buffer_param(self, u: UOp) -> str:
    """The parameter declaring buffer `u` (a DEFINE_GLOBAL); sets `self.r[u]`, the pointer the body addresses it by."""
    self.r[u] = f"%data{u.arg}"
    return f"ptr noalias %data{u.arg}"
  def extra_params(self) -> list[str]:
    """Function parameters after the buffers and variables."""
    return ["i32 %core_id", "i32 %n_cores"] if self.renderer.split_threads else []
  def render_special(self, u: UOp) -> str:
    """The value of a SPECIAL launch id (`gidx0`, `lidx1`, ...), of the SPECIAL's dtype: i32, or i64 in a kernel
    over 2^31 elements or more (the scheduler widens its index math)."""
    raise NotImplementedError(f"{type(self.renderer).__name__} runs loops, not launch ids: {u.arg[0]} (launch={self.renderer.launch!r})")
  def define_local(self, u: UOp) -> str:
    """The pointer to a DEFINE_LOCAL's memory (a loop-running target: an alloca, like a register array)."""
    name = f"%local{len(self.allocas)}"
    self.allocas.append(f"{name} = alloca [{max(u.dtype.size, 1)} x {mem_type(u.dtype.base)}], align 64")
    return name
  def define_reg(self, u: UOp) -> str:
    """The pointer to a DEFINE_REG's private array (an alloca in the entry block; SROA makes it registers)."""
    name = f"%reg{len(self.allocas)}"
    self.allocas.append(f"{name} = alloca [{max(u.dtype.size, 1)} x {mem_type(u.dtype.base)}], align 64")
    return name
  def render_barrier(self, u: UOp) -> None:
    """A work-group barrier (a loop-running target runs one work-item at a time: nothing to wait for)."""
  def float_call(self, op: Ops, dt: DType, x: str) -> str | None:
    """A call computing a unary float op (exp2, log2, sin) instead of LLVM's intrinsic; None: the intrinsic."""
    return None
  def footer(self) -> list[str]:
    """Module-level lines after the declarations (attribute groups, globals)."""
    return []
  def function_attributes(self) -> str:
    """The kernel's attribute group #0 (a GPU target adds what depends on the kernel, e.g. its work-group size)."""
    return self.renderer.function_attrs

  def _address_math(self) -> set[UOp]:
    """Integer adds/muls that compute addresses: they get `nsw` (an in-bounds index never overflows), which lets
    LLVM see that neighbouring accesses are consecutive and vectorise them."""
    found: set[UOp] = set()
    stack = [u.src[1] for u in self.uops if u.op is Ops.INDEX and len(u.src) > 1]
    while stack:
      u = stack.pop()
      if u in found or u.op not in (Ops.ADD, Ops.MUL, Ops.SUB) or not dtypes.is_int(u.dtype): continue
      found.add(u)
      stack.extend(u.src)
    return found

  # ---- the function ----
  def build(self) -> str:
    bufs = sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    variables = sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg)
    params = []
    for u in bufs: params.append(self.buffer_param(u))
    for u in variables:
      self.r[u] = f"%var_{_ident(u.arg[0])}"
      params.append(f"{reg_type(u.dtype)} {self.r[u]}")
    params += self.extra_params()
    for u in self.uops: self.render_uop(u)
    if self.loops: raise ValueError(f"kernel {self.name}: a RANGE has no END")
    cc = f"{self.renderer.calling_convention} " if self.renderer.calling_convention else ""
    body = [f"define {cc}void @{_ident(self.name)}({', '.join(params)}) #0 {{", "entry:"]
    body += ["  " + a for a in self.allocas] + self.lines + ["  ret void", "}", ""]
    body += sorted(self.decls.values())
    body.append(f"attributes #0 = {{ {self.function_attributes()} }}")
    body += self.footer()
    return "\n".join(body) + "\n"

  def render_uop(self, u: UOp) -> None:
    op = u.op
    if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SINK, Ops.NOOP): return
    if op is Ops.BARRIER: return self.render_barrier(u)
    if op is Ops.CONST: self.r[u] = literal(u.arg, u.dtype); return
    if op is Ops.VCONST: self.r[u] = literal(tuple(u.arg), u.dtype); return
    if op is Ops.DEFINE_LOCAL: self.r[u] = self.define_local(u); return
    if op is Ops.DEFINE_REG: self.r[u] = self.define_reg(u); return
    if op is Ops.RANGE: return self.render_range(u)
    if op is Ops.END: return self.render_end(u)
    if op is Ops.IF:
      n = len(self.lines)
      self.emit(f"br i1 {self.r[u.src[0]]}, label %if{n}, label %endif{n}")
      self.ifs.append(f"endif{n}")
      self.label(f"if{n}")
      return
    if op is Ops.ENDIF:
      target = self.ifs.pop()
      self.emit(f"br label %{target}")
      self.label(target)
      return
    if op is Ops.INDEX: return self.render_index(u)
    if op is Ops.LOAD: self.r[u] = self.render_load(u); return
    if op is Ops.STORE: return self.render_store(u)
    if op is Ops.VECTORIZE: self.r[u] = self.render_vectorize(u); return
    if op is Ops.GEP: self.r[u] = self.render_gep(u); return
    if op is Ops.CAST: self.r[u] = self.cast(self.r[u.src[0]], u.src[0].dtype, u.dtype); return
    if op is Ops.BITCAST: self.r[u] = self.bitcast(self.r[u.src[0]], u.src[0].dtype, u.dtype); return
    if op in GroupOp.ALU:
      out = self.alu(u)
      if u.dtype.scalar() == dtypes.bfloat16 and op not in GroupOp.Comparison: out = self.bf16_round(out, u.dtype)
      self.r[u] = out
      return
    if op is Ops.SPECIAL: self.r[u] = self.render_special(u); return
    raise NotImplementedError(f"the LLVM IR renderer cannot render {op}")

  # ---- loops ----
  def _reduction_trees(self) -> dict[UOp, UOp]:
    """Each ADD/MUL feeding an accumulator update of the same op (an unrolled reduction sums its lanes first)
    -> that update: they may reassociate together, so the SLP vectoriser can turn the tree into vector math."""
    tree: dict[UOp, UOp] = {}
    for u in self.uops:
      if u.op in (Ops.ADD, Ops.MUL) and self._is_update(u) and dtypes.is_float(u.dtype):
        stack = [u.src[1]]
        while stack:
          x = stack.pop()
          if x.op is u.op and x.dtype == u.dtype and x not in tree:
            tree[x] = u
            stack.extend(x.src)
    return tree

  @staticmethod
  def _is_update(u: UOp) -> bool:
    return bool(u.src) and u.src[0].op is Ops.LOAD and isinstance(u.src[0].arg, tuple) and u.src[0].arg[:1] == ("acc",)

  def reassociable(self, u: UOp) -> bool:
    """May this accumulator update be reassociated (so LLVM vectorises the reduction loop)? Only when every global
    load in the innermost open loop walks memory contiguously along it: vectorising a strided walk (the k loop
    of a matmul) would need gathers, and the register tile the optimiser built vectorises better on its own."""
    if u in self.reduction_tree: u = self.reduction_tree[u]
    elif not self._is_update(u): return False
    if not self.open_ranges: return False
    r = self.open_ranges[-1]
    if r not in self.contiguous: self.contiguous[r] = self._loads_contiguous(r)
    return self.contiguous[r]

  def _loads_contiguous(self, r: UOp) -> bool:
    start = self.uops.index(r)
    depth = 0
    for u in self.uops[start + 1:]:
      if u.op is Ops.RANGE: depth += 1
      elif u.op is Ops.END:
        if u.src[0] is r: break
        depth -= 1
      elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
        index = u.src[0]
        lanes = index.dtype.v if isinstance(index.dtype, PtrDType) else 1
        if index.src[1].dtype.count > 1: return False
        steps = [_int_eval(index.src[1], {r: k}) for k in range(3)]
        if any(s is None for s in steps): return False
        d = steps[1] - steps[0]
        # small strides (an unrolled loop, an upcast tile) stay within a cache line or two and vectorise with
        # shuffles; big ones (a matmul's k loop walking a column) would need gathers
        if steps[2] - steps[1] != d or abs(d) * index.dtype.itemsize > 64 * max(lanes, 1): return False
    return True

  def render_range(self, u: UOp) -> None:
    t, end = reg_type(u.dtype), self.r[u.src[0]]
    n = len(self.loops) + len(self.lines)
    start, stop = "0", end
    if u is self.split_range:
      # this thread's share of [0, end): [end*core_id/n_cores, end*(core_id+1)/n_cores), in 64 bits
      e64 = self.op(f"sext {t} {end} to i64") if t != "i64" else end
      c64 = self.op("sext i32 %core_id to i64")
      n64 = self.op("sext i32 %n_cores to i64")
      lo = self.op(f"sdiv i64 {self.op(f'mul i64 {e64}, {c64}')}, {n64}")
      c64_next = self.op(f"add i64 {c64}, 1")
      hi = self.op(f"sdiv i64 {self.op(f'mul i64 {e64}, {c64_next}')}, {n64}")
      start, stop = (lo, hi) if t == "i64" else (self.op(f"trunc i64 {lo} to {t}"), self.op(f"trunc i64 {hi} to {t}"))
      # clamp to [0, end] in the loop's own type (no-ops for 0 <= core_id < n_cores): LLVM then knows the 32-bit
      # counter stays in range, widens it and every index once instead of sign-extending each access (a small
      # transposition had 42 `sext`s in its loops and compiled 2x longer, in LSR and IndVarSimplify). Both ends of
      # the start too: with only its floor known, the counter's range wraps, and a loop inside with many accesses
      # (sort's 32-lane network kernels, 64 loads) needed more runtime overlap checks than LLVM allows: scalar
      start = self.op(f"select i1 {self.op(f'icmp sgt {t} {start}, 0')}, {t} {start}, {t} 0")
      start = self.op(f"select i1 {self.op(f'icmp slt {t} {start}, {end}')}, {t} {start}, {t} {end}")
      stop = self.op(f"select i1 {self.op(f'icmp slt {t} {stop}, {end}')}, {t} {stop}, {t} {end}")
    pre = self.block
    self.emit(f"br label %loop{n}")
    self.label(f"loop{n}")
    idx = f"%ridx{n}"
    self.lines.append("")               # the phi, filled in at END when the latch block is known
    phi_at = len(self.lines) - 1
    cond = self.op(f"icmp slt {t} {idx}, {stop}")
    self.emit(f"br i1 {cond}, label %loop{n}_body, label %loop{n}_exit")
    self.label(f"loop{n}_body")
    self.r[u] = idx
    self.loops[u] = (idx, t, n, pre, phi_at, start)
    self.open_ranges.append(u)

  def render_end(self, u: UOp) -> None:
    r = u.src[0]
    idx, t, n, pre, phi_at, start = self.loops.pop(r)
    if r in self.open_ranges: self.open_ranges.remove(r)
    nxt = self.op(f"add nuw nsw {t} {idx}, 1")
    self.emit(f"br label %loop{n}")
    self.lines[phi_at] = f"  {idx} = phi {t} [{start}, %{pre}], [{nxt}, %{self.block}]"
    self.label(f"loop{n}_exit")

  # ---- memory ----
  def render_index(self, u: UOp) -> None:
    buf, idx = u.src[0], u.src[1]
    gate = self.r[u.src[2]] if len(u.src) > 2 else None
    base = buf.dtype.base if isinstance(buf.dtype, PtrDType) else buf.dtype
    it = reg_type(idx.dtype)
    i = self.r[idx]
    lane_gates = gate is not None and u.src[2].dtype.count > 1
    if gate is not None and not lane_gates and idx.dtype.count == 1:
      # a gated access reads/writes a safe address (element 0) when the gate is off
      i = self.op(f"select i1 {gate}, {it} {i}, {it} {literal(0, idx.dtype)}")
    # with a gate per lane the row may start outside the buffer (a masked load never touches those lanes)
    self.r[u] = self.op(f"getelementptr {'' if lane_gates else 'inbounds '}{mem_type(base)}, ptr {self.r[buf]}, {it} {i}", "p")
    self.gates[u] = gate

  def _lanes(self, u: UOp) -> int:
    return u.dtype.v if isinstance(u.dtype, PtrDType) else 1

  def render_load(self, u: UOp) -> str:
    index = u.src[0]
    if index.op is not Ops.INDEX: raise NotImplementedError(f"LOAD of {index.op}")
    gate = self.gates[index]
    alt = self.r[u.src[1]] if len(u.src) > 1 else None
    dt = u.dtype
    ptrs, vgate = self.r[index], index.src[2] if len(index.src) > 2 else None
    if index.src[1].dtype.count == 1 and vgate is not None and vgate.dtype.count > 1 and mem_type(dt) == reg_type(dt):
      return self.masked_load(u, ptrs, self.r[vgate], alt)
    if index.src[1].dtype.count > 1 or (vgate is not None and vgate.dtype.count > 1):
      return self.load_lanes(u, index, alt)
    raw = self.op(f"load {mem_type(dt)}, ptr {ptrs}, align {dt.scalar().itemsize}")
    val = self.from_memory(raw, dt)
    if gate is not None:
      if alt is None: alt = literal(0, dt)
      val = self.op(f"select i1 {gate}, {reg_type(dt)} {val}, {reg_type(dt)} {alt}")
    return val

  def masked_load(self, u: UOp, ptr: str, mask: str, alt: str | None) -> str:
    """Consecutive lanes, each under its own gate: one llvm.masked.load (lanes whose gate is off are not read)."""
    dt = u.dtype
    t = reg_type(dt)
    name = f"llvm.masked.load.v{dt.count}{'f' if dtypes.is_float(dt.scalar()) else 'i'}{dt.scalar().itemsize * 8}.p0"
    self.decls[name] = f"declare {t} @{name}(ptr, i32, <{dt.count} x i1>, {t})"
    return self.op(f"call {t} @{name}(ptr {ptr}, i32 {dt.scalar().itemsize}, <{dt.count} x i1> {mask}, "
                   f"{t} {alt if alt is not None else literal(0, dt)})")

  def load_lanes(self, u: UOp, index: UOp, alt: str | None) -> str:
    """A gather, or a vector load with one gate per lane: one scalar access per lane."""
    dt, sc = u.dtype, u.dtype.scalar()
    buf, idx = index.src[0], index.src[1]
    gate = index.src[2] if len(index.src) > 2 else None
    out = "poison"
    for lane in range(dt.count):
      i = self.lane_of(idx, lane, contiguous=idx.dtype.count == 1)
      g = self.lane_of(gate, lane) if gate is not None else None
      it = reg_type(idx.dtype.scalar())
      if g is not None: i = self.op(f"select i1 {g}, {it} {i}, {it} 0")
      p = self.op(f"getelementptr inbounds {mem_type(sc)}, ptr {self.r[buf]}, {it} {i}", "p")
      v = self.from_memory(self.op(f"load {mem_type(sc)}, ptr {p}, align {sc.itemsize}"), sc)
      if g is not None:
        a = self.lane_of(u.src[1], lane) if alt is not None else literal(0, sc)
        v = self.op(f"select i1 {g}, {reg_type(sc)} {v}, {reg_type(sc)} {a}")
      out = self.op(f"insertelement {reg_type(dt)} {out}, {reg_type(sc)} {v}, i32 {lane}")
    return out

  def lane_of(self, x: UOp, lane: int, contiguous: bool = False) -> str:
    """Lane `lane` of a vector value (a scalar is the same in every lane, or +lane for contiguous addresses)."""
    if x.dtype.count == 1:
      if not contiguous or lane == 0: return self.r[x]
      t = reg_type(x.dtype)
      return self.op(f"add {t} {self.r[x]}, {lane}")
    return self.op(f"extractelement {reg_type(x.dtype)} {self.r[x]}, i32 {lane}")

  def render_store(self, u: UOp) -> None:
    index, value = u.src[0], u.src[1]
    if index.op is not Ops.INDEX: raise NotImplementedError(f"STORE to {index.op}")
    gate = index.src[2] if len(index.src) > 2 else None
    if index.src[1].dtype.count > 1 and gate is None and value.dtype.count == index.src[1].dtype.count:
      return self.scatter(index, value)
    if index.src[1].dtype.count > 1 or (gate is not None and gate.dtype.count > 1) or \
       (value.dtype.count > 1 and self._lanes(index) == 1 and index.dtype.base.count == 1):
      return self.store_lanes(index, value)
    dt = value.dtype
    if gate is not None:
      n = len(self.lines)
      self.emit(f"br i1 {self.r[gate]}, label %store{n}, label %store{n}_done")
      self.label(f"store{n}")
    raw = self.to_memory(self.r[value], dt)
    self.emit(f"store {mem_type(dt)} {raw}, ptr {self.r[index]}, align {dt.scalar().itemsize}")
    if gate is not None:
      self.emit(f"br label %store{n}_done")
      self.label(f"store{n}_done")

  def scatter(self, index: UOp, value: UOp) -> None:
    """A vector to a vector of addresses (the INDEX's vector of pointers): one llvm.masked.scatter, every lane on. One
    call, where a store per lane made LLVM's dead-store elimination walk them all (208 lanes: ~200 ms of compile)."""
    dt = value.dtype
    sc, n = dt.scalar(), dt.count
    name = f"llvm.masked.scatter.v{n}{'f' if dtypes.is_float(sc) else 'i'}{sc.itemsize * 8}.v{n}p0"
    t = _vec(mem_type(sc), n)
    self.decls[name] = f"declare void @{name}({t}, <{n} x ptr>, i32, <{n} x i1>)"
    on = "<" + ", ".join(["i1 true"] * n) + ">"
    self.emit(f"call void @{name}({t} {self.to_memory(self.r[value], dt)}, <{n} x ptr> {self.r[index]}, i32 {sc.itemsize}, "
              f"<{n} x i1> {on})")

  def store_lanes(self, index: UOp, value: UOp) -> None:
    buf, idx = index.src[0], index.src[1]
    gate = index.src[2] if len(index.src) > 2 else None
    sc = value.dtype.scalar()
    lanes = max(value.dtype.count, idx.dtype.count)
    for lane in range(lanes):
      i = self.lane_of(idx, lane, contiguous=idx.dtype.count == 1)
      it = reg_type(idx.dtype.scalar())
      v = self.lane_of(value, lane)
      n = len(self.lines)
      if gate is not None:
        self.emit(f"br i1 {self.lane_of(gate, lane)}, label %store{n}, label %store{n}_done")
        self.label(f"store{n}")
      p = self.op(f"getelementptr inbounds {mem_type(sc)}, ptr {self.r[buf]}, {it} {i}", "p")
      self.emit(f"store {mem_type(sc)} {self.to_memory(v, sc)}, ptr {p}, align {sc.itemsize}")
      if gate is not None:
        self.emit(f"br label %store{n}_done")
        self.label(f"store{n}_done")

  def from_memory(self, raw: str, dt: DType) -> str:
    sc = dt.scalar()
    if sc == dtypes.bool: return self.op(f"icmp ne {mem_type(dt)} {raw}, {_int_splat(0, 8, dt.count)}")
    if sc == dtypes.bfloat16:
      wide = self.op(f"zext {mem_type(dt)} {raw} to {_vec('i32', dt.count)}")
      bits = self.op(f"shl {_vec('i32', dt.count)} {wide}, {_int_splat(16, 32, dt.count)}")
      return self.op(f"bitcast {_vec('i32', dt.count)} {bits} to {reg_type(dt)}")
    return raw

  def to_memory(self, val: str, dt: DType) -> str:
    sc = dt.scalar()
    if sc == dtypes.bool: return self.op(f"zext {reg_type(dt)} {val} to {mem_type(dt)}")
    if sc == dtypes.bfloat16:   # registers hold exact bfloat16 values: keep the upper half
      bits = self.op(f"bitcast {reg_type(dt)} {val} to {_vec('i32', dt.count)}")
      hi = self.op(f"lshr {_vec('i32', dt.count)} {bits}, {_int_splat(16, 32, dt.count)}")
      return self.op(f"trunc {_vec('i32', dt.count)} {hi} to {mem_type(dt)}")
    return val

  def bf16_round(self, val: str, dt: DType) -> str:
    """Round a float (register form of bfloat16) to the nearest bfloat16, ties to even; NaN stays NaN."""
    n, i32 = dt.count, _vec("i32", dt.count)
    bits = self.op(f"bitcast {reg_type(dt)} {val} to {i32}")
    lsb = self.op(f"and {i32} {self.op(f'lshr {i32} {bits}, {_int_splat(16, 32, n)}')}, {_int_splat(1, 32, n)}")
    rounded = self.op(f"add {i32} {bits}, {self.op(f'add {i32} {lsb}, {_int_splat(0x7FFF, 32, n)}')}")
    isnan = self.op(f"fcmp uno {reg_type(dt)} {val}, {val}")
    quiet = self.op(f"or {i32} {bits}, {_int_splat(0x400000, 32, n)}")
    chosen = self.op(f"select {_vec('i1', n)} {isnan}, {i32} {quiet}, {i32} {rounded}")
    masked = self.op(f"and {i32} {chosen}, {_int_splat(-65536, 32, n)}")
    return self.op(f"bitcast {i32} {masked} to {reg_type(dt)}")

  # ---- vectors ----
  def render_vectorize(self, u: UOp) -> str:
    t, sc = reg_type(u.dtype), reg_type(u.dtype.scalar())
    lanes = [self.lane_of(s, i) for s in u.src for i in range(s.dtype.count)] if any(s.dtype.count > 1 for s in u.src) \
      else [self.r[s] for s in u.src]
    if len(set(lanes)) == 1:
      one = self.op(f"insertelement <1 x {sc}> poison, {sc} {lanes[0]}, i32 0")
      return self.op(f"shufflevector <1 x {sc}> {one}, <1 x {sc}> poison, <{len(lanes)} x i32> zeroinitializer")
    if sc == "i1" and len(lanes) <= 64: return self.bool_vector(lanes)
    if (picked := self.shuffled(u)) is not None: return picked
    out = "poison"
    for i, v in enumerate(lanes): out = self.op(f"insertelement {t} {out}, {sc} {v}, i32 {i}")
    return out

  def shuffled(self, u: UOp) -> str | None:
    """A VECTORIZE of lanes picked from a few vectors of one type (a tile's accumulators stored turned round, see
    passes/vectorize.py) as shufflevectors, two sources at a time, then merged: LLVM optimised and lowered a
    chain of an extract and an insert per lane more slowly (the strided CNN's step: ~0.2 s more to compile)."""
    if any(s.op is not Ops.GEP or len(s.arg) != 1 for s in u.src): return None
    srcs = list(dict.fromkeys(s.src[0] for s in u.src))
    if len(srcs) > 8 or any(v.dtype != srcs[0].dtype for v in srcs): return None
    n, w, t = len(u.src), srcs[0].dtype.count, reg_type(srcs[0].dtype)
    out_t = reg_type(u.dtype)
    parts = []
    for a, b in zip(srcs[0::2], srcs[1::2] + [None] * (len(srcs) % 2)):
      mask = [(s.arg[0] if s.src[0] is a else w + s.arg[0]) if s.src[0] in (a, b) else None for s in u.src]
      text = ", ".join("i32 undef" if m is None else f"i32 {m}" for m in mask)
      second = self.r[b] if b is not None else "poison"
      parts.append((self.op(f"shufflevector {t} {self.r[a]}, {t} {second}, <{n} x i32> <{text}>"),
                    {i for i, s in enumerate(u.src) if s.src[0] in (a, b)}))
    while len(parts) > 1:
      (x, xs), (y, ys) = parts[0], parts[1]
      text = ", ".join(f"i32 {i}" if i in xs else f"i32 {n + i}" if i in ys else "i32 undef" for i in range(n))
      parts = parts[2:] + [(self.op(f"shufflevector {out_t} {x}, {out_t} {y}, <{n} x i32> <{text}>"), xs | ys)]
    return parts[0][0]

  def bool_vector(self, lanes: list[str]) -> str:
    """Bools put together lane by lane (gates of a row's lanes: mostly one value, a few edges) as an integer whose bit
    k is lane k: one select and or per distinct value, then a bitcast, where inserting lane by lane costs a mask
    register shuffle per lane."""
    n, groups = len(lanes), {}
    for k, v in enumerate(lanes): groups.setdefault(v, []).append(k)
    it, acc = f"i{n}", "0"
    for v, ks in groups.items():
      bits = sum(1 << k for k in ks)
      bits = bits - (1 << n) if bits >= 1 << (n - 1) else bits   # as a signed iN literal
      if v in ("true", "1"): part = str(bits)
      elif v in ("false", "0"): continue
      else: part = self.op(f"select i1 {v}, {it} {bits}, {it} 0")
      acc = part if acc == "0" else self.op(f"or {it} {acc}, {part}")
    return self.op(f"bitcast {it} {acc} to <{n} x i1>")

  def render_gep(self, u: UOp) -> str:
    src = u.src[0]
    lanes = tuple(u.arg) if isinstance(u.arg, tuple) else (u.arg,)
    if src.dtype.count == 1: return self.r[src]
    if len(lanes) == 1: return self.op(f"extractelement {reg_type(src.dtype)} {self.r[src]}, i32 {lanes[0]}")
    mask = "<" + ", ".join(f"i32 {i}" for i in lanes) + ">"
    return self.op(f"shufflevector {reg_type(src.dtype)} {self.r[src]}, {reg_type(src.dtype)} poison, "
                   f"<{len(lanes)} x i32> {mask}")

  # ---- conversions ----
  def cast(self, x: str, src: DType, dst: DType) -> str:
    s, d = src.scalar(), dst.scalar()
    st, dt_ = reg_type(src), reg_type(dst)
    if s == d: return x
    if d == dtypes.bool:
      if dtypes.is_float(s): return self.op(f"fcmp une {st} {x}, {literal(0.0, src)}")
      return self.op(f"icmp ne {st} {x}, {literal(0, src)}")
    if s == dtypes.bool:
      if dtypes.is_float(d): return self._to_bf16(self.op(f"uitofp {st} {x} to {dt_}"), dst)
      return self.op(f"zext {st} {x} to {dt_}")
    if dtypes.is_float(s) and dtypes.is_float(d):
      sb, db = _FLOAT_BITS[_SCALAR_TYPES[s]], _FLOAT_BITS[_SCALAR_TYPES[d]]
      out = x if sb == db else self.op(f"{'fpext' if db > sb else 'fptrunc'} {st} {x} to {dt_}")
      return self._to_bf16(out, dst)
    if dtypes.is_float(s):   # float -> int: through a wide signed int as x86 C does, wrapped to the target
      bits = d.itemsize * 8
      if d == dtypes.uint64: return self.op(f"freeze {dt_} {self.op(f'fptoui {st} {x} to {dt_}')}")
      wide = 64 if d in (dtypes.int64, dtypes.uint32) else 32
      wt = _vec(f"i{wide}", dst.count)
      v = self.op(f"freeze {wt} {self.op(f'fptosi {st} {x} to {wt}')}")
      return v if wide == bits else self.op(f"trunc {wt} {v} to {dt_}")
    if dtypes.is_float(d):
      return self._to_bf16(self.op(f"{'uitofp' if dtypes.is_unsigned(s) else 'sitofp'} {st} {x} to {dt_}"), dst)
    sb, db = s.itemsize * 8, d.itemsize * 8
    if sb == db: return x
    if db < sb: return self.op(f"trunc {st} {x} to {dt_}")
    return self.op(f"{'zext' if dtypes.is_unsigned(s) else 'sext'} {st} {x} to {dt_}")

  def _to_bf16(self, x: str, dst: DType) -> str:
    return self.bf16_round(x, dst) if dst.scalar() == dtypes.bfloat16 else x

  def bitcast(self, x: str, src: DType, dst: DType) -> str:
    if src.scalar() == dtypes.bfloat16: x, src = self.to_memory(x, src), dtypes.int16.vec(src.count)
    if dst.scalar() == dtypes.bfloat16:
      raw = self.bitcast(x, src, dtypes.int16.vec(dst.count))
      return self.from_memory(raw, dst)
    if reg_type(src) == reg_type(dst): return x
    return self.op(f"bitcast {reg_type(src)} {x} to {reg_type(dst)}")

  # ---- arithmetic ----
  def alu(self, u: UOp) -> str:
    op, dt = u.op, u.src[-1].dtype if u.op is Ops.WHERE else u.src[0].dtype
    a = [self.r[s] for s in u.src]
    t = reg_type(dt)
    sc = dt.scalar()
    is_float, is_bool, unsigned = dtypes.is_float(sc), sc == dtypes.bool, dtypes.is_unsigned(sc)
    # reductions may reassociate (vectorized sums); everything else only contracts a*b+c into an fma, except in half:
    # a CPU with native half math (AVX512-FP16) would then round a*b+a once where numpy and torch round twice
    contract = "" if sc == dtypes.float16 else "contract "
    fm = f"reassoc {contract}" if self.reassociable(u) else contract
    if op is Ops.WHERE:
      return self.op(f"select {reg_type(u.src[0].dtype)} {a[0]}, {t} {a[1]}, {t} {a[2]}")
    if op in GroupOp.Comparison:
      if is_float: pred = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op]
      else: pred = {Ops.CMPLT: "ult" if (unsigned or is_bool) else "slt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
      return self.op(f"{'fcmp' if is_float else 'icmp'} {pred} {t} {a[0]}, {a[1]}")
    if is_bool:
      bool_ops = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor",
                  Ops.SUB: "xor"}
      if op in bool_ops: return self.op(f"{bool_ops[op]} {t} {a[0]}, {a[1]}")
      if op is Ops.NEG: return self.op(f"xor {t} {a[0]}, {literal(True, dt)}")
    if is_float:
      simple = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv", Ops.MOD: "frem"}
      if op in simple: return self.op(f"{simple[op]} {fm if op in (Ops.ADD, Ops.MUL) else ''}{t} {a[0]}, {a[1]}")
      if op is Ops.NEG: return self.op(f"fneg {t} {a[0]}")
      # a max reduction's update may also ignore the sign of zero (either zero is the max of -0 and +0): only then does
      # LLVM's loop vectorizer take an llvm.maximum recurrence (max(1) of 512x1000 171 -> 84 us, one Zen 4 thread);
      # NaN still wins. An elementwise maximum keeps +0 over -0
      if op is Ops.MAX: return self.call("maximum", dt, a[0], a[1], flags=fm + ("nsz " if fm.startswith("reassoc") else ""))
      if op is Ops.RECIPROCAL: return self.op(f"fdiv {t} {literal(1.0, dt)}, {a[0]}")
      if op is Ops.MULACC: return self.call("fmuladd", dt, a[0], a[1], a[2])
      if (v := self.float_call(op, dt, a[0])) is not None: return v
      unary = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
      if op in unary: return self.call(unary[op], dt, a[0])
      if op is Ops.POW: return self.call("pow", dt, a[0], a[1])
      raise NotImplementedError(f"the LLVM IR renderer has no float {op}")
    # integers
    simple = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor",
              Ops.SHL: "shl", Ops.SHR: "lshr" if unsigned else "ashr"}
    if op in simple:
      flags = "nsw " if u in self.address_math and not unsigned else ""
      return self.op(f"{simple[op]} {flags}{t} {a[0]}, {a[1]}")
    if op is Ops.NEG: return self.op(f"sub {t} {literal(0, dt)}, {a[0]}")
    if op is Ops.MAX:
      gt = self.op(f"icmp {'ugt' if unsigned else 'sgt'} {t} {a[0]}, {a[1]}")
      return self.op(f"select {_vec('i1', dt.count)} {gt}, {t} {a[0]}, {t} {a[1]}")
    if op is Ops.MULACC: return self.op(f"add {t} {self.op(f'mul {t} {a[0]}, {a[1]}')}, {a[2]}")
    if op in (Ops.IDIV, Ops.MOD): return self.int_divmod(op, t, dt, a[0], a[1], unsigned)
    if op is Ops.TRUNC: return a[0]
    raise NotImplementedError(f"the LLVM IR renderer has no integer {op}")

  def int_divmod(self, op: Ops, t: str, dt: DType, x: str, y: str, unsigned: bool) -> str:
    """C division (truncating) that never traps: x/0 gives x (x%0 gives 0); INT_MIN/-1 wraps to INT_MIN."""
    b1 = _vec("i1", dt.count)
    zero, one = literal(0, dt), literal(1, dt)
    bad = self.op(f"icmp eq {t} {y}, {zero}")
    if not unsigned:
      neg1 = self.op(f"icmp eq {t} {y}, {literal(-1, dt)}")
      bad = self.op(f"or {b1} {bad}, {neg1}")
    safe = self.op(f"select {b1} {bad}, {t} {one}, {t} {y}")
    if op is Ops.MOD: return self.op(f"{'urem' if unsigned else 'srem'} {t} {x}, {safe}")
    q = self.op(f"{'udiv' if unsigned else 'sdiv'} {t} {x}, {safe}")
    if unsigned: return q
    return self.op(f"select {b1} {neg1}, {t} {self.op(f'sub {t} {zero}, {x}')}, {t} {q}")

_INT_EVAL = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
             Ops.IDIV: lambda a, b: int(a / b) if b else 0, Ops.MOD: lambda a, b: a - b * int(a / b) if b else 0,
             Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b, Ops.AND: lambda a, b: a & b,
             Ops.MAX: max, Ops.CMPLT: lambda a, b: int(a < b), Ops.CMPNE: lambda a, b: int(a != b),
             Ops.WHERE: lambda c, a, b: a if c else b}

def _int_eval(u: UOp, env: dict[UOp, int]) -> int | None:
  """The value of an index expression with the given loop indices (other loops at 0, variables at their minimum);
  None when it depends on something else (a load)."""
  memo: dict[UOp, int | None] = {}
  def ev(x: UOp) -> int | None:
    if x in memo: return memo[x]
    if x.op is Ops.CONST: v = int(x.arg)
    elif x.op is Ops.RANGE: v = env.get(x, 0)
    elif x.op is Ops.DEFINE_VAR: v = int(x.arg[1])
    elif x.op is Ops.CAST: v = ev(x.src[0])
    elif x.op in _INT_EVAL:
      args = [ev(s) for s in x.src]
      v = None if any(a is None for a in args) else _INT_EVAL[x.op](*args)
    else: v = None
    memo[x] = v
    return v
  return ev(u)

class _Values(dict):
  """Operands by uop; constants may be used without being listed (hand-built programs), others must come first."""
  def __missing__(self, u: UOp) -> str:
    if u.op is Ops.CONST: return literal(u.arg, u.dtype)
    if u.op is Ops.VCONST: return literal(tuple(u.arg), u.dtype)
    raise ValueError(f"the program uses {u.op} ({u.dtype!r}) before defining it")

def _int_splat(v: int, bits: int, n: int) -> str:
  return literal(v, {32: dtypes.int32, 16: dtypes.int16, 8: dtypes.int8}[bits].vec(n))
