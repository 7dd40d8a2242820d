"""The tcc tier: the c device's small-kernel units built by the Tiny C Compiler give the
same bits as the same units built by gcc, on a spread of kernels and special values."""

import shutil
from dataclasses import replace

import numpy as np
import pytest

from ir.c.units import Unit, compile, unit
from ir.kernel.schedule import schedule
from limn import Tensor, where
from limn.runtime import tcc
from limn.runtime.c import CDevice
from limn.runtime.target import detect

pytestmark = pytest.mark.skipif(
    shutil.which("tcc") is None,
    reason="tcc (the Tiny C Compiler) is not installed: the c device builds every unit "
    "with gcc, so there is no tcc tier to compare (apt-get install tcc)",
)

UNARY = """neg exp log sqrt rsqrt reciprocal exp2 log2 log10 expm1 log1p sin cos tan asin
acos atan sinh cosh asinh acosh atanh square abs sign relu sigmoid tanh silu softplus erf
floor ceil trunc round isnan isinf isfinite""".split()
BINARY = "add sub mul div pow atan2 hypot logaddexp fmod maximum minimum".split()


def _values(dtype, n=48, seed=0):
    """Ordinary values and the ones that show a difference: nans of both signs, infinities,
    signed zeros, subnormals, huge and tiny, ties for rounding, large arguments for trig."""
    rng = np.random.default_rng(seed)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0]
    special += [-1.0, 1e-40, -1e-40, 1e30, -1e30, 88.7, -103.9, 1e6 + 0.5, 3.0e7, 0.9999]
    x = np.concatenate([np.array(special), rng.standard_normal(n) * 4, rng.uniform(-1, 1, 8)])
    return x.astype(dtype)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def _cases():
    for dt in (np.float32, np.float64):
        for op in UNARY:
            yield f"{op}-{dt.__name__}", lambda op=op, dt=dt: [getattr(Tensor(_values(dt)), op)()]
        for op in BINARY:

            def binary(op=op, dt=dt):
                x, y = _values(dt), _values(dt, seed=1)[::-1].copy()
                return [getattr(Tensor(x), op)(Tensor(y))]

            yield f"{op}-{dt.__name__}", binary
    yield (
        "reduce-cumsum-where",
        lambda: [
            Tensor(_values(np.float32).reshape(6, 13)).sum(axis=1),
            Tensor(_values(np.float64).reshape(6, 13)).max(axis=0),
            Tensor(_values(np.float32).reshape(6, 13)).cumsum(1),
            where(Tensor(_values(np.float32)) > 0.5, Tensor(_values(np.float32, seed=2)), -0.0),
        ],
    )
    yield (
        "lane-reductions",  # small units whose lanes carry an omp simd pragma
        lambda: [
            Tensor(_values(np.float64, n=1000)).sum(),
            Tensor(_values(np.float32, n=1000)[:1030].reshape(2, 515)).sum(axis=1),
            Tensor(_values(np.float32, n=1000)).max(),
        ],
    )
    ints = np.array([-(2**63), 2**63 - 1, -7, 7, 0, 1, -1, 3, 2**31, -(2**31)], np.int64)
    yield (
        "ints-and-casts",
        lambda: [
            Tensor(ints).maximum(Tensor(ints[::-1].copy())) - Tensor(ints[::-1].copy()),
            Tensor(ints) * 3 + (2**62),
            -Tensor(ints),
            Tensor(ints).cast("float32"),
            Tensor(ints).cast("float64") * 0.1,
            Tensor(_values(np.float64) * 1e3).cast("int32"),
            Tensor(_values(np.float32)).cast("bfloat16").cast("float32"),
            Tensor(_values(np.float64)).cast("float32"),
        ],
    )


CASES = dict(_cases())


@pytest.fixture(scope="module")
def devices(tmp_path_factory):
    """(tcc, gcc) c devices, each also with every kernel specialized; each pair with a disk
    cache of its own, so every unit is compiled here (by the compiler under test)."""
    assert tcc.find(True)[0] is not None, "tcc is installed but fails the c device's self-check"
    pairs = {
        "generic": (CDevice(tcc=True, generic=True), CDevice(tcc=False, generic=True)),
        "specialized": (CDevice(tcc=True, generic=False), CDevice(tcc=False, generic=False)),
    }
    for kind, pair in pairs.items():
        cache = tmp_path_factory.mktemp(f"tcc-cache-{kind}")
        cache.chmod(0o700)
        for dev in pair:
            dev.toolchain.cache_dir = cache
    return pairs


@pytest.mark.parametrize("kind", ["generic", "specialized"])
@pytest.mark.parametrize("name", list(CASES))
def test_tcc_units_give_gcc_bits(name, kind, devices):
    tcc, gcc = devices[kind]
    assert tcc.toolchain.tcc is not None and gcc.toolchain.tcc is None
    before = tcc.toolchain.stats["tcc_compiles"]
    got = [b.data.copy() for b in tcc.realize([t.node for t in CASES[name]()])]
    want = [b.data.copy() for b in gcc.realize([t.node for t in CASES[name]()])]
    assert tcc.toolchain.stats["tcc_compiles"] > before, f"{name}: no unit went to tcc"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        bad = np.flatnonzero(_bits(g).reshape(-1) != _bits(w).reshape(-1))
        assert bad.size == 0, (
            f"{name} ({kind}): tcc {g.reshape(-1)[bad]} vs gcc {w.reshape(-1)[bad]}"
        )


def test_which_units_go_to_tcc():
    """What the renderer records of a unit decides, never its text: a quick unit of plain C;
    not one with a half type, an OpenMP team or the vector extension."""
    from ir.c.target import Target

    target = Target("generic", 16, 16, 4, 1 << 15, 1 << 20, 1 << 23, 2, ())
    plain = unit([("void f(void) {}", set())], target, quick=True)
    assert tcc.builds(plain) and plain.needs == frozenset()
    assert not tcc.builds(Unit(plain.source))  # an -O3 unit: large kernels stay on gcc
    for needs in ("half", "threads", "vectors"):
        assert not tcc.builds(Unit(plain.source, quick=True, needs=frozenset({needs})))
    w = Tensor(np.ones((256, 256), np.float32))
    for value, needs in (
        (Tensor(np.ones(8, np.float16)) * 2, {"half"}),  # small: quick, but not for tcc
        (Tensor(np.ones(8, np.float32)).floor(), set()),  # small: quick and tcc's
        (w @ w, {"threads", "vectors"}),  # a tiled contraction: -O3 by gcc
    ):
        graph = schedule([value.node]).graph
        (u,) = compile(graph, None, replace(detect(), cores=1), generic_kernels=False).all()
        assert (u.needs, u.quick, tcc.builds(u)) == (needs, not needs - {"half"}, not needs)
    assert "#define __builtin_rintf rintf" in tcc.PRELUDE


def test_the_switch_and_the_cache_key(monkeypatch):
    monkeypatch.setenv("LIMN_TCC", "0")
    off = CDevice()
    assert off.toolchain.tcc is None
    monkeypatch.delenv("LIMN_TCC")
    on = CDevice()
    assert on.toolchain.tcc is not None
    big = "int limn_f(int x) { return x + 1; }\n"
    src = Unit(big, quick=True)
    assert on.toolchain.key(src) != off.toolchain.key(src)  # the compiler is in the key
    assert on.toolchain.key(Unit(big)) == off.toolchain.key(Unit(big))  # gcc builds it either way
