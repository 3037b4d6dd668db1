"""Model state: find a model's tensors, load them, and read/write them as safetensors or PyTorch files.

  get_state_dict(model)   {"layer.weight": Tensor, ...} from attributes, lists, tuples and dicts (recursively)
  get_parameters(model)   the same tensors as a list
  load_state_dict(model, sd, strict=True)   copies sd's values into the model's tensors (shapes must match)
  safe_save / safe_load / safe_load_metadata   the safetensors format (8-byte header length, JSON header, raw data)
  torch_load(path)        a torch.save checkpoint (zip or legacy format), read with an unpickler that only
                          rebuilds tensors
"""
from __future__ import annotations
import io, json, os, pathlib, pickle, struct, tarfile, types, zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Callable
import numpy as np
from tinyplug.tensor import Tensor
from tinyplug.uop.dtype import DType, dtypes, to_np_dtype

# ---------------- finding tensors ----------------

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted path."""
  out: dict[str, Tensor] = {}
  _collect(obj, prefix, tensor_type, out, set())
  return out

def _collect(obj: Any, prefix: str, tensor_type: type, out: dict[str, Tensor], active: set[int]) -> None:
  if isinstance(obj, tensor_type):
    out[prefix.strip(".")] = obj
    return
  if id(obj) in active: return   # a reference cycle: each object is walked once per path
  if hasattr(obj, "_asdict"): items = obj._asdict().items()     # namedtuples
  elif isinstance(obj, dict): items = obj.items()
  elif isinstance(obj, (list, tuple)): items = enumerate(obj)
  elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)): items = vars(obj).items()
  else: return
  active.add(id(obj))
  for k, v in list(items): _collect(v, f"{prefix}{k}.", tensor_type, out, active)
  active.discard(id(obj))

def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of get_state_dict(obj), in order (a tensor reachable twice appears once)."""
  seen: dict[int, Tensor] = {}
  for t in get_state_dict(obj).values(): seen.setdefault(id(t), t)
  return list(seen.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Copy each value of `state_dict` into the model tensor of the same name.

  A model tensor with no entry is an error when `strict` (else it is skipped); a shape mismatch is always an error,
  except a single value as () against (1,) (torch keeps BatchNorm's num_batches_tracked as a 0-d tensor).
  Values are cast to the model tensor's dtype and moved to its device (split as it is, for a model tensor split over
  several devices; one split over devices already keeps its own split). Returns the updated model tensors."""
  model_sd = get_state_dict(model)
  missing = [k for k in model_sd if k not in state_dict]
  if missing and strict:
    extra = [k for k in state_dict if k not in model_sd]
    raise KeyError(f"load_state_dict: {len(missing)} model tensor(s) missing from the state dict: {missing[:10]}"
                   + (f"; the state dict has unused keys {extra[:10]}" if extra else "") + " (pass strict=False to skip)")
  def fits(model_shape: tuple, given: tuple) -> bool:
    return model_shape == given or {model_shape, given} == {(), (1,)}
  bad = [(k, tuple(v.shape), _shape_of(state_dict[k])) for k, v in model_sd.items()
         if k in state_dict and not fits(tuple(v.shape), _shape_of(state_dict[k]))]
  if bad:
    raise ValueError("load_state_dict: shape mismatch for " +
                     ", ".join(f"{k!r} (model {m}, state dict {s})" for k, m, s in bad))
  updated: list[Tensor] = []
  for k, v in model_sd.items():
    if k not in state_dict:
      if verbose: print(f"load_state_dict: {k} is not in the state dict, skipped")
      continue
    value = state_dict[k]
    if not isinstance(value, Tensor): value = Tensor(np.asarray(value))
    if value.dtype != v.dtype: value = value.cast(v.dtype)
    if value.shape != v.shape: value = value.reshape(v.shape)
    if isinstance(v.device, tuple) and isinstance(value.device, tuple):
      v.replace(value)   # both split over devices: the state dict's split wins (as in tinygrad)
    else: _write_into(v, value.shard(v.device, v.uop.axis) if isinstance(v.device, tuple) else value.to(v.device))
    updated.append(v)
    if consume: del state_dict[k]
  if realize and updated: updated[0].realize(*updated[1:])
  return updated

def _shape_of(x: Any) -> tuple:
  return tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))

def _write_into(target: Tensor, value: Tensor) -> None:
  """Overwrite target's values, keeping its buffer when it has one (so optimizers and jits still see it)."""
  from tinyplug.tensor_ops.graph import is_plain_buffer
  if not is_plain_buffer(target.uop):
    target.replace(target.empty_like())
  target.assign(value.contiguous() if value.uop is target.uop else value)

# ---------------- safetensors ----------------

_SAFE_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
  "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2}
_SAFE_NAMES = {v: k for k, v in _SAFE_DTYPES.items()}

def _tensor_bytes(t: Tensor) -> bytes:
  """The tensor's elements as little-endian bytes in its own dtype (bfloat16: the top half of each float32)."""
  if t.dtype in dtypes.fp8s: return t.bitcast(dtypes.uint8).numpy().tobytes()   # the raw bits
  arr = t.numpy()
  if t.dtype == dtypes.bfloat16:
    return (np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
  return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()

def _tensor_from_bytes(raw: bytes | memoryview, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  if dtype in dtypes.fp8s: return Tensor(np.frombuffer(raw, dtype=np.uint8).reshape(shape), device=device).bitcast(dtype)
  if dtype == dtypes.bfloat16:
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return Tensor(bits.view(np.float32).reshape(shape), device=device, dtype=dtypes.bfloat16)
  arr = np.frombuffer(raw, dtype=np.dtype(to_np_dtype(dtype)).newbyteorder("<")).reshape(shape)
  return Tensor(arr.astype(arr.dtype.newbyteorder("=")), device=device, dtype=dtype)

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
  """Write `tensors` to `fn` in the safetensors format (readable by the `safetensors` package)."""
  header: dict[str, Any] = {}
  if metadata: header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  chunks: list[bytes] = []
  offset = 0
  for name, t in tensors.items():
    if t.dtype not in _SAFE_NAMES: raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors lacks")
    data = _tensor_bytes(t)
    header[name] = {"dtype": _SAFE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    chunks.append(data)
    offset += len(data)
  head = json.dumps(header, separators=(",", ":")).encode()
  head += b" " * (-len(head) % 8)   # pad so the data starts 8-byte aligned
  tmp = f"{os.fspath(fn)}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(head)))
    f.write(head)
    for c in chunks: f.write(c)
  os.replace(tmp, fn)

def _read_source(fn: str | os.PathLike | Tensor | bytes) -> bytes:
  if isinstance(fn, Tensor): return fn.numpy().tobytes()
  if isinstance(fn, (bytes, bytearray, memoryview)): return bytes(fn)
  return pathlib.Path(fn).read_bytes()

def _parse_header(data: bytes, where: str) -> tuple[int, dict[str, Any]]:
  if len(data) < 8: raise ValueError(f"{where}: not a safetensors file (only {len(data)} bytes)")
  (n,) = struct.unpack("<Q", data[:8])
  if n > len(data) - 8: raise ValueError(f"{where}: not a safetensors file (header length {n} > file size)")
  try: header = json.loads(data[8:8 + n])
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"{where}: corrupt safetensors header: {e}")
  if not isinstance(header, dict): raise ValueError(f"{where}: corrupt safetensors header (not a JSON object)")
  return 8 + n, header

def safe_load_metadata(fn: str | os.PathLike | Tensor) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as a uint8 Tensor, the byte offset where tensor data starts, the parsed JSON header)."""
  data = _read_source(fn)
  start, header = _parse_header(data, str(fn) if not isinstance(fn, Tensor) else "tensor")
  return Tensor(np.frombuffer(data, dtype=np.uint8)), start, header

def safe_load(fn: str | os.PathLike | Tensor, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a safetensors file, by name (on `device`, default Device.DEFAULT)."""
  where = str(fn) if not isinstance(fn, Tensor) else "tensor"
  data = _read_source(fn)
  start, header = _parse_header(data, where)
  out: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__": continue
    if info.get("dtype") not in _SAFE_DTYPES: raise ValueError(f"{where}: {name!r} has unknown dtype {info.get('dtype')!r}")
    dtype, shape = _SAFE_DTYPES[info["dtype"]], tuple(info["shape"])
    lo, hi = info["data_offsets"]
    if hi - lo != int(np.prod(shape)) * dtype.itemsize or start + hi > len(data):
      raise ValueError(f"{where}: {name!r} has data offsets {lo}..{hi} that do not fit shape {shape} {info['dtype']}")
    out[name] = _tensor_from_bytes(memoryview(data)[start + lo:start + hi], dtype, shape, device)
  return out

# ---------------- PyTorch checkpoints ----------------

_TORCH_STORAGES: dict[str, DType] = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
  "Float8_e4m3fnStorage": dtypes.fp8e4m3, "Float8_e5m2Storage": dtypes.fp8e5m2,
  "Float8_e4m3fnuzStorage": dtypes.fp8e4m3fnuz, "Float8_e5m2fnuzStorage": dtypes.fp8e5m2fnuz}
_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c   # the first pickle of a torch.save file written without the zip container
_LEGACY_PROTOCOL = 1001

class _StorageType:
  """Stands in for torch.XStorage: only carries the dtype."""
  def __init__(self, dtype: DType): self.dtype = dtype

class _Storage:
  """A storage's elements; in the legacy format they are read after the pickle that refers to them."""
  def __init__(self, dtype: DType, numel: int, array: np.ndarray | None = None):
    self.dtype, self.numel, self.array = dtype, numel, array

class _TorchTensor:
  """A tensor described by torch's pickle: a strided view of a storage; turned into a Tensor at the end."""
  def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
    self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

  def materialize(self) -> np.ndarray:
    arr, size, stride, offset = self.storage.array, self.size, self.stride, self.offset
    if arr is None: raise ValueError("torch_load: a tensor refers to a storage whose data the file does not contain")
    if 0 in size: return np.zeros(size, arr.dtype)
    end = offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1
    if offset < 0 or min(stride, default=0) < 0 or end > len(arr):
      raise ValueError(f"torch_load: a tensor of size {size}, stride {stride}, offset {offset} does not fit its "
                       f"storage of {len(arr)} elements")
    view = np.lib.stride_tricks.as_strided(arr[offset:], shape=size, strides=[st * arr.itemsize for st in stride])
    return np.array(view, order="C")   # (ascontiguousarray makes 0-d 1-d)

def _rebuild_tensor(storage, storage_offset, size, stride, *_rest, **_kw) -> _TorchTensor:
  if not isinstance(storage, _Storage): raise pickle.UnpicklingError("torch_load: a tensor without a storage")
  return _TorchTensor(storage, int(storage_offset), tuple(size), tuple(stride))

class _TorchDType:
  """Stands in for a torch dtype object (torch.float8_e4m3fn, ...) in a checkpoint's pickle."""
  def __init__(self, dtype: DType): self.dtype = dtype

_TORCH_DTYPES: dict[str, DType] = {"float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2,
                                   "float8_e4m3fnuz": dtypes.fp8e4m3fnuz, "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
                                   "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64}

def _rebuild_tensor_v3(storage, storage_offset, size, stride, _requires_grad, _hooks, dtype, *_rest) -> _TorchTensor:
  """A tensor of a dtype without a typed storage (fp8, uint16/32/64): its storage's bytes read as that dtype."""
  if not isinstance(storage, _Storage) or not isinstance(dtype, _TorchDType) or storage.array is None:
    raise pickle.UnpicklingError("torch_load: a tensor (v3) without a storage or a known dtype")
  arr = storage.array.view(np.dtype(to_np_dtype(dtype.dtype)).newbyteorder("<")).astype(to_np_dtype(dtype.dtype))
  return _rebuild_tensor(_Storage(dtype.dtype, len(arr), arr), storage_offset, size, stride)

def _rebuild_parameter(data, *_rest, **_kw): return data

def _rebuild_from_type_v2(func, _new_type, args, _state):
  if func not in (_rebuild_tensor, _rebuild_parameter):
    raise pickle.UnpicklingError("torch_load: _rebuild_from_type_v2 with a function other than a tensor rebuild")
  return func(*args)

# the only globals a checkpoint may name; anything else is refused (no arbitrary code runs while loading)
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
  ("torch._utils", "_rebuild_tensor"): _rebuild_tensor, ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
  ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3, ("torch.storage", "UntypedStorage"): _StorageType(dtypes.uint8),
  **{("torch", name): _TorchDType(dt) for name, dt in _TORCH_DTYPES.items()},
  ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
  ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
  ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
  ("collections", "OrderedDict"): OrderedDict, ("torch", "Size"): tuple,
  **{("torch", name): _StorageType(dt) for name, dt in _TORCH_STORAGES.items()}}

class _RestrictedUnpickler(pickle.Unpickler):
  def __init__(self, file, load_storage: Callable[[DType, str, int, Any], _Storage] | None = None):
    super().__init__(file)
    self._load_storage = load_storage
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in _ALLOWED_GLOBALS: return _ALLOWED_GLOBALS[(module, name)]
    if module == "torch" and name.endswith("Storage"):
      raise pickle.UnpicklingError(f"torch_load: tensors of torch.{name} are not supported (supported: "
                                   f"{', '.join(_TORCH_STORAGES)})")
    if module.startswith("torch"):
      raise pickle.UnpicklingError(f"torch_load: {module}.{name} is not supported (only tensors, parameters, "
                                   "storages and plain containers can be loaded)")
    raise pickle.UnpicklingError(f"torch_load: refusing to load global {module}.{name} (only tensors, storages and "
                                 "dicts are allowed in a checkpoint)")
  def persistent_load(self, pid: Any) -> Any:
    if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
            and self._load_storage is not None):
      raise pickle.UnpicklingError(f"torch_load: unsupported persistent id {pid!r}")
    return self._load_storage(pid[1].dtype, str(pid[2]), int(pid[4]), pid[5] if len(pid) > 5 else None)

def _np_dtype(dtype: DType, big_endian: bool) -> np.dtype:
  return np.dtype(to_np_dtype(dtype)).newbyteorder(">" if big_endian else "<")

def _storage_array(raw: bytes, dtype: DType, numel: int, big_endian: bool) -> np.ndarray:
  npdt = _np_dtype(dtype, big_endian)
  return np.frombuffer(raw, dtype=npdt, count=numel).astype(npdt.newbyteorder("="))

def torch_load(fn: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """A PyTorch checkpoint written by torch.save as a dict of Tensors (nested dicts, lists and tuples are kept).

  Reads the zip format (torch >= 1.6) and the legacy format (`_use_new_zipfile_serialization=False`, and files
  from torch < 1.6) without importing torch; only tensors, storages and plain containers are rebuilt."""
  if zipfile.is_zipfile(fn): return _to_tensors(_load_zip(fn), device)
  with open(fn, "rb") as f: return _to_tensors(_load_legacy(f, str(fn)), device)

def _load_zip(fn: str | os.PathLike) -> Any:
  with zipfile.ZipFile(fn) as zf:
    names = zf.namelist()
    pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if not pkl: raise ValueError(f"torch_load: {fn} has no data.pkl; is it a torch.save checkpoint?")
    root = pkl[0][:-len("data.pkl")]
    big_endian = (root + "byteorder") in names and zf.read(root + "byteorder").strip() == b"big"
    cache: dict[str, _Storage] = {}
    def load_storage(dtype: DType, key: str, numel: int, _view: Any) -> _Storage:
      if key not in cache:
        raw = zf.read(f"{root}data/{key}")
        if len(raw) < numel * dtype.itemsize:
          raise ValueError(f"torch_load: storage {key} has {len(raw)} bytes, expected {numel * dtype.itemsize}")
        cache[key] = _Storage(dtype, numel, _storage_array(raw, dtype, numel, big_endian))
      return cache[key]
    return _RestrictedUnpickler(io.BytesIO(zf.read(pkl[0])), load_storage).load()

def _legacy_header(f: BinaryIO, where: str) -> bool:
  """Check the three pickles a legacy file starts with; returns whether its data is big-endian."""
  try: magic = _RestrictedUnpickler(f).load()
  except Exception: magic = None
  if magic != _LEGACY_MAGIC:
    f.seek(0)
    if tarfile.is_tarfile(f):
      raise ValueError(f"torch_load: {where} is a tar-format checkpoint (PyTorch < 0.4), which is not supported; "
                       "re-save it with a newer torch")
    raise ValueError(f"torch_load: {where} is not a PyTorch checkpoint (neither the zip format nor the legacy "
                     "pickle format; TorchScript archives are not supported either)")
  protocol = _RestrictedUnpickler(f).load()
  if protocol != _LEGACY_PROTOCOL:
    raise ValueError(f"torch_load: {where} uses legacy protocol version {protocol!r}; only {_LEGACY_PROTOCOL} is read")
  sys_info = _RestrictedUnpickler(f).load()
  if not isinstance(sys_info, dict): raise ValueError(f"torch_load: {where} has a corrupt legacy header")
  return not sys_info.get("little_endian", True)

def _load_legacy(f: BinaryIO, where: str) -> Any:
  """The legacy format: header pickles, the object pickle, the list of storage keys, then each storage's
  element count (8 bytes) and elements, in that list's order."""
  big_endian = _legacy_header(f, where)
  storages: dict[str, _Storage] = {}
  def load_storage(dtype: DType, key: str, numel: int, view: Any) -> _Storage:
    if view is not None:
      raise ValueError(f"torch_load: {where} holds a storage view (written by a very old torch), which is not "
                       "supported; re-save it with a newer torch")
    return storages.setdefault(key, _Storage(dtype, numel))
  obj = _RestrictedUnpickler(f, load_storage).load()
  keys = _RestrictedUnpickler(f).load()
  if not isinstance(keys, list): raise ValueError(f"torch_load: {where}: corrupt legacy file (no list of storages)")
  for key in keys:
    storage = storages.get(str(key))
    if storage is None: raise ValueError(f"torch_load: {where}: storage {key} is listed but never used")
    header = f.read(8)
    numel = int.from_bytes(header, "big" if big_endian else "little") if len(header) == 8 else -1
    raw = f.read(max(numel, 0) * storage.dtype.itemsize)
    if numel != storage.numel or len(raw) != numel * storage.dtype.itemsize:
      raise ValueError(f"torch_load: {where}: storage {key} is truncated or corrupt (expected {storage.numel} "
                       f"elements of {storage.dtype!r})")
    storage.array = _storage_array(raw, storage.dtype, numel, big_endian)
  return obj

def _to_tensors(obj: Any, device: str | None) -> Any:
  if isinstance(obj, _TorchTensor):
    arr = obj.materialize()
    if obj.storage.dtype == dtypes.bfloat16:
      return Tensor((arr.astype(np.uint32) << 16).view(np.float32), device=device, dtype=dtypes.bfloat16)
    if obj.storage.dtype in dtypes.fp8s: return Tensor(arr, device=device, dtype=dtypes.uint8).bitcast(obj.storage.dtype)
    return Tensor(arr, device=device, dtype=obj.storage.dtype)
  if isinstance(obj, dict): return {k: _to_tensors(v, device) for k, v in obj.items()}
  if isinstance(obj, list): return [_to_tensors(v, device) for v in obj]
  if isinstance(obj, tuple): return tuple(_to_tensors(v, device) for v in obj)
  return obj

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_save", "safe_load", "safe_load_metadata",
           "torch_load"]
