"""The lazy Tensor: every operation builds a tensor-level UOp graph; nothing runs until realize()/numpy()/tolist().

The operations themselves live in small mixins under `tinyplug/tensor_ops/` (one module per job: creation, random,
elementwise, movement, indexing, reduce, nn, special functions, sorting, einsum, selection/scatter, resampling);
this module holds the Tensor object, its bookkeeping (the weak registry
of live tensors that realize() updates), realization, data access, devices and autograd entry points.
"""
from __future__ import annotations
import itertools, math, operator, pathlib, threading, weakref
from typing import Any, ClassVar, Iterator
import numpy as np
from tinyplug.helpers import TRAINING
from tinyplug.uop.dtype import DType, dtypes, to_dtype, to_np_dtype, from_np_dtype
from tinyplug.uop.ops import GroupOp, Ops, UOp, known_node
from tinyplug.uop.sint import max_shape, render_shape, sprod
from tinyplug.tensor_ops.create import CreationMixin
from tinyplug.tensor_ops.random import RandomMixin
from tinyplug.tensor_ops.elementwise import ElementwiseMixin, _grad_over
from tinyplug.tensor_ops.movement import MovementMixin
from tinyplug.tensor_ops.indexing import IndexingMixin
from tinyplug.tensor_ops.reduce import ReduceMixin
from tinyplug.tensor_ops.nn import NNMixin
from tinyplug.tensor_ops.special import SpecialMixin
from tinyplug.tensor_ops.sorting import SortingMixin
from tinyplug.tensor_ops.einsum import EinsumMixin
from tinyplug.tensor_ops.selection import SelectionMixin
from tinyplug.tensor_ops.resample import ResampleMixin
from tinyplug.tensor_ops import disk, graph, template, users

# every live Tensor (live_tensors(), backward's targets): a list of plain weak references, one per tensor made. No
# callback runs when a tensor dies and no dict entry is made per tensor (a tiny op makes one tensor and frees one).
# Each waiting dead reference is an object the cyclic collector counts (hundreds would set off collections), so the
# references added since the last sweep (the list's tail, most of them dead by then: temporaries) are swept every
# _YOUNG_TENSORS tensors made, and the whole list when it has doubled
_live_refs: list[weakref.ReferenceType] = []
_YOUNG_TENSORS = 128
_swept = 0          # the list's length after the last sweep (what lies before it was swept)
_sweep_at = _YOUNG_TENSORS
_full_sweep_at = 1024
# the deferred template outputs whose graph is not built yet (engine/plan.py looks at them, not at every tensor), by
# id(tensor): their references (a callback each, the rare case) drop the entry before the id can be reused
class _TensorRef(weakref.ref):
  __slots__ = ("tid",)
_deferred_refs: dict[int, _TensorRef] = {}

def _forget_deferred(ref: _TensorRef, deferred: dict = _deferred_refs) -> None: deferred.pop(ref.tid, None)

_sweep_lock = threading.Lock()

def _survivors(refs: list) -> Iterator[weakref.ReferenceType]:
  return itertools.compress(refs, map(operator.is_not, map(operator.call, refs), itertools.repeat(None)))

def _sweep_live(full: bool = False) -> None:
  global _swept, _sweep_at, _full_sweep_at
  with _sweep_lock:   # (the slices are single steps: references another thread appends meanwhile stay)
    n = len(_live_refs)
    full = full or n > _full_sweep_at
    start = 0 if full or _swept > n else _swept
    _live_refs[start:n] = _survivors(_live_refs[start:n])
    _swept = len(_live_refs)
    _sweep_at = _swept + _YOUNG_TENSORS
    if full: _full_sweep_at = max(1024, 2 * _swept)

def _track(t: Tensor, _ref: type = weakref.ref) -> None:
  ref = _ref(t)
  _live_refs.append(ref)
  _unlinked.append(ref)
  if len(_live_refs) > _sweep_at: _sweep_live()
  if len(_unlinked) > 8192: _link_pending()

# tensors made or given another uop since the last realize: their graphs are linked (tensor_ops/users.py) when the next
# realize needs the links, so a temporary that dies before then costs one append
_unlinked: list[weakref.ReferenceType] = []

def _only_dead(refs: list, n: int) -> bool:
  """Whether the first `n` of the weak references `refs` are all dead."""
  if n == 1: return refs[0]() is None
  return all([r() is None for r in refs[:n]])

def _accumulate_grad(t: Tensor, g: Tensor, shape: tuple) -> None:
  """Add gradient `g` (of shape `shape`) into t.grad."""
  if shape != t.shape: raise RuntimeError(f"gradient shape {shape} does not match tensor shape {t.shape}")
  t.grad = g if t.grad is None else (t.grad + g)

def _link_pending(becomes: dict[UOp, UOp] | None = None) -> list[tuple[Tensor, UOp]]:
  """Link the graphs of the tensors in `_unlinked`; those holding a node of `becomes` itself are returned instead
  (they are about to hold a buffer: nothing to link)."""
  global _unlinked
  pending, _unlinked = _unlinked, []
  is_realized, link, held = graph.is_realized, users.link, []
  for r in pending:
    if (t := r()) is None or (u := t._uop) is None or not u.src: continue
    if becomes is not None and u in becomes: held.append((t, u))   # (a node being realized is no buffer view yet)
    elif not is_realized(u): link(r, u)
  return held

def live_tensors() -> list[Tensor]:
  """Every Tensor alive now."""
  _sweep_live(full=True)   # (the walk drops the dead references too: the next call walks only what lives or is new)
  return [t for r in _live_refs[:] if (t := r()) is not None]

_ALU = GroupOp.ALU
_ONE_CALL = GroupOp.ALU | {Ops.CONTIGUOUS}   # the ops whose realize asks plan.realize_one_op first
# what contiguous() looks at more closely (a plain buffer, a reshape of one, a symbolic buffer's shrink, a MULTI)
_MAY_BE_BUFFER = frozenset({Ops.BUFFER, Ops.RESHAPE, Ops.SHRINK, Ops.MULTI})
_CONTIGUOUS = Ops.CONTIGUOUS

def canonical_device(device: str | tuple[str, ...] | list[str] | None) -> str | tuple[str, ...]:
  """The canonical name of `device` (None means Device.DEFAULT; a tuple of names, several devices: a tensor there is
  a multi-device tensor, see Tensor.shard); unknown names raise a ValueError."""
  from tinyplug.device import Device
  if device is None: return Device.DEFAULT
  if isinstance(device, (tuple, list)):
    if not device: raise ValueError("a tuple of devices must name at least one device")
    names = tuple(canonical_device(d) for d in device)
    return names[0] if len(names) == 1 else names
  if not isinstance(device, str):
    raise TypeError(f"a device must be given by name (a str), not {type(device).__name__}")
  return Device.canonicalize(device)

_linked_nodes = users._linked   # (id(node) -> its entry: a node with none has no graph over it)

def _apply_becomes_map(becomes: dict[UOp, UOp]) -> None:
  """Point live tensors at what their uops became, substituting inside every graph that uses them.

  Only nodes that some live tensor holds are substituted; intermediate buffers the schedule made on the way stay
  out of the graphs (so gradients keep flowing through them). The tensors are found from the realized nodes upwards
  (tensor_ops/users.py): tensors unrelated to them are not looked at."""
  if not becomes: return
  if len(_unlinked) == 1 == len(becomes) and not _deferred_refs and (t := _unlinked[0]()) is not None and \
     (v := becomes.get(t._uop)) is not None and not users.holders(becomes):
    # the usual `t = (t + 1).realize()`, seen before any linking: the one tensor made since the last realize holds
    # the realized node and no graph is over it (its graph needs no links: it becomes a buffer view)
    _unlinked.clear()
    t._uop = v
    return
  if _deferred_refs:   # a deferred output is built here where its graph may hold a realized node (a node of it exists)
    for r in list(_deferred_refs.values()):
      if (t := r()) is not None and (d := t._defer) is not None and \
         (type(d[0]) is not template.Built or d[0].nodes_alive(d[1])): t._build()
  found = _link_pending(becomes)   # the tensors made since the last realize and holding a realized node
  if len(found) == 1 == len(becomes):   # the usual `t = (t + 1).realize()`: one new tensor holds the realized node
    if not (more := users.holders(becomes)):   # ... and no graph is over it
      t, u = found[0]
      if t._uop is u: t._uop = becomes[u]
      return
    found += more
  else:
    keys = {u for _, u in found}
    becomes = {k: v for k, v in becomes.items() if k in keys or users.is_held(k)}
    if not becomes: return
    found += users.holders(becomes)
  done = set()
  for t, u in found:
    if id(t) in done or t._uop is not u: continue   # (a tensor found twice; already substituted)
    done.add(id(t))
    # a buffer view needs no link (t._uop is set, so t is not deferred); a rewritten graph is linked when needed
    if (v := becomes.get(u)) is not None: t._uop = v
    else: t.uop = u.substitute(becomes, name="apply becomes map")

def _held_anywhere(nodes: list[UOp]) -> bool:
  """Whether a live tensor's graph holds one of `nodes`."""
  _link_pending()
  return bool(users.holders(nodes))

def _engine():
  # the engine imports the scheduler and codegen: loaded on the first realize, then bound (not imported per call)
  global _engine_mod
  if _engine_mod is None:
    import tinyplug.engine.realize as mod
    _engine_mod = mod
  return _engine_mod
_engine_mod = None

def _plan():
  global _plan_mod
  if _plan_mod is None:
    import tinyplug.engine.plan as mod
    mod._deferred_refs, mod._apply_becomes_map, mod._held_anywhere = _deferred_refs, _apply_becomes_map, _held_anywhere
    _plan_mod = mod
  return _plan_mod
_plan_mod = None

class _TensorType(type):
  # `Tensor.training` is the TRAINING context variable, so `Context(TRAINING=1)`, `Tensor.train()` and
  # `Tensor.training = True` are one switch
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(bool(mode))

class Tensor(CreationMixin, RandomMixin, ElementwiseMixin, MovementMixin, IndexingMixin, ReduceMixin, NNMixin,
             SpecialMixin, SortingMixin, EinsumMixin, SelectionMixin, ResampleMixin, metaclass=_TensorType):
  """A lazy n-dimensional array with automatic differentiation.

      x = Tensor([2.0], requires_grad=True)
      (grad,) = (x**2 + 3*x + 1).sum().gradient(x)   # grad.item() == 7.0
  """
  # `_uop` is None while `_defer` holds (graph template, input UOps): a template's output whose graph is built only
  # when something reads `uop` (its realize may run from a plan without one, engine/plan.py). A property, not a
  # __getattr__ for an unset slot: a class with __getattr__ makes every attribute access slower (CPython then
  # specializes none of them); the busiest readers below take the slot directly
  __slots__ = ("_uop", "_defer", "requires_grad", "grad", "__weakref__")
  no_grad: ClassVar[bool] = False

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    dtype = None if dtype is None else to_dtype(dtype)
    if isinstance(data, pathlib.Path):   # a file's bytes, on the disk device unless another one is asked for
      elem = dtypes.uint8 if dtype is None else dtype
      data = Tensor.from_uop(UOp.new_buffer(canonical_device(f"disk:{data.resolve()}"), data.stat().st_size // elem.itemsize, elem))
      dtype, device = None, data.device if device is None else device
    if isinstance(data, UOp) and data.shape is None and data.device is None and \
       any(u.op in (Ops.BIND, Ops.DEFINE_VAR) for u in data.toposort()):
      # a bound variable (or an expression of them) as a 0-d tensor: its value is read when the kernel runs. Of the
      # default int it is a weak int, as in tinygrad: it takes the other operand's int type (`+ int8` gives int8)
      weak = dtypes.weakint if data.dtype == dtypes.default_int else data.dtype
      uop = graph.const(data, dtype or weak, canonical_device(device), ())
    elif isinstance(data, (UOp, Tensor)):
      # an existing graph stays on its own device unless another one is asked for
      uop = data if isinstance(data, UOp) else data.uop
      uop = uop if dtype is None else graph.cast(uop, dtype)
      if device is not None and (device := canonical_device(device)) != uop.device: uop = graph.copy_to(uop, device)
    else: uop = _uop_from_data(data, dtype, canonical_device(device))
    self._uop: UOp = uop
    self._defer = None
    self.requires_grad: bool | None = requires_grad
    self.grad: Tensor | None = None
    _track(self)

  # ---- building blocks used by every mixin ----
  @classmethod
  def from_uop(cls, uop: UOp, requires_grad: bool | None = None) -> Tensor:
    """A tensor holding `uop` as it is (on the uop's own device)."""
    t = cls.__new__(cls)
    t._uop, t._defer, t.requires_grad, t.grad = uop, None, requires_grad, None
    _track(t)
    return t

  @classmethod
  def _deferred(cls, built: Any, inputs: list[UOp], requires_grad: bool | None) -> Tensor:
    """A template's output over `inputs` (plain buffer views) whose graph is built on first use of `uop`."""
    t = cls.__new__(cls)
    t._uop, t._defer, t.requires_grad, t.grad = None, (built, inputs), requires_grad, None
    _track(t)
    ref = _TensorRef(t, _forget_deferred)
    ref.tid = id(t)
    _deferred_refs[ref.tid] = ref
    return t

  @property
  def uop(self) -> UOp:
    """The tensor-level graph of this tensor (a BUFFER view once realized)."""
    if (u := self._uop) is None: u = self._build()
    return u
  @uop.setter
  def uop(self, u: UOp) -> None:
    if self._defer is not None: self._undefer()
    self._uop = u
    _unlinked.append(weakref.ref(self))   # (the tensor's one plain reference, made again only if it died)
  def _build(self) -> UOp:
    """A deferred output's graph, built now (once)."""
    built, inputs = self._defer
    self._uop = u = template.rebuild(built, inputs) if type(built) is template.Built else built.build()
    self._undefer()
    _unlinked.append(weakref.ref(self))
    return u
  def _undefer(self) -> None:
    self._defer = None
    _deferred_refs.pop(id(self), None)
  def __getstate__(self) -> Any:
    if self._defer is not None: self.uop   # a deferred output is pickled as its graph (a template holds functions)
    return object.__getstate__(self)
  def __setstate__(self, state: Any) -> None:
    # (a pickle from before session 20 also holds the tensor's number, `_tid`, which tensors no longer have)
    for name, value in (state[1] if type(state) is tuple else state).items():
      if name != "_tid": object.__setattr__(self, name, value)

  def _apply_uop(self, fn, *others: Tensor, **kwargs) -> Tensor:
    """A new tensor whose uop is `fn(self.uop, *other uops, **kwargs)`; it requires grad if any input does."""
    if (u := self._uop) is None: u = self._build()
    if not others:   # the usual one- or two-input op: no lists
      new, rg = fn(u, **kwargs), self.requires_grad
      requires_grad = rg if rg is None or rg is True or rg is False else True in (rg,)
    elif len(others) == 1:
      o = others[0]
      new = fn(u, o.uop, **kwargs)
      a, b = self.requires_grad, o.requires_grad
      requires_grad = True if True in (a, b) else (None if None in (a, b) else False)
    else:
      new = fn(u, *[o.uop for o in others], **kwargs)
      flags = [t.requires_grad for t in (self, *others)]
      requires_grad = True if True in flags else (None if None in flags else False)
    if Tensor.no_grad: requires_grad = False
    return Tensor.from_uop(new, requires_grad)

  # ---- facts ----
  @property
  def shape(self) -> tuple[int, ...]:
    if (u := self._uop) is None: u = self._build()
    return () if (s := u.shape) is None else s   # None: a deviceless constant (Tensor(UOp.const(2.0))), a scalar
  @property
  def dtype(self) -> DType: return (self._uop if self._defer is None else self._build()).dtype
  @property
  def device(self) -> str | tuple[str, ...]: return (self._uop if self._defer is None else self._build()).device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int | UOp: return sprod(self.shape)
  @property
  def max_shape(self) -> tuple[int, ...]:
    """The shape with each symbolic size at the largest value its variables allow."""
    return max_shape(self.shape)
  def max_numel(self) -> int: return math.prod(self.max_shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def size(self, dim: int | None = None) -> int | tuple[int, ...]:
    return self.shape if dim is None else self.shape[graph.normalize_axis(dim, self.ndim)]
  @property
  def lazydata(self) -> UOp: return self.uop

  def __repr__(self) -> str:
    grad = None if self.grad is None else _short_uop(self.grad.uop)
    return f"<Tensor {_short_uop(self.uop)} on {self.device} with grad {grad}>"
  def __hash__(self) -> int: return id(self)
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __bool__(self) -> bool:
    if self.numel() != 1:
      raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements (shape {self.shape}) is ambiguous")
    return bool(self.item())
  def __iter__(self) -> Iterator[Tensor]:
    if not self.shape: raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))

  # ---- realization ----
  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now; afterwards their uops are buffers."""
    if (d := self._defer) is not None and not others and \
       ((_plan_mod or _plan()).realize_deferred(self) if type(d[0]) is template.Built else
        _plan().realize_lazy_gradient(self, d[0])):
      return self
    if not others:   # (the usual call: no lists)
      if (u := self._uop) is None: u = self._build()
      # an ALU op or a CONTIGUOUS is never realized and has a device unless it is a deviceless constant's (no plan then)
      if u.op in _ONE_CALL and (got := (_plan_mod or _plan()).realize_one_op(u)) is not None:
        if type(got) is dict: _apply_becomes_map(got)
        elif _unlinked and _unlinked[-1]() is self and not _deferred_refs and id(u) not in _linked_nodes and \
             (len(_unlinked) == 1 or _only_dead(_unlinked, len(_unlinked) - 1)):
          # the usual `t = (t + 1).realize()` or `((x * k) + 1).exp().realize()`: this tensor is the only live one
          # made since the last realize (the others were temporaries of its expression) and no graph is over its
          # node (_apply_becomes_map's first case, without the map)
          _unlinked.clear()
          self._uop = got
        else: _apply_becomes_map({u: got})
      elif not graph.is_realized(u) and u.device is not None: _apply_becomes_map(_engine().realize([u]))
      return self
    group = (self, *others)
    # template outputs over buffers (`v, i = x.sort()`): each from its plan, with no graph built
    if deferred := [t for t in group if (d := t._defer) is not None and type(d[0]) is template.Built]:
      _plan().realize_together(deferred, group)
    # a deviceless constant has nothing to compute: it gets a device (and a buffer) only when read or moved
    pending = [u for t in group if not graph.is_realized(u := t.uop) and u.device is not None]
    if pending: _apply_becomes_map(_engine().realize(pending))
    return self

  def schedule(self, *others: Tensor) -> list:
    """The kernels that would compute these tensors, in order (not run: pass them to engine.realize.run_schedule).

    As in tinygrad, the tensors now point at the output buffers, which hold their values once the schedule runs.
    A schedule left unrun runs before anything else is realized or read (engine.realize.run_pending)."""
    from tinyplug.schedule import create_schedule
    from tinyplug.engine.realize import defer
    items, becomes = create_schedule([t.uop for t in (self, *others)])
    _apply_becomes_map(becomes)
    defer(items)
    return items

  def schedule_linear(self, *others: Tensor) -> UOp:
    """The schedule as one `LINEAR` UOp of `CALL(ast, *buffers)` nodes, one per kernel or copy (tinygrad's form);
    like schedule(), it runs before anything else is realized unless run first."""
    return UOp(Ops.LINEAR, dtypes.void, tuple(UOp(Ops.CALL, dtypes.void, (it.ast, *it.buf_uops))
                                              for it in self.schedule(*others)))

  def kernelize(self, *others: Tensor) -> Tensor:
    """Group the graph into kernels without running them; the uops then show KERNEL nodes."""
    from tinyplug.schedule import kernelize
    _apply_becomes_map(kernelize([t.uop for t in (self, *others)]))
    return self

  def _host_array(self) -> np.ndarray:
    """The values as a numpy array of this tensor's shape (bfloat16 comes back as float32).

    Like tinygrad's numpy(), this computes a contiguous copy and leaves this tensor's graph as it is, so gradients
    still flow through it afterwards; realize() is what replaces a graph by its buffer."""
    if (d := self._defer) is not None and type(d[0]) is template.Built and (a := self._deferred_array(d[0])) is not None:
      return a
    if self.uop.device is None: return self.to(None)._host_array()
    if isinstance(self.device, tuple): return self.to(self.device[0])._host_array()   # gathered on the first device
    if disk.is_disk(self.device): return self.to(None)._host_array()   # a file's bytes, read on the default device
    if any(isinstance(s, UOp) for s in self.shape):
      raise ValueError(f"cannot read a tensor of symbolic shape {render_shape(self.shape)}: shrink it to concrete "
                       "sizes"
                       "first (t[:n] with an int n)")
    if self.dtype == dtypes.bfloat16: return self.cast(dtypes.float32)._host_array()
    if self.dtype == dtypes.weakint: return self.cast(dtypes.default_int)._host_array()   # a read commits it
    if self.dtype in _FP8S:   # numpy has no fp8: the raw bits come over and are decoded here
      from tinyplug.uop.minifloat import from_bits_np
      return from_bits_np(self.bitcast(dtypes.uint8)._host_array(), self.dtype)
    if self.numel() == 0: return np.zeros(self.shape, dtype=to_np_dtype(self.dtype))
    from tinyplug.engine.realize import buffer_of, realize, run_pending
    run_pending()
    if graph.is_plain_buffer(self.uop): buf = self.uop.base
    else:
      target = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,))
      becomes = realize([target])
      buf = becomes[target].base
      # writes and copies that ran are done for good: tensors holding them now hold their buffers
      _apply_becomes_map({k: v for k, v in becomes.items() if k.op in (Ops.ASSIGN, Ops.COPY)})
    if buf.op is not Ops.BUFFER:
      raise RuntimeError(f"realize() left {buf.op} instead of a buffer for shape {self.shape}")
    return buffer_of(buf).numpy()[:self.numel()].reshape(self.shape)

  def _deferred_array(self, built: Any) -> np.ndarray | None:
    """_host_array of a deferred template output from its plan, the tensor left deferred (as a graph is left a
    graph: nothing is pointed at the new buffer); None: the usual way (no plan yet, or a value not read as it is)."""
    ref = built.order[-1]   # (the placeholders' output: this one's shape, dtype and device)
    if type(ref.device) is not str or disk.is_disk(ref.device) or ref.dtype in _FP8S or \
       ref.dtype in (dtypes.bfloat16, dtypes.weakint) or ref.shape is None or not all([type(s) is int for s in ref.shape]) or \
       not ref.size:
      return None
    from tinyplug.engine.realize import buffer_of, run_pending
    run_pending()
    if (value := _plan().deferred_value(self)) is None: return None
    return buffer_of(value.base).numpy()[:ref.size].reshape(ref.shape)

  def numpy(self) -> np.ndarray:
    a = self._host_array()
    # _host_array's array is a copy already, made for this call: copied again only to let go of a larger one it views
    # (a 2 MB gradient read every step paid for two copies)
    return a if a.base is None or a.base.nbytes == a.nbytes else a.copy()
  def tolist(self) -> Any: return self._host_array().tolist()
  def data(self) -> memoryview: return memoryview(np.ascontiguousarray(self._host_array()))
  def item(self) -> int | float | bool:
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self._host_array().reshape(-1)[0].item()

  # ---- devices, copies and in-place updates ----
  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    """This tensor on `device`; from a multi-device tensor to one device, the parts gathered there; to a tuple of
    devices, a copy of the whole on each."""
    device = canonical_device(device)
    if device == self.device: return self
    if self.uop.device is None:   # a deviceless constant: the same value on `device`
      return Tensor.from_uop(graph.const(self.uop, self.dtype, device, ()), self.requires_grad)
    if disk.is_disk(self.device) and not disk.is_disk(device):   # the disk runs no kernels: compute it on `device`
      if writes := [Tensor.from_uop(w) for w in disk.pending_writes(self.uop)]: writes[0].realize(*writes[1:])
      return Tensor.from_uop(disk.from_disk(self.uop, device), self.requires_grad)
    ret = Tensor.from_uop(graph.copy_to(self.uop, device), self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret
  def to_(self, device: str | tuple[str, ...] | None) -> Tensor:
    moved = self.to(device)
    self.uop = moved.uop
    if self.grad is not None: self.grad.to_(device)
    return self
  def clone(self, device: str | tuple[str, ...] | None = None) -> Tensor:
    """A copy in a new buffer of its own (on `device`, default this tensor's; split as this one is)."""
    src = self if device is None and self.uop.device is not None else self.to(device)
    if any(isinstance(s, UOp) for s in self.shape): return src._apply_uop(lambda u: UOp(Ops.CONTIGUOUS, u.dtype, (u,)))
    return src.empty_like().assign(src)

  # ---- several devices ----
  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor split along `axis` over `devices` (None: a copy of the whole on each), as one multi-device tensor:
    its `.device` is the tuple, elementwise ops run on each device's part, a reduction over the split axis combines
    the devices' results, `.to(device)` and `.numpy()` gather the parts. The axis must split evenly."""
    if self.uop.device is None: return self   # a deviceless constant is the same value everywhere
    devices = canonical_device(tuple(devices))
    if isinstance(devices, str): return self.to(devices)
    if axis is not None: axis = graph.normalize_axis(axis, self.ndim)
    if self.device == devices and self.uop.axis == axis: return self
    return Tensor.from_uop(graph.shard(self.uop, devices, axis), self.requires_grad)
  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """Split this tensor over `devices` in place (see shard)."""
    return self.replace(self.shard(devices, axis))
  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor on y's devices, split as y is."""
    if y.uop.device is None: return self
    if isinstance(y.device, str): return self.to(y.device)
    return self.shard(y.device, y.uop.axis)
  def detach(self) -> Tensor: return Tensor.from_uop(UOp(Ops.DETACH, self.dtype, (self.uop,)), requires_grad=False)
  def contiguous(self) -> Tensor:
    if (u := self._uop) is None: u = self._build()
    if u.op not in _MAY_BE_BUFFER and type(dev := u.device) is str:   # (a view or a computation on one device)
      return Tensor.from_uop(known_node(_CONTIGUOUS, u.dtype, (u,), u.shape, dev), _grad_over(self))
    if self.uop.device is None: return self   # a deviceless constant stays one
    if graph.is_plain_buffer(self.uop) or graph.is_symbolic_buffer(self.uop): return self
    return self._apply_uop(lambda u: UOp(Ops.CONTIGUOUS, u.dtype, (u,)))
  def contiguous_backward(self) -> Tensor: return self
  def replace(self, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:
    """Point this tensor at `x`'s graph (same shape unless allowed otherwise)."""
    if not allow_shape_mismatch and x.shape != self.shape:
      raise ValueError(f"replace: shape {x.shape} does not match {self.shape}")
    self.uop = x.uop
    return self
  def assign(self, x: Any) -> Tensor:
    """Write `x` into this tensor's buffer (lazily: an ASSIGN runs when realized; into a file on the disk device, now)."""
    if disk.is_disk(self.device): return self._assign_to_disk(x)
    if not isinstance(x, Tensor):   # a Python number fills the target
      x = Tensor(x, device=self.device, dtype=self.dtype)
      if x.ndim == 0: x = x._broadcast_to(self.shape)
    if x.uop is self.uop: return self
    if x.shape != self.shape: raise ValueError(f"assign: shape {x.shape} does not match the target's {self.shape}")
    if x.device != self.device: raise ValueError(f"assign: value is on {x.device}, the target on {self.device}")
    if x.dtype != self.dtype: raise ValueError(f"assign: dtype {x.dtype} does not match the target's {self.dtype}")
    if graph.is_plain_buffer(self.uop) or self.uop.op is Ops.ASSIGN:
      self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop))
    elif graph.is_writable_view(self.uop):   # a view of a buffer (t.T, t[1:3]): write through it now, as setitem does
      Tensor.from_uop(UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop))).realize()
    else: self.uop = x.uop
    return self

  def _assign_to_disk(self, x: Any) -> Tensor:
    from tinyplug.device import buffer_of
    value = (x if isinstance(x, Tensor) else Tensor(x, dtype=self.dtype))._broadcast_to(self.shape)
    if value.dtype != self.dtype: raise ValueError(f"assign: dtype {value.dtype} does not match the target's {self.dtype}")
    if disk.pending_writes(self.uop) or not graph.is_plain_buffer(self.uop):
      raise ValueError("assign to the disk device writes into a whole buffer (Tensor.empty(..., device='disk:<file>'))")
    buffer_of(self.uop.base).copyin(np.ascontiguousarray(value.numpy()).reshape(-1))
    return self

  # ---- autograd ----
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = True) -> list[Tensor]:
    """d(self)/d(target) for each target, as new lazy tensors: `grad, = loss.gradient(x)`. A target the graph
    does not use gets zeros (as in tinygrad; materialize_grads=False raises instead)."""
    from tinyplug.gradient import compute_gradient
    if gradient is None:
      if self.shape != ():
        raise RuntimeError(f"gradient() without a seed needs a scalar, this tensor has shape {self.shape}")
      gradient = Tensor.from_uop(graph.const(1.0, self.dtype, self.device, ()))
    elif gradient.shape != self.shape:
      raise ValueError(f"the seed gradient has shape {gradient.shape}, the tensor {self.shape}")
    grads = compute_gradient(self.uop, gradient.uop, {t.uop for t in targets})
    out: list[Tensor] = []
    for t in targets:
      g = grads.get(t.uop)
      if g is None:
        if not materialize_grads:
          raise RuntimeError(f"no gradient: a target of shape {t.shape} is not in this tensor's graph")
        g = graph.const(0, t.dtype, t.device, t.shape)
      if isinstance(t.device, tuple) and (g.device, g.axis) != (t.device, t.uop.axis):
        g = graph.shard(g, t.device, t.uop.axis)   # a gradient is split over the devices as its tensor is
      out.append(Tensor.from_uop(g, requires_grad=False))
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(t) into `t.grad` for every live floating-point tensor t in the graph that did not opt out
    (requires_grad=False, detach(), made under no_grad), as tinygrad does: `requires_grad=True` is not needed."""
    if gradient is None and self._defer is not None and type(self._defer[0]) is template.Built and \
       self._lazy_backward():
      return self
    if gradient is None and self.shape != ():
      raise RuntimeError(f"backward() can only be called on a scalar tensor, this one has shape {self.shape}")
    from tinyplug.gradient_template import graph_of, lazy_gradients
    nodes = graph_of(self.uop)
    targets = [t for t in live_tensors() if t.requires_grad is not False and t.uop in nodes and dtypes.is_float(t.dtype)]
    if not targets: return self
    # a graph differentiated before: each gradient deferred (built when used; realized as it is, from a plan). Only
    # for one parameter besides this tensor: several new gradients are built when realized together (not deferred)
    if gradient is None and sum([t is not self for t in targets]) == 1 and _plan().may_defer() and \
       all(type(t.device) is str for t in targets) and \
       (lazy := lazy_gradients(self.uop, graph.const(1.0, self.dtype, self.device, ()), [t.uop for t in targets])):
      for t, (built, shape) in zip(targets, lazy):
        _accumulate_grad(t, Tensor._deferred(built, built.replay.nodes, False), shape)
      return self
    for t, g in zip(targets, self.gradient(*targets, gradient=gradient, materialize_grads=True)):
      _accumulate_grad(t, g, g.shape)
    return self

  def _lazy_backward(self) -> bool:
    """backward() of a deferred graph template output whose gradient recipe is recorded, without building its graph:
    the targets are among its inputs' graphs (a live graph holding any node above them sends it the usual way),
    each gradient deferred. False: the usual way."""
    from tinyplug.gradient_template import lazy_gradients_of
    built, inputs = self._defer
    out = built.order[-1]   # (the placeholders' output: this one's shape, dtype and device)
    if out.shape != () or type(out.device) is not str or not _plan().may_defer() or \
       (walk := template.deferred_walk(built, inputs)) is None or _plan()._may_share(self, built, inputs):
      return False
    pos = walk[2]
    targets = [t for t in live_tensors() if t.requires_grad is not False and (u := t._uop) is not None and u in pos and
               dtypes.is_float(u.dtype)]
    # (none: the usual way says what it says about that; a multi-device target's gradient is split as it is; several
    # new gradients are built when realized together, so not deferred)
    if len(targets) != 1 or type(targets[0]._uop.device) is not str: return False   # (several: as above)
    seed = graph.const(1.0, out.dtype, out.device, ())
    # this tensor is a target too unless it opted out; its gradient is the ones the backward starts from
    root_too = self.requires_grad is not False and dtypes.is_float(out.dtype)
    # (the gradients build the graph over the inputs themselves: holding this tensor would keep it deferred)
    if (lazy := lazy_gradients_of(walk, (built, inputs), lambda: template.rebuild(built, inputs), seed,
                                  [t._uop for t in targets], root_too)) is None:
      return False
    for t, (b, shape) in zip(targets, lazy):
      _accumulate_grad(t, Tensor._deferred(b, inputs, False), shape)
    if root_too:   # (no shape check: this tensor's shape would build its graph; its gradient is a scalar as it is)
      g = Tensor.from_uop(seed, requires_grad=False)
      self.grad = g if self.grad is None else (self.grad + g)
    return True

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self

  @property
  def is_param(self) -> bool:
    """tinygrad's name: whether backward() fills this tensor's .grad and optimizers update it (not requires_grad=False)."""
    return self.requires_grad is not False
  @is_param.setter
  def is_param(self, value: bool) -> None: self.requires_grad = bool(value)
  def is_param_(self, is_param: bool = True) -> Tensor: return self.requires_grad_(is_param)

  class train:
    """`with Tensor.train(): ...` sets Tensor.training for the block (also usable as a decorator)."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.prev
    def __call__(self, fn):
      def wrapper(*args, **kwargs):
        with Tensor.train(self.mode): return fn(*args, **kwargs)
      return wrapper

  class test(train):
    def __init__(self, mode: bool = False): self.mode = mode

def _short_uop(u: UOp) -> str:
  dt = repr(u.dtype).removeprefix("dtypes.")
  return f"<UOp {u.device} {u.shape} {dt} {(u.base.op, u.base.arg)!r}>"

# ---------------- data from Python and numpy ----------------

def _uop_from_data(data: Any, dtype: DType | None, device: str) -> UOp:
  if data is None: return graph.const(0, dtype or dtypes.default_float, device, (0,))
  if isinstance(data, (bool, int, float)): return graph.const(data, dtype or dtypes.from_py(data), device, ())
  if isinstance(data, (list, tuple)): return _uop_from_list(data, dtype, device)
  if isinstance(data, np.ndarray): return _uop_from_numpy(data, dtype, device)
  if isinstance(data, np.generic): return _uop_from_numpy(np.asarray(data), dtype, device)
  if isinstance(data, (bytes, bytearray, memoryview)):
    return _uop_from_numpy(np.frombuffer(bytes(data), dtype=np.uint8), dtype or dtypes.uint8, device)
  raise TypeError(f"cannot make a Tensor from {type(data).__name__}; give a list, a number, a numpy array or a UOp")

# (sets: a dtype's hash is kept, while `in` a tuple compares field by field with each dtype that is not the same object)
_FP8S = frozenset(dtypes.fp8s)
_ROUNDED = _FP8S | {dtypes.bfloat16}

def _host_dtype(dtype: DType) -> DType:
  """The dtype data for `dtype` is handed over in from Python/numpy (numpy has no bfloat16 or fp8)."""
  return dtypes.float32 if dtype in _ROUNDED else dtype

def _uop_from_list(data: list | tuple, dtype: DType | None, device: str) -> UOp:
  inferred, dtype = dtype is None, dtype or dtypes.from_py(data)
  host = _host_dtype(dtype)
  try:
    try:
      with np.errstate(over="ignore"): arr = np.array(data, dtype=to_np_dtype(host))   # float overflow is inf
    except OverflowError:
      arr = np.array(data)
      if inferred and arr.dtype.kind in "iu": dtype = from_np_dtype(arr.dtype)   # ints past the default int: 64 bits
      elif inferred or arr.dtype.kind not in "iub": raise OverflowError("a value does not fit 64 bits")
      else: arr = arr.astype(to_np_dtype(host))   # out-of-range integers wrap, as numpy's astype
  except (ValueError, TypeError, OverflowError) as e: raise ValueError(f"cannot make a Tensor from this list: {e}") from None
  return _uop_from_numpy(arr, dtype, device)

def _uop_from_numpy(arr: np.ndarray, dtype: DType | None, device: str) -> UOp:
  if dtype is None: dtype = from_np_dtype(arr.dtype)
  shape = arr.shape
  if arr.size == 0: return graph.const(0, dtype, device, shape)
  if dtype in _FP8S:   # encoded here (float64 data rounds once), moved as uint8 bits
    from tinyplug.uop.minifloat import to_bits_np
    src = arr if arr.dtype == np.float64 else np.asarray(arr, dtype=np.float32)
    return graph.bitcast(_uop_from_numpy(to_bits_np(src, dtype).reshape(shape), dtypes.uint8, device), dtype)
  host = _host_dtype(dtype)
  arr = np.ascontiguousarray(arr, dtype=to_np_dtype(host))   # note: 0-d arrays come back 1-d
  from tinyplug.engine.realize import buffer_of
  buf = UOp.new_buffer("PYTHON", arr.size, host)
  buffer_of(buf).copyin(arr.reshape(-1))
  # a copy on every device, PYTHON too: a tensor made from data is a graph until realized wherever it lives (so
  # setitem on it is functional and gradients reach the value, as on the other devices)
  # shaped before the copy: the copy's output is then the tensor's buffer (a reshape after it took a kernel)
  return graph.cast(graph.copy_to(graph.reshape(buf, shape), device), dtype)
