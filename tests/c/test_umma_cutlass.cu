/* test_umma_cutlass.cu — kernels/sm100/umma_desc.h against NVIDIA's own
 * encoders in CUTLASS/CuTe (cute/arch/mma_sm100_desc.hpp,
 * cute/atom/mma_traits_sm100.hpp; headers from the nvidia-cutlass wheel,
 * a test-only dependency that scripts/setup.sh installs). Host code only.
 *   1. instruction descriptors: vsa_umma_idesc_bf16 == UMMA::make_instr_desc
 *      for every shape the sm100a backward issues and others;
 *   2. shared-memory descriptors: the same 64 bits as CUTLASS's bitfield
 *      union for random fields;
 *   3. canonical layouts: for K-major and MN-major SW128 (and MN-major
 *      no-swizzle) tiles built from CuTe's own atoms in several atom orders,
 *      make_umma_desc's LBO/SBO, decoded by vsa_umma_element_addr, give the
 *      byte address CuTe's layout gives for every element. That is the
 *      meaning of LBO and SBO the emulation reads and the kernel builds.
 * (CuTe computes no shared-memory address on the host: it prints an error
 * line and uses start address 0, which the checks assume.)
 */
#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>
#include <stdio.h>

#include "../../kernels/sm100/umma_desc.h"

using namespace cute;

static int failures = 0;
#define EXPECT(cond, ...)          \
  do {                             \
    if (!(cond)) {                 \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                \
      failures++;                  \
    }                              \
  } while (0)

template <int M, int N, UMMA::Major A, UMMA::Major B>
static void
idesc_case()
{
  const uint32_t theirs =
      static_cast<uint32_t>(UMMA::make_instr_desc<bfloat16_t, bfloat16_t, float, M, N, A, B>());
  const uint32_t ours = vsa_umma_idesc_bf16(M, N, A == UMMA::Major::MN, B == UMMA::Major::MN);
  EXPECT(theirs == ours, "idesc M%d N%d a_mn %d b_mn %d: CUTLASS 0x%08x, ours 0x%08x", M, N,
         A == UMMA::Major::MN, B == UMMA::Major::MN, theirs, ours);
}

/* Every element's byte address: CuTe's swizzled layout vs our decode of
 * the descriptor CuTe makes for it. */
template <UMMA::Major Major, class Layout_>
static void
layout_case(const char *name, Layout_ const &layout)
{
  auto t = make_tensor(make_smem_ptr(reinterpret_cast<bfloat16_t *>(0)), layout);
  UMMA::SmemDescriptor d = UMMA::make_umma_desc<Major>(t);
  const uint64_t bits = d;
  vsa_umma_smem_fields f = vsa_umma_smem_decode(bits);
  EXPECT(f.version == 1 && f.base_offset == 0 && f.lbo_mode == 0, "%s: fixed fields", name);
  const int mn_major = Major == UMMA::Major::MN;
  int bad = 0;
  for (int mn = 0; mn < size<0>(layout); mn++)
    for (int k = 0; k < size<1>(layout); k++) {
      // One MMA reads K = 16; a K-major tile's next 16 columns are the
      // same descriptor with the start advanced by 32 B (within the
      // swizzle row, as the sm100a kernel steps).
      vsa_umma_smem_fields fk = f;
      if (!mn_major) fk.start += (k / 16) * 32;
      else if (k >= 16) break;
      // The swizzle lives in CuTe's shared-memory pointer, applied when the
      // address is formed (swizzle_ptr::get).
      const uint32_t theirs =
          (uint32_t)reinterpret_cast<uintptr_t>(raw_pointer_cast(&t(mn, k)));
      const uint32_t ours = vsa_umma_element_addr(&fk, mn_major, mn, k % 16);
      if (theirs != ours && bad++ < 3)
        printf("  %s (%d, %d): CuTe byte %u, decode %u (lbo %u sbo %u swizzle %u)\n", name, mn, k,
               theirs, ours, f.lbo, f.sbo, f.swizzle);
    }
  EXPECT(bad == 0, "%s: %d element addresses differ", name, bad);
  printf("%-42s lbo %6u sbo %6u swizzle %u: %s\n", name, f.lbo, f.sbo, f.swizzle,
         bad ? "FAIL" : "ok");
}

int
main()
{
  // 1. Instruction descriptors: S/dP, dV^T/dK^T, dQ, and neighbours.
  idesc_case<128, 64, UMMA::Major::K, UMMA::Major::K>();
  idesc_case<128, 64, UMMA::Major::MN, UMMA::Major::MN>();
  idesc_case<128, 128, UMMA::Major::K, UMMA::Major::MN>();
  idesc_case<128, 128, UMMA::Major::K, UMMA::Major::K>();   // block 128: S, dP
  idesc_case<128, 128, UMMA::Major::MN, UMMA::Major::MN>(); // block 128: dV^T, dK^T
  idesc_case<64, 128, UMMA::Major::K, UMMA::Major::K>();
  idesc_case<64, 256, UMMA::Major::MN, UMMA::Major::K>();
  idesc_case<128, 256, UMMA::Major::MN, UMMA::Major::MN>();
  idesc_case<128, 16, UMMA::Major::K, UMMA::Major::MN>();
  printf("instruction descriptors: %s\n", failures ? "FAIL" : "ok");

  // 2. Shared-memory descriptor bit positions.
  uint64_t s = 0x9E3779B97F4A7C15ull;
  const vsa_umma_swizzle sw[] = {VSA_UMMA_SWIZZLE_NONE, VSA_UMMA_SWIZZLE_32B, VSA_UMMA_SWIZZLE_64B,
                                 VSA_UMMA_SWIZZLE_128B, VSA_UMMA_SWIZZLE_128B_BASE32B};
  for (int i = 0; i < 1000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t addr = (uint32_t)(s >> 20) & 0x3FFF0u, lbo = (uint32_t)(s >> 36) & 0x3FFF0u;
    const uint32_t sbo = (uint32_t)(s >> 46) & 0x3FFF0u;
    const vsa_umma_swizzle z = sw[(s >> 8) % 5];
    UMMA::SmemDescriptor d;
    d.desc_ = 0;
    d.start_address_ = addr >> 4;
    d.leading_byte_offset_ = lbo >> 4;
    d.stride_byte_offset_ = sbo >> 4;
    d.version_ = 1;
    d.base_offset_ = 0;
    d.lbo_mode_ = 0;
    d.layout_type_ = (uint8_t)z;
    const uint64_t ours = vsa_umma_smem_desc(addr, lbo, sbo, z);
    EXPECT(d.desc_ == ours, "smem desc %u/%u/%u/%d: CUTLASS 0x%016llx, ours 0x%016llx", addr, lbo,
           sbo, (int)z, (unsigned long long)d.desc_, (unsigned long long)ours);
    if (d.desc_ != ours) break;
    vsa_umma_smem_fields f = vsa_umma_smem_decode(ours);
    EXPECT(f.start == addr && f.lbo == lbo && f.sbo == sbo && f.swizzle == (uint32_t)z,
           "smem desc decode of 0x%016llx", (unsigned long long)ours);
  }
  printf("shared-memory descriptor bits: %s\n", failures ? "FAIL" : "ok");

  // 3. Canonical layouts from CuTe's atoms, in both atom orders.
  using T = bfloat16_t;
  layout_case<UMMA::Major::K>("K-major SW128 128x64", tile_to_shape(UMMA::Layout_K_SW128_Atom<T>{}, Shape<_128, _64>{}));
  layout_case<UMMA::Major::K>("K-major SW128 64x64", tile_to_shape(UMMA::Layout_K_SW128_Atom<T>{}, Shape<_64, _64>{}));
  layout_case<UMMA::Major::K>("K-major SW64 64x32", tile_to_shape(UMMA::Layout_K_SW64_Atom<T>{}, Shape<_64, _32>{}));
  layout_case<UMMA::Major::MN>("MN-major SW128 128x16 (MN atoms first)",
                               tile_to_shape(UMMA::Layout_MN_SW128_Atom<T>{}, Shape<_128, _16>{}));
  layout_case<UMMA::Major::MN>("MN-major SW128 128x16 (K atoms first)",
                               tile_to_shape(UMMA::Layout_MN_SW128_Atom<T>{}, Shape<_128, _16>{}, Step<_2, _1>{}));
  layout_case<UMMA::Major::MN>("MN-major SW128 64x16", tile_to_shape(UMMA::Layout_MN_SW128_Atom<T>{}, Shape<_64, _16>{}));
  layout_case<UMMA::Major::MN>("MN-major SW32 64x16 (K atoms first)",
                               tile_to_shape(UMMA::Layout_MN_SW32_Atom<T>{}, Shape<_64, _16>{}, Step<_2, _1>{}));
  layout_case<UMMA::Major::MN>("MN-major interleave 64x16",
                               tile_to_shape(UMMA::Layout_MN_INTER_Atom<T>{}, Shape<_64, _16>{}));
  layout_case<UMMA::Major::K>("K-major interleave 64x16",
                              tile_to_shape(UMMA::Layout_K_INTER_Atom<T>{}, Shape<_64, _16>{}));
  if (failures) printf("%d checks failed\n", failures);
  else printf("all checks against CUTLASS passed\n");
  return failures ? 1 : 0;
}
