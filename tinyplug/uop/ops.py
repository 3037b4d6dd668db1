"""UOp: the one immutable, hash-consed IR node used from the Tensor graph down to the linear program."""
from __future__ import annotations
import collections, functools, itertools, math, operator, weakref
from enum import Enum, auto
from typing import Any, Callable, Iterator
from tinyplug.uop.dtype import DType, PtrDType, dtypes, ConstType, truncate
# registers copyreg reducers for code objects and modules (pickled pattern tables and TinyJits need them)
from tinyplug.uop.pickling import deconstruct_function  # noqa: F401

class Ops(Enum):
  # members are singletons: hash by identity in C (Enum's own __hash__ is a Python call on every dict/set lookup)
  __hash__ = object.__hash__
  # graph structure and identity
  SINK = auto(); NOOP = auto(); UNIQUE = auto(); DEVICE = auto(); KERNEL = auto()
  # buffers and variables
  BUFFER = auto(); DEFINE_GLOBAL = auto(); DEFINE_LOCAL = auto(); DEFINE_REG = auto()
  DEFINE_VAR = auto(); BIND = auto()
  # constants
  CONST = auto(); VCONST = auto()
  # movement (tensor level; turned into index math by the scheduler)
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
  # tensor-level operations
  COPY = auto(); ASSIGN = auto(); CONTIGUOUS = auto(); DETACH = auto(); REDUCE_AXIS = auto(); AFTER = auto()
  # kernel-level
  INDEX = auto(); LOAD = auto(); STORE = auto(); RANGE = auto(); END = auto(); REDUCE = auto()
  IF = auto(); ENDIF = auto(); BARRIER = auto(); SPECIAL = auto()
  VECTORIZE = auto(); GEP = auto()
  # conversions
  CAST = auto(); BITCAST = auto()
  # unary ALU
  EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto(); NEG = auto(); TRUNC = auto()
  # binary ALU
  ADD = auto(); MUL = auto(); SUB = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); POW = auto()
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  THREEFRY = auto()
  # ternary ALU
  WHERE = auto(); MULACC = auto()
  # tensor level: CUSTOM_GRAD(value, *inputs, arg=GradFn) is `value` with its own gradient rule (gradient.py); last so
  # that adding it renumbered no other op
  CUSTOM_GRAD = auto()
  # a schedule in tinygrad's form: LINEAR(CALL(kernel ast, *buffers), ...) (Tensor.schedule_linear)
  LINEAR = auto(); CALL = auto()
  # a host-side step in a LINEAR (a TinyJit's copies run on the host: CALL(CUSTOM_FUNCTION("copy"), dest, src))
  CUSTOM_FUNCTION = auto()
  # kernel level: WMMA(*a elements, *b elements, *c elements) is one matrix multiply-accumulate that a group of threads
  # (a warp) runs together on a tensor core, arg = the TensorCore's name (tinyplug.backend.TensorCore); its dtype is a
  # vector of this thread's elements of D = A @ B + C (GEP picks one)
  WMMA = auto()
  # tensor level: MULTI(shard on device 0, shard on device 1, ...) is one tensor split over several devices, arg = the
  # axis it is split along (None: each device holds all of it); its shape is the whole tensor's, its device the tuple
  # of the shards' devices. The scheduler lowers every op over it to per-device ops first (schedule/multi.py)
  MULTI = auto()
  # tensor level: SCATTER_ADD(src (n, w), idx (n,) or (n, w), arg=rows) is a (rows, w) table of zeros with src[i, j]
  # added to row idx[i] (idx[i, j]), i in order (idx outside [0, rows) adds nothing); built only for renderers that declare
  # `row_scatter_add` (the scheduler makes it a zeroing kernel and a kernel with an ordered loop over the indices; over
  # scatter.block_index the second alone)
  SCATTER_ADD = auto()

  def __str__(self) -> str: return f"Ops.{self.name}"
  def __lt__(self, other: Ops) -> bool: return self.value < other.value

class GroupOp:
  Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.SUB, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.POW, Ops.CMPLT, Ops.CMPNE,
                      Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.CONST, Ops.DEFINE_VAR})
  Defines = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
  Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
  Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
  Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
  # ops where a padded zero does not stay zero (log2(0), 1/0, ...): padding must mask them
  UnsafePad = frozenset({Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW, Ops.FDIV, Ops.CMPLT, Ops.CMPEQ})
  All = frozenset(Ops)

def _arg_key(arg: Any) -> Any:
  # floats need their sign and NaN-ness in the cache key: 0.0 == -0.0 and nan != nan would merge or split wrongly.
  # Any other float is equal only to itself: it is its own key (hex() cost ~0.15 us per new constant)
  if type(arg) is float: return (float, arg if arg else arg.hex()) if arg == arg else (float, "nan")
  if type(arg) is tuple and float in map(type, arg): return tuple(_arg_key(a) for a in arg)
  return arg

_unique_ids = itertools.count()
# creation order: a node is always newer than every node below it (hash-consing hands out the first one made)
_next_seq = itertools.count().__next__

# DTypes are frozen dataclasses: hashing or comparing one walks all its fields. The UOp cache keys on the id of
# one canonical object per distinct dtype instead, found by the id of the dtype given (kept alive with its entry).
_dtype_by_id: dict[int, tuple[DType, DType]] = {}
_canonical_dtypes: dict[DType, DType] = {}

def _canonical_dtype(dt: DType) -> DType:
  if (hit := _dtype_by_id.get(id(dt))) is not None and hit[0] is dt: return hit[1]
  canon = _canonical_dtypes.setdefault(dt, dt)
  if len(_dtype_by_id) > 65536: _dtype_by_id.clear()
  _dtype_by_id[id(dt)] = (dt, canon)
  return canon

def canonical_dtype(dt: DType) -> DType:
  """The one object every node of a dtype equal to `dt` holds as its dtype."""
  return _canonical_dtype(dt)

class _CacheRef(weakref.ref):
  __slots__ = ("key",)

# no device addresses more than 2^47 bytes (128 TiB, the user address space of x86-64 and arm64): a larger buffer
# is a mistake, and its byte count would wrap in a driver's size_t arithmetic (a tiny buffer, then heap reads)
MAX_BUFFER_BYTES = 1 << 47

def check_buffer_size(size: int, dtype: DType) -> None:
  """ValueError for a buffer no device can hold (or a negative size), naming the size."""
  nbytes = size * dtype.itemsize
  if size < 0 or nbytes > MAX_BUFFER_BYTES:
    raise ValueError(f"cannot create a buffer of {size} elements of {dtype!r} ({nbytes} bytes): "
                     f"{'a negative size' if size < 0 else f'more than the {MAX_BUFFER_BYTES >> 40} TiB any device can address'}")

class UOpMeta(type):
  # the weak cache: same (op, dtype, src, arg) gives the same object while anyone holds it
  ucache: dict[tuple, weakref.ReferenceType] = {}
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    if type(src) is not tuple: raise TypeError(f"UOp src must be a tuple of UOps, got {type(src).__name__}")
    # _canonical_dtype's usual hit, inline (every node made or looked up comes here)
    if (hit := _dtype_by_id.get(id(dtype))) is not None and hit[0] is dtype: dtype = hit[1]
    else: dtype = _canonical_dtype(dtype)
    # UNIQUE nodes and the BUFFER nodes over them are interned apart from ucache (see _unique_nodes)
    # (the members bound once: an attribute of an Enum class costs ~80 ns, EnumType has a __getattr__)
    if op is _UNIQUE_OP and not src and dtype is _VOID and type(arg) is int: return _unique_node(arg)
    if op is _BUFFER_OP and len(src) == 2 and src[0].op is _UNIQUE_OP: return _buffer_over(dtype, src, arg)
    # op._value_ stands for op: an int hashes faster than an object
    return _intern((op._value_, id(dtype), src, arg if type(arg) in _PLAIN_ARGS else _arg_key(arg)), op, dtype, src, arg)

def uop_maker(op: Ops, dtype: DType, arg: Any) -> Callable[[tuple], UOp]:
  """A function src -> UOp(op, dtype, src, arg) that works out the rest of the cache key once (for code that builds
  the same kind of node over and over, like graph templates)."""
  dtype = _canonical_dtype(dtype)
  opv, dtid, argkey = op._value_, id(dtype), arg if type(arg) in _PLAIN_ARGS else _arg_key(arg)
  def make(src: tuple) -> UOp:
    if type(src) is not tuple: raise TypeError(f"UOp src must be a tuple of UOps, got {type(src).__name__}")
    return _intern((opv, dtid, src, argkey), op, dtype, src, arg)
  if op is Ops.UNIQUE or op is Ops.BUFFER: return lambda src: UOp(op, dtype, src, arg)   # (interned apart)
  return make

def uop_finder(op: Ops, dtype: DType, arg: Any) -> Callable[[tuple], UOp | None]:
  """A function src -> the live node uop_maker(op, dtype, arg) would return for src, or None when no such node is
  alive (nothing is made): whether some graph anywhere still holds that node."""
  dtype = _canonical_dtype(dtype)
  opv, dtid, argkey = op._value_, id(dtype), arg if type(arg) in _PLAIN_ARGS else _arg_key(arg)
  get = UOpMeta.ucache.get
  def find(src: tuple) -> UOp | None:
    return None if (ref := get((opv, dtid, src, argkey))) is None else ref()
  if op is Ops.UNIQUE and dtype is _VOID and type(arg) is int:
    return lambda src: None if src or (ref := _unique_nodes.get(arg)) is None else ref()
  if op is Ops.BUFFER:
    def find_buffer(src: tuple) -> UOp | None:
      if len(src) == 2 and src[0].op is Ops.UNIQUE: return _find_buffer_over(dtype, src, arg)
      return find(src)
    return find_buffer
  return find

_PLAIN_ARGS = (type(None), int, str, bool)

_VOID = _canonical_dtype(dtypes.void)
_CONST_V, _UNIQUE_OP, _BUFFER_OP = Ops.CONST._value_, Ops.UNIQUE, Ops.BUFFER
_device_nodes: dict[str, weakref.ReferenceType] = {}   # device name -> its DEVICE node (weak: interning decides)

def device_node(device: str) -> UOp:
  """UOp(Ops.DEVICE, dtypes.void, arg=device), found by name while it lives (no cache key to build)."""
  if (ref := _device_nodes.get(device)) is not None and (dev := ref()) is not None: return dev
  dev = UOp(Ops.DEVICE, dtypes.void, arg=device)
  if type(device) is str: _device_nodes[device] = weakref.ref(dev)
  return dev

def known_node(op: Ops, dtype: DType, src: tuple, shape: Any, device: Any) -> UOp:
  """UOp(op, dtype, src) (arg None) for a maker that knows the node's shape and device and passes a canonical dtype
  (a node's own): a new node is made with them (no second store into its cache)."""
  return _intern((op._value_, id(dtype), src, None), op, dtype, src, None, {"shape": shape, "device": device})

def float_const_node(dtype: DType, device: UOp, value: float) -> UOp:
  """UOp(Ops.CONST, dtype, (device,), value) for a float `value` of a float dtype: the generic constructor's cache
  key, without its look at the arg."""
  if (hit := _dtype_by_id.get(id(dtype))) is not None and hit[0] is dtype: dtype = hit[1]
  else: dtype = _canonical_dtype(dtype)
  argkey = (float, value if value else value.hex()) if value == value else (float, "nan")   # (_arg_key's)
  return _intern((_CONST_V, id(dtype), (device,), argkey), Ops.CONST, dtype, (device,), value)

def shaped_node(op: Ops, src: UOp, shape: tuple[int, ...]) -> UOp:
  """UOp(op, src.dtype, (src,), shape).with_known_shape(shape) for a movement op whose arg is its shape, a tuple of
  ints (RESHAPE, EXPAND): the cache key needs no look at the arg, the dtype is the source's canonical one."""
  dtype = src.dtype
  return _intern((op._value_, id(dtype), (src,), shape), op, dtype, (src,), shape, {"shape": shape})

def view_node(op: Ops, src: UOp, arg: tuple, shape: tuple) -> UOp:
  """UOp(op, src.dtype, (src,), arg) for a movement op whose maker checked `arg` (a tuple of plain ints or bools, or of
  pairs of plain ints: its own cache key) and knows the result's `shape`: a new node gets its shape and device."""
  dtype = src.dtype
  return _intern((op._value_, id(dtype), (src,), arg), op, dtype, (src,), arg, {"shape": shape, "device": src.device})

# set by tinyplug.device (a higher layer, which uop/ does not import): BUFFER uop -> its device Buffer; BUFFER uop ->
# its Buffer when memory holds its values (else None); and (BUFFER uop, Buffer) -> None, to attach an unpickled Buffer
buffer_lookup: Callable[[UOp], Any] | None = None
realized_lookup: Callable[[UOp], Any] | None = None
buffer_attach: Callable[[UOp, Any], None] | None = None

def _unpickle_buffer(dtype: DType, device: UOp, size: int, contents: Any) -> UOp:
  # a fresh UNIQUE: the numbers of another process (or of buffers freed since) must not alias a live buffer here
  u = UOp(Ops.BUFFER, dtype, (UOp.unique(), device), size)
  if contents is not None and buffer_attach is not None: buffer_attach(u, contents)
  return u

_INT_PROMOTING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX})

def _operand_ok(x: Any) -> bool:
  # anything else (a Tensor) gets its reflected operator: `variable * tensor` is the tensor's multiplication
  return isinstance(x, (UOp, int, float, bool)) or type(x).__module__ == "numpy"

_MISSING = object()

def _drop_key(ref: _CacheRef, cache: dict = UOpMeta.ucache) -> None:
  # the cache dict is bound as a default so this still works while the interpreter shuts down. One lookup of the key
  # (a tuple's hash is worked out anew each time): the entry is taken out, and put back in the rare case that it is
  # a newer node's (made while this one's callback was pending, in a collection)
  if (got := cache.pop(ref.key, None)) is not ref and got is not None: cache[ref.key] = got

class _UOpFields:
  # a UOp's storage. UOp adds only behaviour (and the guard against mutation); _FreshUOp has the same layout without
  # the guard, so a new node's fields are plain stores (object.__setattr__ past the guard cost ~0.1-0.2 us a field,
  # ~1 us a node) before its class becomes UOp
  __slots__ = ("op", "dtype", "src", "arg", "_cache", "seq", "__weakref__")

class _FreshUOp(_UOpFields):
  __slots__ = ()

class UOp(_UOpFields, metaclass=UOpMeta):
  """An IR node: `op` on `src` with a `dtype` and an `arg`. Never mutate one; build a new one."""
  __slots__ = ()
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any

  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    if type(src) is not tuple: raise TypeError(f"UOp src must be a tuple of UOps, got {type(src).__name__}")
    object.__setattr__(self, "op", op); object.__setattr__(self, "dtype", dtype)
    object.__setattr__(self, "src", src); object.__setattr__(self, "arg", arg)
    object.__setattr__(self, "_cache", None); object.__setattr__(self, "seq", _next_seq())
  def __setattr__(self, name: str, value: Any) -> None: raise AttributeError("UOp is immutable; build a new one with .replace()")
  def __reduce__(self):
    if self.op is Ops.BUFFER and len(self.src) == 2:   # a buffer travels with its values (when it has any)
      return _unpickle_buffer, (self.dtype, self.src[1], self.arg, None if realized_lookup is None else realized_lookup(self))
    return UOp, (self.op, self.dtype, self.src, self.arg)
  def replace(self, **kwargs) -> UOp:
    new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src), kwargs.pop("arg", self.arg))
    if kwargs: raise TypeError(f"unknown UOp fields {sorted(kwargs)}")
    return UOp(*new)

  # cached derived facts live in one small dict per node
  def _cached(self, name: str, fn: Callable[[], Any]) -> Any:
    c = self._cache
    if c is None: object.__setattr__(self, "_cache", c := {})
    if name not in c: c[name] = fn()
    return c[name]
  def _remember(self, name: str, value: Any) -> Any:
    """Store an IR fact worked out elsewhere (without `_cached`'s closure, for a hot path) and return it."""
    if (c := self._cache) is None: object.__setattr__(self, "_cache", {name: value})
    else: c[name] = value
    return value

  # ---- printing ----
  def __repr__(self) -> str: return pretty_print(self)
  def short(self) -> str:
    """One line: op, dtype, arg; used by the Tensor repr."""
    return f"<UOp {self.op} {self.dtype!r} arg={self.arg!r}>"

  # ---- graph walks ----
  def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
    """All nodes reachable from self, each after its sources (iterative: deep graphs are fine)."""
    if gate is None and self._cache is not None and (below := self._cache.get("toposort")) is not None:
      ret = dict.fromkeys(below)
      ret[self] = None
      return ret
    visited: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      node, expanded = stack.pop()
      if node in visited: continue
      if expanded: visited[node] = None; continue
      stack.append((node, True))
      if gate is None or gate(node):
        for s in reversed(node.src):
          if s not in visited: stack.append((s, False))
    # the cache holds the nodes below self only: a node that referred to itself would live until the cyclic GC runs,
    # and with it every buffer in its graph
    if gate is None: self._cached("toposort", lambda: tuple(visited)[:-1])
    return visited
  def sparents(self) -> Iterator[UOp]: return iter(self.toposort())
  def substitute(self, mapping: dict[UOp, UOp], name: str | None = None) -> UOp:
    from tinyplug.uop.rewrite import graph_rewrite
    return graph_rewrite(self, _substitute_matcher(), ctx=mapping, bottom_up=True, name=name or "substitute")

  # ---- constructors ----
  @staticmethod
  def const(b: ConstType | tuple | DType, dtype: DType | ConstType | tuple | None = None) -> UOp:
    """A constant: `UOp.const(2.0, dtypes.float)` (tinygrad's order; the dtype defaults to the value's own).
    The (dtype, value) order that tinyplug used first is still accepted."""
    if isinstance(b, DType): b, dtype = dtype, b
    elif dtype is None: dtype = dtypes.from_py(b)
    # fast path: an int that fits an integer dtype is already what truncate would give
    if type(b) is int and type((r := _dtype_range(dtype))[1]) is int and r[1] <= b <= r[2]: return UOp(Ops.CONST, dtype, arg=b)
    if isinstance(b, UOp): return b
    if isinstance(b, tuple) and dtype.count > 1:
      return UOp(Ops.VCONST, dtype, arg=tuple(truncate(dtype.scalar(), x) for x in b))
    return UOp(Ops.CONST, dtype, arg=truncate(dtype, b))
  def const_like(self, b: ConstType | tuple) -> UOp:
    """A constant of this node's dtype (and device, for tensor-level nodes)."""
    if self.op is Ops.CONST and self.src: return UOp(Ops.CONST, self.dtype, self.src, truncate(self.dtype, b))
    return UOp.const(self.dtype, b)
  @staticmethod
  def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.int) -> UOp:
    if min_val > max_val: raise ValueError(f"variable {name!r}: min {min_val} is greater than max {max_val}")
    return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))
  def bind(self, val: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"only a variable can be bound, not {self.op}")
    if not (self.arg[1] <= val <= self.arg[2]): raise ValueError(f"{val} is out of range for variable {self.arg}")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))
  def unbind(self) -> tuple[UOp, int]:
    if self.op is not Ops.BIND: raise ValueError(f"{self.op} is not a BIND")
    return self.src[0], self.src[1].arg
  @property
  def expr(self) -> str:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"{self.op} is not a variable")
    return self.arg[0]
  def sink(self, *srcs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs)
  @staticmethod
  def unique() -> UOp: return _fresh_unique()
  @staticmethod
  def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A tensor-level BUFFER of `size` elements on `device`, distinct from every other buffer."""
    check_buffer_size(size, dtype)
    # every realize makes its output buffers here: the UNIQUE and DEVICE nodes skip the generic constructor
    dev = device_node(device)
    # a new node (its UNIQUE is new): its shape and device as shapes.py would work them out, known here already
    if type(size) is int: return _new_buffer_node(_canonical_dtype(dtype), dev, size, (size,), dev.arg)
    buf = UOp(Ops.BUFFER, dtype, (_fresh_unique(), dev), size)
    object.__setattr__(buf, "_cache", {"shape": (size,), "device": dev.arg})
    return buf
  @staticmethod
  def buffer_maker(device: str, size: int, dtype: DType, field: Any = None) -> Callable[..., UOp]:
    """A function making new_buffer(device, size, dtype) again and again, its checks and lookups done once (for code
    that makes the same kind of output every time: engine/plan.py). It holds the DEVICE node. With `field` (a
    NodeField) the function takes the value the new node gets in that field (a realized output's Buffer)."""
    check_buffer_size(size, dtype)
    if type(size) is not int:
      if field is None: return lambda: UOp.new_buffer(device, size, dtype)
      def make_with(value: Any) -> UOp:
        field[u := UOp.new_buffer(device, size, dtype)] = value
        return u
      return make_with
    dev, dtype, shape, new_node = UOp(Ops.DEVICE, dtypes.void, arg=device), _canonical_dtype(dtype), (size,), _new_buffer_node
    if field is None: return functools.partial(new_node, dtype, dev, size, shape, device)
    # (the field's value goes into the new node's cache with its shape and device; a partial: no Python frame)
    return functools.partial(new_node, dtype, dev, size, shape, device, field.key)
  def reshape(self, shape: tuple[int, ...]) -> UOp:
    return self if self.shape == tuple(shape) else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))

  # ---- ALU construction and Python operators ----
  def alu(self, op: Ops, *src: UOp) -> UOp:
    if src and op in _INT_PROMOTING and self.dtype != src[-1].dtype and \
       self.dtype.count == 1 == src[-1].dtype.count and \
       dtypes.is_int(self.dtype) and dtypes.is_int(src[-1].dtype):
      # two variables of different widths (an int and a long): the narrower one widens, as in C
      wide = max((self.dtype, src[-1].dtype), key=lambda d: d.itemsize)
      return self.cast(wide).alu(op, *src[:-1], src[-1].cast(wide))
    out_dtype = (self, *src)[-1].dtype
    if op in GroupOp.Comparison: out_dtype = dtypes.bool.vec(out_dtype.count)
    return UOp(op, out_dtype, (self, *src))
  def _operand(self, x: Any) -> UOp:
    return x if isinstance(x, UOp) else self.const_like(x)
  def ufix(self, x: Any) -> UOp:
    """A constant of our dtype; ints mixed into float math become floats, floats into int math stay float."""
    if isinstance(x, UOp): return x
    if isinstance(x, float) and not dtypes.is_float(self.dtype): return UOp.const(dtypes.default_float, x)
    return self.const_like(x)
  def __add__(self, x): return self.alu(Ops.ADD, self.ufix(x)) if _operand_ok(x) else NotImplemented
  def __radd__(self, x): return self.ufix(x).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.SUB, self.ufix(x)) if _operand_ok(x) else NotImplemented
  def __rsub__(self, x): return self.ufix(x).alu(Ops.SUB, self)
  def __mul__(self, x): return self.alu(Ops.MUL, self.ufix(x)) if _operand_ok(x) else NotImplemented
  def __rmul__(self, x): return self.ufix(x).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self.ufix(x)) if _operand_ok(x) else NotImplemented
  def __rfloordiv__(self, x): return self.ufix(x).alu(Ops.IDIV, self)
  def __truediv__(self, x):
    if not _operand_ok(x): return NotImplemented
    if dtypes.is_float(self.dtype): return self.alu(Ops.FDIV, self.ufix(x))
    return self.alu(Ops.IDIV, self.ufix(x))
  def __rtruediv__(self, x): return self.ufix(x).__truediv__(self)
  def __mod__(self, x): return self.alu(Ops.MOD, self.ufix(x)) if _operand_ok(x) else NotImplemented
  def __rmod__(self, x): return self.ufix(x).alu(Ops.MOD, self)
  def __neg__(self): return self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, self.ufix(x))
  def __gt__(self, x): return self.ufix(x).alu(Ops.CMPLT, self)
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def __and__(self, x): return self.alu(Ops.AND, self.ufix(x))
  def __rand__(self, x): return self.ufix(x).alu(Ops.AND, self)
  def __or__(self, x): return self.alu(Ops.OR, self.ufix(x))
  def __ror__(self, x): return self.ufix(x).alu(Ops.OR, self)
  def __xor__(self, x): return self.alu(Ops.XOR, self.ufix(x))
  def __rxor__(self, x): return self.ufix(x).alu(Ops.XOR, self)
  def __lshift__(self, x): return self.alu(Ops.SHL, self.ufix(x))
  def __rshift__(self, x): return self.alu(Ops.SHR, self.ufix(x))
  def __invert__(self): return self.logical_not() if self.dtype == dtypes.bool else self ^ -1
  def eq(self, x) -> UOp: return self.alu(Ops.CMPEQ, self.ufix(x))
  def ne(self, x) -> UOp: return self.alu(Ops.CMPNE, self.ufix(x))
  def logical_not(self) -> UOp: return self.ne(True)
  def maximum(self, x) -> UOp: return self.alu(Ops.MAX, self.ufix(x))
  def minimum(self, x) -> UOp: return -(-self).maximum(-self.ufix(x))
  def where(self, x, y) -> UOp:
    xu = x if isinstance(x, UOp) else (y.const_like(x) if isinstance(y, UOp) else UOp.const(dtypes.from_py(x), x))
    return self.alu(Ops.WHERE, xu, xu._operand(y))
  def reciprocal(self) -> UOp: return self.alu(Ops.RECIPROCAL)
  def sqrt(self) -> UOp: return self.alu(Ops.SQRT)
  def exp2(self) -> UOp: return self.alu(Ops.EXP2)
  def log2(self) -> UOp: return self.alu(Ops.LOG2)
  def sin(self) -> UOp: return self.alu(Ops.SIN)
  def trunc(self) -> UOp: return self.alu(Ops.TRUNC)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def __bool__(self) -> bool:
    if self.op is Ops.CONST: return bool(self.arg)
    lo, hi = self.vmin, self.vmax
    if lo == hi: return bool(lo)
    raise ValueError(f"the truth value of a symbolic expression is unknown: {self.render()}")
  def __int__(self) -> int:
    if self.vmin == self.vmax: return int(self.vmin)
    raise ValueError(f"cannot make an int from the symbolic expression {self.render()}")
  def __index__(self) -> int: return self.__int__()

  # ---- bounds (for symbolic simplification) ----
  @property
  def vmin(self) -> ConstType: return self._min_max[0]
  @property
  def vmax(self) -> ConstType: return self._min_max[1]
  @property
  def _min_max(self) -> tuple[ConstType, ConstType]:
    if (c := self._cache) is not None and (r := c.get("min_max")) is not None: return r
    return _compute_bounds(self)

  # ---- symbolic helpers ----
  def simplify(self) -> UOp:
    from tinyplug.uop.rewrite import graph_rewrite
    from tinyplug.uop.symbolic import symbolic
    return graph_rewrite(self, symbolic, name="simplify")
  def ssimplify(self) -> UOp | ConstType:
    return ret.arg if (ret := self.simplify()).op is Ops.CONST else ret
  def sym_infer(self, var_vals: dict[UOp, int] | dict[str, int]) -> ConstType:
    """Evaluates the expression with variables bound (keys may be variables or their names)."""
    return evaluate(self, {(k.arg[0] if isinstance(k, UOp) else k): v for k, v in var_vals.items()})
  def render(self, simplify: bool = False) -> str:
    """Short C-like text of an index expression: `((a+1)*2)`."""
    return render_expr(self.simplify() if simplify else self)

  # ---- tensor-level facts (shape and device of graph nodes; None where a node has no shape) ----
  @property
  def shape(self) -> tuple[int, ...] | None:
    # read on every Tensor op many times over: a hit must not build a closure or run an import
    # (and every realize makes new nodes whose shape is asked for: a miss builds no closure either)
    if (c := self._cache) is None: object.__setattr__(self, "_cache", c := {})
    elif (s := c.get("shape", _MISSING)) is not _MISSING: return s
    c["shape"] = s = shape_of(self)
    return s
  def with_known_shape(self, shape: tuple[int, ...] | None) -> UOp:
    """This node, with `shape` recorded as its shape: for a maker that has just checked it (the shape is then not
    worked out again on the first look)."""
    if (c := self._cache) is None: object.__setattr__(self, "_cache", {"shape": shape})
    elif "shape" not in c: c["shape"] = shape
    return self
  def with_known_shape_and_device(self, shape: tuple[int, ...] | None, device: str | tuple[str, ...] | None) -> UOp:
    """with_known_shape, and the device as well (a graph template's rebuilt output: the template's own output's)."""
    if (c := self._cache) is None: object.__setattr__(self, "_cache", {"shape": shape, "device": device})
    else:
      if "shape" not in c: c["shape"] = shape
      if "device" not in c: c["device"] = device
    return self
  @property
  def device(self) -> str | tuple[str, ...] | None:
    if (c := self._cache) is None: object.__setattr__(self, "_cache", c := {})
    elif (d := c.get("device", _MISSING)) is not _MISSING: return d
    c["device"] = d = device_of(self)
    return d
  @property
  def axis(self) -> int | None:
    """The axis a multi-device tensor is split along over its devices (None: replicated, or on one device)."""
    if (c := self._cache) is not None and (a := c.get("axis", _MISSING)) is not _MISSING: return a
    from tinyplug.uop.shapes import axis_of
    return self._cached("axis", lambda: axis_of(self))
  @property
  def size(self) -> int:
    shp = self.shape
    return 1 if shp is None else math.prod(shp)
  @property
  def base(self) -> UOp:
    """The node under any movement ops."""
    x = self
    while x.op in GroupOp.Movement: x = x.src[0]
    return x
  @property
  def buffer(self):
    """The device Buffer behind a (reshaped) BUFFER node (found by the device layer, which registers the lookup)."""
    if buffer_lookup is None: raise RuntimeError("no device layer is loaded to find the buffer of a BUFFER uop")
    return buffer_lookup(self)
  @property
  def key(self) -> bytes:
    """A digest of the graph under this node (ops, dtypes, args): equal graphs have equal keys, in any process."""
    if (c := self._cache) is not None and (k := c.get("key")) is not None: return k
    import hashlib
    for u in self.toposort():   # sources first, so each node hashes its sources' keys (no recursion on deep graphs)
      if u._cache is None or "key" not in u._cache:
        parts = (u.op.name, repr(u.dtype), repr(u.arg), *(s._cache["key"].hex() for s in u.src))
        u._cached("key", lambda parts=parts: hashlib.sha256(repr(parts).encode()).digest())
    return self._cache["key"]
  @property
  def realized(self):
    """The device Buffer holding this BUFFER node's values, or None (not a buffer, or not computed yet)."""
    return realized_lookup(self) if self.op is Ops.BUFFER and realized_lookup is not None else None
  @property
  def is_realized(self) -> bool:
    """Whether this node's values sit in device memory (a computed buffer, possibly seen through movement ops)."""
    return self.base.realized is not None
  def has_buffer_identity(self) -> bool:
    """Whether this node is a buffer itself (or a reshape of one), not a computation or a view that moves elements."""
    return self.src[0].has_buffer_identity() if self.op is Ops.RESHAPE else self.op is Ops.BUFFER
  @property
  def ptrdtype(self) -> PtrDType:
    if not isinstance(self.dtype, PtrDType): raise TypeError(f"{self.op} has dtype {self.dtype!r}, not a pointer")
    return self.dtype

# ---------------- printing ----------------

# (after UOp: its defaults bind the cache, the classes and the counter, so a node made costs no global lookups)
def _intern(key: tuple, op: Ops, dtype: DType, src: tuple, arg: Any, cache: dict | None = None, *,
            _ucache: dict = UOpMeta.ucache, _fresh: type = _FreshUOp, _uop: type = UOp, _ref: type = _CacheRef,
            _drop: Callable = _drop_key, _seq: Callable = _next_seq) -> UOp:
  """The node for a cache key (op._value_, id(canonical dtype), src, arg key): the live one, or a new one (its
  derived facts `cache`, when the caller knows them)."""
  if (ref := _ucache.get(key)) is not None and (hit := ref()) is not None: return hit
  # what UOp.__init__ does, without its Python frame: filled as a _FreshUOp with plain stores, then made a UOp
  obj = _fresh()
  obj.op, obj.dtype, obj.src, obj.arg, obj._cache, obj.seq = op, dtype, src, arg, cache, _seq()
  obj.__class__ = _uop
  ref = _ref(obj, _drop)
  ref.key = key
  _ucache[key] = ref
  return obj

# UNIQUE nodes by number, and each BUFFER node over a UNIQUE by a reference kept in that UNIQUE's own cache: plain weak
# references, no ucache entry, no key tuple, no callback when the node dies (every realized output, one per tiny op,
# is a new UNIQUE and a new BUFFER). A BUFFER's entry dies with its UNIQUE's cache. A UNIQUE has no sources, so its
# dead entry holds nothing alive; but each waiting reference is an object the cyclic collector counts (hundreds of
# them would set off collections), so the entries added since the last sweep (the table's last ones: a dict keeps its
# order) are swept every _YOUNG_UNIQUES additions, most of them dead by then, and the whole table when it has doubled
_unique_nodes: dict[int, weakref.ReferenceType] = {}
_YOUNG_UNIQUES = 128
_unique_sweep_at = [_YOUNG_UNIQUES, 1024]   # (the table's size that sets off the next sweep, and the next full one)
_BUFFERS_OVER = ("interned", "buffers over this unique")   # (a tuple: IR facts are named by str)

def _sweep_uniques() -> None:
  # the dead entries' numbers, then each popped: loops in C, and an entry another thread adds meanwhile stays
  at = _unique_sweep_at
  if full := len(_unique_nodes) > at[1]: pairs = list(_unique_nodes.items())
  else: pairs = list(itertools.islice(reversed(_unique_nodes.items()), max(0, len(_unique_nodes) - at[0] + _YOUNG_UNIQUES)))
  if pairs:
    numbers, refs = zip(*pairs)
    dead = itertools.compress(numbers, map(operator.is_, map(operator.call, refs), itertools.repeat(None)))
    collections.deque(map(_unique_nodes.pop, dead, itertools.repeat(None)), 0)
  at[0] = len(_unique_nodes) + _YOUNG_UNIQUES
  if full: at[1] = max(1024, 2 * len(_unique_nodes))

def _unique_node(n: int, cache: dict | None = None, *, _table: dict = _unique_nodes, _fresh: type = _FreshUOp,
                 _uop: type = UOp, _ref: type = weakref.ref, _seq: Callable = _next_seq) -> UOp:
  """UOp(Ops.UNIQUE, dtypes.void, arg=n): the live one, or a new one (with `cache`)."""
  if (r := _table.get(n)) is not None and (hit := r()) is not None: return hit
  obj = _fresh()
  obj.op, obj.dtype, obj.src, obj.arg, obj._cache, obj.seq = Ops.UNIQUE, _VOID, (), n, cache, _seq()
  obj.__class__ = _uop
  _table[n] = _ref(obj)
  if len(_table) > _unique_sweep_at[0]: _sweep_uniques()
  return obj

def _fresh_unique(cache: dict | None = None, *, _table: dict = _unique_nodes, _next: Callable = _unique_ids.__next__) -> UOp:
  """A UNIQUE node no live node has: the next number (one taken by a live node, rebuilt from a pickle of another
  process, is skipped)."""
  while (r := _table.get(n := _next())) is not None and r() is not None: pass
  return _unique_node(n, cache)

def _same_buffer(b: UOp | None, dtype: DType, dev: UOp, arg: Any) -> bool:
  return b is not None and b.dtype is dtype and b.src[1] is dev and type(b.arg) is type(arg) and \
         _arg_key(b.arg) == _arg_key(arg)

def _find_buffer_over(dtype: DType, src: tuple, arg: Any) -> UOp | None:
  dtype = _canonical_dtype(dtype)
  if (c := src[0]._cache) is not None and (refs := c.get(_BUFFERS_OVER)) is not None:
    for r in (refs if type(refs) is list else (refs,)):
      if _same_buffer(b := r(), dtype, src[1], arg): return b
  return None

def _buffer_over(dtype: DType, src: tuple, arg: Any) -> UOp:
  """UOp(Ops.BUFFER, dtype, src, arg) over src[0], a UNIQUE (canonical `dtype`): the live one, or a new one."""
  if (b := _find_buffer_over(dtype, src, arg)) is not None: return b
  unique = src[0]
  obj = _FreshUOp()
  obj.op, obj.dtype, obj.src, obj.arg, obj._cache, obj.seq = Ops.BUFFER, dtype, src, arg, None, _next_seq()
  obj.__class__ = UOp
  if (c := unique._cache) is None: object.__setattr__(unique, "_cache", c := {})
  # one weak reference (the usual: a UNIQUE has one BUFFER), or a list of them for several
  if (had := c.get(_BUFFERS_OVER)) is None: c[_BUFFERS_OVER] = weakref.ref(obj)
  else: c[_BUFFERS_OVER] = [r for r in (had if type(had) is list else (had,)) if r() is not None] + [weakref.ref(obj)]
  return obj

def _new_buffer_node(dtype: DType, dev: UOp, size: int, shape: tuple, device: str, key: Any = None, value: Any = None, *,
                     _table: dict = _unique_nodes,
                     _next: Callable = _unique_ids.__next__, _fresh: type = _FreshUOp, _uop: type = UOp,
                     _ref: type = weakref.ref, _seq: Callable = _next_seq, _key: tuple = _BUFFERS_OVER,
                     _UNIQUE: Ops = Ops.UNIQUE, _BUFFER: Ops = Ops.BUFFER, _void: DType = _VOID) -> UOp:
  """A new BUFFER node (canonical `dtype`, int `size`) over a new UNIQUE, its shape and device known (and a field's
  `value` under its `key`, when given): nothing to look up (the UNIQUE is new, so no BUFFER over it exists).
  _fresh_unique's and _unique_node's work, inline (every realized output comes here)."""
  cache = {"shape": shape, "device": device}
  if key is not None: cache[key] = value
  while (r := _table.get(n := _next())) is not None and r() is not None: pass
  unique, obj = _fresh(), _fresh()
  unique.op, unique.dtype, unique.src, unique.arg, unique._cache, unique.seq = _UNIQUE, _void, (), n, {_key: _ref(obj)}, _seq()
  unique.__class__ = _uop
  _table[n] = _ref(unique)
  if len(_table) > _unique_sweep_at[0]: _sweep_uniques()
  obj.op, obj.dtype, obj.src, obj.arg, obj._cache, obj.seq = _BUFFER, dtype, (unique, dev), size, cache, _seq()
  obj.__class__ = _uop
  return obj

def pretty_print(root: UOp) -> str:
  """Nested `UOp(...)` text; a node reached more than once is named `xN:=` once and referred to by name after."""
  refs = _number_refs(root)
  printed: set[UOp] = set()
  out: list[str] = []
  # iterative printer: frames of (node, depth, next child index)
  def header(node: UOp, depth: int) -> str:
    num, count = refs.get(node, (0, 0))
    name = f"x{num}:=" if count > 1 else ""
    return f"{' ' * depth}{name}UOp({node.op}, {node.dtype!r}, arg={node.arg!r}, src=("
  work: list[tuple[UOp, int, int]] = [(root, 0, 0)]
  printed.add(root)
  out.append(header(root, 0))
  while work:
    node, depth, i = work.pop()
    if i < len(node.src):
      work.append((node, depth, i + 1))
      child = node.src[i]
      if child in printed:
        out.append(f"\n{' ' * (depth + 2)} x{refs[child][0]},")
      else:
        printed.add(child)
        out.append("\n" + header(child, depth + 2))
        work.append((child, depth + 2, 0))
    else:
      out.append("))" + ("," if work else ""))
  return "".join(out)

def _number_refs(root: UOp) -> dict[UOp, list[int]]:
  # pre-order: a child is numbered when its parent is first expanded, then its own children are expanded
  refs: dict[UOp, list[int]] = {}
  stack: list[tuple[UOp, int]] = [(root, 0)]
  while stack:
    node, i = stack.pop()
    if i >= len(node.src): continue
    stack.append((node, i + 1))
    s = node.src[i]
    if s not in refs:
      refs[s] = [len(refs), 1]
      stack.append((s, 0))
    else: refs[s][1] += 1
  return refs

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.FDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

def render_expr(root: UOp) -> str:
  memo: dict[UOp, str] = {}
  for u in root.toposort():
    s = [memo[x] for x in u.src]
    if u.op is Ops.CONST: r = str(u.arg)
    elif u.op is Ops.DEFINE_VAR: r = u.arg[0]
    elif u.op is Ops.RANGE: r = f"ridx{u.arg[0] if isinstance(u.arg, tuple) else u.arg}"
    elif u.op is Ops.SPECIAL: r = str(u.arg[0])
    elif u.op in _INFIX: r = f"({s[0]}{_INFIX[u.op]}{s[1]})"
    elif u.op is Ops.NEG: r = f"(-{s[0]})"
    elif u.op is Ops.MAX: r = f"max({s[0]}, {s[1]})"
    elif u.op is Ops.WHERE: r = f"({s[0]}?{s[1]}:{s[2]})"
    elif u.op is Ops.CAST: r = f"({u.dtype.name})({s[0]})"
    elif u.op is Ops.BIND: r = s[0]
    else: r = f"{u.op.name.lower()}({', '.join(s)})"
    memo[u] = r
  return memo[root]

# ---------------- evaluation of scalar expressions ----------------

def _c_div(a, b):
  if b == 0: raise ZeroDivisionError("integer division by zero in a symbolic expression")
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q
def _c_mod(a, b): return a - b * _c_div(a, b)

PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
  Ops.IDIV: _c_div, Ops.MOD: _c_mod, Ops.FDIV: lambda a, b: a / b if b != 0 else (math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1, b)),
  Ops.MAX: max, Ops.NEG: lambda a: -a if not isinstance(a, bool) else not a,
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
  Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
  Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b, Ops.WHERE: lambda c, a, b: a if c else b,
  Ops.MULACC: lambda a, b, c: a * b + c, Ops.TRUNC: lambda a: float(math.trunc(a)) if math.isfinite(a) else a,
  Ops.SQRT: lambda a: math.sqrt(a) if a >= 0 else math.nan, Ops.RECIPROCAL: lambda a: 1 / a if a != 0 else math.copysign(math.inf, a),
  Ops.EXP2: lambda a: 2.0 ** a if a < 1024 else math.inf, Ops.LOG2: lambda a: math.log2(a) if a > 0 else (-math.inf if a == 0 else math.nan),
  Ops.SIN: lambda a: math.sin(a) if math.isfinite(a) else math.nan, Ops.POW: lambda a, b: a ** b,
}

def exec_alu(op: Ops, dtype: DType, operands: list[Any]) -> Any:
  """One ALU op on Python values, with C semantics and the result rounded to `dtype`."""
  return truncate(dtype, PYTHON_ALU[op](*operands))

def evaluate(root: UOp, var_vals: dict[str, Any]) -> Any:
  vals: dict[UOp, Any] = {}
  for u in root.toposort():
    if u.op is Ops.CONST: vals[u] = u.arg
    elif u.op is Ops.DEFINE_VAR:
      if u.arg[0] not in var_vals: raise KeyError(f"no value given for variable {u.arg[0]!r}")
      vals[u] = var_vals[u.arg[0]]
    elif u.op is Ops.BIND: vals[u] = vals[u.src[1]]
    elif u.op is Ops.CAST: vals[u] = truncate(u.dtype, vals[u.src[0]])
    elif u.op in GroupOp.ALU: vals[u] = exec_alu(u.op, u.dtype, [vals[s] for s in u.src])
    else: raise ValueError(f"cannot evaluate {u.op} in a scalar expression")
  return vals[root]

# ---------------- bounds ----------------

_dtype_ranges: dict[int, tuple[DType, ConstType, ConstType, bool]] = {}

def _dtype_range(dt: DType) -> tuple[DType, ConstType, ConstType, bool]:
  """(dt, min, max, is_float), cached by identity (dtypes.min/max hash the dtype)."""
  if (hit := _dtype_ranges.get(id(dt))) is not None and hit[0] is dt: return hit
  if len(_dtype_ranges) > 4096: _dtype_ranges.clear()
  hit = _dtype_ranges[id(dt)] = (dt, dtypes.min(dt), dtypes.max(dt), dtypes.is_float(dt))
  return hit

def op_mask(ops) -> tuple[bool, ...]:
  """`op_mask(S)[op._value_]` is `op in S` without hashing the enum (a Python-level __hash__)."""
  return tuple(any(o._value_ == v for o in ops) for v in range(max(o._value_ for o in Ops) + 1))

_BOUNDS_FROM_SRC = op_mask({Ops.BIND, Ops.RANGE, Ops.SPECIAL, Ops.CAST})
_IS_ALU = op_mask(GroupOp.ALU)

def _compute_bounds(root: UOp) -> tuple[ConstType, ConstType]:
  """Fills the bounds cache of root and of the sources it needs, in post-order (iterative: deep chains are fine)."""
  for s in root.src:
    if s.src and ((c := s._cache) is None or "min_max" not in c): break
  else:  # the usual case inside a rewrite: every source is known already
    if (c := root._cache) is None: object.__setattr__(root, "_cache", c := {})
    ret = c["min_max"] = _bounds(root)
    return ret
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    u, ready = stack.pop()
    c = u._cache
    if c is not None and "min_max" in c: continue
    if ready:
      if c is None: object.__setattr__(u, "_cache", c := {})
      c["min_max"] = _bounds(u)
      continue
    stack.append((u, True))
    if _BOUNDS_FROM_SRC[v := u.op._value_] or (_IS_ALU[v] and not _dtype_range(u.dtype)[3]):
      stack.extend((s, False) for s in u.src)
  return root._cache["min_max"]

def _bounds(u: UOp) -> tuple[ConstType, ConstType]:
  """Conservative [vmin, vmax] of a scalar expression, from its dtype and sources."""
  _, dmin, dmax, is_float = _dtype_range(u.dtype)
  op = u.op
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op is Ops.BIND: return u.src[0]._min_max
  if op is Ops.RANGE: return (0, u.src[0].vmax - 1) if u.src and isinstance(u.src[0].vmax, int) else (0, dmax)
  if op is Ops.SPECIAL: return (0, u.arg[1] - 1) if isinstance(u.arg[1], int) else (0, u.src[0].vmax - 1 if u.src else dmax)
  if op is Ops.VCONST: return (min(u.arg), max(u.arg))
  if op is Ops.CAST and u.src:
    lo, hi = u.src[0]._min_max
    if dtypes.is_int(u.dtype) and isinstance(lo, (int, bool)) and dmin <= lo and hi <= dmax: return (int(lo), int(hi))
    if dtypes.is_float(u.dtype): return (float(lo), float(hi)) if not dtypes.is_bool(u.src[0].dtype) else (0.0, 1.0)
    return (dmin, dmax)
  if not _IS_ALU[op._value_] or is_float: return (dmin, dmax)
  s = [x._min_max for x in u.src]
  if op is Ops.ADD: return _clamp(s[0][0] + s[1][0], s[0][1] + s[1][1], dmin, dmax)
  if op is Ops.SUB: return _clamp(s[0][0] - s[1][1], s[0][1] - s[1][0], dmin, dmax)
  if op is Ops.MUL:
    c = [a * b for a in s[0] for b in s[1]]
    return _clamp(min(c), max(c), dmin, dmax)
  if op is Ops.NEG: return _clamp(-s[0][1], -s[0][0], dmin, dmax) if not dtypes.is_bool(u.dtype) else (dmin, dmax)
  if op is Ops.MAX: return (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
  if op is Ops.MOD and s[1][0] > 0:
    (alo, ahi), (blo, bhi) = s
    # C semantics: the result takes the dividend's sign and is smaller than the divisor in magnitude
    if alo >= 0: return (alo, ahi) if ahi < blo else (0, min(ahi, bhi - 1))
    if ahi <= 0: return (alo, ahi) if -alo < blo else (max(alo, -(bhi - 1)), 0)
    return (max(alo, -(bhi - 1)), min(ahi, bhi - 1))
  if op is Ops.IDIV and s[1][0] == s[1][1] and s[1][0] != 0:
    c = s[1][0]
    lo, hi = _c_div(s[0][0], c), _c_div(s[0][1], c)
    return (min(lo, hi), max(lo, hi))
  if op is Ops.IDIV and s[1][0] > 0:
    c = [_c_div(a, b) for a in s[0] for b in s[1]]
    return (min(c), max(c))
  if op is Ops.CMPLT: return (s[0][1] < s[1][0], s[0][0] < s[1][1])
  if op is Ops.CMPNE:
    always_ne = s[0][1] < s[1][0] or s[1][1] < s[0][0]
    always_eq = s[0][0] == s[0][1] == s[1][0] == s[1][1]
    return (always_ne, not always_eq)
  if op is Ops.CMPEQ:
    always_ne = s[0][1] < s[1][0] or s[1][1] < s[0][0]
    always_eq = s[0][0] == s[0][1] == s[1][0] == s[1][1]
    return (always_eq, not always_ne)
  if op is Ops.WHERE:
    if s[0][0] == s[0][1]: return s[1] if s[0][0] else s[2]
    return (min(s[1][0], s[2][0]), max(s[1][1], s[2][1]))
  if op is Ops.AND and dtypes.is_bool(u.dtype): return (s[0][0] and s[1][0], s[0][1] and s[1][1])
  if op is Ops.OR and dtypes.is_bool(u.dtype): return (s[0][0] or s[1][0], s[0][1] or s[1][1])
  if op is Ops.AND and s[0][0] >= 0 and s[1][0] >= 0: return (0, min(s[0][1], s[1][1]))
  if op is Ops.SHL and s[0][0] >= 0 and s[1][0] == s[1][1] and 0 <= s[1][0] < 63:
    return _clamp(s[0][0] << s[1][0], s[0][1] << s[1][0], dmin, dmax)
  if op is Ops.SHR and s[0][0] >= 0 and s[1][0] == s[1][1] and s[1][0] >= 0: return (s[0][0] >> s[1][0], s[0][1] >> s[1][0])
  return (dmin, dmax)

def _clamp(lo, hi, dmin, dmax) -> tuple[ConstType, ConstType]:
  # an expression that might overflow its dtype can take any value
  if lo < dmin or hi > dmax: return (dmin, dmax)
  return (lo, hi)

def _substitute(ctx: dict[UOp, UOp], x: UOp) -> UOp | None: return ctx.get(x)

@functools.cache
def _substitute_matcher():
  # built on first use so that ops.py does not import the matcher at module load
  from tinyplug.uop.upat import PatternMatcher, UPat
  return PatternMatcher([(UPat(name="x"), _substitute)])

def __getattr__(name: str):
  # `from tinyplug.uop.ops import UPat, PatternMatcher, graph_rewrite` works too (tinygrad's module path)
  if name in ("UPat", "PatternMatcher"):
    from tinyplug.uop import upat
    return getattr(upat, name)
  if name in ("graph_rewrite", "graph_rewrite_map"):
    from tinyplug.uop import rewrite
    return getattr(rewrite, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# shape and device rules live in shapes.py, which builds on this module: bound once it is loaded, not per lookup
from tinyplug.uop.shapes import device_of, shape_of  # noqa: E402
