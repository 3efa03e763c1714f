// y[m, n] = x[m, :] . w[n, :] (+ bias[n]) for every row m, computing only the
// rows there are.
//
// IREE 3.13's mmt4d kernel computes whole tiles of 16 rows on AVX-512 hosts (8
// on AVX2 ones), so a product of 17 rows costs what 32 cost (issue 40,
// docs/iree-notes.md). This kernel sizes its last tile of rows to the rows
// that remain, and reads x as it is, so no packing of x or unpacking of y
// runs around it.
//
// It is linked into IREE's embedded ELF executables (hal.executable.objects;
// linear_rows.py, beside it, writes the dispatch that calls it), so it must not call
// into any library, allocate, or use thread-local state: only registers, the
// stack and the bindings. Its AVX-512, AVX2 or portable code is chosen at run
// time (isa.h).
//
// The weights come packed (linear_rows.py, in the module's initializers)
// as panels of 16 output columns: packed[p][k][j] = w[16 p + j][k], the last
// panel padded with zeros. A tile's step over k loads one row of 16 from each
// of its panels and broadcasts one value of x per row.
//
// Sums over k run in order, one FMA per k, as IREE's own kernel does, but in
// tiles of fewer than 8 accumulators, which take alternate k in 2 or 4 sets
// (the FMA's latency); a block of k stores its partial sums into y and the
// next block resumes from them.

#include <stddef.h>
#include <stdint.h>

#include <immintrin.h>

#include "isa.h"

#define PANEL 16
// Each path keeps its copy of x on its own frame, and the tiles of one pass
// theirs (noinline): inlined into one function, their frames would add up
// past the worker's stack.
#define NOINLINE __attribute__((noinline))
// The figures behind these constants, and the variants measured and not
// kept, are in docs/iree-notes.md ("The product kernel's lab log"); `make
// bench-kernels` (bench/kernels/) measures them again.
//
// Blocks of k: a block of a workgroup's panels stays in L2 across its tiles
// of rows (1024 ran 2-10 % ahead of 512; longer blocks level).
#define K_BLOCK 1024
// Rows of x a multiple of 4 KiB apart (k = 1024, 3072) share L1 sets, so a
// tile's rows are copied COPY_K at a time, 17 cache lines apart, on the
// worker's stack: 256 keeps every frame under FRAME_BUDGET (kernels/build.py).
#define COPY_K 256
#define COPY_STRIDE (COPY_K + 16)
// The line PREFETCH_STEPS steps of k ahead is asked for now: without it a
// tile's FMAs wait on the weights' first read from memory (12 rows: 18.7 ->
// 13.6 ms on a Xeon).
#define PREFETCH_STEPS 64
// The widest tile (15 rows by 2 panels: 30 accumulators and 2 rows of
// weights, all 32 zmm registers) takes up to 15 rows in one pass over the
// weights, whose rows cost little more than one while they stream from memory.
#define WIDE512_ROWS 15
// 16 to ONE_PASS_MAX rows take one pass too (one_pass512: a second tile over
// the same weights overlapped nothing); past it tiles over blocks of K_BLOCK
// are ahead (2.6-4 % from 33 to 36 rows).
#define ONE_PASS_MAX 32
// The pass copies x 128 k at a time: 32 rows in 18 KiB of its frame (256
// was level).
#define PASS_K 128
#define PASS_STRIDE (PASS_K + 16)
#define TILES512_ROWS 14  // the most rows of a tile past ONE_PASS_MAX (15: 2-6 % slower)
// A workgroup's run of rows is a multiple of this but the last (workgroup(),
// and linear_rows.py's TILE_ROWS for the count region), with every ISA, so
// that every ISA splits a dispatch alike.
#define TILE512_ROWS 12

typedef struct {
  const float* x;       // rows of x, `xk` floats apart
  const float* packed;  // panels of `k` x 16 floats
  const float* bias;    // n floats, or null
  float* y;             // rows of y, `yn` floats apart
  size_t m, n, k;
  // Row strides of x and y: k and n, but in a part of a larger product
  // (quantized_panels.h: a block of k, a run of panels).
  size_t xk, yn;
  // Whether y already holds the sums over the k before this part's.
  int resume;
} linear_rows_t;

// Whether a block of k from `k0` adds to partial sums held in y.
#define RESUMES(k0) ((k0) > 0 || a->resume)

// The first `n - col` of a panel's 16 columns (all 16 but in the last panel).
static size_t panel_cols(const linear_rows_t* a, size_t panel) {
  size_t col = panel * PANEL;
  return a->n - col < PANEL ? a->n - col : PANEL;
}

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
// Whether more than 4 of a tile's rows of x, k floats apart, fall in one set
// of a 64-set L1 (Zen 4's and Skylake's 32 KiB, 8 ways): 4 KiB apart they all
// do (k = 1024, 3072), 3 KiB apart (k = 768) every fourth does.
static int rows_share_l1_sets(size_t k, size_t tile_rows) {
  if (k % 16) return 0;  // rows start at different offsets in their lines
  size_t step = (k / 16) % 64;  // lines from one row to the next, mod 64 sets
  size_t period = 1;            // rows until a row is back in the same set
  if (step) {
    size_t a = step, b = 64;
    while (b) {
      size_t t = a % b;
      a = b;
      b = t;
    }
    period = 64 / a;
  }
  return (tile_rows + period - 1) / period > 4;
}

// x's rows [row, row + rows) over k in [k0, k1), `stride` floats apart.
static void copy_rows(const linear_rows_t* a, float* xp, size_t stride,
                      size_t row, size_t rows, size_t k0, size_t k1) {
  for (size_t r = 0; r < rows; ++r) {
    const float* x = a->x + (row + r) * a->xk;
    for (size_t kk = k0; kk < k1; ++kk) xp[r * stride + kk - k0] = x[kk];
  }
}

// x's rows [row, row + rows) for k in [k0, k1): in place (`k` floats apart),
// or where `copy`, copied into `copied` `stride` floats apart; `*xs` gets the
// stride of the rows returned.
static const float* rows_of_x(const linear_rows_t* a, int copy, float* copied,
                              size_t stride, size_t row, size_t rows,
                              size_t k0, size_t k1, size_t* xs) {
  if (!copy) {
    *xs = a->xk;
    return a->x + row * a->xk + k0;
  }
  copy_rows(a, copied, stride, row, rows, k0, k1);
  *xs = stride;
  return copied;
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
// --------------------------------------------------------------------------
// AVX-512: tiles of up to 15 rows by 2 panels (30 accumulators).
// --------------------------------------------------------------------------

#define AVX512_FN __attribute__((target("avx512f,fma")))

AVX512_FN static inline __mmask16 mask16(size_t cols) {
  return cols >= PANEL ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
}

// One tile: MR rows from `row` by panels [panel, panel + NP), over k in
// [k0, k1); `xp` holds the rows' x for that block (copy_rows). The first
// block starts from zero, later ones from the partial sums in y, and the
// last adds the bias. With few accumulators (MR * NP < 8) two sets take even
// and odd k, or four sets for 1 or 2 accumulators, so that enough FMA chains
// overlap to hide the FMA's latency (a remainder tile reads its panels from
// L1, two-tile path below, where only the FMA's latency bounds it).
#define DEFINE_TILE512(MR, NP)                                                 \
  AVX512_FN static void tile512_##MR##x##NP(const linear_rows_t* a,            \
                                            const float* xp, size_t xs, size_t row,\
                                            size_t panel, size_t k0,           \
                                            size_t k1) {                       \
    enum { SETS = (MR) * (NP) <= 2 ? 4 : (MR) * (NP) < 8 ? 2 : 1 };            \
    const size_t k = a->k, steps = k1 - k0;                                    \
    const float* w = a->packed + panel * k * PANEL + k0 * PANEL;               \
    __mmask16 mask[NP];                                                        \
    for (int p = 0; p < (NP); ++p) mask[p] = mask16(panel_cols(a, panel + p)); \
    __m512 acc[SETS][MR][NP];                                                  \
    for (int s = 0; s < SETS; ++s)                                             \
      for (int r = 0; r < (MR); ++r)                                           \
        for (int p = 0; p < (NP); ++p)                                         \
          acc[s][r][p] =                                                       \
              s == 0 && RESUMES(k0)                                                \
                  ? _mm512_maskz_loadu_ps(                                     \
                        mask[p],                                               \
                        a->y + (row + r) * a->yn + (panel + p) * PANEL)         \
                  : _mm512_setzero_ps();                                       \
    size_t i = 0;                                                              \
    for (; i + SETS <= steps; i += SETS) {                                     \
      for (int s = 0; s < SETS; ++s) {                                         \
        __m512 b[NP];                                                          \
        for (int p = 0; p < (NP); ++p) {                                       \
          const float* line = w + (size_t)p * k * PANEL + (i + s) * PANEL;     \
          b[p] = _mm512_loadu_ps(line);                                        \
          _mm_prefetch((const char*)(line + PREFETCH_STEPS * PANEL),           \
                       _MM_HINT_T0);                                           \
        }                                                                      \
        for (int r = 0; r < (MR); ++r) {                                       \
          __m512 xv = _mm512_set1_ps(xp[r * xs + i + s]);                \
          for (int p = 0; p < (NP); ++p)                                       \
            acc[s][r][p] = _mm512_fmadd_ps(xv, b[p], acc[s][r][p]);            \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    for (; i < steps; ++i) {                                                   \
      for (int r = 0; r < (MR); ++r) {                                         \
        __m512 xv = _mm512_set1_ps(xp[r * xs + i]);                      \
        for (int p = 0; p < (NP); ++p)                                         \
          acc[0][r][p] = _mm512_fmadd_ps(                                      \
              xv, _mm512_loadu_ps(w + (size_t)p * k * PANEL + i * PANEL),      \
              acc[0][r][p]);                                                   \
      }                                                                        \
    }                                                                          \
    const int last = k1 == k;                                                  \
    for (int p = 0; p < (NP); ++p) {                                           \
      size_t col = (panel + p) * PANEL;                                        \
      __m512 bias = last && a->bias                                            \
                        ? _mm512_maskz_loadu_ps(mask[p], a->bias + col)        \
                        : _mm512_setzero_ps();                                 \
      for (int r = 0; r < (MR); ++r) {                                         \
        __m512 sum = acc[0][r][p];                                             \
        for (int s = 1; s < SETS; ++s) sum = _mm512_add_ps(sum, acc[s][r][p]); \
        if (last) sum = _mm512_add_ps(sum, bias);                              \
        _mm512_mask_storeu_ps(a->y + (row + r) * a->yn + col, mask[p], sum);    \
      }                                                                        \
    }                                                                          \
  }

#define ROWS512(NP)                                                 \
  DEFINE_TILE512(1, NP) DEFINE_TILE512(2, NP) DEFINE_TILE512(3, NP) \
  DEFINE_TILE512(4, NP) DEFINE_TILE512(5, NP) DEFINE_TILE512(6, NP) \
  DEFINE_TILE512(7, NP) DEFINE_TILE512(8, NP) DEFINE_TILE512(9, NP) \
  DEFINE_TILE512(10, NP) DEFINE_TILE512(11, NP) DEFINE_TILE512(12, NP) \
  DEFINE_TILE512(13, NP) DEFINE_TILE512(14, NP) DEFINE_TILE512(15, NP)
ROWS512(1)
ROWS512(2)

// A switch rather than a table of function pointers: a table would need
// relocations for the embedded ELF loader to apply.
AVX512_FN static void tile512(const linear_rows_t* a, const float* xp, size_t xs,
                              size_t row, size_t rows, size_t panel, int np,
                              size_t k0, size_t k1) {
#define CASE512(MR)                                      \
  case MR:                                               \
    if (np == 2) tile512_##MR##x2(a, xp, xs, row, panel, k0, k1); \
    else tile512_##MR##x1(a, xp, xs, row, panel, k0, k1);    \
    return;
  switch (rows) {
    CASE512(1) CASE512(2) CASE512(3) CASE512(4) CASE512(5) CASE512(6)
    CASE512(7) CASE512(8) CASE512(9) CASE512(10) CASE512(11) CASE512(12)
    CASE512(13) CASE512(14) CASE512(15)
    default:
      __builtin_trap();  // a tile the callers never ask for
  }
#undef CASE512
}

// One tile of MR rows (WIDE512_ROWS < MR <= ONE_PASS_MAX) by the 2 panels
// from `panel`, over k in [k0, k1), x copied (`xp`, PASS_STRIDE floats
// apart). Rows [0, REG_ROWS) keep their accumulators in registers, the rest
// in `held` (2 x 16 floats a row, 64-byte aligned): every SPILL_STEPS steps
// of k, while those steps' rows of weights stay in registers, each held sum
// is loaded, given its SPILL_STEPS FMAs in order over k, and stored.
#define DEFINE_PASS512(MR, STEPS, REGS)                                        \
  AVX512_FN static void pass512_##MR(const linear_rows_t* a, const float* xp,  \
                                     size_t row, size_t panel, size_t k0,      \
                                     size_t k1, float* held) {                 \
    enum { SPILL_STEPS = (STEPS), REG_ROWS = (REGS), HELD = (MR) - (REGS) };  \
    const size_t k = a->k, steps = k1 - k0;                                    \
    const float* w[2] = {a->packed + panel * k * PANEL + k0 * PANEL,           \
                         a->packed + (panel + 1) * k * PANEL + k0 * PANEL};    \
    const __mmask16 mask[2] = {mask16(panel_cols(a, panel)),                   \
                               mask16(panel_cols(a, panel + 1))};              \
    __m512 acc[REG_ROWS][2];                                                   \
    for (int r = 0; r < (MR); ++r)                                             \
      for (int p = 0; p < 2; ++p) {                                            \
        __m512 v = RESUMES(k0) ? _mm512_maskz_loadu_ps(                             \
                                mask[p],                                       \
                                a->y + (row + r) * a->yn + (panel + p) * PANEL) \
                          : _mm512_setzero_ps();                               \
        if (r < REG_ROWS)                                                      \
          acc[r < REG_ROWS ? r : 0][p] = v;                                    \
        else                                                                   \
          _mm512_store_ps(held + ((r - REG_ROWS) * 2 + p) * PANEL, v);         \
      }                                                                        \
    size_t i = 0;                                                              \
    for (; i + SPILL_STEPS <= steps; i += SPILL_STEPS) {                       \
      __m512 b[SPILL_STEPS][2];                                                \
      for (int s = 0; s < SPILL_STEPS; ++s)                                    \
        for (int p = 0; p < 2; ++p) {                                          \
          const float* line = w[p] + (i + s) * PANEL;                          \
          b[s][p] = _mm512_loadu_ps(line);                                     \
          _mm_prefetch((const char*)(line + PREFETCH_STEPS * PANEL),           \
                       _MM_HINT_T0);                                           \
        }                                                                      \
      const float* xi = xp + i;                                                \
      for (int r = 0; r < REG_ROWS; ++r)                                       \
        for (int s = 0; s < SPILL_STEPS; ++s) {                                \
          __m512 xv = _mm512_set1_ps(xi[r * PASS_STRIDE + s]);                 \
          for (int p = 0; p < 2; ++p)                                          \
            acc[r][p] = _mm512_fmadd_ps(xv, b[s][p], acc[r][p]);               \
        }                                                                      \
      for (int r = 0; r < HELD; ++r)                                           \
        for (int p = 0; p < 2; ++p) {                                          \
          float* sums = held + (r * 2 + p) * PANEL;                            \
          __m512 sum = _mm512_load_ps(sums);                                   \
          for (int s = 0; s < SPILL_STEPS; ++s)                                \
            sum = _mm512_fmadd_ps(                                             \
                _mm512_set1_ps(xi[(REG_ROWS + r) * PASS_STRIDE + s]),          \
                b[s][p], sum);                                                 \
          _mm512_store_ps(sums, sum);                                          \
        }                                                                      \
    }                                                                          \
    for (; i < steps; ++i) {                                                   \
      __m512 b[2] = {_mm512_loadu_ps(w[0] + i * PANEL),                        \
                     _mm512_loadu_ps(w[1] + i * PANEL)};                       \
      for (int r = 0; r < (MR); ++r) {                                         \
        __m512 xv = _mm512_set1_ps(xp[r * PASS_STRIDE + i]);                   \
        for (int p = 0; p < 2; ++p) {                                          \
          if (r < REG_ROWS) {                                                  \
            __m512* sum = &acc[r < REG_ROWS ? r : 0][p];                       \
            *sum = _mm512_fmadd_ps(xv, b[p], *sum);                            \
          } else {                                                             \
            float* sums = held + ((r - REG_ROWS) * 2 + p) * PANEL;             \
            _mm512_store_ps(sums,                                              \
                            _mm512_fmadd_ps(xv, b[p], _mm512_load_ps(sums)));  \
          }                                                                    \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    const int last = k1 == k;                                                  \
    for (int p = 0; p < 2; ++p) {                                              \
      size_t col = (panel + p) * PANEL;                                        \
      __m512 bias = last && a->bias                                            \
                        ? _mm512_maskz_loadu_ps(mask[p], a->bias + col)        \
                        : _mm512_setzero_ps();                                 \
      for (int r = 0; r < (MR); ++r) {                                         \
        __m512 sum =                                                           \
            r < REG_ROWS                                                       \
                ? acc[r < REG_ROWS ? r : 0][p]                                 \
                : _mm512_load_ps(held + ((r - REG_ROWS) * 2 + p) * PANEL);     \
        if (last) sum = _mm512_add_ps(sum, bias);                              \
        _mm512_mask_storeu_ps(a->y + (row + r) * a->yn + col, mask[p], sum);    \
      }                                                                        \
    }                                                                          \
  }

// The passes by rows (MR, SPILL_STEPS, REG_ROWS): up to 28 rows 12 in
// registers and the held sums 4 steps at a time; past that 8 and 6 (the
// fastest of 2 to 8 steps with 4 to 14 rows in registers).
#define PASSES512(X)                                                         \
  X(16, 4, 12) X(17, 4, 12) X(18, 4, 12) X(19, 4, 12) X(20, 4, 12)          \
  X(21, 4, 12) X(22, 4, 12) X(23, 4, 12) X(24, 4, 12) X(25, 4, 12)          \
  X(26, 4, 12) X(27, 4, 12) X(28, 4, 12) X(29, 6, 8) X(30, 6, 8)            \
  X(31, 6, 8) X(32, 6, 8)
PASSES512(DEFINE_PASS512)

// A switch rather than a table of function pointers, as tile512.
#define CASE_PASS512(MR, STEPS, REGS)              \
  case MR:                                          \
    pass512_##MR(a, xp, row, panel, k0, k1, held);  \
    return;
NOINLINE AVX512_FN static void pass512(const linear_rows_t* a, const float* xp,
                                       size_t row, size_t rows, size_t panel,
                                       size_t k0, size_t k1, float* held) {
  switch (rows) {
    PASSES512(CASE_PASS512)
    default:
      __builtin_trap();  // a pass the callers never ask for
  }
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX2
// --------------------------------------------------------------------------
// AVX2: tiles of up to 3 rows by 2 panels or 6 rows by 1 panel (each panel
// two 8-wide halves), and passes of up to TILES256_ROWS rows by 2 panels.
// --------------------------------------------------------------------------
//
// Two panels at a time, as the AVX-512 code takes them (two streams of lines
// from memory); x broadcast with _mm256_set1_ps of a value, not
// _mm256_broadcast_ss of its address (given the address, GCC 12 stored every
// accumulator after every FMA).

#define AVX2_FN __attribute__((target("avx2,fma")))
#define WIDE256_ROWS 3  // the most rows of a tile of 2 panels (block(), past it passes)
#define TILE256_ROWS 6  // the most rows of a tile of 1 panel (a last odd panel)
// The most rows of a pass: held sums of 64 rows take 8 KiB of L1 (longer
// passes were level, or slower).
#define TILES256_ROWS 64
// The pass keeps each row's 4 sums (2 panels of 2 halves) in L1 and gives
// them SPILL256_STEPS steps' FMAs per load and store, those steps' weights in
// 4 x SPILL256_STEPS registers of 16 (weights read from L1: 11-13 % slower).
#define SPILL256_STEPS 3

// Lanes [0, cols) of 8 (all 8 for cols >= 8): masked loads and stores of a
// panel's last columns touch nothing past them.
AVX2_FN static inline __m256i mask8(size_t cols) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols >= 8 ? 8 : (int)cols), lane);
}

// The masks of a panel's two halves of 8 columns.
AVX2_FN static inline void halves256(const linear_rows_t* a, size_t panel, __m256i mask[2]) {
  size_t cols = panel_cols(a, panel);
  mask[0] = mask8(cols);
  mask[1] = mask8(cols > 8 ? cols - 8 : 0);
}

// A panel's bias where the block of k is the last (zero otherwise).
AVX2_FN static inline __m256 bias256(const linear_rows_t* a, int last, size_t panel,
                                     int half, __m256i mask) {
  return last && a->bias ? _mm256_maskload_ps(a->bias + panel * PANEL + half * 8, mask)
                         : _mm256_setzero_ps();
}

// One tile: MR rows from `row` by panels [panel, panel + NP), over k in
// [k0, k1), as DEFINE_TILE512 (sums in y between blocks of k; two sets of
// accumulators on alternate k where there are fewer than 4 rows of panels).
#define DEFINE_TILE256(MR, NP)                                                \
  AVX2_FN static void tile256_##MR##x##NP(const linear_rows_t* a,             \
                                          const float* xp, size_t xs,         \
                                          size_t row, size_t panel,           \
                                          size_t k0, size_t k1) {             \
    enum { SETS = (MR) * (NP) < 4 ? 2 : 1, H = 2 * (NP) };                    \
    const size_t k = a->k, steps = k1 - k0;                                   \
    const float* w[NP];                                                       \
    __m256i mask[H];                                                          \
    for (int p = 0; p < (NP); ++p) {                                          \
      w[p] = a->packed + (panel + p) * k * PANEL + k0 * PANEL;                \
      halves256(a, panel + p, mask + 2 * p);                                  \
    }                                                                         \
    __m256 acc[SETS][MR][H];                                                  \
    for (int s = 0; s < SETS; ++s)                                            \
      for (int r = 0; r < (MR); ++r)                                          \
        for (int h = 0; h < H; ++h)                                           \
          acc[s][r][h] = s == 0 && RESUMES(k0)                                    \
                             ? _mm256_maskload_ps(a->y + (row + r) * a->yn +   \
                                                      panel * PANEL + h * 8,  \
                                                  mask[h])                    \
                             : _mm256_setzero_ps();                           \
    size_t i = 0;                                                             \
    for (; i + SETS <= steps; i += SETS) {                                    \
      for (int s = 0; s < SETS; ++s) {                                        \
        __m256 b[H];                                                          \
        for (int p = 0; p < (NP); ++p) {                                      \
          const float* line = w[p] + (i + s) * PANEL;                         \
          b[2 * p] = _mm256_loadu_ps(line);                                   \
          b[2 * p + 1] = _mm256_loadu_ps(line + 8);                           \
          _mm_prefetch((const char*)(line + PREFETCH_STEPS * PANEL),          \
                       _MM_HINT_T0);                                          \
        }                                                                     \
        for (int r = 0; r < (MR); ++r) {                                      \
          __m256 xv = _mm256_set1_ps(xp[r * xs + i + s]);                     \
          for (int h = 0; h < H; ++h)                                         \
            acc[s][r][h] = _mm256_fmadd_ps(xv, b[h], acc[s][r][h]);           \
        }                                                                     \
      }                                                                       \
    }                                                                         \
    for (; i < steps; ++i)                                                    \
      for (int r = 0; r < (MR); ++r) {                                        \
        __m256 xv = _mm256_set1_ps(xp[r * xs + i]);                           \
        for (int h = 0; h < H; ++h)                                           \
          acc[0][r][h] = _mm256_fmadd_ps(                                     \
              xv, _mm256_loadu_ps(w[h / 2] + i * PANEL + (h % 2) * 8),        \
              acc[0][r][h]);                                                  \
      }                                                                       \
    const int last = k1 == k;                                                 \
    for (int h = 0; h < H; ++h) {                                             \
      __m256 bias = bias256(a, last, panel + h / 2, h % 2, mask[h]);          \
      for (int r = 0; r < (MR); ++r) {                                        \
        __m256 sum = acc[0][r][h];                                            \
        if (SETS == 2) sum = _mm256_add_ps(sum, acc[SETS - 1][r][h]);         \
        _mm256_maskstore_ps(a->y + (row + r) * a->yn + panel * PANEL + h * 8,  \
                            mask[h], _mm256_add_ps(sum, bias));               \
      }                                                                       \
    }                                                                         \
  }

DEFINE_TILE256(1, 1) DEFINE_TILE256(2, 1) DEFINE_TILE256(3, 1)
DEFINE_TILE256(4, 1) DEFINE_TILE256(5, 1) DEFINE_TILE256(6, 1)
DEFINE_TILE256(1, 2) DEFINE_TILE256(2, 2) DEFINE_TILE256(3, 2)

// Up to TILE256_ROWS rows by one panel, or up to WIDE256_ROWS by two (np).
AVX2_FN static void tile256(const linear_rows_t* a, const float* xp, size_t xs,
                            size_t row, size_t rows, size_t panel, int np,
                            size_t k0, size_t k1) {
#define CASE256(MR)                                                 \
  case MR:                                                          \
    tile256_##MR##x1(a, xp, xs, row, panel, k0, k1);                \
    return;
#define CASE256_WIDE(MR)                                            \
  case MR:                                                          \
    if (np == 2) {                                                  \
      tile256_##MR##x2(a, xp, xs, row, panel, k0, k1);              \
      return;                                                       \
    }                                                               \
    tile256_##MR##x1(a, xp, xs, row, panel, k0, k1);                \
    return;
  switch (rows) {
    CASE256_WIDE(1) CASE256_WIDE(2) CASE256_WIDE(3)
    CASE256(4) CASE256(5) CASE256(6)
    default:
      __builtin_trap();  // a tile the callers never ask for
  }
#undef CASE256
#undef CASE256_WIDE
}

// `rows` rows (up to TILES256_ROWS, `xs` floats apart) by the two panels
// from `panel`, over k in [k0, k1): every row's sums held in `held` (32
// floats a row, 32-byte aligned), SPILL256_STEPS steps at a time. The lines
// asked for past k1 are the ones read next, `next` (the next pair of
// panels, or the first pair's next block), not the panels' own past k1.
NOINLINE AVX2_FN static void pass256(const linear_rows_t* a, const float* xp,
                                     size_t xs, size_t row, size_t rows, size_t panel,
                                     size_t k0, size_t k1, const float* next,
                                     float* held) {
  enum { S = SPILL256_STEPS };
  const size_t k = a->k, steps = k1 - k0;
  const float* w[2] = {a->packed + panel * k * PANEL + k0 * PANEL,
                       a->packed + (panel + 1) * k * PANEL + k0 * PANEL};
  const float* after[2] = {next ? next : w[0] + steps * PANEL,
                           next ? next + k * PANEL : w[1] + steps * PANEL};
  __m256i mask[4];
  halves256(a, panel, mask);
  halves256(a, panel + 1, mask + 2);
  for (size_t r = 0; r < rows; ++r)
    for (int h = 0; h < 4; ++h)
      _mm256_store_ps(held + r * 32 + h * 8,
                      RESUMES(k0) ? _mm256_maskload_ps(a->y + (row + r) * a->yn +
                                                      panel * PANEL + h * 8,
                                                  mask[h])
                             : _mm256_setzero_ps());
  size_t i = 0;
  for (; i + S <= steps; i += S) {
    __m256 b[S][4];
    for (int s = 0; s < S; ++s) {
      size_t ahead = i + s + PREFETCH_STEPS;
      for (int p = 0; p < 2; ++p) {
        b[s][2 * p] = _mm256_loadu_ps(w[p] + (i + s) * PANEL);
        b[s][2 * p + 1] = _mm256_loadu_ps(w[p] + (i + s) * PANEL + 8);
        _mm_prefetch((const char*)(ahead < steps ? w[p] + ahead * PANEL
                                                 : after[p] + (ahead - steps) * PANEL),
                     _MM_HINT_T0);
      }
    }
    const float* xr = xp + i;
    float* sums = held;
    // Unrolled over the rows, GCC hoisted loads out of the body and spilled
    // them (6 and 8 rows 25-30 % slower).
#pragma GCC unroll 1
    for (size_t r = 0; r < rows; ++r, xr += xs, sums += 32) {
      __m256 xv[S];
      for (int s = 0; s < S; ++s) xv[s] = _mm256_set1_ps(xr[s]);
      for (int h = 0; h < 4; ++h) {
        __m256 sum = _mm256_load_ps(sums + h * 8);
        for (int s = 0; s < S; ++s) sum = _mm256_fmadd_ps(xv[s], b[s][h], sum);
        _mm256_store_ps(sums + h * 8, sum);
      }
    }
  }
  for (; i < steps; ++i) {
    __m256 b[4];
    for (int h = 0; h < 4; ++h) b[h] = _mm256_loadu_ps(w[h / 2] + i * PANEL + (h % 2) * 8);
    for (size_t r = 0; r < rows; ++r) {
      __m256 xv = _mm256_set1_ps(xp[r * xs + i]);
      for (int h = 0; h < 4; ++h) {
        float* sum = held + r * 32 + h * 8;
        _mm256_store_ps(sum, _mm256_fmadd_ps(xv, b[h], _mm256_load_ps(sum)));
      }
    }
  }
  const int last = k1 == k;
  for (int h = 0; h < 4; ++h) {
    __m256 bias = bias256(a, last, panel + h / 2, h % 2, mask[h]);
    for (size_t r = 0; r < rows; ++r)
      _mm256_maskstore_ps(a->y + (row + r) * a->yn + panel * PANEL + h * 8, mask[h],
                          _mm256_add_ps(_mm256_load_ps(held + r * 32 + h * 8), bias));
  }
}

// `rows` rows of x (`xs` floats apart, from k0) by panels [panel0, panel1)
// over k in [k0, k1): pairs of panels in passes, a last odd panel in tiles
// of one panel.
AVX2_FN static void panels256(const linear_rows_t* a, const float* xp, size_t xs,
                              size_t row, size_t rows, size_t panel0, size_t panel1,
                              size_t k0, size_t k1, float* held) {
  const size_t k = a->k;
  for (size_t p = panel0; p < panel1; p += 2) {
    if (panel1 - p >= 2) {
      const float* next = p + 3 < panel1 ? a->packed + (p + 2) * k * PANEL + k0 * PANEL
                          : k1 < k       ? a->packed + panel0 * k * PANEL + k1 * PANEL
                                         : 0;
      pass256(a, xp, xs, row, rows, p, k0, k1, next, held);
    } else {
      for (size_t r = 0; r < rows; r += TILE256_ROWS)
        tile256(a, xp + r * xs, xs, row + r,
                rows - r < TILE256_ROWS ? rows - r : TILE256_ROWS, p, 1, k0, k1);
    }
  }
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX2

// --------------------------------------------------------------------------
// Portable (an x86-64 without AVX2 or FMA): one row by one panel at a time.
// --------------------------------------------------------------------------

static void row_portable(const linear_rows_t* a, size_t row, size_t panel) {
  const size_t k = a->k;
  const float* x = a->x + row * a->xk;
  const float* w = a->packed + panel * k * PANEL;
  size_t col = panel * PANEL, cols = panel_cols(a, panel);
  float acc[PANEL];
  for (size_t j = 0; j < PANEL; ++j)
    acc[j] = a->resume && j < cols ? a->y[row * a->yn + col + j] : 0.0f;
  for (size_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < PANEL; ++j) acc[j] += x[kk] * w[kk * PANEL + j];
  for (size_t j = 0; j < cols; ++j)
    a->y[row * a->yn + col + j] = acc[j] + (a->bias ? a->bias[col + j] : 0.0f);
}

// A row of y where k = 0: the bias (torch's linear of no inputs), or zeros.
static void row_without_k(const linear_rows_t* a, size_t row, size_t panel0, size_t panel1) {
  size_t col1 = panel1 * PANEL < a->n ? panel1 * PANEL : a->n;
  for (size_t col = panel0 * PANEL; col < col1; ++col)
    a->y[row * a->yn + col] = a->bias ? a->bias[col] : 0.0f;
}

// --------------------------------------------------------------------------
// One workgroup: rows [row0, row1) by panels [panel0, panel1).
// --------------------------------------------------------------------------


#if ANYSHAPE_MAX_ISA >= ISA_AVX512
// One AVX-512 tile of up to WIDE512_ROWS rows (a decode step's batch, a
// short prompt): each panel is read once. Where the rows do not share L1
// sets, x is read in place over the whole k, as blocks of k would only
// break the stream the prefetchers follow.
NOINLINE AVX512_FN static void one_tile512(const linear_rows_t* a, size_t row0,
                                           size_t rows, size_t panel0,
                                           size_t panel1) {
  float copied[WIDE512_ROWS * COPY_STRIDE];
  const int copy = rows_share_l1_sets(a->xk, rows);
  const size_t block = copy ? COPY_K : a->k;
  for (size_t k0 = 0; k0 < a->k; k0 += block) {
    size_t k1 = a->k - k0 > block ? k0 + block : a->k;
    size_t xs;
    const float* xp = rows_of_x(a, copy, copied, COPY_STRIDE, row0, rows, k0, k1, &xs);
    for (size_t p = panel0; p < panel1; p += 2)
      tile512(a, xp, xs, row0, rows, p, panel1 - p >= 2 ? 2 : 1, k0, k1);
  }
}

// One AVX-512 pass of WIDE512_ROWS + 1 to ONE_PASS_MAX rows (pass512):
// x is copied PASS_K at a time, so that one register addresses every row's
// values (a constant PASS_STRIDE apart) and the registers are left to the
// sums. A last odd panel takes tiles of one panel, the weights in L1 after
// the first.
NOINLINE AVX512_FN static void one_pass512(const linear_rows_t* a, size_t row0,
                                           size_t rows, size_t panel0,
                                           size_t panel1) {
  float copied[ONE_PASS_MAX * PASS_STRIDE];
  __attribute__((aligned(64))) float held[ONE_PASS_MAX * 2 * PANEL];  // more than enough
  for (size_t k0 = 0; k0 < a->k; k0 += PASS_K) {
    size_t k1 = a->k - k0 > PASS_K ? k0 + PASS_K : a->k;
    size_t xs;
    const float* xp = rows_of_x(a, 1, copied, PASS_STRIDE, row0, rows, k0, k1, &xs);
    for (size_t p = panel0; p < panel1; p += 2) {
      if (panel1 - p >= 2) {
        pass512(a, xp, row0, rows, p, k0, k1, held);
      } else {
        for (size_t r = 0; r < rows; r += WIDE512_ROWS)
          tile512(a, xp + r * xs, xs, row0 + r,
                  rows - r < WIDE512_ROWS ? rows - r : WIDE512_ROWS, p, 1, k0, k1);
      }
    }
  }
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

#if ANYSHAPE_MAX_ISA >= ISA_AVX2
// Past WIDE256_ROWS rows on AVX2: tiles of rows dealt out evenly (at most
// TILES256_ROWS each), each a pass over a block of K_BLOCK k of the
// workgroup's panels (in L2 for the tiles after the first), x read in place.
NOINLINE AVX2_FN static void tiles256(const linear_rows_t* a, size_t row0, size_t row1,
                                      size_t panel0, size_t panel1) {
  __attribute__((aligned(32))) float held[TILES256_ROWS * 2 * PANEL];
  const size_t count = (row1 - row0 + TILES256_ROWS - 1) / TILES256_ROWS;
  const size_t even = (row1 - row0) / count, more = (row1 - row0) % count;
  for (size_t kb = 0; kb < a->k; kb += K_BLOCK) {
    size_t kb1 = a->k - kb > K_BLOCK ? kb + K_BLOCK : a->k;
    size_t rows = 0;
    for (size_t row = row0, t = 0; row < row1; row += rows, ++t) {
      rows = even + (t < more);
      panels256(a, a->x + row * a->xk + kb, a->xk, row, rows, panel0, panel1, kb, kb1, held);
    }
  }
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX2

#if ANYSHAPE_MAX_ISA >= ISA_AVX512
// Past ONE_PASS_MAX rows on AVX-512: tiles of rows over blocks of K_BLOCK
// k; each block of the workgroup's panels stays in L2 while the tiles of
// rows take it in turn. The rows are dealt out evenly to tiles of at most
// TILES512_ROWS: a last tile of one to three rows reads the block out of L2
// with too few FMAs to keep up (3-5 % of the call with tiles of 12).
NOINLINE AVX512_FN static void tiles512(const linear_rows_t* a, size_t row0, size_t row1,
                                        size_t panel0, size_t panel1) {
  const size_t count = (row1 - row0 + TILES512_ROWS - 1) / TILES512_ROWS;
  const size_t even = (row1 - row0) / count, more = (row1 - row0) % count;
  const int copy = rows_share_l1_sets(a->xk, TILES512_ROWS);
  const size_t step = copy ? COPY_K : K_BLOCK;
  float copied[TILES512_ROWS * COPY_STRIDE];
  for (size_t kb = 0; kb < a->k; kb += K_BLOCK) {
    size_t kb1 = a->k - kb > K_BLOCK ? kb + K_BLOCK : a->k;
    size_t rows = 0;
    for (size_t row = row0, t = 0; row < row1; row += rows, ++t) {
      rows = even + (t < more);
      for (size_t k0 = kb; k0 < kb1; k0 += step) {
        size_t k1 = kb1 - k0 > step ? k0 + step : kb1;
        size_t xs;
        const float* xp = rows_of_x(a, copy, copied, COPY_STRIDE, row, rows, k0, k1, &xs);
        for (size_t p = panel0; p < panel1; p += 2)
          tile512(a, xp, xs, row, rows, p, panel1 - p >= 2 ? 2 : 1, k0, k1);
      }
    }
  }
}

#endif  // ANYSHAPE_MAX_ISA >= ISA_AVX512

static void block(const linear_rows_t* a, size_t row0, size_t row1,
                  size_t panel0, size_t panel1) {
  if (a->k == 0) {
    // The vector paths write y from their blocks of k, and there are none.
    for (size_t row = row0; row < row1; ++row) row_without_k(a, row, panel0, panel1);
    return;
  }
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
  const int found = isa();
  const size_t rows = row1 - row0;
#endif
#if ANYSHAPE_MAX_ISA >= ISA_AVX512
  if (found >= ISA_AVX512) {
    if (rows <= WIDE512_ROWS)
      one_tile512(a, row0, rows, panel0, panel1);
    else if (rows <= ONE_PASS_MAX)
      one_pass512(a, row0, rows, panel0, panel1);
    else
      tiles512(a, row0, row1, panel0, panel1);
    return;
  }
#endif
#if ANYSHAPE_MAX_ISA >= ISA_AVX2
  if (found == ISA_AVX2) {
    if (rows <= WIDE256_ROWS) {
      // As one_tile512 (rows this few never share L1 sets).
      const float* xp = a->x + row0 * a->xk;
      for (size_t p = panel0; p < panel1; p += 2)
        tile256(a, xp, a->xk, row0, rows, p, panel1 - p >= 2 ? 2 : 1, 0, a->k);
    } else {
      tiles256(a, row0, row1, panel0, panel1);
    }
    return;
  }
#endif
  for (size_t p = panel0; p < panel1; ++p)
    for (size_t row = row0; row < row1; ++row) row_portable(a, row, p);
}

// Workgroup (gx, gy) of (nx, ny) takes the gx-th of nx runs of panels and the
// gy-th of ny runs of rows; runs of rows are whole AVX-512 tiles but the last.
// Runs of panels are whole pairs, spread evenly: the tiles take two panels
// at a time, so every pair is one tile's whichever workgroup takes it (and a
// column's floats the same), and no run but the last ends on a tile of one
// (a decode step's 896 columns, 56 panels, for 8 workgroups: 3 or 4 pairs
// each, not 7 panels). Its rows [r[0], r[1]) and panels [p[0], p[1]);
// whether it has any.
static int workgroup_share(size_t m, size_t n, size_t gx, size_t nx, size_t gy, size_t ny,
                           size_t r[2], size_t p[2]) {
  const size_t panels = (n + PANEL - 1) / PANEL, pairs = (panels + 1) / 2;
  size_t rows_per = (m + ny - 1) / ny;
  rows_per = (rows_per + TILE512_ROWS - 1) / TILE512_ROWS * TILE512_ROWS;
  p[0] = 2 * (gx * pairs / nx);
  p[1] = 2 * ((gx + 1) * pairs / nx);
  if (p[1] > panels) p[1] = panels;
  r[0] = gy * rows_per;
  r[1] = r[0] + rows_per < m ? r[0] + rows_per : m;
  return p[0] < p[1] && r[0] < r[1];
}

static void workgroup(const linear_rows_t* a, size_t gx, size_t nx, size_t gy,
                      size_t ny) {
  size_t r[2], p[2];
  if (workgroup_share(a->m, a->n, gx, nx, gy, ny, r, p)) block(a, r[0], r[1], p[0], p[1]);
}

// The entry points the dispatches call (llvm.bareptr memrefs: a base pointer,
// then an offset in elements).
void anyshape_linear_rows(const float* x, size_t x_offset, const float* packed,
                          size_t packed_offset, const float* bias,
                          size_t bias_offset, float* y, size_t y_offset,
                          size_t m, size_t n, size_t k, size_t gx, size_t nx,
                          size_t gy, size_t ny) {
  linear_rows_t a = {x + x_offset, packed + packed_offset, bias + bias_offset,
                     y + y_offset, m, n, k, k, n, 0};
  workgroup(&a, gx, nx, gy, ny);
}

void anyshape_linear_rows_no_bias(const float* x, size_t x_offset,
                                  const float* packed, size_t packed_offset,
                                  float* y, size_t y_offset, size_t m,
                                  size_t n, size_t k, size_t gx, size_t nx,
                                  size_t gy, size_t ny) {
  linear_rows_t a = {x + x_offset, packed + packed_offset, 0, y + y_offset,
                     m, n, k, k, n, 0};
  workgroup(&a, gx, nx, gy, ny);
}

#include "quantized_panels.h"
