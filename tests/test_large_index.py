"""Arrays of 2^31 elements or more: index math widens to 64 bits (it wrapped to negative int32 offsets: kernel
`E_-2147483632`, zeros, then a segfault), and a buffer no device can address is refused when it is created. Nothing
here allocates more than a few bytes (the kernels are only rendered, or run over a broadcast view) except one real
2^31+16-element run, skipped when the machine has less than 10 GB available."""
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.device import Device
from tinyplug.schedule import create_schedule
from tinyplug.uop.ops import Ops

N = 2**31 + 16

def _program(t: Tensor, device: str):
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device[device].renderer)

def _index_dtypes(spec) -> set:
  return {u.dtype for u in spec.uops if u.op in (Ops.RANGE, Ops.SPECIAL)} | \
         {u.src[1].dtype.scalar() for u in spec.uops if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL}

def test_big_elementwise_kernel_renders_64_bit_index_math(device):
  spec = _program(Tensor.empty(N, dtype=dtypes.uint8, device=device) + 1, device)
  assert spec.name.startswith(f"E_{N}") and "-" not in spec.name     # was E_-2147483632
  assert _index_dtypes(spec) == {dtypes.int64}
  if device == "CPU": assert "i64" in spec.src and "-2147483632" not in spec.src and "-536870908" not in spec.src
  if device == "CL": assert "long gidx0" in spec.src

def test_small_kernels_keep_32_bit_index_math(device):
  spec = _program(Tensor.empty(1000, dtype=dtypes.uint8, device=device) + 1, device)
  assert _index_dtypes(spec) == {dtypes.int32}

def test_a_matmul_whose_broadcast_product_passes_2_to_the_31_keeps_32_bit_index_math(device):
  """4096^3: `a * b` before the sum has 2^36 elements but is indexed axis by axis (no reshape flattens it), every
  buffer and axis fits int32: the kernel's ids, loops and offsets stay 32-bit (64-bit ones slowed the GPU matmul)."""
  a, b = Tensor.empty(4096, 4096, device=device), Tensor.empty(4096, 4096, device=device)
  assert _index_dtypes(_program(a @ b, device)) == {dtypes.int32}

def test_big_reduction_loop_bound(device):
  spec = _program(Tensor.empty(N, dtype=dtypes.uint8, device=device).sum(), device)
  bounds = [u.src[0].arg for u in spec.uops if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
  assert bounds and all(b > 0 for b in bounds) and _index_dtypes(spec) == {dtypes.int64}

def test_view_past_2_to_the_31_reads_the_right_elements(device):
  """A 64-byte buffer seen as 2^31+16 elements by broadcasting: the last four come from offsets past int32."""
  base = Tensor(np.arange(16, dtype=np.int32))
  t = base.reshape(1, 16).expand(2**27 + 1, 16).reshape(-1)
  assert t.shape == (N,)
  assert t[-4:].contiguous().tolist() == [12, 13, 14, 15]
  assert t[N - 20:N - 17].contiguous().tolist() == [12, 13, 14]

def test_reduction_over_2_to_the_31_broadcast_elements():
  with Device.use("CPU"):
    assert Tensor.ones(1, dtype=dtypes.int64).expand(N).sum().item() == N

def test_arange_and_gather_past_2_to_the_31():
  # the arange behind a gather counted in int32 and wrapped: index 2^31+2 of a broadcast tensor read 0
  assert Tensor.arange(N).dtype == dtypes.int64
  with Device.use("CPU"):
    assert Tensor.arange(N)[N - 3].item() == N - 3
    np.testing.assert_equal(Tensor([5]).expand(N)[Tensor([2**31 + 2])].numpy(), [5])

@pytest.mark.parametrize("make", [lambda d: Tensor.empty((1 << 62) + 4, device=d),
                                  lambda d: Tensor.empty(1 << 30, 1 << 30, dtype=dtypes.float64, device=d),
                                  lambda d: Tensor.zeros((1 << 62) + 4, device=d).contiguous().realize()])
def test_unallocatable_sizes_are_refused_at_creation(device, make):
  with pytest.raises(ValueError, match="cannot create a buffer of .* any device can address"): make(device)

def _available_memory() -> int:
  try:
    with open("/proc/meminfo") as f: return next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))
  except (OSError, StopIteration): return 0

@pytest.mark.skipif(_available_memory() < 10 << 30, reason="needs ~4.5 GB for two 2 GiB buffers and room to spare")
def test_a_real_array_past_2_to_the_31_elements():
  """The issue's reproduction on CPU: zeros from the first elements, then a segfault reading the last ones. One device
  only, to keep the run short (CL renders the same int64 math: the tests above read its source)."""
  a = Tensor.full((N,), 1, dtype=dtypes.uint8, device="CPU").contiguous().realize()
  assert a[:4].tolist() == [1, 1, 1, 1] and a[N - 4:].tolist() == [1, 1, 1, 1]
  b = (a + 2).realize()
  del a
  assert b[N - 3:].tolist() == [3, 3, 3] and b[2**31 - 1:2**31 + 1].tolist() == [3, 3]

def test_cuda_renders_64_bit_ids_and_loops():
  """The CUDA renderer (C-style base) has no device here: its source is read for a 2^31+ kernel."""
  cuda = pytest.importorskip("tinyplug_cuda.renderer")
  items, _ = create_schedule([(Tensor.empty(N, dtype=dtypes.uint8, device="PYTHON") + 1).uop])
  spec = get_program(items[-1].ast, cuda.CUDARenderer("sm_80"))
  assert "long long gidx0" in spec.src and "-2147483632" not in spec.src and "-" not in spec.name
  small, _ = create_schedule([(Tensor.empty(1000, dtype=dtypes.uint8, device="PYTHON") + 1).uop])
  assert "long long" not in get_program(small[-1].ast, cuda.CUDARenderer("sm_80")).src

def test_ptx_renders_64_bit_ids():
  """The PTX renderer (LLVM IR base, NVPTX ids): 64-bit ids for a 2^31+ kernel, and the IR it writes parses."""
  ptx = pytest.importorskip("tinyplug_cuda.ptx")
  import llvmlite.binding as llvm
  items, _ = create_schedule([(Tensor.empty(N, dtype=dtypes.uint8, device="PYTHON") + 1).uop])
  spec = get_program(items[-1].ast, ptx.PTXRenderer("sm_80"))
  assert "sext i32" in spec.src and "-2147483632" not in spec.src
  llvm.parse_assembly(spec.src).verify()
