"""Row kernels (softmax, a cross-entropy's gradient: a row's reductions, then every output of the row) on CPUs: a row
no vector register divides whose outputs each take costly math (exp) stays a plain loop, which LLVM runs a register
wide with a short tail; rows a register divides, and rows of cheap math (layernorm), keep their upcast. Decisions for
fake machines fed through the CPU renderer; values against torch, and the plain loop's against the upcast one's."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.engine.realize import run_schedule
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(17)

def row_kernel(build, *shape) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  items, _ = create_schedule([build(Tensor.empty(*shape, device="CPU")).uop])
  return Kernel(items[-1].ast, Device["CPU"].renderer)

def softmax(t): return t.softmax(-1)
def layernorm(t): return t.layernorm()

@pytest.mark.parametrize("cols", [1000, 100, 24, 10])
def test_costly_rows_no_register_divides_stay_plain(vector_machine, cols):
  vector_machine(64, 32)   # AVX-512: 16 floats
  assert heuristic_opts(row_kernel(softmax, 64, cols)) == []

def test_rows_a_register_divides_and_cheap_rows_keep_their_upcast(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(row_kernel(softmax, 64, 1024)) == [Opt(OptOps.UPCAST, 1, 16)]
  assert heuristic_opts(row_kernel(layernorm, 64, 1000)) == [Opt(OptOps.UPCAST, 1, 8)]   # no exp per output
  vector_machine(32, 16)   # AVX2: 8 floats divide 1000
  assert heuristic_opts(row_kernel(softmax, 64, 1000)) == [Opt(OptOps.UPCAST, 1, 8)]

def _run(k: Kernel, items, opts) -> np.ndarray:
  dev = Device["CPU"]
  spec = get_program(k.sink, dev.renderer, opts=opts)
  bufs = [b.ensure_allocated() for b in items[-1].bufs]
  dev.make_program(spec, dev.compiler.compile_cached(spec.src))(*[b.handle for b in bufs], vals=(), wait=True)
  return items[-1].bufs[0].numpy().copy()

@pytest.mark.parametrize("shape", [(512, 1000), (64, 10), (33, 100)], ids=str)
def test_the_plain_row_equals_the_upcast_one_and_torch(shape):
  # a cross-entropy step's gradient (the one fused kernel) built both ways: the same float32 values, bit for bit
  xd = RNG.standard_normal(shape).astype(np.float32)
  labels = RNG.integers(0, shape[1], shape[0]).astype(np.int32)
  x = Tensor(xd, requires_grad=True).realize()
  x.sparse_categorical_crossentropy(Tensor(labels)).backward()
  items = create_schedule([x.grad.uop])[0]
  run_schedule(items[:-1])   # the kernels before the last: its inputs in memory
  k = Kernel(items[-1].ast, Device["CPU"].renderer)
  assert items[-1].ast.op is Ops.SINK and (not heuristic_opts(k) or Device["CPU"].renderer.vector_bytes < 64)
  plain = _run(k, items, [])
  lanes = next(a for a in (8, 4, 2) if shape[1] % a == 0)
  np.testing.assert_array_equal(plain, _run(k, items, [Opt(OptOps.UPCAST, 1, lanes)]))
  tx = torch.tensor(xd, requires_grad=True)
  torch.nn.functional.cross_entropy(tx, torch.tensor(labels).long()).backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(plain.reshape(shape), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
