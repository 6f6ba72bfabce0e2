/* bsa_bwd_b128.h — the 128-token-block main kernel of the sm100a backward
 * (bsa_bwd_b128_sm100a.cu), called by bsa_backward_sm100a[_emu]
 * (kernels.h) when the shape's block is 128. Internal to kernels/sm100.
 * No Blackwell GPU is available to this project: compiled and emulated,
 * never run on Blackwell.
 *
 * Same contract as bsa_backward_sm100a at block 128: lists of 128-token
 * blocks (k2q_idx [B·H, Skv/128, width], k2q_num [B·H, Skv/128], vbs
 * [Skv/128] in [0, 128]), BHSD layout, D = 128, Sq and Skv multiples of 128;
 * q_chunk counts 64-token q blocks as at block 64 (a chunk is q_chunk/2
 * blocks of 128, at least one). cudaErrorInvalidValue for shapes it does not
 * take.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "bsa.h"

#ifdef VSA_TCGEN05_EMU
#define SM100_B128_FN(name) name##_emu
#else
#define SM100_B128_FN(name) name
#endif

/* Scratch bytes (256-byte aligned): dQ accumulator, Delta, fixed-point
 * exponents and statistics, 64-token vbs, counters, work order, scheduler
 * slots, q-chunk partials, (emulated) tensor memory. */
size_t SM100_B128_FN(bsa_b128_sm100a_scratch_bytes)(const vsa_shape *s, int q_chunk, int sm_count);

/* Dynamic shared memory of one CTA (plus the emulation's static state). */
size_t SM100_B128_FN(bsa_b128_sm100a_smem_bytes)(void);

cudaError_t SM100_B128_FN(bsa_b128_sm100a)(
    const vsa_shape *s, const uint16_t *d_dO, const uint16_t *d_q, const uint16_t *d_k,
    const uint16_t *d_v, const uint16_t *d_o, const float *d_lse, const int32_t *d_k2q_idx,
    const int32_t *d_k2q_num, int k2q_width, const int32_t *d_vbs, void *d_scratch,
    uint16_t *d_dq, uint16_t *d_dk, uint16_t *d_dv, int deterministic, int q_chunk,
    int sm_count, cudaStream_t stream);
