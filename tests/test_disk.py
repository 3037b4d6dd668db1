"""The disk device: a file's bytes as a tensor (tinygrad's `disk:<path>`), written and read through copies."""
import pathlib
import numpy as np
import pytest
from tinyplug import Device, Tensor, dtypes

def test_write_a_file_and_read_slices_back(tmp_path):
  path = tmp_path / "weights.bin"
  values = np.arange(30, dtype=np.float32) * 1.5 - 7
  t = Tensor(values).to(f"disk:{path}")
  assert t.device == f"DISK:{path}"
  part = t[10:20]
  np.testing.assert_equal(part.numpy(), values[10:20])   # the write runs first, then the slice is read
  np.testing.assert_equal(np.fromfile(path, dtype=np.float32), values)
  moved = part.to(Device.DEFAULT)
  assert moved.device == Device.DEFAULT
  np.testing.assert_equal(moved.numpy(), values[10:20])
  np.testing.assert_equal((t.to(Device.DEFAULT) * 2).numpy(), values * 2)

def test_file_bytes_as_tensors(tmp_path):
  path = tmp_path / "raw.bin"
  data = np.array([1.0, -2.5, 3.25, 1e30, -0.0, 7.0], dtype=np.float32)
  path.write_bytes(b"HDR!" + data.tobytes())
  raw = Tensor(path)
  assert raw.dtype == dtypes.uint8 and raw.shape == (4 + data.nbytes,) and raw.device.startswith("DISK:")
  assert bytes(raw[:4].numpy()) == b"HDR!"
  floats = raw[4:].bitcast(dtypes.float32).reshape(2, 3).to(Device.DEFAULT)   # a safetensors-style read
  np.testing.assert_equal(floats.numpy(), data.reshape(2, 3))
  np.testing.assert_equal(Tensor(path, device=Device.DEFAULT)[4:8].numpy(), np.frombuffer(data[:1].tobytes(), np.uint8))

def test_empty_on_disk_and_assign(tmp_path):
  path = tmp_path / "out.bin"
  e = Tensor.empty(4, 3, dtype=dtypes.int32, device=f"disk:{path}")
  e.assign(Tensor(np.arange(12, dtype=np.int32).reshape(4, 3)))
  np.testing.assert_equal(np.fromfile(path, dtype=np.int32), np.arange(12))
  np.testing.assert_equal(e[1:3].numpy(), [[3, 4, 5], [6, 7, 8]])
  with pytest.raises(ValueError, match="dtype"): e.assign(Tensor.zeros(4, 3))

def test_the_disk_runs_no_kernels(tmp_path):
  t = Tensor.empty(4, device=f"disk:{tmp_path / 'k.bin'}")
  with pytest.raises(RuntimeError, match="runs no kernels.*to\\('CPU'\\)"): (t + 1).realize()
  with pytest.raises(ValueError, match="needs a file"): Tensor.empty(4, device="disk:")
  assert not any(d.startswith("DISK") for d in Device.available())

def test_the_user_guide_example_runs_as_written(tmp_path):
  import subprocess, sys
  text = (pathlib.Path(__file__).parent.parent / "docs" / "user_guide.md").read_text()
  code = next(block.split("```", 1)[0] for block in text.split("```python\n")[1:] if "raw.bin" in block)
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["[[0.", "1.", "2.]", "[3.", "4.", "5.]]"]
