"""Pickling: tensors carry their values, TinyJits their kernels, pattern tables their lambdas, settings their value."""
import os, pickle, subprocess, sys, types
import numpy as np
import pytest
from tinyplug import Tensor, TinyJit, Device
from tinyplug.engine.jit import JitError
from tinyplug.helpers import Context, ContextVar
from tinyplug.uop.ops import UOp, Ops, PatternMatcher, UPat, graph_rewrite, deconstruct_function

def _in_subprocess(code: str, blob: bytes) -> str:
  r = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120, env=os.environ.copy())
  assert r.returncode == 0, r.stderr.decode()
  return r.stdout.decode()

class TestTensorPickle:
  def test_realized_tensor_keeps_its_values_after_the_original_is_gone(self):
    vals = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    t = Tensor(vals).realize()
    blob = pickle.dumps(t)
    del t
    t2 = pickle.loads(blob)
    assert t2.uop.is_realized
    np.testing.assert_array_equal(t2.numpy(), vals)

  def test_values_reach_another_process(self):
    vals = np.arange(12, dtype=np.int32).reshape(3, 4) * 7 - 5
    blob = pickle.dumps([Tensor(vals).realize(), Tensor(vals).realize() + 1])
    out = _in_subprocess("import pickle, sys\nfrom tinyplug import Tensor\n"
                         "a, b = pickle.loads(sys.stdin.buffer.read())\nprint(a.tolist(), b.tolist())", blob)
    assert out.strip() == f"{vals.tolist()} {(vals + 1).tolist()}"

  def test_loaded_buffer_is_a_new_one(self):
    # the loaded tensor is a copy: writing to it leaves the original alone
    t = Tensor([1.0, 2.0, 3.0]).realize()
    t2 = pickle.loads(pickle.dumps(t))
    t2.assign(Tensor([9.0, 9.0, 9.0])).realize()
    assert t.tolist() == [1.0, 2.0, 3.0] and t2.tolist() == [9.0, 9.0, 9.0]

  def test_out_of_band_buffers(self):
    t = Tensor(np.arange(1000, dtype=np.float32)).realize()
    bufs: list = []
    blob = pickle.dumps(t, protocol=5, buffer_callback=bufs.append)
    assert len(bufs) == 1 and len(blob) < 1000   # the 4000 bytes went out of band
    np.testing.assert_array_equal(pickle.loads(blob, buffers=bufs).numpy(), np.arange(1000, dtype=np.float32))
    # loading copies an out-of-band buffer and lets go of it (the unpickler would otherwise hold every one to the end)
    incoming = [pickle.PickleBuffer(bytearray(np.full(1000, 7, dtype=np.float32).tobytes()))]
    np.testing.assert_array_equal(pickle.loads(blob, buffers=incoming).numpy(), np.full(1000, 7, dtype=np.float32))
    with pytest.raises(ValueError): memoryview(incoming[0])   # released

  def test_is_realized_and_realized(self):
    t = Tensor([1, 2, 3]) + 1
    assert not t.uop.is_realized and t.uop.realized is None
    t.realize()
    assert t.uop.is_realized and t.uop.base.realized is not None
    assert t.uop.base.realized.as_memoryview().cast("i").tolist() == [2, 3, 4]
    assert t.uop.has_buffer_identity() and not (t + 1).uop.has_buffer_identity()
    assert t.uop.base.realized.base is t.uop.base.realized

class TestJitPickle:
  def test_captured_jit_replays_after_loading(self):
    def make():
      @TinyJit
      def f(a, b): return (a * b).sum(axis=1) + 1
      for _ in range(3): f(Tensor.rand(4, 6), Tensor.rand(4, 6))
      return pickle.dumps(f)
    loaded = pickle.loads(make())
    a, b = np.random.default_rng(1).random((2, 4, 6), dtype=np.float32)
    for scale in (1.0, 2.0):
      out = loaded(Tensor(a * scale).realize(), Tensor(b).realize())
      np.testing.assert_allclose(out.numpy(), (a * scale * b).sum(axis=1) + 1, rtol=1e-5)

  def test_jit_before_capture_does_not_pickle(self):
    @TinyJit
    def f(a): return a + 1
    with pytest.raises(JitError, match="captured"): pickle.dumps(f)

class TestFunctionPickle:
  def test_pattern_matcher_with_lambda_and_closure(self):
    k = 3
    pm = PatternMatcher([(UPat.cvar("x"), lambda x: UOp.const(x.dtype, x.arg * k) if x.arg < 100 else None)])
    pm2 = pickle.loads(pickle.dumps(pm))
    c = UOp.const(UOp.variable("v", 0, 1).dtype, 5)
    assert pm2.rewrite(c) is pm.rewrite(c) is UOp.const(c.dtype, 15)

  def test_symbolic_table_round_trip(self):
    from tinyplug.uop.symbolic import sym
    sym2 = pickle.loads(pickle.dumps(sym))
    x = UOp.variable("x", 0, 10)
    e = ((x * 2 + 3) * 1 + 0) // 1 + x * 0
    assert graph_rewrite(e, sym2) is graph_rewrite(e, sym)
    assert [p[0].location for p in sym2.patterns] == [p[0].location for p in sym.patterns]

  def test_code_objects_pickle(self):
    fn = lambda x: x * 2  # noqa: E731
    code = pickle.loads(pickle.dumps(fn.__code__))
    assert types.FunctionType(code, {})(21) == 42

  def test_deconstruct_function_keeps_only_the_globals_it_reads(self):
    def fn(): return [[np.float32(i) for i in range(2)] for _ in range(2)]
    code, glb, name, defaults, closure = deconstruct_function(fn)
    assert set(glb) == {"np"} and name == "fn"
    assert types.FunctionType(code, glb, name, defaults, closure)() == fn()

class TestMisc:
  def test_context_var_carries_its_value(self):
    v = ContextVar("TINYPLUG_TEST_PICKLED_SETTING", 0)
    with Context(TINYPLUG_TEST_PICKLED_SETTING=4): blob = pickle.dumps(v)
    assert v.value == 0
    assert pickle.loads(blob) is v and v.value == 4
    v.value = 0

  def test_device_default_and_its_renderer_pickle(self):
    assert Device.default is Device[Device.DEFAULT]
    pickle.loads(pickle.dumps(Device.default.renderer))

class TestDTypes:
  def test_dtypes_come_back_as_the_canonical_objects(self):
    # hash-consing keeps the first node's dtype object: an equal copy of dtypes.float there (a node made from a search
    # worker's result) left every later graph holding that node unstorable in the disk caches (rows.enc_dtype)
    from tinyplug.uop.dtype import dtypes
    for dt in (dtypes.float, dtypes.half, dtypes.bfloat16, dtypes.int64, dtypes.bool, dtypes.float.vec(8)):
      assert pickle.loads(pickle.dumps(dt)) is dt
    p = dtypes.float.ptr(16)
    assert pickle.loads(pickle.dumps(p)) == p and pickle.loads(pickle.dumps(p)).base is dtypes.float
