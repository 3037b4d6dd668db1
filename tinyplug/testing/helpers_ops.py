"""check_op: run one op in tinyplug and in PyTorch on the same inputs; compare the outputs and the gradients."""
from __future__ import annotations
from typing import Any, Callable, Sequence
import numpy as np
import torch
from tinyplug import Tensor

def requires_dtypes(*names: str) -> None:
  """Skip the running test when the default device's renderer lacks one of these dtypes (`supported_dtypes()`)."""
  import pytest
  from tinyplug.device import Device
  from tinyplug.uop.dtype import to_dtype
  have = Device[Device.DEFAULT].renderer.supported_dtypes()
  missing = [n for n in names if to_dtype("bool" if n == "bool_" else n) not in have]
  if missing: pytest.skip(f"{Device.DEFAULT} has no {', '.join(missing)}")

def make_inputs(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any], low: float, high: float, seed: int) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  out = []
  for shape, dt in zip(shapes, dtypes):
    dt = np.dtype(dt)
    if dt == np.bool_: out.append(rng.integers(0, 2, size=shape).astype(bool))
    elif np.issubdtype(dt, np.integer): out.append(rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dt))
    else: out.append(rng.uniform(low, high, size=shape).astype(dt))
  return out

def _as_list(x: Any) -> list:
  return list(x) if isinstance(x, (list, tuple)) else [x]

def compare(tiny: np.ndarray, ref: np.ndarray, atol: float, rtol: float, what: str) -> None:
  assert tiny.shape == ref.shape, f"{what}: shape {tiny.shape} != torch {ref.shape}"
  if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
    np.testing.assert_array_equal(tiny.astype(ref.dtype) if tiny.dtype != ref.dtype else tiny, ref, err_msg=what)
  else:
    np.testing.assert_allclose(tiny.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol, err_msg=what)

def _as_array(v: Any) -> np.ndarray:
  a = np.asarray(v)
  return a.astype(np.float32) if not isinstance(v, np.ndarray) and a.dtype == np.float64 else a

def check_op(shapes: Sequence[tuple[int, ...]] | None, torch_fn: Callable, tiny_fn: Callable | None = None,
             atol: float = 1e-6, rtol: float = 1e-3, grad: bool = True, low: float = -2.0, high: float = 2.0,
             dtype: Any = np.float32, vals: Sequence[Any] | None = None, grad_atol: float | None = None,
             grad_rtol: float | None = None, seed: int = 0) -> Any:
  """Forward (and, for float inputs with grad=True, backward) of `tiny_fn` must match `torch_fn` (torch on CPU).

  Inputs are random arrays of `shapes` in [low, high] (or the given `vals`); `dtype` may be one dtype or one per input.
  The backward pass seeds a random gradient so that every output element matters. tiny_fn defaults to torch_fn,
  for ops spelled the same in both."""
  tiny_fn = tiny_fn or torch_fn
  # Python float lists are float32, as `Tensor([1.0])` is (a device without float64, such as Metal, runs them too)
  if vals is not None: arrays = [_as_array(v) for v in vals]
  else:
    dts = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    arrays = make_inputs(shapes, dts, low, high, seed)
  floating = all(np.issubdtype(a.dtype, np.floating) for a in arrays)
  with_grad = grad and floating and len(arrays) > 0
  torch_in = [torch.tensor(a, requires_grad=with_grad) for a in arrays]
  tiny_in = [Tensor(a, requires_grad=with_grad) for a in arrays]
  torch_out, tiny_out = _as_list(torch_fn(*torch_in)), _as_list(tiny_fn(*tiny_in))
  assert len(torch_out) == len(tiny_out), f"{len(tiny_out)} outputs, torch gave {len(torch_out)}"
  for i, (t, p) in enumerate(zip(torch_out, tiny_out)):
    compare(p.numpy(), t.detach().numpy(), atol, rtol, f"forward output {i}")
  if not with_grad or not any(t.requires_grad for t in torch_out): return tiny_out if len(tiny_out) > 1 else tiny_out[0]
  rng = np.random.default_rng(seed + 1)
  seeds = [rng.uniform(0.5, 1.5, size=t.shape).astype(np.float32) for t in torch_out]
  sum(((t * torch.tensor(s, dtype=t.dtype)).sum() for t, s in zip(torch_out, seeds) if t.requires_grad)).backward()
  sum(((p * Tensor(s).cast(p.dtype)).sum() for p, t, s in zip(tiny_out, torch_out, seeds) if t.requires_grad)).backward()
  for i, (t, p) in enumerate(zip(torch_in, tiny_in)):
    ref = np.zeros(t.shape, dtype=np.float32) if t.grad is None else t.grad.numpy()
    got = np.zeros(p.shape, dtype=np.float32) if p.grad is None else p.grad.numpy()
    compare(got, ref, atol if grad_atol is None else grad_atol, rtol if grad_rtol is None else grad_rtol, f"gradient of input {i}")
  return tiny_out if len(tiny_out) > 1 else tiny_out[0]
