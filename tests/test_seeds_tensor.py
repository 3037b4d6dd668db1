"""The Tensor-level walkthrough examples a tinygrad user starts from (arange, lazy graphs, DEBUG output, devices),
with tinygrad read as tinyplug. What they print here: `t + 3 + 4` is [8, 9, 10, 11]; DEBUG=3 prints the applied
optimisations and DEBUG=4 the code; the CPU device is `CPU`."""
import os, re, subprocess, sys, textwrap
import numpy as np
import pytest
from tinyplug import Tensor, Device, dtypes
from tinyplug.uop import Ops

def test_ramp_tensor_basics(device):
  t = Tensor([1, 2, 3, 4])
  assert t.device == Device.DEFAULT and t.dtype == dtypes.int and t.shape == (4,)
  # data starts in host memory (the PYTHON device) and is copied lazily, on PYTHON itself too
  expected = r"<Ops\.COPY: \d+>, None"
  assert re.fullmatch(rf"<Tensor <UOp {device} \(4,\) int \({expected}\)> on {device} with grad None>", repr(t))
  assert (t * 2).tolist() == [2, 4, 6, 8]
  assert (t + 3 + 4).tolist() == [8, 9, 10, 11]

def test_ramp_uop_before_and_after_realize():
  t = Tensor([1, 2, 3, 4], device="CPU" if "CPU" in Device.available() else "PYTHON")
  if t.device != "PYTHON":
    text = str(t.uop)
    assert text.startswith("UOp(Ops.COPY, dtypes.int, arg=None, src=(\n  UOp(Ops.BUFFER, dtypes.int, arg=4, src=(")
    assert "arg='PYTHON'" in text and f"arg='{t.device}'" in text
  t.realize()
  assert t.uop.op is Ops.BUFFER and t.uop.arg == 4 and t.uop.src[0].op is Ops.UNIQUE
  assert t.uop.src[1].arg == t.device

def test_ramp_smart_deduplication(device):
  t = Tensor([1, 2, 3, 4])
  A, B = t * 4, t * 4
  assert A is not B and A.uop is B.uop
  A.realize()
  assert A.uop is B.uop
  assert B.tolist() == [4, 8, 12, 16]

def test_ramp_gradients(device):
  x = Tensor([2.0], requires_grad=True)
  y = x**2 + 3*x + 1
  loss = y.sum()
  assert x.item() == 2.0 and y.item() == 11.0
  grad, = loss.gradient(x)
  assert grad.item() == pytest.approx(7.0)
  x = Tensor([2.0], requires_grad=True)
  z = (x**2 + 1).log()
  loss = z.sum()
  assert z.item() == pytest.approx(np.log(5), rel=1e-6)
  grad, = loss.gradient(x)
  assert grad.item() == pytest.approx(0.8, rel=1e-6)

def test_ramp_kernelize_folds_constants(device):
  from tinyplug.codegen import full_rewrite_to_sink
  t = Tensor([1, 2, 3, 4])
  t_plus_3_plus_4 = t + 3 + 4
  t_plus_3_plus_4.kernelize()
  kernel_ast = t_plus_3_plus_4.uop.src[1].arg.ast
  rewritten_ast = full_rewrite_to_sink(kernel_ast)
  # every loaded value gets 7 added: 3 and 4 were folded
  added = {s.arg for u in rewritten_ast.toposort() if u.op is Ops.ADD and any(x.op is Ops.LOAD for x in u.src)
           for s in u.src if s.op is Ops.CONST}
  assert added == {7}
  assert any(u.op is Ops.STORE for u in rewritten_ast.toposort())
  assert t_plus_3_plus_4.tolist() == [8, 9, 10, 11]

def test_internals_empty_add(device):
  a, b = Tensor.empty(4, 4), Tensor.empty(4, 4)
  # empty memory is zeroed by the host allocators (PYTHON, CPU); other devices leave it as it was
  assert (a + b).tolist() == [[0.0] * 4] * 4 or device not in ("PYTHON", "CPU")
  assert re.fullmatch(rf"<Tensor <UOp {device} \(4, 4\) float \(<Ops\.ADD: \d+>, None\)> on {device} with grad None>",
                      repr(a + b))
  if device in ("PYTHON", "CPU"):
    assert (a * b).tolist() == [[0.0] * 4] * 4
    assert a.sum(0).tolist() == [0.0] * 4

HACKING = {
  "inspect": """
    from tinyplug import Tensor
    a = Tensor([1, 2, 3, 4]); b = Tensor([5, 6, 7, 8])
    c = a + b; d = c * 2
    print("UOp:", d.uop); print("Shape:", d.shape); print("Dtype:", d.dtype)
    print("Result:", d.realize().numpy())
  """,
  "matmul": """
    from tinyplug import Tensor
    a = Tensor.randn(32, 32); b = Tensor.randn(32, 32)
    c = a @ b
    c.realize()
  """,
  "scheduler": """
    from tinyplug import Tensor
    x = Tensor([1, 2, 3, 4]); y = Tensor([5, 6, 7, 8])
    z = (x + y) * 2
    schedule = z.schedule()
    print(f"Number of kernels: {len(schedule)}")
    for i, si in enumerate(schedule):
      print(f"Kernel {i}:", si.ast.op, si.bufs)
  """,
  "custom": """
    from tinyplug import Tensor
    def custom_activation(x): return x * x + x.sin()
    x = Tensor([0.5, 1.0, 1.5, 2.0])
    print(custom_activation(x).numpy())
  """,
  "kernels": """
    from tinyplug import Tensor
    a = Tensor.randn(1024)
    a.relu().exp().realize()
  """,
  "execution_plan": """
    from tinyplug import Tensor
    x = Tensor.randn(10, 10); y = Tensor.randn(10, 10)
    result = (x @ y).relu().sum(axis=0).softmax()
    schedule = result.schedule()
    print(f"Execution plan: {len(schedule)} steps")
  """,
  "fusion": """
    from tinyplug import Tensor
    x = Tensor.randn(100, 100)
    ((x + 1) * 2 - 1).__truediv__(2).realize()
  """,
  "zero_copy": """
    from tinyplug import Tensor
    x = Tensor.randn(4, 8, 16)
    w = x.permute(2, 0, 1).reshape(16, 32).reshape(16, 32, 1).expand(16, 32, 4)
    print("Shape:", w.shape)
    w.realize()
  """,
}

@pytest.mark.parametrize("name", sorted(HACKING))
def test_hacking_examples_run(name):
  env = {**os.environ, "DEBUG": "4"}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(HACKING[name])], capture_output=True, text=True, env=env,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert "***" in out.stdout or name == "scheduler" or name == "execution_plan"   # DEBUG=2 lines appear

def test_debug_levels_print_what_they_promise():
  code = "from tinyplug import Tensor\nTensor([1.0, 2.0, 3.0]).exp().realize()\n"
  runs = {lvl: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "DEBUG": str(lvl)}).stdout for lvl in (1, 2, 4)}
  assert "kernels in" in runs[1] and "***" not in runs[1]
  assert re.search(r"\*\*\* \S+\s+\d+ .*E_3.* arg\s+2 mem .* tm .*GFLOPS", re.sub(r"\x1b\[[0-9;]*m", "", runs[2]))
  assert len(runs[4]) > len(runs[2])    # the code is printed too
