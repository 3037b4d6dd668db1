"""Random tensors from a counter-based generator: Threefry-2x32 (20 rounds, Salmon et al. 2011, "Random123").

The bits are computed in the graph with uint32 ALU ops from an arange of counters and the seed, so the same seed
gives the same numbers on every device. Each call takes fresh counters; `manual_seed` resets them. The first counter
of a call and the seed are read from a 4-word buffer, not baked into the kernel, so one compiled kernel serves every
call and every seed (a new process, whose default seed is the time, finds its kernels in the disk cache), and TinyJit
can give each replay fresh counters (it logs the draws of the calls it captures in `RNGState.draws`).
"""
from __future__ import annotations
import math, time
from tinyplug.uop.dtype import DType, dtypes, to_dtype
from tinyplug.tensor_ops.create import argfix, arange_uop

MASK32 = 0xFFFFFFFF
THREEFRY_PARITY = 0x1BD11BDA
THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)

class RNGState:
  """The seed and how many counters have been used since it was set."""
  seed: int = int(time.time())
  counter: int = 0
  draws: list | None = None   # while a list: (the first-counter UOp, its counter) of each draw, for TinyJit

def threefry2x32(x0, x1, key: tuple):
  """Threefry-2x32-20 of the counter pair (x0, x1) under `key` (two words); works on uint32 Tensors or Python ints,
  for the counters and the key alike."""
  def add(a, b): return (a + b) & MASK32 if isinstance(a, int) and isinstance(b, int) else a + b
  ks = (add(key[0], 0), add(key[1], 0), add(key[0] ^ key[1] ^ THREEFRY_PARITY, 0))
  def rotl(v, r): return ((v << r) & MASK32) | (v >> (32 - r)) if isinstance(v, int) else (v << r) | (v >> (32 - r))
  x0, x1 = add(x0, ks[0]), add(x1, ks[1])
  for r in range(20):
    x0 = add(x0, x1)
    x1 = rotl(x1, THREEFRY_ROTATIONS[r % 8]) ^ x0
    if r % 4 == 3:   # key injection after every 4 rounds
      n = r // 4 + 1
      x0, x1 = add(x0, ks[n % 3]), add(x1, add(ks[(n + 1) % 3], n))
  return x0, x1

def rng_words(counter: int) -> list[int]:
  """The 4-word buffer a draw reads: its first counter and the seed, low words first."""
  seed = RNGState.seed
  return [counter & MASK32, (counter >> 32) & MASK32, seed & MASK32, (seed >> 32) & MASK32]

def _uniform_bits(dtype: DType) -> int:
  """How many random bits a value in [0, 1) of `dtype` can hold exactly (so it never rounds up to 1)."""
  return min(24, dtypes.finfo(dtype)[1] + 1) if dtypes.is_float(dtype) else 24

def _finish(out, contiguous: bool, requires_grad):
  """A random tensor's last step: materialized once (by default, see `rand`), with its requires_grad."""
  if contiguous: out = out.contiguous()
  out.requires_grad = requires_grad
  return out

class RandomMixin:
  __slots__ = ()
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make the following random tensors reproducible."""
    RNGState.seed, RNGState.counter = int(seed), 0

  @classmethod
  def _random_bits(cls, n: int, device: str):
    """n uint32 random words (a Tensor of shape (n,))."""
    half = (n + 1) // 2
    start = RNGState.counter
    RNGState.counter += half
    counters = cls.from_uop(arange_uop(half, device)).cast(dtypes.uint32)
    first = cls(rng_words(start), device=device, dtype=dtypes.uint32)   # read at run time: one kernel source whatever manual_seed() set
    if RNGState.draws is not None: RNGState.draws.append((first.uop, start))
    lo = counters + first[0:1].expand(half)
    hi = first[1:2].expand(half)
    y0, y1 = threefry2x32(lo, hi, (first[2:3].expand(half), first[3:4].expand(half)))
    return y0.cat(y1)[:n]

  @classmethod
  def rand(cls, *shape, contiguous: bool = True, **kwargs):
    """Uniform in [0, 1). Materialized in a buffer of its own unless `contiguous=False`: a consumer such as a
    matmul reading a weight would otherwise run the 20 hash rounds again for every use of every element."""
    shape = argfix(*shape)
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    out = cls._uniform(shape, device, dtype)
    if contiguous and out.numel() != 0: out = out.contiguous()
    out.requires_grad = rg
    return out

  @classmethod
  def _uniform(cls, shape: tuple, device: str, dtype):
    """Lazy uniform draws in [0, 1): what rand, randn, randint and uniform build on (so that they do not depend on
    rand's signature, which a user may wrap or replace)."""
    if not dtypes.is_float(dtype): raise ValueError(f"rand needs a float dtype, not {dtype}")
    n = math.prod(shape)
    if n == 0: return cls.full(shape, 0.0, dtype=dtype, device=device)
    nbits = _uniform_bits(dtype)
    bits = cls._random_bits(n, device) >> (32 - nbits)
    return (bits.cast(dtypes.float32) * (2.0 ** -nbits)).cast(dtype).reshape(shape)

  @classmethod
  def randn(cls, *shape, contiguous: bool = True, **kwargs):
    """Standard normal (Box-Muller on two uniforms)."""
    shape = argfix(*shape)
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    u = cls._uniform((2, *shape), device, dtypes.float32)
    return _finish(((u[0] * (2 * math.pi)).cos() * ((1 - u[1]).log() * -2).sqrt()).cast(dtype), contiguous, rg)

  @classmethod
  def randperm(cls, n: int, **kwargs):
    """A random permutation of 0..n-1 (int32 unless a dtype is given): the order that sorts n uniform draws."""
    if not isinstance(n, int) or n < 0: raise ValueError(f"randperm needs a non-negative int, got {n!r}")
    device, dtype, rg = cls._creation_args(kwargs, dtypes.int32)
    if n == 0: return cls.full((0,), 0, dtype=dtype, device=device)
    return cls.rand(n, device=device).argsort().cast(dtype)

  @classmethod
  def randint(cls, *shape, low: int = 0, high: int = 10, contiguous: bool = True, **kwargs):
    if high <= low: raise ValueError(f"randint needs low < high, got low={low} high={high}")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
    if not dtypes.is_int(dtype): raise ValueError(f"randint needs an integer dtype, not {dtype}")
    out = (cls.rand(*shape, contiguous=False, **kwargs) * (high - low)).floor().cast(dtype) + low
    return out.contiguous() if contiguous else out

  @classmethod
  def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, contiguous: bool = True, **kwargs):
    dtype = kwargs.pop("dtype", None)
    rg = kwargs.pop("requires_grad", None)
    out = ((high - low) * cls.rand(*shape, contiguous=False, **kwargs) + low).cast(dtype or dtypes.default_float)
    return _finish(out, contiguous, rg)

  @classmethod
  def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, contiguous: bool = True, **kwargs):
    rg = kwargs.pop("requires_grad", None)
    return _finish(std * cls.randn(*shape, contiguous=False, **kwargs) + mean, contiguous, rg)

  @classmethod
  def scaled_uniform(cls, *shape, contiguous: bool = True, **kwargs):
    rg = kwargs.pop("requires_grad", None)
    out = cls.uniform(*shape, low=-1.0, high=1.0, contiguous=False, **kwargs) * (math.prod(argfix(*shape)) ** -0.5)
    return _finish(out, contiguous, rg)
  @classmethod
  def glorot_uniform(cls, *shape, contiguous: bool = True, **kwargs):
    s = argfix(*shape)
    rg = kwargs.pop("requires_grad", None)
    out = cls.uniform(*s, low=-1.0, high=1.0, contiguous=False, **kwargs) * math.sqrt(6 / (s[0] + math.prod(s[1:])))
    return _finish(out, contiguous, rg)
  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs):
    s = argfix(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(s[1:]))
    return cls.uniform(*s, low=-bound, high=bound, **kwargs)
  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs):
    s = argfix(*shape)
    return cls.normal(*s, mean=0.0, std=math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(s[1:])), **kwargs)

  def _like_kwargs(self, kwargs: dict) -> dict:
    return {"device": self.device, "dtype": self.dtype if dtypes.is_float(self.dtype) else None, **kwargs}
  def rand_like(self, **kwargs): return type(self).rand(*self.shape, **self._like_kwargs(kwargs))
  def randn_like(self, **kwargs): return type(self).randn(*self.shape, **self._like_kwargs(kwargs))
