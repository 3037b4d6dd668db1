# The GPU checks of the cuda plugin in one script, for a machine with an NVIDIA GPU whose python3 has torch, pytest,
# xdist, llvmlite, pluggy and NVIDIA's nvrtc wheel (no network needed). Run from the repository root:
#   OUT=/tmp/out [CONFORMANCE=<absolute path of a copy of ../shared/conformance, tests restored>] \
#     bash tools/device/gpu_check.sh [path to tinygrad-0.14.0 wheel, for the benchmark's peer]
# Logs land in $OUT. Each stage has its own time limit, so one hang cannot eat the machine's lease. tinygrad's suite
# runs first and alone: beside the other stages it did not finish in 175 s on an H200 (alone: 109 s with 6 jobs).
set -u; export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"; TG_WHEEL=${1:-}
P=$(command -v python3); H=$(dirname "$0")
echo "== $(date -u +%T) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
$P $H/devinstall.py "$($P -c 'import site; print(site.getsitepackages()[0])')" . plugins/cpu_llvm plugins/cuda plugins/emulator
[ -n "$TG_WHEEL" ] && $P -m pip install -q --no-index --no-deps --no-compile --target /tmp/tg "$TG_WHEEL"
clang_ok=$($P -c "from tinyplug_emulator.toolchain import find_clang; print(int(find_clang()[0] is not None))")
[ "$clang_ok" = 1 ] || export TINY_PLUGINS=-emulator   # no clang the emulator can use: its tests run in CI
if [ -n "${CONFORMANCE:-}" ]; then
  (cd /tmp && DEV=CUDA OUT_DIR=$OUT/conf JOBS=12 TEST_TIMEOUT=60 timeout 240 bash "$CONFORMANCE/run.sh" $P tinyplug > $OUT/conf.log 2>&1)
  grep -E "relative|tinygrad_suite" $OUT/conf.log | tail -3
fi
(timeout 170 $P -m pytest -q -n 2 -p no:cacheprovider plugins/cuda/tests > $OUT/cuda_tests.log 2>&1; echo "rc $?" >> $OUT/cuda_tests.log) &
(TINYPLUG_TEST_DEVICES=CUDA timeout 170 $P -m pytest -q -n 4 -p no:cacheprovider --pyargs tinyplug.testing > $OUT/opsuite.log 2>&1; echo "rc $?" >> $OUT/opsuite.log) &
(TINYPLUG_TEST_DEVICES=CUDA:PTX timeout 170 $P -m pytest -q -n 3 -p no:cacheprovider --pyargs tinyplug.testing > $OUT/opsuite_ptx.log 2>&1; echo "rc $?" >> $OUT/opsuite_ptx.log) &
(for tool in memcheck racecheck; do DEV=CUDA timeout 90 compute-sanitizer --tool $tool --error-exitcode 3 $P $H/sanitize_kernels.py 2>&1 | tail -4 | sed "s/^/[$tool] /"; done > $OUT/sanitizer.log 2>&1) &
wait
cat $OUT/sanitizer.log; for f in cuda_tests opsuite opsuite_ptx; do echo "--- $f"; grep -E "passed|failed|rc " $OUT/$f.log | tail -2; done
NVRTC_PATH=$($P -c "from tinyplug_cuda import nvrtc; print(nvrtc.library_path())") PYTHONPATH=/tmp/tg timeout 200 $P benchmarks/cuda_bench.py --json $OUT/bench.json 2>&1 | tee $OUT/bench.log
DEV=CUDA timeout 60 $P benchmarks/cuda_matmul.py --variants 2>&1 | tee $OUT/matmul.log
DEV=CUDA timeout 60 $P $H/kernel_variants.py --reps 8 2>&1 | tee $OUT/variants.log   # kernel times beside the wall clock
