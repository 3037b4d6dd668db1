"""Small datasets for examples and tests.

`mnist()` and `fashion_mnist()` return (X_train, Y_train, X_test, Y_test) like tinygrad's: X uint8 of shape
(N, 1, 28, 28), Y integer labels 0-9. Each published file is downloaded once, checked against its pinned sha256 and
cached under `<cache dir>/downloads` (`tinyplug.helpers.cache_dir()`); a valid cached copy is used without the
network. Where a file can be neither read from the cache nor downloaded (offline, `offline=True` or
`DATASETS_OFFLINE=1`), both fall back to the real handwritten digits that scikit-learn ships inside its wheel
(1,797 8x8 images, upscaled to 28x28) and print which data they use; `fallback=False` raises instead.
Nothing here touches the network at import, and nothing else here touches it at all.
"""
from __future__ import annotations
import gzip, hashlib, os, sys, urllib.request
from dataclasses import dataclass
import numpy as np
from tinyplug.helpers import cache_dir, env_flag
from tinyplug.uop.dtype import dtypes

MNIST_MIRRORS = ("https://storage.googleapis.com/cvdf-datasets/mnist/",
                 "https://ossci-datasets.s3.amazonaws.com/mnist/")
MNIST_FILES = {  # file name -> sha256 of the gzipped file as published
  "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
  "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
  "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
  "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
FASHION_MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                   "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/")
FASHION_FILES = {  # the same file names as MNIST, so they are cached in their own folder
  "train-images-idx3-ubyte.gz": "08dc20ab1689590a0bcd66e874647b6ee8464e2d501b5a3f1f78831db19a3fdc",
  "train-labels-idx1-ubyte.gz": "b0197879cbda89f3dc7b894f9fd52b858e68ea4182b6947c9d8c2b67e5f18dcc",
  "t10k-images-idx3-ubyte.gz": "78dcbbfb5a27efaf1b6c1d616caca68560be8766c5bffcb2791df9273a534229",
  "t10k-labels-idx1-ubyte.gz": "42bd18137a62d5998cdeae52bf3a0676ac6b706f5cf8439b47bb5b151ae3dccf",
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

class NotCachedError(OSError):
  """A file is not in the download cache and the network may not be used."""

def fetch(url: str, sha256: str, name: str | None = None, timeout: float = DOWNLOAD_TIMEOUT_S,
          offline: bool = False) -> str:
  """Path of the cached copy of `url` (`name` relative to the download cache), downloading it first if needed;
  the content must have the given sha256. `offline`: never download (NotCachedError when it is not cached)."""
  path = os.path.join(cache_dir(), "downloads", name or url.rsplit("/", 1)[-1])
  if os.path.exists(path) and _sha256_file(path) == sha256: return path
  if offline:
    state = "has a different sha256" if os.path.exists(path) else "is not cached"
    raise NotCachedError(f"{path} {state} (offline: not downloading {url})")
  with urllib.request.urlopen(url, timeout=timeout) as r: data = r.read()
  got = hashlib.sha256(data).hexdigest()
  if got != sha256: raise ValueError(f"checksum mismatch for {url}: sha256 {got}, expected {sha256}")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f: f.write(data)
  os.replace(tmp, path)
  return path

def _sha256_file(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""): h.update(chunk)
  return h.hexdigest()

def _read_idx(path: str, magic: int, dims: int) -> np.ndarray:
  """The uint8 contents of an IDX file: a big-endian magic number, `dims` sizes, then the data."""
  with gzip.open(path, "rb") as f: raw = f.read()
  header = 4 + 4 * dims
  got = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
  if got != magic: raise ValueError(f"{path}: not an IDX file of magic {magic} (got {got})")
  shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
  if len(raw) != header + int(np.prod(shape)): raise ValueError(f"{path}: IDX header says {shape}, data does not fit")
  return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)

def _fetch_any(fname: str, sha: str, mirrors: tuple[str, ...], subdir: str, timeout: float, offline: bool) -> str:
  """The cached path of `fname`, trying each mirror in turn; the error lists why each failed."""
  errors = []
  for mirror in mirrors:
    try: return fetch(mirror + fname, sha, name=os.path.join(subdir, fname), timeout=timeout, offline=offline)
    except NotCachedError as e: raise OSError(str(e)) from None
    except Exception as e: errors.append(f"{mirror}: {type(e).__name__}: {e}")
  raise OSError(f"could not fetch {fname} ({'; '.join(errors)})")

def _download_idx(label: str, mirrors: tuple[str, ...], files: dict[str, str], subdir: str, timeout: float,
                  offline: bool) -> DigitData:
  paths = {fname: _fetch_any(fname, sha, mirrors, subdir, timeout, offline) for fname, sha in files.items()}
  X_train = _read_idx(paths["train-images-idx3-ubyte.gz"], 2051, 3).reshape(-1, 1, 28, 28)
  Y_train = _read_idx(paths["train-labels-idx1-ubyte.gz"], 2049, 1).astype(np.int32)
  X_test = _read_idx(paths["t10k-images-idx3-ubyte.gz"], 2051, 3).reshape(-1, 1, 28, 28)
  Y_test = _read_idx(paths["t10k-labels-idx1-ubyte.gz"], 2049, 1).astype(np.int32)
  if len(X_train) != len(Y_train) or len(X_test) != len(Y_test):
    raise ValueError(f"{label}: {len(X_train)}/{len(X_test)} images but {len(Y_train)}/{len(Y_test)} labels")
  where = os.path.dirname(paths["train-images-idx3-ubyte.gz"])
  return DigitData(X_train, Y_train, X_test, Y_test,
                   f"{label} ({len(X_train)} train / {len(X_test)} test images, cached in {where})")

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
    raise RuntimeError("the dataset is neither cached nor downloadable, and the offline fallback needs scikit-learn: "
                       "pip install scikit-learn (or pip install -r requirements-dev.txt)") from None
  d = load_digits()
  X, Y = upscale_digits(d.images), d.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(X))
  n_test = int(round(len(X) * test_fraction))
  test, train = order[:n_test], order[n_test:]
  return DigitData(X[train], Y[train], X[test], Y[test],
                   f"scikit-learn digits ({len(train)} train / {len(test)} test images, 8x8 upscaled to 28x28; "
                   "offline fallback)")

def offline_default() -> bool:
  """DATASETS_OFFLINE=1: never download; use cached files or the fallback."""
  return env_flag("DATASETS_OFFLINE")

def _load_numpy(label: str, mirrors: tuple[str, ...], files: dict[str, str], subdir: str, offline: bool | None,
                timeout: float, verbose: bool, fallback: bool) -> DigitData:
  offline = offline_default() if offline is None else offline
  try: data = _download_idx(label, mirrors, files, subdir, timeout, offline)
  except Exception as e:
    if not fallback:
      raise OSError(f"{label} is unavailable: {e}. Put the files into {os.path.join(cache_dir(), 'downloads', subdir)}"
                    " or allow downloads (unset DATASETS_OFFLINE, offline=False)") from e
    data = sklearn_digits()
    if verbose:
      print(f"{label.lower()}: {label} unavailable ({_shorten(str(e))}); using {data.source} instead", file=sys.stderr)
    return data
  if verbose: print(f"{label.lower()}: using {data.source}", file=sys.stderr)
  return data

def mnist_numpy(offline: bool | None = None, timeout: float = DOWNLOAD_TIMEOUT_S, verbose: bool = True,
                fallback: bool = True) -> DigitData:
  """MNIST as numpy arrays (cached or downloaded), else scikit-learn's digits; prints which one it uses.

  offline: None reads DATASETS_OFFLINE; True uses only the cache. fallback=False raises OSError instead."""
  return _load_numpy("MNIST", MNIST_MIRRORS, MNIST_FILES, "", offline, timeout, verbose, fallback)

def fashion_mnist_numpy(offline: bool | None = None, timeout: float = DOWNLOAD_TIMEOUT_S, verbose: bool = True,
                        fallback: bool = True) -> DigitData:
  """Fashion-MNIST (Zalando's clothing images, 10 classes) as numpy arrays, like `mnist_numpy`.

  Its offline fallback is the same scikit-learn digits (not clothing): the printed line says so."""
  return _load_numpy("Fashion-MNIST", FASHION_MIRRORS, FASHION_FILES, "fashion-mnist", offline, timeout, verbose,
                     fallback)

def _shorten(s: str, n: int = 600) -> str: return s if len(s) <= n else s[:n - 3] + "..."

def _tensors(d: DigitData, device: str | None) -> tuple:
  from tinyplug.tensor import Tensor
  return (Tensor(d.X_train, device=device, dtype=dtypes.uint8), Tensor(d.Y_train, device=device, dtype=dtypes.int32),
          Tensor(d.X_test, device=device, dtype=dtypes.uint8), Tensor(d.Y_test, device=device, dtype=dtypes.int32))

def mnist(device: str | None = None, fashion: bool = False, offline: bool | None = None, fallback: bool = True):
  """(X_train, Y_train, X_test, Y_test) Tensors: X uint8 (N, 1, 28, 28), Y int32 labels 0-9.
  `fashion=True` is `fashion_mnist()` (tinygrad's spelling)."""
  if fashion: return fashion_mnist(device, offline=offline, fallback=fallback)
  return _tensors(mnist_numpy(offline=offline, fallback=fallback), device)

def fashion_mnist(device: str | None = None, offline: bool | None = None, fallback: bool = True):
  """Fashion-MNIST as (X_train, Y_train, X_test, Y_test) Tensors, in the layout of `mnist()`."""
  return _tensors(fashion_mnist_numpy(offline=offline, fallback=fallback), device)

__all__ = ["mnist", "mnist_numpy", "fashion_mnist", "fashion_mnist_numpy", "sklearn_digits", "upscale_digits", "fetch",
           "DigitData", "NotCachedError"]
