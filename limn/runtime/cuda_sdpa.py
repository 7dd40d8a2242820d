"""Fused attention on the cuda device: the CUSTOM kernels sdpa, sdpa_bwd_q and sdpa_bwd_kv.

Each is the CUDA twin of a function of ``limn/sdpa.py`` (the reference they answer to),
written so one warp owns one output row and walks its keys (or queries) in order, each
lane holding every 32nd column of the row:

* ``limn_sdpa_fwd``: a warp per query row streams every visible key past it with a
  running max, denominator and weighted sum (the online softmax), then writes the row of
  o and its logsumexp L;
* ``limn_sdpa_bwd_q``: a warp per query row recomputes p = exp(s - L) key by key and
  folds dq;
* ``limn_sdpa_bwd_kv``: a warp per key row walks the queries that see it and folds dk
  and dv, which share the probabilities it recomputes.

A dot product is the lanes' partial sums folded by a butterfly of shuffles; float adds
commute exactly, so every lane gets the same bits. Nothing accumulates across warps and
nothing lands in an atomic, so two runs give the same bits, and no t_q x t_k buffer
exists: a row lives in its warp's registers. Half widths compute in float32, float64 at
its own width. The source is made per (dtype, d, dv), so the row length is a constant the
compiler unrolls. The params are (scale, causal, heads): ``heads`` 0 for (..., t, d)
sources, H for the packed (B, t, H * d) layout of ``limn/sdpa.py``.
"""

from __future__ import annotations

import ctypes

from ir.cuda.render import PRELUDE, cast, ctype
from ir.graph import dtypes
from ir.graph.dtypes import DType

THREADS = 128

_TEMPLATE = r"""
#define D {d}
#define DV {dv}
#define NQ ((D + 31) / 32)   /* columns of q, k, dq, dk a lane holds */
#define NV ((DV + 31) / 32)  /* columns of v, o, dv a lane holds */
typedef {t} acc_t;
typedef {s} store_t;
static __device__ __forceinline__ acc_t ld(store_t x) {{ return {load}; }}
static __device__ __forceinline__ store_t st(acc_t x) {{ return {store}; }}
/* where row i of head-batch bh sits among a tensor's rows: in order, or with hs > 1 heads
   side by side in each row of a (B, t, hs * width) tensor (the packed layout) */
static __device__ __forceinline__ long long at(long long bh, int i, int t, int hs) {{
  return ((bh / hs) * t + i) * hs + bh % hs;
}}
static __device__ __forceinline__ bool seen(const unsigned char *mask, long long bh,
    int t_k, int i, int j, int causal) {{
  return (!causal || j <= i) && (mask == 0 || mask[bh * t_k + j]);
}}
/* the warp's total of one value per lane: a butterfly of commutative adds, so every lane
   gets the same bits, in the same order on every run */
static __device__ __forceinline__ acc_t warp_sum(acc_t x) {{
  for (int off = 16; off > 0; off >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}}
static __device__ __forceinline__ acc_t dot(const acc_t *mine, const store_t *row, int lane,
    int n, int width) {{
  acc_t s = 0;
  for (int u = 0; u < n; u++) {{
    int c = lane + 32 * u;
    if (c < width) s = s + mine[u] * ld(row[c]);
  }}
  return warp_sum(s);
}}
#define ROWS(count) \
  const int lane = threadIdx.x & 31; \
  for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < (count); \
       row += ((long long)gridDim.x * blockDim.x) >> 5)
#define EACH(u, n, width) for (int u = 0, c = lane; u < (n); u++, c += 32) if (c < (width))

extern "C" __global__ void __launch_bounds__({threads}, 1) limn_sdpa_fwd(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const unsigned char *__restrict__ mask, store_t *__restrict__ o, acc_t *__restrict__ lse,
    long long bh_count, int t_q, int t_k, int hs, acc_t scale, int causal) {{
  ROWS(bh_count * t_q) {{
    const long long bh = row / t_q; const int i = (int)(row % t_q);
    const long long qr = at(bh, i, t_q, hs);
    acc_t qi[NQ], acc[NV];
    EACH(u, NQ, D) qi[u] = ld(q[qr * D + c]);
    for (int u = 0; u < NV; u++) acc[u] = 0;
    acc_t m = -INFINITY, den = 0;
    for (int j = 0; j < t_k; j++) {{
      if (!seen(mask, bh, t_k, i, j, causal)) continue;
      const acc_t s = dot(qi, k + at(bh, j, t_k, hs) * D, lane, NQ, D) * scale;
      const acc_t mn = s > m ? s : m;
      const acc_t corr = exp(m - mn), p = exp(s - mn);
      den = den * corr + p;
      const store_t *vj = v + at(bh, j, t_k, hs) * DV;
      EACH(u, NV, DV) acc[u] = acc[u] * corr + p * ld(vj[c]);
      m = mn;
    }}
    EACH(u, NV, DV) o[qr * DV + c] = st(den > 0 ? acc[u] / den : (acc_t)0);
    if (lane == 0) lse[qr] = den > 0 ? m + log(den) : -INFINITY;
  }}
}}

extern "C" __global__ void __launch_bounds__({threads}, 1) limn_sdpa_bwd_q(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const store_t *__restrict__ dout, const acc_t *__restrict__ lse,
    const acc_t *__restrict__ delta, const unsigned char *__restrict__ mask,
    store_t *__restrict__ dq, long long bh_count, int t_q, int t_k, int hs, acc_t scale,
    int causal) {{
  ROWS(bh_count * t_q) {{
    const long long bh = row / t_q; const int i = (int)(row % t_q);
    const long long qr = at(bh, i, t_q, hs);
    acc_t qi[NQ], doi[NV], g[NQ];
    for (int u = 0; u < NQ; u++) {{ qi[u] = 0; g[u] = 0; }}
    for (int u = 0; u < NV; u++) doi[u] = 0;
    EACH(u, NQ, D) qi[u] = ld(q[qr * D + c]);
    EACH(u, NV, DV) doi[u] = ld(dout[qr * DV + c]);
    const acc_t L = lse[qr], di = delta[qr];
    if (L != -INFINITY) {{
      for (int j = 0; j < t_k; j++) {{
        if (!seen(mask, bh, t_k, i, j, causal)) continue;
        const store_t *kj = k + at(bh, j, t_k, hs) * D;
        const acc_t s = dot(qi, kj, lane, NQ, D);
        const acc_t dp = dot(doi, v + at(bh, j, t_k, hs) * DV, lane, NV, DV);
        const acc_t ds = exp(s * scale - L) * (dp - di);
        EACH(u, NQ, D) g[u] = g[u] + ds * ld(kj[c]);
      }}
    }}
    EACH(u, NQ, D) dq[qr * D + c] = st(g[u] * scale);
  }}
}}

extern "C" __global__ void __launch_bounds__({threads}, 1) limn_sdpa_bwd_kv(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const store_t *__restrict__ dout, const acc_t *__restrict__ lse,
    const acc_t *__restrict__ delta, const unsigned char *__restrict__ mask,
    store_t *__restrict__ dk, store_t *__restrict__ dv, long long bh_count, int t_q, int t_k,
    int hs, acc_t scale, int causal) {{
  ROWS(bh_count * t_k) {{
    const long long bh = row / t_k; const int j = (int)(row % t_k);
    const long long kr = at(bh, j, t_k, hs);
    acc_t kj[NQ], vj[NV], gk[NQ], gv[NV];
    for (int u = 0; u < NQ; u++) {{ kj[u] = 0; gk[u] = 0; }}
    for (int u = 0; u < NV; u++) {{ vj[u] = 0; gv[u] = 0; }}
    EACH(u, NQ, D) kj[u] = ld(k[kr * D + c]);
    EACH(u, NV, DV) vj[u] = ld(v[kr * DV + c]);
    for (int i = 0; i < t_q; i++) {{
      const long long qr = at(bh, i, t_q, hs);
      const acc_t L = lse[qr];
      if (L == -INFINITY || !seen(mask, bh, t_k, i, j, causal)) continue;
      const store_t *qi = q + qr * D, *doi = dout + qr * DV;
      const acc_t p = exp(dot(kj, qi, lane, NQ, D) * scale - L);
      const acc_t dp = dot(vj, doi, lane, NV, DV);
      EACH(u, NV, DV) gv[u] = gv[u] + p * ld(doi[c]);
      const acc_t ds = p * (dp - delta[qr]);
      EACH(u, NQ, D) gk[u] = gk[u] + ds * ld(qi[c]);
    }}
    EACH(u, NQ, D) dk[kr * D + c] = st(gk[u] * scale);
    EACH(u, NV, DV) dv[kr * DV + c] = st(gv[u]);
  }}
}}
"""


def acc_dtype(d: DType) -> DType:
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def source(dtype: DType, d: int, dv: int) -> str:
    """The three kernels for one storage dtype and head widths, as one NVRTC program."""
    acc = acc_dtype(dtype)
    return PRELUDE + _TEMPLATE.format(
        d=d,
        dv=dv,
        t=ctype(acc),
        s=ctype(dtype),
        load=cast("x", dtype, acc),
        store=cast("x", acc, dtype),
        threads=THREADS,
    )


__all__ = ["THREADS", "acc_dtype", "source"]


class FusedAttention:
    """The three kernels as CUSTOM kernels of a CudaDevice: compiled per (dtype, d, dv)."""

    outputs = {"sdpa": 2, "sdpa_bwd_q": 1, "sdpa_bwd_kv": 2}

    def __init__(self, device, name: str):
        self.device, self.name = device, name

    def functions(self, dtype: DType, d: int, dv: int):
        key = (dtype, d, dv)
        cache = self.device.sdpa_modules
        if key not in cache:
            drv = self.device.driver
            ptx = self.device.ptx(source(dtype, d, dv))
            mod = drv.module(ptx)
            names = ("limn_sdpa_fwd", "limn_sdpa_bwd_q", "limn_sdpa_bwd_kv")
            cache[key] = (mod, {n: drv.function(mod, n) for n in names})
        return cache[key][1]

    def run(self, drv, shapes, dtype: DType, ins: list[int], outs: list[int], params) -> None:
        """Launch on device pointers: ``ins`` as the CUSTOM node's sources, ``outs`` all of
        the kernel's outputs."""
        scale, causal, heads = params  # heads > 0: the packed (B, t, heads * d) layout
        q, k, v = shapes[0], shapes[1], shapes[2]
        if heads:
            bh, hs = q[0] * heads, heads
            t_q, d, t_k, dv = q[1], q[2] // heads, k[1], v[2] // heads
        else:
            t_q, d, t_k, dv = q[-2], q[-1], k[-2], v[-1]
            bh, hs = 1, 1
            for n in q[:-2]:
                bh *= n
        fns = self.functions(dtype, d, dv)
        acc = acc_dtype(dtype)
        sc = float(scale)
        has_mask = len(ins) > (3 if self.name == "sdpa" else 6)  # the key mask comes last
        mask = ins[-1] if has_mask else 0
        rows = bh * (t_k if self.name == "sdpa_bwd_kv" else t_q)
        grid = max(1, min(-(-rows * 32 // THREADS), 1 << 16))
        real = ctypes.c_double if acc == dtypes.float64 else ctypes.c_float
        tail = [ctypes.c_longlong(bh), ctypes.c_int(t_q), ctypes.c_int(t_k), ctypes.c_int(hs)]
        tail.append(real(sc))
        tail.append(ctypes.c_int(int(bool(causal))))
        if self.name == "sdpa":
            args = [ins[0], ins[1], ins[2], mask, outs[0], outs[1], *tail]
            drv.launch(fns["limn_sdpa_fwd"], grid, THREADS, args)
        elif self.name == "sdpa_bwd_q":
            args = [*ins[:6], mask, outs[0], *tail]
            drv.launch(fns["limn_sdpa_bwd_q"], grid, THREADS, args)
        else:
            args = [*ins[:6], mask, outs[0], outs[1], *tail]
            drv.launch(fns["limn_sdpa_bwd_kv"], grid, THREADS, args)


def register(device) -> None:
    """Give ``device`` (a CudaDevice) the fused attention kernels."""
    for name in FusedAttention.outputs:
        device.register_kernel(name, FusedAttention(device, name))
