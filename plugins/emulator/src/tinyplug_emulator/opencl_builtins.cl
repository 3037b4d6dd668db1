// OpenCL C 1.2 built-in functions for the emulator, written in OpenCL C so that clang gives them the same mangled
// names as the declarations a kernel sees (-fdeclare-opencl-builtins). Work-item functions and barriers call the
// runtime; math is computed per lane with the C library (half in float, rounded once per call).
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define OVL __attribute__((overloadable))

ulong tp_local_id(uint d); ulong tp_group_id(uint d); ulong tp_global_id(uint d);
ulong tp_local_size(uint d); ulong tp_num_groups(uint d); ulong tp_global_size(uint d); uint tp_work_dim(void);
void tp_barrier(void);

size_t OVL get_local_id(uint d) { return tp_local_id(d); }
size_t OVL get_group_id(uint d) { return tp_group_id(d); }
size_t OVL get_global_id(uint d) { return tp_global_id(d); }
size_t OVL get_local_size(uint d) { return tp_local_size(d); }
size_t OVL get_num_groups(uint d) { return tp_num_groups(d); }
size_t OVL get_global_size(uint d) { return tp_global_size(d); }
size_t OVL get_global_offset(uint d) { return 0; }
uint OVL get_work_dim(void) { return tp_work_dim(); }
void OVL barrier(cl_mem_fence_flags flags) { tp_barrier(); }
void OVL mem_fence(cl_mem_fence_flags flags) {}
void OVL read_mem_fence(cl_mem_fence_flags flags) {}
void OVL write_mem_fence(cl_mem_fence_flags flags) {}

// ---- per-lane helpers: V(T, N, body) defines the vector overloads of a function from its scalar one ----
#define LANES1(RT, T, N, F) RT##N OVL F(T##N x) { RT##N r; for (int i = 0; i < N; i++) r[i] = F(x[i]); return r; }
#define LANES2(RT, T, N, F) RT##N OVL F(T##N x, T##N y) { RT##N r; for (int i = 0; i < N; i++) r[i] = F(x[i], y[i]); return r; }
#define LANES3(RT, T, N, F) RT##N OVL F(T##N x, T##N y, T##N z) { RT##N r; for (int i = 0; i < N; i++) r[i] = F(x[i], y[i], z[i]); return r; }
#define ALL_WIDTHS(M, RT, T, F) M(RT, T, 2, F) M(RT, T, 3, F) M(RT, T, 4, F) M(RT, T, 8, F) M(RT, T, 16, F)

// ---- float math ----
#define MATH1(F, CF) \
  float OVL F(float x) { return __builtin_##CF##f(x); } \
  double OVL F(double x) { return __builtin_##CF(x); } \
  half OVL F(half x) { return (half)__builtin_##CF##f((float)x); } \
  ALL_WIDTHS(LANES1, float, float, F) ALL_WIDTHS(LANES1, double, double, F) ALL_WIDTHS(LANES1, half, half, F)
#define MATH2(F, CF) \
  float OVL F(float x, float y) { return __builtin_##CF##f(x, y); } \
  double OVL F(double x, double y) { return __builtin_##CF(x, y); } \
  half OVL F(half x, half y) { return (half)__builtin_##CF##f((float)x, (float)y); } \
  ALL_WIDTHS(LANES2, float, float, F) ALL_WIDTHS(LANES2, double, double, F) ALL_WIDTHS(LANES2, half, half, F)
#define MATH3(F, CF) \
  float OVL F(float x, float y, float z) { return __builtin_##CF##f(x, y, z); } \
  double OVL F(double x, double y, double z) { return __builtin_##CF(x, y, z); } \
  half OVL F(half x, half y, half z) { return (half)__builtin_##CF##f((float)x, (float)y, (float)z); } \
  ALL_WIDTHS(LANES3, float, float, F) ALL_WIDTHS(LANES3, double, double, F) ALL_WIDTHS(LANES3, half, half, F)

MATH1(sin, sin) MATH1(cos, cos) MATH1(tan, tan) MATH1(exp, exp) MATH1(exp2, exp2) MATH1(exp10, exp10)
MATH1(log, log) MATH1(log2, log2) MATH1(log10, log10) MATH1(sqrt, sqrt) MATH1(trunc, trunc) MATH1(floor, floor)
MATH1(ceil, ceil) MATH1(round, round) MATH1(rint, rint) MATH1(fabs, fabs) MATH1(asin, asin) MATH1(acos, acos)
MATH1(atan, atan) MATH1(sinh, sinh) MATH1(cosh, cosh) MATH1(tanh, tanh) MATH1(expm1, expm1) MATH1(log1p, log1p)
MATH1(erf, erf) MATH1(cbrt, cbrt)
MATH1(native_sin, sin) MATH1(native_cos, cos) MATH1(native_exp, exp) MATH1(native_exp2, exp2) MATH1(native_log, log)
MATH1(native_log2, log2) MATH1(native_sqrt, sqrt)
MATH2(pow, pow) MATH2(fmax, fmax) MATH2(fmin, fmin) MATH2(fmod, fmod) MATH2(atan2, atan2) MATH2(copysign, copysign)
MATH2(native_powr, pow) MATH2(powr, pow)
MATH3(fma, fma)

#define RSQRT(T, CT) T OVL rsqrt(T x) { return (T)(1.0 / __builtin_sqrt((double)(CT)x)); }
RSQRT(float, float) RSQRT(double, double) RSQRT(half, float)
ALL_WIDTHS(LANES1, float, float, rsqrt) ALL_WIDTHS(LANES1, double, double, rsqrt) ALL_WIDTHS(LANES1, half, half, rsqrt)
#define NATIVE_RECIP(T) T OVL native_recip(T x) { return (T)1 / x; } T OVL native_rsqrt(T x) { return rsqrt(x); } \
  T OVL native_divide(T x, T y) { return x / y; }
NATIVE_RECIP(float) NATIVE_RECIP(double) NATIVE_RECIP(half)
#define MAD(T) T OVL mad(T x, T y, T z) { return x * y + z; }
MAD(float) MAD(double) MAD(half)
ALL_WIDTHS(LANES3, float, float, mad) ALL_WIDTHS(LANES3, double, double, mad) ALL_WIDTHS(LANES3, half, half, mad)

// classification: scalars give 1/0 as int, vectors -1/0 in the integer type of the lane's size
#define CLASSIFY(F, EXPR) \
  int OVL F(float x) { return EXPR; } int OVL F(double x) { return EXPR; } int OVL F(half x) { return EXPR; } \
  CLASSIFY_V(F, float, int, 2) CLASSIFY_V(F, float, int, 3) CLASSIFY_V(F, float, int, 4) CLASSIFY_V(F, float, int, 8) \
  CLASSIFY_V(F, float, int, 16) CLASSIFY_V(F, double, long, 2) CLASSIFY_V(F, double, long, 3) \
  CLASSIFY_V(F, double, long, 4) CLASSIFY_V(F, double, long, 8) CLASSIFY_V(F, double, long, 16) \
  CLASSIFY_V(F, half, short, 2) CLASSIFY_V(F, half, short, 3) CLASSIFY_V(F, half, short, 4) \
  CLASSIFY_V(F, half, short, 8) CLASSIFY_V(F, half, short, 16)
#define CLASSIFY_V(F, T, IT, N) IT##N OVL F(T##N x) { IT##N r; for (int i = 0; i < N; i++) r[i] = F(x[i]) ? -1 : 0; return r; }
CLASSIFY(isnan, __builtin_isnan(x)) CLASSIFY(isinf, __builtin_isinf(x)) CLASSIFY(isfinite, __builtin_isfinite(x))
CLASSIFY(signbit, __builtin_signbit(x))

// ---- integer and common functions ----
#define MINMAX(T) T OVL max(T x, T y) { return x > y ? x : y; } T OVL min(T x, T y) { return x < y ? x : y; } \
  T OVL clamp(T x, T lo, T hi) { return min(max(x, lo), hi); } \
  ALL_WIDTHS(LANES2, T, T, max) ALL_WIDTHS(LANES2, T, T, min) ALL_WIDTHS(LANES3, T, T, clamp)
MINMAX(char) MINMAX(uchar) MINMAX(short) MINMAX(ushort) MINMAX(int) MINMAX(uint) MINMAX(long) MINMAX(ulong)
MINMAX(float) MINMAX(double) MINMAX(half)
#define ABS(T, UT) UT OVL abs(T x) { return x < 0 ? (UT)(-x) : (UT)x; } ALL_WIDTHS(LANES1, UT, T, abs)
#define ABSU(T) T OVL abs(T x) { return x; } ALL_WIDTHS(LANES1, T, T, abs)
ABS(char, uchar) ABS(short, ushort) ABS(int, uint) ABS(long, ulong) ABSU(uchar) ABSU(ushort) ABSU(uint) ABSU(ulong)

// select(a, b, c): c ? b : a per lane; a vector condition tests the lane's most significant bit
#define SELECT_S(T, CT) T OVL select(T a, T b, CT c) { return c ? b : a; }
#define SELECT_V(T, CT, N) T##N OVL select(T##N a, T##N b, CT##N c) { \
  T##N r; for (int i = 0; i < N; i++) r[i] = ((c[i] >> (sizeof(CT) * 8 - 1)) & 1) ? b[i] : a[i]; return r; }
#define SELECT(T, ST, UT) SELECT_S(T, ST) SELECT_S(T, UT) \
  SELECT_V(T, ST, 2) SELECT_V(T, ST, 3) SELECT_V(T, ST, 4) SELECT_V(T, ST, 8) SELECT_V(T, ST, 16) \
  SELECT_V(T, UT, 2) SELECT_V(T, UT, 3) SELECT_V(T, UT, 4) SELECT_V(T, UT, 8) SELECT_V(T, UT, 16)
SELECT(char, char, uchar) SELECT(uchar, char, uchar) SELECT(short, short, ushort) SELECT(ushort, short, ushort)
SELECT(int, int, uint) SELECT(uint, int, uint) SELECT(long, long, ulong) SELECT(ulong, long, ulong)
SELECT(float, int, uint) SELECT(double, long, ulong) SELECT(half, short, ushort)

// ---- vector loads and stores, in every address space ----
#define VLOAD_N(T, N, AS) T##N OVL vload##N(size_t i, const AS T *p) { \
  T##N r; for (int k = 0; k < N; k++) r[k] = p[i * N + k]; return r; }
#define VSTORE_N(T, N, AS) void OVL vstore##N(T##N v, size_t i, AS T *p) { for (int k = 0; k < N; k++) p[i * N + k] = v[k]; }
#define VLOADSTORE_AS(T, AS) VLOAD_N(T, 2, AS) VLOAD_N(T, 3, AS) VLOAD_N(T, 4, AS) VLOAD_N(T, 8, AS) VLOAD_N(T, 16, AS) \
  VSTORE_N(T, 2, AS) VSTORE_N(T, 3, AS) VSTORE_N(T, 4, AS) VSTORE_N(T, 8, AS) VSTORE_N(T, 16, AS)
#define VLOADSTORE(T) VLOADSTORE_AS(T, __global) VLOADSTORE_AS(T, __local) VLOADSTORE_AS(T, __private) \
  VLOAD_N(T, 2, __constant) VLOAD_N(T, 3, __constant) VLOAD_N(T, 4, __constant) VLOAD_N(T, 8, __constant) \
  VLOAD_N(T, 16, __constant)
VLOADSTORE(char) VLOADSTORE(uchar) VLOADSTORE(short) VLOADSTORE(ushort) VLOADSTORE(int) VLOADSTORE(uint)
VLOADSTORE(long) VLOADSTORE(ulong) VLOADSTORE(float) VLOADSTORE(double) VLOADSTORE(half)

// half in memory, float in registers (round to nearest even on store)
#define VHALF_N(N, AS) float##N OVL vload_half##N(size_t i, const AS half *p) { \
  float##N r; for (int k = 0; k < N; k++) r[k] = (float)p[i * N + k]; return r; }
#define VHALF_STORE_N(N, AS) void OVL vstore_half##N(float##N v, size_t i, AS half *p) { \
  for (int k = 0; k < N; k++) p[i * N + k] = (half)v[k]; }
#define VHALF_AS(AS) float OVL vload_half(size_t i, const AS half *p) { return (float)p[i]; } \
  VHALF_N(2, AS) VHALF_N(3, AS) VHALF_N(4, AS) VHALF_N(8, AS) VHALF_N(16, AS)
#define VHALF_STORE_AS(AS) void OVL vstore_half(float v, size_t i, AS half *p) { p[i] = (half)v; } \
  VHALF_STORE_N(2, AS) VHALF_STORE_N(3, AS) VHALF_STORE_N(4, AS) VHALF_STORE_N(8, AS) VHALF_STORE_N(16, AS)
VHALF_AS(__global) VHALF_AS(__local) VHALF_AS(__private) VHALF_AS(__constant)
VHALF_STORE_AS(__global) VHALF_STORE_AS(__local) VHALF_STORE_AS(__private)

// ---- conversions: C conversion rules (float to integer truncates), lane by lane for vectors ----
#define CONVERT_ONE(D, S) D OVL convert_##D(S x) { return (D)x; } \
  D##2 OVL convert_##D##2(S##2 x) { return __builtin_convertvector(x, D##2); } \
  D##3 OVL convert_##D##3(S##3 x) { return __builtin_convertvector(x, D##3); } \
  D##4 OVL convert_##D##4(S##4 x) { return __builtin_convertvector(x, D##4); } \
  D##8 OVL convert_##D##8(S##8 x) { return __builtin_convertvector(x, D##8); } \
  D##16 OVL convert_##D##16(S##16 x) { return __builtin_convertvector(x, D##16); }
#define CONVERT_TO(D) CONVERT_ONE(D, char) CONVERT_ONE(D, uchar) CONVERT_ONE(D, short) CONVERT_ONE(D, ushort) \
  CONVERT_ONE(D, int) CONVERT_ONE(D, uint) CONVERT_ONE(D, long) CONVERT_ONE(D, ulong) CONVERT_ONE(D, float) \
  CONVERT_ONE(D, double) CONVERT_ONE(D, half)
CONVERT_TO(char) CONVERT_TO(uchar) CONVERT_TO(short) CONVERT_TO(ushort) CONVERT_TO(int) CONVERT_TO(uint)
CONVERT_TO(long) CONVERT_TO(ulong) CONVERT_TO(float) CONVERT_TO(double) CONVERT_TO(half)
