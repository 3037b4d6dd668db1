"""tinygrad's `tinygrad.dtype` module path: the dtype names code written for tinygrad imports from it.

The dtypes themselves live in `tinyplug.uop.dtype`, the small float formats in `tinyplug.uop.minifloat`; this module
re-exports them and adds the name tables and tinygrad's conversion helpers."""
from __future__ import annotations
from typing import Callable, Iterator, Mapping, Union
from tinyplug.uop.dtype import (ConstType, DType, PtrDType, dtypes, least_upper_dtype, least_upper_float, strong_dtype,
                                sum_acc_dtype, to_dtype, to_np_dtype, from_np_dtype, truncate as _truncate)

DTypeLike = Union[str, DType]

# every dtype by each of its attribute names on `dtypes` (aliases included), without void, the index type and defaults
DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.fields().items() if k not in ("void", "index", "weakint")}

def float_to_fp8(x: float, dtype: DType) -> int:
  """The fp8 bits (0..255) of a Python float, rounded to nearest even (overflow, NaN: tinyplug.uop.minifloat)."""
  from tinyplug.uop.minifloat import to_bits_np
  if dtype not in dtypes.fp8s: raise ValueError(f"float_to_fp8 needs an fp8 dtype, not {dtype!r}")
  return int(to_bits_np(float(x), dtype))

def fp8_to_float(x: int, dtype: DType) -> float:
  """The value of fp8 bits `x` (0..255) as a Python float."""
  from tinyplug.uop.minifloat import from_bits_np
  if dtype not in dtypes.fp8s: raise ValueError(f"fp8_to_float needs an fp8 dtype, not {dtype!r}")
  if not 0 <= int(x) <= 255: raise ValueError(f"fp8 bits must be in 0..255, not {x}")
  return float(from_bits_np(int(x), dtype))

class _TruncateTable(Mapping[DType, Callable[[ConstType], ConstType]]):
  """`truncate[dtype](x)`: x rounded (floats) or wrapped (ints) to what `dtype` holds, as tinygrad spells it; also
  callable as `truncate(dtype, x)`."""
  def __getitem__(self, dt: DType) -> Callable[[ConstType], ConstType]:
    if not isinstance(dt, DType) or dt not in dtypes.all: raise KeyError(dt)
    return lambda x: _truncate(dt, float(x) if dtypes.is_float(dt) else x)
  def __iter__(self) -> Iterator[DType]: return iter(dtypes.all)
  def __len__(self) -> int: return len(dtypes.all)
  def __call__(self, dt: DType, x: ConstType) -> ConstType: return _truncate(dt, x)

truncate = _TruncateTable()

__all__ = ["ConstType", "DType", "DTypeLike", "PtrDType", "dtypes", "least_upper_dtype", "least_upper_float",
           "strong_dtype", "sum_acc_dtype", "to_dtype", "to_np_dtype", "from_np_dtype", "DTYPES_DICT", "float_to_fp8", "fp8_to_float", "truncate"]
