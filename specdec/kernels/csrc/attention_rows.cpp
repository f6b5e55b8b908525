// Attention over a KV cache, one query row at a time in a fixed order: the same bits for a row
// whatever else shares the pass (batch invariance).
//
//   out[b, i, h] = sum_t p[t] v[b, g, key_t] / sum_t p[t],  p[t] = exp(s[t] - max_t s),
//   s[t] = scale * (q[b, h, i] . k[b, g, key_t]),  g = h / (H / KV),
//
// where key_0 < key_1 < ... are the keys row i may see: mask[b, 0, i, j] true, or, with no mask, the
// causal rule j <= C - L + i (the row's own position in a cache of C positions fed L new ones).
//
// torch's CPU attention sums over keys in blocks whose layout depends on the query length and on
// the key span it is handed (the whole cache with a mask, or exactly the valid keys), so a row's
// output changed in its last bits between a one-token pass and a check of several tokens; the int8
// activation rounding of the next layer turns such bits into whole quantization steps. Here every
// sum of a row runs over that row's own valid keys only, in key order, with one fixed vector layout,
// and each (batch, key/value head, row) is one work item computed alone: a row does not see the
// query length, the cache's capacity, the masked keys or the thread that ran it.
//
// Arithmetic in fp32 whatever the cache's dtype (bf16 keys and values are widened exactly); the
// exponential is one fixed polynomial (Cephes' expf, about 1 ulp) used for every score. The library
// is built with -ffp-contract=off, so no fused multiply-add changes a rounding.
//
// Two paths, the same bits (tests/test_batch_invariance.py forces each and compares them): AVX2, 8
// lanes; and AVX-512, which runs the same chain of operations in every lane, 16 lanes at a time. Its
// scores hold two query heads a vector (the key's 8 columns broadcast to both halves, each half the
// 8-lane path's sum for its head), its weighted values and exponentials 16 columns or scores a
// vector (each lane's sum independent of the others), and the softmax's total adds the two halves of
// each 16 in the 8-lane path's order. So a row's bits do not depend on the CPU's vector width either.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_entry.h"

namespace {

constexpr int kLanes = 8;       // fp32 lanes of an AVX2 vector
constexpr int kWide = 16;       // fp32 lanes of an AVX-512 vector
constexpr int kMaxGroup = 16;   // query heads per key/value head this kernel takes (paths: kernel_entry.h's Path, less kAmx)

bool has_avx512() { return __builtin_cpu_supports("avx512f"); }

__attribute__((target("avx2"))) inline __m256 widen8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2"))) inline __m256 widen8(const c10::BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // bf16 -> fp32: the high 16 bits
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The 8 lanes added in one fixed order: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
__attribute__((target("avx2"))) inline float lane_sum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// exp(x) for 8 lanes: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes' degree-5 polynomial, times 2^n.
// Below -87.3 (e^x under the smallest normal float) it gives 0.
__attribute__((target("avx2"))) inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(c));
  }
  y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(y, r), r), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(bits)));
}

#define SPECDEC_AVX512 __attribute__((target("avx2,avx512f")))

SPECDEC_AVX512 inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
SPECDEC_AVX512 inline __m512 widen16(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
SPECDEC_AVX512 inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
SPECDEC_AVX512 inline __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
SPECDEC_AVX512 inline __m512 both_halves(__m256 v) {
  const __m512 w = _mm512_castps256_ps512(v);
  return _mm512_shuffle_f32x4(w, w, 0x44);  // 128-bit lanes 0, 1, 0, 1
}

// exp8's operations on 16 lanes (the same rounding in each: round to nearest, then the same polynomial).
SPECDEC_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(c));
  }
  y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(y, r), r), r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~under), y, _mm512_castsi512_ps(bits));  // 0 where under, as exp8's andnot
}

constexpr int kHeadsAtOnce = 8;  // query heads whose sums run side by side (independent chains: the adds' latency overlaps)

// scores[j * padded + t] = scale * (q_j . k[key_t]) for NH heads j (qf: NH rows of D floats): each dot
// sums 8 lanes in column order, then the lanes (lane_sum), then the tail (D % 8) in order. The heads run
// side by side over one widened key, each its own chain of the same operations it would run alone.
template <int NH, typename T>
__attribute__((target("avx2"))) void head_scores(const float* qf, const T* kb, int64_t kstride, const int32_t* keys, int64_t n,
                                                 int64_t D, float scale, float* scores, int64_t padded) {
  for (int64_t t = 0; t < n; ++t) {
    const T* kr = kb + keys[t] * kstride;
    __m256 acc[NH];
    for (int j = 0; j < NH; ++j) acc[j] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + kLanes <= D; d += kLanes) {
      const __m256 kv = widen8(kr + d);
      for (int j = 0; j < NH; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(_mm256_loadu_ps(qf + j * D + d), kv));
    }
    for (int j = 0; j < NH; ++j) {
      float sum = lane_sum(acc[j]);
      for (int64_t e = d; e < D; ++e) sum += qf[j * D + e] * static_cast<float>(kr[e]);
      scores[j * padded + t] = sum * scale;
    }
  }
}

// acc[j * D + d] = sum_t p_j[t] v[key_t, d], in key order, for NH heads j (p_j at p + j * padded) and the
// columns from d0 on: 8 columns at a time held in registers over all the keys, each widened value row read
// once for the NH heads.
template <int NH, typename T>
__attribute__((target("avx2"))) void head_values(const float* p, int64_t padded, const T* vb, int64_t vstride, const int32_t* keys,
                                                 int64_t n, int64_t D, float* acc, int64_t d0 = 0) {
  int64_t d = d0;
  for (; d + kLanes <= D; d += kLanes) {
    __m256 a[NH];
    for (int j = 0; j < NH; ++j) a[j] = _mm256_setzero_ps();
    for (int64_t t = 0; t < n; ++t) {
      const __m256 vv = widen8(vb + keys[t] * vstride + d);
      for (int j = 0; j < NH; ++j) a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(_mm256_set1_ps(p[j * padded + t]), vv));
    }
    for (int j = 0; j < NH; ++j) _mm256_storeu_ps(acc + j * D + d, a[j]);
  }
  for (; d < D; ++d) {
    for (int j = 0; j < NH; ++j) {
      float sum = 0.0f;
      for (int64_t t = 0; t < n; ++t) sum += p[j * padded + t] * static_cast<float>(vb[keys[t] * vstride + d]);
      acc[j * D + d] = sum;
    }
  }
}

// ---- AVX-512: the same sums, 16 lanes a vector ------------------------------------------------------

// head_scores for NP pairs of heads, two heads a vector: the key's 8 columns in both halves, head 2i's
// query in the low half and head 2i + 1's in the high (qpair: per pair, D / 8 chunks of 16 floats). Each
// half is head_scores's chain for its head, lane_sum and the tail included: the same bits.
template <int NP, typename T>
SPECDEC_AVX512 void pair_scores(const float* qpair, const float* qf, const T* kb, int64_t kstride, const int32_t* keys, int64_t n,
                                int64_t D, float scale, float* scores, int64_t padded) {
  const int64_t chunks = D / kLanes;
  for (int64_t t = 0; t < n; ++t) {
    const T* kr = kb + keys[t] * kstride;
    __m512 acc[NP];
    for (int i = 0; i < NP; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512 kv = both_halves(widen8(kr + c * kLanes));
      for (int i = 0; i < NP; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_loadu_ps(qpair + (i * chunks + c) * kWide), kv));
    }
    for (int i = 0; i < NP; ++i) {
      for (int half = 0; half < 2; ++half) {
        const int64_t j = 2 * i + half;
        float sum = lane_sum(half == 0 ? low_half(acc[i]) : high_half(acc[i]));
        for (int64_t e = chunks * kLanes; e < D; ++e) sum += qf[j * D + e] * static_cast<float>(kr[e]);
        scores[j * padded + t] = sum * scale;
      }
    }
  }
}

// head_values, 16 columns a vector (each lane the same column's chain), the last 8 or fewer as there.
template <int NH, typename T>
SPECDEC_AVX512 void wide_values(const float* p, int64_t padded, const T* vb, int64_t vstride, const int32_t* keys, int64_t n,
                                int64_t D, float* acc) {
  int64_t d = 0;
  for (; d + kWide <= D; d += kWide) {
    __m512 a[NH];
    for (int j = 0; j < NH; ++j) a[j] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; ++t) {
      const __m512 vv = widen16(vb + keys[t] * vstride + d);
      for (int j = 0; j < NH; ++j) a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_set1_ps(p[j * padded + t]), vv));
    }
    for (int j = 0; j < NH; ++j) _mm512_storeu_ps(acc + j * D + d, a[j]);
  }
  if (d < D) head_values<NH>(p, padded, vb, vstride, keys, n, D, acc, d);
}

// p[t] = exp(p[t] - top) for t < n and 0 for n <= t < padded, from t0 on, 8 at a time; returns total plus
// each 8 in order.
__attribute__((target("avx2"))) __m256 exps8(float* p, int64_t t0, int64_t n, int64_t padded, float top, __m256 total) {
  const __m256 vtop = _mm256_set1_ps(top);
  for (int64_t t = t0; t < padded; t += kLanes) {  // lanes past n are set to 0 after the exponential
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + t), vtop));
    if (t + kLanes > n) {
      alignas(32) float lanes[kLanes];
      _mm256_store_ps(lanes, e);
      for (int64_t u = n - t; u < kLanes; ++u) lanes[u] = 0.0f;
      e = _mm256_load_ps(lanes);
    }
    _mm256_storeu_ps(p + t, e);
    total = _mm256_add_ps(total, e);
  }
  return total;
}

// exps8 from 0, 16 at a time while whole 16s fit in padded: each 16's two halves added to the total in
// order, as exps8 adds them.
SPECDEC_AVX512 __m256 exps16(float* p, int64_t n, int64_t padded, float top) {
  const __m512 vtop = _mm512_set1_ps(top);
  __m256 total = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + kWide <= padded; t += kWide) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + t), vtop));
    if (t + kWide > n) e = _mm512_maskz_mov_ps(static_cast<__mmask16>((1u << (n - t)) - 1), e);  // 8 < n - t < 16 (padded: n rounded up to 8)
    _mm512_storeu_ps(p + t, e);
    total = _mm256_add_ps(_mm256_add_ps(total, low_half(e)), high_half(e));
  }
  return exps8(p, t, n, padded, top, total);
}

// The heads [h0, h0 + count) of a work item, count <= kHeadsAtOnce, as NH = count (a compile-time count
// keeps the chains in registers).
template <int NH = kHeadsAtOnce, typename T>
void heads_scores(int count, const float* qf, const T* kb, int64_t kstride, const int32_t* keys, int64_t n, int64_t D, float scale,
                  float* scores, int64_t padded) {
  if constexpr (NH > 1) {
    if (count < NH) return heads_scores<NH - 1>(count, qf, kb, kstride, keys, n, D, scale, scores, padded);
  }
  head_scores<NH>(qf, kb, kstride, keys, n, D, scale, scores, padded);
}

template <int NH = kHeadsAtOnce, typename T>
void heads_values(int count, const float* p, int64_t padded, const T* vb, int64_t vstride, const int32_t* keys, int64_t n, int64_t D,
                  float* acc) {
  if constexpr (NH > 1) {
    if (count < NH) return heads_values<NH - 1>(count, p, padded, vb, vstride, keys, n, D, acc);
  }
  head_values<NH>(p, padded, vb, vstride, keys, n, D, acc);
}

template <int NP = kHeadsAtOnce / 2, typename T>
void pairs_scores(int pairs, const float* qpair, const float* qf, const T* kb, int64_t kstride, const int32_t* keys, int64_t n, int64_t D,
                  float scale, float* scores, int64_t padded) {
  if constexpr (NP > 1) {
    if (pairs < NP) return pairs_scores<NP - 1>(pairs, qpair, qf, kb, kstride, keys, n, D, scale, scores, padded);
  }
  pair_scores<NP>(qpair, qf, kb, kstride, keys, n, D, scale, scores, padded);
}

template <int NH = kHeadsAtOnce, typename T>
void wide_heads_values(int count, const float* p, int64_t padded, const T* vb, int64_t vstride, const int32_t* keys, int64_t n,
                       int64_t D, float* acc) {
  if constexpr (NH > 1) {
    if (count < NH) return wide_heads_values<NH - 1>(count, p, padded, vb, vstride, keys, n, D, acc);
  }
  wide_values<NH>(p, padded, vb, vstride, keys, n, D, acc);
}

struct Shape {
  int64_t B, H, KV, L, C, D, group;
};

// One work item: batch b, key/value head g, query row i, for the `group` query heads sharing g; Wide: the
// AVX-512 path. scores: scratch of group * (C + kLanes) floats; keys: scratch of C ints; qf, qpair and acc:
// group * D floats.
template <typename T, bool Wide>
__attribute__((target("avx2"))) void row(const T* q, const T* k, const T* v, const bool* mask, T* out, const Shape& s,
                                         const int64_t* qs, const int64_t* ks, const int64_t* vs, float scale, int64_t b,
                                         int64_t g, int64_t i, float* scores, int32_t* keys, float* qf, float* qpair, float* acc) {
  int64_t n = 0;  // the keys this row sees, in order
  if (mask != nullptr) {
    const bool* m = mask + (b * s.L + i) * s.C;
    for (int64_t j = 0; j < s.C; ++j) if (m[j]) keys[n++] = static_cast<int32_t>(j);
  } else {
    for (int64_t j = 0; j <= s.C - s.L + i; ++j) keys[n++] = static_cast<int32_t>(j);
  }
  const int64_t padded = (n + kLanes - 1) / kLanes * kLanes, G = s.group, chunks = s.D / kLanes;
  for (int64_t h = 0; h < G; ++h) {
    const T* qr = q + b * qs[0] + (g * G + h) * qs[1] + i * qs[2];
    for (int64_t d = 0; d < s.D; ++d) qf[h * s.D + d] = static_cast<float>(qr[d]);
  }
  if constexpr (Wide) {  // pair_scores' layout: heads 2i and 2i + 1 side by side, 8 columns each
    for (int64_t h = 0; h + 1 < G; h += 2)
      for (int64_t c = 0; c < chunks; ++c)
        for (int half = 0; half < 2; ++half)
          std::copy_n(qf + (h + half) * s.D + c * kLanes, kLanes, qpair + ((h / 2) * chunks + c) * kWide + half * kLanes);
  }
  const T* kb = k + b * ks[0] + g * ks[1];
  for (int64_t h0 = 0; h0 < G; h0 += kHeadsAtOnce) {
    const int count = static_cast<int>(std::min<int64_t>(kHeadsAtOnce, G - h0));
    if constexpr (Wide) {
      const int pairs = count / 2;  // an odd last head runs alone on the 8-lane path
      if (pairs > 0) pairs_scores(pairs, qpair + (h0 / 2) * chunks * kWide, qf + h0 * s.D, kb, ks[2], keys, n, s.D, scale, scores + h0 * padded, padded);
      if (count % 2 == 1) heads_scores(1, qf + (h0 + count - 1) * s.D, kb, ks[2], keys, n, s.D, scale, scores + (h0 + count - 1) * padded, padded);
    } else {
      heads_scores(count, qf + h0 * s.D, kb, ks[2], keys, n, s.D, scale, scores + h0 * padded, padded);
    }
  }
  std::vector<float> sums(G);
  for (int64_t h = 0; h < G; ++h) {
    float* p = scores + h * padded;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < n; ++t) top = std::max(top, p[t]);
    if constexpr (Wide) sums[h] = lane_sum(exps16(p, n, padded, top));
    else sums[h] = lane_sum(exps8(p, 0, n, padded, top, _mm256_setzero_ps()));
  }
  const T* vb = v + b * vs[0] + g * vs[1];
  for (int64_t h0 = 0; h0 < G; h0 += kHeadsAtOnce) {
    const int count = static_cast<int>(std::min<int64_t>(kHeadsAtOnce, G - h0));
    if constexpr (Wide) wide_heads_values(count, scores + h0 * padded, padded, vb, vs[2], keys, n, s.D, acc + h0 * s.D);
    else heads_values(count, scores + h0 * padded, padded, vb, vs[2], keys, n, s.D, acc + h0 * s.D);
  }
  for (int64_t h = 0; h < G; ++h) {
    T* o = out + ((b * s.L + i) * s.H + g * G + h) * s.D;  // out is (B, L, H, D), contiguous
    for (int64_t d = 0; d < s.D; ++d) o[d] = static_cast<T>(n > 0 ? acc[h * s.D + d] / sums[h] : 0.0f);
  }
}

template <typename T>
void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const bool* mask, at::Tensor& out, const Shape& s, float scale,
         bool wide) {
  const int64_t qs[3] = {q.stride(0), q.stride(1), q.stride(2)}, ks[3] = {k.stride(0), k.stride(1), k.stride(2)},
                vs[3] = {v.stride(0), v.stride(1), v.stride(2)};
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t items = s.B * s.KV * s.L;
  const int64_t work = s.H * s.L * s.C * s.D;  // multiply-adds of the whole call, about
  at::parallel_for(0, items, work >= (1 << 18) ? 1 : items, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(s.group * (s.C + kLanes)), qf(s.group * s.D), qpair(wide ? s.group * s.D : 0), acc(s.group * s.D);
    std::vector<int32_t> keys(s.C);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item % s.L, g = (item / s.L) % s.KV, b = item / (s.L * s.KV);
      if (wide) row<T, true>(qp, kp, vp, mask, op, s, qs, ks, vs, scale, b, g, i, scores.data(), keys.data(), qf.data(), qpair.data(), acc.data());
      else row<T, false>(qp, kp, vp, mask, op, s, qs, ks, vs, scale, b, g, i, scores.data(), keys.data(), qf.data(), qpair.data(), acc.data());
    }
  });
}

// q (B, H, L, D), k and v (B, KV, C, D) of q's dtype (fp32 or bf16, last dim contiguous); mask None
// (causal) or bool (B or 1, 1, L, C); path 0 (auto: AVX-512 where the CPU has it), 1 (AVX2) or 2 (AVX-512).
// Returns (B, L, H, D) in q's dtype.
at::Tensor attention_rows(const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in, const std::optional<at::Tensor>& mask,
                          double scale, int64_t path) {
  TORCH_CHECK(__builtin_cpu_supports("avx2"), "attention_rows: this CPU has no AVX2");
  TORCH_CHECK(path == kAuto || path == kAvx2 || path == kAvx512, "attention_rows: path must be 0 (auto), 1 (avx2) or 2 (avx512), got ", path);
  TORCH_CHECK(path != kAvx512 || has_avx512(), "attention_rows: this CPU has no AVX-512");
  const bool wide = path == kAvx512 || (path == kAuto && has_avx512());
  TORCH_CHECK(q.device().is_cpu() && k_in.device().is_cpu() && v_in.device().is_cpu(), "attention_rows runs on a CPU");
  TORCH_CHECK(q.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "attention_rows: q, k and v must be 4-dimensional");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16, "attention_rows: q must be float32 or bfloat16");
  TORCH_CHECK(k_in.scalar_type() == q.scalar_type() && v_in.scalar_type() == q.scalar_type(), "attention_rows: k and v must have q's dtype");
  const at::Tensor k = k_in.stride(-1) == 1 ? k_in : k_in.contiguous(), v = v_in.stride(-1) == 1 ? v_in : v_in.contiguous();
  const at::Tensor qc = q.stride(-1) == 1 ? q : q.contiguous();
  Shape s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), 0};
  TORCH_CHECK(k.size(0) == s.B && v.sizes() == k.sizes() && k.size(3) == s.D, "attention_rows: k and v must be (B, KV, C, D) with q's B and D");
  TORCH_CHECK(s.KV > 0 && s.H % s.KV == 0 && s.H / s.KV <= kMaxGroup, "attention_rows: query heads must be a multiple of key/value heads");
  s.group = s.H / s.KV;
  TORCH_CHECK(mask.has_value() || s.C >= s.L, "attention_rows: a causal pass needs the cache to hold its own rows");
  at::Tensor m;
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 4 && mask->size(-1) == s.C && mask->size(-2) == s.L,
                "attention_rows: the mask must be bool (B, 1, L, C)");
    m = mask->expand({s.B, 1, s.L, s.C}).contiguous();
  }
  at::Tensor out = at::empty({s.B, s.L, s.H, s.D}, q.options());
  if (out.numel() == 0) return out;
  const bool* mp = mask.has_value() ? m.data_ptr<bool>() : nullptr;
  if (q.scalar_type() == at::kFloat) run<float>(qc, k, v, mp, out, s, static_cast<float>(scale), wide);
  else run<c10::BFloat16>(qc, k, v, mp, out, s, static_cast<float>(scale), wide);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("attention_rows(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale, int path=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("attention_rows", &attention_rows); }
