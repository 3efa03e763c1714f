// Run-time choice of the instruction set, shared by anyshape's kernels.
//
// Each kernel is compiled for baseline x86-64; its AVX-512 and AVX2 code
// carries its own target attributes and is chosen here from CPUID, once per
// process, up to ANYSHAPE_MAX_ISA: the widest the module's target CPU has
// (kernels/build.py), so that an artifact built for AVX2 computes on an
// AVX-512 host what it computes on an AVX2 one. Code past it is not compiled.

#ifndef ANYSHAPE_KERNELS_ISA_H_
#define ANYSHAPE_KERNELS_ISA_H_

#include <stdint.h>

// Macros, not an enum: the kernels compare ANYSHAPE_MAX_ISA with them in #if.
// Each level has every instruction of the levels below it: code for a level
// is chosen with >=, so that a level added above it still runs it.
#define ISA_UNKNOWN 0
#define ISA_PORTABLE 1
#define ISA_AVX2 2
#define ISA_AVX512 3
// AVX-512 with byte and word dot products (VNNI, with BW and VL): Cascade
// Lake, Ice Lake and later, Zen 4 and later. Only the integer tiles of
// quantized_panels.h use it; every other AVX-512 path runs here as it does
// at ISA_AVX512.
#define ISA_AVX512_VNNI 4
#ifndef ANYSHAPE_MAX_ISA
#define ANYSHAPE_MAX_ISA ISA_AVX512_VNNI
#endif

static void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]) {
  __asm__ volatile("cpuid"
                   : "=a"(regs[0]), "=b"(regs[1]), "=c"(regs[2]), "=d"(regs[3])
                   : "a"(leaf), "c"(subleaf));
}

static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static int host_isa(void) {
  uint32_t r[4];
  cpuid(0, 0, r);
  if (r[0] < 7) return ISA_PORTABLE;
  cpuid(1, 0, r);
  int fma = (r[2] >> 12) & 1, osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1,
      f16c = (r[2] >> 29) & 1;  // float16 scales (quantized_panels.h); every AVX2 CPU has it
  if (!(fma && osxsave && avx && f16c)) return ISA_PORTABLE;
  uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return ISA_PORTABLE;  // the OS keeps no ymm state
  cpuid(7, 0, r);
  int avx2 = (r[1] >> 5) & 1, avx512f = (r[1] >> 16) & 1, avx512bw = (r[1] >> 30) & 1,
      avx512vl = (r[1] >> 31) & 1, vnni = (r[2] >> 11) & 1;
  if (avx512f && (xcr0 & 0xE6) == 0xE6)  // and zmm state
    return avx512bw && avx512vl && vnni ? ISA_AVX512_VNNI : ISA_AVX512;
  return avx2 ? ISA_AVX2 : ISA_PORTABLE;
}

// Set by whichever worker first finds it unset; every writer writes the same
// value, so the race is benign. (In a VM, CPUID traps to the hypervisor:
// once per dispatch would cost microseconds.)
static volatile int chosen_isa = ISA_UNKNOWN;

__attribute__((unused)) static int isa(void) {  // a portable-only build never asks
  int found = chosen_isa;
  if (found == ISA_UNKNOWN) {
    found = host_isa();
    if (found > ANYSHAPE_MAX_ISA) found = ANYSHAPE_MAX_ISA;
    chosen_isa = found;
  }
  return found;
}

#endif  // ANYSHAPE_KERNELS_ISA_H_
