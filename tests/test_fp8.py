"""fp8 dtypes and the emulated float dtypes: conversions against torch bit for bit, host interop, and kernels on devices
that lack the formats (every device so far), through the core's "dtypes" codegen stage."""
import math
import numpy as np
import pytest
import torch
from tinyplug import Context, Tensor, dtypes
from tinyplug.device import Device
from tinyplug.dtype import DTYPES_DICT, float_to_fp8, fp8_to_float, least_upper_dtype, truncate
from tinyplug.uop.minifloat import from_bits_np, to_bits_np

TORCH = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2,
         dtypes.fp8e4m3fnuz: torch.float8_e4m3fnuz, dtypes.fp8e5m2fnuz: torch.float8_e5m2fnuz}
FP8 = pytest.mark.parametrize("dt", list(TORCH), ids=lambda d: repr(d).removeprefix("dtypes."))

def _torch_bits(x: np.ndarray, dt) -> np.ndarray:
  return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(TORCH[dt]).view(torch.uint8).numpy()

def _torch_values(bits: np.ndarray, dt) -> np.ndarray:
  return torch.from_numpy(bits.astype(np.uint8)).view(TORCH[dt]).float().numpy()

def _probe_floats(dt) -> np.ndarray:
  """Random floats over the format's range and past it, every fp8 value, the midpoints between neighbours (ties),
  their neighbours one float32 ulp away, and the special values."""
  rng = np.random.default_rng(0)
  vals = _torch_values(np.arange(256), dt)
  finite = np.unique(vals[np.isfinite(vals)])
  mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)
  rand = (rng.standard_normal(4000) * np.exp2(rng.uniform(-24, 18, 4000))).astype(np.float32)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30, 1e-30, 3e-45], dtype=np.float32)
  return np.concatenate([finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                         rand, special]).astype(np.float32)

@FP8
def test_host_encode_matches_torch_bit_for_bit(dt):
  x = _probe_floats(dt)
  np.testing.assert_array_equal(to_bits_np(x, dt), _torch_bits(x, dt))

@FP8
def test_host_decode_matches_torch_for_every_bit_pattern(dt):
  bits = np.arange(256)
  np.testing.assert_array_equal(from_bits_np(bits, dt), _torch_values(bits, dt))   # NaNs compare equal here

@FP8
def test_scalar_helpers(dt):
  for x in (0.3, -1.7, 100.0, 1e-3, 1e9, -math.inf):
    assert float_to_fp8(x, dt) == int(_torch_bits(np.array([x]), dt)[0])
    np.testing.assert_equal(truncate[dt](x), fp8_to_float(float_to_fp8(x, dt), dt))
  for b in (0x00, 0x01, 0x38, 0x7B, 0x7E, 0x80, 0xFF):
    got, ref = fp8_to_float(b, dt), float(_torch_values(np.array([b]), dt)[0])
    assert got == ref or (math.isnan(got) and math.isnan(ref))
  with pytest.raises(ValueError, match="fp8"): float_to_fp8(1.0, dtypes.float32)
  with pytest.raises(ValueError, match="0..255"): fp8_to_float(256, dt)

def test_dtype_facts():
  assert [dt.itemsize for dt in dtypes.fp8s] == [1, 1, 1, 1]
  assert dtypes.fp8s == (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
  assert set(dtypes.fp8s) <= set(dtypes.floats)
  assert all(dtypes.is_float(d) and not dtypes.is_int(d) for d in dtypes.fp8s)
  assert dtypes.finfo(dtypes.fp8e4m3) == (4, 3) and dtypes.finfo(dtypes.fp8e5m2) == (5, 2)
  assert (dtypes.fp8e4m3.min, dtypes.fp8e4m3.max) == (-448.0, 448.0)   # no inf in e4m3fn
  assert dtypes.fp8e5m2.max == math.inf and dtypes.fp8e4m3fnuz.max == 240.0
  assert DTYPES_DICT["fp8e5m2"] is dtypes.fp8e5m2 and repr(dtypes.fp8e4m3fnuz) == "dtypes.fp8e4m3fnuz"
  with pytest.raises(ValueError, match="not a float"): dtypes.finfo(dtypes.int32)

def test_promotion_lattice():
  assert least_upper_dtype(dtypes.int64, dtypes.fp8e4m3) == dtypes.fp8e4m3
  assert least_upper_dtype(dtypes.uint8, dtypes.fp8e5m2) == dtypes.fp8e5m2
  assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) == dtypes.float16
  assert least_upper_dtype(dtypes.fp8e4m3, dtypes.bfloat16) == dtypes.bfloat16
  assert least_upper_dtype(dtypes.fp8e5m2fnuz, dtypes.float32) == dtypes.float32
  assert (Tensor([1, 2], dtype=dtypes.fp8e4m3) + Tensor([1, 2], dtype=dtypes.int32)).dtype == dtypes.fp8e4m3

def test_not_a_supported_dtype_of_any_device():
  # like tinygrad on CPU/CL: supported_dtypes() leaves fp8 out, and fp8 tensors still work through emulation
  assert not set(dtypes.fp8s) & set(Device[Device.DEFAULT].renderer.supported_dtypes())

@FP8
def test_device_cast_matches_torch(dt, device):
  x = _probe_floats(dt)
  got = Tensor(x, device=device).cast(dt).bitcast(dtypes.uint8).numpy()
  np.testing.assert_array_equal(got, _torch_bits(x, dt))
  back = Tensor(_torch_bits(x, dt), device=device).bitcast(dt).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(back, _torch_values(_torch_bits(x, dt), dt))

def test_float64_source_rounds_once(device):
  # 1 + 2**-4 + 2**-40 is just above a tie of e4m3: float32 would round it onto the tie (then to even, down)
  x = np.array([1 + 2**-4 + 2**-40, -(1 + 2**-4 + 2**-40), 1 + 2**-4], dtype=np.float64)
  got = Tensor(x, device=device, dtype=dtypes.float64).cast(dtypes.fp8e4m3).numpy()
  np.testing.assert_array_equal(got, [1.125, -1.125, 1.0])
  np.testing.assert_array_equal(Tensor(x, dtype=dtypes.fp8e4m3).numpy(), [1.125, -1.125, 1.0])   # host path too

@FP8
def test_arithmetic_rounds_each_result(dt, device):
  a = np.array([0.3, -1.7, 100.0, 3.1, 0.01], dtype=np.float32)
  b = np.array([1.3, 2.9, -7.0, 0.51, 0.02], dtype=np.float32)
  ta, tb = Tensor(a, dtype=dt, device=device), Tensor(b, dtype=dt, device=device)
  qa, qb = torch.tensor(a).to(TORCH[dt]).float(), torch.tensor(b).to(TORCH[dt]).float()
  q = lambda t: t.to(TORCH[dt]).float().numpy()   # noqa: E731  (round a float32 torch result to the format)
  np.testing.assert_array_equal((ta * tb + ta).numpy(), q(torch.tensor(q(qa * qb)) + qa))
  np.testing.assert_array_equal(ta.maximum(tb).numpy(), torch.maximum(qa, qb).numpy())
  np.testing.assert_array_equal((ta < tb).numpy(), (qa < qb).numpy())
  assert (ta * tb).dtype == dt and ta.sum().dtype == dt
  np.testing.assert_allclose(ta.sum().numpy(), q(qa.sum()), rtol=0)

def test_bitcast_keeps_every_bit_pattern(device):
  bits = np.arange(256, dtype=np.uint8)
  for dt in dtypes.fp8s:
    out = Tensor(bits, device=device).bitcast(dt).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(out, bits)
    # through a stored fp8 buffer: NaN payloads may be canonical, every other value keeps its bits
    stored = Tensor(bits, device=device).bitcast(dt).contiguous().realize().bitcast(dtypes.int8).numpy().view(np.uint8)
    vals = _torch_values(bits, dt)
    np.testing.assert_array_equal(stored[~np.isnan(vals)], bits[~np.isnan(vals)])

def test_tensor_interop():
  t = Tensor([[0.3, -2.0], [500.0, 1e-4]], dtype=dtypes.fp8e4m3)
  assert t.dtype == dtypes.fp8e4m3 and t.shape == (2, 2)
  assert t.numpy().dtype == np.float32
  assert t.tolist() == [[0.3125, -2.0], [448.0, 0.0]]
  assert Tensor(2.5, dtype=dtypes.fp8e5m2).item() == 2.5
  assert Tensor.full((3,), 0.3, dtype=dtypes.fp8e4m3).tolist() == [0.3125] * 3
  assert Tensor([], dtype=dtypes.fp8e4m3).numpy().shape == (0,)

@pytest.mark.parametrize("name,dt", [("half", dtypes.float16), ("bfloat16", dtypes.bfloat16)])
def test_emulated_dtypes_setting_computes_the_same_values(name, dt):
  x = np.random.default_rng(1).standard_normal(64).astype(np.float32) * 100
  native = (Tensor(x).cast(dt) * 3 + 1).cast(dtypes.float32).numpy()
  with Context(EMULATED_DTYPES=name):
    emulated = (Tensor(x).cast(dt) * 3 + 1).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(emulated, native)

def _lowered_dtypes(t: Tensor, device: str) -> set:
  from tinyplug.codegen import full_rewrite_to_sink
  from tinyplug.uop.ops import Ops
  sinks = [si.ast for si in t.schedule() if si.ast.op is Ops.SINK]
  return {(u.dtype.base if hasattr(u.dtype, "base") else u.dtype).scalar() for s in sinks
          for u in full_rewrite_to_sink(s, Device[device].renderer).toposort()}

def test_kernels_hold_no_emulated_dtype():
  x = Tensor([1.5, -2.25, 3.0], device="CPU").realize()
  assert dtypes.fp8e4m3 not in _lowered_dtypes(x.cast(dtypes.fp8e4m3) * 2, "CPU")
  assert dtypes.uint8 in _lowered_dtypes(x.cast(dtypes.fp8e4m3) * 2, "CPU")
  assert dtypes.float16 in _lowered_dtypes(x.cast(dtypes.float16) * 2, "CPU")
  with Context(EMULATED_DTYPES="half"):
    found = _lowered_dtypes(x.cast(dtypes.float16) * 2, "CPU")
    assert dtypes.float16 not in found and dtypes.uint16 in found

def test_emulated_dtypes_setting_rejects_unknown_names():
  from tinyplug.helpers import EMULATED_DTYPES
  with Context(EMULATED_DTYPES="half,fp8e4m3"): assert EMULATED_DTYPES.tolist(dtypes) == [dtypes.half, dtypes.fp8e4m3]
  with Context(EMULATED_DTYPES="halff"), pytest.raises(ValueError, match="halff"): EMULATED_DTYPES.tolist(dtypes)

def test_safetensors_round_trip_with_torch(tmp_path):
  from safetensors.torch import load_file, save_file
  from tinyplug.nn.state import safe_load, safe_save
  x = torch.tensor([0.3, -2.0, 448.0, 1e-3, 57344.0])
  save_file({"a": x.to(torch.float8_e4m3fn), "b": x.to(torch.float8_e5m2)}, str(tmp_path / "torch.safetensors"))
  loaded = safe_load(tmp_path / "torch.safetensors")
  assert loaded["a"].dtype == dtypes.fp8e4m3 and loaded["b"].dtype == dtypes.fp8e5m2
  np.testing.assert_array_equal(loaded["a"].numpy(), x.to(torch.float8_e4m3fn).float().numpy())
  np.testing.assert_array_equal(loaded["b"].numpy(), x.to(torch.float8_e5m2).float().numpy())
  safe_save({"c": Tensor(x.numpy(), dtype=dtypes.fp8e4m3)}, tmp_path / "ours.safetensors")
  back = load_file(str(tmp_path / "ours.safetensors"))["c"]
  assert back.dtype == torch.float8_e4m3fn
  assert torch.equal(back.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))

def test_torch_load_of_fp8_tensors(tmp_path):
  from tinyplug.nn.state import torch_load
  x = torch.tensor([[0.3, -2.0], [448.0, 1e-3]])
  state = {name: x.to(tdt) for name, tdt in (("a", torch.float8_e4m3fn), ("b", torch.float8_e5m2),
                                               ("c", torch.float8_e4m3fnuz), ("d", torch.float8_e5m2fnuz))}
  torch.save({**state, "u": torch.tensor([1, 65535, 7], dtype=torch.uint16)}, tmp_path / "fp8.pt")
  loaded = torch_load(tmp_path / "fp8.pt")
  for name, dt in zip("abcd", dtypes.fp8s):
    assert loaded[name].dtype == dt and loaded[name].shape == (2, 2)
    np.testing.assert_array_equal(loaded[name].numpy(), state[name].float().numpy())
  assert loaded["u"].dtype == dtypes.uint16 and loaded["u"].tolist() == [1, 65535, 7]   # also a v3 (untyped) storage
