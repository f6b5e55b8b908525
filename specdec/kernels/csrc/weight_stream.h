// How the int8-activation kernels of this library (w8a8.cpp, w4a8.cpp) read their weights: each tile's
// bytes are one contiguous stream, read once from memory for all the rows of a call. The hardware
// prefetchers alone did not keep that stream at the memory's rate: the products and the loads ran one
// after the other (a record of w4a8 is 4736 bytes, so its stream crosses a 4 KiB page every record, where
// the stream prefetcher stops). So the products ask for the bytes kAhead on, into the core's L2, on both
// paths and for any number of rows.
//
// Measured on a 2-core Intel Xeon with AVX-512 VNNI and AMX, one model's worth of layers of the embedded
// target's shapes, weights streamed from memory, distances interleaved in one process, medians of 9 to 11:
// w4a8 one row 44.3 ms without, 38.4 ms at 4 KiB into L1 (the distance and level used before, for checks
// only), 35.4 ms at 8 or 16 KiB into L2; w8a8 a check of 6 rows 85.0 ms without, 60.7 ms at 8 KiB into L2;
// on the AVX2 path (forced), w8a8 one row 112.0 ms without, 64.7 ms with.

#pragma once

#include <immintrin.h>

#include <cstdint>

namespace {

constexpr int64_t kAhead = 8192;  // bytes of the weight stream prefetched ahead of the products

// Asks for the 128 bytes (two cache lines) at p + kAhead into L2. Past the end of a tensor this is a hint
// the CPU drops, never a fault.
inline void prefetch_ahead(const void* p) {
  const char* at = static_cast<const char*>(p) + kAhead;
  _mm_prefetch(at, _MM_HINT_T1);
  _mm_prefetch(at + 64, _MM_HINT_T1);
}

}  // namespace
