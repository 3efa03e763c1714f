// Products with int8 or int4 weights (BackendOptions(weights=...), issue 66):
// included by linear_rows.c, whose float32 tiles compute them.
//
// The weights come quantized and packed at compile time
// (iree/quantized_weights.py), in panels of 16 output columns as the float32
// ones are:
// - int8: q[p][k][j] = round(w[16 p + j][k] / s[16 p + j]) in [-127, 127],
//   one float32 scale s per output column (symmetric);
// - int4: groups of `group` k (32, 64 or 128) per column, q in [-8, 7]
//   stored as q + 8, two k to a byte: q4[p][k / 2][j] holds k even in its low
//   four bits and k + 1 in its high ones; one float16 scale per group and
//   column, s4[p][k / group][j];
// - int4 for the ``_q4i8`` entry points (quantized_t.integer set): the same
//   nibbles in fours of k, q4[p][k / 8][j][e] holding k = 8 (k / 8) + e in its
//   low four bits and k + 4 in its high ones (e = 0 .. 3). Masked, a column's
//   32 bits are the four k that a byte dot product (INTEGER_Q4) multiplies
//   and sums, with no unpacking. DIRECT_Q4's float32 tiles read the first
//   layout: this one takes them more instructions.
//
// A workgroup dequantizes a block of QUANT_FLOATS weights at a time into a float32
// block on its stack (scales applied), where it stays in L1, and runs the
// float32 tiles over it as a part of the product (linear_rows_t's strides and
// `resume`): the weights are read from memory at their own size, once per run
// of rows, and every row count takes the float32 kernel's path.

#ifndef ANYSHAPE_KERNELS_QUANTIZED_PANELS_H_
#define ANYSHAPE_KERNELS_QUANTIZED_PANELS_H_

// Weights dequantized at a time: 16 KiB of the worker's stack, beside the
// float32 tiles' own frames (FRAME_BUDGET in build.py is per function; a
// worker's 48 KiB holds both). With AVX2, one panel of 256 k rather than two
// of 128: each tile of rows stores and resumes its sums half as often
// (docs/quantized-weights.md, "The kernel alone"). Each a multiple of every
// group size, so that a block holds whole groups.
#define QUANT_FLOATS (256 * PANEL)
// AVX-512's float32 tiles take two panels at a time (pass512; one panel
// alone takes the narrow tiles of an odd last panel), so its blocks hold two
// panels of 128 k: 1.0-1.1x faster from 17 to 65 rows on Zen 4 than one of
// 256; four of 64 and eight of 32 were slower past 17 rows.
#define QUANT_PANELS_512 2

// Up to DIRECT_ROWS rows of float32 activations (a decode step's) are
// computed from the weights in registers (the DIRECT_ tiles below).
#define DIRECT_ROWS 4

typedef struct {
  const float* x;          // rows of x, k floats apart
  const uint8_t* q;        // the packed weights (int8, or int4 two to a byte)
  const void* scales;      // int8: float[panels * 16]; int4: uint16_t (f16) [panels][k / group][16]
  const float* bias;       // n floats, or null
  float* y;                // rows of y, n floats apart
  size_t m, n, k, group;   // group: int4's (0 for int8)
  // Whether the rows are computed in integers (on AVX2 and AVX-512 hosts):
  // int4 weights with the rows rounded to int8 per block of 32 k (INTEGER_Q4
  // below; the ``_q4i8`` entry points), int8 weights with them rounded to
  // int16 (INTEGER_Q8; ``_q8i16``). Every row alike, whatever the product's
  // row count: a row's floats are the same in a decode step and a prefill.
  size_t integer;
} quantized_t;

// Whether a's int4 weights come in fours of k (the ``_q4i8`` entry points').
static inline int nibble_quads(const quantized_t* a) { return a->group != 0 && a->integer != 0; }

// The bit of the 32 bits a column holds of k 8 s .. 8 s + 7 (nibble_quads)
// at which k 8 s + e begins.
static inline int quad_shift(int e) { return (e & 3) * 8 + (e >> 2) * 4; }

// IEEE half to float, for the portable path (no F16C).
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu,
           mantissa = h & 0x3FFu, bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exponent = 113;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  union {
    uint32_t u;
    float f;
  } value = {bits};
  return value.f;
}

// Dequantizes k in [k0, k0 + steps) of panels [panel, panel + np) into
// `block` ([np][steps][16]) with the given ISA's code.
static void dequantize_portable(const quantized_t* a, size_t panel, size_t np, size_t k0,
                                size_t steps, float* block) {
  for (size_t p = 0; p < np; ++p) {
    float* out = block + p * steps * PANEL;
    if (a->group == 0) {
      const int8_t* q = (const int8_t*)a->q + (panel + p) * a->k * PANEL + k0 * PANEL;
      const float* s = (const float*)a->scales + (panel + p) * PANEL;
      for (size_t i = 0; i < steps * PANEL; ++i) out[i] = (float)q[i] * s[i % PANEL];
    } else {
      const uint8_t* q = a->q + (panel + p) * (a->k / 2) * PANEL + (k0 / 2) * PANEL;
      const uint16_t* s = (const uint16_t*)a->scales + (panel + p) * (a->k / a->group) * PANEL;
      if (nibble_quads(a)) {
        for (size_t i = 0; i < steps; ++i)
          for (size_t j = 0; j < PANEL; ++j) {
            const uint8_t* quad = q + (i / 8) * 4 * PANEL + 4 * j;
            const uint32_t all = quad[0] | quad[1] << 8 | quad[2] << 16 | (uint32_t)quad[3] << 24;
            float scale = half_to_float(s[((k0 + i) / a->group) * PANEL + j]);
            out[i * PANEL + j] = (float)((int)((all >> quad_shift((int)(i % 8))) & 15) - 8) * scale;
          }
        continue;
      }
      for (size_t i = 0; i < steps; i += 2)
        for (size_t j = 0; j < PANEL; ++j) {
          uint8_t byte = q[(i / 2) * PANEL + j];
          float scale = half_to_float(s[((k0 + i) / a->group) * PANEL + j]);
          out[i * PANEL + j] = (float)((int)(byte & 15) - 8) * scale;
          out[(i + 1) * PANEL + j] = (float)((int)(byte >> 4) - 8) * scale;
        }
    }
  }
}

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
AVX512_FN static void dequantize512(const quantized_t* a, size_t panel, size_t np, size_t k0,
                                    size_t steps, float* block) {
  for (size_t p = 0; p < np; ++p) {
    float* out = block + p * steps * PANEL;
    if (a->group == 0) {
      const int8_t* q = (const int8_t*)a->q + (panel + p) * a->k * PANEL + k0 * PANEL;
      const __m512 s = _mm512_loadu_ps((const float*)a->scales + (panel + p) * PANEL);
      for (size_t i = 0; i < steps; ++i) {
        __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(q + i * PANEL)));
        _mm512_storeu_ps(out + i * PANEL, _mm512_mul_ps(_mm512_cvtepi32_ps(v), s));
      }
    } else {
      const uint8_t* q = a->q + (panel + p) * (a->k / 2) * PANEL + (k0 / 2) * PANEL;
      const uint16_t* scales =
          (const uint16_t*)a->scales + (panel + p) * (a->k / a->group) * PANEL;
      const __m512i low = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
      for (size_t g = 0; g < steps; g += a->group) {
        const __m512 s = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i*)(scales + ((k0 + g) / a->group) * PANEL)));
        if (nibble_quads(a)) {
          for (size_t i = g; i < g + a->group; i += 8) {
            const __m512i v = _mm512_loadu_si512((const void*)(q + (i / 2) * PANEL));
            for (int e = 0; e < 8; ++e) {
              const __m512i value = _mm512_sub_epi32(
                  _mm512_and_si512(_mm512_srli_epi32(v, quad_shift(e)), low), eight);
              _mm512_storeu_ps(out + (i + e) * PANEL, _mm512_mul_ps(_mm512_cvtepi32_ps(value), s));
            }
          }
          continue;
        }
        for (size_t i = g; i < g + a->group; i += 2) {
          __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(q + (i / 2) * PANEL)));
          __m512i even = _mm512_sub_epi32(_mm512_and_si512(v, low), eight);
          __m512i odd = _mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight);
          _mm512_storeu_ps(out + i * PANEL, _mm512_mul_ps(_mm512_cvtepi32_ps(even), s));
          _mm512_storeu_ps(out + (i + 1) * PANEL, _mm512_mul_ps(_mm512_cvtepi32_ps(odd), s));
        }
      }
    }
  }
}
#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX2
#define AVX2_F16C_FN __attribute__((target("avx2,fma,f16c")))

AVX2_F16C_FN static void dequantize256(const quantized_t* a, size_t panel, size_t np, size_t k0,
                                       size_t steps, float* block) {
  for (size_t p = 0; p < np; ++p) {
    float* out = block + p * steps * PANEL;
    if (a->group == 0) {
      const int8_t* q = (const int8_t*)a->q + (panel + p) * a->k * PANEL + k0 * PANEL;
      const float* scales = (const float*)a->scales + (panel + p) * PANEL;
      const __m256 s[2] = {_mm256_loadu_ps(scales), _mm256_loadu_ps(scales + 8)};
      for (size_t i = 0; i < steps; ++i)
        for (int h = 0; h < 2; ++h) {
          __m256i v = _mm256_cvtepi8_epi32(
              _mm_loadl_epi64((const __m128i*)(q + i * PANEL + h * 8)));
          _mm256_storeu_ps(out + i * PANEL + h * 8, _mm256_mul_ps(_mm256_cvtepi32_ps(v), s[h]));
        }
    } else {
      const uint8_t* q = a->q + (panel + p) * (a->k / 2) * PANEL + (k0 / 2) * PANEL;
      const uint16_t* scales =
          (const uint16_t*)a->scales + (panel + p) * (a->k / a->group) * PANEL;
      const __m256i low = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
      for (size_t g = 0; g < steps; g += a->group) {
        const uint16_t* group = scales + ((k0 + g) / a->group) * PANEL;
        const __m256 s[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)group)),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(group + 8)))};
        if (nibble_quads(a)) {
          for (size_t i = g; i < g + a->group; i += 8)
            for (int h = 0; h < 2; ++h) {
              const __m256i v =
                  _mm256_loadu_si256((const __m256i*)(q + (i / 2) * PANEL + h * 32));
              for (int e = 0; e < 8; ++e) {
                const __m256i value = _mm256_sub_epi32(
                    _mm256_and_si256(_mm256_srli_epi32(v, quad_shift(e)), low), eight);
                _mm256_storeu_ps(out + (i + e) * PANEL + h * 8,
                                 _mm256_mul_ps(_mm256_cvtepi32_ps(value), s[h]));
              }
            }
          continue;
        }
        for (size_t i = g; i < g + a->group; i += 2)
          for (int h = 0; h < 2; ++h) {
            __m256i v = _mm256_cvtepu8_epi32(
                _mm_loadl_epi64((const __m128i*)(q + (i / 2) * PANEL + h * 8)));
            __m256i even = _mm256_sub_epi32(_mm256_and_si256(v, low), eight);
            __m256i odd = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), eight);
            _mm256_storeu_ps(out + i * PANEL + h * 8,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(even), s[h]));
            _mm256_storeu_ps(out + (i + 1) * PANEL + h * 8,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(odd), s[h]));
          }
      }
    }
  }
}
#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX2

#if ANYSHAPE_MAX_ISA >= ISA_AVX2
// Up to DIRECT_ROWS rows (a decode step's) skip the block on the stack: each
// tile dequantizes its panels' weights in registers as it reads them, and
// scales its sums once (int8: at the end; int4: at the end of each group,
// where they are added into totals). AVX-512 hosts run their 512-bit
// version (DIRECT512_, below), which computes the same floats. The 8 of q + 8
// comes off each value as an integer, before any rounding: taken off the
// sums (through the sum of x) it cancelled digits, 4x float32's error.
// One cache line of int8 weights holds 4 steps of k of a panel: the loops
// run 4 steps at a time and ask for the line DIRECT_AHEAD bytes ahead once.
#define DIRECT_AHEAD 4096

AVX2_F16C_FN static inline void store256(const quantized_t* a, size_t row, size_t col,
                                         __m256 sum, __m256i mask) {
  __m256 bias = a->bias ? _mm256_maskload_ps(a->bias + col, mask) : _mm256_setzero_ps();
  _mm256_maskstore_ps(a->y + row * a->n + col, mask, _mm256_add_ps(sum, bias));
}

// The int4 codes and scales of panels [panel, panel + np).
static inline void int4_panels(const quantized_t* a, size_t panel, int np, const uint8_t** w,
                               const uint16_t** scales) {
  for (int p = 0; p < np; ++p) {
    w[p] = a->q + (panel + p) * (a->k / 2) * PANEL;
    scales[p] = (const uint16_t*)a->scales + (panel + p) * (a->k / a->group) * PANEL;
  }
}

// The masks of the eight-column halves of panels [panel, panel + np).
AVX2_F16C_FN static inline void direct_masks(const quantized_t* a, size_t panel, int np,
                                             __m256i* mask) {
  for (int p = 0; p < np; ++p) {
    size_t col = (panel + p) * PANEL, cols = a->n - col < PANEL ? a->n - col : PANEL;
    mask[2 * p] = mask8(cols);
    mask[2 * p + 1] = mask8(cols > 8 ? cols - 8 : 0);
  }
}

// int8: MR rows from `row` by NP panels from `panel`, the sums in registers
// (SETS of them on alternate k where there are few, for the FMA's latency).
#define DEFINE_DIRECT_Q8(MR, NP)                                                  \
  AVX2_F16C_FN static void direct_q8_##MR##x##NP(const quantized_t* a, size_t row, \
                                                 size_t panel) {                  \
    enum { H = 2 * (NP), SETS = (MR) * (NP) <= 2 ? 2 : 1 };                       \
    const size_t k = a->k;                                                        \
    const int8_t* w[NP];                                                          \
    for (int p = 0; p < (NP); ++p)                                                \
      w[p] = (const int8_t*)a->q + (panel + p) * k * PANEL;                       \
    __m256 acc[SETS][MR][H];                                                      \
    for (int s = 0; s < SETS; ++s)                                                \
      for (int r = 0; r < (MR); ++r)                                              \
        for (int h = 0; h < H; ++h) acc[s][r][h] = _mm256_setzero_ps();           \
    size_t i = 0;                                                                 \
    for (; i + 4 <= k; i += 4) {                                                  \
      for (int p = 0; p < (NP); ++p)                                              \
        _mm_prefetch((const char*)(w[p] + i * PANEL + DIRECT_AHEAD), _MM_HINT_T0); \
      for (int t = 0; t < 4; ++t) {                                               \
        const int s = t % SETS;                                                   \
        __m256 b[H];                                                              \
        for (int h = 0; h < H; ++h)                                               \
          b[h] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(         \
              (const __m128i*)(w[h / 2] + (i + t) * PANEL + (h % 2) * 8))));      \
        for (int r = 0; r < (MR); ++r) {                                          \
          __m256 xv = _mm256_set1_ps(a->x[(row + r) * k + i + t]);                \
          for (int h = 0; h < H; ++h)                                             \
            acc[s][r][h] = _mm256_fmadd_ps(xv, b[h], acc[s][r][h]);               \
        }                                                                         \
      }                                                                           \
    }                                                                             \
    for (; i < k; ++i)                                                            \
      for (int h = 0; h < H; ++h) {                                               \
        __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(       \
            (const __m128i*)(w[h / 2] + i * PANEL + (h % 2) * 8))));              \
        for (int r = 0; r < (MR); ++r)                                            \
          acc[0][r][h] = _mm256_fmadd_ps(_mm256_set1_ps(a->x[(row + r) * k + i]), \
                                         b, acc[0][r][h]);                        \
      }                                                                           \
    __m256i mask[H];                                                              \
    direct_masks(a, panel, NP, mask);                                             \
    for (int h = 0; h < H; ++h) {                                                 \
      const size_t col = panel * PANEL + h * 8;                                   \
      const __m256 scale = _mm256_loadu_ps((const float*)a->scales + col);        \
      for (int r = 0; r < (MR); ++r) {                                            \
        __m256 sum = acc[0][r][h];                                                \
        if (SETS == 2) sum = _mm256_add_ps(sum, acc[SETS - 1][r][h]);             \
        store256(a, row + r, col, _mm256_mul_ps(sum, scale), mask[h]);            \
      }                                                                           \
    }                                                                             \
  }

// int4: as DEFINE_DIRECT_Q8, each group's sums in registers, then scaled
// into `totals`: totals += s * sums.
#define DEFINE_DIRECT_Q4(MR, NP)                                                  \
  AVX2_F16C_FN static void direct_q4_##MR##x##NP(const quantized_t* a, size_t row, \
                                                 size_t panel) {                  \
    enum { H = 2 * (NP) };                                                        \
    const size_t k = a->k, group = a->group, groups = k / group;                  \
    const uint8_t* w[NP];                                                         \
    const uint16_t* scales[NP];                                                   \
    int4_panels(a, panel, NP, w, scales);                                         \
    const __m256i low = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);     \
    __m256 totals[MR][H];                                                         \
    for (int r = 0; r < (MR); ++r)                                                \
      for (int h = 0; h < H; ++h) totals[r][h] = _mm256_setzero_ps();             \
    for (size_t g = 0; g < groups; ++g) {                                         \
      __m256 acc[MR][H];                                                          \
      for (int r = 0; r < (MR); ++r)                                              \
        for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_ps();              \
      for (size_t i = g * group; i < (g + 1) * group; i += 8) {                   \
        for (int p = 0; p < (NP); ++p)                                            \
          _mm_prefetch((const char*)(w[p] + (i / 2) * PANEL + DIRECT_AHEAD),      \
                       _MM_HINT_T0);                                              \
        for (int t = 0; t < 8; t += 2) {                                          \
          __m256 even[H], odd[H];                                                 \
          for (int h = 0; h < H; ++h) {                                           \
            __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(                     \
                (const __m128i*)(w[h / 2] + ((i + t) / 2) * PANEL + (h % 2) * 8))); \
            even[h] = _mm256_cvtepi32_ps(                                         \
                _mm256_sub_epi32(_mm256_and_si256(v, low), eight));               \
            odd[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), eight)); \
          }                                                                       \
          for (int r = 0; r < (MR); ++r) {                                        \
            const float* x = a->x + (row + r) * k + i + t;                        \
            __m256 x0 = _mm256_set1_ps(x[0]), x1 = _mm256_set1_ps(x[1]);         \
            for (int h = 0; h < H; ++h)                                           \
              acc[r][h] = _mm256_fmadd_ps(x1, odd[h],                             \
                                          _mm256_fmadd_ps(x0, even[h], acc[r][h])); \
          }                                                                       \
        }                                                                         \
      }                                                                           \
      for (int h = 0; h < H; ++h) {                                               \
        const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(                     \
            (const __m128i*)(scales[h / 2] + g * PANEL + (h % 2) * 8)));          \
        for (int r = 0; r < (MR); ++r)                                            \
          totals[r][h] = _mm256_fmadd_ps(acc[r][h], scale, totals[r][h]);         \
      }                                                                           \
    }                                                                             \
    __m256i mask[H];                                                              \
    direct_masks(a, panel, NP, mask);                                             \
    for (int h = 0; h < H; ++h)                                                   \
      for (int r = 0; r < (MR); ++r)                                              \
        store256(a, row + r, panel * PANEL + h * 8, totals[r][h], mask[h]);       \
  }

// int4 weights times rows rounded to int8 (the ``_q4i8`` entry points): each
// row's block of 32 k gets one scale, its largest magnitude to 127
// (llama.cpp's Q8_0 rounds its activations so), and AVX2's byte products
// (vpmaddubsw) multiply the weights' q + 8 (unsigned) by the rows' codes
// (signed), two k at a time, into 16-bit sums: the weights in fours of k
// (nibble_quads), masked, one column's k 8 s .. 8 s + 3 (and, shifted,
// 8 s + 4 .. 8 s + 7) in 32 bits, two 16-bit sums. A block's sums (at most
// 16 products of 15 x 127 a 16-bit lane: 30480) are added in pairs by
// vpmaddwd into one 32-bit sum a column, the 8 of q + 8 taken off exactly in
// integers (8 times the sum of the row's codes), then scaled by the row's
// scale in float32, and each group's by its weights' scale. Four times fewer
// instructions than dequantizing to float32, which bounds the DIRECT_Q4
// tiles; the rows' rounding adds its error to the weights'
// (docs/quantized-weights.md). AVX-512 VNNI hosts multiply and sum the four
// k in one instruction (vpdpbusd, INTEGER_Q4_VNNI): the same integer sums,
// so the same floats, to the bit.

// The largest of v's eight lanes.
AVX2_F16C_FN static inline float largest_lane(__m256 v) {
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

// The rows of an integer product rounded once for all of a workgroup's panels
// (not again for each pair of panels): ROUND_BYTES of codes hold `chunk` k of
// each of up to ROUND_ROWS rows, and the tiles take the k in chunks, resuming
// the sums a chunk before stored in y (the sums continue from them, so a
// row's floats do not depend on the chunks, nor on the rows beside it).
// 16 KiB: with the scales, the largest frame on a decode step's path
// (quantized_block's float block is on the other).
#define ROUND_BYTES 16384
// A workgroup's rows are rounded this many at a time, and each chunk's
// panels taken by tiles of up to 4 of them: a workgroup's run of rows is a
// multiple of TILE512_ROWS (but the last), so it leaves no remainder.
#define ROUND_ROWS TILE512_ROWS
typedef struct {
  size_t row0;         // the first row rounded: codes[0] and scale[0]'s
  size_t k0, k1;       // the chunk's k: whole blocks of 32 (int4: whole groups)
  size_t chunk;        // the codes' row stride (k), a multiple of 128
  int resume, finish;  // resume: y holds the sums of the k before k0; finish:
                       // k1 ends the whole blocks (scale, bias and the rest of k)
  __attribute__((aligned(32))) int8_t codes[ROUND_BYTES];  // int8 (int4's) or int16 (int8's)
  float scale[ROUND_BYTES / 32];                           // [row][block]
  int32_t offset[ROUND_BYTES / 32];                        // int4: 8 x the block's sum of codes
} rounded_t;

// Row `row + r`'s place among c's rows.
#define ROUNDED(c, row, r) ((row) - (c)->row0 + (r))

// The 32 floats at x rounded to int8 codes (in order), by one scale.
AVX2_F16C_FN static inline __m256i round_block32(const float* x, float* scale, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(
      _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
      _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
  const float largest = largest_lane(m);
  *scale = largest / 127.0f;
  const __m256 inverse = _mm256_set1_ps(largest > 0.0f ? 127.0f / largest : 0.0f);
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, inverse));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, inverse));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, inverse));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, inverse));
  // The packs interleave the 128-bit lanes: the permute puts the codes in order.
  const __m256i q = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3)),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m256i pairs = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                          _mm256_set1_epi16(1));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  s4 = _mm_hadd_epi32(s4, s4);
  *sum = _mm_cvtsi128_si32(_mm_hadd_epi32(s4, s4));
  return q;
}

// The codes of k t .. t + 3 at `codes` in every 32-bit lane: the four by
// which the byte products multiply a column's four k. Broadcast from memory,
// a load and no shuffle.
AVX2_F16C_FN static inline __m256i code_quad(const int8_t* codes, int t) {
  int32_t quad;
  __builtin_memcpy(&quad, codes + t, sizeof quad);
  return _mm256_set1_epi32(quad);
}

// The sums of rows [row, row + MR) by the eight columns at col, before k0:
// zero, or those y holds (rounded_t's resume).
#define RESUMED(c, a, row, r, col, mask)                                           \
  ((c)->resume ? _mm256_maskload_ps((a)->y + ((row) + (r)) * (a)->n + (col), (mask)) \
               : _mm256_setzero_ps())

#define DEFINE_INTEGER_Q4(MR, NP)                                                 \
  AVX2_F16C_FN static void integer_q4_##MR##x##NP(const quantized_t* a, size_t row, \
                                                  size_t panel, const rounded_t* c) { \
    enum { H = 2 * (NP) };                                                         \
    const size_t group = a->group;                                                  \
    const uint8_t* w[NP];                                                          \
    const uint16_t* scales[NP];                                                    \
    int4_panels(a, panel, NP, w, scales);                                          \
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);         \
    __m256i mask[H];                                                               \
    direct_masks(a, panel, NP, mask);                                              \
    __m256 totals[MR][H];                                                          \
    for (int r = 0; r < (MR); ++r)                                                 \
      for (int h = 0; h < H; ++h)                                                  \
        totals[r][h] = RESUMED(c, a, row, r, panel * PANEL + h * 8, mask[h]);      \
    for (size_t g = c->k0 / group; g < c->k1 / group; ++g) {                       \
      __m256 sums[MR][H];                                                          \
      for (int r = 0; r < (MR); ++r)                                               \
        for (int h = 0; h < H; ++h) sums[r][h] = _mm256_setzero_ps();              \
      for (size_t b = g * group; b < (g + 1) * group; b += 32) {                   \
        /* acc[r][h]: columns 8 h .. 8 h + 7 of the tile, two 16-bit sums each */  \
        __m256i acc[MR][H];                                                        \
        for (int r = 0; r < (MR); ++r)                                             \
          for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_si256();          \
        for (int t = 0; t < 32; t += 8) {                                          \
          for (int p = 0; p < (NP); ++p) /* a line a panel per step */              \
            _mm_prefetch((const char*)(w[p] + ((b + t) / 2) * PANEL + DIRECT_AHEAD), \
                         _MM_HINT_T0);                                             \
          __m256i x0[MR], x4[MR];                                                  \
          for (int r = 0; r < (MR); ++r) {                                         \
            const int8_t* codes = c->codes + ROUNDED(c, row, r) * c->chunk + (b - c->k0); \
            x0[r] = code_quad(codes, t);                                           \
            x4[r] = code_quad(codes, t + 4);                                       \
          }                                                                        \
          for (int h = 0; h < H; ++h) {                                            \
            const __m256i v = _mm256_loadu_si256(                                  \
                (const __m256i*)(w[h / 2] + ((b + t) / 2) * PANEL + (h % 2) * 32)); \
            const __m256i first = _mm256_and_si256(v, low);                        \
            const __m256i second = _mm256_and_si256(_mm256_srli_epi16(v, 4), low); \
            for (int r = 0; r < (MR); ++r)                                         \
              acc[r][h] = _mm256_add_epi16(                                        \
                  _mm256_add_epi16(acc[r][h], _mm256_maddubs_epi16(first, x0[r])), \
                  _mm256_maddubs_epi16(second, x4[r]));                            \
          }                                                                        \
        }                                                                          \
        for (int r = 0; r < (MR); ++r) {                                           \
          const size_t at = ROUNDED(c, row, r) * (c->chunk / 32) + (b - c->k0) / 32; \
          const __m256 row_scale = _mm256_set1_ps(c->scale[at]);                   \
          const __m256i offset = _mm256_set1_epi32(c->offset[at]);                 \
          for (int h = 0; h < H; ++h)                                              \
            sums[r][h] = _mm256_fmadd_ps(                                          \
                _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(acc[r][h], ones), \
                                                    offset)),                      \
                row_scale, sums[r][h]);                                            \
        }                                                                          \
      }                                                                            \
      for (int h = 0; h < H; ++h) {                                                \
        const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(                      \
            (const __m128i*)(scales[h / 2] + g * PANEL + (h % 2) * 8)));           \
        for (int r = 0; r < (MR); ++r)                                             \
          totals[r][h] = _mm256_fmadd_ps(sums[r][h], scale, totals[r][h]);         \
      }                                                                            \
    }                                                                              \
    for (int h = 0; h < H; ++h) {                                                  \
      const size_t col = panel * PANEL + h * 8;                                    \
      for (int r = 0; r < (MR); ++r) {                                             \
        if (c->finish)                                                             \
          store256(a, row + r, col, totals[r][h], mask[h]);                        \
        else                                                                       \
          _mm256_maskstore_ps(a->y + (row + r) * a->n + col, mask[h], totals[r][h]); \
      }                                                                            \
    }                                                                              \
  }

// int8 weights times rows rounded to int16 (the ``_q8i16`` entry points):
// each row's block of 32 k gets one scale, its largest magnitude to 32767,
// and AVX2's 16-bit products (vpmaddwd) multiply pairs of k of the weights,
// sign-extended, by pairs of the rows' codes into 32-bit sums (at most 32
// products of 127 x 32767 a lane: no overflow). A block's sums are scaled by
// the row's scale in float32, and the product by each column's scale at the
// end. The k of a block take half the instructions of DIRECT_Q8's
// dequantizing to float32; the rounding is at most 1/65534 of each block's
// largest magnitude, far below the weights' own (docs/quantized-weights.md).

// The 32 floats at x rounded to int16 codes (in order) by one scale, which
// it returns.
AVX2_F16C_FN static inline float round_block32_i16(const float* x, int16_t* codes) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  const float largest = largest_lane(m);
  const __m256 inverse = _mm256_set1_ps(largest > 0.0f ? 32767.0f / largest : 0.0f);
  for (int i = 0; i < 4; i += 2) {
    // packs interleaves the 128-bit lanes: the permute puts the codes in order
    const __m256i pair = _mm256_permute4x64_epi64(
        _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse)),
                           _mm256_cvtps_epi32(_mm256_mul_ps(v[i + 1], inverse))),
        0xD8);
    _mm256_storeu_si256((__m256i*)(codes + 8 * i), pair);
  }
  return largest / 32767.0f;
}

#define DEFINE_INTEGER_Q8(MR, NP)                                                 \
  AVX2_F16C_FN static void integer_q8_##MR##x##NP(const quantized_t* a, size_t row, \
                                                  size_t panel, const rounded_t* c) { \
    enum { H = 2 * (NP) };                                                         \
    const size_t k = a->k;                                                         \
    const int8_t* w[NP];                                                           \
    for (int p = 0; p < (NP); ++p) w[p] = (const int8_t*)a->q + (panel + p) * k * PANEL; \
    const int16_t* codes = (const int16_t*)c->codes;                               \
    __m256i mask[H];                                                               \
    direct_masks(a, panel, NP, mask);                                              \
    __m256 sums[MR][H];                                                            \
    for (int r = 0; r < (MR); ++r)                                                 \
      for (int h = 0; h < H; ++h)                                                  \
        sums[r][h] = RESUMED(c, a, row, r, panel * PANEL + h * 8, mask[h]);        \
    for (size_t b = c->k0; b < c->k1; b += 32) {                                   \
      const size_t block = (b - c->k0) / 32;                                       \
      __m256i acc[MR][H];                                                          \
      for (int r = 0; r < (MR); ++r)                                               \
        for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_si256();            \
      for (int t = 0; t < 32; t += 2) {                                            \
        if (t % 4 == 0)                                                            \
          for (int p = 0; p < (NP); ++p)                                           \
            _mm_prefetch((const char*)(w[p] + (b + t) * PANEL + DIRECT_AHEAD), _MM_HINT_T0); \
        __m256i wv[H];                                                             \
        for (int p = 0; p < (NP); ++p) {                                           \
          const __m128i k0 = _mm_loadu_si128((const __m128i*)(w[p] + (b + t) * PANEL)); \
          const __m128i k1 = _mm_loadu_si128((const __m128i*)(w[p] + (b + t + 1) * PANEL)); \
          wv[2 * p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(k0, k1));             \
          wv[2 * p + 1] = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(k0, k1));         \
        }                                                                          \
        for (int r = 0; r < (MR); ++r) {                                           \
          int32_t pair;                                                            \
          __builtin_memcpy(&pair, codes + ROUNDED(c, row, r) * c->chunk + (b - c->k0) + t, \
                           sizeof pair);                                           \
          const __m256i xv = _mm256_set1_epi32(pair);                              \
          for (int h = 0; h < H; ++h)                                              \
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(wv[h], xv)); \
        }                                                                          \
      }                                                                            \
      for (int r = 0; r < (MR); ++r) {                                             \
        const __m256 row_scale =                                                   \
            _mm256_set1_ps(c->scale[ROUNDED(c, row, r) * (c->chunk / 32) + block]); \
        for (int h = 0; h < H; ++h)                                                \
          sums[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), row_scale, sums[r][h]); \
      }                                                                            \
    }                                                                              \
    if (c->finish)                                                                 \
      for (size_t b = c->k1; b < k; ++b) /* k past the last whole block: in float32 */ \
        for (int h = 0; h < H; ++h) {                                              \
          const __m256 wf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64( \
              (const __m128i*)(w[h / 2] + b * PANEL + (h % 2) * 8))));             \
          for (int r = 0; r < (MR); ++r)                                           \
            sums[r][h] = _mm256_fmadd_ps(_mm256_set1_ps(a->x[(row + r) * k + b]), wf, \
                                         sums[r][h]);                              \
        }                                                                          \
    for (int h = 0; h < H; ++h) {                                                  \
      const size_t col = panel * PANEL + h * 8;                                    \
      const __m256 scale = _mm256_loadu_ps((const float*)a->scales + col);         \
      for (int r = 0; r < (MR); ++r) {                                             \
        if (c->finish)                                                             \
          store256(a, row + r, col, _mm256_mul_ps(sums[r][h], scale), mask[h]);    \
        else                                                                       \
          _mm256_maskstore_ps(a->y + (row + r) * a->n + col, mask[h], sums[r][h]); \
      }                                                                            \
    }                                                                              \
  }

DEFINE_DIRECT_Q8(1, 1) DEFINE_DIRECT_Q8(2, 1) DEFINE_DIRECT_Q8(3, 1) DEFINE_DIRECT_Q8(4, 1)
DEFINE_DIRECT_Q4(1, 1) DEFINE_DIRECT_Q4(2, 1) DEFINE_DIRECT_Q4(3, 1) DEFINE_DIRECT_Q4(4, 1)
DEFINE_INTEGER_Q4(1, 1) DEFINE_INTEGER_Q4(2, 1) DEFINE_INTEGER_Q4(3, 1) DEFINE_INTEGER_Q4(4, 1)
DEFINE_INTEGER_Q8(1, 1) DEFINE_INTEGER_Q8(2, 1) DEFINE_INTEGER_Q8(3, 1) DEFINE_INTEGER_Q8(4, 1)

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
// DIRECT_Q8 and DIRECT_Q4 with AVX-512: a panel's 16 columns in one register,
// half the instructions a weight. Each lane takes the AVX2 tile's operations
// in its order (the same conversions, the same FMAs on the same sums, SETS as
// the AVX2 tile of those rows and panels has), so a host computes the same
// floats with either, to the bit (test_quantized_weights.py). Tiles of 3 and
// 4 rows take one panel, as AVX2's do: with two, int4's 4 rows ran no faster
// than AVX2's and int8's 12-16 % slower on Zen 4, which splits each 512-bit
// operation in two (docs/quantized-weights.md).
#define DIRECT512_FN __attribute__((target("avx512f,fma")))

// y's row `row`, the 16 columns at col (those of `mask`): sum plus the bias.
DIRECT512_FN static inline void store512(const quantized_t* a, size_t row, size_t col,
                                         __m512 sum, __mmask16 mask) {
  const __m512 bias = a->bias ? _mm512_maskz_loadu_ps(mask, a->bias + col) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(a->y + row * a->n + col, mask, _mm512_add_ps(sum, bias));
}

#define DEFINE_DIRECT512_Q8(MR, NP, SETS)                                         \
  DIRECT512_FN static void direct512_q8_##MR##x##NP##s##SETS(                     \
      const quantized_t* a, size_t row, size_t panel) {                           \
    const size_t k = a->k;                                                        \
    const int8_t* w[NP];                                                          \
    for (int p = 0; p < (NP); ++p)                                                \
      w[p] = (const int8_t*)a->q + (panel + p) * k * PANEL;                       \
    __m512 acc[SETS][MR][NP];                                                     \
    for (int s = 0; s < (SETS); ++s)                                              \
      for (int r = 0; r < (MR); ++r)                                              \
        for (int p = 0; p < (NP); ++p) acc[s][r][p] = _mm512_setzero_ps();        \
    size_t i = 0;                                                                 \
    for (; i + 4 <= k; i += 4) {                                                  \
      for (int p = 0; p < (NP); ++p)                                              \
        _mm_prefetch((const char*)(w[p] + i * PANEL + DIRECT_AHEAD), _MM_HINT_T0); \
      for (int t = 0; t < 4; ++t) {                                               \
        const int s = t % (SETS);                                                 \
        __m512 b[NP];                                                             \
        for (int p = 0; p < (NP); ++p)                                            \
          b[p] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(                         \
              _mm_loadu_si128((const __m128i*)(w[p] + (i + t) * PANEL))));        \
        for (int r = 0; r < (MR); ++r) {                                          \
          __m512 xv = _mm512_set1_ps(a->x[(row + r) * k + i + t]);                \
          for (int p = 0; p < (NP); ++p)                                          \
            acc[s][r][p] = _mm512_fmadd_ps(xv, b[p], acc[s][r][p]);               \
        }                                                                         \
      }                                                                           \
    }                                                                             \
    for (; i < k; ++i)                                                            \
      for (int p = 0; p < (NP); ++p) {                                            \
        __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(                       \
            _mm_loadu_si128((const __m128i*)(w[p] + i * PANEL))));                \
        for (int r = 0; r < (MR); ++r)                                            \
          acc[0][r][p] = _mm512_fmadd_ps(_mm512_set1_ps(a->x[(row + r) * k + i]), \
                                         b, acc[0][r][p]);                        \
      }                                                                           \
    for (int p = 0; p < (NP); ++p) {                                              \
      const size_t col = (panel + p) * PANEL;                                     \
      const __mmask16 mask = mask16(a->n - col);                                  \
      const __m512 scale = _mm512_maskz_loadu_ps(mask, (const float*)a->scales + col); \
      for (int r = 0; r < (MR); ++r) {                                            \
        __m512 sum = acc[0][r][p];                                                \
        if ((SETS) == 2) sum = _mm512_add_ps(sum, acc[(SETS) - 1][r][p]);         \
        store512(a, row + r, col, _mm512_mul_ps(sum, scale), mask);        \
      }                                                                           \
    }                                                                             \
  }

#define DEFINE_DIRECT512_Q4(MR, NP)                                               \
  DIRECT512_FN static void direct512_q4_##MR##x##NP(const quantized_t* a, size_t row, \
                                                    size_t panel) {               \
    const size_t k = a->k, group = a->group, groups = k / group;                  \
    const uint8_t* w[NP];                                                         \
    const uint16_t* scales[NP];                                                   \
    int4_panels(a, panel, NP, w, scales);                                         \
    /* q - 8 for each code q, looked up: vpermps reads an index's low 4 bits */ \
    const __m512 values = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1,          \
                                         0, 1, 2, 3, 4, 5, 6, 7);                  \
    __m512 totals[MR][NP];                                                        \
    for (int r = 0; r < (MR); ++r)                                                \
      for (int p = 0; p < (NP); ++p) totals[r][p] = _mm512_setzero_ps();          \
    for (size_t g = 0; g < groups; ++g) {                                         \
      __m512 acc[MR][NP];                                                         \
      for (int r = 0; r < (MR); ++r)                                              \
        for (int p = 0; p < (NP); ++p) acc[r][p] = _mm512_setzero_ps();           \
      for (size_t i = g * group; i < (g + 1) * group; i += 8) {                   \
        for (int p = 0; p < (NP); ++p)                                            \
          _mm_prefetch((const char*)(w[p] + (i / 2) * PANEL + DIRECT_AHEAD),      \
                       _MM_HINT_T0);                                              \
        for (int t = 0; t < 8; t += 2) {                                          \
          __m512 even[NP], odd[NP];                                               \
          for (int p = 0; p < (NP); ++p) {                                        \
            __m512i v = _mm512_cvtepu8_epi32(                                     \
                _mm_loadu_si128((const __m128i*)(w[p] + ((i + t) / 2) * PANEL))); \
            even[p] = _mm512_permutexvar_ps(v, values);                           \
            odd[p] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), values);      \
          }                                                                       \
          for (int r = 0; r < (MR); ++r) {                                        \
            const float* x = a->x + (row + r) * k + i + t;                        \
            __m512 x0 = _mm512_set1_ps(x[0]), x1 = _mm512_set1_ps(x[1]);         \
            for (int p = 0; p < (NP); ++p)                                        \
              acc[r][p] = _mm512_fmadd_ps(x1, odd[p],                             \
                                          _mm512_fmadd_ps(x0, even[p], acc[r][p])); \
          }                                                                       \
        }                                                                         \
      }                                                                           \
      for (int p = 0; p < (NP); ++p) {                                            \
        const __m512 scale = _mm512_cvtph_ps(                                     \
            _mm256_loadu_si256((const __m256i*)(scales[p] + g * PANEL)));         \
        for (int r = 0; r < (MR); ++r)                                            \
          totals[r][p] = _mm512_fmadd_ps(acc[r][p], scale, totals[r][p]);         \
      }                                                                           \
    }                                                                             \
    for (int p = 0; p < (NP); ++p) {                                              \
      const size_t col = (panel + p) * PANEL;                                     \
      for (int r = 0; r < (MR); ++r)                                              \
        store512(a, row + r, col, totals[r][p], mask16(a->n - col));       \
    }                                                                             \
  }

// SETS as AVX2's tile of those rows and panels: two where it has at most two
// rows by panels.
DEFINE_DIRECT512_Q8(1, 1, 2) DEFINE_DIRECT512_Q8(2, 1, 2) DEFINE_DIRECT512_Q8(3, 1, 1)
DEFINE_DIRECT512_Q8(4, 1, 1)
DEFINE_DIRECT512_Q4(1, 1) DEFINE_DIRECT512_Q4(2, 1) DEFINE_DIRECT512_Q4(3, 1)
DEFINE_DIRECT512_Q4(4, 1)

// direct_rows with AVX-512: as AVX2's, one panel at a time.
NOINLINE DIRECT512_FN static void direct_rows512(const quantized_t* a, size_t row0,
                                                 size_t rows, size_t panel0, size_t panel1) {
  const int int4 = a->group != 0;
  for (size_t panel = panel0; panel < panel1; ++panel) {
#define DIRECT512(MR, SETS) \
  (int4 ? direct512_q4_##MR##x1(a, row0, panel) : direct512_q8_##MR##x1s##SETS(a, row0, panel))
    switch (rows) {
      case 1: DIRECT512(1, 2); break;
      case 2: DIRECT512(2, 2); break;
      case 3: DIRECT512(3, 1); break;
      case 4: DIRECT512(4, 1); break;
      default: __builtin_trap();  // callers take at most DIRECT_ROWS
    }
#undef DIRECT512
  }
}
#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX512_VNNI
// The integer tiles with AVX-512 VNNI: a panel's 16 columns in one register,
// and one instruction multiplying and summing a column's four k (vpdpbusd:
// int4's codes, unsigned, by the rows' int8 codes) or two (vpdpwssd: int8's
// codes, sign-extended, by the rows' int16 codes) into its 32-bit sum. The
// integer sums are INTEGER_Q4's and INTEGER_Q8's, exact, and every float
// operation after them is theirs in their order (a product and a sum where
// they round twice), so an artifact computes the same on AVX2 and AVX-512
// hosts, to the bit (test_quantized_weights.py).
#define VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

// The sums of row r by the 16 columns at col before c->k0: zero, or those y holds.
#define RESUMED512(c, a, row, r, col, mask)                                           \
  ((c)->resume ? _mm512_maskz_loadu_ps((mask), (a)->y + ((row) + (r)) * (a)->n + (col)) \
               : _mm512_setzero_ps())

VNNI_FN static inline __m512i code_quad512(const int8_t* codes, int t) {
  int32_t quad;
  __builtin_memcpy(&quad, codes + t, sizeof quad);
  return _mm512_set1_epi32(quad);
}

// The offset from a panel's weights DIRECT_AHEAD bytes past `at` in the
// order the tiles read them: the panels of a tile of NP are read side by
// side, so a prefetch past the end of its panel asks for the same offset in
// the next tile's (the panels are contiguous: panel_bytes apart). Panels are
// a few KiB (k = 896: 7 KiB of int4), too short for the hardware's streams.
static inline size_t ahead(size_t at, size_t panel_bytes, size_t np) {
  const size_t to = at + DIRECT_AHEAD;
  return to < panel_bytes ? to : to + (np - 1) * panel_bytes;
}

#define DEFINE_INTEGER_Q4_VNNI(MR, NP)                                             \
  VNNI_FN static void integer_q4_vnni_##MR##x##NP(const quantized_t* a, size_t row,  \
                                                  size_t panel, const rounded_t* c) { \
    const size_t group = a->group;                                                  \
    const uint8_t* w[NP];                                                          \
    const uint16_t* scales[NP];                                                    \
    int4_panels(a, panel, NP, w, scales);                                          \
    const __m512i low = _mm512_set1_epi8(15);                                      \
    __mmask16 mask[NP];                                                            \
    for (int p = 0; p < (NP); ++p) mask[p] = mask16(a->n - (panel + p) * PANEL);   \
    __m512 totals[MR][NP];                                                         \
    for (int r = 0; r < (MR); ++r)                                                 \
      for (int p = 0; p < (NP); ++p)                                               \
        totals[r][p] = RESUMED512(c, a, row, r, (panel + p) * PANEL, mask[p]);     \
    for (size_t g = c->k0 / group; g < c->k1 / group; ++g) {                       \
      __m512 sums[MR][NP];                                                         \
      for (int r = 0; r < (MR); ++r)                                               \
        for (int p = 0; p < (NP); ++p) sums[r][p] = _mm512_setzero_ps();           \
      for (size_t b = g * group; b < (g + 1) * group; b += 32) {                   \
        __m512i acc[MR][NP];                                                       \
        for (int r = 0; r < (MR); ++r)                                             \
          for (int p = 0; p < (NP); ++p) acc[r][p] = _mm512_setzero_si512();       \
        for (int t = 0; t < 32; t += 8)                                            \
          for (int p = 0; p < (NP); ++p) {                                         \
            if ((NP) > 1) /* one panel: a stream the hardware follows */          \
              _mm_prefetch((const char*)(w[p] + ahead(((b + t) / 2) * PANEL, a->k / 2 * PANEL, NP)), \
                           _MM_HINT_T0);                                           \
            const __m512i v =                                                      \
                _mm512_loadu_si512((const void*)(w[p] + ((b + t) / 2) * PANEL));   \
            const __m512i first = _mm512_and_si512(v, low);                        \
            const __m512i second = _mm512_and_si512(_mm512_srli_epi16(v, 4), low); \
            for (int r = 0; r < (MR); ++r) {                                       \
              const int8_t* codes = c->codes + ROUNDED(c, row, r) * c->chunk + (b - c->k0); \
              acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], first, code_quad512(codes, t)); \
              acc[r][p] =                                                          \
                  _mm512_dpbusd_epi32(acc[r][p], second, code_quad512(codes, t + 4)); \
            }                                                                      \
          }                                                                        \
        for (int r = 0; r < (MR); ++r) {                                           \
          const size_t at = ROUNDED(c, row, r) * (c->chunk / 32) + (b - c->k0) / 32; \
          const __m512 row_scale = _mm512_set1_ps(c->scale[at]);                   \
          const __m512i offset = _mm512_set1_epi32(c->offset[at]);                 \
          for (int p = 0; p < (NP); ++p)                                           \
            sums[r][p] = _mm512_fmadd_ps(                                          \
                _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][p], offset)), row_scale, \
                sums[r][p]);                                                       \
        }                                                                          \
      }                                                                            \
      for (int p = 0; p < (NP); ++p) {                                             \
        const __m512 scale = _mm512_cvtph_ps(                                      \
            _mm256_loadu_si256((const __m256i*)(scales[p] + g * PANEL)));          \
        for (int r = 0; r < (MR); ++r)                                             \
          totals[r][p] = _mm512_fmadd_ps(sums[r][p], scale, totals[r][p]);         \
      }                                                                            \
    }                                                                              \
    for (int p = 0; p < (NP); ++p) {                                               \
      const size_t col = (panel + p) * PANEL;                                      \
      for (int r = 0; r < (MR); ++r) {                                             \
        if (c->finish)                                                             \
          store512(a, row + r, col, totals[r][p], mask[p]);                        \
        else                                                                       \
          _mm512_mask_storeu_ps(a->y + (row + r) * a->n + col, mask[p], totals[r][p]); \
      }                                                                            \
    }                                                                              \
  }

#define DEFINE_INTEGER_Q8_VNNI(MR, NP)                                             \
  VNNI_FN static void integer_q8_vnni_##MR##x##NP(const quantized_t* a, size_t row,  \
                                                  size_t panel, const rounded_t* c) { \
    const size_t k = a->k;                                                         \
    const int8_t* w[NP];                                                           \
    for (int p = 0; p < (NP); ++p) w[p] = (const int8_t*)a->q + (panel + p) * k * PANEL; \
    const int16_t* codes = (const int16_t*)c->codes;                               \
    /* words [k: 16 columns][k + 1: 16 columns] to [column: k, k + 1] */           \
    const __m512i interleave = _mm512_set_epi32(                                   \
        31 << 16 | 15, 30 << 16 | 14, 29 << 16 | 13, 28 << 16 | 12, 27 << 16 | 11, \
        26 << 16 | 10, 25 << 16 | 9, 24 << 16 | 8, 23 << 16 | 7, 22 << 16 | 6,    \
        21 << 16 | 5, 20 << 16 | 4, 19 << 16 | 3, 18 << 16 | 2, 17 << 16 | 1, 16 << 16 | 0); \
    __mmask16 mask[NP];                                                            \
    for (int p = 0; p < (NP); ++p) mask[p] = mask16(a->n - (panel + p) * PANEL);   \
    __m512 sums[MR][NP];                                                           \
    for (int r = 0; r < (MR); ++r)                                                 \
      for (int p = 0; p < (NP); ++p)                                               \
        sums[r][p] = RESUMED512(c, a, row, r, (panel + p) * PANEL, mask[p]);       \
    for (size_t b = c->k0; b < c->k1; b += 32) {                                   \
      const size_t block = (b - c->k0) / 32;                                       \
      __m512i acc[MR][NP];                                                         \
      for (int r = 0; r < (MR); ++r)                                               \
        for (int p = 0; p < (NP); ++p) acc[r][p] = _mm512_setzero_si512();         \
      for (int t = 0; t < 32; t += 2) {                                            \
        if (t % 4 == 0 && (NP) > 1) /* one panel: a stream the hardware follows */ \
          for (int p = 0; p < (NP); ++p)                                           \
            _mm_prefetch((const char*)(w[p] + ahead((b + t) * PANEL, k * PANEL, NP)),  \
                         _MM_HINT_T0);                                             \
        for (int p = 0; p < (NP); ++p) {                                           \
          const __m512i wv = _mm512_permutexvar_epi16(                             \
              interleave,                                                          \
              _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(w[p] + (b + t) * PANEL)))); \
          for (int r = 0; r < (MR); ++r) {                                         \
            int32_t pair;                                                          \
            __builtin_memcpy(&pair, codes + ROUNDED(c, row, r) * c->chunk + (b - c->k0) + t, \
                             sizeof pair);                                         \
            acc[r][p] = _mm512_dpwssd_epi32(acc[r][p], wv, _mm512_set1_epi32(pair)); \
          }                                                                        \
        }                                                                          \
      }                                                                            \
      for (int r = 0; r < (MR); ++r) {                                             \
        const __m512 row_scale =                                                   \
            _mm512_set1_ps(c->scale[ROUNDED(c, row, r) * (c->chunk / 32) + block]); \
        for (int p = 0; p < (NP); ++p)                                             \
          sums[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][p]), row_scale, sums[r][p]); \
      }                                                                            \
    }                                                                              \
    if (c->finish)                                                                 \
      for (size_t b = c->k1; b < k; ++b) /* k past the last whole block: in float32 */ \
        for (int p = 0; p < (NP); ++p) {                                           \
          const __m512 wf = _mm512_cvtepi32_ps(                                    \
              _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(w[p] + b * PANEL)))); \
          for (int r = 0; r < (MR); ++r)                                           \
            sums[r][p] = _mm512_fmadd_ps(_mm512_set1_ps(a->x[(row + r) * k + b]), wf, \
                                         sums[r][p]);                              \
        }                                                                          \
    for (int p = 0; p < (NP); ++p) {                                               \
      const size_t col = (panel + p) * PANEL;                                      \
      const __m512 scale = _mm512_loadu_ps((const float*)a->scales + col);         \
      for (int r = 0; r < (MR); ++r) {                                             \
        if (c->finish)                                                             \
          store512(a, row + r, col, _mm512_mul_ps(sums[r][p], scale), mask[p]);    \
        else                                                                       \
          _mm512_mask_storeu_ps(a->y + (row + r) * a->n + col, mask[p], sums[r][p]); \
      }                                                                            \
    }                                                                              \
  }

DEFINE_INTEGER_Q4_VNNI(1, 2) DEFINE_INTEGER_Q4_VNNI(2, 2) DEFINE_INTEGER_Q4_VNNI(3, 2)
DEFINE_INTEGER_Q4_VNNI(4, 2) DEFINE_INTEGER_Q4_VNNI(1, 1) DEFINE_INTEGER_Q4_VNNI(2, 1)
DEFINE_INTEGER_Q4_VNNI(3, 1) DEFINE_INTEGER_Q4_VNNI(4, 1)
DEFINE_INTEGER_Q8_VNNI(1, 2) DEFINE_INTEGER_Q8_VNNI(2, 2) DEFINE_INTEGER_Q8_VNNI(3, 2)
DEFINE_INTEGER_Q8_VNNI(4, 2) DEFINE_INTEGER_Q8_VNNI(1, 1) DEFINE_INTEGER_Q8_VNNI(2, 1)
DEFINE_INTEGER_Q8_VNNI(3, 1) DEFINE_INTEGER_Q8_VNNI(4, 1)
#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512_VNNI

// Rows [row0, row0 + rows) of k in [c->k0, c->k1) rounded into c: int4's
// to int8 (with 8 x each block's sum of codes), int8's to int16.
AVX2_F16C_FN static void round_rows(const quantized_t* a, size_t row0, size_t rows,
                                    rounded_t* c) {
  const int int4 = a->group != 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t b = c->k0; b < c->k1; b += 32) {
      const float* x = a->x + (row0 + r) * a->k + b;
      const size_t at = r * (c->chunk / 32) + (b - c->k0) / 32;
      if (int4) {
        int32_t sum;
        const __m256i q = round_block32(x, &c->scale[at], &sum);
        _mm256_store_si256((__m256i*)(c->codes + r * c->chunk + (b - c->k0)), q);
        c->offset[at] = 8 * sum;
      } else {
        c->scale[at] = round_block32_i16(x, (int16_t*)c->codes + r * c->chunk + (b - c->k0));
      }
    }
}

// Rows [row0, row0 + rows) (at most DIRECT_ROWS) of float32 activations by
// panels [panel0, panel1), one panel at a time. A workgroup's panels are
// contiguous, so its tiles read one stream; a tile of two panels reads two
// streams k * 8 or k * 16 bytes apart that start again at every tile, which
// the hardware's prefetchers follow poorly (docs/quantized-weights.md, "One
// panel a tile"; bench/kernels/streams.c).
NOINLINE AVX2_F16C_FN static void direct_rows(const quantized_t* a, size_t row0,
                                              size_t rows, size_t panel0, size_t panel1) {
#if ANYSHAPE_MAX_ISA >= ISA_AVX512
  if (isa() >= ISA_AVX512) {
    direct_rows512(a, row0, rows, panel0, panel1);
    return;
  }
#endif
  const int int4 = a->group != 0;
  for (size_t panel = panel0; panel < panel1; ++panel) {
#define DIRECT(MR) (int4 ? direct_q4_##MR##x1(a, row0, panel) : direct_q8_##MR##x1(a, row0, panel))
    switch (rows) {
      case 1: DIRECT(1); break;
      case 2: DIRECT(2); break;
      case 3: DIRECT(3); break;
      case 4: DIRECT(4); break;
      default: __builtin_trap();  // callers take at most DIRECT_ROWS
    }
#undef DIRECT
  }
}

// Rows [row0, row1) by panels [panel0, panel1) in integers (the _q4i8 and
// _q8i16 entry points), every row count alike: ROUND_ROWS rows at a time,
// rounded a chunk of k at a time for all the panels (rounded_t), and taken
// by tiles of up to 4 rows: one panel at a time (as direct_rows, for one
// stream), but with VNNI three rows or more, which take two panels where two
// remain (their loads and products then overlap better).
NOINLINE AVX2_F16C_FN static void integer_rows(const quantized_t* a, size_t row0,
                                               size_t row1, size_t panel0, size_t panel1) {
  const int int4 = a->group != 0;
#if ANYSHAPE_MAX_ISA >= ISA_AVX512_VNNI
  const int vnni = isa() >= ISA_AVX512_VNNI;
#define INTEGER_VNNI(MR, NP)                                           \
  (int4 ? integer_q4_vnni_##MR##x##NP(a, row, panel, &c)               \
        : integer_q8_vnni_##MR##x##NP(a, row, panel, &c))
#else
  const int vnni = 0;
#define INTEGER_VNNI(MR, NP) __builtin_trap()
#endif
#define INTEGER(MR, NP)                                                \
  (vnni ? INTEGER_VNNI(MR, NP)                                         \
        : int4 ? integer_q4_##MR##x##NP(a, row, panel, &c)             \
               : integer_q8_##MR##x##NP(a, row, panel, &c))
  rounded_t c;
  // int4's k is whole groups; int8's k past the last whole block stays float32
  const size_t whole = int4 ? a->k : a->k / 32 * 32;
  for (c.row0 = row0; c.row0 < row1; c.row0 += ROUND_ROWS) {
    const size_t rows = row1 - c.row0 < ROUND_ROWS ? row1 - c.row0 : ROUND_ROWS;
    c.chunk = ROUND_BYTES / (rows * (int4 ? 1 : 2)) / 128 * 128;
    for (c.k0 = 0;; c.k0 = c.k1) {
      c.k1 = whole - c.k0 > c.chunk ? c.k0 + c.chunk : whole;
      c.resume = c.k0 > 0;
      c.finish = c.k1 == whole;
      round_rows(a, c.row0, rows, &c);
      for (size_t panel = panel0; panel < panel1;) {
        const int two = vnni && rows >= 3 && panel1 - panel >= 2;
        for (size_t row = c.row0; row < c.row0 + rows; row += 4) {
          const size_t tile = c.row0 + rows - row < 4 ? c.row0 + rows - row : 4;
          switch (tile) {  // 1 and 2 by two panels: the last rows of 5, 6, 9 or 10
            case 1: if (two) INTEGER_VNNI(1, 2); else INTEGER(1, 1); break;
            case 2: if (two) INTEGER_VNNI(2, 2); else INTEGER(2, 1); break;
            case 3: if (two) INTEGER_VNNI(3, 2); else INTEGER(3, 1); break;
            case 4: if (two) INTEGER_VNNI(4, 2); else INTEGER(4, 1); break;
          }
        }
        panel += two ? 2 : 1;
      }
      if (c.finish) break;
    }
  }
#undef INTEGER
#undef INTEGER_VNNI
}
#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX2

static void dequantize(const quantized_t* a, size_t panel, size_t np, size_t k0, size_t steps,
                       float* block) {
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
  const int found = isa();
#endif
#if ANYSHAPE_MAX_ISA >= ISA_AVX512
  if (found >= ISA_AVX512) {
    dequantize512(a, panel, np, k0, steps, block);
    return;
  }
#endif
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
  if (found == ISA_AVX2) {
    dequantize256(a, panel, np, k0, steps, block);
    return;
  }
#endif
  dequantize_portable(a, panel, np, k0, steps, block);
}

// Rows [row0, row1) by panels [panel0, panel1): for each run of one panel
// (two with AVX-512), each block of its k dequantized and taken by the
// float32 tiles as a part of the product, whose sums the next block resumes.
NOINLINE static void dequantized_block(const quantized_t* a, size_t row0, size_t row1,
                                       size_t panel0, size_t panel1) {
  __attribute__((aligned(64))) float block_of_weights[QUANT_FLOATS];
#if ANYSHAPE_MAX_ISA >= ISA_AVX512
  const size_t panels = isa() >= ISA_AVX512 ? QUANT_PANELS_512 : 1;
#else
  const size_t panels = 1;
#endif
  const size_t quant_k = QUANT_FLOATS / PANEL / panels;
  for (size_t panel = panel0; panel < panel1; panel += panels) {
    const size_t np = panel1 - panel < panels ? panel1 - panel : panels;
    const size_t col = panel * PANEL;
    const size_t cols = a->n - col < np * PANEL ? a->n - col : np * PANEL;
    if (a->k == 0) {
      linear_rows_t part = {a->x, block_of_weights, a->bias ? a->bias + col : 0,
                            a->y + col, a->m, cols, 0, a->k, a->n, 0};
      block(&part, row0, row1, 0, np);
      continue;
    }
    for (size_t k0 = 0; k0 < a->k; k0 += quant_k) {
      const size_t steps = a->k - k0 < quant_k ? a->k - k0 : quant_k;
      dequantize(a, panel, np, k0, steps, block_of_weights);
      const int last = k0 + steps == a->k;
      linear_rows_t part = {a->x + k0, block_of_weights,
                            last && a->bias ? a->bias + col : 0, a->y + col, a->m, cols,
                            steps, a->k, a->n, k0 > 0};
      block(&part, row0, row1, 0, np);
    }
  }
}

// Rows [row0, row1) by panels [panel0, panel1): the integer options' every
// row (integer_rows); float32 rows, a decode step's from the weights in
// registers (direct_rows), longer runs through blocks of dequantized weights.
// Each has its own frame: only one is on the stack.
static void quantized_block(const quantized_t* a, size_t row0, size_t row1, size_t panel0,
                            size_t panel1) {
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
  if (a->k > 0 && isa() >= ISA_AVX2) {
    if (a->integer) {
      integer_rows(a, row0, row1, panel0, panel1);
      return;
    }
    if (row1 - row0 <= DIRECT_ROWS) {
      direct_rows(a, row0, row1 - row0, panel0, panel1);
      return;
    }
  }
#endif
  dequantized_block(a, row0, row1, panel0, panel1);
}

static void quantized_workgroup(const quantized_t* a, size_t gx, size_t nx, size_t gy,
                                size_t ny) {
  size_t r[2], p[2];
  if (workgroup_share(a->m, a->n, gx, nx, gy, ny, r, p)) quantized_block(a, r[0], r[1], p[0], p[1]);
}

// The entry points (llvm.bareptr memrefs of float: a base pointer, then an
// offset in floats; the weights' and scales' buffers are read as bytes).
void anyshape_linear_rows_q8(const float* x, size_t x_offset, const float* q,
                             size_t q_offset, const float* scales, size_t scales_offset,
                             const float* bias, size_t bias_offset, float* y,
                             size_t y_offset, size_t m, size_t n, size_t k, size_t gx,
                             size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset,
                   bias + bias_offset, y + y_offset, m, n, k, 0};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_q8_no_bias(const float* x, size_t x_offset, const float* q,
                                     size_t q_offset, const float* scales,
                                     size_t scales_offset, float* y, size_t y_offset,
                                     size_t m, size_t n, size_t k, size_t gx, size_t nx,
                                     size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset, 0,
                   y + y_offset, m, n, k, 0};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_q4(const float* x, size_t x_offset, const float* q,
                             size_t q_offset, const float* scales, size_t scales_offset,
                             const float* bias, size_t bias_offset, float* y,
                             size_t y_offset, size_t m, size_t n, size_t k, size_t group,
                             size_t gx, size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset,
                   bias + bias_offset, y + y_offset, m, n, k, group};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_q4_no_bias(const float* x, size_t x_offset, const float* q,
                                     size_t q_offset, const float* scales,
                                     size_t scales_offset, float* y, size_t y_offset,
                                     size_t m, size_t n, size_t k, size_t group, size_t gx,
                                     size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset, 0,
                   y + y_offset, m, n, k, group};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

// int8 weights, every row computed in integers on AVX2 and AVX-512 hosts
// (INTEGER_Q8); hosts without AVX2 compute as the _q8 entry points do.
void anyshape_linear_rows_q8i16(const float* x, size_t x_offset, const float* q,
                                size_t q_offset, const float* scales, size_t scales_offset,
                                const float* bias, size_t bias_offset, float* y,
                                size_t y_offset, size_t m, size_t n, size_t k, size_t gx,
                                size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset,
                   bias + bias_offset, y + y_offset, m, n, k, 0, 1};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_q8i16_no_bias(const float* x, size_t x_offset, const float* q,
                                        size_t q_offset, const float* scales,
                                        size_t scales_offset, float* y, size_t y_offset,
                                        size_t m, size_t n, size_t k, size_t gx, size_t nx,
                                        size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset, 0,
                   y + y_offset, m, n, k, 0, 1};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

// int4 weights, every row computed in integers on AVX2 and AVX-512 hosts
// (INTEGER_Q4); hosts without AVX2 compute as the _q4 entry points do.
void anyshape_linear_rows_q4i8(const float* x, size_t x_offset, const float* q,
                               size_t q_offset, const float* scales, size_t scales_offset,
                               const float* bias, size_t bias_offset, float* y,
                               size_t y_offset, size_t m, size_t n, size_t k, size_t group,
                               size_t gx, size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset,
                   bias + bias_offset, y + y_offset, m, n, k, group, 1};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_q4i8_no_bias(const float* x, size_t x_offset, const float* q,
                                       size_t q_offset, const float* scales,
                                       size_t scales_offset, float* y, size_t y_offset,
                                       size_t m, size_t n, size_t k, size_t group, size_t gx,
                                       size_t nx, size_t gy, size_t ny) {
  quantized_t a = {x + x_offset, (const uint8_t*)(q + q_offset), scales + scales_offset, 0,
                   y + y_offset, m, n, k, group, 1};
  quantized_workgroup(&a, gx, nx, gy, ny);
}

#endif  // ANYSHAPE_KERNELS_QUANTIZED_PANELS_H_
