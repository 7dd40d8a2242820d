/* Fused attention on the cuda device: the CUSTOM kernels sdpa, sdpa_bwd_q and sdpa_bwd_kv,
   the CUDA twins of limn/sdpa.py's numpy reference. ir/cuda/sdpa.py makes one NVRTC
   program per (storage dtype, d, dv): the render prelude, then D, DV, THREADS, acc_t,
   store_t, ld and st, then this file; ir(x, stage="cuda") prints the same program.

   One warp owns one output row and walks its keys (or queries) in order, each lane
   holding every 32nd column of the row:
   * limn_sdpa_fwd: a warp per query row streams every visible key past it with a running
     max, denominator and weighted sum (the online softmax), then writes the row of o and
     its logsumexp L;
   * limn_sdpa_bwd_q: a warp per query row recomputes p = exp(s - L) key by key and folds
     dq;
   * limn_sdpa_bwd_kv: a warp per key row walks the queries and folds dk and dv, which
     share the probabilities it recomputes.
   A dot product is the lanes' partial sums folded by a butterfly of shuffles; float adds
   commute exactly, so every lane gets the same bits. Nothing accumulates across warps and
   nothing lands in an atomic, so two runs give the same bits, and no t_q x t_k buffer
   exists. Half widths compute in float32, float64 at its own width.

   A hidden (query, key) pair is not skipped as a whole: the reference multiplies its terms
   by the pair's exact 0 probability, and 0 * inf and 0 * nan are nan, so each walk still
   reads a hidden pair's value (or gradient) row and folds 0 times it. */

/* where row i of head-batch bh sits among a tensor's rows: in order, or with hs > 1 heads
   side by side in each row of a (B, t, hs * width) tensor (the packed layout) */
static __device__ __forceinline__ long long at(long long bh, int i, int t, int hs) {
  return ((bh / hs) * t + i) * hs + bh % hs;
}
static __device__ __forceinline__ bool seen(const unsigned char *mask, long long bh, int t_k,
                                            int i, int j, int causal) {
  return (!causal || j <= i) && (mask == 0 || mask[bh * t_k + j]);
}
static __device__ __forceinline__ bool finite(acc_t x) { return x - x == 0; }
/* the warp's total of one value per lane: a butterfly of commutative adds, so every lane
   gets the same bits, in the same order on every run */
static __device__ __forceinline__ acc_t warp_sum(acc_t x) {
  for (int off = 16; off > 0; off >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
static __device__ __forceinline__ acc_t dot(const acc_t *mine, const store_t *row, int lane,
                                            int n, int width) {
  acc_t s = 0;
  for (int u = 0; u < n; u++) {
    int c = lane + 32 * u;
    if (c < width) s = s + mine[u] * ld(row[c]);
  }
  return warp_sum(s);
}
/* whether any of a row's columns is inf or nan, in every lane */
static __device__ __forceinline__ bool any_bad(const store_t *row, int lane, int width) {
  bool bad = false;
  for (int c = lane; c < width; c += 32) bad |= !finite(ld(row[c]));
  return __any_sync(0xffffffffu, bad);
}
#define NQ ((D + 31) / 32)  /* columns of q, k, dq, dk a lane holds */
#define NV ((DV + 31) / 32) /* columns of v, o, dv a lane holds */
#define ROWS(count)                                                                           \
  const int lane = threadIdx.x & 31;                                                          \
  for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < (count); \
       row += ((long long)gridDim.x * blockDim.x) >> 5)
#define EACH(u, n, width) for (int u = 0, c = lane; u < (n); u++, c += 32) if (c < (width))

extern "C" __global__ void __launch_bounds__(THREADS, 1) limn_sdpa_fwd(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const unsigned char *__restrict__ mask, store_t *__restrict__ o, acc_t *__restrict__ lse,
    long long bh_count, int t_q, int t_k, int hs, acc_t scale, int causal) {
  ROWS(bh_count * t_q) {
    const long long bh = row / t_q;
    const int i = (int)(row % t_q);
    const long long qr = at(bh, i, t_q, hs);
    acc_t qi[NQ], acc[NV];
    EACH(u, NQ, D) qi[u] = ld(q[qr * D + c]);
    for (int u = 0; u < NV; u++) acc[u] = 0;
    acc_t m = -INFINITY, den = 0;
    for (int j = 0; j < t_k; j++) {
      const store_t *vj = v + at(bh, j, t_k, hs) * DV;
      if (!seen(mask, bh, t_k, i, j, causal)) { /* its value row times 0 */
        EACH(u, NV, DV) acc[u] = acc[u] + (acc_t)0 * ld(vj[c]);
        continue;
      }
      const acc_t s = dot(qi, k + at(bh, j, t_k, hs) * D, lane, NQ, D) * scale;
      const acc_t mn = s > m ? s : m;
      const acc_t corr = exp(m - mn), p = exp(s - mn);
      den = den * corr + p;
      EACH(u, NV, DV) acc[u] = acc[u] * corr + p * ld(vj[c]);
      m = mn;
    }
    const bool any = den != 0; /* a row that sees some key, or a nan row */
    EACH(u, NV, DV) o[qr * DV + c] = st(acc[u] / (any ? den : (acc_t)1));
    if (lane == 0) lse[qr] = any ? m + log(den) : -INFINITY;
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) limn_sdpa_bwd_q(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const store_t *__restrict__ dout, const acc_t *__restrict__ lse,
    const acc_t *__restrict__ delta, const unsigned char *__restrict__ mask,
    store_t *__restrict__ dq, long long bh_count, int t_q, int t_k, int hs, acc_t scale,
    int causal) {
  ROWS(bh_count * t_q) {
    const long long bh = row / t_q;
    const int i = (int)(row % t_q);
    const long long qr = at(bh, i, t_q, hs);
    acc_t qi[NQ], doi[NV], g[NQ];
    for (int u = 0; u < NQ; u++) qi[u] = 0, g[u] = 0;
    for (int u = 0; u < NV; u++) doi[u] = 0;
    EACH(u, NQ, D) qi[u] = ld(q[qr * D + c]);
    EACH(u, NV, DV) doi[u] = ld(dout[qr * DV + c]);
    const acc_t L = lse[qr], di = delta[qr];
    const bool rowbad = !finite(di) || any_bad(dout + qr * DV, lane, DV);
    for (int j = 0; j < t_k; j++) {
      const store_t *kj = k + at(bh, j, t_k, hs) * D, *vj = v + at(bh, j, t_k, hs) * DV;
      acc_t ds;
      if (L == -INFINITY || !seen(mask, bh, t_k, i, j, causal)) /* 0 * (dp - delta) */
        ds = rowbad || any_bad(vj, lane, DV) ? (acc_t)NAN : (acc_t)0;
      else
        ds = exp(dot(qi, kj, lane, NQ, D) * scale - L) * (dot(doi, vj, lane, NV, DV) - di);
      EACH(u, NQ, D) g[u] = g[u] + ds * ld(kj[c]);
    }
    EACH(u, NQ, D) dq[qr * D + c] = st(g[u] * scale);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) limn_sdpa_bwd_kv(
    const store_t *__restrict__ q, const store_t *__restrict__ k, const store_t *__restrict__ v,
    const store_t *__restrict__ dout, const acc_t *__restrict__ lse,
    const acc_t *__restrict__ delta, const unsigned char *__restrict__ mask,
    store_t *__restrict__ dk, store_t *__restrict__ dv, long long bh_count, int t_q, int t_k,
    int hs, acc_t scale, int causal) {
  ROWS(bh_count * t_k) {
    const long long bh = row / t_k;
    const int j = (int)(row % t_k);
    const long long kr = at(bh, j, t_k, hs);
    acc_t kj[NQ], vj[NV], gk[NQ], gv[NV];
    for (int u = 0; u < NQ; u++) kj[u] = 0, gk[u] = 0;
    for (int u = 0; u < NV; u++) vj[u] = 0, gv[u] = 0;
    EACH(u, NQ, D) kj[u] = ld(k[kr * D + c]);
    EACH(u, NV, DV) vj[u] = ld(v[kr * DV + c]);
    const bool vbad = any_bad(v + kr * DV, lane, DV);
    for (int i = 0; i < t_q; i++) {
      const long long qr = at(bh, i, t_q, hs);
      const acc_t L = lse[qr];
      const store_t *qi = q + qr * D, *doi = dout + qr * DV;
      acc_t p, ds;
      if (L == -INFINITY || !seen(mask, bh, t_k, i, j, causal)) { /* p = 0 */
        p = 0;
        ds = vbad || !finite(delta[qr]) || any_bad(doi, lane, DV) ? (acc_t)NAN : (acc_t)0;
      } else {
        p = exp(dot(kj, qi, lane, NQ, D) * scale - L);
        ds = p * (dot(vj, doi, lane, NV, DV) - delta[qr]);
      }
      EACH(u, NV, DV) gv[u] = gv[u] + p * ld(doi[c]);
      EACH(u, NQ, D) gk[u] = gk[u] + ds * ld(qi[c]);
    }
    EACH(u, NQ, D) dk[kr * D + c] = st(gk[u] * scale);
    EACH(u, NV, DV) dv[kr * DV + c] = st(gv[u]);
  }
}
