// What the entry of each int8-activation linear kernel of this library does alike (w8a8.cpp, w4a8.cpp):
// choose and check the instruction-set path a call runs, check the bias, and make the output. Each kernel
// says what its own AVX2 path needs of the CPU (has_avx2 there) and passes the answer in. The batch-invariant
// attention (attention_rows.cpp) takes the same Path values, less AMX.

#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "amx_tiles.h"

namespace {

enum Path : int64_t { kAuto = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };


inline bool has_avx512_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

// 0 (auto) -> the best path this CPU runs for a call of `rows` rows: AMX from `amx_from` rows (each kernel's
// own crossing, measured: below it the VNNI path's few rows cost little beside streaming the weights), else
// VNNI, else AVX2. A path asked for is checked against the CPU. avx2: whether the CPU has what the kernel's
// AVX2 path needs, named by `needs` in the message.
inline int64_t resolve_path(int64_t path, int64_t rows, int64_t amx_from, const char* op, bool avx2, const char* needs) {
  if (path == kAuto) path = rows >= amx_from && amx_ready() ? kAmx : has_avx512_vnni() ? kAvx512 : kAvx2;
  TORCH_CHECK(path == kAvx2 || path == kAvx512 || path == kAmx, op, ": path must be 0 (auto), 1 (avx2), 2 (avx512) or 3 (amx), got ", path);
  TORCH_CHECK(avx2, op, ": this CPU has no ", needs);
  TORCH_CHECK(path != kAmx || amx_ready(), op,
              ": no AMX-INT8 here (the CPU, its OS or the compiler that built the library has none)");
  TORCH_CHECK(path != kAvx512 || has_avx512_vnni(), op, ": this CPU has no AVX-512 VNNI");
  return path;
}

// Which paths this CPU can run: bit 0 AVX2, bit 1 AVX-512 VNNI, bit 2 AMX-INT8 (each only where the ones
// before it run too).
inline int64_t path_bits(bool avx2) {
  const bool vnni = avx2 && has_avx512_vnni();
  return (avx2 ? 1 : 0) | (vnni ? 2 : 0) | (avx2 && amx_ready() ? 4 : 0);
}

// The bias as the products add it: (N,) float32, or nullptr for none.
inline const float* checked_bias(const std::optional<at::Tensor>& bias, int64_t N, const char* op) {
  if (!bias.has_value()) return nullptr;
  TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N && bias->is_contiguous(), op, ": bias must be (N,) float32");
  return bias->data_ptr<float>();
}

// y (..., N) for x (..., K), in x's dtype.
inline at::Tensor output_for(const at::Tensor& x, int64_t N) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  return at::empty(shape, x.options());
}

}  // namespace
