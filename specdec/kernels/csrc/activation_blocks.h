// Activation quantization shared by this library's int8-activation kernels (w8a8.cpp, w4a8.cpp): each
// block of kBlock = 128 columns of a row gets its own scale sx = amax|x| / 127 and q = round-half-even(x / sx)
// in [-127, 127], computed from that block alone, so a row quantizes the same way whatever else is in the
// call. Both kernels include this one definition: a row's int8 activations are the same bits in either.

#pragma once

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

constexpr int64_t kBlock = 128;  // input columns per activation scale

__attribute__((target("avx2"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2"))) inline __m256 load8(const c10::BFloat16* p) {
  // bf16 -> fp32 is exact: the 16 bits become the high half of the float
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float as_float(float v) { return v; }
inline float as_float(c10::BFloat16 v) { return static_cast<float>(v); }

// Clamp to [-127, 127] the way vmaxps / vminps do (a NaN becomes -127), so the scalar tail matches.
inline float clamp127(float r) {
  r = r > -127.0f ? r : -127.0f;
  return r < 127.0f ? r : 127.0f;
}

// The columns [0, n) of one block: returns s = amax|x| / 127, writes q = round-half-even(x / s),
// clamped to [-127, 127], and returns the sum of those q in *qsum. Division and rounding are IEEE
// operations: the vector body and the scalar tail give the same q for the same x.
template <typename T>
__attribute__((target("avx2"))) float quantize_block(const T* x, int64_t n, int8_t* q, int32_t* qsum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(load8(x + k), abs_mask));
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float amax = 0.0f;
  for (float v : lanes) amax = std::max(amax, v);
  for (; k < n; ++k) amax = std::max(amax, std::fabs(as_float(x[k])));
  *qsum = 0;
  if (!(amax > 0.0f)) {  // an all-zero block: q = 0, s = 0, so its products are exactly 0
    std::memset(q, 0, n);
    return 0.0f;
  }
  const float s = amax / 127.0f;
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (k = 0; k + 8 <= n; k += 8) {
    __m256 r = _mm256_round_ps(_mm256_div_ps(load8(x + k), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    const __m256i i32 = _mm256_cvtps_epi32(r);  // exact: r is a whole number in [-127, 127]
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packs_epi16(i16, i16));
  }
  for (; k < n; ++k) q[k] = static_cast<int8_t>(clamp127(std::nearbyint(as_float(x[k]) / s)));
  int32_t sum = 0;
  for (k = 0; k < n; ++k) sum += q[k];
  *qsum = sum;
  return s;
}

// One row of K columns, in blocks of kBlock: q (Kp bytes, zero beyond K), sx and qsum (one per block).
template <typename T>
void quantize_row(const T* x, int64_t K, int64_t Kp, int8_t* q, float* sx, int32_t* qsum) {
  const int64_t blocks = (Kp + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * kBlock, n = std::max<int64_t>(0, std::min(kBlock, K - k0));
    sx[b] = quantize_block(x + k0, n, q + k0, qsum + b);
  }
  std::memset(q + K, 0, Kp - K);  // padding columns: q = 0 (their weights are zero too)
}

}  // namespace
