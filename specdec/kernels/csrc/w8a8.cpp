// W8A8 linear layer for x86 CPUs: int8 weights with one fp32 scale per output channel, times int8
// activations quantized per block of 128 columns of each row on every call, summed in int32.
//
//   y[m, n] = (sum_b float(sum_{k in b} qx[m, k] * qw[n, k]) * sx[m, b]) * sw[n]  (+ bias[n])
//
// Each block b of row m is quantized from itself only (sx[m, b] = amax|x[m, b]| / 127), so an outlier
// channel coarsens the grid of its own 128 columns and not the whole row's. The sum over a block is exact
// integer arithmetic (at most 127 * 127 * 128 in magnitude, so its conversion to float is exact too), and
// the blocks are added in one fixed order, so a row's output is the same bits whether it is computed alone
// or among the K+1 rows of a speculative check. The float epilogue is one fixed sequence of IEEE
// operations, written once below and used by both instruction-set paths (the library is built with
// -ffp-contract=off, so no fused multiply-add changes its rounding).
//
// Three paths, chosen at run time (or forced, to test that they agree bit for bit):
// - AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes and adds 4 products into each int32
//   lane. The weights are stored as u8 = w + 128 (w XOR 0x80), the activations go in signed, and
//   128 * (the block's sum of q) is subtracted afterwards: a number per row and block, known when
//   the row is quantized, so no table per weight is read.
// - AVX2: the stored byte XOR 0x80 gives w back; vpmaddubsw(|w|, sign(q, w)) gives pairs of products
//   (each pair at most 2 * 127 * 127 = 32258, below int16's 32767: no saturation), then vpmaddwd with
//   ones adds the pairs into int32.
// - AMX (csrc/amx_tiles.h), for calls of several rows: tdpbsud multiplies 16 rows of signed activations by
//   the stored unsigned bytes of 16 channels, 64 columns at a time. A tile of weights is the packed
//   layout itself read with a stride of 128 bytes (one group: 4 columns of 16 channels a row), so nothing
//   is copied; 128 * qsum is subtracted as on the VNNI path.
//
// Packed weight layout, (tiles, groups, 32, 4) int8, tiles = ceil(N / 32), groups = ceil(K / 4):
//   packed[t][g][c][j] = qw[32 t + c][4 g + j] XOR 0x80, and 0x80 (w = 0) beyond N or K.
// One group of a tile is 128 bytes, two 64-byte vectors: each holds the 4 consecutive input columns of
// 16 output channels, lane c of the vector being channel c. A tile's groups follow each other, so the
// kernel reads a tile as one stream, and each tile is read from memory once for all rows of the call
// (on AVX-512, row blocks after the first read it again from cache; on AVX2 every pass of a sweep reads each
// activation block of it from L1 right after the first: below). An activation block is 32 groups.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "activation_blocks.h"
#include "kernel_entry.h"
#include "weight_stream.h"

namespace {

constexpr int64_t kTile = 32;  // output channels per tile
constexpr int64_t kGroup = 4;  // input columns per group (one int32 lane's worth of bytes)
constexpr int64_t kGroupsPerBlock = kBlock / kGroup;
constexpr int kRowsAvx512 = 8;  // rows per register block: 8 rows x 2 vectors = 16 zmm accumulators
constexpr int kRowsAvx2 = 4;    // 4 rows x 2 vectors = 8 ymm accumulators (AVX2 has 16 registers)
constexpr int kSweepAvx2 = 16;  // rows an AVX2 sweep of a tile takes, in blocks of kRowsAvx2, each block of weights read once from memory
// Auto runs calls of this many rows or more on AMX. One layer of the target's MLP shape (8960 x 1536, its
// weights in the last-level cache), AMX against VNNI on a 2-core Intel Xeon, medians of 15: 4 rows 0.65
// against 0.56 ms, 6 rows 0.54 / 0.50, 8 rows 0.53 / 0.58, 16 rows 0.67 / 0.91, 56 rows 1.57 / 2.39.
constexpr int64_t kAmxFromRows = 8;

bool has_avx2() { return __builtin_cpu_supports("avx2"); }

// ---- the products: one tile (32 output channels) by R rows ----------------------------------------

// Adds one block's int32 sums of R rows into the float partial sums: part[r] += float(sum[r]) * sx[r].
template <int R>
__attribute__((target("avx512f"))) inline void add_block_avx512(__m512i (&sum)[R][2], const float* sx, int64_t ldb, float* part) {
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r * ldb]);
    for (int h = 0; h < 2; ++h) {
      float* p = part + r * kTile + 16 * h;
      _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), _mm512_mul_ps(_mm512_cvtepi32_ps(sum[r][h]), s)));
    }
  }
}

// part[r * 32 + c] = sum over blocks b of float(sum_{k in b} q[r, k] * w[c, k]) * sx[r, b], for the R
// rows starting at xq (row stride ldx; sx and qsum: row stride ldb, one entry per block).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void tile_avx512(const int8_t* xq, int64_t ldx, const float* sx, const int32_t* qsum, int64_t ldb, const int8_t* w, int64_t groups,
                 float* part) {
  std::fill(part, part + R * kTile, 0.0f);
  __m512i sum[R][2];
  for (int64_t g0 = 0, b = 0; g0 < groups; g0 += kGroupsPerBlock, ++b) {
    for (int r = 0; r < R; ++r) {  // sum (w + 128) * q = sum w * q + 128 * qsum: start from -128 * qsum
      sum[r][0] = sum[r][1] = _mm512_set1_epi32(-128 * qsum[r * ldb + b]);
    }
    const int64_t g1 = std::min(groups, g0 + kGroupsPerBlock);
    const int8_t* wg = w + g0 * 2 * 64;
    for (int64_t g = g0; g < g1; ++g, wg += 2 * 64) {
      prefetch_ahead(wg);  // weight_stream.h
      const __m512i w0 = _mm512_loadu_si512(wg), w1 = _mm512_loadu_si512(wg + 64);  // channels 0-15, 16-31
      for (int r = 0; r < R; ++r) {
        int32_t four;  // the 4 activation bytes of columns 4g..4g+3 of row r, in every lane
        std::memcpy(&four, xq + r * ldx + kGroup * g, sizeof four);
        const __m512i a = _mm512_set1_epi32(four);
        sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], w0, a);
        sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], w1, a);
      }
    }
    add_block_avx512<R>(sum, sx + b, ldb, part);
  }
}

// ---- AVX2: half a tile (16 channels: bytes 0-63 or 64-127 of each group) by R rows -----------------
//
// One activation block (32 groups, 4 KiB of the tile) at a time: block_avx2 runs both halves and every
// block of rows on it before the next, so its bytes come from memory once and from L1 after. The two
// halves of the first row block each ask for every other group's bytes ahead (`stream`: the half's
// number; -1 for the other row blocks), so the memory is kept busy all along. Sweeping the whole tile
// once per half and row block read it from memory during the first sweep only, and the memory sat idle
// through the others.

// part[r][16 half, 16 half + 16) += float(block b's sums) * sx[r, b], for R rows (w: the tile).
template <int R>
__attribute__((target("avx2"))) void half_block_avx2(const int8_t* xq, int64_t ldx, const float* sx, int64_t ldb, const int8_t* w,
                                                     int64_t groups, int64_t b, int half, int stream, float* part) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_si256();
  const int64_t g0 = b * kGroupsPerBlock, g1 = std::min(groups, g0 + kGroupsPerBlock);
  const int8_t* wg = w + g0 * 2 * 64;
  for (int64_t g = g0; g < g1; ++g, wg += 2 * 64) {
    if (g % 2 == stream) prefetch_ahead(wg);  // weight_stream.h: this half's share of the stream
    // the stored bytes XOR 0x80: w itself, channels 0-7 and 8-15 of this half
    const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 64 * half)), flip);
    const __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 64 * half + 32)), flip);
    const __m256i abs0 = _mm256_abs_epi8(w0), abs1 = _mm256_abs_epi8(w1);  // |w| <= 127: an unsigned byte
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, xq + r * ldx + kGroup * g, sizeof four);
      const __m256i a = _mm256_set1_epi32(four);
      // |w| * (q * sign(w)) = q * w; pairs summed in int16 (no saturation), then into int32
      sum[r][0] = _mm256_add_epi32(sum[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(abs0, _mm256_sign_epi8(a, w0)), ones));
      sum[r][1] = _mm256_add_epi32(sum[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(abs1, _mm256_sign_epi8(a, w1)), ones));
    }
  }
  for (int r = 0; r < R; ++r) {  // part[r] += float(sum[r]) * sx[r, b]: the same operations as the AVX-512 path
    const __m256 s = _mm256_set1_ps(sx[r * ldb + b]);
    for (int v = 0; v < 2; ++v) {
      float* p = part + r * kTile + 16 * half + 8 * v;
      _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][v]), s)));
    }
  }
}

template <int R = kRowsAvx2>
void half_block_rows(int rows, const int8_t* xq, int64_t ldx, const float* sx, int64_t ldb, const int8_t* w, int64_t groups, int64_t b,
                     int half, int stream, float* part) {
  if constexpr (R > 1) {
    if (rows < R) return half_block_rows<R - 1>(rows, xq, ldx, sx, ldb, w, groups, b, half, stream, part);
  }
  half_block_avx2<R>(xq, ldx, sx, ldb, w, groups, b, half, stream, part);
}

// `rows` rows (at most kSweepAvx2) of one tile; part: rows x 32 floats.
void block_avx2(int rows, const int8_t* xq, int64_t ldx, const float* sx, const int32_t*, int64_t ldb, const int8_t* w, int64_t groups,
                float* part) {
  std::fill(part, part + rows * kTile, 0.0f);
  for (int64_t b = 0; b * kGroupsPerBlock < groups; ++b) {
    for (int r0 = 0; r0 < rows; r0 += kRowsAvx2) {
      for (int half = 0; half < 2; ++half)
        half_block_rows(std::min(kRowsAvx2, rows - r0), xq + r0 * ldx, ldx, sx + r0 * ldb, ldb, w, groups, b, half, r0 == 0 ? half : -1,
                        part + r0 * kTile);
    }
  }
}

// Dispatch on the number of rows in this block (a compile-time count keeps the sums in registers).
template <int R = kRowsAvx512>
void block_avx512(int rows, const int8_t* xq, int64_t ldx, const float* sx, const int32_t* qsum, int64_t ldb, const int8_t* w,
                  int64_t groups, float* part) {
  if constexpr (R > 1) {
    if (rows < R) return block_avx512<R - 1>(rows, xq, ldx, sx, qsum, ldb, w, groups, part);
  }
  tile_avx512<R>(xq, ldx, sx, qsum, ldb, w, groups, part);
}


#if SPECDEC_AMX
// ---- AMX: one tile (32 channels) by 16 rows of a row block ---------------------------------------

// part[r * 32 + c] as tile_avx512 gives it, for `rows` (at most 16) of the 16 rows starting at xq. xq must
// have 16 rows of Kp columns readable (the call pads its rows to whole tiles, with zeros); a tile
// configured by configure_tiles(). Columns past a multiple of 64 (a K that is not one) go through `pad`.
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw")))
void tile_amx(int rows, const int8_t* xq, int64_t ldx, const float* sx, const int32_t* qsum, int64_t ldb, const int8_t* w,
              int64_t groups, float* part) {
  alignas(64) int32_t sums[2][kAmxRows * 16];  // C tiles: 16 rows x 16 channels
  alignas(64) int8_t pad_x[kAmxRows * 64], pad_w[16 * 128];
  std::fill(part, part + rows * kTile, 0.0f);
  for (int64_t g0 = 0, b = 0; g0 < groups; g0 += kGroupsPerBlock, ++b) {
    const int64_t g1 = std::min(groups, g0 + kGroupsPerBlock);
    _tile_zero(3);
    _tile_zero(4);
    for (int64_t g = g0; g < g1; g += 16) {  // 64 columns a tile operation
      const int8_t *x = xq + kGroup * g, *wg = w + g * 2 * 64;
      int64_t ldw = 2 * 64, lda = ldx;
      if (g + 16 > groups) {  // the last columns: zeros (w = 0 is stored as 0x80) after the weight's own
        const int64_t n = groups - g;
        std::memset(pad_x, 0, sizeof pad_x);
        for (int r = 0; r < kAmxRows; ++r) std::memcpy(pad_x + r * 64, x + r * ldx, kGroup * n);
        std::memset(pad_w, 0x80, sizeof pad_w);
        std::memcpy(pad_w, wg, n * 2 * 64);
        x = pad_x, wg = pad_w, lda = 64;
      }
      for (int64_t line = 0; line < 16 * 2 * 64; line += 128) prefetch_ahead(wg + line);  // weight_stream.h
      _tile_loadd(0, x, lda);
      _tile_loadd(1, wg, ldw);  // channels 0-15: bytes 0-63 of each group
      _tile_loadd(2, wg + 64, ldw);  // channels 16-31
      _tile_dpbsud(3, 0, 1);
      _tile_dpbsud(4, 0, 2);
    }
    _tile_stored(3, sums[0], 64);
    _tile_stored(4, sums[1], 64);
    for (int r = 0; r < rows; ++r) {  // part[r] += float(sum - 128 * qsum) * sx: the VNNI path's integers and operations
      const __m512i shift = _mm512_set1_epi32(-128 * qsum[r * ldb + b]);
      const __m512 s = _mm512_set1_ps(sx[r * ldb + b]);
      for (int h = 0; h < 2; ++h) {
        const __m512i sum = _mm512_add_epi32(_mm512_load_si512(sums[h] + r * 16), shift);
        float* p = part + r * kTile + 16 * h;
        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), _mm512_mul_ps(_mm512_cvtepi32_ps(sum), s)));
      }
    }
  }
}

#endif  // SPECDEC_AMX

// ---- the float epilogue (the same code whatever the path) ----------------------------------------

template <typename T>
void epilogue(const float* part, int rows, int64_t n0, int64_t cols, const float* sw, const float* bias, T* y, int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = part[r * kTile + c] * sw[n0 + c];
      if (bias != nullptr) v = v + bias[n0 + c];
      y[r * ldy + n0 + c] = static_cast<T>(v);  // to bf16: round to nearest even
    }
  }
}

// ---- the operator --------------------------------------------------------------------------------

template <typename T>
void run(const T* x, T* y, int64_t M, int64_t K, int64_t N, const int8_t* packed, int64_t tiles, int64_t groups,
         const float* sw, const float* bias, int64_t path) {
  const int64_t Kp = groups * kGroup, blocks = (Kp + kBlock - 1) / kBlock;
  const bool vnni = path == kAvx512, amx = path == kAmx;
  std::vector<int8_t> q((amx ? (M + kAmxRows - 1) / kAmxRows * kAmxRows : M) * Kp);  // AMX: whole tiles of rows, zeros after M
  std::vector<float> sx(M * blocks);
  std::vector<int32_t> qsum(M * blocks);
  at::parallel_for(0, M, M * K >= 65536 ? 1 : M, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) quantize_row(x + m * K, K, Kp, q.data() + m * Kp, sx.data() + m * blocks, qsum.data() + m * blocks);
  });
  const int block = amx ? kAmxRows : vnni ? kRowsAvx512 : kSweepAvx2;
  const int64_t grain = tiles * groups * M >= 4096 ? 1 : tiles;  // small layers: one thread, no team wake-up
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    static_assert(kSweepAvx2 <= kAmxRows && kRowsAvx512 <= kAmxRows, "part holds the rows of one sweep");
    alignas(64) float part[kAmxRows * kTile];
    if (amx) configure_tiles(64);
    for (int64_t t = begin; t < end; ++t) {
      const int8_t* w = packed + t * groups * kTile * kGroup;
      const int64_t n0 = t * kTile, cols = std::min(kTile, N - n0);
      for (int64_t m0 = 0; m0 < M; m0 += block) {
        const int rows = static_cast<int>(std::min<int64_t>(block, M - m0));
        const int8_t* xq = q.data() + m0 * Kp;
        const float* s = sx.data() + m0 * blocks;
        const int32_t* qs = qsum.data() + m0 * blocks;
#if SPECDEC_AMX
        if (amx) tile_amx(rows, xq, Kp, s, qs, blocks, w, groups, part);
        else
#endif
        if (vnni) block_avx512(rows, xq, Kp, s, qs, blocks, w, groups, part);
        else block_avx2(rows, xq, Kp, s, qs, blocks, w, groups, part);
        epilogue(part, rows, n0, cols, sw, bias, y + m0 * N, N);
      }
    }
    if (amx) release_tiles();
  });
}

// x (..., K) fp32 or bf16; packed (tiles, groups, 32, 4) int8 (each byte w XOR 0x80); w_scale (N,) fp32;
// bias (N,) fp32 or None. Returns y (..., N) in x's dtype.
at::Tensor w8a8_linear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor& w_scale,
                       const std::optional<at::Tensor>& bias, int64_t N, int64_t path) {
  TORCH_CHECK(x_in.device().is_cpu(), "w8a8_linear runs on a CPU");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16, "w8a8_linear: x must be float32 or bfloat16");
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.dim() == 4 && packed.size(2) == kTile && packed.size(3) == kGroup && packed.is_contiguous(),
              "w8a8_linear: packed must be a contiguous (tiles, groups, 32, 4) int8 tensor");
  const int64_t tiles = packed.size(0), groups = packed.size(1), K = x_in.size(-1);
  TORCH_CHECK(K > (groups - 1) * kGroup && K <= groups * kGroup, "w8a8_linear: x has ", K, " columns, the weight ", groups * kGroup, " (padded)");
  TORCH_CHECK(N > (tiles - 1) * kTile && N <= tiles * kTile, "w8a8_linear: N = ", N, " does not match ", tiles, " tiles");
  TORCH_CHECK(w_scale.scalar_type() == at::kFloat && w_scale.numel() == N && w_scale.is_contiguous(), "w8a8_linear: w_scale must be (N,) float32");
  const float* b = checked_bias(bias, N, "w8a8_linear");
  const at::Tensor x = x_in.contiguous();
  const int64_t M = K > 0 ? x.numel() / K : 0;
  path = resolve_path(path, M, kAmxFromRows, "w8a8_linear", has_avx2(), "AVX2");
  at::Tensor y = output_for(x, N);
  if (M == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    run(x.data_ptr<float>(), y.data_ptr<float>(), M, K, N, packed.data_ptr<int8_t>(), tiles, groups, w_scale.data_ptr<float>(), b, path);
  } else {
    run(x.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), M, K, N, packed.data_ptr<int8_t>(), tiles, groups,
        w_scale.data_ptr<float>(), b, path);
  }
  return y;
}

// Which paths this CPU can run: bit 0 AVX2, bit 1 AVX-512 VNNI, bit 2 AMX-INT8.
int64_t w8a8_paths() { return path_bits(has_avx2()); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("w8a8_linear(Tensor x, Tensor packed, Tensor w_scale, Tensor? bias, int n, int path=0) -> Tensor");
  m.def("w8a8_paths() -> int", &w8a8_paths);
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("w8a8_linear", &w8a8_linear); }
