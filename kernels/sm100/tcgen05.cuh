/* tcgen05.cuh — the primitive layer of the Blackwell (sm_100a) backward:
 * tensor-memory allocation, tcgen05.mma (A from shared memory or from
 * tensor memory), tcgen05.commit to an mbarrier, tensor-memory loads and
 * stores, and the tcgen05 fences. Everything above this layer is plain
 * sm_90+ CUDA (TMA, mbarriers, bulk copies, named barriers).
 *
 * Two implementations behind one API (namespace tc05):
 *   tcgen05_hw.cuh   inline PTX for sm_100a / sm_100f / sm_103a;
 *   tcgen05_emu.cuh  (VSA_TCGEN05_EMU) a functional emulation for sm_90a:
 *                    tensor memory in global memory, MMAs queued in shared
 *                    memory and executed in order by an emulator
 *                    warpgroup, commits arriving on the real mbarriers.
 * No Blackwell GPU is available to this project: the hardware layer is
 * compiled and its SASS inspected, never run; the emulated build runs the
 * same kernel source on an H200 (kernels/NOTES.md, "sm100a").
 *
 * Conventions (PTX ISA, tcgen05 chapter):
 *   - a tensor-memory address is (lane << 16) | column; columns are 32 bit;
 *   - MMAs are cta_group::1, kind::f16 (bf16 in, fp32 accumulate), M = 128:
 *     row m of D (and of an A in tensor memory) is lane m, its N (or K/2)
 *     columns consecutive 32-bit columns; a bf16 A packs elements 2c (low
 *     half) and 2c+1 (high half) into column c;
 *   - mma/commit are issued by one thread; ld/st (32x32b shape) by a whole
 *     warp, which reaches only the 32 lanes 32·(warp % 4) onwards.
 */
#pragma once
#include <stdint.h>

#include "umma_desc.h"

#ifdef VSA_TCGEN05_EMU
#include "tcgen05_emu.cuh"
#else
#include "tcgen05_hw.cuh"
#endif
