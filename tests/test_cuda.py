"""The cuda device without a GPU: every kernel shape compiled by NVRTC and assembled by ptxas.

These machines have no GPU, so the emission is checked the whole way to machine code:
NVRTC (the ``nvidia-cuda-nvrtc`` wheel) compiles each program to PTX and ptxas (from
``nvidia-cuda-nvcc``) assembles it for sm_80 and sm_90, where a spill or an error would
show. The tile shape's index arithmetic is simulated to cover every output cell once and
to read no shared memory that no thread wrote; the driver binding is checked against the
prototypes in ``cuda.h``. The tests that need a GPU run the corpus on it and skip, saying
why, where there is none (``examples/gpu_check.py`` runs them on a GPU machine).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import tempfile
from ctypes import c_char_p, c_int, c_size_t, c_ubyte, c_uint, c_uint64, c_void_p
from pathlib import Path

import numpy as np
import pytest
from corpus import CASES, assert_matches, reference

import limn
from ir.cuda import render as cu
from ir.graph.decompose import decompose
from ir.kernel.schedule import schedule
from limn import Tensor
from limn.runtime import cuda as rt

try:
    NVRTC = rt.Nvrtc()
except RuntimeError as e:  # the cuda extra is not installed
    NVRTC, WHY = None, str(e)
PTXAS = rt.find_ptxas()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="NVRTC not installed (the cuda extra)")
ARCHS = (80, 90)


def gpu_available() -> str | None:
    try:
        rt.Driver()
    except RuntimeError as e:
        return str(e)
    return None


NO_GPU = gpu_available()


def assemble(source: str, arch: int) -> str:
    """NVRTC to PTX, ptxas to sm_<arch> with -v; the ptxas report (errors raise)."""
    ptx = NVRTC.ptx(source, arch)
    if PTXAS is None:
        return ""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d, "k.ptx")
        p.write_bytes(ptx.rstrip(b"\0"))
        r = subprocess.run(
            [PTXAS, f"-arch=sm_{arch}", "-v", str(p), "-o", str(Path(d, "k.cubin"))],
            capture_output=True,
            text=True,
        )
    assert r.returncode == 0, r.stderr
    return r.stderr


def spills(report: str) -> list[str]:
    return [ln for ln in report.splitlines() if re.search(r"[1-9]\d* bytes spill", ln)]


def graph_of(outs):
    """The kernel graph the cuda device compiles: it renders no composite, so each is
    decomposed into primitives first (as ``CompiledDevice.plan_for`` does)."""
    return schedule(decompose([t.node for t in outs], lambda n: False)).graph


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_every_corpus_kernel_compiles_and_assembles_without_spills(arch):
    sources = []
    for case in CASES:
        if "custom" in case.tags:
            continue
        g = graph_of(case.build())
        try:
            sources.append(cu.source(g))
        except TypeError as e:  # a dtype or scatter CUDA declines, by name
            assert "cuda device" in str(e)
    # one program of all of them: one NVRTC run, one ptxas run
    body = [s.split(cu.PRELUDE, 1)[1] for s in sources]
    renamed = [
        re.sub(r"\bk(\d+)_(\d+)\b", lambda m, j=j: f"c{j}k{m[1]}_{m[2]}", b)
        for j, b in enumerate(body)
    ]
    report = assemble(cu.PRELUDE + "\n".join(_dedupe_helpers(renamed)), arch)
    assert not spills(report), spills(report)


def _dedupe_helpers(bodies: list[str]) -> list[str]:
    """Integer helpers appear in every program that uses them: keep each definition once."""
    seen, out = set(), []
    for b in bodies:
        lines = []
        for ln in b.splitlines():
            if ln.startswith("static __device__"):
                if ln in seen:
                    continue
                seen.add(ln)
            lines.append(ln)
        out.append("\n".join(lines))
    return out


def _mm(m, k, n, dtype=np.float32, transpose_b=False):
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((m, k)).astype(dtype))
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    b = Tensor(b).transpose() if transpose_b else Tensor(b)
    return a @ b


SHAPES = [(16, 16, 16), (64, 64, 64), (100, 70, 90), (17, 33, 130), (65, 1000, 63), (3, 5, 7)]


@needs_nvrtc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_contractions_at_every_width_and_tail_assemble_without_spills(dtype):
    progs = []
    for j, (m, k, n) in enumerate(SHAPES):
        for tb in (False, True):
            g = graph_of([_mm(m, k, n, dtype, tb)])
            ks = cu.kernels(g)
            shapes = [ln.shape for kk in ks.values() for ln in kk.launches]
            assert ("tile" in shapes) == (min(m, n, k) >= 16), (m, k, n, shapes)
            progs.append(cu.source(g).split(cu.PRELUDE, 1)[1].replace("k0_", f"m{j}{int(tb)}_"))
    for arch in ARCHS:
        report = assemble(cu.PRELUDE + "\n".join(_dedupe_helpers(progs)), arch)
        assert not spills(report), spills(report)


@needs_nvrtc
def test_long_reduces_over_few_cells_take_the_split_shape_and_assemble():
    x = Tensor(np.ones((3, 100_000), np.float32))
    for outs, want in [([x.sum()], "split"), ([x.sum(1)], "split"), ([x.amax(1)], "split")]:
        ks = cu.kernels(graph_of(outs))
        assert [ln.shape for k in ks.values() for ln in k.launches] == [want]
        for arch in ARCHS:
            assert not spills(assemble(cu.source(graph_of(outs)), arch))


def _cells(plan, tb: int, thread: int):
    """The (outer, row, col) cells block ``tb``'s thread stores, by the arithmetic the tile
    phase writes (``ir/cuda/render._Cuda.tile``): its TM x TN patch."""
    tm_count, tn_count = -(-plan.m // cu.BM), -(-plan.n // cu.BN)
    o, tm, tn = tb // (tm_count * tn_count), tb // tn_count % tm_count, tb % tn_count
    tx, ty = thread % (cu.BN // cu.TN), thread // (cu.BN // cu.TN)
    for a in range(cu.TM):
        for b in range(cu.TN):
            row, col = tm * cu.BM + ty * cu.TM + a, tn * cu.BN + tx * cu.TN + b
            if row < plan.m and col < plan.n:
                yield o, row, col


def _staged(thread: int, width: int):
    """The [kk][j] slots of a width-wide slab that ``thread`` writes when staging."""
    for e in range(thread, cu.BK * width, cu.THREADS):
        yield e // width, e % width


def _read(plan, thread: int, t0: int):
    """The A [kk][row] and B [kk][col] slots the thread reads for the slab at ``t0``."""
    tx, ty = thread % (cu.BN // cu.TN), thread // (cu.BN // cu.TN)
    for kk in range(min(cu.BK, plan.r - t0)):
        for a in range(cu.TM):
            yield "a", kk, ty * cu.TM + a
        for b in range(cu.TN):
            yield "b", kk, tx * cu.TN + b


@pytest.mark.parametrize("m,n,r", [(64, 64, 16), (100, 90, 70), (17, 130, 33), (65, 63, 1000)])
def test_the_tile_shapes_arithmetic_covers_every_cell_once_and_reads_only_staged_slots(m, n, r):
    """The index arithmetic the tile phase writes, run in Python (no GPU needed); that the
    CUDA spells it so is checked by the words below, and on a GPU by gpu_check.py."""
    plan = cu.TilePlan(outer=2, m=m, n=n, r=r)
    seen: dict = {}
    for tb in range(plan.tiles):
        for thread in range(cu.THREADS):
            for cell in _cells(plan, tb, thread):
                seen[cell] = seen.get(cell, 0) + 1
    assert set(seen) == {(o, i, j) for o in range(2) for i in range(m) for j in range(n)}
    assert set(seen.values()) == {1}
    for t0 in range(0, r, cu.BK):
        wa = {s for th in range(cu.THREADS) for s in _staged(th, cu.BM)}
        wb = {s for th in range(cu.THREADS) for s in _staged(th, cu.BN)}
        for th in range(cu.THREADS):
            for side, kk, j in _read(plan, th, t0):
                assert (kk, j) in (wa if side == "a" else wb)
    # the same arithmetic, as the CUDA writes it
    a, b = Tensor.randn((2, m, r)), Tensor.randn((2, r, n))
    (kernel,) = cu.kernels(graph_of([a @ b])).values()
    assert [ln.shape for ln in kernel.launches] == ["tile"]
    for words in (
        f"const int tx = threadIdx.x % {cu.BN // cu.TN}, ty = threadIdx.x / {cu.BN // cu.TN};",
        f"const int64_t tm = tb / {-(-n // cu.BN)} % {-(-m // cu.BM)}, tn = tb % {-(-n // cu.BN)};",
        f"for (int e = threadIdx.x; e < {cu.BK * cu.BM}; e += {cu.THREADS}) {{",
        f"= tm * {cu.BM} + ty * {cu.TM} + a;",
        f"= tn * {cu.BN} + tx * {cu.TN} + b;",
    ):
        assert words in kernel.source, words


def test_a_narrow_scatter_is_declined_naming_dtype_and_device():
    base = Tensor(np.zeros(4, np.int8))
    idx = Tensor(np.array([0, 1, 1], np.int64))
    src = Tensor(np.ones(3, np.int8))
    out = base.scatter_add(0, idx, src) if hasattr(base, "scatter_add") else None
    if out is None:
        pytest.skip("no scatter_add on Tensor")
    with pytest.raises(TypeError, match=r"cuda device: a scatter into int8 needs an atomic add"):
        cu.source(graph_of([out]))


def test_ir_prints_the_cuda_stage():
    a = Tensor(np.ones((32, 32), np.float32))
    text = limn.ir(a @ a, stage="cuda")
    assert 'extern "C" __global__' in text and "__shared__" in text


def _c_arg(ctype: str):
    """The ctypes type a C parameter type of cuda.h / nvrtc.h passes as."""
    t = ctype.replace("const ", "").strip()
    if t in ("char *", "char*"):
        return c_char_p
    if t.endswith("**") or t in ("const char * const *",):
        return "ptr"
    if "*" in t:
        return "ptr"
    return {
        "unsigned int": c_uint,
        "int": c_int,
        "size_t": c_size_t,
        "CUdeviceptr": c_uint64,
        "CUdevice": c_int,
        "CUdevice_attribute": c_int,
        "CUresult": c_int,
        "nvrtcResult": c_int,
        "unsigned char": c_ubyte,
        "CUcontext": c_void_p,
        "CUmodule": c_void_p,
        "CUfunction": c_void_p,
        "CUstream": c_void_p,
        "nvrtcProgram": c_void_p,
    }[t]


def _prototypes(header: Path, names) -> dict[str, list[str]]:
    text = header.read_text(errors="replace")
    out = {}
    for name in names:
        public = name.removesuffix("_v2")
        m = re.search(
            rf"(?:CUresult|nvrtcResult|const char \*) ?(?:CUDAAPI )?\b{public}\s*\(([^)]*)\)", text
        )
        assert m, f"{public} not declared in {header.name}"
        params = [p.strip() for p in m[1].split(",") if p.strip() and p.strip() != "void"]
        out[name] = [re.sub(r"\s*\b\w+$", "", p) if not p.endswith("*") else p for p in params]
    return out


def _include_dir() -> Path | None:
    for d in rt.wheel_dirs():
        if Path(d, "include", "cuda.h").exists():
            return Path(d, "include")
    return None


@pytest.mark.skipif(_include_dir() is None, reason="cuda.h not installed (the cuda extra)")
@pytest.mark.parametrize("table,header", [("DRIVER", "cuda.h"), ("NVRTC", "nvrtc.h")])
def test_the_binding_matches_the_headers_prototypes(table, header):
    protos = getattr(rt, f"{table}_PROTOTYPES")
    declared = _prototypes(_include_dir() / header, protos)
    for name, (_, args) in protos.items():
        want = [_c_arg(p) for p in declared[name]]
        assert len(want) == len(args), (name, declared[name])
        for w, a in zip(want, args):
            if w == "ptr":
                assert a in (c_void_p, c_char_p) or a.__name__.startswith("LP_"), (name, a)
            else:
                assert a is w, (name, declared[name], a)


def test_a_cached_ptx_that_changed_on_disk_is_built_again(tmp_path, monkeypatch):
    class Nvrtc:  # stands in for NVRTC: counts the compiles
        version, made = (12, 4), 0

        def ptx(self, source, arch):
            self.made += 1
            return f"// {source} at sm_{arch}\n.visible .entry k0() {{ ret; }}\n".encode()

    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    nvrtc = Nvrtc()
    ptx = rt.ptx_cache("src", 90, nvrtc)
    assert rt.ptx_cache("src", 90, nvrtc) == ptx and nvrtc.made == 1  # from the disk
    (path,) = (tmp_path / "cuda").glob("*.ptx")
    for damage in (lambda b: b[:-5], lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:]):
        path.write_bytes(damage(path.read_bytes()))
        assert rt.ptx_cache("src", 90, nvrtc) == ptx
    rt.ptx_cache("another", 90, nvrtc)
    other = next(p for p in (tmp_path / "cuda").glob("*.ptx") if p != path)
    path.write_bytes(other.read_bytes())  # another key's entry, whole, under this name
    assert rt.ptx_cache("src", 90, nvrtc) == ptx and nvrtc.made == 5


def test_set_device_cuda_without_a_driver_fails_at_once_with_the_reason():
    if NO_GPU is None:
        pytest.skip("a GPU is present: the device starts")
    with pytest.raises(RuntimeError, match="cuda device"):
        limn.set_device("cuda")
    assert limn.runtime.current_device() != "cuda"


@pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU here: {NO_GPU}")
@pytest.mark.parametrize("case", [c for c in CASES if "custom" not in c.tags], ids=lambda c: c.name)
def test_corpus_case_on_the_gpu_matches_the_numpy_device(case):
    dev = limn.runtime.get_device("cuda")
    outs = case.build()
    try:
        got = [b.numpy() for b in dev.realize([t.node for t in outs])]
    except TypeError as e:
        assert "cuda device" in str(e)
        pytest.skip(str(e))
    for g, w in zip(got, reference(case.build())):
        assert_matches(g, w, case.name)


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_the_fused_attention_kernels_assemble_without_spills_at_every_width(arch):
    from ir.graph import dtypes
    from limn.runtime import cuda_sdpa

    for dtype in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16):
        for d, dv in ((16, 16), (32, 32), (64, 64), (80, 80), (128, 64)):
            report = assemble(cuda_sdpa.source(dtype, d, dv), arch)
            assert report.count("Compiling entry function") == 3 or PTXAS is None
            assert not spills(report), (dtype, d, spills(report))


def test_fused_attention_outputs_are_declared_for_every_kernel():
    from ir.graph import dtypes
    from ir.kernel.kernel import BufferSpec

    q = BufferSpec(dtypes.float16, (2, 3, 5, 32))
    k = BufferSpec(dtypes.float16, (2, 3, 7, 32))
    v = BufferSpec(dtypes.float16, (2, 3, 7, 16))
    assert rt._custom_outputs("sdpa", [q, k, v], (1.0, False, 0)) == [
        (dtypes.float16, (2, 3, 5, 16)),
        (dtypes.float32, (2, 3, 5)),
    ]
    packed = [BufferSpec(dtypes.float16, (2, t, 3 * w)) for t, w in ((5, 32), (7, 32), (7, 16))]
    assert rt._custom_outputs("sdpa", packed, (1.0, True, 3)) == [
        (dtypes.float16, (2, 5, 48)),
        (dtypes.float32, (2, 5, 3)),
    ]
    assert rt._custom_outputs("sdpa_bwd_kv", [q, k, v], (1.0, False, 0)) == [
        (dtypes.float16, k.shape),
        (dtypes.float16, v.shape),
    ]


class _FakeDriver:
    """Device memory as numpy byte arrays, and each launch run by the numpy reference
    kernels with its arguments bound by the names the CUDA signature declares."""

    def __init__(self, dims: tuple[int, int]):
        from ir.cuda import sdpa

        self.dims = dims  # (d, dv): what the compiled source has as constants
        self.mem: dict[int, np.ndarray] = {}
        self.sigs = {
            name: [p.split()[-1].lstrip("*") for p in params.split(",")]
            for name, params in re.findall(r"(limn_sdpa_\w+)\((.*?)\)\s*\{", sdpa.SOURCE, re.S)
        }

    def alloc(self, n: int) -> int:
        self.mem[len(self.mem) + 1] = np.zeros(max(n, 1), np.uint8)
        return len(self.mem)

    def put(self, a: np.ndarray) -> int:
        p = self.alloc(a.nbytes)
        self.mem[p][: a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        return p

    def get(self, p: int, dtype, shape) -> np.ndarray:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.mem[p][:n].view(dtype).reshape(shape)

    def copy(self, dst: int, src: int, n: int) -> None:
        self.mem[dst][:n] = self.mem[src][:n]

    def launch(self, fn: str, grid, block, args) -> None:
        from limn import sdpa as ref

        a = dict(zip(self.sigs[fn], args, strict=True))
        bh, t_q, t_k, hs = (a[n].value for n in ("bh_count", "t_q", "t_k", "hs"))
        params = (a["scale"].value, bool(a["causal"].value))
        dt = np.float64 if isinstance(a["scale"], ctypes.c_double) else np.float32
        dims = self.dims

        def arr(name, rows, *width):  # (bh, rows, *width), a view of rows (b, rows, hs)
            got = self.get(a[name], dt, (bh // hs, rows, hs, *width))
            return np.moveaxis(got, 2, 1).reshape(bh, rows, *width)

        q, k, v = arr("q", t_q, dims[0]), arr("k", t_k, dims[0]), arr("v", t_k, dims[1])
        mask = [] if a["mask"] == 0 else [self.get(a["mask"], np.bool_, (bh, t_k))]
        if fn == "limn_sdpa_fwd":
            outs, names = ref.sdpa([q, k, v, *mask], params), ("o", "lse")
        else:
            do = arr("dout", t_q, dims[1])
            lse, delta = (arr(n, t_q) for n in ("lse", "delta"))
            vals = [q, k, v, do, lse, delta, *mask]
            if fn == "limn_sdpa_bwd_q":
                outs, names = ref.sdpa_bwd_q(vals, params), ("dq",)
            else:
                outs, names = ref.sdpa_bwd_kv(vals, params), ("dk", "dv")
        for name, out in zip(names, outs, strict=True):
            rows, width = out.shape[1], out.shape[2:]
            dst = self.get(a[name], out.dtype, (bh // hs, rows, hs, *width))
            dst[...] = np.moveaxis(out.reshape(bh // hs, hs, rows, *width), 1, 2)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_attention_launches_bind_sources_mask_outputs_and_params_as_declared(
    dtype, packed, monkeypatch
):
    """No GPU needed: the CUSTOM nodes limn.attention builds (one tensor as q, k and v, so
    the kernel reads one buffer three times; a key mask; causal; a scale), scheduled, and
    each launch the cuda device would make run by the numpy reference through the CUDA
    signatures' parameter names. Any disagreement in source order, mask position, output
    order, params or layout (the (B, H, t, d) one, and the packed (B, t, H * d) one) gives
    other numbers than the numpy reference's."""
    from ir.graph import dtypes
    from limn import attention
    from limn import sdpa as ref
    from limn.runtime.cuda_sdpa import FusedAttention

    monkeypatch.setattr(FusedAttention, "functions", lambda self, dt, d, dv: {
        n: n for n in ("limn_sdpa_fwd", "limn_sdpa_bwd_q", "limn_sdpa_bwd_kv")})  # fmt: skip
    limn.set_device("numpy")
    rng = np.random.default_rng(0)
    b, h, t, d = 2, 3, 9, 8
    shape, rows = ((b, t, h * d), (b, t, h)) if packed else ((b, h, t, d), (b, h, t))
    xa = rng.standard_normal(shape).astype(dtype)
    ma = rng.random((b, h, t)) > 0.3
    x, mask = Tensor(xa), Tensor(ma)
    params = (0.37, True, h if packed else 0)
    acc = dtypes.as_dtype(dtype)
    o_node, lse_node = attention._custom(
        "sdpa", [x, x, x, mask], params, [(acc, shape), (acc, rows)]
    )
    o_want, lse_want = ref.KERNELS["sdpa"]([xa, xa, xa, ma], params)
    g = rng.standard_normal(o_want.shape).astype(dtype)
    delta = (g * o_want).reshape(*rows, d).sum(-1)
    srcs = [x, x, x, Tensor(g), Tensor(lse_want), Tensor(delta), mask]
    (dq_node,) = attention._custom("sdpa_bwd_q", srcs, params, [(acc, x.shape)])
    dk_node, dv_node = attention._custom(
        "sdpa_bwd_kv", srcs, params, [(acc, x.shape), (acc, x.shape)]
    )
    bwd = [xa, xa, xa, g, lse_want, delta, ma]
    kq, kkv = ref.KERNELS["sdpa_bwd_q"], ref.KERNELS["sdpa_bwd_kv"]
    want = [o_want, lse_want, *kq(bwd, params), *kkv(bwd, params)]
    roots = [o_node, lse_node, dq_node, dk_node, dv_node]
    sched = schedule(roots)
    graph = sched.graph
    assert all(k.kind == "CUSTOM" for k in graph.kernels)
    assert any(len(k.inputs) < len(k.result.srcs) for k in graph.kernels)  # q = k = v
    drv = _FakeDriver((d, d))
    ptrs = [drv.put(n.arg.data) for n in sched.inputs]
    ptrs += [drv.alloc(s.dtype.itemsize * int(np.prod(s.shape))) for s in
             graph.buffers[graph.n_inputs :]]  # fmt: skip
    memo: dict = {"scratch": []}
    for k in graph.kernels:
        fn = FusedAttention(None, k.result.arg[0])
        call = rt.CudaDevice._gpu_custom(None, graph, k, fn)
        call(drv, [ptrs[i] for i in k.inputs] + [ptrs[k.output]], None, memo, k)
    assert len([key for key in memo if key != "scratch"]) == 3  # siblings share one launch
    for sink, w in zip(graph.sinks, want, strict=True):
        spec = graph.buffers[sink.buffer]
        got = drv.get(ptrs[sink.buffer], dtypes.to_numpy(spec.dtype), spec.shape)
        np.testing.assert_array_equal(got, w)


def test_limn_nvrtc_and_cuda_home_say_where_nvrtc_is(monkeypatch, tmp_path):
    monkeypatch.setenv("LIMN_NVRTC", "/opt/nv/libnvrtc.so.13")
    assert rt.find_nvrtc() == "/opt/nv/libnvrtc.so.13"  # taken as given
    monkeypatch.delenv("LIMN_NVRTC")
    monkeypatch.setattr(rt, "wheel_dirs", lambda: [])  # no cuda extra: a toolkit's
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libnvrtc.so.12").write_bytes(b"")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv("CUDA_HOME", raising=False)
        monkeypatch.setenv(var, str(tmp_path))
        assert rt.find_nvrtc() == str(tmp_path / "lib64" / "libnvrtc.so.12")
        monkeypatch.delenv(var)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    with pytest.raises(RuntimeError, match="NVRTC not found.*set LIMN_NVRTC"):
        rt.find_nvrtc()
