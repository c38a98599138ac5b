// Element-wise reductions for every (dtype, op) pair liboccl supports.
//
// fp16 and bf16 are accumulated in float and rounded once at the end, so a
// reduction over n ranks is as accurate as the CPU's. Loops are plain so the
// compiler vectorises them (-O3).
#include "internal.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <type_traits>

namespace occl {
namespace {

inline float half_to_float(uint16_t h) {
  _Float16 f;
  memcpy(&f, &h, 2);
  return float(f);
}
inline uint16_t float_to_half(float v) {
  _Float16 f = _Float16(v);
  uint16_t h;
  memcpy(&h, &f, 2);
  return h;
}
inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even, as c10::BFloat16
  return uint16_t(u >> 16);
}

template <typename T>
constexpr bool is_complex_v = false;
template <typename T>
constexpr bool is_complex_v<std::complex<T>> = true;

template <typename T>
T combine(T a, T b, occlRedOpKind_t k) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (k) {
      case occlSum: case occlMax: case occlBor: return a || b;
      case occlProd: case occlMin: case occlBand: return a && b;
      case occlBxor: return a != b;
      default: return a;
    }
  } else if constexpr (is_complex_v<T>) {
    return k == occlProd ? a * b : a + b;
  } else {
    switch (k) {
      case occlProd: return T(a * b);
      case occlMin: return (b < a || (std::is_floating_point_v<T> && std::isnan(b))) ? b : a;
      case occlMax: return (b > a || (std::is_floating_point_v<T> && std::isnan(b))) ? b : a;
      case occlBand: if constexpr (std::is_integral_v<T>) return T(a & b); else return a;
      case occlBor: if constexpr (std::is_integral_v<T>) return T(a | b); else return a;
      case occlBxor: if constexpr (std::is_integral_v<T>) return T(a ^ b); else return a;
      default: return T(a + b);  // sum, avg, premul_sum
    }
  }
}

// One loop per op so each is a tight, vectorisable loop.
template <typename T, typename F>
void apply2(T* d, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

template <typename T>
void reduce_typed(T* dst, const void* const* srcs, int nsrcs, size_t count,
                  occlRedOp_t op, int nranks) {
  const T* s0 = static_cast<const T*>(srcs[0]);
  const occlRedOpKind_t k = op.kind;
  if (k == occlPreMulSum) {
    // Accumulated block by block, so that dst may alias any source (the
    // TCP and zero-copy paths reduce in place into a rank's own input).
    const T f = T(op.scalar);
    constexpr size_t kBlock = 1024;
    T acc[kBlock];
    for (size_t base = 0; base < count; base += kBlock) {
      const size_t m = std::min(kBlock, count - base);
      for (size_t i = 0; i < m; ++i) acc[i] = T(f * s0[base + i]);
      for (int j = 1; j < nsrcs; ++j) {
        const T* s = static_cast<const T*>(srcs[j]) + base;
        for (size_t i = 0; i < m; ++i) acc[i] = T(acc[i] + f * s[i]);
      }
      memcpy(dst + base, acc, m * sizeof(T));
    }
    return;
  }
  const T* a = s0;
  for (int j = 1; j < nsrcs; ++j) {
    const T* b = static_cast<const T*>(srcs[j]);
    switch (k) {
      case occlSum: case occlAvg:
        if constexpr (std::is_same_v<T, bool>) apply2(dst, a, b, count, [](T x, T y) { return T(x || y); });
        else apply2(dst, a, b, count, [](T x, T y) { return T(x + y); });
        break;
      case occlProd:
        if constexpr (std::is_same_v<T, bool>) apply2(dst, a, b, count, [](T x, T y) { return T(x && y); });
        else apply2(dst, a, b, count, [](T x, T y) { return T(x * y); });
        break;
      default:
        apply2(dst, a, b, count, [k](T x, T y) { return combine<T>(x, y, k); });
    }
    a = dst;
  }
  if (nsrcs == 1 && dst != s0) memcpy(dst, s0, count * sizeof(T));
  if (k == occlAvg) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      for (size_t i = 0; i < count; ++i) dst[i] = T(dst[i] / T(nranks));
    } else if constexpr (!std::is_same_v<T, bool>) {
      for (size_t i = 0; i < count; ++i) dst[i] = T(dst[i] / T(nranks));
    }
  }
}

// fp16 / bf16: accumulate in float over a cache-sized block, round once.
template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void reduce_16(uint16_t* dst, const void* const* srcs, int nsrcs, size_t count,
               occlRedOp_t op, int nranks) {
  constexpr size_t kBlock = 2048;
  float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    const uint16_t* s0 = static_cast<const uint16_t*>(srcs[0]) + base;
    const float f = op.kind == occlPreMulSum ? float(op.scalar) : 1.0f;
    for (size_t i = 0; i < n; ++i) acc[i] = Load(s0[i]) * f;
    for (int j = 1; j < nsrcs; ++j) {
      const uint16_t* s = static_cast<const uint16_t*>(srcs[j]) + base;
      switch (op.kind) {
        case occlSum: case occlAvg:
          for (size_t i = 0; i < n; ++i) acc[i] += Load(s[i]);
          break;
        case occlPreMulSum:
          for (size_t i = 0; i < n; ++i) acc[i] += f * Load(s[i]);
          break;
        default:
          for (size_t i = 0; i < n; ++i) acc[i] = combine<float>(acc[i], Load(s[i]), op.kind);
      }
    }
    if (op.kind == occlAvg)
      for (size_t i = 0; i < n; ++i) acc[i] /= float(nranks);
    for (size_t i = 0; i < n; ++i) dst[base + i] = Store(acc[i]);
  }
}

}  // namespace

const char* type_name(occlDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int16", "uint16", "int32", "uint32",
                                "int64", "uint64", "float16", "bfloat16", "float32",
                                "float64", "bool", "complex64", "complex128"};
  return unsigned(t) < occlNumTypes ? names[t] : "invalid";
}

const char* op_name(occlRedOpKind_t k) {
  static const char* names[] = {"sum", "prod", "min", "max", "avg", "premul_sum",
                                "band", "bor", "bxor"};
  return unsigned(k) < occlNumOps ? names[k] : "invalid";
}

void check_reduction(occlDataType_t t, occlRedOp_t op) {
  if (unsigned(t) >= occlNumTypes) throw Error(occlInvalidArgument, format("invalid data type %d", int(t)));
  if (unsigned(op.kind) >= occlNumOps) throw Error(occlInvalidArgument, format("invalid reduce op %d", int(op.kind)));
  const bool integral = t <= occlUint64 || t == occlBool;
  const bool complex = t == occlComplex64 || t == occlComplex128;
  const bool bitwise = op.kind == occlBand || op.kind == occlBor || op.kind == occlBxor;
  if (bitwise && !integral)
    throw Error(occlInvalidArgument, format("reduce op %s needs an integer or bool type, not %s",
                                            op_name(op.kind), type_name(t)));
  if (complex && (op.kind == occlMin || op.kind == occlMax))
    throw Error(occlInvalidArgument, format("reduce op %s is not defined for %s",
                                            op_name(op.kind), type_name(t)));
  if (t == occlBool && (op.kind == occlAvg || op.kind == occlPreMulSum))
    throw Error(occlInvalidArgument, format("reduce op %s is not defined for bool", op_name(op.kind)));
}

namespace {
void reduce_block(void* dst, const void* const* srcs, int nsrcs, size_t count,
                  occlDataType_t dtype, occlRedOp_t op, int nranks) {
  switch (dtype) {
#define CASE(E, T) \
  case E: reduce_typed<T>(static_cast<T*>(dst), srcs, nsrcs, count, op, nranks); break;
    CASE(occlInt8, int8_t)
    CASE(occlUint8, uint8_t)
    CASE(occlInt16, int16_t)
    CASE(occlUint16, uint16_t)
    CASE(occlInt32, int32_t)
    CASE(occlUint32, uint32_t)
    CASE(occlInt64, int64_t)
    CASE(occlUint64, uint64_t)
    CASE(occlFloat32, float)
    CASE(occlFloat64, double)
    CASE(occlBool, bool)
    CASE(occlComplex64, std::complex<float>)
    CASE(occlComplex128, std::complex<double>)
#undef CASE
    case occlFloat16:
      reduce_16<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), srcs, nsrcs, count, op, nranks);
      break;
    case occlBFloat16:
      reduce_16<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), srcs, nsrcs, count, op, nranks);
      break;
    default:
      throw Error(occlInvalidArgument, format("invalid data type %d", int(dtype)));
  }
}

}  // namespace

// Cache-sized blocks: with more than two sources the partial result stays in
// L1/L2 between sources instead of making a trip to memory per source. A
// destination that aliases a source other than the first (in-place zero-copy
// all-reduce on rank > 0) is reduced through a small buffer, so the sources
// are always combined in rank order and every rank computes bit-identical
// results.
void reduce(void* dst, const void* const* srcs, int nsrcs, size_t count,
            occlDataType_t dtype, occlRedOp_t op, int nranks) {
  if (count == 0) return;
  const size_t es = occlTypeSize(dtype);
  if (!es) throw Error(occlInvalidArgument, format("invalid data type %d", int(dtype)));
  bool alias = false;
  for (int j = 1; j < nsrcs; ++j) alias = alias || srcs[j] == dst;
  constexpr size_t kBlockBytes = size_t(32) << 10;
  const size_t block = std::max<size_t>(1, kBlockBytes / es);
  if (!alias && (nsrcs <= 2 || count <= block)) {
    reduce_block(dst, srcs, nsrcs, count, dtype, op, nranks);
    return;
  }
  alignas(64) static thread_local char tmp[kBlockBytes + 64];
  std::vector<const void*> s(static_cast<size_t>(nsrcs));
  for (size_t base = 0; base < count; base += block) {
    const size_t n = std::min(block, count - base);
    for (int j = 0; j < nsrcs; ++j) s[size_t(j)] = static_cast<const char*>(srcs[j]) + base * es;
    char* d = static_cast<char*>(dst) + base * es;
    reduce_block(alias ? tmp : d, s.data(), nsrcs, n, dtype, op, nranks);
    if (alias) memcpy(d, tmp, n * es);
  }
}

}  // namespace occl
