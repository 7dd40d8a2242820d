"""The c device's plans on disk, so that a new process skips building them again.

A plan's structure key (``jit.walk``) decides its kernel graph and its C, and the compiled
libraries are already on disk (``limn/runtime/cc.py``). What a new process would redo for
every structure it meets is the Python in between: decompose, schedule, lower, the passes,
render, hash. On a warm disk cache that is nearly all of a short program's time on the c
device. So each plan the device builds is also written here as its recipe: the kernel
graph, the plan's slot order, and for each kernel what it calls (a function of a cached
library by the library's key, with a generic kernel's sizes; a constant kernel's values;
a CUSTOM kernel, found by name). A process that meets the same key loads the recipe and
the libraries, and runs.

The file name is a digest of everything that decides the plan: the key, the device's
settings, the toolchain's identity, numpy's version and the source of ``ir/``, ``limn/``
and ``limn_array/`` (a changed line of the compiler is a new entry, never a stale plan);
the file holds the key and those settings too, and a load compares them, as the
in-memory plan cache compares keys. A plan is written under a temporary name and
renamed, with the sha256 of its bytes in front, checked before it is unpickled; like the
libraries beside it, it lives in the user's private cache directory (a pickle, like a
shared library, is code: only this user can write there). A plan whose libraries are not
all on disk (one was removed, or failed its digest), or that verifies but does not hold a
plan of this key's shape (the wrong pickle, a kernel's call missing, a constant of
another shape), is not used: the plan is built again. Plans built under the profiler or
with other passes than the device's default are neither stored nor loaded
(``LIMN_PLAN_CACHE=0``: never).
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np

from ir.graph.dtypes import to_numpy
from ir.kernel.kernel import KernelGraph
from limn.runtime.driver import Constant
from limn.runtime.jit import Plan

_SOURCE_DIGEST: str | None = None


def source_digest() -> str:
    """A digest of the Python that builds plans: every .py file of ir/, limn/, limn_array/."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for pkg in ("ir", "limn", "limn_array"):
            for f in sorted((root / pkg).rglob("*.py")):
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


def _settings(device) -> tuple:
    """What decides a plan besides its key: the device's settings, the compilers, the code."""
    tc = device.toolchain
    return (
        device.name,
        device.generic_kernels,
        device.composites,
        device.openmp,
        tc.cc,
        tc.version,
        tc.flags,
        tc.target,
        tc.tcc,
        tc.tcc_version,
        np.__version__,
        source_digest(),
    )


def plan_path(device, key: tuple, settings: tuple) -> Path:
    """Where the recipe of ``key`` lives: named by a digest of its repr (pickle's bytes are
    not canonical: they depend on which equal objects happen to be one object). A repr
    that two keys share costs a miss, never a wrong plan: the file holds the key itself,
    and ``load`` compares it."""
    global _last
    last = _last  # one read: another thread may name another key meanwhile
    if last[0] is key and last[1] == settings:  # the miss ``save`` follows: one repr
        return last[2]
    text = repr((settings, key)).encode()
    path = device.toolchain.cache_dir / "plans" / f"{hashlib.sha256(text).hexdigest()[:32]}.plan"
    _last = (key, settings, path)
    return path


_last: tuple = (None, None, None)  # the last key plan_path named, its settings and path
_made: set[Path] = set()  # plan directories made by this process

# A plan quicker to build than this is not stored: writing one costs about a
# millisecond and loading one a third of that, and a program that makes many small
# structures once each (a property-based test suite) would spend more on the store than
# a later run saves.
MIN_BUILD_S = 0.003


def save(device, key: tuple, plan: Plan, build_s: float = 1.0) -> None:
    """Write ``plan`` (its graph, steps, slots and kept values) for ``key``, if it took
    ``MIN_BUILD_S`` or more to build."""
    if build_s < MIN_BUILD_S:
        return
    settings = _settings(device)
    path = plan_path(device, key, settings)
    try:
        data = pickle.dumps(
            (settings, key, plan.graph, plan.steps, plan.slots, plan.kept, plan.product),
            protocol=5,
        )
    except (pickle.PicklingError, TypeError, AttributeError):
        return  # an argument that does not pickle: this plan is built again next time
    tmp = None
    try:  # the store is an optimization: a cache directory gone or full skips it
        if path.parent not in _made:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            _made.add(path.parent)
        fd, tmp = tempfile.mkstemp(prefix="tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(data).digest() + data)
        os.replace(tmp, path)  # whole or not at all
    except OSError:
        _made.discard(path.parent)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def load(device, key: tuple) -> Plan | None:
    """The plan stored for ``key`` with its libraries loaded; None where there is none, it
    does not verify, it is another key's, or one of its libraries is not on disk."""
    settings = _settings(device)
    try:
        blob = plan_path(device, key, settings).read_bytes()
    except OSError:
        return None
    digest, data = blob[:32], blob[32:]
    if hashlib.sha256(data).digest() != digest:
        return None  # truncated or not ours: built again (and written again)
    # unpickling makes thousands of small objects, and the collector would walk the
    # whole heap (a big program's: scikit-learn's) for them: none of them is garbage
    enabled = gc.isenabled()
    gc.disable()
    try:  # a file that verifies but holds something else is built again, like a torn one
        stored_settings, stored_key, graph, steps, slots, kept, product = pickle.loads(data)
        if stored_settings != settings or stored_key != key:
            return None
        if not isinstance(graph, KernelGraph) or len(steps) != len(graph.kernels):
            return None
        specs = [graph.buffers[k.output] for k in graph.kernels]
        if any(b >= len(graph.buffers) or r >= len(key[0]) for b, r in kept):
            return None  # a kept intermediate no buffer or node of this plan has
        if len(slots) != graph.n_inputs or any(
            isinstance(step, Constant)
            and (step.value.shape, step.value.dtype) != (b.shape, to_numpy(b.dtype))
            for step, b in zip(steps, specs)
        ):
            return None
        return device.plan(graph, steps, product, slots, kept)
    except Exception:
        return None
    finally:
        if enabled:
            gc.enable()
