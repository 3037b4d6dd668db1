"""The backend contract (tinyplug.backend): every installed device holds to it, and the core reads capabilities
only through it."""
import pathlib, re
import numpy as np
import pytest
from tinyplug.backend import (LAUNCH_MODELS, Allocator, Compiled, Compiler, ProgramSpec, Renderer, ReuseAllocator,
                              TensorCore, loop_work, shareable_loop)
from tinyplug.device import Device
from tinyplug.hookspecs.search import SearchStrategy, check_strategy
from tinyplug.uop import Ops, UOp, dtypes
from tinyplug.uop.dtype import DType

CORE = pathlib.Path(__file__).resolve().parents[1] / "tinyplug"

def test_each_device_holds_to_the_contract(device):
  dev = Device[device]
  assert isinstance(dev, Compiled) and isinstance(dev.renderer, Renderer) and isinstance(dev.compiler, Compiler)
  assert isinstance(dev.allocator, ReuseAllocator) and isinstance(dev.allocator.raw, Allocator)
  r = dev.renderer
  assert r.launch in LAUNCH_MODELS
  dts = r.supported_dtypes()
  assert isinstance(dts, list) and dtypes.float32 in dts and all(isinstance(d, DType) for d in dts)
  assert all(dt in dts and all(isinstance(w, int) and w > 1 for w in ws) for dt, ws in r.vector_widths.items())
  if r.has_shared: assert r.has_local and r.launch != "loops"
  cores = tuple(r.tensor_cores)
  assert all(isinstance(tc, TensorCore) for tc in cores) and len({tc.name for tc in cores}) == len(cores)
  for tc in cores:
    tc.check()   # its fragments cover A, B and C/D once each
    assert r.uses_work_groups and tc.dtype_in in dts and tc.dtype_out in dts
  from tinyplug.uop.minifloat import FORMATS
  assert set(r.emulated) <= set(dts) & set(FORMATS) and not set(r.emulated) & set(r.vector_widths)

def _toy_core(**change) -> TensorCore:
  # 2x2x2 on 2 threads: lane l holds row l of A, column l of B and of C/D
  fields = dict(name="toy", dims=(2, 2, 2), dtype_in=dtypes.half, dtype_out=dtypes.float32, threads=2,
                lane_bits=(((1, 0),), ((0, 1),), ((0, 1),)), element_offsets=(((0, 0), (0, 1)), ((0, 0), (1, 0)), ((0, 0), (1, 0))))
  return TensorCore(**{**fields, **change})

def test_tensor_core_layout_is_data_and_checked():
  tc = _toy_core()
  tc.check()
  assert tc.elements == (2, 2, 2) and tc.position(0, 1, 1) == (1, 1) and tc.position(1, 1, 0) == (0, 1)
  with pytest.raises(ValueError, match="matrix C do not cover its 2x2 elements once"):
    _toy_core(element_offsets=(((0, 0), (0, 1)), ((0, 0), (1, 0)), ((0, 0), (0, 0)))).check()
  with pytest.raises(ValueError, match="needs 1 lane steps"): _toy_core(lane_bits=((), ((0, 1),), ((0, 1),))).check()
  # A in both lanes (a lane bit that steps nothing, as RDNA3's WMMA wants it): even, so fine; uneven is refused
  both = _toy_core(lane_bits=(((0, 0),), ((0, 1),), ((0, 1),)), element_offsets=(((0, 0), (0, 1), (1, 0), (1, 1)),
                                                                                   ((0, 0), (1, 0)), ((0, 0), (1, 0))))
  both.check()
  assert both.elements == (4, 2, 2)
  with pytest.raises(ValueError, match="matrix A do not cover its 2x2 elements evenly"):
    _toy_core(element_offsets=(((0, 0), (0, 0)), ((0, 0), (1, 0)), ((0, 0), (1, 0)))).check()

def test_dtypes_declared_emulated_work_and_leave_no_trace_in_kernels(device):
  # a renderer may list a float dtype it has no type for (CL's bfloat16): the core emulates it, values as torch's
  import torch
  from tinyplug import Tensor
  from tinyplug.codegen.emulated_dtypes import emulated_dtypes
  r = Device[device].renderer
  for dt in r.emulated:
    assert dt in r.supported_dtypes() and dt in emulated_dtypes(r)
    data = [60000.0, 70000.0, -80000.0, 1.0 / 3]
    tdt = {dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16}[dt]
    t = Tensor(data, device=device).cast(dt)
    np.testing.assert_array_equal(t.float().numpy(), torch.tensor(data).to(tdt).float().numpy())
    np.testing.assert_array_equal((t * t).sqrt().float().numpy(), (torch.tensor(data).to(tdt) ** 2).sqrt().float().numpy())

def test_every_device_reuses_big_blocks(device):
  # LRU applies to every device: the core's cache sits in front of each plugin's allocator
  a = Device[device].allocator
  h = a.alloc(1 << 20)
  a.free(h, 1 << 20)
  assert a.alloc(1 << 20) is h
  a.free(h, 1 << 20)
  data = np.arange(1 << 18, dtype=np.float32)
  a.copyin(h, memoryview(data).cast("B"))
  out = np.empty_like(data)
  Device[device].synchronize()
  a.copyout(memoryview(out).cast("B"), h)
  np.testing.assert_array_equal(out, data)

def test_core_reads_no_capability_by_probing():
  # capabilities are declared on Renderer with defaults; the core never guesses with getattr(renderer, ...)
  offenders = [f"{p.relative_to(CORE)}:{i}" for p in CORE.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
               if re.search(r"getattr\((ctx\.)?(k\.|self\.)?renderer", line)]
  assert offenders == []

def _loop_program(n: int, m: int, store_outside: bool = False) -> list[UOp]:
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(n * m), arg=0)
  i = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n),), (0, "loop"))
  j = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, m),), (1, "loop"))
  idx = UOp(Ops.INDEX, out.dtype, (out, i * m + j))
  st = UOp(Ops.STORE, dtypes.void, (idx, UOp.const(dtypes.float, 1.0)))
  prog = [out, i, j, idx, st, UOp(Ops.END, dtypes.void, (j,)), UOp(Ops.END, dtypes.void, (i,))]
  if store_outside: prog.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, UOp.const(dtypes.int, 0))),
                                                             UOp.const(dtypes.float, 2.0))))
  return prog

def test_program_spec_launch_fields_are_worked_out_from_the_program():
  prog = _loop_program(6, 7)
  assert shareable_loop(prog) is prog[1] and loop_work(prog) == 6 + 6 * 7
  spec = ProgramSpec("k", tuple(prog), "")
  assert spec.thread_split and spec.work == 48 and spec.thread_parts is None
  assert not ProgramSpec("k", tuple(_loop_program(6, 7, store_outside=True)), "").thread_split
  assert not ProgramSpec("k", tuple(prog), "", thread_split=False).thread_split   # what the renderer says wins

def test_get_program_fills_the_launch_policy():
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  from tinyplug.tensor import Tensor
  x = Tensor.empty(64, 64, device="PYTHON")
  ast = create_schedule([(x + 1).uop])[0][-1].ast
  spec = get_program(ast, Device["PYTHON"].renderer)
  assert not spec.thread_split and spec.work == 0            # launch ids: no loops for threads to share
  assert spec.global_size != (1, 1, 1) and any(u.op is Ops.SPECIAL for u in spec.uops)

def test_search_strategy_signature_is_checked():
  class Good(SearchStrategy):
    def search(self, kernel, timer, width, progress): return []
  class Wrong:
    def search(self, candidates, cost): return None
  check_strategy(Good(), "good")
  with pytest.raises(TypeError, match=r"'wrong'.*does not take \(kernel, timer, width, progress\)"): check_strategy(Wrong(), "wrong")
  with pytest.raises(TypeError, match="no search"): check_strategy(object(), "none")
