// out[b, l, h, :] = sum_s softmax_s(scale * q[b,h,l,:] . k[b,h,s,:] + bias) v[b,h,s,:]
//
// Attention over a whole sequence (an encoder's self-attention, a decoder's
// prompt) in one pass, without writing the [B, H, L, S] scores anywhere
// (attention.py, beside it, says why IREE's own form costs what it does).
//
// Linked into IREE's embedded ELF executables like linear_rows.c: no library
// calls, no allocation, no thread-local state; the stack holds a workgroup's
// 32 query rows (at most 33 KiB with D = 128). The AVX-512, AVX2 or portable
// code is chosen at run time (isa.h).
//
// One workgroup computes 32 query rows of one (batch, head). It copies those
// rows transposed (qt[d][row]) once, then walks the keys in tiles of TK: a
// tile's scores are TK vectors across query rows (one broadcast of k per key
// and d), so the softmax's running max and sum are lane-wise, with no
// horizontal reductions. The probabilities go to the stack (pt[key][row]) and
// the output rows take them one broadcast per key, against rows of v read in
// place. Flash attention's running rescale keeps one pass over the keys.
//
// A row whose scores are all -inf gets zeros, as torch's
// scaled_dot_product_attention decomposition gives (and anyshape's deferred
// form, passes/defer_softmax_normalization.py).

#include <stddef.h>
#include <stdint.h>

#include <immintrin.h>

#include "isa.h"

#define MAX_D 128
#define WG_ROWS 32

// Where the bias varies (attention_t.bias_mode bits): over batches, over
// heads, and over query rows. A bias that varies over query rows comes
// transposed, [.., S, L], so that a key's bias for 16 query rows is one load.
enum { BIAS_BATCH = 1, BIAS_HEADS = 2, BIAS_ROWS = 4 };

typedef struct {
  const float *q, *k, *v, *bias;
  float* o;
  size_t heads, L, S, D;
  size_t q_sb, q_sh, q_sl;
  size_t k_sb, k_sh, k_sl;
  size_t v_sb, v_sh, v_sl;
  size_t m_sb, m_sh, m_ss;  // bias: per batch, head, key (row-varying: L)
  int bias_rows;
  float scale;
} attention_t;

static const float NEG_INF = -__builtin_inff();

// --------------------------------------------------------------------------
// Portable (an x86-64 without AVX2 or FMA): one row at a time.
// --------------------------------------------------------------------------

// exp(x) for x <= 0 (and -inf, and NaN), without libm: 2^n * p(r), r in
// [-ln2/2, ln2/2], with the vector paths' polynomial.
static float exp_portable(float x) {
  if (x != x) return x;
  if (x < -87.33654f) return 0.0f;
  float t = x * 1.44269504f;
  int n = (int)(t < 0 ? t - 0.5f : t + 0.5f);
  float r = x - (float)n * 0.693145751953125f - (float)n * 1.428606765330187e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    uint32_t u;
    float f;
  } scale = {(uint32_t)(n + 127) << 23};
  return p * scale.f;
}

static float bias_at(const attention_t* a, const float* bias, size_t s, size_t l) {
  if (!bias) return 0.0f;
  return a->bias_rows ? bias[s * a->m_ss + l] : bias[s];
}

static void rows_portable(const attention_t* a, size_t b, size_t h, size_t l0, size_t l1,
                          float* out) {
  const size_t D = a->D;
  const float* k = a->k + b * a->k_sb + h * a->k_sh;
  const float* v = a->v + b * a->v_sb + h * a->v_sh;
  const float* bias = a->bias ? a->bias + b * a->m_sb + h * a->m_sh : 0;
  float acc[MAX_D];
  for (size_t l = l0; l < l1; ++l) {
    const float* q = a->q + b * a->q_sb + h * a->q_sh + l * a->q_sl;
    float m = NEG_INF, sum = 0.0f;
    for (size_t d = 0; d < D; ++d) acc[d] = 0.0f;
    for (size_t s = 0; s < a->S; ++s) {
      float dot = 0.0f;
      for (size_t d = 0; d < D; ++d) dot += q[d] * k[s * a->k_sl + d];
      float score = dot * a->scale + bias_at(a, bias, s, l);
      float next = score > m ? score : m;
      if (next == NEG_INF) continue;
      float alpha = exp_portable(m - next), e = exp_portable(score - next);
      sum = sum * alpha + e;
      for (size_t d = 0; d < D; ++d) acc[d] = acc[d] * alpha + e * v[s * a->v_sl + d];
      m = next;
    }
    float* o = out + (l - l0) * a->heads * D;
    for (size_t d = 0; d < D; ++d) o[d] = sum == 0.0f ? 0.0f : acc[d] / sum;
  }
}

// --------------------------------------------------------------------------
// The vector paths: attention_body.h instantiated for AVX-512 and AVX2.
// --------------------------------------------------------------------------

// exp(x)'s range reduction and polynomial, as both vector paths compute it:
// r = x - n ln2 (ln2 in two parts), then p = e^r for |r| <= ln2 / 2 by a
// degree-6 polynomial (the portable path's, term for term).
#define EXP_POLYNOMIAL(p, r, n, x, SET1, FMADD, FNMADD) \
  do {                                                  \
    r = FNMADD(n, SET1(0.693145751953125f), x);         \
    r = FNMADD(n, SET1(1.428606765330187e-06f), r);     \
    p = SET1(1.0f / 720);                               \
    p = FMADD(p, r, SET1(1.0f / 120));                  \
    p = FMADD(p, r, SET1(1.0f / 24));                   \
    p = FMADD(p, r, SET1(1.0f / 6));                    \
    p = FMADD(p, r, SET1(0.5f));                        \
    p = FMADD(p, r, SET1(1.0f));                        \
    p = FMADD(p, r, SET1(1.0f));                        \
  } while (0)

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
#define FN512 __attribute__((target("avx512f,fma")))

FN512 static inline __m512 exp512(__m512 x) {
  const __m512 low = _mm512_set1_ps(-87.33654f);
  __mmask16 under = _mm512_cmp_ps_mask(x, low, _CMP_LT_OQ);
  x = _mm512_max_ps(low, x);  // a NaN x stays NaN (max returns its second operand)
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r, p;
  EXP_POLYNOMIAL(p, r, n, x, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps);
  return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, n));
}

FN512 static inline __m512 load_first512(const float* p, size_t count) {
  __mmask16 mask = count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
  return _mm512_maskz_loadu_ps(mask, p);
}

#define SUF avx512
#define FN FN512
#define VEC __m512
#define W 16
#define TK 12  // keys per tile: 12 x 2 score vectors
#define PR 6   // output rows per group: 6 x 4 vectors
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOAD_FIRST(p, count) load_first512(p, count)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ZERO() _mm512_setzero_ps()
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_EXP(x) exp512(x)
// Lanes where m is -inf take 0 (their scores so far are all -inf).
#define V_FINITE_OR_ZERO(m) \
  _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(m, _mm512_set1_ps(NEG_INF), _CMP_EQ_OQ), V_ZERO())
#include "attention_body.h"

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX2
#define FN256 __attribute__((target("avx2,fma")))

FN256 static inline __m256 exp256(__m256 x) {
  const __m256 low = _mm256_set1_ps(-87.33654f);
  __m256 under = _mm256_cmp_ps(x, low, _CMP_LT_OQ);
  x = _mm256_max_ps(low, x);  // a NaN x stays NaN
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r, p;
  EXP_POLYNOMIAL(p, r, n, x, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps);
  // n >= -126 after the clamp: 2^n is a normal float.
  __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

FN256 static inline __m256 load_first256(const float* p, size_t count) {
  if (count >= 8) return _mm256_loadu_ps(p);
  __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), lanes);
  return _mm256_maskload_ps(p, mask);
}

#define SUF avx2
#define FN FN256
#define VEC __m256
#define W 8
#define TK 6  // keys per tile: 6 x 2 score vectors
#define PR 2  // output rows per group: 2 x 4 vectors
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOAD_FIRST(p, count) load_first256(p, count)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ZERO() _mm256_setzero_ps()
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_EXP(x) exp256(x)
#define V_FINITE_OR_ZERO(m) \
  _mm256_andnot_ps(_mm256_cmp_ps(m, _mm256_set1_ps(NEG_INF), _CMP_EQ_OQ), m)
#include "attention_body.h"

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX2

// --------------------------------------------------------------------------
// Entry points.
// --------------------------------------------------------------------------

// Strides of a [B, H, N, D] tensor (layout 0) or of a [B, N, H, D] one
// (layout 1), in elements.
static void strides(int layout, size_t heads, size_t n, size_t d, size_t* sb, size_t* sh,
                    size_t* sl) {
  *sb = heads * n * d;
  *sh = layout ? d : n * d;
  *sl = layout ? heads * d : d;
}

static void workgroup(const attention_t* a, float* o, size_t gx, size_t gy) {
  size_t b = gy / a->heads, h = gy % a->heads;
  size_t l0 = gx * WG_ROWS, l1 = l0 + WG_ROWS < a->L ? l0 + WG_ROWS : a->L;
  if (l0 >= l1) return;
  // The output is [B, L, H, D]: the rows of a head are H * D apart.
  float* out = o + (b * a->L + l0) * a->heads * a->D + h * a->D;
  switch (isa()) {
#if ANYSHAPE_MAX_ISA >= ISA_AVX512
    case ISA_AVX512_VNNI:
    case ISA_AVX512:
      rows_avx512(a, b, h, l0, l1, out);
      return;
#endif
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
    case ISA_AVX2:
      rows_avx2(a, b, h, l0, l1, out);
      return;
#endif
    default:
      rows_portable(a, b, h, l0, l1, out);
  }
}

// `layouts`: bit 0, 1, 2 for q, k, v in [B, N, H, D] (else [B, H, N, D]);
// bits 3 and up, the bias mode (BIAS_*). The dispatches pass llvm.bareptr
// memrefs: a base pointer, then an offset in elements.
static void run(const float* q, const float* k, const float* v, const float* bias,
                float* o, size_t heads, size_t L, size_t S, size_t D,
                uint32_t scale_bits, uint32_t layouts, size_t gx, size_t gy) {
  union {
    uint32_t u;
    float f;
  } scale = {scale_bits};
  attention_t a = {q, k, v, bias, o, heads, L, S, D};
  a.scale = scale.f;
  strides(layouts & 1, heads, L, D, &a.q_sb, &a.q_sh, &a.q_sl);
  strides((layouts >> 1) & 1, heads, S, D, &a.k_sb, &a.k_sh, &a.k_sl);
  strides((layouts >> 2) & 1, heads, S, D, &a.v_sb, &a.v_sh, &a.v_sl);
  int mode = (int)(layouts >> 3);
  a.bias_rows = (mode & BIAS_ROWS) != 0;
  a.m_ss = a.bias_rows ? L : 1;
  a.m_sh = mode & BIAS_HEADS ? S * a.m_ss : 0;
  a.m_sb = mode & BIAS_BATCH ? (mode & BIAS_HEADS ? heads : 1) * S * a.m_ss : 0;
  workgroup(&a, o, gx, gy);
}

void anyshape_attention(const float* q, size_t q_offset, const float* k, size_t k_offset,
                        const float* v, size_t v_offset, const float* bias,
                        size_t bias_offset, float* o, size_t o_offset, size_t heads,
                        size_t L, size_t S, size_t D, size_t scale_bits, size_t layouts,
                        size_t gx, size_t gy) {
  run(q + q_offset, k + k_offset, v + v_offset, bias + bias_offset, o + o_offset, heads, L,
      S, D, (uint32_t)scale_bits, (uint32_t)layouts, gx, gy);
}

void anyshape_attention_no_bias(const float* q, size_t q_offset, const float* k,
                                size_t k_offset, const float* v, size_t v_offset, float* o,
                                size_t o_offset, size_t heads, size_t L, size_t S, size_t D,
                                size_t scale_bits, size_t layouts, size_t gx, size_t gy) {
  run(q + q_offset, k + k_offset, v + v_offset, 0, o + o_offset, heads, L, S, D,
      (uint32_t)scale_bits, (uint32_t)layouts, gx, gy);
}
