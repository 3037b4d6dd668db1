"""Model state: finding tensors, loading state dicts, safetensors round trips, and PyTorch checkpoints."""
from __future__ import annotations
import json, pathlib, pickle, struct, zipfile
from collections import namedtuple
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes, nn
from tinyplug.nn.state import (get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save,
                               torch_load)

class Net:
  def __init__(self):
    self.conv = nn.Conv2d(1, 2, 3)
    self.bn = nn.BatchNorm2d(2)
    self.layers = [nn.Linear(4, 3), nn.Linear(3, 2, bias=False)]
    self.extra = {"scale": Tensor([2.0])}
    self.name = "not a tensor"

def test_get_state_dict_names_like_tinygrad():
  sd = get_state_dict(Net())
  assert list(sd) == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                      "bn.num_batches_tracked", "layers.0.weight", "layers.0.bias", "layers.1.weight", "extra.scale"]
  assert sd["layers.0.weight"].shape == (3, 4)

def test_get_state_dict_namedtuple_cycles_and_shared():
  Pair = namedtuple("Pair", "a b")
  shared = Tensor([1.0])
  class Holder:
    def __init__(self): self.p, self.q, self.me = Pair(shared, Tensor([2.0])), shared, self
  h = Holder()
  sd = get_state_dict(h)
  assert set(sd) == {"p.a", "p.b", "q"}
  assert len(get_parameters(h)) == 2   # the shared tensor once

def test_load_state_dict_copies_values_in_place():
  a, b = Net(), Net()
  for t in get_parameters(a): t.realize()
  for t in get_parameters(b): t.realize()
  target = get_state_dict(b)["layers.0.weight"]
  from tinyplug.engine.realize import buffer_of
  buf = buffer_of(target.uop)
  load_state_dict(b, get_state_dict(a))
  for k, v in get_state_dict(a).items(): np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)
  assert buffer_of(target.uop) is buf   # same buffer: optimisers and jits that hold it see the new values

def test_load_state_dict_errors():
  net = Net()
  sd = get_state_dict(Net())
  missing = {k: v for k, v in sd.items() if k != "conv.bias"}
  with pytest.raises(KeyError, match="conv.bias"): load_state_dict(net, missing)
  load_state_dict(net, missing, strict=False)   # skipped, no error
  bad = dict(sd, **{"conv.weight": Tensor.ones(2, 1, 2, 2)})
  with pytest.raises(ValueError, match=r"conv.weight.*\(2, 1, 3, 3\).*\(2, 1, 2, 2\)"): load_state_dict(net, bad)

def test_load_state_dict_casts_dtype():
  lin = nn.Linear(2, 2)
  load_state_dict(lin, {"weight": Tensor(np.eye(2, dtype=np.float64)), "bias": Tensor([1, 2], dtype=dtypes.int32)})
  assert lin.weight.dtype == dtypes.float32
  np.testing.assert_array_equal(lin.bias.numpy(), [1.0, 2.0])

ALL_DTYPES = [(dtypes.float32, np.float32), (dtypes.float16, np.float16), (dtypes.float64, np.float64),
              (dtypes.int8, np.int8), (dtypes.uint8, np.uint8), (dtypes.int16, np.int16), (dtypes.int32, np.int32),
              (dtypes.int64, np.int64), (dtypes.bool, np.bool_)]

def test_safe_save_is_read_by_the_safetensors_package(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  rng = np.random.default_rng(0)
  tensors = {f"t_{np_dt.__name__}": Tensor((rng.standard_normal((2, 3)) * 10).astype(np_dt), dtype=dt)
             for dt, np_dt in ALL_DTYPES}
  tensors["scalar"] = Tensor(3.5)
  fn = tmp_path / "m.safetensors"
  safe_save(tensors, str(fn), metadata={"format": "np"})
  theirs = safetensors_numpy.load_file(str(fn))
  assert set(theirs) == set(tensors)
  for k, t in tensors.items():
    assert theirs[k].shape == t.shape and theirs[k].dtype == t.numpy().dtype, k
    np.testing.assert_array_equal(theirs[k], t.numpy(), err_msg=k)
  from safetensors import safe_open
  with safe_open(str(fn), "np") as f: assert f.metadata() == {"format": "np"}

def test_safe_load_reads_the_safetensors_package(tmp_path):
  safetensors_torch = pytest.importorskip("safetensors.torch")
  sd = {"w": torch.randn(3, 4), "h": torch.randn(5).half(), "bf": torch.randn(2, 2).bfloat16(),
        "i": torch.arange(6).reshape(2, 3), "b": torch.tensor([True, False])}
  fn = tmp_path / "t.safetensors"
  safetensors_torch.save_file(sd, str(fn))
  ours = safe_load(str(fn))
  assert ours["bf"].dtype == dtypes.bfloat16 and ours["h"].dtype == dtypes.float16 and ours["i"].dtype == dtypes.int64
  for k, v in sd.items(): np.testing.assert_array_equal(ours[k].numpy(), v.float().numpy() if k == "bf" else v.numpy())

def test_safe_round_trip_with_state_dict(tmp_path):
  a, b = Net(), Net()
  fn = str(tmp_path / "net.safetensors")
  safe_save(get_state_dict(a), fn)
  load_state_dict(b, safe_load(fn))
  for k, v in get_state_dict(a).items(): np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)

def test_safe_bfloat16_round_trip(tmp_path):
  t = Tensor([1.5, -2.25, 3e38], dtype=dtypes.bfloat16)
  fn = str(tmp_path / "bf.safetensors")
  safe_save({"x": t}, fn)
  back = safe_load(fn)["x"]
  assert back.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(back.numpy(), t.numpy())

def test_safe_load_metadata(tmp_path):
  fn = str(tmp_path / "m.safetensors")
  safe_save({"a": Tensor([1.0, 2.0])}, fn, metadata={"epoch": 3})
  t, data_start, header = safe_load_metadata(fn)
  assert header["__metadata__"] == {"epoch": "3"} and header["a"]["dtype"] == "F32" and header["a"]["shape"] == [2]
  assert data_start % 8 == 0 and t.shape == (data_start + 8,)

def test_safe_load_corrupt(tmp_path):
  bad = tmp_path / "bad.safetensors"
  bad.write_bytes(b"\x01\x02")
  with pytest.raises(ValueError, match="not a safetensors file"): safe_load(str(bad))
  bad.write_bytes(struct.pack("<Q", 5) + b"{nope")
  with pytest.raises(ValueError, match="corrupt"): safe_load(str(bad))
  head = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
  bad.write_bytes(struct.pack("<Q", len(head)) + head + b"\x00" * 8)   # 8 of the 16 bytes
  with pytest.raises(ValueError, match="do not fit"): safe_load(str(bad))

# ---------------- PyTorch checkpoints ----------------

FORMATS = pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])

def save(obj, fn, zip_format: bool) -> str:
  torch.save(obj, fn, _use_new_zipfile_serialization=zip_format)
  assert zipfile.is_zipfile(fn) == zip_format
  return str(fn)

@FORMATS
def test_torch_load_state_dict(tmp_path, zip_format):
  model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.Flatten(), torch.nn.Linear(8, 3))
  ours = torch_load(save(model.state_dict(), tmp_path / "model.pt", zip_format))
  assert list(ours) == list(model.state_dict())
  for k, v in model.state_dict().items():
    assert ours[k].shape == tuple(v.shape), k
    np.testing.assert_array_equal(ours[k].numpy(), v.numpy(), err_msg=k)
  assert ours["1.num_batches_tracked"].dtype == dtypes.int64

@FORMATS
def test_torch_load_views_dtypes_and_nesting(tmp_path, zip_format):
  base = torch.randn(4, 5)
  obj = {"t": base.t(), "slice": base[1:3, 2:], "h": torch.randn(3).half(), "bf": torch.randn(3).bfloat16(),
         "p": torch.nn.Parameter(torch.randn(2)), "b": torch.tensor([True, False]), "n": 7, "scalar": torch.tensor(2.5),
         "i8": torch.tensor([-3, 4], dtype=torch.int8), "f64": torch.randn(2, 2, dtype=torch.float64),
         "nested": {"list": [torch.arange(3), torch.zeros(0)], "tuple": (base[0], "x")}}
  ours = torch_load(save(obj, tmp_path / "obj.pt", zip_format))
  for k in ("t", "slice", "h", "i8", "f64"):
    np.testing.assert_array_equal(ours[k].numpy(), obj[k].numpy(), err_msg=k)
    assert ours[k].shape == tuple(obj[k].shape), k
  np.testing.assert_array_equal(ours["bf"].numpy(), obj["bf"].float().numpy())
  np.testing.assert_array_equal(ours["p"].numpy(), obj["p"].detach().numpy())
  assert ours["b"].numpy().tolist() == [True, False] and ours["n"] == 7
  assert ours["scalar"].shape == () and ours["scalar"].item() == 2.5 and ours["i8"].dtype == dtypes.int8
  np.testing.assert_array_equal(ours["nested"]["list"][0].numpy(), [0, 1, 2])
  assert ours["nested"]["list"][1].shape == (0,)
  np.testing.assert_array_equal(ours["nested"]["tuple"][0].numpy(), base[0].numpy())
  assert ours["nested"]["tuple"][1] == "x"

@FORMATS
def test_torch_load_into_our_model(tmp_path, zip_format):
  theirs = torch.nn.Linear(4, 3)
  ours = nn.Linear(4, 3)
  load_state_dict(ours, torch_load(save(theirs.state_dict(), tmp_path / "lin.pt", zip_format)))
  x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)

class Evil:
  def __reduce__(self): return (print, ("this must never run",))

@FORMATS
def test_torch_load_refuses_arbitrary_globals(tmp_path, capsys, zip_format):
  fn = save({"w": torch.ones(2), "evil": Evil()}, tmp_path / "evil.pt", zip_format)
  with pytest.raises(pickle.UnpicklingError, match=r"refusing to load global (__builtin__|builtins)\.print"): torch_load(fn)
  assert "must never run" not in capsys.readouterr().out

@FORMATS
def test_torch_load_unsupported_dtype_is_named(tmp_path, zip_format):
  fn = save({"c": torch.ones(2, dtype=torch.complex64)}, tmp_path / "complex.pt", zip_format)
  with pytest.raises(pickle.UnpicklingError, match=r"torch\.ComplexFloatStorage are not supported"): torch_load(fn)

def test_torch_load_legacy_truncated(tmp_path):
  fn = save({"w": torch.arange(100, dtype=torch.float32)}, tmp_path / "w.pt", False)
  data = (tmp_path / "w.pt").read_bytes()
  (tmp_path / "cut.pt").write_bytes(data[:-8])
  with pytest.raises(ValueError, match="storage .* is truncated or corrupt"): torch_load(str(tmp_path / "cut.pt"))
  np.testing.assert_array_equal(torch_load(fn)["w"].numpy(), np.arange(100))

def test_torch_load_legacy_big_endian(tmp_path):
  """A legacy file as a big-endian machine writes it: sys_info says so, counts and elements are big-endian."""
  import io
  w = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7
  f = io.BytesIO(pathlib.Path(save({"w": w}, tmp_path / "le.pt", False)).read_bytes())
  class Skip(pickle.Unpickler):   # steps over the object pickle without rebuilding anything
    def persistent_load(self, pid): return None
    def find_class(self, module, name): return lambda *a, **k: None
  for _ in range(3): pickle.load(f)
  start = f.tell()
  Skip(f).load()
  pickle.load(f)
  body, count, data = f.getvalue()[start:f.tell()], f.read(8), f.read()
  assert int.from_bytes(count, "little") == 6
  info = {"protocol_version": 1001, "little_endian": False, "type_sizes": {"short": 2, "int": 4, "long": 4}}
  big = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950a86a20f9469cfc6c, 1001, info))
  big += body + (6).to_bytes(8, "big") + np.frombuffer(data, "<f4").astype(">f4").tobytes()
  (tmp_path / "be.pt").write_bytes(big)
  ours = torch_load(str(tmp_path / "be.pt"))["w"]
  np.testing.assert_array_equal(ours.numpy(), w.numpy())

def test_torch_load_not_a_checkpoint(tmp_path):
  fn = tmp_path / "plain.pkl"
  fn.write_bytes(pickle.dumps({"a": 1}, protocol=2))
  with pytest.raises(ValueError, match="is not a PyTorch checkpoint"): torch_load(str(fn))
  fn.write_bytes(b"garbage")
  with pytest.raises(ValueError, match="is not a PyTorch checkpoint"): torch_load(str(fn))
  with zipfile.ZipFile(tmp_path / "other.zip", "w") as z: z.writestr("x.txt", "hi")
  with pytest.raises(ValueError, match="no data.pkl"): torch_load(str(tmp_path / "other.zip"))

def test_torch_load_old_tar_format_is_named(tmp_path):
  import tarfile
  with tarfile.open(tmp_path / "old.pt", "w") as t: t.add(__file__, arcname="pickle")
  with pytest.raises(ValueError, match=r"tar-format checkpoint \(PyTorch < 0.4\)"): torch_load(str(tmp_path / "old.pt"))

def test_torch_load_does_not_import_torch(tmp_path):
  import subprocess, sys
  fn = save({"w": torch.arange(6).reshape(2, 3)}, tmp_path / "w.pt", False)
  code = ("import sys; from tinyplug.nn.state import torch_load; w = torch_load(sys.argv[1])['w']; "
          "print(w.numpy().tolist(), 'torch' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code, fn], capture_output=True, text=True, timeout=120)
  assert out.stdout.strip() == "[[0, 1, 2], [3, 4, 5]] False", out.stderr[-2000:]

def test_a_torch_0d_counter_loads_into_a_1_element_tensor():
  from tinyplug import nn
  from tinyplug.nn.state import load_state_dict
  bn = nn.BatchNorm2d(3)
  load_state_dict(bn, {"weight": Tensor.ones(3), "bias": Tensor.zeros(3), "running_mean": Tensor.zeros(3),
                       "running_var": Tensor.ones(3), "num_batches_tracked": Tensor(7)})
  assert bn.num_batches_tracked.tolist() == [7]
  with pytest.raises(ValueError, match="shape mismatch"):
    load_state_dict(bn, {"weight": Tensor.ones(4), "bias": Tensor.zeros(3), "running_mean": Tensor.zeros(3),
                         "running_var": Tensor.ones(3), "num_batches_tracked": Tensor(7)})
