// The openreg random stream: Philox4x32-10, counter-based, as on CUDA.
//
// The rule every openreg random kernel follows (docs/rng.md):
//
//   * A generator's state is (seed, offset), two uint64 (CUDA's layout).
//     The offset is a multiple of 4 and counts *elements* of one stream.
//   * A random operator that fills n elements takes the generator's current
//     offset as its base b and advances the offset by n rounded up to a
//     multiple of 4 (CUDA's round-up: every kernel starts on a Philox block).
//   * Element i of the result (its row-major index in the result's shape)
//     is stream position p = b + i. Position p owns lane p % 4 of the Philox
//     blocks with counter (p / 4, j), j = 0, 1, 2, ...: its j-th 32-bit word
//     is  Philox4x32-10(key = seed, counter = {p/4 lo, p/4 hi, j lo, j hi})[p % 4].
//
// So a position's numbers do not depend on how many threads the kernel ran
// on, or on which part of a tensor a call fills: drawing n elements at
// offset b gives exactly positions b..b+n of the stream, and a tensor drawn
// in two calls (the second at offset b + n1) equals the tensor drawn at once.
// That is what DTensor's offset-based RNG tracker relies on.
//
// No torch header here: this is the part of a vendor's device RNG that would
// live in its kernels (curand's Philox on CUDA).
#pragma once

#include <cstdint>

namespace torch_openreg {
namespace philox {

struct Block {
  uint32_t w[4];
};

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl)

// One Philox4x32-10 block: counter (c0..c3), key (k0, k1).
inline Block block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                   uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(kM0) * c0, p1 = uint64_t(kM1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = uint32_t(p1);
    c2 = n2;
    c3 = uint32_t(p0);
    k0 += kW0;
    k1 += kW1;
  }
  return Block{{c0, c1, c2, c3}};
}

// The j-th block of the group of four positions starting at 4 * group.
inline Block group_block(uint64_t seed, uint64_t group, uint64_t j) {
  return block(uint32_t(group), uint32_t(group >> 32), uint32_t(j), uint32_t(j >> 32),
               uint32_t(seed), uint32_t(seed >> 32));
}

// Word j of stream position p (the rule above, one value at a time).
inline uint32_t word(uint64_t seed, uint64_t p, uint64_t j) {
  return group_block(seed, p >> 2, j).w[p & 3];
}

// The first `J` words of four consecutive positions 4*group .. 4*group+3:
// out[lane][j]. Kernels use this: one block per word index for four elements.
template <int J>
inline void group_words(uint64_t seed, uint64_t group, uint32_t (&out)[4][J]) {
  for (int j = 0; j < J; ++j) {
    const Block b = group_block(seed, group, uint64_t(j));
    for (int lane = 0; lane < 4; ++lane) out[lane][j] = b.w[lane];
  }
}

// Calls f(i, words) for every element i of the groups [g0, g1) of a fill of
// n elements at base offset `base` (a multiple of 4): words are the first J
// words of position base + i. Kernels split the groups between threads.
template <int J, typename F>
inline void for_groups(uint64_t seed, uint64_t base, int64_t n, int64_t g0, int64_t g1, F&& f) {
  uint32_t w[4][J];
  for (int64_t g = g0; g < g1; ++g) {
    group_words<J>(seed, base / 4 + static_cast<uint64_t>(g), w);
    const int64_t i0 = g * 4;
    const int64_t lanes = n - i0 < 4 ? n - i0 : 4;
    for (int64_t lane = 0; lane < lanes; ++lane) f(i0 + lane, w[lane]);
  }
}

// Uniform doubles and floats from words, in [0, 1): the low 53 (24) bits,
// as ATen's uniform_real transformation takes them.
inline uint64_t u64(uint32_t lo, uint32_t hi) { return (uint64_t(hi) << 32) | lo; }
inline double to_unit_double(uint64_t v) {
  return double(v & ((uint64_t(1) << 53) - 1)) * (1.0 / double(uint64_t(1) << 53));
}
inline float to_unit_float(uint32_t v) {
  return float(v & ((uint32_t(1) << 24) - 1)) * (1.0f / float(uint32_t(1) << 24));
}

// A word as a uniform in [0, 1) with 32-bit resolution: bernoulli's
// u < p (bernoulli_, dropout's mask, SDPA's fused mask alike).
inline double to_unit32(uint32_t v) { return double(v) * (1.0 / 4294967296.0); }

// The offset a call that fills n elements consumes: n rounded up to 4.
inline uint64_t increment_for(uint64_t n) { return (n + 3) / 4 * 4; }

}  // namespace philox
}  // namespace torch_openreg
