"""Tiered compilation on the c device: a large unit tcc can build runs tcc's build first
while gcc -O3 builds the same source in the background; the plan then calls gcc's build.

The tests hold the background compiler at a gate (a stand-in ``cc`` that waits for a file,
then runs the real one), so each can look at the plan before and after the swap."""

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from test_tcc import BINARY, UNARY, _bits, _values

from ir.c.units import SMALL_WORK, units
from ir.kernel.schedule import schedule
from limn import Tensor, where
from limn.runtime import cc
from limn.runtime.c import CDevice

pytestmark = pytest.mark.skipif(
    shutil.which("tcc") is None,
    reason="tcc (the Tiny C Compiler) is not installed: every large unit is built by gcc "
    "before its plan runs, so there is no first tier to test (apt-get install tcc)",
)

ROOT = Path(__file__).resolve().parents[1]
N = 2 * SMALL_WORK + 13  # past the small-kernel units, below the threaded kernels

_GATE_CC = """#!/bin/sh
# a stand-in compiler: waits until the test opens the gate, then is the real one
while [ ! -e "$LIMN_TEST_GATE" ]; do sleep 0.01; done
exec {cc} "$@"
"""


@pytest.fixture
def gated(tmp_path, monkeypatch):
    """A tiered c device with a cache of its own whose gcc waits at a gate; (device, open)."""
    dev = CDevice(tiered=True)
    if dev.toolchain.tcc is None:
        pytest.skip("tcc is installed but fails the c device's self-check")
    gate = tmp_path / "gate"
    fake = tmp_path / "gated-cc"
    fake.write_text(_GATE_CC.format(cc=dev.toolchain.cc))
    fake.chmod(0o755)
    monkeypatch.setenv("LIMN_TEST_GATE", str(gate))
    dev.toolchain.cc = str(fake)
    dev.toolchain.cache_dir = cc.private_dir(tmp_path / "cache")
    return dev, gate.touch


def _large(dt):
    """Every elementwise op, reductions, a scan and a select over N values: nans of both
    signs, infinities, signed zeros, subnormals, ties."""
    reps = -(-N // len(_values(dt)))
    x = np.tile(_values(dt), reps)[:N]
    y = np.tile(_values(dt, seed=1)[::-1], reps)[:N].copy()
    tx, ty = Tensor(x), Tensor(y)
    outs = [getattr(tx, op)() for op in UNARY]
    outs += [getattr(tx, op)(ty) for op in BINARY]
    outs += [tx.reshape(N, 1).sum(axis=0), ty.max(), tx.cumsum(0), where(tx > 0.5, ty, -0.0)]
    return outs


def _run(dev, make):
    """Realize a fresh graph from ``make()`` on ``dev`` (a realized tensor would not run
    its plan again)."""
    return [b.data.copy() for b in dev.realize([t.node for t in make()])]


def _same_bits(got, want, what):
    """Bit for bit, but for which nan comes out where an operation meets two nans: IEEE 754
    leaves that open, and compilers differ on it (gcc at -O0 returns the second operand's
    nan from a product or a sum, at -O3 the first, as tcc does)."""
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        g, w = g.reshape(-1), w.reshape(-1)
        differ = _bits(g) != _bits(w)
        if g.dtype.kind == "f":
            differ &= ~(np.isnan(g) & np.isnan(w))
        bad = np.flatnonzero(differ)
        assert bad.size == 0, f"{what}, output {i}: {g[bad]} vs {w[bad]}"


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_large_unit_runs_tccs_build_first_then_gccs_with_the_same_bits(gated, dt):
    dev, open_gate = gated
    tc = dev.toolchain
    outs = lambda: _large(dt)  # noqa: E731
    parts = units(schedule([t.node for t in outs()]).graph)
    assert any(cc.tcc_first(src) for _, src in parts), "no unit of large kernels to tier"
    first = _run(dev, outs)
    (plan,) = dev.plans.values()
    assert dev.upgrades and tc.stats["background_compiles"] == 0  # gcc is at the gate
    before = list(plan.calls)
    _same_bits(_run(dev, outs), first, "tcc, again")
    assert plan.calls == before  # still the tcc build
    open_gate()
    dev.wait_compiles()
    assert not dev.upgrades and tc.stats["background_compiles"] >= 1
    swapped = [i for i, (a, b) in enumerate(zip(before, plan.calls)) if a is not b]
    assert swapped, "no kernel of the plan calls the gcc build"
    _same_bits(_run(dev, outs), first, f"{dt.__name__}: gcc -O3 against tcc")


def test_the_gcc_build_is_published_so_the_next_device_starts_optimized(gated):
    dev, open_gate = gated
    outs = lambda: _large(np.float32)[:6]  # noqa: E731
    want = _run(dev, outs)
    open_gate()
    dev.wait_compiles()
    again = CDevice(tiered=True)
    again.toolchain.cc, again.toolchain.cache_dir = dev.toolchain.cc, dev.toolchain.cache_dir
    compiles = again.toolchain.stats["compiles"]
    _same_bits(_run(again, outs), want, "loaded from the cache")
    assert not again.upgrades  # nothing to wait for: the optimized build was on disk
    assert again.toolchain.stats["compiles"] == compiles
    assert not list(dev.toolchain.cache_dir.glob(f"{cc.WORK_PREFIX}*"))


def test_a_failed_background_build_keeps_the_tcc_build_and_says_so(tmp_path):
    dev = CDevice(tiered=True)
    failing = tmp_path / "failing-cc"
    failing.write_text("#!/bin/sh\necho 'no optimizer today' >&2\nexit 1\n")
    failing.chmod(0o755)
    dev.toolchain.cc = str(failing)
    dev.toolchain.cache_dir = cc.private_dir(tmp_path / "cache")
    outs = lambda: _large(np.float64)[:4]  # noqa: E731
    reference = CDevice(tiered=False)
    want = _run(reference, outs)
    with pytest.warns(RuntimeWarning, match="keep their tcc build"):
        got = _run(dev, outs)
        with pytest.raises(cc.CompilerError, match="no optimizer today"):
            dev.wait_compiles()
    _same_bits(got, want, "tcc against gcc")
    _same_bits(_run(dev, outs), want, "after the failure")
    tiered = [s for _, s in units(schedule([t.node for t in outs()]).graph) if cc.tcc_first(s)]
    assert tiered
    for src in tiered:  # no gcc build was published under the unit's name
        assert not (dev.toolchain.cache_dir / f"{dev.toolchain._key(src)}.so").exists()
    assert not list(dev.toolchain.cache_dir.glob(f"{cc.WORK_PREFIX}*"))


def test_units_that_are_threaded_tiled_or_small_never_take_the_first_tier():
    body = "void k0(void *const *a, int64_t *e) { float x = 1.0f; (void)x; }\n"
    assert cc.tcc_first(body)
    assert cc.tcc_first("#pragma omp simd reduction(|:limn_far)\n" + body)  # lanes only
    assert not cc.tcc_first("#pragma omp parallel for collapse(1)\n" + body)
    assert not cc.tcc_first("  #pragma omp for schedule(static)\n" + body)
    assert not cc.tcc_first("#if defined(__AVX512F__)\n#endif\n" + body)  # a tile's kernel
    assert not cc.tcc_first("_Float16 h;\n" + body)
    assert not cc.tcc_first("float y = __builtin_sqrtf(2.0f);\n" + body)
    assert not cc.tcc_first(cc.QUICK + body)  # small units: tcc for good, not a tier


def test_threaded_and_tiled_units_are_built_by_gcc_before_the_first_run(tmp_path):
    dev = CDevice(tiered=True)
    if not dev.openmp:
        pytest.skip("this cc has no OpenMP: no unit is threaded")
    dev.toolchain.cache_dir = cc.private_dir(tmp_path / "cache")
    rng = np.random.default_rng(5)
    a = Tensor(rng.standard_normal((96, 96), dtype=np.float32))
    big = Tensor(rng.standard_normal(1 << 19, dtype=np.float32))
    outs = lambda: [a @ a, (big * 1.5).exp()]  # noqa: E731
    parts = units(schedule([t.node for t in outs()]).graph)
    assert parts and not any(cc.tcc_first(src) for _, src in parts)
    tcc_before = dev.toolchain.stats["tcc_compiles"]
    got = _run(dev, outs)
    assert not dev.upgrades and dev.toolchain.stats["tcc_compiles"] == tcc_before
    np.testing.assert_allclose(got[0], a.numpy() @ a.numpy(), rtol=1e-4, atol=1e-4)


def test_limn_tiered_0_builds_every_large_unit_before_the_first_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LIMN_TIERED", "0")
    dev = CDevice()
    assert not dev.toolchain.tiered
    dev.toolchain.cache_dir = cc.private_dir(tmp_path / "cache")
    _run(dev, lambda: _large(np.float32)[:4])
    assert not dev.upgrades and dev.toolchain.stats["background_compiles"] == 0


_EXIT_EARLY = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from test_tiered import _large, _run
    from limn.runtime import cc
    from limn.runtime.c import CDevice
    dev = CDevice(tiered=True)
    dev.toolchain.cc = sys.argv[2]
    dev.toolchain.cache_dir = cc.private_dir(cc.Path(sys.argv[3]))
    _run(dev, lambda: _large(np.float32)[:4])
    assert dev.upgrades
    print("ran", flush=True)
    """
)

_SLOW_CC = """#!/bin/sh
# a stand-in compiler that would take minutes: it records its child, then waits on it
sleep 300 &
echo $! > "$LIMN_TEST_PIDS.tmp" && mv "$LIMN_TEST_PIDS.tmp" "$LIMN_TEST_PIDS"
wait
"""


def test_exiting_during_a_background_build_neither_waits_nor_leaves_files(tmp_path):
    slow = tmp_path / "slow-cc"
    slow.write_text(_SLOW_CC)
    slow.chmod(0o755)
    pids, cache = tmp_path / "child.pid", tmp_path / "cache"
    env = {**os.environ, "LIMN_TEST_PIDS": str(pids)}
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", _EXIT_EARLY, str(ROOT / "tests"), str(slow), str(cache)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "ran" in r.stdout, r.stderr[-3000:]
    assert time.perf_counter() - t < 60  # not the stand-in's 300 s
    assert not list(cache.glob(f"{cc.WORK_PREFIX}*"))  # the work directory went with it
    published = {p.stem for p in cache.glob("*.so")}
    assert published == {p.stem for p in cache.glob("*.sha256")}  # whole pairs only
    if pids.exists():  # the compiler had started: its child went with its process group
        child = int(pids.read_text())
        deadline = time.time() + 10
        while Path(f"/proc/{child}").exists() and time.time() < deadline:
            stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if stat in ("Z", "X"):
                break
            time.sleep(0.05)
        else:
            if Path(f"/proc/{child}").exists():
                os.kill(child, 9)
                pytest.fail("the background compiler's child outlived the process")


_FORK = textwrap.dedent(
    """
    import os, signal, sys, traceback
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from test_tiered import _GATE_CC, _large, _run, _same_bits
    from limn.runtime import cc
    from limn.runtime.c import CDevice
    dev = CDevice(tiered=True)
    gated = cc.Path(sys.argv[2]) / "gated-cc"
    gated.write_text(_GATE_CC.format(cc=dev.toolchain.cc))
    gated.chmod(0o755)
    dev.toolchain.cc = str(gated)
    dev.toolchain.cache_dir = cc.private_dir(cc.Path(sys.argv[2]) / "cache")
    outs = lambda: _large(np.float32)[:4]
    first = _run(dev, outs)
    assert dev.upgrades  # gcc waits at the gate, in the parent's worker
    pid = os.fork()
    if pid == 0:
        try:
            signal.alarm(60)  # a wait that never ends ends the child here
            open(os.environ["LIMN_TEST_GATE"], "w").close()
            dev.wait_compiles()
            assert not dev.upgrades
            _same_bits(_run(dev, outs), first, "the child's gcc build")
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    dev.wait_compiles()
    assert not dev.upgrades
    print("child", os.waitstatus_to_exitcode(status), flush=True)
    """
)


def test_a_forked_child_finishes_the_background_builds_its_parent_had_started(tmp_path):
    env = {**os.environ, "LIMN_TEST_GATE": str(tmp_path / "gate")}
    r = subprocess.run(
        [sys.executable, "-c", _FORK, str(ROOT / "tests"), str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr[-3000:]
