"""nn.datasets: sha256-checked downloads from a local HTTP server, the cache, offline use and the fallback.

No test here touches the network: mirrors point at a server on 127.0.0.1 that the test starts."""
from __future__ import annotations
import functools, gzip, hashlib, http.server, os, threading
import numpy as np
import pytest
from tinyplug import dtypes
from tinyplug.nn import datasets

def _idx(data: np.ndarray, magic: int) -> bytes:
  header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in data.shape)
  return gzip.compress(header + data.astype(np.uint8).tobytes())

def fake_files(seed: int, train_labels: list[int], test_labels: list[int]) -> dict[str, bytes]:
  rng = np.random.default_rng(seed)
  return {"train-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (len(train_labels), 28, 28)), 2051),
          "train-labels-idx1-ubyte.gz": _idx(np.array(train_labels), 2049),
          "t10k-images-idx3-ubyte.gz": _idx(rng.integers(0, 256, (len(test_labels), 28, 28)), 2051),
          "t10k-labels-idx1-ubyte.gz": _idx(np.array(test_labels), 2049)}

def sha(files: dict[str, bytes]) -> dict[str, str]: return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}

class _Handler(http.server.BaseHTTPRequestHandler):
  def do_GET(self):
    self.server.requests.append(self.path)
    body = self.server.files.get(self.path)
    self.send_response(200 if body is not None else 404)
    self.send_header("Content-Length", str(len(body or b"")))
    self.end_headers()
    self.wfile.write(body or b"")
  def log_message(self, *args): pass

@pytest.fixture
def server():
  """A local HTTP server; `server.files` maps a URL path to the bytes it serves, `server.requests` logs GETs."""
  srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
  srv.files, srv.requests = {}, []
  srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
  thread = threading.Thread(target=srv.serve_forever, daemon=True)
  thread.start()
  yield srv
  srv.shutdown()
  srv.server_close()

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setattr(datasets, "cache_dir", lambda: str(tmp_path))
  monkeypatch.delenv("DATASETS_OFFLINE", raising=False)
  return tmp_path

@pytest.fixture
def mnist_files(server, cache, monkeypatch):
  files = fake_files(0, [0, 1, 2, 3, 4, 5], [7, 1])
  server.files.update({f"/mnist/{k}": v for k, v in files.items()})
  monkeypatch.setattr(datasets, "MNIST_MIRRORS", (f"{server.url}/missing/", f"{server.url}/mnist/"))
  monkeypatch.setattr(datasets, "MNIST_FILES", sha(files))
  return files

@pytest.fixture
def fashion_files(server, cache, monkeypatch):
  files = fake_files(1, [9, 8, 7], [6, 5, 4, 3])
  server.files.update({f"/fashion/{k}": v for k, v in files.items()})
  monkeypatch.setattr(datasets, "FASHION_MIRRORS", (f"{server.url}/fashion/",))
  monkeypatch.setattr(datasets, "FASHION_FILES", sha(files))
  return files

def test_download_checksum_and_cache(mnist_files, server, cache, capsys):
  X_train, Y_train, X_test, Y_test = datasets.mnist()
  assert X_train.shape == (6, 1, 28, 28) and X_train.dtype == dtypes.uint8
  assert Y_train.numpy().tolist() == [0, 1, 2, 3, 4, 5] and Y_test.numpy().tolist() == [7, 1]
  assert Y_train.dtype == dtypes.int32 and X_test.shape == (2, 1, 28, 28)
  want = np.frombuffer(gzip.decompress(mnist_files["t10k-images-idx3-ubyte.gz"])[16:], np.uint8).reshape(2, 1, 28, 28)
  np.testing.assert_array_equal(X_test.numpy(), want)
  assert "using MNIST" in capsys.readouterr().err
  assert len([r for r in server.requests if r.startswith("/mnist/")]) == 4   # the first mirror 404s, the second serves
  assert sorted(os.listdir(cache / "downloads")) == sorted(datasets.MNIST_FILES)
  n = len(server.requests)
  datasets.mnist()              # the second time comes from the cache
  assert len(server.requests) == n

def test_fashion_mnist_downloads_into_its_own_folder(mnist_files, fashion_files, server, cache, capsys):
  X_train, Y_train, X_test, Y_test = datasets.fashion_mnist()
  assert "using Fashion-MNIST" in capsys.readouterr().err
  assert X_train.shape == (3, 1, 28, 28) and X_test.shape == (4, 1, 28, 28) and X_train.dtype == dtypes.uint8
  assert Y_train.numpy().tolist() == [9, 8, 7] and Y_test.numpy().tolist() == [6, 5, 4, 3]
  assert sorted(os.listdir(cache / "downloads" / "fashion-mnist")) == sorted(datasets.FASHION_FILES)
  # the same file names as MNIST do not collide: MNIST is still fetched and read separately
  assert datasets.mnist()[1].numpy().tolist() == [0, 1, 2, 3, 4, 5]
  assert datasets.mnist(fashion=True)[1].numpy().tolist() == [9, 8, 7]   # tinygrad's spelling

def test_prefilled_cache_is_used_offline(fashion_files, server, cache, capsys):
  folder = cache / "downloads" / "fashion-mnist"
  folder.mkdir(parents=True)
  for name, data in fashion_files.items(): (folder / name).write_bytes(data)
  d = datasets.fashion_mnist_numpy(offline=True, fallback=False)
  assert d.Y_test.tolist() == [6, 5, 4, 3] and server.requests == []
  assert "cached in" in d.source and str(folder) in d.source

def test_offline_env_never_downloads(fashion_files, server, cache, monkeypatch):
  monkeypatch.setenv("DATASETS_OFFLINE", "1")
  with pytest.raises(OSError, match=r"Fashion-MNIST is unavailable: .*is not cached \(offline.*fashion-mnist"):
    datasets.fashion_mnist_numpy(fallback=False)
  assert server.requests == [] and not (cache / "downloads").exists()
  d = datasets.fashion_mnist_numpy(offline=False)   # an explicit argument wins over the variable
  assert d.Y_train.tolist() == [9, 8, 7] and len(server.requests) == 4

def test_bad_checksum_is_not_cached(mnist_files, cache, monkeypatch, capsys):
  monkeypatch.setitem(datasets.MNIST_FILES, "t10k-labels-idx1-ubyte.gz", "0" * 64)
  with pytest.raises(OSError, match="checksum mismatch"): datasets.mnist(fallback=False)
  assert "t10k-labels-idx1-ubyte.gz" not in os.listdir(cache / "downloads")
  pytest.importorskip("sklearn")
  X_train, *_ = datasets.mnist()
  assert X_train.shape[0] > 1000                          # fell back to the real digits
  assert "checksum mismatch" in capsys.readouterr().err

def test_cached_file_with_wrong_checksum_offline(mnist_files, cache):
  (cache / "downloads").mkdir()
  (cache / "downloads" / "train-images-idx3-ubyte.gz").write_bytes(b"stale")
  with pytest.raises(OSError, match="has a different sha256"): datasets.mnist_numpy(offline=True, fallback=False)

def test_corrupt_idx_content_is_a_clear_error(mnist_files, server, monkeypatch):
  bad = _idx(np.zeros((2, 28, 28)), 1234)    # a valid gzip with the right checksum but not an image IDX file
  server.files["/mnist/t10k-images-idx3-ubyte.gz"] = bad
  monkeypatch.setitem(datasets.MNIST_FILES, "t10k-images-idx3-ubyte.gz", hashlib.sha256(bad).hexdigest())
  with pytest.raises(OSError, match="not an IDX file of magic 2051"): datasets.mnist_numpy(fallback=False)

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

def test_fashion_fallback_says_it_is_not_fashion(cache, capsys):
  pytest.importorskip("sklearn")
  d = datasets.fashion_mnist_numpy(offline=True)
  assert "fashion-mnist: Fashion-MNIST unavailable" in capsys.readouterr().err and d.source.startswith("scikit-learn")

def test_fallback_when_network_fails_fast(cache, monkeypatch, capsys):
  pytest.importorskip("sklearn")
  def urlopen(url, timeout): raise OSError("Name or service not known")
  monkeypatch.setattr(datasets.urllib.request, "urlopen", urlopen)
  d = datasets.mnist_numpy()
  assert "Name or service not known" in capsys.readouterr().err and d.source.startswith("scikit-learn")

def test_pinned_checksums_are_sha256():
  for files in (datasets.MNIST_FILES, datasets.FASHION_FILES):
    assert sorted(files) == sorted(fake_files(0, [0], [0]))
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in files.values())
  assert not set(datasets.MNIST_FILES.values()) & set(datasets.FASHION_FILES.values())

def test_upscale_keeps_the_digit():
  img = np.zeros((1, 8, 8)); img[0, :, 3:5] = 16   # a vertical bar
  big = datasets.upscale_digits(img)[0, 0]
  assert big.shape == (28, 28) and big[14, 14] == 255 and big[14, 6] == 0 and big[2, 14] == 0
