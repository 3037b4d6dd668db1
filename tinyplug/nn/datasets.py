"""Small datasets for examples and tests.

`mnist()` returns (X_train, Y_train, X_test, Y_test) like tinygrad's: X uint8 of shape (N, 1, 28, 28), Y integer
labels. It downloads MNIST once (sha256-checked, cached under `tinyplug.helpers.cache_dir()`); where that is not
possible (no network) it falls back to the real handwritten digits that scikit-learn ships inside its wheel
(1,797 8x8 images, upscaled to 28x28), and prints which data it uses. Nothing else here touches the network.
"""
from __future__ import annotations
import gzip, hashlib, os, sys, urllib.request
from dataclasses import dataclass
import numpy as np
from tinyplug.helpers import cache_dir
from tinyplug.uop.dtype import dtypes

MNIST_MIRRORS = ("https://storage.googleapis.com/cvdf-datasets/mnist/",
                 "https://ossci-datasets.s3.amazonaws.com/mnist/")
MNIST_FILES = {  # file name -> sha256 of the gzipped file
  "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
  "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
  "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
  "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
DOWNLOAD_TIMEOUT_S = 5.0

@dataclass(frozen=True)
class DigitData:
  """Numpy arrays of a digits dataset and a line saying what they are."""
  X_train: np.ndarray   # uint8 (N, 1, 28, 28)
  Y_train: np.ndarray   # int32 (N,)
  X_test: np.ndarray
  Y_test: np.ndarray
  source: str

# ---------------- download with checksum and cache ----------------

def fetch(url: str, sha256: str, name: str | None = None, timeout: float = DOWNLOAD_TIMEOUT_S) -> str:
  """Path of the cached copy of `url`, downloading it first if needed; the content must have the given sha256."""
  folder = os.path.join(cache_dir(), "downloads")
  path = os.path.join(folder, name or url.rsplit("/", 1)[-1])
  if os.path.exists(path) and _sha256_file(path) == sha256: return path
  with urllib.request.urlopen(url, timeout=timeout) as r: data = r.read()
  got = hashlib.sha256(data).hexdigest()
  if got != sha256: raise ValueError(f"checksum mismatch for {url}: sha256 {got}, expected {sha256}")
  os.makedirs(folder, exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f: f.write(data)
  os.replace(tmp, path)
  return path

def _sha256_file(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""): h.update(chunk)
  return h.hexdigest()

def _read_idx(path: str, header: int) -> np.ndarray:
  with gzip.open(path, "rb") as f: return np.frombuffer(f.read(), dtype=np.uint8)[header:]

def _download_mnist(timeout: float) -> DigitData:
  paths: dict[str, str] = {}
  for fname, sha in MNIST_FILES.items():
    errors = []
    for mirror in MNIST_MIRRORS:
      try:
        paths[fname] = fetch(mirror + fname, sha, timeout=timeout)
        break
      except Exception as e: errors.append(f"{mirror}: {type(e).__name__}: {e}")
    else: raise OSError(f"could not fetch {fname} ({'; '.join(errors)})")
  X_train = _read_idx(paths["train-images-idx3-ubyte.gz"], 16).reshape(-1, 1, 28, 28)
  Y_train = _read_idx(paths["train-labels-idx1-ubyte.gz"], 8).astype(np.int32)
  X_test = _read_idx(paths["t10k-images-idx3-ubyte.gz"], 16).reshape(-1, 1, 28, 28)
  Y_test = _read_idx(paths["t10k-labels-idx1-ubyte.gz"], 8).astype(np.int32)
  return DigitData(X_train, Y_train, X_test, Y_test,
                   f"MNIST ({len(X_train)} train / {len(X_test)} test images, cached in {os.path.dirname(paths[fname])})")

# ---------------- the offline fallback: scikit-learn's digits ----------------

def _resize_matrix(n_out: int, n_in: int) -> np.ndarray:
  """Linear interpolation from n_in samples to n_out (pixel centres aligned), as a (n_out, n_in) matrix."""
  pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
  lo = np.floor(pos).astype(int)
  hi = np.minimum(lo + 1, n_in - 1)
  frac = pos - lo
  m = np.zeros((n_out, n_in))
  m[np.arange(n_out), lo] += 1 - frac
  m[np.arange(n_out), hi] += frac
  return m

def upscale_digits(images: np.ndarray) -> np.ndarray:
  """8x8 images with values 0..16 -> 28x28 uint8 0..255, the digit in the central 20x20 box like MNIST."""
  m = _resize_matrix(20, images.shape[-1])
  big = np.einsum("ij,njk,lk->nil", m, images.astype(np.float64), m) * (255.0 / 16.0)
  out = np.zeros((len(images), 28, 28), dtype=np.uint8)
  out[:, 4:24, 4:24] = np.clip(np.rint(big), 0, 255).astype(np.uint8)
  return out.reshape(-1, 1, 28, 28)

def sklearn_digits(test_fraction: float = 0.2, seed: int = 0) -> DigitData:
  """scikit-learn's bundled handwritten digits, upscaled to MNIST's layout, split by a fixed shuffle."""
  try: from sklearn.datasets import load_digits
  except ImportError:
    raise RuntimeError("MNIST could not be downloaded and the offline fallback needs scikit-learn: "
                       "pip install scikit-learn (or pip install -r requirements-dev.txt)") from None
  d = load_digits()
  X, Y = upscale_digits(d.images), d.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(X))
  n_test = int(round(len(X) * test_fraction))
  test, train = order[:n_test], order[n_test:]
  return DigitData(X[train], Y[train], X[test], Y[test],
                   f"scikit-learn digits ({len(train)} train / {len(test)} test images, 8x8 upscaled to 28x28; "
                   "offline fallback for MNIST)")

def mnist_numpy(offline: bool = False, timeout: float = DOWNLOAD_TIMEOUT_S, verbose: bool = True) -> DigitData:
  """MNIST as numpy arrays (downloaded or cached), else scikit-learn's digits; prints which one it uses."""
  data, why = None, "offline=True"
  if not offline:
    try: data = _download_mnist(timeout)
    except Exception as e: why = str(e)
  if data is None:
    data = sklearn_digits()
    if verbose: print(f"mnist: MNIST unavailable ({_shorten(why)}); using {data.source}", file=sys.stderr)
  elif verbose: print(f"mnist: using {data.source}", file=sys.stderr)
  return data

def _shorten(s: str, n: int = 160) -> str: return s if len(s) <= n else s[:n - 3] + "..."

def mnist(device: str | None = None, fashion: bool = False, offline: bool = False):
  """(X_train, Y_train, X_test, Y_test) Tensors: X uint8 (N, 1, 28, 28), Y int32 labels 0-9."""
  from tinyplug.tensor import Tensor
  if fashion: raise NotImplementedError("fashion-MNIST is not available yet (no pinned checksums); use mnist()")
  d = mnist_numpy(offline=offline)
  return (Tensor(d.X_train, device=device, dtype=dtypes.uint8), Tensor(d.Y_train, device=device, dtype=dtypes.int32),
          Tensor(d.X_test, device=device, dtype=dtypes.uint8), Tensor(d.Y_test, device=device, dtype=dtypes.int32))

__all__ = ["mnist", "mnist_numpy", "sklearn_digits", "upscale_digits", "fetch", "DigitData"]
