"""The c device's fused attention kernels: C source shipped here, compiled once, via ctypes.

Three entry points per storage dtype (float32, float64, float16, bfloat16), each the C
twin of a function in ``limn/sdpa.py`` (the reference they are diffed against):

* ``limn_sdpa_fwd``: one task per (batch*head, 64-query tile). K and V stream past the
  tile 64 keys at a time; each query row keeps a running max, denominator and weighted
  sum, and the task writes the answer and one logsumexp per row. Every head's K
  (transposed) and V are laid out once, before the tasks, for all the tiles that read
  them.
* ``limn_sdpa_bwd_q``: one task per (batch*head, query tile); each row's dq is summed
  over keys by the one thread that owns the row.
* ``limn_sdpa_bwd_kv``: one task per (batch*head, 64-key tile); each key row's dk and dv
  are summed over queries by the one thread that owns it, from the same recomputed
  probabilities.
* ``limn_sdpa_bwd``: dq, dk and dv together, one task per batch*head: the probabilities
  and ds are computed once (by the dk/dv pass's order) and ds also goes into the head's
  dq, in the dq pass's order: the same bits as the two kernels above with two of their
  seven tile products and one of their two exps saved. A plan that holds both gradient
  nodes runs this once for both (where there are at least two heads per thread; the two
  kernels elsewhere, as they spread one head's tiles over the threads).

Under a causal mask no task visits a tile that its rows cannot see, and on the diagonal
tile each block of rows computes only the vectors of scores (and sums only the keys, or
queries) that some row of the block sees: about half the work of the unmasked shape. A
skipped term is one whose weight is exactly 0, so the results are the same bits as summing
it (for finite inputs). The forward and dq passes hand out a head's last query tiles (the
heaviest) first.

No task writes another task's rows and every sum runs in one fixed order (a dot product
or a weighted sum of rows term by term; a tile's max or sum lane-wise, then across the
lanes left to right), so results are the same bits on every run and at every thread
count. Nothing is t_q x t_k: the largest buffers are the forward's copy of K and V
(laid out for the tiles, their size again) and, in the joint backward, one head's q, dO
and dq per thread. Rows are found by
``sdpa_row``, so the same code reads the (..., t, d) layout and the packed (B, t, H * d)
one (``heads`` in the params, ``limn/sdpa.py``): a tile load is a strided gather either
way. The two inner products (a
block of rows against a 64-wide tile, and a weighted sum of a tile's rows into a block
of rows) are written with the compilers' vector extension, with a block of rows times a
tile of accumulators held in registers; a*b+c is one fused multiply-add throughout this
source (the rest of the c device compiles without contraction). Half widths load into
float32 and round once on store; float64 computes in double.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ir.graph import dtypes

HELPERS = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* a*b+c is one fused multiply-add everywhere in this file: the same instruction on every
   run and thread count, so determinism holds; it is the one rounding that differs from
   the numpy reference, which rounds twice */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define BQ 64   /* query rows per forward / dq task */
#define BK 64   /* keys (or queries, in the dk/dv pass) per inner tile */
#define BKV 64  /* key rows per dk/dv task */
#define VBYTES 64

static inline float sdpa_bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t sdpa_f2bf(float f) {  /* round to nearest even, NaN kept quiet */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* exp(x) for x <= 0 (a score minus its row's max or logsumexp): 2^n * poly(r) with a
   two-part ln 2 and a degree-7 Taylor polynomial, about 1 ulp. Below -87.3 it gives
   exp(-87.3) instead of a subnormal; callers add it to a row sum of at least 1 or select
   0 for a hidden key. Branch-free, so the loops calling it vectorize. */
static inline float sdpa_exp_f(float x) {
    x = x < -87.3f ? -87.3f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187e-06f, r);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

static inline double sdpa_exp_d(double x) { return exp(x); }

/* where row i of head-batch bh sits among a tensor's rows: (bh, t) rows in order, or with
   hs > 1 heads packed side by side in each row of a (B, t, hs * width) tensor, row
   (b, i, h) of its (B, t, hs) rows; consecutive i are hs rows apart */
static inline int64_t sdpa_row(int64_t bh, int64_t i, int64_t t, int64_t hs) {
    return ((bh / hs) * t + i) * hs + bh % hs;
}

/* ok[j] for the keys j0 + j of a tile of nk, seen from query row ``row``: the keys up to
   the row (causal) among the first nk, and of those the unmasked ones; returns whether any
   is. Bitwise, so it vectorizes, and the mask is read only below nk. */
static inline int sdpa_ok(uint8_t *restrict ok, int64_t j0, int64_t nk, int64_t row,
                          int causal, const uint8_t *restrict mk) {
    const int64_t lim = causal && row - j0 + 1 < nk ? row - j0 + 1 : nk;
    for (int64_t j = 0; j < BK; j++) ok[j] = j < lim;
    if (mk)
        for (int64_t j = 0; j < nk; j++) ok[j] &= mk[j0 + j] != 0;
    int any = 0;
    for (int64_t j = 0; j < BK; j++) any |= ok[j];
    return any;
}

/* of a tile of nk keys from j0, how many a query row ``row`` can see at most: the first
   row - j0 + 1 under a causal mask (0 if none), all nk without */
static inline int64_t sdpa_seen(int64_t nk, int64_t j0, int64_t row, int causal) {
    if (!causal) return nk;
    const int64_t n = row - j0 + 1;
    return n < 0 ? 0 : n < nk ? n : nk;
}

static void *sdpa_alloc_raw(size_t bytes) {  /* 64-byte aligned */
    bytes = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static void *sdpa_alloc(size_t bytes) {  /* 64-byte aligned, zeroed */
    void *p = sdpa_alloc_raw(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}
"""

# one copy per compute type: @A@ the type, @X@ its suffix, @R@ rows per register block,
# @EXP@ its exp. V is one 64-byte vector of @A@ (gcc and clang split it where the target
# has narrower registers); VL lanes, NV vectors per 64-wide tile, CW = 2 vectors.
TILE_OPS = r"""
typedef @A@ V_@X@ __attribute__((vector_size(VBYTES)));
typedef @I@ VI_@X@ __attribute__((vector_size(VBYTES)));
#define VL_@X@ ((int)(VBYTES / sizeof(@A@)))
#define NV_@X@ (BK / VL_@X@)
#define R_@X@ @R@

/* s[r][j] = scale * dot(rows[r], cols[:, j]) for R rows (row stride ld) against the nv
   vectors of a tile stored column-major, cols[c*lc + j] (lc a multiple of the vector):
   R x nv accumulators held in registers, the sum over c in order. nv is a constant
   wherever this is inlined. */
static inline __attribute__((always_inline)) void sdpa_dots_w_@X@(
    @A@ *restrict s, const @A@ *restrict rows, int64_t ld, const @A@ *restrict cols,
    int64_t lc, int64_t d, @A@ scale, const int nv) {
    V_@X@ acc[R_@X@][NV_@X@];
    for (int r = 0; r < R_@X@; r++)
        for (int u = 0; u < nv; u++) acc[r][u] = (V_@X@){0};
    for (int64_t c = 0; c < d; c++) {
        V_@X@ k[NV_@X@];
        for (int u = 0; u < nv; u++) k[u] = *(const V_@X@ *)(cols + c * lc + u * VL_@X@);
        for (int r = 0; r < R_@X@; r++) {
            const @A@ a = rows[r * ld + c];
            for (int u = 0; u < nv; u++) acc[r][u] = a * k[u] + acc[r][u];
        }
    }
    for (int r = 0; r < R_@X@; r++)
        for (int u = 0; u < nv; u++) *(V_@X@ *)(s + r * BK + u * VL_@X@) = acc[r][u] * scale;
}

/* the same for the tile's vectors u0 <= u < u1 only (the columns of s outside them keep
   what they held): under a causal mask a block of rows on the diagonal needs only the
   vectors holding the keys (or queries) it can see. Each computed value is the same sum
   in the same order as over the whole tile. */
static inline __attribute__((always_inline)) void sdpa_dots_@X@(
    @A@ *restrict s, const @A@ *restrict rows, int64_t ld, const @A@ *restrict cols,
    int64_t lc, int64_t d, @A@ scale, int u0, int u1) {
    s += u0 * VL_@X@, cols += u0 * VL_@X@;
    switch (u1 - u0) {
@CASES@
    default: break;
    }
}

/* out[r][:] += sum_j w[r][j] * x[j][:] for R rows: out rows of stride ldo, x rows of
   stride ldx (both multiples of two vectors, padding zero), the sum over j in order */
static inline void sdpa_acc_@X@(@A@ *restrict out, int64_t ldo, const @A@ *restrict w,
                                const @A@ *restrict x, int64_t ldx, int64_t n) {
    for (int64_t c0 = 0; c0 < ldx; c0 += 2 * VL_@X@) {
        V_@X@ a[R_@X@][2];
        for (int r = 0; r < R_@X@; r++) {
            a[r][0] = *(V_@X@ *)(out + r * ldo + c0);
            a[r][1] = *(V_@X@ *)(out + r * ldo + c0 + VL_@X@);
        }
        for (int64_t j = 0; j < n; j++) {
            const V_@X@ x0 = *(const V_@X@ *)(x + j * ldx + c0);
            const V_@X@ x1 = *(const V_@X@ *)(x + j * ldx + c0 + VL_@X@);
            for (int r = 0; r < R_@X@; r++) {
                const @A@ wr = w[r * BK + j];
                a[r][0] = wr * x0 + a[r][0];
                a[r][1] = wr * x1 + a[r][1];
            }
        }
        for (int r = 0; r < R_@X@; r++) {
            *(V_@X@ *)(out + r * ldo + c0) = a[r][0];
            *(V_@X@ *)(out + r * ldo + c0 + VL_@X@) = a[r][1];
        }
    }
}

/* the max over the tile of s where ok (-inf if none; a NaN is skipped here and reaches the
   answer through the exp), lane-wise then across lanes, in that fixed order */
static inline @A@ sdpa_max_@X@(const @A@ *restrict s, const uint8_t *restrict ok) {
    @A@ x[BK] __attribute__((aligned(VBYTES)));
    for (int j = 0; j < BK; j++) x[j] = ok[j] ? s[j] : -INFINITY;
    V_@X@ m = *(const V_@X@ *)x;
    for (int u = 1; u < NV_@X@; u++) {
        const V_@X@ b = *(const V_@X@ *)(x + u * VL_@X@);
        const VI_@X@ gt = b > m;
        m = (V_@X@)(((VI_@X@)b & gt) | ((VI_@X@)m & ~gt));
    }
    @A@ t = m[0];
    for (int l = 1; l < VL_@X@; l++) t = m[l] > t ? m[l] : t;
    return t;
}

/* the same max where every key of the tile is visible (no copy, no select) */
static inline @A@ sdpa_max_all_@X@(const @A@ *restrict s) {
    V_@X@ m = *(const V_@X@ *)s;
    for (int u = 1; u < NV_@X@; u++) {
        const V_@X@ b = *(const V_@X@ *)(s + u * VL_@X@);
        const VI_@X@ gt = b > m;
        m = (V_@X@)(((VI_@X@)b & gt) | ((VI_@X@)m & ~gt));
    }
    @A@ t = m[0];
    for (int l = 1; l < VL_@X@; l++) t = m[l] > t ? m[l] : t;
    return t;
}

static inline @A@ sdpa_sum_@X@(const @A@ *restrict p) {
    V_@X@ t = *(const V_@X@ *)p;
    for (int u = 1; u < NV_@X@; u++) t = t + *(const V_@X@ *)(p + u * VL_@X@);
    @A@ total = t[0];
    for (int l = 1; l < VL_@X@; l++) total += t[l];
    return total;
}

/* p[j] = exp(s[j] - sub[j]) where ok[j], else 0 (sub: one value, or one per column) */
static inline void sdpa_exp_row_@X@(@A@ *restrict p, const @A@ *restrict s, @A@ sub,
                                    const uint8_t *restrict ok) {
    for (int j = 0; j < BK; j++) {
        @A@ e = @EXP@(s[j] - sub);
        p[j] = ok[j] ? e : 0;
    }
}

/* the same where every key (column) of the tile is visible */
static inline void sdpa_exp_row_all_@X@(@A@ *restrict p, const @A@ *restrict s, @A@ sub) {
    for (int j = 0; j < BK; j++) p[j] = @EXP@(s[j] - sub);
}

static inline void sdpa_exp_cols_all_@X@(@A@ *restrict p, const @A@ *restrict s,
                                         const @A@ *restrict sub) {
    for (int j = 0; j < BK; j++) p[j] = @EXP@(s[j] - sub[j]);
}

static inline void sdpa_exp_cols_@X@(@A@ *restrict p, const @A@ *restrict s,
                                     const @A@ *restrict sub, const uint8_t *restrict ok) {
    for (int j = 0; j < BK; j++) {
        @A@ e = @EXP@(s[j] - sub[j]);
        p[j] = ok[j] ? e : 0;
    }
}

/* R key rows (keys key0.., n of them left in the task) of a tile against its BK query
   columns: the probabilities p and the score gradients ds = p * (dp - D), in dpr on
   entry; a hidden key's rows are zero (it takes no gradient) */
static inline void sdpa_probs_@X@(@A@ *p, @A@ *dpr, const @A@ *s, const @A@ *L,
                                  const @A@ *D, uint8_t *ok, int64_t key0, int64_t n,
                                  const uint8_t *mk, int causal, int64_t i0, int full) {
    for (int r = 0; r < R_@X@; r++) {
        const int64_t key = key0 + r;
        @A@ *pr = p + r * BK, *dr = dpr + r * BK;
        if (r >= n || (mk && !mk[key])) {
            for (int i = 0; i < BK; i++) pr[i] = dr[i] = 0;
            continue;
        }
        if (full) {
            sdpa_exp_cols_all_@X@(pr, s + r * BK, L);
        } else {
            const int64_t first = causal ? key - i0 : 0;  /* first query to see it */
            for (int64_t i = 0; i < BK; i++) ok[i] = (i >= first) & (L[i] != -INFINITY);
            sdpa_exp_cols_@X@(pr, s + r * BK, L, ok);
        }
        for (int i = 0; i < BK; i++) dr[i] = pr[i] * (dr[i] - D[i]);
    }
}

/* how many of the tile's vectors hold its first n columns */
static inline int sdpa_vecs_@X@(int64_t n) { return (int)((n + VL_@X@ - 1) / VL_@X@); }

static inline int64_t sdpa_pad_@X@(int64_t n) {  /* n rounded up to two vectors */
    return (n + 2 * VL_@X@ - 1) / (2 * VL_@X@) * (2 * VL_@X@);
}
"""

# one copy per storage type: @T@ storage, @N@ its name, @LD@/@ST@ the conversions
KERNELS = r"""
/* rows x cols of src (row stride ls) into dst column-major, BK wide, zero past rows. Row by
   row: each source row is read once, in order (a column walk would touch every row's
   cache lines once per column, and with heads packed, ls = heads * cols, those rows span
   more than L1), while the scattered writes stay in the tile, d x BK, in L1. */
static void sdpa_load_t_@N@(@A@ *dst, const @T@ *src, int64_t rows, int64_t cols,
                            int64_t ls) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < cols; c++) dst[c * BK + j] = @LD@(src[j * ls + c]);
    for (int64_t c = 0; c < cols; c++)
        for (int64_t j = rows; j < BK; j++) dst[c * BK + j] = 0;
}

/* the same into a transposed buffer of column stride lc >= rows, zero past rows (a head's
   whole t x cols, read once for all its tiles) */
static void sdpa_load_tw_@N@(@A@ *dst, int64_t lc, const @T@ *src, int64_t rows, int64_t cols,
                             int64_t ls) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < cols; c++) dst[c * lc + j] = @LD@(src[j * ls + c]);
    for (int64_t c = 0; c < cols; c++)
        for (int64_t j = rows; j < lc; j++) dst[c * lc + j] = 0;
}

/* rows x cols of src (row stride ls) into dst with row stride ld >= cols, zero in the
   padding */
static void sdpa_load_@N@(@A@ *dst, int64_t ld, const @T@ *src, int64_t rows, int64_t cols,
                          int64_t all_rows, int64_t ls) {
    for (int64_t i = 0; i < all_rows; i++)
        for (int64_t c = 0; c < ld; c++)
            dst[i * ld + c] = i < rows && c < cols ? @LD@(src[i * ls + c]) : 0;
}

void limn_sdpa_fwd_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const uint8_t *M, @T@ *O,
                      @A@ *LSE, int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                      int64_t hs, double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tq + BQ - 1) / BQ, dvp = sdpa_pad_@X@(dv);
    const int64_t kr = (tk + BK - 1) / BK * BK;  /* a head's key rows, padded */
    const int64_t lk = hs * d, lv = hs * dv;  /* row strides */
    /* every head's K transposed (column stride kr) and V by rows, loaded once for all the
       query tiles that read them (every element written, padding included, so not
       zeroed first): the size of K and V again */
    @A@ *KT = sdpa_alloc_raw(sizeof(@A@) * bh * kr * (d + dvp)), *VS = KT + bh * kr * d;
    #pragma omp parallel num_threads(threads)
    {  /* one set of tiles per thread, for all its tasks */
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < bh; b++) {
        sdpa_load_tw_@N@(KT + b * kr * d, kr, K + sdpa_row(b, 0, tk, hs) * d, tk, d, lk);
        sdpa_load_@N@(VS + b * kr * dvp, dvp, V + sdpa_row(b, 0, tk, hs) * dv, tk, dv, kr, lv);
    }
    const int64_t floats = BQ * d + BQ * dvp + 2 * R_@X@ * BK;
    @A@ *qs = sdpa_alloc(sizeof(@A@) * floats);
    @A@ *acc = qs + BQ * d, *s = acc + BQ * dvp;
    @A@ *p = s + R_@X@ * BK;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < bh * tiles; task++) {
        /* a head's last query tiles first: under a causal mask they see the most keys, so
           the lightest tasks come last and the threads finish together */
        const int64_t b = task / tiles, i0 = (tiles - 1 - task % tiles) * BQ;
        const int64_t nq = tq - i0 < BQ ? tq - i0 : BQ;
        const uint8_t *mk = M ? M + b * tk : NULL;
        memset(acc, 0, sizeof(@A@) * BQ * dvp);
        @A@ m[BQ], l[BQ];
        uint8_t ok[R_@X@][BK];
        sdpa_load_@N@(qs, d, Q + sdpa_row(b, i0, tq, hs) * d, nq, d, BQ, lk);
        for (int64_t i = 0; i < BQ; i++) m[i] = -INFINITY, l[i] = 0;
        const int64_t kend = causal && i0 + nq < tk ? i0 + nq : tk;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
            /* the tile's keys (columns past nk are other keys or zeros: never seen) */
            const @A@ *kt = KT + b * kr * d + j0, *vs = VS + (b * kr + j0) * dvp;
            /* every key of the tile visible to every row of the task: no mask to build */
            const int full = nk == BK && !mk && (!causal || j0 + BK - 1 <= i0);
            for (int64_t i = 0; i < nq; i += R_@X@) {
                /* the keys of the tile the block's last row can see (causal): the rest are
                   hidden from every row of the block, their weights 0 */
                const int64_t nb = sdpa_seen(nk, j0, i0 + i + R_@X@ - 1, causal);
                sdpa_dots_@X@(s, qs + i * d, d, kt, kr, d, scale, 0, sdpa_vecs_@X@(nb));
                for (int r = 0; r < R_@X@; r++) {
                    const int64_t row = i0 + i + r;
                    const int any = full || sdpa_ok(ok[r], j0, nk, row, causal, mk);
                    @A@ *pr = p + r * BK;
                    if (!any || i + r >= nq) {  /* nothing visible in this tile */
                        for (int j = 0; j < BK; j++) pr[j] = 0;
                        continue;
                    }
                    const @A@ mx =
                        full ? sdpa_max_all_@X@(s + r * BK) : sdpa_max_@X@(s + r * BK, ok[r]);
                    const @A@ mi = m[i + r];
                    const @A@ mnew = mx > mi ? mx : mi;
                    const @A@ alpha = mi == -INFINITY ? 0 : @EXP@(mi - mnew);
                    if (full)
                        sdpa_exp_row_all_@X@(pr, s + r * BK, mnew == -INFINITY ? 0 : mnew);
                    else
                        sdpa_exp_row_@X@(pr, s + r * BK, mnew == -INFINITY ? 0 : mnew, ok[r]);
                    l[i + r] = l[i + r] * alpha + sdpa_sum_@X@(pr);
                    @A@ *a = acc + (i + r) * dvp;
                    for (int64_t c = 0; c < dvp; c++) a[c] *= alpha;
                    m[i + r] = mnew;
                }
                sdpa_acc_@X@(acc + i * dvp, dvp, p, vs, dvp, nb);
            }
        }
        for (int64_t i = 0; i < nq; i++) {
            const int64_t row = sdpa_row(b, i0 + i, tq, hs);
            const @A@ den = l[i] > 0 || l[i] != l[i] ? l[i] : 1;
            for (int64_t c = 0; c < dv; c++) O[row * dv + c] = @ST@(acc[i * dvp + c] / den);
            LSE[row] = l[i] > 0 || l[i] != l[i] ? m[i] + @LOG@(l[i]) : -INFINITY;
        }
    }
    free(qs);
    }
    free(KT);
}

void limn_sdpa_bwd_q_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const @T@ *DO,
                        const @A@ *LSE, const @A@ *DELTA, const uint8_t *M, @T@ *DQ,
                        int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                        int64_t hs, double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tq + BQ - 1) / BQ, dp = sdpa_pad_@X@(d);
    const int64_t lk = hs * d, lv = hs * dv;  /* row strides */
    #pragma omp parallel num_threads(threads)
    {  /* one set of tiles per thread, for all its tasks */
    @A@ *qs = sdpa_alloc(sizeof(@A@) * (BQ * d + BQ * dp + BQ * dv + d * BK + BK * dp +
                                        dv * BK + 3 * R_@X@ * BK));
    @A@ *dq = qs + BQ * d, *dos = dq + BQ * dp, *kt = dos + BQ * dv, *ks = kt + d * BK;
    @A@ *vt = ks + BK * dp, *s = vt + dv * BK, *p = s + R_@X@ * BK, *dpr = p + R_@X@ * BK;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < bh * tiles; task++) {
        /* a head's last query tiles first: under a causal mask they see the most keys, so
           the lightest tasks come last and the threads finish together */
        const int64_t b = task / tiles, i0 = (tiles - 1 - task % tiles) * BQ;
        const int64_t nq = tq - i0 < BQ ? tq - i0 : BQ;
        const @T@ *k = K + sdpa_row(b, 0, tk, hs) * d, *v = V + sdpa_row(b, 0, tk, hs) * dv;
        @A@ L[BQ], D[BQ];
        for (int64_t i = 0; i < nq; i++) {
            const int64_t row = sdpa_row(b, i0 + i, tq, hs);
            L[i] = LSE[row], D[i] = DELTA[row];
        }
        const uint8_t *mk = M ? M + b * tk : NULL;
        memset(dq, 0, sizeof(@A@) * BQ * dp);
        uint8_t ok[BK];
        sdpa_load_@N@(qs, d, Q + sdpa_row(b, i0, tq, hs) * d, nq, d, BQ, lk);
        sdpa_load_@N@(dos, dv, DO + sdpa_row(b, i0, tq, hs) * dv, nq, dv, BQ, lv);
        const int64_t kend = causal && i0 + nq < tk ? i0 + nq : tk;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
            sdpa_load_t_@N@(kt, k + j0 * lk, nk, d, lk);
            sdpa_load_@N@(ks, dp, k + j0 * lk, nk, d, BK, lk);
            sdpa_load_t_@N@(vt, v + j0 * lv, nk, dv, lv);
            const int full = nk == BK && !mk && (!causal || j0 + BK - 1 <= i0);
            for (int64_t i = 0; i < nq; i += R_@X@) {
                const int64_t nb = sdpa_seen(nk, j0, i0 + i + R_@X@ - 1, causal);
                const int nvb = sdpa_vecs_@X@(nb);
                sdpa_dots_@X@(s, qs + i * d, d, kt, BK, d, scale, 0, nvb);
                sdpa_dots_@X@(dpr, dos + i * dv, dv, vt, BK, dv, 1, 0, nvb);
                for (int r = 0; r < R_@X@; r++) {
                    const int64_t row = i0 + i + r;
                    @A@ *pr = p + r * BK, *dr = dpr + r * BK;
                    if (i + r >= nq || L[i + r] == -INFINITY) {  /* past the end, or sees no key */
                        for (int j = 0; j < BK; j++) pr[j] = 0;
                        continue;
                    }
                    if (full) {
                        sdpa_exp_row_all_@X@(pr, s + r * BK, L[i + r]);
                    } else {
                        sdpa_ok(ok, j0, nk, row, causal, mk);
                        sdpa_exp_row_@X@(pr, s + r * BK, L[i + r], ok);
                    }
                    const @A@ Di = D[i + r];
                    for (int j = 0; j < BK; j++) pr[j] = pr[j] * (dr[j] - Di);
                }
                sdpa_acc_@X@(dq + i * dp, dp, p, ks, dp, nb);
            }
        }
        for (int64_t i = 0; i < nq; i++)
            for (int64_t c = 0; c < d; c++)
                DQ[sdpa_row(b, i0 + i, tq, hs) * d + c] = @ST@(dq[i * dp + c] * scale);
    }
    free(qs);
    }
}

void limn_sdpa_bwd_kv_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const @T@ *DO,
                         const @A@ *LSE, const @A@ *DELTA, const uint8_t *M, @T@ *DK,
                         @T@ *DV, int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                         int64_t hs, double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tk + BKV - 1) / BKV, dp = sdpa_pad_@X@(d), dvp = sdpa_pad_@X@(dv);
    const int64_t lk = hs * d, lv = hs * dv;  /* row strides */
    #pragma omp parallel num_threads(threads)
    {  /* one set of tiles per thread, for all its tasks */
    @A@ *ks = sdpa_alloc(sizeof(@A@) * (BKV * (d + dv + dp + dvp) + BK * (d + dp + dv + dvp) +
                                        3 * R_@X@ * BK));
    @A@ *vs = ks + BKV * d, *dk = vs + BKV * dv, *dvv = dk + BKV * dp;
    @A@ *qt = dvv + BKV * dvp, *qs = qt + d * BK, *dot = qs + BK * dp, *dos = dot + dv * BK;
    @A@ *s = dos + BK * dvp, *p = s + R_@X@ * BK, *dpr = p + R_@X@ * BK;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < bh * tiles; task++) {
        const int64_t b = task / tiles, j0 = task % tiles * BKV;
        const int64_t nkv = tk - j0 < BKV ? tk - j0 : BKV;
        const @T@ *q = Q + sdpa_row(b, 0, tq, hs) * d, *dO = DO + sdpa_row(b, 0, tq, hs) * dv;
        const uint8_t *mk = M ? M + b * tk : NULL;
        memset(dk, 0, sizeof(@A@) * BKV * (dp + dvp));  /* dk and dvv */
        @A@ L[BK], D[BK];
        uint8_t ok[BK];
        sdpa_load_@N@(ks, d, K + sdpa_row(b, j0, tk, hs) * d, nkv, d, BKV, lk);
        sdpa_load_@N@(vs, dv, V + sdpa_row(b, j0, tk, hs) * dv, nkv, dv, BKV, lv);
        for (int64_t i0 = causal ? j0 : 0; i0 < tq; i0 += BK) {
            const int64_t nq = tq - i0 < BK ? tq - i0 : BK;
            sdpa_load_t_@N@(qt, q + i0 * lk, nq, d, lk);
            sdpa_load_@N@(qs, dp, q + i0 * lk, nq, d, BK, lk);
            sdpa_load_t_@N@(dot, dO + i0 * lv, nq, dv, lv);
            sdpa_load_@N@(dos, dvp, dO + i0 * lv, nq, dv, BK, lv);
            int seen = 0;  /* query rows of the tile that see some key */
            for (int64_t i = 0; i < BK; i++) {
                const int64_t row = sdpa_row(b, i0 + i, tq, hs);
                L[i] = i < nq ? LSE[row] : -INFINITY;
                D[i] = i < nq ? DELTA[row] : 0;
                seen += L[i] != -INFINITY;
            }
            /* every query of the tile sees every key row of the task */
            const int full = seen == BK && (!causal || j0 + nkv - 1 <= i0);
            const int u1 = sdpa_vecs_@X@(nq);
            for (int64_t jj = 0; jj < nkv; jj += R_@X@) {
                /* the queries of the tile that can see the block's first key (causal) start
                   in vector u0: the ones before it see no key of the block, weights 0 */
                const int64_t first = causal && j0 + jj > i0 ? j0 + jj - i0 : 0;
                const int u0 = first < nq ? (int)(first / VL_@X@) : u1;
                const int64_t lo = (int64_t)u0 * VL_@X@;
                sdpa_dots_@X@(s, ks + jj * d, d, qt, BK, d, scale, u0, u1);
                sdpa_dots_@X@(dpr, vs + jj * dv, dv, dot, BK, dv, 1, u0, u1);
                sdpa_probs_@X@(p, dpr, s, L, D, ok, j0 + jj, nkv - jj, mk, causal, i0, full);
                if (lo < nq) {
                    sdpa_acc_@X@(dvv + jj * dvp, dvp, p + lo, dos + lo * dvp, dvp, nq - lo);
                    sdpa_acc_@X@(dk + jj * dp, dp, dpr + lo, qs + lo * dp, dp, nq - lo);
                }
            }
        }
        for (int64_t j = 0; j < nkv; j++) {
            for (int64_t c = 0; c < d; c++)
                DK[sdpa_row(b, j0 + j, tk, hs) * d + c] = @ST@(dk[j * dp + c] * scale);
            for (int64_t c = 0; c < dv; c++)
                DV[sdpa_row(b, j0 + j, tk, hs) * dv + c] = @ST@(dvv[j * dvp + c]);
        }
    }
    free(ks);
    }
}

/* dq, dk and dv in one pass: one task per head, which owns all of that head's rows. Key
   tiles in order, and for each the query tiles that see it, as in limn_sdpa_bwd_kv; the
   tile of ds it computes there (key-major) is also turned query-major and added into the
   head's dq, key by key in order, as limn_sdpa_bwd_q adds it. Every value is the same
   sum in the same order as in those two kernels, so the results are the same bits; the
   probabilities are computed once instead of twice. The head's q and dO are loaded once
   (row-major and transposed) for all its key tiles: with its dq, five t_q x d buffers
   per thread are the largest. */
void limn_sdpa_bwd_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const @T@ *DO,
                      const @A@ *LSE, const @A@ *DELTA, const uint8_t *M, @T@ *DQ, @T@ *DK,
                      @T@ *DV, int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                      int64_t hs, double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tk + BKV - 1) / BKV, dp = sdpa_pad_@X@(d), dvp = sdpa_pad_@X@(dv);
    const int64_t qr = (tq + BK - 1) / BK * BK;  /* the head's query rows, padded */
    const int64_t lk = hs * d, lv = hs * dv;  /* row strides */
    #pragma omp parallel num_threads(threads)
    {  /* one set of buffers per thread, for all its tasks */
    @A@ *ks = sdpa_alloc(sizeof(@A@) * (BKV * (dp + dv + dp + dvp) + 2 * R_@X@ * BK +
                                        2 * BK * BK + qr * (d + dp + dv + dvp + dp + 2)));
    @A@ *vs = ks + BKV * dp, *dk = vs + BKV * dv, *dvv = dk + BKV * dp;
    @A@ *s = dvv + BKV * dvp, *p = s + R_@X@ * BK, *dsk = p + R_@X@ * BK, *dsq = dsk + BK * BK;
    @A@ *qt = dsq + BK * BK, *qs = qt + d * qr, *dot = qs + qr * dp, *dos = dot + dv * qr;
    @A@ *dq = dos + qr * dvp, *Lh = dq + qr * dp, *Dh = Lh + qr;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < bh; b++) {
        const @T@ *q = Q + sdpa_row(b, 0, tq, hs) * d, *dO = DO + sdpa_row(b, 0, tq, hs) * dv;
        const uint8_t *mk = M ? M + b * tk : NULL;
        memset(dq, 0, sizeof(@A@) * qr * dp);
        /* the head's queries: transposed (column stride qr) and by rows, and L, delta */
        sdpa_load_tw_@N@(qt, qr, q, tq, d, lk);
        sdpa_load_@N@(qs, dp, q, tq, d, qr, lk);
        sdpa_load_tw_@N@(dot, qr, dO, tq, dv, lv);
        sdpa_load_@N@(dos, dvp, dO, tq, dv, qr, lv);
        for (int64_t i = 0; i < qr; i++) {
            const int64_t row = sdpa_row(b, i, tq, hs);
            Lh[i] = i < tq ? LSE[row] : -INFINITY;
            Dh[i] = i < tq ? DELTA[row] : 0;
        }
        for (int64_t j0 = 0; j0 < tiles * BKV; j0 += BKV) {
        const int64_t nkv = tk - j0 < BKV ? tk - j0 : BKV;
        memset(dk, 0, sizeof(@A@) * BKV * (dp + dvp));  /* dk and dvv */
        uint8_t ok[BK];
        sdpa_load_@N@(ks, dp, K + sdpa_row(b, j0, tk, hs) * d, nkv, d, BKV, lk);
        sdpa_load_@N@(vs, dv, V + sdpa_row(b, j0, tk, hs) * dv, nkv, dv, BKV, lv);
        for (int64_t i0 = causal ? j0 : 0; i0 < tq; i0 += BK) {
            const int64_t nq = tq - i0 < BK ? tq - i0 : BK;
            const @A@ *L = Lh + i0, *D = Dh + i0, *qti = qt + i0, *doti = dot + i0;
            const @A@ *qsi = qs + i0 * dp, *dosi = dos + i0 * dvp;
            int seen = 0;  /* query rows of the tile that see some key */
            for (int64_t i = 0; i < BK; i++) seen += L[i] != -INFINITY;
            const int full = seen == BK && (!causal || j0 + nkv - 1 <= i0);
            const int u1 = sdpa_vecs_@X@(nq);
            for (int64_t jj = 0; jj < nkv; jj += R_@X@) {
                const int64_t first = causal && j0 + jj > i0 ? j0 + jj - i0 : 0;
                const int u0 = first < nq ? (int)(first / VL_@X@) : u1;
                const int64_t lo = (int64_t)u0 * VL_@X@;
                @A@ *dpr = dsk + jj * BK;  /* the block's rows of the ds tile */
                sdpa_dots_@X@(s, ks + jj * dp, dp, qti, qr, d, scale, u0, u1);
                sdpa_dots_@X@(dpr, vs + jj * dv, dv, doti, qr, dv, 1, u0, u1);
                sdpa_probs_@X@(p, dpr, s, L, D, ok, j0 + jj, nkv - jj, mk, causal, i0, full);
                for (int r = 0; r < R_@X@; r++)  /* not computed: hidden */
                    for (int64_t i = 0; i < lo; i++) dpr[r * BK + i] = 0;
                if (lo < nq) {
                    sdpa_acc_@X@(dvv + jj * dvp, dvp, p + lo, dosi + lo * dvp, dvp, nq - lo);
                    sdpa_acc_@X@(dk + jj * dp, dp, dpr + lo, qsi + lo * dp, dp, nq - lo);
                }
            }
            /* dq of the tile's query rows: ds turned query-major, keys in order */
            const int64_t nkr = (nkv + R_@X@ - 1) / R_@X@ * R_@X@;
            for (int64_t j = 0; j < nkr; j++)
                for (int64_t i = 0; i < BK; i++) dsq[i * BK + j] = dsk[j * BK + i];
            for (int64_t i = 0; i < nq; i += R_@X@) {
                const int64_t nb = sdpa_seen(nkv, j0, i0 + i + R_@X@ - 1, causal);
                if (nb > 0) sdpa_acc_@X@(dq + (i0 + i) * dp, dp, dsq + i * BK, ks, dp, nb);
            }
        }
        for (int64_t j = 0; j < nkv; j++) {
            for (int64_t c = 0; c < d; c++)
                DK[sdpa_row(b, j0 + j, tk, hs) * d + c] = @ST@(dk[j * dp + c] * scale);
            for (int64_t c = 0; c < dv; c++)
                DV[sdpa_row(b, j0 + j, tk, hs) * dv + c] = @ST@(dvv[j * dvp + c]);
        }
        }
        for (int64_t i = 0; i < tq; i++)
            for (int64_t c = 0; c < d; c++)
                DQ[sdpa_row(b, i, tq, hs) * d + c] = @ST@(dq[i * dp + c] * scale);
    }
    free(ks);
    }
}
"""

COMPUTE = {  # suffix: (type, same-width int, rows per register block, exp, log)
    "f": ("float", "int32_t", "4", "sdpa_exp_f", "logf"),
    "d": ("double", "int64_t", "2", "sdpa_exp_d", "log"),
}

TILE_VECTORS = {"f": 4, "d": 8}  # NV: 64-byte vectors in a 64-wide tile row

STORAGE = {  # dtype: (name, C type, compute suffix, load, store)
    dtypes.float32: ("float32", "float", "f", "", ""),
    dtypes.float64: ("float64", "double", "d", "", ""),
    dtypes.float16: ("float16", "_Float16", "f", "(float)", "(_Float16)"),
    dtypes.bfloat16: ("bfloat16", "uint16_t", "f", "sdpa_bf2f", "sdpa_f2bf"),
}


def _fill(text: str, subs: dict[str, str]) -> str:
    for k, v in subs.items():
        text = text.replace(f"@{k}@", v)
    return text


def _cases(x: str, nv: int) -> str:
    """The switch arms of ``sdpa_dots``: one inlined copy per vector count, so each keeps
    its accumulators in registers."""
    return "\n".join(
        f"    case {n}: sdpa_dots_w_{x}(s, rows, ld, cols, lc, d, scale, {n}); break;"
        for n in range(1, nv + 1)
    )


def source(storage=None) -> str:
    """The whole translation unit: helpers, tile ops per compute type, kernels per dtype
    (every dtype, or those in ``storage``, the source an exported model needs)."""
    kinds = [STORAGE[d] for d in (storage or STORAGE)]
    parts = [HELPERS]
    for x, (a, i, r, exp, _) in COMPUTE.items():
        if all(k[2] != x for k in kinds):
            continue
        nv = TILE_VECTORS[x]
        subs = {"A": a, "I": i, "X": x, "R": r, "EXP": exp, "CASES": _cases(x, nv)}
        parts.append(_fill(TILE_OPS, subs))
    for name, t, x, ld, st in kinds:
        a, _, _, exp, log = COMPUTE[x]
        subs = {"N": name, "T": t, "A": a, "X": x, "EXP": exp, "LOG": log, "LD": ld, "ST": st}
        parts.append(_fill(KERNELS, subs))
    return "\n".join(parts)


def _ptr(a: np.ndarray | None):
    return None if a is None else ctypes.c_void_p(a.ctypes.data)


class SdpaKernels:
    """The three kernels bound to one c device (its toolchain and thread count)."""

    def __init__(self, device):
        self.device = device
        self._lib = None

    def lib(self) -> ctypes.CDLL:
        if self._lib is None:
            self._lib = self.device.toolchain.library(source())
        return self._lib

    def _fn(self, kind: str, dtype: np.dtype):
        d = dtypes.as_dtype(dtype)
        if d not in STORAGE:
            raise TypeError(
                f"sdpa: the c device's kernels take {', '.join(map(str, STORAGE))}, got {d}"
            )
        return getattr(self.lib(), f"limn_sdpa_{kind}_{STORAGE[d][0]}")

    @staticmethod
    def _dims(q, k, v, scale, causal, heads):
        """bh, t_q, t_k, d, dv, heads, scale, causal: (..., t, d) sources (``heads`` 0), or
        (B, t, heads * d) ones"""
        if heads:
            bh, hs = q.shape[0] * heads, heads
            (tq, d), (tk, dv) = (q.shape[1], q.shape[2] // heads), (v.shape[1], v.shape[2] // heads)
        else:
            bh, hs = math.prod(q.shape[:-2]), 1
            (tq, d), (tk, dv) = q.shape[-2:], v.shape[-2:]
        ints = [ctypes.c_int64(n) for n in (bh, tq, tk, d, dv, hs)]
        return [*ints, ctypes.c_double(scale), ctypes.c_int(int(causal))]

    def _threads(self):
        return ctypes.c_int(max(1, int(self.device.threads)))

    def _empty(self, shape, dtype) -> np.ndarray:
        """A result array from the device's buffer pool: a plan that adopts it as a buffer
        gives it back there when it dies, and the next step's call gets it again."""
        return self.device.pool.empty(tuple(shape), np.dtype(dtype))

    def sdpa(self, vals, params):
        q, k, v = (np.ascontiguousarray(a) for a in vals[:3])
        mask = np.ascontiguousarray(vals[3]) if len(vals) > 3 else None
        acc = np.float64 if q.dtype == np.float64 else np.float32
        heads = params[2]
        o = self._empty(q.shape[:-1] + v.shape[-1:], q.dtype)
        lse = self._empty(q.shape[:-1] + ((heads,) if heads else ()), acc)
        fn = self._fn("fwd", q.dtype)
        fn(*map(_ptr, (q, k, v, mask, o, lse)), *self._dims(q, k, v, *params), self._threads())
        return o, lse

    def _bwd_args(self, vals):
        q, k, v, do = (np.ascontiguousarray(a) for a in vals[:4])
        acc = np.float64 if q.dtype == np.float64 else np.float32
        lse, delta = (np.ascontiguousarray(a, acc) for a in vals[4:6])
        mask = np.ascontiguousarray(vals[6]) if len(vals) > 6 else None
        return q, k, v, do, lse, delta, mask

    def sdpa_bwd_q(self, vals, params):
        q, k, v, do, lse, delta, mask = self._bwd_args(vals)
        dq = self._empty(q.shape, q.dtype)
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dq))
        self._fn("bwd_q", q.dtype)(*ptrs, *self._dims(q, k, v, *params), self._threads())
        return (dq,)

    def sdpa_bwd_kv(self, vals, params):
        q, k, v, do, lse, delta, mask = self._bwd_args(vals)
        dk, dv = self._empty(k.shape, k.dtype), self._empty(v.shape, v.dtype)
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dk, dv))
        self._fn("bwd_kv", q.dtype)(*ptrs, *self._dims(q, k, v, *params), self._threads())
        return dk, dv

    def sdpa_bwd(self, vals, params, joint: bool | None = None):
        """dq, dk, dv of one step: the same bits as sdpa_bwd_q and sdpa_bwd_kv. With
        ``joint`` (the default where there are at least two heads per thread) one pass
        over each head computes the probabilities once for all three; else the two
        kernels run."""
        q, k, v, do, lse, delta, mask = self._bwd_args(vals)
        dims = self._dims(q, k, v, *params)
        if joint is None:
            joint = dims[0].value >= 2 * self._threads().value
        if not joint:
            return self.sdpa_bwd_q(vals, params) + self.sdpa_bwd_kv(vals, params)
        dq, dk, dv = (self._empty(a.shape, a.dtype) for a in (q, k, v))
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dq, dk, dv))
        self._fn("bwd", q.dtype)(*ptrs, *dims, self._threads())
        return dq, dk, dv


class _Joint:
    """A kernel whose outputs come from a call shared with a sibling kernel: ``joint`` is
    (the shared call's name, its function, where this kernel's outputs start among its
    results). The c device makes the shared call once per run for the siblings that read
    the same sources with the same params."""

    def __init__(self, alone, name: str, fn, start: int):
        self.alone, self.joint = alone, (name, fn, start)

    def __call__(self, vals, params):
        return self.alone(vals, params)


def register(device) -> None:
    """Give ``device`` (a CDevice) the three fused attention kernels; the two gradient
    kernels share one call (``SdpaKernels.sdpa_bwd``) when a plan holds both."""
    ks = SdpaKernels(device)
    device.register_kernel("sdpa", ks.sdpa)
    device.register_kernel("sdpa_bwd_q", _Joint(ks.sdpa_bwd_q, "sdpa_bwd", ks.sdpa_bwd, 0))
    device.register_kernel("sdpa_bwd_kv", _Joint(ks.sdpa_bwd_kv, "sdpa_bwd", ks.sdpa_bwd, 1))
