// fp32 linear layer for a few token rows, each output the same bits whatever the number of rows:
//
//   y[m, n] = sum_k x[m, k] w[n, k]  (+ bias[n]),
//
// each sum in one fixed order: 8 lanes (lane j takes the columns k = j mod 8, in column order,
// one fused multiply-add each), then the columns past the last multiple of 8, then the lanes in a
// fixed tree. BLAS's sgemm picks its kernel and its blocking of k by the number of rows, so a row's
// result moved in its last bits between a one-token pass and a check of several tokens; here no
// sum depends on the rows beside it, on how rows and channels are blocked, or on the thread.
// The weight is streamed once for all rows of the call (16 channels at a time, all rows in blocks of
// up to 4 read from cache), as a matrix-vector product is for one row.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int kRows = 4;    // rows per register block
constexpr int kGroup = 16;  // output channels per work item (each read once from memory for all rows)

__attribute__((target("avx2,fma"))) inline float lanes_sum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// y[r, c] for R rows (x, row stride ldx) and C channels (w, row stride K).
template <int R, int C>
__attribute__((target("avx2,fma"))) void block(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * K + k);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = 0.0f;  // the columns past the last multiple of 8, in order, then the lanes
      for (int64_t t = k; t < K; ++t) sum = std::fma(x[r * ldx + t], w[c * K + t], sum);
      y[r * ldy + c] = lanes_sum(acc[r][c]) + sum;
    }
  }
}

// One block of `rows` rows (1 to kRows) by kGroup channels: the channels in sub-blocks as wide as the
// registers allow for that many rows (8 for one row, 4 for two, 2 for three or four). The width only
// changes which sums run side by side, never a sum's order.
template <int R>
void rows_block(int rows, const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy, int channels) {
  if constexpr (R > 1) {
    if (rows < R) return rows_block<R - 1>(rows, x, ldx, w, K, y, ldy, channels);
  }
  constexpr int C = R == 1 ? 8 : R == 2 ? 4 : 2;
  int c = 0;
  for (; c + C <= channels; c += C) block<R, C>(x, ldx, w + c * K, K, y + c, ldy);
  for (; c < channels; ++c) block<R, 1>(x, ldx, w + c * K, K, y + c, ldy);
}

// x (..., K) fp32, w (N, K) fp32 contiguous, bias (N,) fp32 or None -> y (..., N) fp32.
at::Tensor linear_rows(const at::Tensor& x_in, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "linear_rows: this CPU has no AVX2 with FMA");
  TORCH_CHECK(x_in.device().is_cpu() && w.device().is_cpu(), "linear_rows runs on a CPU");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "linear_rows: x and w must be float32");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && x_in.size(-1) == w.size(1), "linear_rows: w must be a contiguous (N, K) matrix of x's K");
  const at::Tensor x = x_in.contiguous();
  const int64_t K = w.size(1), N = w.size(0), M = K > 0 ? x.numel() / K : 0;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor y = at::empty(shape, x.options());
  const float* b = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), "linear_rows: bias must be (N,) float32");
    b = bias->data_ptr<float>();
  }
  if (M == 0 || N == 0) return y;
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t groups = (N + kGroup - 1) / kGroup;
  at::parallel_for(0, groups, groups * kGroup * K >= 65536 ? 1 : groups, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n0 = p * kGroup;
      const int channels = static_cast<int>(std::min<int64_t>(kGroup, N - n0));
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, M - m0));
        rows_block<kRows>(rows, xp + m0 * K, K, wp + n0 * K, K, yp + m0 * N + n0, N, channels);
      }
    }
  });
  if (b != nullptr) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) yp[m * N + n] += b[n];
  }
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) { m.def("linear_rows(Tensor x, Tensor w, Tensor? bias) -> Tensor"); }

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("linear_rows", &linear_rows); }
