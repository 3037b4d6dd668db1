"""The PYTHON reference device: runs linear programs directly, one numpy operation per UOp for all threads at once.

Every GPU thread of a launch is one lane of the numpy arrays, so work-group barriers hold by construction (all lanes
finish an op before the next starts), local memory is an array per work-group, and loops (RANGE ... END) run in
Python. Semantics follow C: integer division truncates, shifts and overflow wrap in the dtype."""
from __future__ import annotations
import math, time
from typing import Any, Callable
import numpy as np
from tinyplug.backend import LAUNCH_IDS, Compiled, Compiler, HostAllocator, ProgramSpec, Renderer
from tinyplug.uop.dtype import DType, PtrDType, dtypes, to_np_dtype
from tinyplug.uop.ops import Ops, GroupOp, UOp

class PythonRenderer(Renderer):
  """The 'source' is a readable listing of the program; the interpreter runs the UOps themselves."""
  device = "PYTHON"
  launch = LAUNCH_IDS     # every output element is a launch id, like a GPU, but the heuristic builds no work-groups
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)
  local_max = (1024, 1024, 64)
  shared_max = 65536
  # every dtype in vectors, so the interpreter runs (and tests check) the vector programs GPU renderers get
  vector_widths = {dt: (16, 8, 4, 2) for dt in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                   dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16,
                   dtypes.float32, dtypes.float64)}
  def render(self, name: str, uops: list[UOp]) -> str:
    ids = {u: i for i, u in enumerate(uops)}
    lines = [f"# kernel {name}"]
    depth = 0
    for i, u in enumerate(uops):
      if u.op is Ops.END: depth -= 1
      srcs = ", ".join(f"%{ids[s]}" if s in ids else "?" for s in u.src)
      arg = "" if u.arg is None else f" {u.arg!r}"
      lines.append(f"{'  ' * depth}%{i:<4d} = {u.op.name:13s} {u.dtype!r:22s} ({srcs}){arg}")
      if u.op is Ops.RANGE: depth += 1
    return "\n".join(lines)

def _np(dt: DType) -> np.dtype: return to_np_dtype(dt.scalar())

# bfloat16 lives in memory as its raw 16 bits and in registers as float32 values rounded to bfloat16
def _reg(dt: DType) -> np.dtype: return np.dtype(np.float32) if dt.scalar() == dtypes.bfloat16 else _np(dt)

def _bf16_bits(x: Any) -> np.ndarray:
  bits = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32).astype(np.uint64)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even
  return np.where(np.isnan(np.asarray(x, dtype=np.float32)), np.uint16(0x7FC0), rounded)

def _bf16_value(bits: Any) -> np.ndarray:
  return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)

def _round_bf16(x: Any) -> np.ndarray: return _bf16_value(_bf16_bits(x))

def _c_idiv(a, b):
  """C division: truncates toward zero (floor division, moved up by one where it rounded a negative quotient down)."""
  b_safe = np.where(b == 0, 1, b)
  q = np.floor_divide(a, b_safe)
  return np.where((np.remainder(a, b_safe) != 0) & ((a < 0) != (b_safe < 0)), q + 1, q)

def _alu(op: Ops, dtype: DType, src: list[Any], src_dtypes: list[DType]) -> Any:
  is_float = dtypes.is_float(dtype)
  if op is Ops.ADD: return np.add(src[0], src[1])
  if op is Ops.SUB: return np.subtract(src[0], src[1])
  if op is Ops.MUL: return np.multiply(src[0], src[1]) if dtype.scalar() != dtypes.bool else np.logical_and(src[0], src[1])
  if op is Ops.FDIV: return np.divide(src[0], src[1])
  if op is Ops.IDIV: return _c_idiv(src[0], src[1])
  if op is Ops.MOD:
    b = src[1]
    return np.where(b == 0, 0, src[0] - b * _c_idiv(src[0], b)) if not is_float else np.fmod(src[0], b)
  if op is Ops.MAX: return np.maximum(src[0], src[1])
  if op is Ops.NEG: return np.negative(src[0]) if dtype.scalar() != dtypes.bool else np.logical_not(src[0])
  if op is Ops.CMPLT: return np.less(src[0], src[1])
  if op is Ops.CMPNE: return np.not_equal(src[0], src[1])
  if op is Ops.CMPEQ: return np.equal(src[0], src[1])
  if op is Ops.AND: return np.bitwise_and(src[0], src[1])
  if op is Ops.OR: return np.bitwise_or(src[0], src[1])
  if op is Ops.XOR: return np.bitwise_xor(src[0], src[1])
  if op is Ops.SHL: return np.left_shift(src[0], np.asarray(src[1]).astype(_np(dtype)))
  if op is Ops.SHR: return np.right_shift(src[0], np.asarray(src[1]).astype(_np(dtype)))
  if op is Ops.WHERE: return np.where(src[0], src[1], src[2])
  if op is Ops.MULACC: return np.add(np.multiply(src[0], src[1]), src[2])
  if op is Ops.EXP2: return np.exp2(src[0])
  if op is Ops.LOG2: return np.log2(src[0])
  if op is Ops.SIN: return np.sin(src[0])
  if op is Ops.SQRT: return np.sqrt(src[0])
  if op is Ops.RECIPROCAL: return np.reciprocal(np.asarray(src[0], dtype=_reg(dtype)))
  if op is Ops.TRUNC: return np.trunc(src[0])
  if op is Ops.POW: return np.power(src[0], src[1])
  raise NotImplementedError(f"the PYTHON device cannot run {op}")

def _cast(x: Any, dtype: DType, from_dtype: DType) -> Any:
  npdt = _reg(dtype)
  x = np.asarray(x)
  if dtype.scalar() == dtypes.bool: return x != 0
  if dtype.scalar() == dtypes.bfloat16: return _round_bf16(x.astype(np.float32))
  if dtypes.is_int(dtype) and dtypes.is_float(from_dtype):
    # C truncation; out-of-range and NaN are undefined in C: give 0 rather than a numpy warning
    x = np.where(np.isfinite(x), np.trunc(x), 0)
    info = np.iinfo(npdt)
    x = np.where((x >= info.min) & (x <= info.max), x, 0)
  return x.astype(npdt)

class PythonProgram:
  def __init__(self, name: str, uops: tuple[UOp, ...]):
    self.name, self.uops = name, list(uops)
    # where each loop starts, and where each END jumps back to
    self.range_pc = {u: i for i, u in enumerate(self.uops) if u.op is Ops.RANGE}

  def __call__(self, *bufs: np.ndarray, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float:
    st = time.perf_counter()
    with np.errstate(all="ignore"): self._run(bufs, tuple(global_size), tuple(local_size or (1, 1, 1)), vals)
    return time.perf_counter() - st

  def _run(self, bufs, gsize, lsize, vals) -> None:
    n_groups, n_local = math.prod(gsize), math.prod(lsize)
    n = n_groups * n_local
    tid = np.arange(n, dtype=np.int64)
    group, local = tid // n_local, tid % n_local
    ids: dict[str, np.ndarray] = {}
    for prefix, flat, sizes in (("gidx", group, gsize), ("lidx", local, lsize)):
      rem = flat
      for d, s in enumerate(sizes):
        ids[f"{prefix}{d}"] = rem % s   # int64 here; each SPECIAL takes its own dtype (int32, or int64 when wide)
        rem = rem // s
    lanes = np.arange(n)
    # vals come in the order of the variables' names (ProgramSpec.vars), not the order the uops use them
    var_vals = dict(zip(sorted(u.arg for u in self.uops if u.op is Ops.DEFINE_VAR), vals))
    v: dict[UOp, Any] = {}
    masks: list[Any] = []
    pc, uops = 0, self.uops
    while pc < len(uops):
      u = uops[pc]
      op = u.op
      if op is Ops.DEFINE_GLOBAL:
        base = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        raw, npdt = bufs[u.arg], _np(base)
        # a buffer of no elements is one byte (allocators hand out at least one): it views as an empty array
        v[u] = (raw if raw.nbytes % npdt.itemsize == 0 else raw[:raw.nbytes - raw.nbytes % npdt.itemsize]).view(npdt)
      elif op is Ops.DEFINE_VAR: v[u] = _reg(u.dtype).type(var_vals[u.arg])
      elif op is Ops.DEFINE_LOCAL: v[u] = ("local", np.zeros((n_groups, u.dtype.size), dtype=_reg(u.dtype.base)), group)
      elif op is Ops.DEFINE_REG:   # a register array of vectors has one more axis, the vector lanes
        shape = (n, u.dtype.size) + ((u.dtype.base.count,) if u.dtype.base.count > 1 else ())
        v[u] = ("reg", np.zeros(shape, dtype=_reg(u.dtype.base)), lanes)
      elif op is Ops.CONST or op is Ops.VCONST:   # a vector CONST broadcasts; VCONST has one value per lane
        v[u] = np.array(u.arg, dtype=_reg(u.dtype))
        if u.dtype.scalar() == dtypes.bfloat16: v[u] = _round_bf16(v[u])
      elif op is Ops.SPECIAL: v[u] = ids[u.arg[0]].astype(_reg(u.dtype))
      elif op is Ops.RANGE:
        if u not in v: v[u] = _reg(u.dtype).type(0)
        if v[u] >= v[u.src[0]]:   # empty loop: skip to after its END
          pc = self._end_of(pc); v.pop(u); continue
      elif op is Ops.END:
        r = u.src[0]
        v[r] = _reg(r.dtype).type(v[r] + 1)
        if v[r] < v[r.src[0]]:
          pc = self.range_pc[r] + 1; continue
        v.pop(r)
      elif op is Ops.INDEX:
        mem = v[u.src[0]]
        width = u.dtype.v if isinstance(u.dtype, PtrDType) else 1
        idx = v[u.src[1]] if width == 1 else np.asarray(v[u.src[1]])[..., None] + np.arange(width)
        gate = v[u.src[2]] if len(u.src) > 2 else None
        lane_gates = len(u.src) > 2 and u.src[2].dtype.count > 1   # one gate per lane already
        v[u] = (mem, idx, gate if gate is None or width == 1 or lane_gates else np.asarray(gate)[..., None], width)
      elif op is Ops.LOAD:
        if u.dtype.scalar() == dtypes.bfloat16 and not isinstance(v[u.src[0]][0], tuple):   # memory holds raw bits
          alt = _bf16_bits(v[u.src[1]]) if len(u.src) > 1 else None
          v[u] = _bf16_value(self._load(v[u.src[0]], alt, u.dtype, n))
        else: v[u] = self._load(v[u.src[0]], v[u.src[1]] if len(u.src) > 1 else None, u.dtype, n)
      elif op is Ops.STORE:
        val = v[u.src[1]]
        if u.src[1].dtype.scalar() == dtypes.bfloat16 and not isinstance(v[u.src[0]][0], tuple): val = _bf16_bits(val)
        self._store(v[u.src[0]], val, masks, n)
      elif op is Ops.IF: masks.append(v[u.src[0]])
      elif op is Ops.ENDIF: masks.pop()
      elif op is Ops.BARRIER: pass
      elif op is Ops.CAST: v[u] = _cast(v[u.src[0]], u.dtype, u.src[0].dtype)
      elif op is Ops.BITCAST:
        x = v[u.src[0]]
        if u.src[0].dtype.scalar() == dtypes.bfloat16: x = _bf16_bits(x)
        out = np.ascontiguousarray(np.asarray(x)).view(_np(u.dtype))
        v[u] = _bf16_value(out) if u.dtype.scalar() == dtypes.bfloat16 else out
      elif op is Ops.VECTORIZE: v[u] = np.stack(np.broadcast_arrays(*[np.asarray(v[s]) for s in u.src]), axis=-1)
      elif op is Ops.GEP:
        x = v[u.src[0]]
        v[u] = x[..., u.arg[0]] if len(u.arg) == 1 else x[..., list(u.arg)]
      elif op in GroupOp.ALU:
        out = _alu(op, u.dtype, [v[s] for s in u.src], [s.dtype for s in u.src])
        v[u] = np.asarray(out).astype(_reg(u.dtype), copy=False)
        if u.dtype.scalar() == dtypes.bfloat16: v[u] = _round_bf16(v[u])
      elif op is Ops.SINK or op is Ops.NOOP: pass
      else: raise NotImplementedError(f"the PYTHON device cannot run {op}")
      pc += 1

  def _end_of(self, pc: int) -> int:
    r = self.uops[pc]
    for i in range(pc + 1, len(self.uops)):
      if self.uops[i].op is Ops.END and self.uops[i].src[0] is r: return i + 1
    raise RuntimeError(f"loop {r.arg} has no END")

  @staticmethod
  def _address(index) -> tuple[np.ndarray, Any, Any]:
    mem, idx, gate, _ = index
    if isinstance(mem, tuple):  # local memory or registers: one row per work-group / lane
      _, arr, rows = mem
      return arr, (rows, idx), gate
    return mem, idx, gate

  def _load(self, index, alt, dtype: DType, n: int) -> Any:
    arr, idx, gate = self._address(index)
    if gate is None: return arr[idx]
    if isinstance(idx, tuple):
      rows, col = idx
      return np.where(gate, arr[rows, np.where(gate, col, 0)], alt)
    safe = np.where(gate, idx, 0)
    return np.where(gate, arr[safe] if arr.size else np.zeros_like(safe, dtype=arr.dtype), alt)

  def _store(self, index, value, masks: list, n: int) -> None:
    arr, idx, gate = self._address(index)
    mask = gate
    # a vector access has a trailing lane axis: IF masks (one per thread) broadcast over it
    for m in masks:
      if index[3] > 1: m = np.asarray(m)[..., None]
      mask = m if mask is None else np.logical_and(mask, m)
    if isinstance(idx, tuple) and arr.ndim == 3:   # registers holding vectors: one vector per (thread, slot)
      rows, col = idx
      arr[rows, col] = value if mask is None else np.where(np.asarray(mask)[..., None], value, arr[rows, col])
      return
    if isinstance(idx, tuple):
      rows, col = idx
      rows, col, value = np.broadcast_arrays(rows, col, value)
      if mask is not None:
        keep = np.broadcast_to(mask, rows.shape)
        rows, col, value = rows[keep], col[keep], value[keep]
      arr[rows, col] = value
      return
    idx_b, val_b = np.broadcast_arrays(np.asarray(idx), np.asarray(value))
    if mask is not None:
      keep = np.broadcast_to(mask, idx_b.shape)
      idx_b, val_b = idx_b[keep], val_b[keep]
    if idx_b.ndim == 0: arr[int(idx_b)] = val_b
    else: arr[idx_b] = val_b

class PythonCompiler(Compiler):
  pass

class PythonDevice(Compiled):
  def __init__(self, name: str):
    super().__init__(name, HostAllocator(), PythonRenderer(), PythonCompiler())
  def make_program(self, spec: ProgramSpec, lib: bytes) -> Callable[..., float]:
    return PythonProgram(spec.name, spec.uops)
