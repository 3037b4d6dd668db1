"""nn.datasets: the sha256-checked download cache (with a fake network) and the offline scikit-learn fallback."""
from __future__ import annotations
import gzip, hashlib, io, os
import numpy as np
import pytest
from tinyplug import dtypes
from tinyplug.nn import datasets

def _idx(data: np.ndarray, magic: int) -> bytes:
  header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in data.shape)
  return gzip.compress(header + data.astype(np.uint8).tobytes())

class FakeResponse(io.BytesIO):
  def __enter__(self): return self
  def __exit__(self, *exc): self.close()

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setattr(datasets, "cache_dir", lambda: str(tmp_path))
  return tmp_path

@pytest.fixture
def fake_mnist(monkeypatch, cache):
  """A tiny MNIST served by a fake urlopen; the pinned checksums are replaced by the fakes' own."""
  rng = np.random.default_rng(0)
  files = {"train-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (6, 28, 28)), 2051),
           "train-labels-idx1-ubyte.gz": _idx(np.arange(6) % 10, 2049),
           "t10k-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (2, 28, 28)), 2051),
           "t10k-labels-idx1-ubyte.gz": _idx(np.array([7, 1]), 2049)}
  monkeypatch.setattr(datasets, "MNIST_FILES", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()})
  requests = []
  def urlopen(url, timeout):
    requests.append(url)
    assert timeout <= 10
    return FakeResponse(files[url.rsplit("/", 1)[-1]])
  monkeypatch.setattr(datasets.urllib.request, "urlopen", urlopen)
  return requests

def test_download_checksum_and_cache(fake_mnist, cache, capsys):
  X_train, Y_train, X_test, Y_test = datasets.mnist()
  assert X_train.shape == (6, 1, 28, 28) and X_train.dtype == dtypes.uint8
  assert Y_train.numpy().tolist() == [0, 1, 2, 3, 4, 5] and Y_test.numpy().tolist() == [7, 1]
  assert Y_train.dtype == dtypes.int32 and X_test.shape == (2, 1, 28, 28)
  assert "using MNIST" in capsys.readouterr().err
  assert len(fake_mnist) == 4
  assert sorted(os.listdir(cache / "downloads")) == sorted(datasets.MNIST_FILES)
  datasets.mnist()              # the second time comes from the cache
  assert len(fake_mnist) == 4

def test_bad_checksum_is_not_cached(fake_mnist, cache, monkeypatch, capsys):
  monkeypatch.setitem(datasets.MNIST_FILES, "t10k-labels-idx1-ubyte.gz", "0" * 64)
  X_train, *_ = datasets.mnist()
  assert X_train.shape[0] > 1000                          # fell back to the real digits
  assert "checksum mismatch" in capsys.readouterr().err
  assert "t10k-labels-idx1-ubyte.gz" not in os.listdir(cache / "downloads")

def test_offline_fallback_is_real_digits(cache, capsys):
  pytest.importorskip("sklearn")
  X_train, Y_train, X_test, Y_test = datasets.mnist(offline=True)
  err = capsys.readouterr().err
  assert "scikit-learn digits" in err and "offline" in err
  assert X_train.shape == (1438, 1, 28, 28) and X_test.shape == (359, 1, 28, 28)
  assert X_train.dtype == dtypes.uint8 and Y_train.dtype == dtypes.int32
  x = X_train.numpy()
  assert x.max() == 255 and (x[:, :, :4] == 0).all() and (x[:, :, :, 24:] == 0).all()   # a 20x20 digit, centred
  assert sorted(set(Y_train.numpy().tolist())) == list(range(10))
  assert os.listdir(cache) == []   # offline: nothing fetched or written

def test_fallback_when_network_fails_fast(cache, monkeypatch, capsys):
  pytest.importorskip("sklearn")
  def urlopen(url, timeout): raise OSError("Name or service not known")
  monkeypatch.setattr(datasets.urllib.request, "urlopen", urlopen)
  d = datasets.mnist_numpy()
  assert "Name or service not known" in capsys.readouterr().err and d.source.startswith("scikit-learn")

def test_upscale_keeps_the_digit():
  img = np.zeros((1, 8, 8)); img[0, :, 3:5] = 16   # a vertical bar
  big = datasets.upscale_digits(img)[0, 0]
  assert big.shape == (28, 28) and big[14, 14] == 255 and big[14, 6] == 0 and big[2, 14] == 0
