"""The c device's fused attention kernels: C source shipped here, compiled once, via ctypes.

Three entry points per storage dtype (float32, float64, float16, bfloat16), each the C
twin of a function in ``limn/sdpa.py`` (the reference they are diffed against):

* ``limn_sdpa_fwd``: one task per (batch*head, 32-query tile). K and V stream past the
  tile 64 keys at a time; each query row keeps a running max, denominator and weighted
  sum, and the task writes the answer and one logsumexp per row.
* ``limn_sdpa_bwd_q``: one task per (batch*head, query tile); each row's dq is summed
  over keys by the one thread that owns the row.
* ``limn_sdpa_bwd_kv``: one task per (batch*head, 32-key tile); each key row's dk and dv
  are summed over queries by the one thread that owns it, from the same recomputed
  probabilities.

No task writes another task's rows and every sum runs in one fixed order (lane-wise
partial sums over 16 lanes, then the lanes left to right), so results are the same bits
on every run and at every thread count. The largest buffer is a tile: nothing is
t_q x t_k. Inner loops run over a whole 64-wide tile with fixed trip counts so gcc
vectorizes them; a dot product is an explicit fma chain (the build turns contraction
off). Half widths load into float32 and round once on store; float64 computes in double.
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

#define BQ 32   /* query rows per forward / dq task */
#define BK 64   /* keys (or queries, in the dk/dv pass) per inner tile */
#define BKV 32  /* key rows per dk/dv task */
#define LANES 16

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
"""

# one copy per compute type: @A@ the type, @X@ its suffix, @FMA@ and @EXP@ its functions
TILE_OPS = r"""
/* s[j] = dot(row, cols[:, j]) * scale over a tile stored column-major (cols[c*BK + j]) */
static inline void sdpa_dots_@X@(@A@ *s, const @A@ *row, const @A@ *cols, int64_t d, @A@ scale) {
    for (int j = 0; j < BK; j++) s[j] = 0;
    for (int64_t c = 0; c < d; c++) {
        const @A@ a = row[c];
        const @A@ *col = cols + c * BK;
        for (int j = 0; j < BK; j++) s[j] = @FMA@(a, col[j], s[j]);
    }
    if (scale != 1)
        for (int j = 0; j < BK; j++) s[j] *= scale;
}

static inline @A@ sdpa_max_@X@(const @A@ *s, const uint8_t *ok) {
    @A@ lane[LANES];
    for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
    for (int j = 0; j < BK; j += LANES)
        for (int l = 0; l < LANES; l++) {
            @A@ x = ok[j + l] ? s[j + l] : -INFINITY;
            lane[l] = x > lane[l] || x != x ? x : lane[l];  /* a NaN sticks */
        }
    @A@ m = -INFINITY;
    for (int l = 0; l < LANES; l++) m = lane[l] > m || lane[l] != lane[l] ? lane[l] : m;
    return m;
}

static inline @A@ sdpa_sum_@X@(const @A@ *p) {
    @A@ lane[LANES];
    for (int l = 0; l < LANES; l++) lane[l] = 0;
    for (int j = 0; j < BK; j += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += p[j + l];
    @A@ t = 0;
    for (int l = 0; l < LANES; l++) t += lane[l];
    return t;
}

/* p[j] = exp(s[j] - sub[j]) where ok[j], else 0 (sub is one value or one per column) */
static inline void sdpa_exp_row_@X@(@A@ *p, const @A@ *s, @A@ sub, const uint8_t *ok) {
    for (int j = 0; j < BK; j++) {
        @A@ e = @EXP@(s[j] - sub);
        p[j] = ok[j] ? e : 0;
    }
}

static inline void sdpa_exp_cols_@X@(@A@ *p, const @A@ *s, const @A@ *sub, const uint8_t *ok) {
    for (int j = 0; j < BK; j++) {
        @A@ e = @EXP@(s[j] - sub[j]);
        p[j] = ok[j] ? e : 0;
    }
}

/* acc[0:n] += w * x[0:n] */
static inline void sdpa_axpy_@X@(@A@ *acc, @A@ w, const @A@ *x, int64_t n) {
    for (int64_t c = 0; c < n; c++) acc[c] = @FMA@(w, x[c], acc[c]);
}
"""

# one copy per storage type: @T@ storage, @N@ its name, @LD@/@ST@ the conversions
KERNELS = r"""
/* rows x cols of src (row stride cols) into dst column-major, BK wide, zero past rows */
static void sdpa_load_t_@N@(@A@ *dst, const @T@ *src, int64_t rows, int64_t cols) {
    for (int64_t c = 0; c < cols; c++)
        for (int64_t j = 0; j < BK; j++)
            dst[c * BK + j] = j < rows ? @LD@(src[j * cols + c]) : 0;
}

static void sdpa_load_@N@(@A@ *dst, const @T@ *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = @LD@(src[i]);
}

void limn_sdpa_fwd_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const uint8_t *M, @T@ *O,
                      @A@ *LSE, int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                      double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tq + BQ - 1) / BQ;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < bh * tiles; task++) {
        const int64_t b = task / tiles, i0 = task % tiles * BQ;
        const int64_t nq = tq - i0 < BQ ? tq - i0 : BQ;
        const @T@ *k = K + b * tk * d, *v = V + b * tk * dv;
        const uint8_t *mk = M ? M + b * tk : NULL;
        @A@ *qs = malloc(sizeof(@A@) * (BQ * d + d * BK + BK * dv + BQ * dv));
        @A@ *kt = qs + BQ * d, *vs = kt + d * BK, *acc = vs + BK * dv;
        @A@ m[BQ], l[BQ], s[BK], p[BK];
        uint8_t ok[BK];
        sdpa_load_@N@(qs, Q + (b * tq + i0) * d, nq * d);
        for (int64_t i = 0; i < BQ; i++) m[i] = -INFINITY, l[i] = 0;
        for (int64_t c = 0; c < BQ * dv; c++) acc[c] = 0;
        const int64_t kend = causal && i0 + nq < tk ? i0 + nq : tk;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
            sdpa_load_t_@N@(kt, k + j0 * d, nk, d);
            sdpa_load_@N@(vs, v + j0 * dv, nk * dv);
            for (int64_t i = 0; i < nq; i++) {
                const int64_t row = i0 + i;
                for (int64_t j = 0; j < BK; j++)
                    ok[j] = j < nk && (!causal || j0 + j <= row) && (!mk || mk[j0 + j]);
                sdpa_dots_@X@(s, qs + i * d, kt, d, scale);
                const @A@ mx = sdpa_max_@X@(s, ok);
                const @A@ mnew = mx > m[i] || mx != mx ? mx : m[i];
                if (mnew == -INFINITY) continue;  /* nothing visible yet */
                const @A@ alpha = m[i] == -INFINITY ? 0 : @EXP@(m[i] - mnew);
                sdpa_exp_row_@X@(p, s, mnew, ok);
                l[i] = l[i] * alpha + sdpa_sum_@X@(p);
                @A@ *a = acc + i * dv;
                for (int64_t c = 0; c < dv; c++) a[c] *= alpha;
                for (int64_t j = 0; j < nk; j++) sdpa_axpy_@X@(a, p[j], vs + j * dv, dv);
                m[i] = mnew;
            }
        }
        for (int64_t i = 0; i < nq; i++) {
            const int64_t row = b * tq + i0 + i;
            const @A@ den = l[i] > 0 ? l[i] : 1;
            for (int64_t c = 0; c < dv; c++) O[row * dv + c] = @ST@(acc[i * dv + c] / den);
            LSE[row] = l[i] > 0 ? m[i] + @LOG@(l[i]) : -INFINITY;
        }
        free(qs);
    }
}

void limn_sdpa_bwd_q_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const @T@ *DO,
                        const @A@ *LSE, const @A@ *DELTA, const uint8_t *M, @T@ *DQ,
                        int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                        double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tq + BQ - 1) / BQ;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < bh * tiles; task++) {
        const int64_t b = task / tiles, i0 = task % tiles * BQ;
        const int64_t nq = tq - i0 < BQ ? tq - i0 : BQ;
        const @T@ *k = K + b * tk * d, *v = V + b * tk * dv;
        const @A@ *L = LSE + b * tq + i0, *D = DELTA + b * tq + i0;
        const uint8_t *mk = M ? M + b * tk : NULL;
        @A@ *qs = malloc(sizeof(@A@) * (2 * BQ * d + BQ * dv + 2 * d * BK + dv * BK));
        @A@ *dq = qs + BQ * d, *dos = dq + BQ * d, *kt = dos + BQ * dv, *ks = kt + d * BK;
        @A@ *vt = ks + d * BK;
        @A@ s[BK], p[BK], dp[BK];
        uint8_t ok[BK];
        sdpa_load_@N@(qs, Q + (b * tq + i0) * d, nq * d);
        sdpa_load_@N@(dos, DO + (b * tq + i0) * dv, nq * dv);
        for (int64_t c = 0; c < BQ * d; c++) dq[c] = 0;
        const int64_t kend = causal && i0 + nq < tk ? i0 + nq : tk;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = kend - j0 < BK ? kend - j0 : BK;
            sdpa_load_t_@N@(kt, k + j0 * d, nk, d);
            sdpa_load_@N@(ks, k + j0 * d, nk * d);
            sdpa_load_t_@N@(vt, v + j0 * dv, nk, dv);
            for (int64_t i = 0; i < nq; i++) {
                if (L[i] == -INFINITY) continue;  /* a row that sees no key */
                const int64_t row = i0 + i;
                for (int64_t j = 0; j < BK; j++)
                    ok[j] = j < nk && (!causal || j0 + j <= row) && (!mk || mk[j0 + j]);
                sdpa_dots_@X@(s, qs + i * d, kt, d, scale);
                sdpa_exp_row_@X@(p, s, L[i], ok);
                sdpa_dots_@X@(dp, dos + i * dv, vt, dv, 1);
                for (int64_t j = 0; j < BK; j++) dp[j] = p[j] * (dp[j] - D[i]);
                for (int64_t j = 0; j < nk; j++) sdpa_axpy_@X@(dq + i * d, dp[j], ks + j * d, d);
            }
        }
        for (int64_t c = 0; c < nq * d; c++) DQ[(b * tq + i0) * d + c] = @ST@(dq[c] * scale);
        free(qs);
    }
}

void limn_sdpa_bwd_kv_@N@(const @T@ *Q, const @T@ *K, const @T@ *V, const @T@ *DO,
                         const @A@ *LSE, const @A@ *DELTA, const uint8_t *M, @T@ *DK,
                         @T@ *DV, int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                         double scale_, int causal, int threads) {
    const @A@ scale = (@A@)scale_;
    const int64_t tiles = (tk + BKV - 1) / BKV;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < bh * tiles; task++) {
        const int64_t b = task / tiles, j0 = task % tiles * BKV;
        const int64_t nkv = tk - j0 < BKV ? tk - j0 : BKV;
        const @T@ *q = Q + b * tq * d, *dO = DO + b * tq * dv;
        const @A@ *LS = LSE + b * tq, *DL = DELTA + b * tq;
        const uint8_t *mk = M ? M + b * tk : NULL;
        @A@ *ks = malloc(sizeof(@A@) * (2 * BKV * (d + dv) + 2 * BK * (d + dv)));
        @A@ *vs = ks + BKV * d, *dk = vs + BKV * dv, *dvv = dk + BKV * d;
        @A@ *qt = dvv + BKV * dv, *qs = qt + d * BK, *dot = qs + BK * d, *dos = dot + dv * BK;
        @A@ L[BK], D[BK], s[BK], p[BK], dp[BK];
        uint8_t ok[BK];
        sdpa_load_@N@(ks, K + (b * tk + j0) * d, nkv * d);
        sdpa_load_@N@(vs, V + (b * tk + j0) * dv, nkv * dv);
        for (int64_t c = 0; c < BKV * (d + dv); c++) dk[c] = 0;  /* dk and dvv */
        for (int64_t i0 = causal ? j0 : 0; i0 < tq; i0 += BK) {
            const int64_t nq = tq - i0 < BK ? tq - i0 : BK;
            sdpa_load_t_@N@(qt, q + i0 * d, nq, d);
            sdpa_load_@N@(qs, q + i0 * d, nq * d);
            sdpa_load_t_@N@(dot, dO + i0 * dv, nq, dv);
            sdpa_load_@N@(dos, dO + i0 * dv, nq * dv);
            for (int64_t i = 0; i < BK; i++) {
                L[i] = i < nq ? LS[i0 + i] : -INFINITY;
                D[i] = i < nq ? DL[i0 + i] : 0;
            }
            for (int64_t jj = 0; jj < nkv; jj++) {
                const int64_t key = j0 + jj;
                if (mk && !mk[key]) continue;  /* a hidden key takes no gradient */
                for (int64_t i = 0; i < BK; i++)
                    ok[i] = (!causal || key <= i0 + i) && L[i] != -INFINITY;
                sdpa_dots_@X@(s, ks + jj * d, qt, d, scale);
                sdpa_exp_cols_@X@(p, s, L, ok);
                for (int64_t i = 0; i < nq; i++)
                    sdpa_axpy_@X@(dvv + jj * dv, p[i], dos + i * dv, dv);
                sdpa_dots_@X@(dp, vs + jj * dv, dot, dv, 1);
                for (int64_t i = 0; i < BK; i++) dp[i] = p[i] * (dp[i] - D[i]);
                for (int64_t i = 0; i < nq; i++) sdpa_axpy_@X@(dk + jj * d, dp[i], qs + i * d, d);
            }
        }
        for (int64_t c = 0; c < nkv * d; c++) DK[(b * tk + j0) * d + c] = @ST@(dk[c] * scale);
        for (int64_t c = 0; c < nkv * dv; c++) DV[(b * tk + j0) * dv + c] = @ST@(dvv[c]);
        free(ks);
    }
}
"""

COMPUTE = {  # suffix: (type, fma, exp, log)
    "f": ("float", "fmaf", "sdpa_exp_f", "logf"),
    "d": ("double", "fma", "sdpa_exp_d", "log"),
}
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


def source() -> str:
    """The whole translation unit: helpers, tile ops per compute type, kernels per dtype."""
    parts = [HELPERS]
    for x, (a, fma, exp, _) in COMPUTE.items():
        parts.append(_fill(TILE_OPS, {"A": a, "X": x, "FMA": fma, "EXP": exp}))
    for name, t, x, ld, st in STORAGE.values():
        a, _, exp, log = COMPUTE[x]
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
    def _dims(q, k, v, scale, causal):
        bh = math.prod(q.shape[:-2])
        tq, d = q.shape[-2:]
        tk, dv = v.shape[-2:]
        ints = [ctypes.c_int64(n) for n in (bh, tq, tk, d, dv)]
        return [*ints, ctypes.c_double(scale), ctypes.c_int(int(causal))]

    def _threads(self):
        return ctypes.c_int(max(1, int(self.device.threads)))

    def sdpa(self, vals, params):
        q, k, v = (np.ascontiguousarray(a) for a in vals[:3])
        mask = np.ascontiguousarray(vals[3]) if len(vals) > 3 else None
        acc = np.float64 if q.dtype == np.float64 else np.float32
        o = np.empty(q.shape[:-1] + v.shape[-1:], q.dtype)
        lse = np.empty(q.shape[:-1], acc)
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
        dq = np.empty(q.shape, q.dtype)
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dq))
        self._fn("bwd_q", q.dtype)(*ptrs, *self._dims(q, k, v, *params), self._threads())
        return (dq,)

    def sdpa_bwd_kv(self, vals, params):
        q, k, v, do, lse, delta, mask = self._bwd_args(vals)
        dk, dv = np.empty(k.shape, k.dtype), np.empty(v.shape, v.dtype)
        ptrs = map(_ptr, (q, k, v, do, lse, delta, mask, dk, dv))
        self._fn("bwd_kv", q.dtype)(*ptrs, *self._dims(q, k, v, *params), self._threads())
        return dk, dv


def register(device) -> None:
    """Give ``device`` (a CDevice) the three fused attention kernels."""
    ks = SdpaKernels(device)
    for name in ("sdpa", "sdpa_bwd_q", "sdpa_bwd_kv"):
        device.register_kernel(name, getattr(ks, name))
