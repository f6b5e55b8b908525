// W8A8 linear layer for x86 CPUs: int8 weights with one fp32 scale per output channel, times int8
// activations quantized per row on every call, summed in int32.
//
//   y[m, n] = float(sum_k qx[m, k] * qw[n, k]) * sx[m] * sw[n]  (+ bias[n])
//
// Each row m is quantized from itself only (sx[m] = amax|x[m, :]| / 127), and the sum over k is exact
// integer arithmetic, so a row's output is the same bits whether it is computed alone or among the
// K+1 rows of a speculative check. The float epilogue is one fixed expression, written once below and
// used by both instruction-set paths (the library is built with -ffp-contract=off, so no fused
// multiply-add changes its rounding).
//
// Two paths, chosen at run time (or forced, to test that they agree bit for bit):
// - AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes and adds 4 products into each int32
//   lane. Activations go in as u8 = q + 128, and 128 * colsum(qw[n, :]) is subtracted afterwards.
// - AVX2: vpmaddubsw(|w|, sign(q, w)) gives pairs of products (each pair at most 2 * 127 * 127 = 32258,
//   below int16's 32767: no saturation), then vpmaddwd with ones adds the pairs into int32.
//
// Packed weight layout, (tiles, groups, 32, 4) int8, tiles = ceil(N / 32), groups = ceil(K / 4):
//   packed[t][g][c][j] = qw[32 t + c][4 g + j], zero beyond N or K.
// One group of a tile is 128 bytes, two 64-byte vectors: each holds the 4 consecutive input columns of
// 16 output channels, lane c of the vector being channel c. A tile's groups follow each other, so the
// kernel reads a tile as one stream, and each tile is read from memory once for all rows of the call
// (row blocks after the first read it again from cache).

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

namespace {

constexpr int64_t kTile = 32;  // output channels per tile
constexpr int64_t kGroup = 4;  // input columns per group (one int32 lane's worth of bytes)
constexpr int kRowsAvx512 = 8;  // rows per register block: 8 rows x 2 vectors = 16 zmm accumulators
constexpr int kRowsAvx2 = 4;    // 4 rows x 2 vectors = 8 ymm accumulators (AVX2 has 16 registers)

enum Path : int64_t { kAuto = 0, kAvx2 = 1, kAvx512 = 2 };

bool has_avx2() { return __builtin_cpu_supports("avx2"); }
bool has_avx512_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

// ---- activation quantization (shared by both paths) ----------------------------------------------

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

// One row: returns s = amax|x| / 127 and writes q = round-half-even(x / s), clamped to [-127, 127],
// as Kp bytes (zero beyond K), each XOR 0x80 when `offset` (u8 = q + 128 for vpdpbusd). Division and
// rounding are IEEE operations: the vector body and the scalar tail give the same q for the same x.
template <typename T>
__attribute__((target("avx2"))) float quantize_row(const T* x, int64_t K, int64_t Kp, int8_t* q, bool offset) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(load8(x + k), abs_mask));
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float amax = 0.0f;
  for (float v : lanes) amax = std::max(amax, v);
  for (; k < K; ++k) amax = std::max(amax, std::fabs(as_float(x[k])));
  const int8_t shift = offset ? static_cast<int8_t>(0x80) : 0;
  if (!(amax > 0.0f)) {  // an all-zero row: q = 0, s = 0, so the product is exactly 0
    std::memset(q, static_cast<uint8_t>(shift), Kp);
    return 0.0f;
  }
  const float s = amax / 127.0f;
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m128i vshift = _mm_set1_epi8(shift);
  for (k = 0; k + 8 <= K; k += 8) {
    __m256 r = _mm256_round_ps(_mm256_div_ps(load8(x + k), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    const __m256i i32 = _mm256_cvtps_epi32(r);  // exact: r is a whole number in [-127, 127]
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_xor_si128(_mm_packs_epi16(i16, i16), vshift));
  }
  for (; k < K; ++k) q[k] = static_cast<int8_t>(static_cast<int8_t>(clamp127(std::nearbyint(as_float(x[k]) / s))) ^ shift);
  for (; k < Kp; ++k) q[k] = shift;  // padding columns: q = 0 (their weights are zero too)
  return s;
}

// ---- the integer products: one tile (32 output channels) by R rows -------------------------------

// acc[r * 32 + c] = sum_k q[r, k] * w[c, k] for the R rows starting at xu (u8 = q + 128, row stride ldx).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void tile_avx512(const int8_t* xu, int64_t ldx, const int8_t* w, int64_t groups, const int32_t* colsum, int32_t* acc) {
  __m512i sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g, w += 2 * 64) {
    const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);  // channels 0-15, 16-31
    for (int r = 0; r < R; ++r) {
      int32_t four;  // the 4 activation bytes of columns 4g..4g+3 of row r, in every lane
      std::memcpy(&four, xu + r * ldx + kGroup * g, sizeof four);
      const __m512i a = _mm512_set1_epi32(four);
      sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], a, w0);
      sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], a, w1);
    }
  }
  // sum (q + 128) * w = sum q * w + 128 * colsum(w)
  const __m512i c0 = _mm512_slli_epi32(_mm512_loadu_si512(colsum), 7), c1 = _mm512_slli_epi32(_mm512_loadu_si512(colsum + 16), 7);
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_si512(acc + r * kTile, _mm512_sub_epi32(sum[r][0], c0));
    _mm512_storeu_si512(acc + r * kTile + 16, _mm512_sub_epi32(sum[r][1], c1));
  }
}

// The same for half a tile (16 channels: bytes 0-63 or 64-127 of each group) on AVX2, q signed.
template <int R>
__attribute__((target("avx2"))) void half_tile_avx2(const int8_t* xq, int64_t ldx, const int8_t* w, int64_t groups, int32_t* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g, w += 2 * 64) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));  // channels 0-7 of this half
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32));  // channels 8-15
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
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kTile), sum[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kTile + 8), sum[r][1]);
  }
}

template <int R>
__attribute__((target("avx2"))) void tile_avx2(const int8_t* xq, int64_t ldx, const int8_t* w, int64_t groups, int32_t* acc) {
  half_tile_avx2<R>(xq, ldx, w, groups, acc);
  half_tile_avx2<R>(xq, ldx, w + 64, groups, acc + 16);
}

// Dispatch on the number of rows in this block (a compile-time count keeps the sums in registers).
template <int R = kRowsAvx512>
void block_avx512(int rows, const int8_t* xu, int64_t ldx, const int8_t* w, int64_t groups, const int32_t* colsum, int32_t* acc) {
  if constexpr (R > 1) {
    if (rows < R) return block_avx512<R - 1>(rows, xu, ldx, w, groups, colsum, acc);
  }
  tile_avx512<R>(xu, ldx, w, groups, colsum, acc);
}

template <int R = kRowsAvx2>
void block_avx2(int rows, const int8_t* xq, int64_t ldx, const int8_t* w, int64_t groups, int32_t* acc) {
  if constexpr (R > 1) {
    if (rows < R) return block_avx2<R - 1>(rows, xq, ldx, w, groups, acc);
  }
  tile_avx2<R>(xq, ldx, w, groups, acc);
}

// ---- the float epilogue (the same code whatever the path) ----------------------------------------

template <typename T>
void epilogue(const int32_t* acc, int rows, int64_t n0, int64_t cols, const float* sx, const float* sw, const float* bias, T* y, int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = static_cast<float>(acc[r * kTile + c]) * sx[r] * sw[n0 + c];
      if (bias != nullptr) v = v + bias[n0 + c];
      y[r * ldy + n0 + c] = static_cast<T>(v);  // to bf16: round to nearest even
    }
  }
}

// ---- the operator --------------------------------------------------------------------------------

int64_t resolve_path(int64_t path) {
  if (path == kAuto) path = has_avx512_vnni() ? kAvx512 : kAvx2;
  TORCH_CHECK(path == kAvx2 || path == kAvx512, "w8a8_linear: path must be 0 (auto), 1 (avx2) or 2 (avx512), got ", path);
  TORCH_CHECK(has_avx2(), "w8a8_linear: this CPU has no AVX2");
  TORCH_CHECK(path != kAvx512 || has_avx512_vnni(), "w8a8_linear: this CPU has no AVX-512 VNNI");
  return path;
}

template <typename T>
void run(const T* x, T* y, int64_t M, int64_t K, int64_t N, const int8_t* packed, int64_t tiles, int64_t groups,
         const float* sw, const int32_t* colsum, const float* bias, int64_t path) {
  const int64_t Kp = groups * kGroup;
  const bool vnni = path == kAvx512;
  std::vector<int8_t> q(M * Kp);
  std::vector<float> sx(M);
  at::parallel_for(0, M, M * K >= 65536 ? 1 : M, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) sx[m] = quantize_row(x + m * K, K, Kp, q.data() + m * Kp, vnni);
  });
  const int block = vnni ? kRowsAvx512 : kRowsAvx2;
  const int64_t grain = tiles * groups * M >= 4096 ? 1 : tiles;  // small layers: one thread, no team wake-up
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    alignas(64) int32_t acc[kRowsAvx512 * kTile];
    for (int64_t t = begin; t < end; ++t) {
      const int8_t* w = packed + t * groups * kTile * kGroup;
      const int64_t n0 = t * kTile, cols = std::min(kTile, N - n0);
      for (int64_t m0 = 0; m0 < M; m0 += block) {
        const int rows = static_cast<int>(std::min<int64_t>(block, M - m0));
        if (vnni) block_avx512(rows, q.data() + m0 * Kp, Kp, w, groups, colsum + n0, acc);
        else block_avx2(rows, q.data() + m0 * Kp, Kp, w, groups, acc);
        epilogue(acc, rows, n0, cols, sx.data() + m0, sw, bias, y + m0 * N, N);
      }
    }
  });
}

// x (..., K) fp32 or bf16; packed (tiles, groups, 32, 4) int8; w_scale (N,) fp32; colsum (tiles * 32,)
// int32; bias (N,) fp32 or None. Returns y (..., N) in x's dtype.
at::Tensor w8a8_linear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor& w_scale, const at::Tensor& colsum,
                       const std::optional<at::Tensor>& bias, int64_t N, int64_t path) {
  TORCH_CHECK(x_in.device().is_cpu(), "w8a8_linear runs on a CPU");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16, "w8a8_linear: x must be float32 or bfloat16");
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.dim() == 4 && packed.size(2) == kTile && packed.size(3) == kGroup && packed.is_contiguous(),
              "w8a8_linear: packed must be a contiguous (tiles, groups, 32, 4) int8 tensor");
  const int64_t tiles = packed.size(0), groups = packed.size(1), K = x_in.size(-1);
  TORCH_CHECK(K > (groups - 1) * kGroup && K <= groups * kGroup, "w8a8_linear: x has ", K, " columns, the weight ", groups * kGroup, " (padded)");
  TORCH_CHECK(N > (tiles - 1) * kTile && N <= tiles * kTile, "w8a8_linear: N = ", N, " does not match ", tiles, " tiles");
  TORCH_CHECK(w_scale.scalar_type() == at::kFloat && w_scale.numel() == N && w_scale.is_contiguous(), "w8a8_linear: w_scale must be (N,) float32");
  TORCH_CHECK(colsum.scalar_type() == at::kInt && colsum.numel() == tiles * kTile && colsum.is_contiguous(), "w8a8_linear: colsum must be (tiles * 32,) int32");
  const float* b = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), "w8a8_linear: bias must be (N,) float32");
    b = bias->data_ptr<float>();
  }
  path = resolve_path(path);
  const at::Tensor x = x_in.contiguous();
  const int64_t M = K > 0 ? x.numel() / K : 0;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor y = at::empty(shape, x.options());
  if (M == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    run(x.data_ptr<float>(), y.data_ptr<float>(), M, K, N, packed.data_ptr<int8_t>(), tiles, groups, w_scale.data_ptr<float>(),
        colsum.data_ptr<int32_t>(), b, path);
  } else {
    run(x.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), M, K, N, packed.data_ptr<int8_t>(), tiles, groups,
        w_scale.data_ptr<float>(), colsum.data_ptr<int32_t>(), b, path);
  }
  return y;
}

// Which paths this CPU can run: bit 0 AVX2, bit 1 AVX-512 VNNI.
int64_t w8a8_paths() { return (has_avx2() ? 1 : 0) | (has_avx2() && has_avx512_vnni() ? 2 : 0); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("w8a8_linear(Tensor x, Tensor packed, Tensor w_scale, Tensor colsum, Tensor? bias, int n, int path=0) -> Tensor");
  m.def("w8a8_paths() -> int", &w8a8_paths);
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("w8a8_linear", &w8a8_linear); }
