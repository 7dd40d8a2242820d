/* Fused attention on the c device: the CUSTOM kernels sdpa (the forward) and sdpa_bwd_q,
   sdpa_bwd_kv (the backward), C twins of limn/sdpa.py's numpy reference. ir/c/sdpa.py
   says how they work, how they round and where they put inf and nan. */

typedef SDPA_T T; /* the storage type */
#if SDPA_WIDE
typedef double A; /* the compute type */
typedef int64_t AI;
#define SDPA_ROWS 2 /* rows per register block */
#define FMA fma
#define LOG log
#define EXP exp
#else
typedef float A;
typedef int32_t AI;
#define SDPA_ROWS (LIMN_FMA_BYTES >= 64 ? 4 : 2) /* 4 x 4 zmm, or 2 x 8 ymm accumulators */
#define FMA fmaf
#define LOG logf
#define EXP limn_expf /* ir/c/render.py's prelude: about 1 ulp, 0 below exp(-104) */
#endif
#ifndef R /* each row's sums run in their own order: R changes speed, never a bit */
#define R SDPA_ROWS
#endif
#define NAME(f) SDPA_CAT(f, SDPA_NAME)
#define SDPA_CAT(f, n) SDPA_CAT2(f, n)
#define SDPA_CAT2(f, n) f##_##n
#define LD(x) SDPA_LD(x)
#define ST(x) SDPA_ST(x)
#define BK 64 /* rows of a tile: queries of a forward task, keys or queries of an inner tile */
#define VBYTES 64 /* logical: the lane-wise sums fold alike on every target (ir/c/target.py) */
typedef A vec __attribute__((vector_size(VBYTES)));
typedef AI ivec __attribute__((vector_size(VBYTES)));
#define VL (8 << !SDPA_WIDE) /* lanes */
#define NV (BK / VL)         /* vectors in a tile's row */

/* a*b+c rounded once in every lane: the vector helpers of ir/c/render.py, as the target's
   fused instructions in as many physical vectors as it takes */
static inline __attribute__((always_inline)) vec vfma(vec a, vec b, vec c) {
    return SDPA_VFMA(c, a, b);
}

static inline __attribute__((always_inline)) vec splat(A a) { return a - (vec){0}; }

/* where row i of head-batch bh sits among a tensor's rows: (bh, t) rows in order, or with
   hs > 1 heads packed side by side in each row of a (B, t, hs * width) tensor, row
   (b, i, h) of its (B, t, hs) rows; consecutive i are hs rows apart */
static inline int64_t sdpa_row(int64_t bh, int64_t i, int64_t t, int64_t hs) {
    return ((bh / hs) * t + i) * hs + bh % hs;
}

/* whether key j takes no part in query i's row: later than i under a causal mask, masked
   out, or in a row that sees no key at all (L = -inf; the forward passes 0) */
static inline int sdpa_hidden(int64_t i, int64_t j, int causal, const uint8_t *mk, A L) {
    return (causal && j > i) || (mk && !mk[j]) || L == -INFINITY;
}

/* ok[j] for the keys j0 + j of a tile of nk, seen from query row ``row``; returns whether
   any is. Bitwise, so it vectorizes, and the mask is read only below nk. */
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

/* of a tile of nk keys from j0, how many a query row ``row`` can see at most */
static inline int64_t sdpa_seen(int64_t nk, int64_t j0, int64_t row, int causal) {
    if (!causal) return nk;
    const int64_t n = row - j0 + 1;
    return n < 0 ? 0 : n < nk ? n : nk;
}

static inline int sdpa_vecs(int64_t n) { return (int)((n + VL - 1) / VL); }

static inline int64_t sdpa_pad(int64_t n) { /* n rounded up to two vectors */
    return (n + 2 * VL - 1) / (2 * VL) * (2 * VL);
}

static void *sdpa_alloc(size_t bytes, int zero) { /* 64-byte aligned */
    bytes = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p && zero) memset(p, 0, bytes);
    return p;
}

/* s[r][j] = scale * dot(rows[r], cols[:, j]) for R rows (row stride ld) against the nv
   vectors of a tile stored column-major, cols[c*lc + j]: R x nv accumulators held in
   registers, the sum over c in order. nv is a constant wherever this is inlined. */
static inline __attribute__((always_inline)) void sdpa_dots_w(
    A *restrict s, const A *restrict rows, int64_t ld, const A *restrict cols, int64_t lc,
    int64_t d, A scale, const int nv) {
    vec acc[R][NV];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < nv; u++) acc[r][u] = (vec){0};
    for (int64_t c = 0; c < d; c++) {
        vec k[NV];
        for (int u = 0; u < nv; u++) k[u] = *(const vec *)(cols + c * lc + u * VL);
        for (int r = 0; r < R; r++) {
            const vec a = splat(rows[r * ld + c]);
            for (int u = 0; u < nv; u++) acc[r][u] = vfma(a, k[u], acc[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < nv; u++) *(vec *)(s + r * BK + u * VL) = acc[r][u] * scale;
}

/* the same for the tile's vectors u0 <= u < u1 only (the other columns of s keep what
   they held), one inlined copy per vector count so each keeps its accumulators in
   registers. Each value is the same sum in the same order as over the whole tile. */
static inline void sdpa_dots(A *restrict s, const A *restrict rows, int64_t ld,
                             const A *restrict cols, int64_t lc, int64_t d, A scale, int u0,
                             int u1) {
    s += u0 * VL, cols += u0 * VL;
    switch (u1 - u0) {
    case 1: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 1); break;
    case 2: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 2); break;
    case 3: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 3); break;
    case 4: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 4); break;
#if NV > 4
    case 5: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 5); break;
    case 6: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 6); break;
    case 7: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 7); break;
    case 8: sdpa_dots_w(s, rows, ld, cols, lc, d, scale, 8); break;
#endif
    default: break;
    }
}

/* out[r][:] += sum_j w[r][j] * x[j][:] for R rows: out rows of stride ldo, x rows of
   stride ldx (both multiples of two vectors, padding zero), the sum over j in order */
static inline void sdpa_acc(A *restrict out, int64_t ldo, const A *restrict w,
                            const A *restrict x, int64_t ldx, int64_t n) {
    for (int64_t c0 = 0; c0 < ldx; c0 += 2 * VL) {
        vec a[R][2];
        for (int r = 0; r < R; r++) {
            a[r][0] = *(vec *)(out + r * ldo + c0);
            a[r][1] = *(vec *)(out + r * ldo + c0 + VL);
        }
        for (int64_t j = 0; j < n; j++) {
            const vec x0 = *(const vec *)(x + j * ldx + c0);
            const vec x1 = *(const vec *)(x + j * ldx + c0 + VL);
            for (int r = 0; r < R; r++) {
                const vec wr = splat(w[r * BK + j]);
                a[r][0] = vfma(wr, x0, a[r][0]);
                a[r][1] = vfma(wr, x1, a[r][1]);
            }
        }
        for (int r = 0; r < R; r++) {
            *(vec *)(out + r * ldo + c0) = a[r][0];
            *(vec *)(out + r * ldo + c0 + VL) = a[r][1];
        }
    }
}

/* the max over a tile row (-inf if empty; a nan is skipped here and reaches the answer
   through the exp), lane-wise then across lanes, in that fixed order */
static inline A sdpa_max(const A *restrict s) {
    vec m = *(const vec *)s;
    for (int u = 1; u < NV; u++) {
        const vec b = *(const vec *)(s + u * VL);
        const ivec gt = b > m;
        m = (vec)(((ivec)b & gt) | ((ivec)m & ~gt));
    }
    A t = m[0];
    for (int l = 1; l < VL; l++) t = m[l] > t ? m[l] : t;
    return t;
}

/* the same over the keys where ok (a copy with -inf elsewhere) */
static inline A sdpa_max_ok(const A *restrict s, const uint8_t *restrict ok) {
    A x[BK] __attribute__((aligned(VBYTES)));
    for (int j = 0; j < BK; j++) x[j] = ok[j] ? s[j] : -INFINITY;
    return sdpa_max(x);
}

static inline A sdpa_sum(const A *restrict p) {
    vec t = *(const vec *)p;
    for (int u = 1; u < NV; u++) t = t + *(const vec *)(p + u * VL);
    A total = t[0];
    for (int l = 1; l < VL; l++) total += t[l];
    return total;
}

/* p[j] = exp(s[j] - sub) (sub: one value, or one per column, subs[j]), 0 where ok[j] is
   not set unless every column is visible (full) */
static inline void sdpa_exp_row(A *restrict p, const A *restrict s, A sub,
                                const uint8_t *restrict ok, int full) {
    for (int j = 0; j < BK; j++) {
        const A e = EXP(s[j] - sub);
        p[j] = full || ok[j] ? e : 0;
    }
}

static inline void sdpa_exp_cols(A *restrict p, const A *restrict s, const A *restrict subs,
                                 const uint8_t *restrict ok, int full) {
    for (int j = 0; j < BK; j++) {
        const A e = EXP(s[j] - subs[j]);
        p[j] = full || ok[j] ? e : 0;
    }
}

/* rows [0, n) of src (row stride ls, cols wide) into dst, column-major (column stride lc,
   rows [n, all) zero) when tr, else by rows (row stride lc, rows [n, all) and columns
   [cols, lc) zero). Row by row either way: each source row is read once, in order, while
   the scattered writes of a transposed tile stay in L1. Not inlined: gcc vectorized a copy
   at each of its calls, a third of the backward unit's compile time. */
static __attribute__((noinline)) void NAME(sdpa_load)(A *dst, int64_t lc, int tr, const T *src, int64_t n, int64_t all,
                            int64_t cols, int64_t ls) {
    if (tr) {
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < cols; c++) dst[c * lc + j] = LD(src[j * ls + c]);
        for (int64_t c = 0; c < cols; c++)
            for (int64_t j = n; j < all; j++) dst[c * lc + j] = 0;
        return;
    }
    for (int64_t i = 0; i < all; i++)
        for (int64_t c = 0; c < lc; c++)
            dst[i * lc + c] = i < n && c < cols ? LD(src[i * ls + c]) : 0;
}

/* whether the t rows of head b of X (each w wide) hold an inf or a nan */
static __attribute__((noinline)) int NAME(sdpa_nonfinite)(const T *X, int64_t b, int64_t t, int64_t w, int64_t hs) {
    int bad = 0;
    for (int64_t i = 0; i < t; i++) {
        const T *x = X + sdpa_row(b, i, t, hs) * w;
        for (int64_t c = 0; c < w; c++) {
            const A y = LD(x[c]);
            bad |= y - y != 0;
        }
    }
    return bad;
}

#if SDPA_BACKWARD == 0 /* ==== the forward ==== */

/* where V holds an inf or nan: a hidden key's value times its 0 probability is nan in
   every row the key is hidden from (the query rows [i0, i0 + nq) of head b) */
static void NAME(sdpa_hide_fwd)(const T *V, const uint8_t *mk, T *O, int64_t b, int64_t i0,
                                int64_t nq, int64_t tq, int64_t tk, int64_t dv, int64_t hs,
                                int causal) {
    for (int64_t j = 0; j < tk; j++)
        for (int64_t c = 0; c < dv; c++) {
            if (isfinite(LD(V[sdpa_row(b, j, tk, hs) * dv + c]))) continue;
            for (int64_t i = i0; i < i0 + nq; i++)
                if (sdpa_hidden(i, j, causal, mk, 0)) O[sdpa_row(b, i, tq, hs) * dv + c] = ST(NAN);
        }
}

void NAME(limn_sdpa_fwd)(const T *Q, const T *K, const T *V, const uint8_t *M, T *O, A *LSE,
                         int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                         int64_t hs, double scale_, int causal, int threads) {
    const A scale = (A)scale_;
    const int64_t tiles = (tq + BK - 1) / BK, dvp = sdpa_pad(dv);
    const int64_t qb = tq < BK ? (tq + R - 1) / R * R : BK; /* a task's query rows: few decoding */
    const int64_t kr = (tk + BK - 1) / BK * BK; /* a head's key rows, padded */
    const int64_t lk = hs * d, lv = hs * dv;    /* row strides */
    /* every head's K transposed (column stride kr) and V by rows, loaded once for all the
       query tiles that read them: the size of K and V again; and whether its V holds an
       inf or nan */
    A *KT = sdpa_alloc(sizeof(A) * bh * kr * (d + dvp), 0), *VS = KT + bh * kr * d;
    uint8_t *vbad = sdpa_alloc(bh, 0);
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int64_t b = 0; b < bh; b++) {
            NAME(sdpa_load)(KT + b * kr * d, kr, 1, K + sdpa_row(b, 0, tk, hs) * d, tk, kr, d, lk);
            NAME(sdpa_load)(VS + b * kr * dvp, dvp, 0, V + sdpa_row(b, 0, tk, hs) * dv, tk, kr, dv, lv);
            vbad[b] = NAME(sdpa_nonfinite)(V, b, tk, dv, hs);
        }
        A *qs = sdpa_alloc(sizeof(A) * (sdpa_pad(qb * d) + qb * dvp + 2 * R * BK), 1); /* per thread */
        A *acc = qs + sdpa_pad(qb * d), *s = acc + qb * dvp, *p = s + R * BK; /* aligned vectors */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < bh * tiles; task++) {
            /* a head's last query tiles first: under a causal mask they see the most keys,
               so the lightest tasks come last and the threads finish together */
            const int64_t b = task / tiles, i0 = (tiles - 1 - task % tiles) * BK;
            const int64_t nq = tq - i0 < BK ? tq - i0 : BK;
            const uint8_t *mk = M ? M + b * tk : NULL;
            memset(acc, 0, sizeof(A) * qb * dvp);
            A m[BK], l[BK];
            uint8_t ok[R][BK];
            NAME(sdpa_load)(qs, d, 0, Q + sdpa_row(b, i0, tq, hs) * d, nq, qb, d, lk);
            for (int64_t i = 0; i < BK; i++) m[i] = -INFINITY, l[i] = 0;
            const int64_t kend = causal && i0 + nq < tk ? i0 + nq : tk;
            for (int64_t j0 = 0; j0 < kend; j0 += BK) {
                const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
                /* the tile's keys (columns past nk are other keys or zeros: never seen) */
                const A *kt = KT + b * kr * d + j0, *vs = VS + (b * kr + j0) * dvp;
                /* every key of the tile visible to every row of the task: no mask to build */
                const int full = nk == BK && !mk && (!causal || j0 + BK - 1 <= i0);
                for (int64_t i = 0; i < nq; i += R) {
                    /* the keys the block's last row can see (causal): the rest are hidden
                       from every row of the block */
                    const int64_t nb = sdpa_seen(nk, j0, i0 + i + R - 1, causal);
                    sdpa_dots(s, qs + i * d, d, kt, kr, d, scale, 0, sdpa_vecs(nb));
                    for (int r = 0; r < R; r++) {
                        const int64_t row = i0 + i + r;
                        const int any = full || sdpa_ok(ok[r], j0, nk, row, causal, mk);
                        A *pr = p + r * BK;
                        if (!any || i + r >= nq) { /* nothing visible in this tile */
                            for (int j = 0; j < BK; j++) pr[j] = 0;
                            continue;
                        }
                        const A mx = full ? sdpa_max(s + r * BK) : sdpa_max_ok(s + r * BK, ok[r]);
                        const A mi = m[i + r], mnew = mx > mi ? mx : mi;
                        const A alpha = mi == -INFINITY ? 0 : EXP(mi - mnew);
                        const A sub = mnew == -INFINITY ? 0 : mnew;
                        sdpa_exp_row(pr, s + r * BK, sub, ok[r], full);
                        l[i + r] = FMA(l[i + r], alpha, sdpa_sum(pr));
                        A *a = acc + (i + r) * dvp;
                        for (int64_t c = 0; c < dvp; c++) a[c] *= alpha;
                        m[i + r] = mnew;
                    }
                    sdpa_acc(acc + i * dvp, dvp, p, vs, dvp, nb);
                }
            }
            for (int64_t i = 0; i < nq; i++) {
                const int64_t row = sdpa_row(b, i0 + i, tq, hs);
                const int seen = l[i] != 0; /* a row that sees some key, or a nan row */
                for (int64_t c = 0; c < dv; c++)
                    O[row * dv + c] = ST(acc[i * dvp + c] / (seen ? l[i] : 1));
                LSE[row] = seen ? m[i] + LOG(l[i]) : -INFINITY;
            }
            if (vbad[b]) NAME(sdpa_hide_fwd)(V, mk, O, b, i0, nq, tq, tk, dv, hs, causal);
        }
        free(qs);
    }
    free(KT);
    free(vbad);
}

#else /* ==== the backward ==== */

/* R key rows (keys key0.., n of them left in the tile) against a tile's BK query columns:
   the probabilities p and the score gradients ds = p * (dp - D), in dpr on entry; a
   hidden key's rows are zero (it takes no gradient) */
static inline void sdpa_probs(A *p, A *dpr, const A *s, const A *L, const A *D, uint8_t *ok,
                              int64_t key0, int64_t n, const uint8_t *mk, int causal,
                              int64_t i0, int full) {
    for (int r = 0; r < R; r++) {
        const int64_t key = key0 + r;
        A *pr = p + r * BK, *dr = dpr + r * BK;
        if (r >= n || (mk && !mk[key])) {
            for (int i = 0; i < BK; i++) pr[i] = dr[i] = 0;
            continue;
        }
        const int64_t first = causal ? key - i0 : 0; /* the first query to see it */
        if (!full)
            for (int64_t i = 0; i < BK; i++) ok[i] = (i >= first) & (L[i] != -INFINITY);
        sdpa_exp_cols(pr, s + r * BK, L, ok, full);
        for (int i = 0; i < BK; i++) dr[i] = pr[i] * (dr[i] - D[i]);
    }
}

/* where the inputs hold an inf or nan: a hidden pair's score gradient, 0 * (dp - delta),
   is nan where dp or delta is not finite, and 0 times a non-finite factor is nan; the
   rows of dq (query rows [ia, ib), mode 1) and dk, dv (keys [ja, jb), mode 2) that the
   reference has nan in from such a pair */
static void NAME(sdpa_hide_bwd)(const T *Q, const T *K, const T *V, const T *DO, const A *LSE,
                                const A *DELTA, const uint8_t *mk, T *DQ, T *DK, T *DV,
                                int64_t b, int64_t ia, int64_t ib, int64_t ja, int64_t jb,
                                int mode, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                                int64_t hs, int causal) {
    for (int64_t i = mode & 2 ? 0 : ia; i < (mode & 2 ? tq : ib); i++) {
        const int64_t qr = sdpa_row(b, i, tq, hs);
        int rowbad = !isfinite(DELTA[qr]);
        for (int64_t c = 0; c < dv; c++) rowbad |= !isfinite(LD(DO[qr * dv + c]));
        for (int64_t j = mode & 1 ? 0 : ja; j < (mode & 1 ? tk : jb); j++) {
            if (!sdpa_hidden(i, j, causal, mk, LSE[qr])) continue;
            const int64_t kr = sdpa_row(b, j, tk, hs);
            int bad = rowbad; /* whether dp - delta is */
            for (int64_t c = 0; c < dv; c++) bad |= !isfinite(LD(V[kr * dv + c]));
            if ((mode & 1) && ia <= i && i < ib)
                for (int64_t c = 0; c < d; c++)
                    if (bad || !isfinite(LD(K[kr * d + c]))) DQ[qr * d + c] = ST(NAN);
            if (!(mode & 2) || j < ja || j >= jb) continue;
            for (int64_t c = 0; c < d; c++)
                if (bad || !isfinite(LD(Q[qr * d + c]))) DK[kr * d + c] = ST(NAN);
            for (int64_t c = 0; c < dv; c++)
                if (!isfinite(LD(DO[qr * dv + c]))) DV[kr * dv + c] = ST(NAN);
        }
    }
}

/* The gradients. A task owns rows: in mode 1 one query tile of a head (its dq), in mode 2
   one key tile (its dk and dv), in mode 3 a whole head (all three). Key tiles in order,
   and for each the query tiles of the task that see it; a block of key rows against a
   query tile gives the probabilities and ds key-major, which go into dk and dv (mode 2),
   and turned query-major into dq, key by key in order (mode 1). Every value is the same
   sum in the same order in every mode, so the modes give the same bits; mode 3 computes
   the probabilities once instead of twice. A task loads the queries it covers once, row-
   major and transposed: with its dq, five t_q x d buffers per thread are the largest. */
void NAME(limn_sdpa_bwd)(const T *Q, const T *K, const T *V, const T *DO, const A *LSE,
                         const A *DELTA, const uint8_t *M, T *DQ, T *DK, T *DV, int64_t bh,
                         int64_t tq, int64_t tk, int64_t d, int64_t dv, int64_t hs,
                         double scale_, int causal, int mode, int threads) {
    const A scale = (A)scale_;
    const int64_t dp = sdpa_pad(d), dvp = sdpa_pad(dv);
    const int64_t qtiles = (tq + BK - 1) / BK, ktiles = (tk + BK - 1) / BK, qr = qtiles * BK;
    const int64_t per = mode == 1 ? qtiles : mode == 2 ? ktiles : 1; /* tasks per head */
    const int64_t lk = hs * d, lv = hs * dv;                         /* row strides */
#pragma omp parallel num_threads(threads)
    {
        A *ks = sdpa_alloc(sizeof(A) * (BK * (dp + dv + dp + dvp) + 2 * R * BK + 2 * BK * BK +
                                        qr * (d + dp + dv + dvp + dp + 2)), 1);
        A *vs = ks + BK * dp, *dk = vs + BK * dv, *dvv = dk + BK * dp;
        A *s = dvv + BK * dvp, *p = s + R * BK, *dsk = p + R * BK, *dsq = dsk + BK * BK;
        A *qt = dsq + BK * BK, *qs = qt + d * qr, *dot = qs + qr * dp, *dos = dot + dv * qr;
        A *dq = dos + qr * dvp, *Lh = dq + qr * dp, *Dh = Lh + qr;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < bh * per; task++) {
            const int64_t b = task / per, t = task % per;
            /* the query rows [ia, ib) and keys [ja, jb) the task covers */
            const int64_t ia = mode == 1 ? t * BK : 0, ib = mode == 1 && ia + BK < tq ? ia + BK : tq;
            const int64_t ja = mode == 2 ? t * BK : 0, jb = mode == 2 && ja + BK < tk ? ja + BK : tk;
            const int64_t ie = (ib + BK - 1) / BK * BK; /* the rows loaded, padded */
            const T *q = Q + sdpa_row(b, ia, tq, hs) * d, *dO = DO + sdpa_row(b, ia, tq, hs) * dv;
            const uint8_t *mk = M ? M + b * tk : NULL;
            memset(dq + ia * dp, 0, sizeof(A) * (ie - ia) * dp);
            NAME(sdpa_load)(qt + ia, qr, 1, q, ib - ia, ie - ia, d, lk);
            NAME(sdpa_load)(qs + ia * dp, dp, 0, q, ib - ia, ie - ia, d, lk);
            NAME(sdpa_load)(dot + ia, qr, 1, dO, ib - ia, ie - ia, dv, lv);
            NAME(sdpa_load)(dos + ia * dvp, dvp, 0, dO, ib - ia, ie - ia, dv, lv);
            int bad = 0; /* whether the head's inputs hold an inf or nan */
            for (int64_t i = ia; i < ie; i++) {
                const int64_t row = sdpa_row(b, i, tq, hs);
                Lh[i] = i < ib ? LSE[row] : -INFINITY;
                Dh[i] = i < ib ? DELTA[row] : 0;
            }
            for (int64_t i = 0; i < tq; i++) bad |= !isfinite(DELTA[sdpa_row(b, i, tq, hs)]);
            bad = bad || NAME(sdpa_nonfinite)(Q, b, tq, d, hs) || NAME(sdpa_nonfinite)(K, b, tk, d, hs) ||
                  NAME(sdpa_nonfinite)(V, b, tk, dv, hs) || NAME(sdpa_nonfinite)(DO, b, tq, dv, hs);
            /* under a causal mask no query of the task sees the keys from ib on */
            const int64_t jend = causal && ib < jb ? ib : jb;
            for (int64_t j0 = ja; j0 < jend; j0 += BK) {
                const int64_t nkv = jb - j0 < BK ? jb - j0 : BK;
                memset(dk, 0, sizeof(A) * BK * (dp + dvp)); /* dk and dvv */
                uint8_t ok[BK];
                NAME(sdpa_load)(ks, dp, 0, K + sdpa_row(b, j0, tk, hs) * d, nkv, BK, d, lk);
                NAME(sdpa_load)(vs, dv, 0, V + sdpa_row(b, j0, tk, hs) * dv, nkv, BK, dv, lv);
                for (int64_t i0 = causal && j0 > ia ? j0 : ia; i0 < ib; i0 += BK) {
                    const int64_t nq = ib - i0 < BK ? ib - i0 : BK;
                    const A *L = Lh + i0, *D = Dh + i0, *qti = qt + i0, *doti = dot + i0;
                    const A *qsi = qs + i0 * dp, *dosi = dos + i0 * dvp;
                    int seen = 0; /* query rows of the tile that see some key */
                    for (int64_t i = 0; i < BK; i++) seen += L[i] != -INFINITY;
                    /* every query of the tile sees every key row of the tile */
                    const int full = seen == BK && (!causal || j0 + nkv - 1 <= i0);
                    const int u1 = sdpa_vecs(nq);
                    for (int64_t jj = 0; jj < nkv; jj += R) {
                        /* the queries of the tile that can see the block's first key (causal)
                           start in vector u0: the ones before it see no key of the block */
                        const int64_t first = causal && j0 + jj > i0 ? j0 + jj - i0 : 0;
                        const int u0 = first < nq ? (int)(first / VL) : u1;
                        const int64_t lo = (int64_t)u0 * VL;
                        A *dpr = dsk + jj * BK; /* the block's rows of the ds tile */
                        sdpa_dots(s, ks + jj * dp, dp, qti, qr, d, scale, u0, u1);
                        sdpa_dots(dpr, vs + jj * dv, dv, doti, qr, dv, 1, u0, u1);
                        sdpa_probs(p, dpr, s, L, D, ok, j0 + jj, nkv - jj, mk, causal, i0, full);
                        for (int r = 0; r < R; r++) /* not computed: hidden */
                            for (int64_t i = 0; i < lo; i++) dpr[r * BK + i] = 0;
                        if (lo < nq && (mode & 2)) {
                            sdpa_acc(dvv + jj * dvp, dvp, p + lo, dosi + lo * dvp, dvp, nq - lo);
                            sdpa_acc(dk + jj * dp, dp, dpr + lo, qsi + lo * dp, dp, nq - lo);
                        }
                    }
                    if (!(mode & 1)) continue;
                    /* dq of the tile's query rows: ds turned query-major, keys in order */
                    const int64_t nkr = (nkv + R - 1) / R * R;
                    for (int64_t j = 0; j < nkr; j++)
                        for (int64_t i = 0; i < BK; i++) dsq[i * BK + j] = dsk[j * BK + i];
                    for (int64_t i = 0; i < nq; i += R) {
                        const int64_t nb = sdpa_seen(nkv, j0, i0 + i + R - 1, causal);
                        if (nb > 0) sdpa_acc(dq + (i0 + i) * dp, dp, dsq + i * BK, ks, dp, nb);
                    }
                }
                for (int64_t j = 0; j < nkv && (mode & 2); j++) {
                    const int64_t row = sdpa_row(b, j0 + j, tk, hs);
                    for (int64_t c = 0; c < d; c++) DK[row * d + c] = ST(dk[j * dp + c] * scale);
                    for (int64_t c = 0; c < dv; c++) DV[row * dv + c] = ST(dvv[j * dvp + c]);
                }
            }
            /* the key tiles no query of the task sees take no gradient */
            for (int64_t j = jend > ja ? ja + (jend - ja + BK - 1) / BK * BK : ja;
                 j < jb && (mode & 2); j++) {
                const int64_t row = sdpa_row(b, j, tk, hs);
                for (int64_t c = 0; c < d; c++) DK[row * d + c] = ST((A)0);
                for (int64_t c = 0; c < dv; c++) DV[row * dv + c] = ST((A)0);
            }
            for (int64_t i = ia; i < ib && (mode & 1); i++)
                for (int64_t c = 0; c < d; c++)
                    DQ[sdpa_row(b, i, tq, hs) * d + c] = ST(dq[i * dp + c] * scale);
            if (bad)
                NAME(sdpa_hide_bwd)(Q, K, V, DO, LSE, DELTA, mk, DQ, DK, DV, b, ia, ib, ja, jb, mode,
                                    tq, tk, d, dv, hs, causal);
        }
        free(ks);
    }
}
#endif
