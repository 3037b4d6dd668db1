"""How fast argmax along rows could be in one pass on this CPU: tinyplug's kernel (on AVX2 the max pass, then the
first index equal to it) against hand-written LLVM IR that carries a (max, index) pair per vector lane through one
pass, R rows side by side, K pairs per row. The IR has no reduction with two accumulators, and LLVM's loop vectorizer
does not vectorize a scalar loop that carries the pair (checked here: --check-vectorizer), so these kernels are
written as vectors. Each is compiled by the cpu_llvm plugin's pipeline and target, checked against numpy (rows with
NaN of either sign, rows of NaN, +-inf, all -inf and all-equal rows: --rows at least 14), and timed kernel alone in
turns in one process (thread CPU time of the best of 10 batches of --reps / 10 calls, best / median of --rounds
rounds, both orders).

  CPU_THREADS=1 python benchmarks/argmax_one_pass.py [--rows 64 --cols 1000] [--forms 4x1 8x1 keyed4] [--rounds 7]

One lane's step (x the loaded vector, m / i the lane's max and index, j the vector's indices): take x where
`not (x <= m) and m is ordered` (a larger value, or the first NaN; a NaN max sticks), 5 vector ops per 8 floats
against the two passes' 3 + 5. After the row: the NaN-propagating max of the lanes, then the smallest index among
the lanes holding it (or a NaN)."""
from __future__ import annotations
import argparse, ctypes, os, time
os.environ.setdefault("CACHELEVEL", "0")
import numpy as np

NEG_INF = "0xFFF0000000000000"
ALL_TRUE = "<" + ",".join(["i1 1"] * 8) + ">"
F, I = "<8 x float>", "<8 x i32>"

def _splat(v: int) -> str: return "<" + ",".join([f"i32 {v}"] * 8) + ">"

def _lane_step(q: int, k: int) -> list[str]:
  """One vector of row q into accumulator pair k: the lanes whose x is larger than m (or the first NaN) take x, j."""
  s = f"{q}_{k}"
  return [f"  %a{s} = add i32 %base{q}, %jk{k}", f"  %p{s} = getelementptr inbounds float, ptr %in, i32 %a{s}",
          f"  %x{s} = load {F}, ptr %p{s}, align 4", f"  %le{s} = fcmp ole {F} %x{s}, %m{s}",
          f"  %gt{s} = xor <8 x i1> %le{s}, {ALL_TRUE}", f"  %ord{s} = fcmp ord {F} %m{s}, %m{s}",
          f"  %c{s} = and <8 x i1> %gt{s}, %ord{s}", f"  %mn{s} = select <8 x i1> %c{s}, {F} %x{s}, {F} %m{s}",
          f"  %in{s} = select <8 x i1> %c{s}, {I} %curk{k}, {I} %i{s}"]

def _row_result(q: int, K: int) -> list[str]:
  """Row q's first index of its maximum from its K pairs of lanes (NaN the maximum, first NaN first)."""
  out, acc = [], f"%mn{q}_0"
  for k in range(1, K):
    out.append(f"  %M{q}_{k} = call {F} @llvm.maximum.v8f32({F} {acc}, {F} %mn{q}_{k})")
    acc = f"%M{q}_{k}"
  out += [f"  %Ms{q} = call float @llvm.vector.reduce.fmaximum.v8f32({F} {acc})",
          f"  %Mv0{q} = insertelement {F} poison, float %Ms{q}, i32 0",
          f"  %Mv{q} = shufflevector {F} %Mv0{q}, {F} poison, <8 x i32> zeroinitializer"]
  iacc = None
  for k in range(K):
    s = f"{q}_{k}"
    out += [f"  %eq{s} = fcmp oeq {F} %mn{s}, %Mv{q}", f"  %nan{s} = fcmp uno {F} %mn{s}, %mn{s}",
            f"  %hit{s} = or <8 x i1> %eq{s}, %nan{s}",
            f"  %sel{s} = select <8 x i1> %hit{s}, {I} %in{s}, {I} {_splat(2**31 - 1)}"]
    if iacc is None: iacc = f"%sel{s}"
    else:
      out.append(f"  %I{s} = call {I} @llvm.smin.v8i32({I} {iacc}, {I} %sel{s})")
      iacc = f"%I{s}"
  return out + [f"  %res{q} = call i32 @llvm.vector.reduce.smin.v8i32({I} {iacc})",
                f"  %po{q} = getelementptr inbounds i32, ptr %out, i32 %row{q}", f"  store i32 %res{q}, ptr %po{q}"]

def one_pass_ir(rows: int, cols: int, R: int, K: int) -> str:
  """LLVM IR of `void f(i32 *out, float *in)`: argmax along rows of a rows x cols float32 array, one pass."""
  assert rows % R == 0 and cols % (8 * K) == 0, (rows, cols, R, K)
  L = [f"define void @one_pass_{R}x{K}(ptr noalias %out, ptr noalias %in) #0 {{", "entry:", "  br label %rows",
       "rows:", "  %r = phi i32 [0, %entry], [%r1, %rowend]", f"  %rb = mul i32 %r, {R}", "  br label %loop", "loop:",
       "  %j = phi i32 [0, %rows], [%j1, %loop]",
       f"  %cur = phi {I} [<i32 0,i32 1,i32 2,i32 3,i32 4,i32 5,i32 6,i32 7>, %rows], [%cur1, %loop]"]
  ninf = "<" + ",".join([f"float {NEG_INF}"] * 8) + ">"
  for q in range(R):
    for k in range(K):
      L += [f"  %m{q}_{k} = phi {F} [{ninf}, %rows], [%mn{q}_{k}, %loop]",
            f"  %i{q}_{k} = phi {I} [zeroinitializer, %rows], [%in{q}_{k}, %loop]"]
  for k in range(K): L += [f"  %curk{k} = add {I} %cur, {_splat(8 * k)}", f"  %jk{k} = add i32 %j, {8 * k}"]
  for q in range(R):
    L += [f"  %row{q} = add i32 %rb, {q}", f"  %base{q} = mul i32 %row{q}, {cols}"]
    for k in range(K): L += _lane_step(q, k)
  L += [f"  %cur1 = add {I} %cur, {_splat(8 * K)}", f"  %j1 = add nuw nsw i32 %j, {8 * K}",
        f"  %d = icmp slt i32 %j1, {cols}", "  br i1 %d, label %loop, label %rowend", "rowend:"]
  for q in range(R): L += _row_result(q, K)
  L += ["  %r1 = add i32 %r, 1", f"  %e = icmp slt i32 %r1, {rows // R}", "  br i1 %e, label %rows, label %exit",
        "exit:", "  ret void", "}",
        f"declare {F} @llvm.maximum.v8f32({F}, {F})", f"declare float @llvm.vector.reduce.fmaximum.v8f32({F})",
        f"declare {I} @llvm.smin.v8i32({I}, {I})", f"declare i32 @llvm.vector.reduce.smin.v8i32({I})",
        'attributes #0 = { nounwind "no-trapping-math"="true" }']
  return "\n".join(L) + "\n"

def keyed_ir(rows: int, cols: int, R: int) -> str:
  """The one-reduction form AVX-512 takes, written as well as AVX2 allows: per 8 floats an int32 order key (the sign
  folded in, NaN of either sign above +inf), paired with the countdown by two in-lane interleaves (no shifts) into
  two vectors of 4 int64 keys, then their max (a compare and a blend each: AVX2 has no 64-bit max)."""
  assert rows % R == 0 and cols % 8 == 0, (rows, cols, R)
  L4, lo_mask, hi_mask = "<4 x i64>", "<i32 0,i32 8,i32 1,i32 9,i32 4,i32 12,i32 5,i32 13>", "<i32 2,i32 10,i32 3,i32 11,i32 6,i32 14,i32 7,i32 15>"
  least = "<" + ",".join(["i64 -9223372036854775808"] * 4) + ">"
  L = [f"define void @keyed_{R}(ptr noalias %out, ptr noalias %in) #0 {{", "entry:", "  br label %rows", "rows:",
       "  %r = phi i32 [0, %entry], [%r1, %rowend]", f"  %rb = mul i32 %r, {R}", "  br label %loop", "loop:",
       "  %j = phi i32 [0, %rows], [%j1, %loop]",
       f"  %cd = phi {I} [<" + ",".join(f"i32 {cols - 1 - t}" for t in range(8)) + ">, %rows], [%cd1, %loop]"]
  for q in range(R):
    L += [f"  %a{q}_{h} = phi {L4} [{least}, %rows], [%an{q}_{h}, %loop]" for h in (0, 1)]
  for q in range(R):
    L += [f"  %row{q} = add i32 %rb, {q}", f"  %base{q} = mul i32 %row{q}, {cols}", f"  %ad{q} = add i32 %base{q}, %j",
          f"  %p{q} = getelementptr inbounds float, ptr %in, i32 %ad{q}", f"  %b{q} = load {I}, ptr %p{q}, align 4",
          f"  %s{q} = ashr {I} %b{q}, {_splat(31)}", f"  %t{q} = lshr {I} %s{q}, {_splat(1)}",
          f"  %k{q} = xor {I} %b{q}, %t{q}", f"  %ab{q} = and {I} %b{q}, {_splat(0x7fffffff)}",
          f"  %isnan{q} = icmp sgt {I} %ab{q}, {_splat(0x7f800000)}",
          f"  %kn{q} = select <8 x i1> %isnan{q}, {I} {_splat(0x7fffffff)}, {I} %k{q}"]
    for h, mask in ((0, lo_mask), (1, hi_mask)):
      L += [f"  %v{q}_{h} = shufflevector {I} %cd, {I} %kn{q}, <8 x i32> {mask}", f"  %w{q}_{h} = bitcast {I} %v{q}_{h} to {L4}",
            f"  %an{q}_{h} = call {L4} @llvm.smax.v4i64({L4} %a{q}_{h}, {L4} %w{q}_{h})"]
  L += [f"  %cd1 = sub {I} %cd, {_splat(8)}", "  %j1 = add nuw nsw i32 %j, 8", f"  %d = icmp slt i32 %j1, {cols}",
        "  br i1 %d, label %loop, label %rowend", "rowend:"]
  for q in range(R):
    L += [f"  %m{q} = call {L4} @llvm.smax.v4i64({L4} %an{q}_0, {L4} %an{q}_1)",
          f"  %ms{q} = call i64 @llvm.vector.reduce.smax.v4i64({L4} %m{q})", f"  %lw{q} = trunc i64 %ms{q} to i32",
          f"  %ix{q} = sub i32 {cols - 1}, %lw{q}", f"  %po{q} = getelementptr inbounds i32, ptr %out, i32 %row{q}",
          f"  store i32 %ix{q}, ptr %po{q}"]
  L += ["  %r1 = add i32 %r, 1", f"  %e = icmp slt i32 %r1, {rows // R}", "  br i1 %e, label %rows, label %exit",
        "exit:", "  ret void", "}", f"declare {L4} @llvm.smax.v4i64({L4}, {L4})",
        f"declare i64 @llvm.vector.reduce.smax.v4i64({L4})", 'attributes #0 = { nounwind "no-trapping-math"="true" }']
  return "\n".join(L) + "\n"

def form_ir(form: str, rows: int, cols: int) -> tuple[str, str]:
  """(name, IR) of a form on the command line: RxK (one pass, R rows side by side, K pairs a row) or keyedR."""
  if form.startswith("keyed"): return f"keyed int64 {form[5:]} rows", keyed_ir(rows, cols, int(form[5:]))
  R, K = map(int, form.split("x"))
  return f"one pass {R}x{K}", one_pass_ir(rows, cols, R, K)

SCALAR_PAIR_IR = """define void @scalar_pair(ptr noalias %out, ptr noalias %in, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %m = phi float [0xFFF0000000000000, %entry], [%m1, %loop]
  %ix = phi i32 [0, %entry], [%ix1, %loop]
  %p = getelementptr inbounds float, ptr %in, i32 %i
  %x = load float, ptr %p, align 4
  %c = fcmp fast ogt float %x, %m
  %m1 = select fast i1 %c, float %x, float %m
  %ix1 = select i1 %c, i32 %i, i32 %ix
  %i1 = add nuw nsw i32 %i, 1
  %d = icmp slt i32 %i1, %n
  br i1 %d, label %loop, label %exit
exit:
  store i32 %ix1, ptr %out
  ret void
}
"""

def test_data(rows: int, cols: int) -> np.ndarray:
  """Random rows with the cases argmax must get right: NaN (either sign; the first one wins), +-inf, equal values."""
  a = np.random.default_rng(0).random((rows, cols), dtype=np.float32)
  a[3, cols // 2] = np.nan
  a[5, 7], a[5, 9] = np.float32(-np.nan), np.nan
  a[7, :] = -np.inf
  a[9, :] = 1.0
  a[11, 100], a[11, cols - 9] = np.inf, np.inf
  a[13, :] = np.nan
  return a

def tinyplug_source(rows: int, cols: int) -> str:
  """The LLVM IR of tinyplug's one kernel for x.argmax(1) of rows x cols float32 (its default opts on this host)."""
  from tinyplug import Tensor
  from tinyplug.codegen import get_program
  from tinyplug.codegen.kernel import Kernel
  from tinyplug.device import Device
  from tinyplug.passes import heuristic
  from tinyplug.schedule import create_schedule
  dev = Device["CPU"]
  items = create_schedule([Tensor.empty(rows, cols, dtype="float32", device="CPU").argmax(1).uop])[0]
  assert len(items) == 1, "expected argmax along rows in one kernel"
  ast = items[0].ast
  return get_program(ast, dev.renderer, opts=heuristic.heuristic_opts(Kernel(ast, dev.renderer))).src

def jit(srcs: list[str]):
  """Optimise `srcs` with the cpu_llvm plugin's pipeline for this host and JIT them: (engine, function addresses)."""
  import llvmlite.binding as llvm
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  comp = LLVMCompiler()
  mods = []
  for i, src in enumerate(srcs):
    mod = llvm.parse_assembly(src)
    mod.verify()
    next(f for f in mod.functions if not f.is_declaration).name = f"kernel{i}"   # one engine: names must differ
    comp._optimize(mod, False)
    mods.append(mod)
  engine = llvm.create_mcjit_compiler(mods[0], comp.tm)
  for mod in mods[1:]: engine.add_module(mod)
  engine.finalize_object()
  return engine, [engine.get_function_address(f"kernel{i}") for i in range(len(mods))], comp, mods

def vectorizer_takes_scalar_pair() -> bool:
  """Whether LLVM's loop vectorizer turns a scalar loop carrying (max, index) into vector code."""
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  ir = LLVMCompiler().optimized_ir(SCALAR_PAIR_IR)
  return "<8 x" in ir or "<4 x" in ir

def batch_time(call, reps: int, batches: int = 10) -> float:
  """Thread CPU time of one call in microseconds: the best of `batches` batches of reps // batches calls (a clock
  read costs ~1 us in this VM, as much as a small kernel: one per batch, not per call)."""
  n, best = max(1, reps // batches), float("inf")
  for _ in range(batches):
    st = time.thread_time_ns()
    for _ in range(n): call()
    best = min(best, (time.thread_time_ns() - st) / n)
  return best / 1e3

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--rows", type=int, default=64)
  ap.add_argument("--cols", type=int, default=1000)
  ap.add_argument("--forms", nargs="+", default=["4x1", "8x1", "1x5", "keyed4"],
                  help="RxK: one pass, R rows side by side, K pairs a row; keyedR: one int64 key max, R rows")
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--reps", type=int, default=2000)
  ap.add_argument("--check-vectorizer", action="store_true")
  args = ap.parse_args()
  if args.check_vectorizer: print("LLVM vectorizes the scalar (max, index) loop:", vectorizer_takes_scalar_pair())
  data = test_data(args.rows, args.cols)
  want = data.argmax(1)
  forms = [form_ir(f, args.rows, args.cols) for f in args.forms]
  # tinyplug's kernel runs through the same JIT and call as the others (its launch path costs apart)
  _engine, addrs, *_ = jit([tinyplug_source(args.rows, args.cols)] + [src for _, src in forms])
  out = np.zeros(args.rows, np.int32)
  out_p, in_p = out.ctypes.data, data.ctypes.data   # taken once: `.ctypes` builds an object per call (~1 us)
  tp = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)(addrs[0])
  calls = {"empty call": ctypes.CDLL(None).getpid, "tinyplug (two passes)": lambda: tp(out_p, in_p, 0, 1)}
  for (name, _), addr in zip(forms, addrs[1:]):
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)
    calls[name] = (lambda fn=fn: fn(out_p, in_p))
  for name, call in calls.items():
    if name == "empty call": continue
    out[:] = -1
    call()
    assert np.array_equal(out, want), (name, np.nonzero(out != want))
  times: dict[str, list[float]] = {n: [] for n in calls}
  for rnd in range(args.rounds):
    for name in (list(calls) if rnd % 2 == 0 else list(calls)[::-1]):
      times[name].append(batch_time(calls[name], args.reps))
  np_call = batch_time(lambda: data.argmax(1), args.reps)
  print(f"argmax(1) of {args.rows}x{args.cols} float32, kernels alone through one ctypes call, thread time, "
        f"best batch of {args.reps // 10} calls, best / median of {args.rounds} rounds (all outputs checked against numpy)")
  for name, v in times.items(): print(f"  {name:24s} {min(v):8.2f} / {np.median(v):8.2f} us")
  print(f"  {'numpy (whole call)':24s} {np_call:8.2f} us")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
