"""UOp basics: hash-consing, constants, immutability, operators, walks, variables, substitute; dtypes and promotion."""
import gc, math, pickle
import pytest
import torch
from tinyplug.uop import UOp, Ops, GroupOp, dtypes, least_upper_dtype, to_dtype
from tinyplug.uop.dtype import PtrDType, truncate
from tinyplug.helpers import Context
from tinyplug.uop.ops import UOpMeta

def const(v, dt=dtypes.int): return UOp.const(dt, v)

class TestHashConsing:
  def test_same_spec_same_object(self):
    a, b = UOp(Ops.CONST, dtypes.int, arg=2), UOp(Ops.CONST, dtypes.int, arg=2)
    assert a is b
    assert (a + b) is (a + b)
    assert UOp(Ops.CONST, dtypes.float, arg=2.0) is not UOp(Ops.CONST, dtypes.int, arg=2)
  def test_equal_dtype_objects_share(self):
    p1, p2 = dtypes.float.ptr(16), dtypes.float.ptr(16)
    assert p1 is not p2 and p1 == p2
    assert UOp(Ops.DEFINE_GLOBAL, p1, arg=0) is UOp(Ops.DEFINE_GLOBAL, p2, arg=0)
    assert UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(8), arg=0) is not UOp(Ops.DEFINE_GLOBAL, p1, arg=0)
  def test_cache_is_weak(self):
    gc.collect()
    before = len(UOpMeta.ucache)
    nodes = [UOp(Ops.CONST, dtypes.int, arg=10**9 + i) for i in range(1000)]
    assert len(UOpMeta.ucache) >= before + 1000
    del nodes
    gc.collect()
    assert len(UOpMeta.ucache) <= before
  def test_rebuilt_after_free_is_equal(self):
    key = UOp(Ops.CONST, dtypes.int, arg=123456789).arg
    gc.collect()
    assert UOp(Ops.CONST, dtypes.int, arg=key).arg == key
  def test_pickle_gives_the_same_node(self):
    x = UOp.variable("a", 0, 9) * 3
    assert pickle.loads(pickle.dumps(x)) is x
  def test_pickled_dtypes_hash_like_fresh_ones_in_another_process(self):
    # a dtype caches its hash, which covers its name (a str: hashed differently per process); pickles leave it out
    import os, subprocess, sys
    blob = pickle.dumps([dtypes.float.ptr(7), dtypes.half.vec(4), UOp(Ops.CONST, dtypes.float.vec(2), arg=1.5)])
    hash(dtypes.float.ptr(7))
    code = ("import pickle, sys; from tinyplug.uop import UOp, Ops, dtypes\n"
            "p, v, c = pickle.loads(sys.stdin.buffer.read())\n"
            "assert {dtypes.float.ptr(7): 1}.get(p) == 1 and {dtypes.half.vec(4): 2}.get(v) == 2\n"
            "assert c is UOp(Ops.CONST, dtypes.float.vec(2), arg=1.5)\n")
    for seed in ("1", "2"):
      r = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=60,
                         env={**os.environ, "PYTHONHASHSEED": seed})
      assert r.returncode == 0, r.stderr.decode()

class TestConstants:
  def test_signed_zero_is_distinct(self):
    pz, nz = const(0.0, dtypes.float), const(-0.0, dtypes.float)
    assert pz is not nz
    assert math.copysign(1, nz.arg) == -1 and math.copysign(1, pz.arg) == 1
  def test_nan_is_one_node(self):
    a, b = const(math.nan, dtypes.float), const(math.nan, dtypes.float)
    assert a is b and math.isnan(a.arg)
  def test_int_and_float_args_differ(self):
    assert UOp(Ops.CONST, dtypes.float, arg=1.0) is not UOp(Ops.CONST, dtypes.float, arg=1)
  def test_truncation(self):
    assert const(2**31).arg == -2**31
    assert const(300, dtypes.uint8).arg == 44
    assert const(3.9).arg == 3
    assert const(1, dtypes.bool).arg is True
    assert const(0.1, dtypes.float).arg == truncate(dtypes.float32, 0.1) != 0.1
  def test_const_like(self):
    x = UOp.variable("a", 0, 9)
    c = x.const_like(5)
    assert c.op is Ops.CONST and c.dtype == dtypes.int and c.arg == 5
    f = const(1.5, dtypes.half)
    assert f.const_like(2).dtype == dtypes.half and f.const_like(2).arg == 2.0
    assert const(True, dtypes.bool).const_like(0).arg is False
  def test_vconst(self):
    v = UOp.const(dtypes.int.vec(4), (1, 2, 3, 2**32 + 4))
    assert v.op is Ops.VCONST and v.arg == (1, 2, 3, 4) and v.vmin == 1 and v.vmax == 4

class TestImmutability:
  def test_cannot_set(self):
    x = const(1)
    with pytest.raises(AttributeError): x.arg = 2
    with pytest.raises(AttributeError): x.op = Ops.ADD
    with pytest.raises(AttributeError): x.new_field = 1
  def test_replace_builds_new(self):
    x = const(1) + const(2)
    y = x.replace(op=Ops.MUL)
    # hash-consed: an equal MUL built earlier (by another test) may be returned, so compare the sources by identity
    assert y.op is Ops.MUL and x.op is Ops.ADD and len(y.src) == 2 and all(a is b for a, b in zip(y.src, x.src))
    assert x.replace() is x
    with pytest.raises(TypeError): x.replace(nope=1)
  def test_src_must_be_tuple(self):
    with pytest.raises(TypeError): UOp(Ops.ADD, dtypes.int, [const(1), const(2)])

class TestOperators:
  a = UOp.variable("a", 0, 10)
  @pytest.mark.parametrize("fn,op", [(lambda x: x + 1, Ops.ADD), (lambda x: x - 1, Ops.SUB), (lambda x: x * 2, Ops.MUL),
                                     (lambda x: x // 2, Ops.IDIV), (lambda x: x % 2, Ops.MOD), (lambda x: -x, Ops.NEG),
                                     (lambda x: x.maximum(3), Ops.MAX), (lambda x: x & 3, Ops.AND), (lambda x: x | 3, Ops.OR),
                                     (lambda x: x ^ 3, Ops.XOR), (lambda x: x << 1, Ops.SHL), (lambda x: x >> 1, Ops.SHR)])
  def test_int_ops(self, fn, op):
    u = fn(self.a)
    assert u.op is op and u.dtype == dtypes.int
  @pytest.mark.parametrize("fn,op", [(lambda x: x < 1, Ops.CMPLT), (lambda x: x.ne(1), Ops.CMPNE), (lambda x: x.eq(1), Ops.CMPEQ)])
  def test_comparisons_are_bool(self, fn, op):
    u = fn(self.a)
    assert u.op is op and u.dtype == dtypes.bool
  def test_reflected(self):
    u = 3 - self.a
    assert u.op is Ops.SUB and u.src[0].arg == 3 and u.src[1] is self.a
    assert (2 * self.a).src[0].arg == 2 and (1 + self.a).src[1] is self.a
    assert (self.a > 1).src == (const(1), self.a)
  def test_float_division(self):
    f = UOp.variable("f", 0, 1, dtypes.float)
    assert (f / 2).op is Ops.FDIV and (self.a / 2).op is Ops.IDIV
    assert (f / 2).src[1].dtype == dtypes.float
  def test_where_and_cast(self):
    w = (self.a < 3).where(self.a, 0)
    assert w.op is Ops.WHERE and w.dtype == dtypes.int and w.src[2].arg == 0
    assert self.a.cast(dtypes.float).op is Ops.CAST and self.a.cast(dtypes.int) is self.a
    assert self.a.bitcast(dtypes.uint).op is Ops.BITCAST
  def test_unary_floats(self):
    f = UOp.variable("f", 0, 1, dtypes.float)
    for name, op in [("sqrt", Ops.SQRT), ("exp2", Ops.EXP2), ("log2", Ops.LOG2), ("sin", Ops.SIN), ("reciprocal", Ops.RECIPROCAL)]:
      assert getattr(f, name)().op is op
  def test_bool_of_symbolic(self):
    assert bool(const(1) < const(2))
    with pytest.raises(ValueError): bool(self.a < 5)
    assert int(const(3)) == 3 and int(UOp.variable("k", 4, 4)) == 4

class TestWalks:
  def test_toposort_children_first(self):
    a, b = UOp.variable("a", 0, 3), UOp.variable("b", 0, 3)
    x = (a + b) * (a + 1)
    order = list(x.toposort())
    assert order[-1] is x and len(order) == len(set(order))
    for i, u in enumerate(order):
      for s in u.src: assert order.index(s) < i
    assert set(order) == {a, b, a + b, const(1), a + 1, x}
  def test_toposort_gate(self):
    a = UOp.variable("a", 0, 3)
    x = (a + 1) * 2
    assert a not in x.toposort(gate=lambda u: u.op is not Ops.ADD)
  def test_deep_toposort(self):
    x = const(0)
    for _ in range(100_000): x = x + 1
    assert len(x.toposort()) == 100_002

class TestVariables:
  def test_variable(self):
    v = UOp.variable("n", 2, 9)
    assert v.op is Ops.DEFINE_VAR and v.arg == ("n", 2, 9) and v.expr == "n" and (v.vmin, v.vmax) == (2, 9)
    with pytest.raises(ValueError): UOp.variable("bad", 5, 1)
  def test_bind(self):
    v = UOp.variable("n", 2, 9)
    b = v.bind(4)
    assert b.op is Ops.BIND and b.unbind() == (v, 4) and (b.vmin, b.vmax) == (2, 9)
    with pytest.raises(ValueError): v.bind(10)
  def test_bounds(self):
    a, b = UOp.variable("a", 0, 10), UOp.variable("b", -3, 4)
    assert ((a + b).vmin, (a + b).vmax) == (-3, 14)
    assert ((a - b).vmin, (a - b).vmax) == (-4, 13)
    assert ((a * b).vmin, (a * b).vmax) == (-30, 40)
    assert ((a // 3).vmin, (a // 3).vmax) == (0, 3)
    assert ((b % 3).vmin, (b % 3).vmax) == (-2, 2)
    assert ((a < 11).vmin, (a < 11).vmax) == (True, True)
    assert ((a * 2**30).vmin, (a * 2**30).vmax) == (dtypes.int.min, dtypes.int.max)  # may overflow: anything
  def test_sym_infer(self):
    a = UOp.variable("a", 0, 10)
    assert (a * 3 + 1).sym_infer({"a": 4}) == 13 and (a * 3 + 1).sym_infer({a: 2}) == 7
  def test_deep_bounds(self):
    x = UOp.variable("a", 0, 1)
    for _ in range(50_000): x = x + 1
    assert (x.vmin, x.vmax) == (50_000, 50_001)

class TestSubstitute:
  def test_substitute(self):
    a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
    x = (a + 1) * a
    y = x.substitute({a: b})
    assert y is (b + 1) * b
    assert x.substitute({a + 1: const(7)}) is const(7) * a
    assert x.substitute({}) is x

DT_NAMES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"]

class TestDTypes:
  def test_itemsize_and_range(self):
    assert [getattr(dtypes, n).itemsize for n in DT_NAMES] == [1, 1, 1, 2, 4, 8, 2, 4, 8]
    assert (dtypes.int8.min, dtypes.int8.max) == (-128, 127) and (dtypes.uint8.min, dtypes.uint8.max) == (0, 255)
    assert (dtypes.int64.min, dtypes.uint64.max) == (-2**63, 2**64 - 1)
    assert dtypes.float32.min == -math.inf and dtypes.bool.max is True
  def test_aliases_and_names(self):
    assert dtypes.float is dtypes.float32 and dtypes.half is dtypes.float16 and dtypes.long is dtypes.int64
    assert to_dtype("half") is dtypes.float16 and repr(dtypes.float32) == "dtypes.float"
    with pytest.raises(ValueError, match="unknown dtype"): to_dtype("float33")
  def test_classification(self):
    assert dtypes.is_float(dtypes.half) and dtypes.is_int(dtypes.uint8) and dtypes.is_unsigned(dtypes.uint8)
    assert not dtypes.is_int(dtypes.bool) and dtypes.is_float(dtypes.float.vec(4))

  @pytest.mark.parametrize("x", DT_NAMES)
  @pytest.mark.parametrize("y", DT_NAMES)
  def test_promotion_matches_torch(self, x, y):
    want = str(torch.promote_types(getattr(torch, x), getattr(torch, y))).removeprefix("torch.")
    assert least_upper_dtype(getattr(dtypes, x), getattr(dtypes, y)) is getattr(dtypes, want)

  def test_promotion_known_differences(self):
    # torch has no promotion rule for uint16/uint32/uint64 with other types (it raises); we follow tinygrad's lattice
    with pytest.raises(RuntimeError): torch.promote_types(torch.uint32, torch.int32)
    assert least_upper_dtype(dtypes.uint32, dtypes.int32) is dtypes.int64
    assert least_upper_dtype(dtypes.uint16, dtypes.int8) is dtypes.int32
    # ... and like tinygrad, no integer holds both int64 and uint64, so they meet at the default float
    assert least_upper_dtype(dtypes.uint64, dtypes.int64) is dtypes.float32
    with Context(DEFAULT_FLOAT="half"): assert least_upper_dtype(dtypes.uint64, dtypes.int64) is dtypes.float16
    assert least_upper_dtype(dtypes.bfloat16, dtypes.float16) is dtypes.float32
    assert str(torch.promote_types(torch.bfloat16, torch.float16)) == "torch.float32"

  def test_vec(self):
    v = dtypes.float.vec(4)
    assert v.count == 4 and v.itemsize == 16 and v.scalar() is dtypes.float and v is dtypes.float.vec(4)
    assert dtypes.float.vec(1) is dtypes.float and repr(v) == "dtypes.float.vec(4)"
    with pytest.raises(ValueError): v.vec(2)
  def test_ptr(self):
    p = dtypes.float.ptr(16)
    assert isinstance(p, PtrDType) and p.base is dtypes.float and p.size == 16 and not p.local
    assert p == dtypes.float.ptr(16) and p != dtypes.float.ptr(16, local=True)
    assert repr(dtypes.half.ptr(8, local=True)) == "dtypes.half.ptr(8, local=True)"
    pv = p.vec(4)
    assert pv.v == 4 and pv.scalar() == p and pv.base is dtypes.float
    with pytest.raises(TypeError): p.ptr()
  def test_ptr_in_uop(self):
    g = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), arg=0)
    assert g.ptrdtype.size == 16
    with pytest.raises(TypeError): const(1).ptrdtype

def test_groupops():
  assert Ops.ADD in GroupOp.Binary and Ops.WHERE in GroupOp.Ternary and Ops.NEG in GroupOp.Unary
  assert GroupOp.ALU == GroupOp.Unary | GroupOp.Binary | GroupOp.Ternary
  assert {Ops.ADD: 1}[Ops.ADD] == 1 and len({op for op in Ops}) == len(Ops)

def test_key_is_a_content_digest():
  import subprocess, sys
  a = UOp.variable("kx", 0, 9) * 3 + 1
  assert isinstance(a.key, bytes) and len(a.key) == 32
  assert a.key == (UOp.variable("kx", 0, 9) * 3 + 1).key and a.key != (UOp.variable("kx", 0, 9) * 3 + 2).key
  deep = UOp.variable("kx", 0, 9)
  for _ in range(3000): deep = deep + 1   # deeper than the recursion limit
  assert len(deep.key) == 32
  code = "from tinyplug.uop import UOp; print((UOp.variable('kx', 0, 9) * 3 + 1).key.hex())"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONHASHSEED": "7", **__import__("os").environ})
  assert out.stdout.strip() == a.key.hex()
