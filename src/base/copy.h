// Host memory copies on the data path (shm rings, local steps of a
// schedule, the small block, host streams, one-sided puts into mappings).
//
// Why not memcpy: glibc 2.36 copies 2 KiB and more with `rep movsb` on CPUs
// that advertise fast string moves, and on this project's AMD EPYC VM that
// instruction runs at 2-3 GB/s instead of 40-50 when the destination is a
// few bytes past the source modulo 4096 (dst - src = 8 mod 4096: 1.9 GB/s
// against 42 for 256 KiB; docs/DECISIONS.md, "Host copies", has the program).
// Ring positions drift by frame headers, so some ring copies land on such
// offsets.  (This is not the VM's "slow phase" of docs/PERFORMANCE.md,
// which copyBytes does not cure.)
// copyBytes uses an AVX2 loop of unaligned loads and stores where the CPU
// has AVX2 (as fast as memcpy at every offset and size measured, 2 KiB to
// 16 MiB), else memcpy.
#pragma once
#include <cstddef>

namespace flagcx {

void copyBytes(void *dst, const void *src, size_t n);  // no overlap, like memcpy
// copyBytes with non-temporal stores (AVX2), for large copies into memory
// another core reads next; ordered before any later store.
void copyBytesStreaming(void *dst, const void *src, size_t n);

}  // namespace flagcx
