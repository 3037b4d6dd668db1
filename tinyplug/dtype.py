"""tinygrad's `tinygrad.dtype` module path: the dtype names code written for tinygrad imports from it.

The dtypes themselves live in `tinyplug.uop.dtype`; this module only re-exports them and adds the name tables."""
from __future__ import annotations
from typing import Union
from tinyplug.uop.dtype import (ConstType, DType, PtrDType, dtypes, least_upper_dtype, least_upper_float, sum_acc_dtype,
                                to_dtype, to_np_dtype, from_np_dtype)

DTypeLike = Union[str, DType]

# every dtype by each of its attribute names on `dtypes` (aliases included), without void, the index type and defaults
DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.fields().items() if k not in ("void", "index")}

__all__ = ["ConstType", "DType", "DTypeLike", "PtrDType", "dtypes", "least_upper_dtype", "least_upper_float", "sum_acc_dtype",
           "to_dtype", "to_np_dtype", "from_np_dtype", "DTYPES_DICT"]
