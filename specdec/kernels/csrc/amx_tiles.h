// Intel AMX (AMX-INT8) for the int8-activation kernels of this library (w8a8.cpp, w4a8.cpp): whether this
// process may use the tile registers, and the one tile shape the kernels use.
//
// A tile operation multiplies a 16-row by 64-byte tile of activations with a 16 x 64-byte tile of weights
// into 16 x 16 int32 sums, so a check of several rows or a prompt's prefill streams each weight once and
// spends a few instructions where vpdpbusd spends 16 rows' worth. The sums are the same integers as the
// VNNI and AVX2 paths' (integer arithmetic has no rounding), and the float epilogue after them is the same
// code, so every path gives a row the same bits.
//
// Linux hands the tile registers' state (8 KiB a thread) to a process only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16 and later); a kernel or hypervisor that refuses means the
// VNNI path runs instead. A compiler without the AMX intrinsics (before GCC 11 and Clang 12) builds the
// library without the path (SPECDEC_AMX 0: amx_ready() is false); -DSPECDEC_NO_AMX builds it so too.

#pragma once

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#if !defined(SPECDEC_NO_AMX) && defined(__has_include)
#if __has_include(<amxtileintrin.h>) && __has_include(<amxint8intrin.h>)
#define SPECDEC_AMX 1
#endif
#endif
#ifndef SPECDEC_AMX
#define SPECDEC_AMX 0
#endif

namespace {

constexpr int kAmxRows = 16;  // activation rows per tile operation
constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
constexpr long kXfeatureTileData = 18;  // the AMX tile data component

inline bool cpu_has_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 24)) && (d & (1u << 25));  // AMX-TILE, AMX-INT8
}

// Whether this process may run the AMX paths: AMX-INT8 tile operations (asked of the OS once), and the
// AVX-512 VNNI their epilogues share with the VNNI paths.
inline bool amx_ready() {
  static const bool ready = SPECDEC_AMX && cpu_has_amx_int8() && __builtin_cpu_supports("avx512f") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni") &&
                            syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) == 0;
  return ready;
}

// The tile configuration (palette 1): tile 0 holds 16 rows of `columns` activation bytes (64 for w8a8's
// blocks, 32 for w4a8's sub-blocks of one scale each), tiles 1-2 the weights of 16 channels each
// (columns / 4 rows of 4 bytes a channel), tiles 3-4 16 rows of 16 int32 sums.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr TileConfig tile_config(int columns) {
  TileConfig config;
  config.rows[0] = kAmxRows, config.colsb[0] = columns;
  for (int t = 1; t <= 2; ++t) config.rows[t] = columns / 4, config.colsb[t] = 64;
  for (int t = 3; t <= 4; ++t) config.rows[t] = kAmxRows, config.colsb[t] = 64;
  return config;
}

// Loads the configuration for tile operations over `columns` (64 or 32) on the calling thread; release with
// release_tiles() when its products are done. The configurations are constants in memory: built on the
// stack, GCC 12 dropped their stores as if ldtilecfg read none of them.
#if SPECDEC_AMX
__attribute__((target("amx-tile"))) inline void configure_tiles(int columns) {
  static constexpr TileConfig wide = tile_config(64), narrow = tile_config(32);
  _tile_loadconfig(columns == 64 ? &wide : &narrow);
}

__attribute__((target("amx-tile"))) inline void release_tiles() { _tile_release(); }
#else
inline void configure_tiles(int) {}  // never called: amx_ready() is false
inline void release_tiles() {}
#endif

}  // namespace
