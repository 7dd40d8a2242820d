"""The c device's plans on disk: a device that meets a structure an earlier one built loads
its steps and libraries instead of scheduling, lowering and rendering it again."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ir.c.passes import c_passes
from ir.graph import dtypes
from ir.graph.compose import arange
from limn import Tensor
from limn.runtime import cc, plan_cache
from limn.runtime.c import CDevice
from limn.runtime.target import detect

ROOT = Path(__file__).resolve().parents[1]


def _program(seed=0):
    """Generic kernels, a specialized large one, a reduce, a constant kernel (an arange
    reshaped: computed on the host) and a view: one plan of each kind of call."""
    rng = np.random.default_rng(seed)
    x = Tensor(rng.standard_normal((70, 130)).astype(np.float32))
    small = Tensor(np.array([np.nan, -0.0, 1.5, -np.inf], np.float64))
    ints = Tensor(np.arange(1000, dtype=np.int64) * 7)
    pos = arange(ints, 1000, dtypes.int64)  # reads no buffer: computed on the host
    return [(x * 2.0 + 1.0).exp().sum(axis=1), x.T.sqrt(), small.abs() - 1.0, pos, ints + pos]


def _run(dev, make=_program):
    return [b.data.copy() for b in dev.realize([t.node for t in make()])]


def _device(cache: Path, **kw) -> CDevice:
    dev = CDevice(**kw)
    dev.toolchain.cache_dir = cache
    return dev


@pytest.fixture
def cache(tmp_path):
    return cc.private_dir(tmp_path / "cache")


def _same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def test_a_second_device_loads_the_plan_and_builds_nothing(cache):
    first = _device(cache)
    want = _run(first)
    (plan,) = first.plans.values()
    kinds = {
        type(s).__name__ + ("" if getattr(s, "sizes", None) is None else " generic")
        for s in plan.steps
    }
    assert kinds == {"Constant", "Kernel generic", "Kernel"}
    assert first.stats["plans_loaded"] == 0 and list((cache / "plans").glob("*.plan"))
    again = _device(cache)
    compiles = again.toolchain.stats["compiles"]
    _same(_run(again), want)
    assert again.stats["plans_loaded"] == 1 and again.stats["plans"] == 1
    assert again.toolchain.stats["compiles"] == compiles
    _same(_run(again), want)  # and the loaded plan is kept in memory
    assert again.stats["plan_hits"] == 1


def test_a_new_process_loads_the_plan(cache):
    code = (
        "import sys; sys.path.insert(0, 'tests'); import hashlib, limn;"
        "from test_plan_cache import _program, _run;"
        "dev = limn.get_device('c'); out = _run(dev);"
        "print(dev.stats['plans_loaded'], hashlib.sha256(b''.join(a.tobytes() for a in out))"
        ".hexdigest())"
    )
    env = {**os.environ, "LIMN_CACHE_DIR": str(cache.parent)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True)
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr.decode()[-3000:]
    (n0, h0), (n1, h1) = (r.stdout.decode().split() for r in runs)
    assert (n0, n1) == ("0", "1") and h0 == h1


def test_a_plan_whose_library_is_gone_or_whose_file_is_damaged_is_built_again(cache):
    first = _device(cache)
    want = _run(first)
    (plan_file,) = (cache / "plans").glob("*.plan")
    victim = next(cache.glob("*.so"))
    victim.unlink()
    gone = _device(cache)
    _same(_run(gone), want)
    assert gone.stats["plans_loaded"] == 0  # built again, and written again
    blob = plan_file.read_bytes()
    plan_file.write_bytes(blob[:-7])  # truncated
    damaged = _device(cache)
    _same(_run(damaged), want)
    assert damaged.stats["plans_loaded"] == 0


def test_a_file_under_the_name_of_another_key_is_not_used(cache):
    first = _device(cache)
    _run(first)
    (stored,) = (cache / "plans").glob("*.plan")
    key = next(iter(first.plans))
    other = (key[0][:-1] + ((("in", "float32", (9,), 0),)), key[1])  # not the same graph
    settings = plan_cache._settings(first)
    stored.rename(plan_cache.plan_path(first, other, settings))
    assert plan_cache.load(_device(cache), other) is None


def test_a_change_of_the_code_or_the_settings_is_a_new_entry(cache, monkeypatch):
    first = _device(cache)
    _run(first)
    key = next(iter(first.plans))
    one = plan_cache.plan_path(first, key, plan_cache._settings(first))
    monkeypatch.setattr(plan_cache, "_SOURCE_DIGEST", "0" * 64)  # a line of ir/ changed
    assert plan_cache.plan_path(first, key, plan_cache._settings(first)) != one
    assert plan_cache.load(_device(cache), key) is None
    monkeypatch.undo()
    specialized = _device(cache, generic=False)
    assert plan_cache.plan_path(specialized, key, plan_cache._settings(specialized)) != one


def test_plans_are_not_kept_with_other_passes_or_when_turned_off(cache, monkeypatch):
    custom = _device(cache, passes=c_passes(detect())[:-1])
    assert not custom.keep_plans
    _run(custom)
    assert not (cache / "plans").exists()
    monkeypatch.setenv("LIMN_PLAN_CACHE", "0")
    assert not _device(cache).keep_plans


def test_a_plan_quicker_to_build_than_storing_it_is_not_stored(cache):
    dev = _device(cache)
    _run(dev)
    (stored,) = (cache / "plans").glob("*.plan")
    stored.unlink()
    key, plan = next(iter(dev.plans.items()))
    plan_cache.save(dev, key, plan, build_s=plan_cache.MIN_BUILD_S / 2)
    assert not list((cache / "plans").glob("*.plan"))
    plan_cache.save(dev, key, plan, build_s=plan_cache.MIN_BUILD_S)
    assert len(list((cache / "plans").glob("*.plan"))) == 1


def test_a_plan_store_that_cannot_be_written_is_skipped_and_the_plan_still_runs(cache):
    import shutil

    from limn.runtime import plan_cache

    dev = _device(cache)
    want = _run(dev)
    (plan,) = dev.plans.values()
    shutil.rmtree(cache / "plans")
    (cache / "plans").write_text("not a directory")  # nor can one be made there
    plan_cache.save(dev, ("another key",), plan)  # no error
    _same(_run(_device(cache)), want)  # a new device: no store, builds, same bytes


def _rewrite(path: Path, stored) -> None:
    """``stored`` pickled under a digest that verifies: the file is well formed."""
    import hashlib
    import pickle

    data = stored if isinstance(stored, bytes) else pickle.dumps(stored)
    path.write_bytes(hashlib.sha256(data).digest() + data)


def test_a_plan_that_verifies_but_holds_the_wrong_content_is_built_again(cache):
    import dataclasses
    import pickle

    from limn.runtime.driver import Constant, Custom

    first = _device(cache)
    want = _run(first)
    (plan_file,) = (cache / "plans").glob("*.plan")
    settings, key, graph, steps, slots, kept, units = pickle.loads(plan_file.read_bytes()[32:])
    host = next(i for i, step in enumerate(steps) if isinstance(step, Constant))
    wrong_value = [*steps]
    wrong_value[host] = Constant(steps[host].value[:1])  # would broadcast into the output
    no_function = [
        s if isinstance(s, Constant | Custom) else dataclasses.replace(s, name="no_such_kernel")
        for s in steps
    ]
    wrong = {
        "not a pickle": b"\x80\x05 not a pickle",
        "another tuple": (settings, key),
        "another object": (settings, key, "graph", steps, slots, kept, units),
        "a kernel's step missing": (settings, key, graph, steps[:-1], slots, kept, units),
        "a call into no function": (settings, key, graph, no_function, slots, kept, units),
        "a constant of another shape": (settings, key, graph, wrong_value, slots, kept, units),
        "slots for other inputs": (settings, key, graph, steps, slots[:-1], kept, units),
        "a kept value of no buffer": (
            settings,
            key,
            graph,
            steps,
            slots,
            ((len(graph.buffers), 0),),
            units,
        ),
        "no units": (settings, key, graph, steps, slots, kept, "units"),
    }
    blob = plan_file.read_bytes()
    plan_file.write_bytes(blob[:100] + bytes([blob[100] ^ 4]) + blob[101:])  # a flipped bit
    assert plan_cache.load(_device(cache), key) is None
    for name, stored in wrong.items():
        _rewrite(plan_file, stored)
        dev = _device(cache)
        assert plan_cache.load(dev, key) is None, name
        _same(_run(dev), want)  # built again, and written again
        assert dev.stats["plans_loaded"] == 0, name
