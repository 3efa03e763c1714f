// attention.c's vector path, included once per instruction set with SUF (a
// name suffix), FN (its target attribute), VEC and W (the vector type and its
// floats), TK (keys per tile), PR (output rows per group) and the V_* ops
// defined; it undefines them all at the end.

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

// Rows of the output [r, r + R) += their probabilities in pt times the rows
// of v, for columns [d0, d0 + CH * W); each row first scaled by its alpha
// (flash attention's rescale as the running max grows). Inlined with constant
// R and CH, so the R x CH sums stay in registers.
FN static inline __attribute__((always_inline)) void CAT(accumulate, SUF)(
    float* acc, size_t D, size_t d0, const float* pt, const float* alpha, size_t r,
    const float* v, size_t v_sl, size_t keys, const int R, const int CH) {
  VEC o[PR][4];
  for (int i = 0; i < R; ++i) {
    VEC scale = V_SET1(alpha[r + i]);
    for (int c = 0; c < CH; ++c)
      o[i][c] = V_MUL(V_LOAD(acc + (r + i) * D + d0 + c * W), scale);
  }
  for (size_t j = 0; j < keys; ++j) {
    VEC row[4];
    for (int c = 0; c < CH; ++c) row[c] = V_LOAD(v + j * v_sl + d0 + c * W);
    for (int i = 0; i < R; ++i) {
      VEC p = V_SET1(pt[j * WG_ROWS + r + i]);
      for (int c = 0; c < CH; ++c) o[i][c] = V_FMA(p, row[c], o[i][c]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < CH; ++c) V_STORE(acc + (r + i) * D + d0 + c * W, o[i][c]);
}

FN static inline __attribute__((always_inline)) void CAT(accumulate_rows, SUF)(
    float* acc, size_t D, const float* pt, const float* alpha, size_t r, const float* v,
    size_t v_sl, size_t keys, const int R) {
  size_t d0 = 0;
  for (; d0 + 4 * W <= D; d0 += 4 * W)
    CAT(accumulate, SUF)(acc, D, d0, pt, alpha, r, v, v_sl, keys, R, 4);
  for (; d0 < D; d0 += W) CAT(accumulate, SUF)(acc, D, d0, pt, alpha, r, v, v_sl, keys, R, 1);
}

// Rows [l0, l1) (at most WG_ROWS) of head (b, h), written to `out` (rows
// heads * D apart).
FN static void CAT(rows, SUF)(const attention_t* a, size_t b, size_t h, size_t l0, size_t l1,
                              float* out) {
  const size_t D = a->D, S = a->S, n = l1 - l0;
  float qt[MAX_D * WG_ROWS] __attribute__((aligned(64)));
  float acc[WG_ROWS * MAX_D] __attribute__((aligned(64)));
  float pt[TK * WG_ROWS] __attribute__((aligned(64)));
  float m[WG_ROWS], sum[WG_ROWS], alpha[WG_ROWS];
  const float* q = a->q + b * a->q_sb + h * a->q_sh + l0 * a->q_sl;
  for (size_t r = 0; r < WG_ROWS; ++r) {
    for (size_t d = 0; d < D; ++d) qt[d * WG_ROWS + r] = r < n ? q[r * a->q_sl + d] : 0.0f;
    for (size_t d = 0; d < D; ++d) acc[r * D + d] = 0.0f;
    m[r] = NEG_INF;
    sum[r] = 0.0f;
  }
  const float* k = a->k + b * a->k_sb + h * a->k_sh;
  const float* v = a->v + b * a->v_sb + h * a->v_sh;
  const float* bias = a->bias ? a->bias + b * a->m_sb + h * a->m_sh : 0;
  const VEC scale = V_SET1(a->scale);
  for (size_t s0 = 0; s0 < S; s0 += TK) {
    const size_t keys = S - s0 < TK ? S - s0 : TK;
    const float* krow[TK];
    for (int j = 0; j < TK; ++j) krow[j] = k + (s0 + ((size_t)j < keys ? (size_t)j : keys - 1)) * a->k_sl;
    for (size_t r0 = 0; r0 < n; r0 += 2 * W) {
      VEC s[TK][2];
      for (int j = 0; j < TK; ++j) s[j][0] = s[j][1] = V_ZERO();
      for (size_t d = 0; d < D; ++d) {
        VEC x0 = V_LOAD(qt + d * WG_ROWS + r0), x1 = V_LOAD(qt + d * WG_ROWS + r0 + W);
        for (int j = 0; j < TK; ++j) {
          VEC kv = V_SET1(krow[j][d]);
          s[j][0] = V_FMA(kv, x0, s[j][0]);
          s[j][1] = V_FMA(kv, x1, s[j][1]);
        }
      }
      for (int c = 0; c < 2; ++c) {
        const size_t row = r0 + c * W;  // this vector's first row
        if (row >= n) break;
        const size_t rows = n - row;
        VEC top = V_SET1(NEG_INF);
        for (int j = 0; j < TK; ++j) {
          if ((size_t)j >= keys) {
            s[j][c] = V_SET1(NEG_INF);
            continue;
          }
          VEC add = !bias ? V_ZERO()
                    : a->bias_rows ? V_LOAD_FIRST(bias + (s0 + j) * a->m_ss + l0 + row, rows)
                                   : V_SET1(bias[s0 + j]);
          s[j][c] = V_FMA(s[j][c], scale, add);
          top = V_MAX(top, s[j][c]);
        }
        VEC old = V_LOAD(m + row);
        VEC next = V_MAX(old, top);
        VEC shift = V_FINITE_OR_ZERO(next);  // rows with no finite score yet: e = 0
        VEC total = V_ZERO();
        for (int j = 0; j < TK; ++j) {
          VEC e = V_EXP(V_SUB(s[j][c], shift));
          total = V_ADD(total, e);
          V_STORE(pt + j * WG_ROWS + row, e);
        }
        VEC rescale = V_EXP(V_SUB(old, shift));
        V_STORE(alpha + row, rescale);
        V_STORE(sum + row, V_FMA(V_LOAD(sum + row), rescale, total));
        V_STORE(m + row, next);
      }
    }
    const float* vrow = v + s0 * a->v_sl;
    size_t r = 0;
    for (; r + PR <= n; r += PR)
      CAT(accumulate_rows, SUF)(acc, D, pt, alpha, r, vrow, a->v_sl, keys, PR);
    for (; r < n; ++r) CAT(accumulate_rows, SUF)(acc, D, pt, alpha, r, vrow, a->v_sl, keys, 1);
  }
  for (size_t r = 0; r < n; ++r) {
    float* o = out + r * a->heads * D;
    VEC total = V_SET1(sum[r]);
    for (size_t d = 0; d < D; d += W)
      V_STORE(o + d, sum[r] == 0.0f ? V_ZERO() : V_DIV(V_LOAD(acc + r * D + d), total));
  }
}

#undef CAT
#undef CAT_
#undef SUF
#undef FN
#undef VEC
#undef W
#undef TK
#undef PR
#undef V_LOAD
#undef V_LOAD_FIRST
#undef V_STORE
#undef V_SET1
#undef V_ZERO
#undef V_FMA
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_DIV
#undef V_MAX
#undef V_EXP
#undef V_FINITE_OR_ZERO
