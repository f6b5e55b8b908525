// W4A8 linear layer for x86 CPUs: 4-bit weights on GGUF's Q4_K grid times int8 activations quantized per
// block of 128 columns of each row on every call (activation_blocks.h, the same as w8a8.cpp's), summed in
// integers.
//
// A Q4_K super-block holds 256 weights of one output channel n: fp16 d and dmin, and per sub-block j of
// 32 weights a 6-bit scale sc[j] and a 6-bit minimum m[j]; weight k of sub-block j is
// d * sc[j] * q[k] - dmin * m[j], q in 0..15. For each half h (128 columns, 4 sub-blocks, one activation
// block) of super-block s:
//
//   S[m, n, h] = sum_{j in h} sc[n, j] * sum_{k in j} qx[m, k] * q[n, k]      (integers)
//   M[m, n, h] = sum_{j in h} m[n, j] * sum_{k in j} qx[m, k]                  (integers)
//   y[m, n]    = sum over halves, in order, of (float(S) * d[n, s] - float(M) * dmin[n, s]) * sx[m, h]  (+ bias[n])
//
// |S| <= 4 * 63 * 32 * 15 * 127 < 2^24 and |M| <= 4 * 63 * 32 * 127, so both are exact as floats too. The
// integer sums have no rounding, the halves are added in one fixed order, and the float epilogue is one
// fixed sequence of IEEE operations shared by every path (built with -ffp-contract=off): a row's output is
// the same bits alone or among the K+1 rows of a speculative check, and on any path.
//
// Three paths, chosen at run time for each call (or forced, to test that they agree bit for bit):
// - AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes, which is what q (0..15) and qx are: four
//   products into each int32 lane, 16 output channels a vector, two vectors a tile;
// - AVX2: vpmaddubsw(q, qx) gives pairs of products; a sub-block's pairs are added in int16 (at most
//   4 * 4 * 15 * 127 = 30480: no overflow), then vpmaddwd with the sub-block's sc adds them, scaled, into
//   int32, and M comes from int16 pairs of m and of the sums of qx (vpmaddwd) too; 8 channels a vector.
// In both, the 4-bit codes are unpacked to bytes in registers (a mask and a shift), never in memory.
// - AMX (csrc/amx_tiles.h), for calls of many rows: the codes of a half super-block are unpacked to bytes
//   in a scratch tile and multiplied by tiles of 16 rows (tdpbsud), one sub-block at a time; below.
//
// Packed layout, (tiles, supers, kRecord) uint8, tiles = ceil(N / 32), supers = Kp / 256: one record per
// 32 channels and super-block, read as one stream, and each tile read from memory once for all rows of the
// call (on AVX-512, row blocks after the first read it again from cache; on AVX2 every pass of a sweep reads
// each record from L1 right after the first: below):
//   codes [8 sub-blocks j][4 groups p][32 channels c][4 bytes i]: q[c][32j + 4p + i] | q[c][32j + 16 + 4p + i] << 4
//         (each (j, p) is two 64-byte vectors: channels 0-15 and 16-31, 4 columns of the low nibbles and 4 of the high)
//   sc    [8][32] uint8, m [8][32] uint8, d [32] fp16, dmin [32] fp16
// Channels beyond N have every field zero, so they contribute nothing (and are not written).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "activation_blocks.h"
#include "kernel_entry.h"
#include "weight_stream.h"

namespace {

constexpr int64_t kTile = 32;  // output channels per tile (two zmm of int32 lanes)
constexpr int64_t kSuper = 256;  // columns per Q4_K super-block
constexpr int64_t kSub = 32;  // columns per sub-block (one sc, one m)
constexpr int64_t kSubs = kSuper / kSub;  // 8
constexpr int64_t kHalfSubs = kBlock / kSub;  // sub-blocks per activation block: 4
constexpr int64_t kCodes = kSubs * kSub * kTile / 2;  // 4096 bytes of codes per record
constexpr int64_t kScOffset = kCodes, kMinOffset = kCodes + kSubs * kTile, kDOffset = kMinOffset + kSubs * kTile;
constexpr int64_t kDminOffset = kDOffset + 2 * kTile;
constexpr int64_t kRecord = kDminOffset + 2 * kTile;  // 4736 bytes: 4.625 bits a weight
constexpr int kRowsAvx512 = 6;  // rows per register block: 12 sums and 12 scaled sums in zmm (a check of 6 at once)
constexpr int kRowsAvx2 = 4;
constexpr int kSweepAvx2 = 16;  // rows an AVX2 sweep of a tile takes, in blocks of kRowsAvx2, each record read once from memory
// Auto runs calls of this many rows or more on AMX: unpacking the codes to bytes and scaling each
// sub-block's sums cost AMX about what a few rows cost VNNI. One layer of the target's MLP shape (8960 x
// 1536, in the last-level cache), AMX against VNNI on a 2-core Intel Xeon, medians of 15: 1 row 0.50
// against 0.30 ms, 8 rows 0.60 / 0.59, 12 rows 0.69 / 0.69, 16 rows 0.78 / 0.91, 56 rows 2.04 / 2.78.
constexpr int64_t kAmxFromRows = 16;

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"); }

inline int32_t four_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The rows' activations as the products read them: for R rows starting at xq (stride ldx), the sums of
// qx per sub-block as int16 (xsum16, stride lds; |sum| <= 32 * 127) and the scales per activation block
// (sx, stride ldb).
struct Rows {
  const int8_t* xq;
  int64_t ldx;
  const int16_t* xsum16;
  int64_t lds;
  const float* sx;
  int64_t ldb;

  Rows from_row(int64_t r) const { return {xq + r * ldx, ldx, xsum16 + r * lds, lds, sx + r * ldb, ldb}; }  // the rows from row r on
};

// ---- AVX-512 VNNI: one tile of 32 channels (two vectors) by R rows ------------------------------
//
// S and M are integers below 2^24. S is accumulated in float registers with fused multiply-adds (sc
// converted to float): every partial sum is an exact integer, the result the same in any order and on
// either path, and no slow 32-bit integer multiply is needed. M is summed in int32 by vpdpwssd, two
// sub-blocks a step: the m of sub-blocks j and j + 1 widened to int16 pairs once per tile and half, times
// the row's int16 pair of qx sums, so a row costs 4 instructions for M where a float sum costs 40. Each
// broadcast of 4 activation bytes feeds both vectors of the tile. With one or two rows, the low and the
// high nibbles' products go to separate accumulators: four chains of vpdpbusd instead of two, so the
// instruction's latency does not bound a step (integer sums: the same result).

// part[r] += (float(S) * d - float(M) * dmin) * sx for half h of super-block s (rec: that super-block's
// record) and R rows: S[r][v] the scaled sums of channels 16v..16v+15, M summed here. The one float
// sequence of the VNNI and AMX paths (the AVX2 path runs the same operations 8 channels at a time).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void add_half_avx512(const __m512 (&S)[R][2], const Rows& a,
                                                                                  const uint8_t* rec, int64_t s, int64_t h, float* part) {
  for (int v = 0; v < 2; ++v) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kDOffset + 32 * v)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kDminOffset + 32 * v)));
    __m512i mpair[kHalfSubs / 2];  // 16 channels' (m[j], m[j + 1]) as int16 pairs, j = 4h, 4h + 2
    for (int64_t q = 0; q < kHalfSubs / 2; ++q) {
      const uint8_t* mj = rec + kMinOffset + (h * kHalfSubs + 2 * q) * kTile + 16 * v;
      const __m128i m0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mj));
      const __m128i m1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mj + kTile));
      mpair[q] = _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(m0, m1), _mm_unpacklo_epi8(m0, m1)));
    }
    for (int r = 0; r < R; ++r) {
      const int16_t* xs = a.xsum16 + r * a.lds + s * kSubs + h * kHalfSubs;
      __m512i Mi = _mm512_setzero_si512();
      for (int64_t q = 0; q < kHalfSubs / 2; ++q) Mi = _mm512_dpwssd_epi32(Mi, mpair[q], _mm512_set1_epi32(four_bytes(reinterpret_cast<const int8_t*>(xs + 2 * q))));
      const __m512 M = _mm512_cvtepi32_ps(Mi);  // exact: |M| < 2^24
      const __m512 c = _mm512_sub_ps(_mm512_mul_ps(S[r][v], d), _mm512_mul_ps(M, dmin));
      float* out = part + r * kTile + 16 * v;
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), _mm512_mul_ps(c, _mm512_set1_ps(a.sx[r * a.ldb + s * 2 + h]))));
    }
  }
}

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512(const Rows& a, const uint8_t* rec, int64_t supers,
                                                                        float* part) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int i = 0; i < R * kTile; ++i) part[i] = 0.0f;
  for (int64_t s = 0; s < supers; ++s, rec += kRecord) {
    for (int64_t h = 0; h < kSubs / kHalfSubs; ++h) {
      __m512 S[R][2];
      for (int r = 0; r < R; ++r) S[r][0] = S[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 4  // with it GCC keeps S in registers over the sub-blocks (up to 4 rows; it spilled them from 4)
      for (int64_t j = h * kHalfSubs; j < (h + 1) * kHalfSubs; ++j) {
        const int64_t col = s * kSuper + j * kSub;
        constexpr bool split = R <= 2;  // separate low- and high-nibble accumulators (see above)
        __m512i sum[R][2], high[R][2];
        for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = high[r][0] = high[r][1] = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          const uint8_t* w = rec + (j * 4 + p) * 2 * 64;
          prefetch_ahead(w);  // weight_stream.h
          const __m512i v0 = _mm512_loadu_si512(w), v1 = _mm512_loadu_si512(w + 64);  // channels 0-15, 16-31
          const __m512i lo0 = _mm512_and_si512(v0, low4), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
          const __m512i lo1 = _mm512_and_si512(v1, low4), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
          for (int r = 0; r < R; ++r) {
            const int8_t* x = a.xq + r * a.ldx + col + 4 * p;
            const __m512i xlo = _mm512_set1_epi32(four_bytes(x)), xhi = _mm512_set1_epi32(four_bytes(x + 16));
            if constexpr (split) {
              sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], lo0, xlo);
              high[r][0] = _mm512_dpbusd_epi32(high[r][0], hi0, xhi);
              sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], lo1, xlo);
              high[r][1] = _mm512_dpbusd_epi32(high[r][1], hi1, xhi);
            } else {
              sum[r][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum[r][0], lo0, xlo), hi0, xhi);
              sum[r][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum[r][1], lo1, xlo), hi1, xhi);
            }
          }
        }
        if constexpr (split) {
          for (int r = 0; r < R; ++r)
            for (int v = 0; v < 2; ++v) sum[r][v] = _mm512_add_epi32(sum[r][v], high[r][v]);
        }
        for (int v = 0; v < 2; ++v) {
          const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kScOffset + j * kTile + 16 * v))));
          for (int r = 0; r < R; ++r) S[r][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][v]), sc, S[r][v]);
        }
      }
      for (int64_t line = 0; line < (kRecord - kCodes) / 2; line += 128) prefetch_ahead(rec + kCodes + h * (kRecord - kCodes) / 2 + line);  // the tail: sc, m, d, dmin
      add_half_avx512<R>(S, a, rec, s, h, part);
    }
  }
}

// ---- AVX2: a quarter of a tile (8 channels: bytes 32 * (q % 2) of vector q / 2) by R rows --------
//
// One super-block at a time: block_avx2 runs every quarter and every block of rows on a record before the
// next, so the record comes from memory once and from L1 after. The four quarters of the first row block
// each ask for a quarter of the stream ahead (`stream`, the quarter's number; -1 for the other row blocks),
// so the memory is kept busy all along. Sweeping the whole tile once per quarter and row block read it
// from memory during the first sweep only, and the memory sat idle through the others.

// part[r][c0, c0 + 8) += super-block s's two halves, for R rows (rec: that super-block's record).
template <int R>
__attribute__((target("avx2,fma,f16c"))) void quarter_super_avx2(const Rows& a, const uint8_t* rec, int64_t s, int quarter, int stream,
                                                                float* part) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const int64_t c0 = 8 * quarter;
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kDOffset + 2 * c0)));
  const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kDminOffset + 2 * c0)));
  if (stream == 0) {
    for (int64_t line = 0; line < kRecord - kCodes; line += 128) prefetch_ahead(rec + kCodes + line);  // the tail: sc, m, d, dmin
  }
  for (int64_t h = 0; h < kSubs / kHalfSubs; ++h) {
    __m256i S[R];  // int32: exact (|S| < 2^24), the same integers the AVX-512 path sums in floats
    for (int r = 0; r < R; ++r) S[r] = _mm256_setzero_si256();
    for (int64_t j = h * kHalfSubs; j < (h + 1) * kHalfSubs; ++j) {
      const int64_t col = s * kSuper + j * kSub;
      __m256i sum16[R];  // a sub-block's pairs of products in int16: at most 4 * 2 * 2 * 15 * 127 = 30480
      for (int r = 0; r < R; ++r) sum16[r] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        if (p == stream) prefetch_ahead(rec + (j * 4 + p) * 2 * 64);  // weight_stream.h: this quarter's share of the stream
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + (j * 4 + p) * 2 * 64 + 32 * quarter));
        const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.xq + r * a.ldx + col + 4 * p;
          const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(four_bytes(x)));
          const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(four_bytes(x + 16)));
          sum16[r] = _mm256_add_epi16(sum16[r], _mm256_add_epi16(plo, phi));
        }
      }
      // sc of each channel in both int16 halves of its lane: vpmaddwd scales and adds the lane's two sums
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kScOffset + j * kTile + c0)));
      const __m256i sc2 = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
      for (int r = 0; r < R; ++r) S[r] = _mm256_add_epi32(S[r], _mm256_madd_epi16(sum16[r], sc2));
    }
    __m256i mpair[kHalfSubs / 2];  // 8 channels' (m[j], m[j + 1]) as int16 pairs, j = 4h, 4h + 2
    for (int64_t q = 0; q < kHalfSubs / 2; ++q) {
      const uint8_t* mj = rec + kMinOffset + (h * kHalfSubs + 2 * q) * kTile + c0;
      const __m128i m0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mj));
      const __m128i m1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mj + kTile));
      mpair[q] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m0, m1));
    }
    for (int r = 0; r < R; ++r) {
      const int16_t* xs = a.xsum16 + r * a.lds + s * kSubs + h * kHalfSubs;
      __m256i Mi = _mm256_setzero_si256();
      for (int64_t q = 0; q < kHalfSubs / 2; ++q)
        Mi = _mm256_add_epi32(Mi, _mm256_madd_epi16(mpair[q], _mm256_set1_epi32(four_bytes(reinterpret_cast<const int8_t*>(xs + 2 * q)))));
      const __m256 c = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(S[r]), d), _mm256_mul_ps(_mm256_cvtepi32_ps(Mi), dmin));
      float* out = part + r * kTile + c0;
      _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), _mm256_mul_ps(c, _mm256_set1_ps(a.sx[r * a.ldb + s * 2 + h]))));
    }
  }
}

#if SPECDEC_AMX
// ---- AMX: one tile (32 channels) by a block of up to 16 rows -------------------------------------
//
// Per half super-block: the codes of its 4 sub-blocks are unpacked to bytes in the layout tdpbsud reads
// (8 rows of 4 columns x 16 channels: the low nibbles of the 4 groups, then the high ones, which is where
// the packed layout keeps them); then one operation per sub-block and 16 channels multiplies them by the
// 32 columns of 16 activation rows. Each sub-block's int32 sums are scaled by its sc into S as on the
// VNNI path (the same integers, exact in floats), and add_half_avx512 ends the half. All of a half's
// bytes are written before the tile loads read them, and all its sums stored before vector loads read
// them: a tile load does not take bytes from stores still in flight, so interleaving the two stalled it.

// Rows [r0, r0 + R): S from the half's stored sums, then add_half_avx512.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void add_half_rows(const int32_t (*sums)[2][kAmxRows * 16], const __m512 (&sc)[kHalfSubs][2],
                                                                          int r0, const Rows& a, const uint8_t* rec, int64_t s, int64_t h,
                                                                          float* part) {
  __m512 S[R][2];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 2; ++v) {
      S[r][v] = _mm512_setzero_ps();
      for (int j = 0; j < kHalfSubs; ++j)
        S[r][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[j][v] + (r0 + r) * 16)), sc[j][v], S[r][v]);
    }
  }
  add_half_avx512<R>(S, a.from_row(r0), rec, s, h, part + r0 * kTile);
}

// All `rows` rows of the call at a.xq (row blocks of 16, each unpacked half read by all of them), which
// must be readable to a whole tile of rows (the call pads them with zeros); part: rows x 32 floats; tiles
// configured by configure_tiles(kSub).
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vnni")))
void tile_amx(int64_t rows, const Rows& a, const uint8_t* rec, int64_t supers, float* part) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  alignas(64) uint8_t codes[kHalfSubs][2][8 * 64];  // tdpbsud's weight tiles: sub-block, channels 0-15 / 16-31
  alignas(64) int32_t sums[kHalfSubs][2][kAmxRows * 16];  // its int32 sums: rows x 16 channels
  std::fill(part, part + rows * kTile, 0.0f);
  for (int64_t s = 0; s < supers; ++s, rec += kRecord) {
    for (int64_t h = 0; h < kSubs / kHalfSubs; ++h) {
      __m512 sc[kHalfSubs][2];
      for (int j = 0; j < kHalfSubs; ++j) {
        const int64_t sub = h * kHalfSubs + j;
        for (int p = 0; p < 4; ++p) {
          const uint8_t* w = rec + (sub * 4 + p) * 2 * 64;
          prefetch_ahead(w);  // weight_stream.h
          for (int v = 0; v < 2; ++v) {
            const __m512i c = _mm512_loadu_si512(w + 64 * v);
            _mm512_store_si512(codes[j][v] + 64 * p, _mm512_and_si512(c, low4));  // columns 4p..4p+3
            _mm512_store_si512(codes[j][v] + 64 * (4 + p), _mm512_and_si512(_mm512_srli_epi16(c, 4), low4));  // 16 + 4p..
          }
        }
        for (int v = 0; v < 2; ++v)
          sc[j][v] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kScOffset + sub * kTile + 16 * v))));
      }
      for (int64_t m0 = 0; m0 < rows; m0 += kAmxRows) {
        const int block = static_cast<int>(std::min<int64_t>(kAmxRows, rows - m0));
        const Rows ab = a.from_row(m0);
        for (int j = 0; j < kHalfSubs; ++j) {
          _tile_loadd(0, ab.xq + s * kSuper + (h * kHalfSubs + j) * kSub, ab.ldx);
          _tile_loadd(1, codes[j][0], 64);
          _tile_loadd(2, codes[j][1], 64);
          _tile_zero(3);
          _tile_zero(4);
          _tile_dpbsud(3, 0, 1);
          _tile_dpbsud(4, 0, 2);
          _tile_stored(3, sums[j][0], 64);
          _tile_stored(4, sums[j][1], 64);
        }
        float* pb = part + m0 * kTile;
        int r0 = 0;
        for (; r0 + 4 <= block; r0 += 4) add_half_rows<4>(sums, sc, r0, ab, rec, s, h, pb);
        for (; r0 < block; ++r0) add_half_rows<1>(sums, sc, r0, ab, rec, s, h, pb);
      }
    }
  }
}

#endif  // SPECDEC_AMX

// Dispatch on the number of rows in this block (a compile-time count keeps the sums in registers).
template <int R = kRowsAvx512>
void block_avx512(int rows, const Rows& a, const uint8_t* rec, int64_t supers, float* part) {
  if constexpr (R > 1) {
    if (rows < R) return block_avx512<R - 1>(rows, a, rec, supers, part);
  }
  tile_avx512<R>(a, rec, supers, part);
}

template <int R = kRowsAvx2>
void quarter_super_rows(int rows, const Rows& a, const uint8_t* rec, int64_t s, int quarter, int stream, float* part) {
  if constexpr (R > 1) {
    if (rows < R) return quarter_super_rows<R - 1>(rows, a, rec, s, quarter, stream, part);
  }
  quarter_super_avx2<R>(a, rec, s, quarter, stream, part);  // R rows' 8 sums in 16 ymm
}

// `rows` rows (at most kSweepAvx2) of one tile; part: rows x 32 floats.
void block_avx2(int rows, const Rows& a, const uint8_t* rec, int64_t supers, float* part) {
  std::fill(part, part + rows * kTile, 0.0f);
  for (int64_t s = 0; s < supers; ++s, rec += kRecord) {
    for (int r0 = 0; r0 < rows; r0 += kRowsAvx2) {
      for (int quarter = 0; quarter < 4; ++quarter)
        quarter_super_rows(std::min(kRowsAvx2, rows - r0), a.from_row(r0), rec, s, quarter, r0 == 0 ? quarter : -1, part + r0 * kTile);
    }
  }
}

// ---- the operator --------------------------------------------------------------------------------

template <typename T>
void run(const T* x, T* y, int64_t M, int64_t K, int64_t N, const uint8_t* packed, int64_t tiles, int64_t supers,
         const float* bias, int64_t path) {
  const int64_t Kp = supers * kSuper, blocks = Kp / kBlock, subs = Kp / kSub;
  const bool vnni = path == kAvx512, amx = path == kAmx;
  std::vector<int8_t> q((amx ? (M + kAmxRows - 1) / kAmxRows * kAmxRows : M) * Kp);  // AMX: whole tiles of rows, zeros after M
  std::vector<float> sx(M * blocks);
  std::vector<int32_t> qsum(M * blocks);
  std::vector<int16_t> xsum16(M * subs);
  at::parallel_for(0, M, M * K >= 65536 ? 1 : M, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const int8_t* qm = q.data() + m * Kp;
      quantize_row(x + m * K, K, Kp, q.data() + m * Kp, sx.data() + m * blocks, qsum.data() + m * blocks);
      for (int64_t j = 0; j < subs; ++j) {
        int32_t sum = 0;
        for (int64_t k = 0; k < kSub; ++k) sum += qm[j * kSub + k];
        xsum16[m * subs + j] = static_cast<int16_t>(sum);  // |sum| <= 32 * 127
      }
    }
  });
  const int block = vnni ? kRowsAvx512 : kSweepAvx2;  // rows a VNNI or AVX2 sweep of a tile runs at a time (AMX runs them all)
  const int64_t grain = tiles * supers * M >= 256 ? 1 : tiles;  // small layers: one thread, no team wake-up
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    alignas(64) float block_part[std::max(kRowsAvx512, kSweepAvx2) * kTile];
    std::vector<float> amx_part(amx ? M * kTile : 0);  // AMX: every row of the call at once (empty, unallocated, otherwise)
    float* part = amx ? amx_part.data() : block_part;
    if (amx) configure_tiles(kSub);
    for (int64_t t = begin; t < end; ++t) {
      const uint8_t* rec = packed + t * supers * kRecord;
      const int64_t n0 = t * kTile, cols = std::min(kTile, N - n0);
      for (int64_t m0 = 0; m0 < M; m0 += amx ? M : block) {  // AMX: every row block in one call
        const int64_t rows = amx ? M : std::min<int64_t>(block, M - m0);
        const Rows a{q.data() + m0 * Kp, Kp, xsum16.data() + m0 * subs, subs, sx.data() + m0 * blocks, blocks};
#if SPECDEC_AMX
        if (amx) tile_amx(rows, a, rec, supers, part);
        else
#endif
        if (vnni) block_avx512(static_cast<int>(rows), a, rec, supers, part);
        else block_avx2(static_cast<int>(rows), a, rec, supers, part);
        for (int64_t r = 0; r < rows; ++r) {  // the epilogue, the same code whatever the path
          for (int64_t c = 0; c < cols; ++c) {
            float v = part[r * kTile + c];
            if (bias != nullptr) v = v + bias[n0 + c];
            y[(m0 + r) * N + n0 + c] = static_cast<T>(v);  // to bf16: round to nearest even
          }
        }
      }
    }
    if (amx) release_tiles();
  });
}

// x (..., K) fp32 or bf16; packed (tiles, supers, kRecord) uint8; bias (N,) fp32 or None. Returns y (..., N)
// in x's dtype.
at::Tensor w4a8_linear(const at::Tensor& x_in, const at::Tensor& packed, const std::optional<at::Tensor>& bias, int64_t N,
                       int64_t path) {
  TORCH_CHECK(x_in.device().is_cpu(), "w4a8_linear runs on a CPU");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16, "w4a8_linear: x must be float32 or bfloat16");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 3 && packed.size(2) == kRecord && packed.is_contiguous(),
              "w4a8_linear: packed must be a contiguous (tiles, supers, ", kRecord, ") uint8 tensor");
  const int64_t tiles = packed.size(0), supers = packed.size(1), K = x_in.size(-1);
  TORCH_CHECK(K > (supers - 1) * kSuper && K <= supers * kSuper, "w4a8_linear: x has ", K, " columns, the weight ", supers * kSuper,
              " (padded)");
  TORCH_CHECK(N > (tiles - 1) * kTile && N <= tiles * kTile, "w4a8_linear: N = ", N, " does not match ", tiles, " tiles");
  const float* b = checked_bias(bias, N, "w4a8_linear");
  const at::Tensor x = x_in.contiguous();
  const int64_t M = K > 0 ? x.numel() / K : 0;
  path = resolve_path(path, M, kAmxFromRows, "w4a8_linear", has_avx2(), "AVX2 (with FMA and F16C)");
  at::Tensor y = output_for(x, N);
  if (M == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    run(x.data_ptr<float>(), y.data_ptr<float>(), M, K, N, packed.data_ptr<uint8_t>(), tiles, supers, b, path);
  } else {
    run(x.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), M, K, N, packed.data_ptr<uint8_t>(), tiles, supers, b, path);
  }
  return y;
}

// Which paths this CPU can run: bit 0 AVX2, bit 1 AVX-512 VNNI, bit 2 AMX-INT8.
int64_t w4a8_paths() { return path_bits(has_avx2()); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("w4a8_linear(Tensor x, Tensor packed, Tensor? bias, int n, int path=0) -> Tensor");
  m.def("w4a8_paths() -> int", &w4a8_paths);
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("w4a8_linear", &w4a8_linear); }
