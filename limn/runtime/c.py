"""The c device: every kernel of a plan rendered as C, compiled once, called through ctypes.

A plan becomes one translation unit (one ``cc`` run, however many kernels), cached on
disk by the hash of its source (``limn/runtime/cc.py``) and in memory by graph structure
(``limn/runtime/jit.py``). The loop-nest passes it runs are the default list plus the
ones that make C fast: parallel loops over the output cells, pad-mask splitting,
lane-wise reductions and register-tiled contractions (``ir/c/passes.py``); none of them
changes the order in which any one output cell is folded, so threaded and serial runs
agree bit for bit. Kernels that compute the same integers on every run (no buffer read
but constants and each other's: positions, masks; ``ir/kernel/kernel.constant_kernels``)
are not compiled: the plan computes them once, with the numpy reference's rules, when it
is built, and copies the values out on each run.

Small kernels are size-generic (``ir/c/units.generic`` is the rule): lowered once per
structure with their sizes, strides, offsets and pads as run-time arguments, so a program
that makes many shapes once each (a property-based test suite) compiles once per
structure, not once per shape. Each is a C function named by a hash of its text; the
device keeps the library that holds each one it has compiled, and a later plan that
needs it calls it there instead of compiling it again.

Small kernels (generic or not) are built by the quick compiler (tcc, or cc at -O0): a
compile of milliseconds, code several times slower than -O3's. Once a small kernel's
calls have cost what building it at -O3 would (``HOT_S`` seconds, ``LIMN_HOT_S``), its
text is built again at -O3 and its calls go there (``_Tier``; a generic kernel's, from
every plan): a kernel called often pays at most about twice for its speed, and one called
a few times never waits for cc -O3. The text is the same, so are the bits.

A plan is built as a recipe, one step per kernel (a library function by the library's
cache key, with a generic kernel's sizes; a constant kernel's values; a CUSTOM kernel), and
the recipe is kept on disk (``limn/runtime/plan_cache.py``), so the next process that
meets the same structure loads it instead of scheduling, lowering and rendering again.

Buffers are host numpy arrays shared with the numpy device, so tensors move between the
two freely. Dtypes C cannot spell (complex) are refused by name.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import numpy as np

from ir.c import sdpa
from ir.c.passes import c_passes
from ir.c.render import program, render, renders
from ir.c.units import QUICK, generic_function, generic_unit, plan_units
from ir.graph import dtypes
from ir.graph.dtypes import compute_dtype
from ir.kernel.kernel import KernelGraph, constant_kernels
from ir.loop.generic import lower_generic
from ir.loop.lower import lower
from ir.loop.passes import Pass, apply_passes
from ir.printer import custom_sources, format_loops
from limn.runtime import driver, plan_cache
from limn.runtime.cc import CompilerError, find_toolchain
from limn.runtime.device import env_number
from limn.runtime.driver import (
    ATTENTION,
    ATTENTION_GRAD,
    COPY,
    HOST,
    Constant,
    Custom,
    Driver,
    Generic,
    Kernel,
    layout,
)
from limn.runtime.jit import CompiledDevice, Plan
from limn.runtime.numpy_ref import evaluate_kernel


def physical_cores() -> int:
    """One thread per physical core: count distinct (package, core) pairs we may run on."""
    seen = set()
    for cpu in os.sched_getaffinity(0):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/physical_package_id") as f:
                pkg = f.read().strip()
            with open(f"{base}/core_id") as f:
                core = f.read().strip()
        except OSError:
            return len(os.sched_getaffinity(0))
        seen.add((pkg, core))
    return max(1, len(seen))


def default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(env) if env.isdigit() and int(env) > 0 else physical_cores()


def short_spin(version: str) -> None:
    """Let the OpenMP team spin only briefly between kernels, unless the user chose.

    A plan launches hundreds of short parallel kernels with Python in between. By default
    libgomp's idle thread spins about 3 ms for the next one; on a machine with other work
    (or a second process) that spinning takes the core the main thread needs, and a team
    whose other thread is descheduled waits a whole time slice at every barrier: a GPT
    step measured 1.0-3.4 s at 2 threads on a shared 2-core machine, 0.4-1.2 s with the
    spin cut to 10000 rounds (about 0.1 ms) or with no spin at all, 0.5 s on one thread.
    Not spinning at all costs a wake-up per kernel instead (about 0.08 ms on that machine:
    a 256 matmul at 2 threads took 0.21 ms against 0.13 ms); 0.1 ms of spin covers the gap
    between back-to-back kernels. libgomp reads this when it loads, at the first compiled
    kernel, so this runs before that; clang's OpenMP runtime gets the standard passive
    policy instead. A value the user set wins.
    """
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    if "clang" in version.lower():
        os.environ["OMP_WAIT_POLICY"] = "passive"
    else:
        os.environ["GOMP_SPINCOUNT"] = "10000"


class CDevice(CompiledDevice):
    name = "c"
    stages = ("kernel", "loop", "c")  # what ``limn.ir`` asks this device to print

    def __init__(
        self,
        passes: Sequence[Pass] | None = None,
        openmp: bool | None = None,
        composites: bool = True,
        generic: bool | None = None,
        tcc: bool | None = None,
    ):
        super().__init__()
        # small kernels lowered once per structure, sizes given at run time (ir/c/units
        # ``generic`` says which); False (or LIMN_GENERIC=0) specializes every kernel
        self.generic_kernels = (
            os.environ.get("LIMN_GENERIC", "1") != "0" if generic is None else generic
        )
        self.composites = composites  # False: render primitives only, as a new device would
        try:
            # tcc builds the QUICK units where installed (None: unless LIMN_TCC=0)
            self.toolchain = find_toolchain(tcc)
        except CompilerError as e:
            raise RuntimeError(str(e)) from None
        self.openmp = self.toolchain.openmp if openmp is None else openmp
        if self.openmp:
            short_spin(self.toolchain.version)
        self.target = self.toolchain.target  # the CPU the passes tune for (ir/c/target.py)
        self.passes = list(passes) if passes is not None else c_passes(self.target)
        self.threads = default_threads()
        self.generic_keys: dict[str, str] = {}  # size-generic kernel -> its library's cache key
        self.tiers: dict[str, _Tier] = {}  # size-generic kernel -> the build its calls use
        self.hot_s = env_number("LIMN_HOT_S", HOT_S, "seconds (0: build at -O3 at once)", float)
        self.stats["hot_kernels"] = 0
        self.by_key: dict[str, ctypes.CDLL] = {}  # cache key -> a library this device holds
        # plans kept on disk for the next process (limn/runtime/plan_cache.py): with the
        # default passes, unless LIMN_PLAN_CACHE=0
        default = self.passes == c_passes(self.target)
        self.keep_plans = default and os.environ.get("LIMN_PLAN_CACHE") != "0"
        # the plan driver (limn/runtime/driver.py): every plan runs as one call of it; it
        # sets the threads of every kernel (``set_threads``)
        self._driver = self.toolchain.library(driver.SOURCE)
        self._driver.limn_driver_threads(self.threads)
        self.drive = self._driver.limn_drive
        self.drive.restype = ctypes.c_int64
        self.drive.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
            *[ctypes.c_void_p] * 3,
        ]
        from limn.runtime import c_sdpa

        # fused attention: the CUSTOM kernels sdpa, sdpa_bwd_q, _kv (their C functions, which
        # the driver calls, by ``self.sdpa.fn``)
        self.sdpa = c_sdpa.register(self)

    def ir(self, roots, stage: str) -> str:
        """What ``limn.ir`` prints for ``roots`` on this device: the plan it runs for them
        (built now if it has none), at ``stage``: "kernel", "loop" (with this device's
        passes) or "c" (the units it compiles, then each CUSTOM kernel's). The plan's
        inputs that are values the runtime holds print first, marked ``held``."""
        plan, inputs = self.plan_for(roots)
        g = plan.graph
        held = [f"buf{i} = held {n.op.value}" for i, n in enumerate(inputs) if n.srcs]
        if stage == "c":
            u = plan_units(g, self.passes, self.openmp, None, self.generic_kernels, self.target)
            return "\n".join([*u.sources(), *custom_sources(g, sdpa)])
        return "\n".join([*held, str(g) if stage == "kernel" else format_loops(g, self.passes)])

    def renders(self, node) -> bool:
        """The composites ``ir/c/libm.py`` spells at the node's compute dtype."""
        return self.composites and renders(node.op, compute_dtype(node.dtype))

    def set_threads(self, n: int) -> None:
        self.threads = n
        self._driver.limn_driver_threads(n)

    def build(self, graph: KernelGraph, slots=(), kept=(), sites=()) -> Plan:
        u = plan_units(graph, self.passes, self.openmp, None, self.generic_kernels, self.target)
        # a generic kernel compiled for an earlier plan is called from that plan's library;
        # the ones this process has not compiled yet go in one unit with this plan's others
        missing = {name: f for name, f in u.generic.items() if name not in self.generic_keys}
        sources = [src for _, src in u.units] + ([generic_unit(missing)] if missing else [])
        keys = [self.toolchain._key(src) for src in sources]
        unit_key = {i: key for (kernels, _), key in zip(u.units, keys) for i in kernels}
        quick = {i for kernels, src in u.units if src.startswith(QUICK) for i in kernels}
        generic_keys = {**self.generic_keys, **dict.fromkeys(missing, keys[-1] if keys else "")}
        steps: list = []
        consts: dict[int, np.ndarray] = {}  # constant kernels, computed here once
        on_host = constant_kernels(graph)
        for i, k in enumerate(graph.kernels):
            if i in on_host:
                spec = graph.buffers[k.output]
                value = evaluate_kernel(k, [consts[b] for b in k.inputs])
                consts[k.output] = np.asarray(value, dtypes.to_numpy(spec.dtype))
                steps.append(Constant(consts[k.output].reshape(spec.shape)))
            elif k.kind == "CUSTOM":
                part, dtype = sdpa.KERNELS.get(k.result.arg[0]), k.rows[k.result.srcs[0]].dtype
                steps.append(Custom(*k.result.arg, part, dtype))
            elif i in u.calls:
                name, sizes = u.calls[i]
                steps.append(Generic(generic_keys[name], name, sizes))
            else:
                steps.append(Kernel(unit_key[i], f"k{i}", i in quick))
        # the CUSTOM kernels' units are built beside the plan's (to the disk cache, where
        # the plan's first run loads them), not after it, one at a time
        custom = {sdpa.unit(s.part, s.dtype) for s in steps if isinstance(s, Custom) and s.part}
        for key, lib in zip(keys, self.toolchain.libraries(sources + sorted(custom))):
            self.by_key.setdefault(key, lib)
        return self.plan(graph, tuple(steps), slots, kept, sites)

    def plan(self, graph: KernelGraph, steps: tuple, slots=(), kept=(), sites=()) -> Plan:
        """The one place a plan is made, built now or loaded from disk: its ``steps`` (one
        per kernel) laid out as the driver's rows, each row's function found in its
        library (a KeyError names a library that is not there, an AttributeError a
        function it lacks)."""
        held = [b for b, _ in kept]
        constants = {
            k.output: s.value for k, s in zip(graph.kernels, steps) if isinstance(s, Constant)
        }
        # the values that become Tensors are written into arrays of their own each run
        bound = {s.buffer for s in graph.sinks if s.source is None} - set(constants)
        rows, offsets, size = layout(graph, steps, bound, held)
        fns, tiers = [], []
        for r, row in enumerate(rows):
            step = steps[row.kernel] if row.kernel >= 0 else None
            if row.kind in (ATTENTION, ATTENTION_GRAD):
                dtype = (
                    graph.kernels[row.kernel].rows[graph.kernels[row.kernel].result.srcs[0]].dtype
                )
                fn = ctypes.cast(self.sdpa.fn(step.part, dtype), ctypes.c_void_p).value
            elif row.kind == HOST:
                fn = self._host(graph, graph.kernels[row.kernel], step)
            elif row.kind == COPY:
                fn = None
            else:
                fn, tier = self._function(graph, row, step)
                if tier.spent is not None:
                    tiers.append((r, tier))
                fn = tier.address()
            fns.append(fn)
        driver = Driver(self.drive, graph, rows, fns, offsets, size, constants, held, tiers)
        passes = tuple(self.passes)
        return Plan(graph, steps, tuple(slots), tuple(kept), tuple(sites), passes, driver)

    def _function(self, graph, row, step):
        """A compiled row's function and its build (``_Tier``)."""
        # one this device holds, or the one on disk (a plan loaded from there)
        lib = self.by_key.get(step.lib) or self.toolchain.load(step.lib)
        if lib is None:
            raise KeyError(f"c device: no library {step.lib}")
        fn = getattr(self.by_key.setdefault(step.lib, lib), row.fn)
        i = row.kernel
        if isinstance(step, Generic):
            self.generic_keys.setdefault(row.fn, step.lib)  # a later plan calls it there too
            if row.fn not in self.tiers:  # one build for every plan that calls it
                nest = lambda: lower_generic(graph, i)[0]  # noqa: E731
                source = lambda: generic_function(nest(), self.openmp)  # noqa: E731
                self.tiers[row.fn] = _Tier(self, fn, source)
            return fn, self.tiers[row.fn]
        nest = lambda: apply_passes(lower(graph, i), self.passes)  # noqa: E731
        source = lambda: (row.fn, render(nest(), row.fn, self.openmp))  # noqa: E731
        return fn, _Tier(self, fn, source if step.quick else None)

    def _host(self, graph: KernelGraph, k, step: Custom):
        """A CUSTOM kernel registered as a host function: called on the run's arrays."""
        if step.name not in self.kernels:
            raise RuntimeError(f"c device: no kernel registered for CUSTOM {step.name!r}")
        fn = self.kernels[step.name]
        order = [k.inputs[k.rows[r].arg] for r in k.result.srcs]

        def call(arrays, memo):
            key = (step.name, k.inputs, repr(step.params))
            if key not in memo:  # siblings of one multi-output kernel share a single call
                memo[key] = fn([arrays[b] for b in order], step.params)
            np.copyto(arrays[k.output], memo[key][step.index])

        return call

    def hot(self, quick, name: str, function: tuple[str, set]):
        """The kernel ``name`` built at -O3 from ``function``; ``quick`` if that fails."""
        try:
            lib = self.toolchain.library(program([function], self.target))
        except CompilerError:
            return quick
        self.stats["hot_kernels"] += 1
        return getattr(lib, name)

    def stored_plan(self, key: tuple) -> Plan | None:
        return plan_cache.load(self, key) if self.keep_plans else None

    def store_plan(self, key: tuple, plan: Plan, build_s: float) -> None:
        if self.keep_plans:
            plan_cache.save(self, key, plan, build_s)


HOT_S = 0.1  # about what cc -O3 takes for one small kernel (docs/runtime.md)


class _Tier:
    """A kernel's build. A small one's is the quick build, timed, until its calls have
    spent the device's ``hot_s``, then its text built at -O3 (the module docstring)."""

    def __init__(self, device: CDevice, fn, source=None):
        # source() -> (the function's name, its text and helpers), made again when hot
        # (a plan loaded from disk holds no text); None: a build to keep
        self.device, self.fn, self.source = device, fn, source
        self.spent = 0.0 if source else None

    def spend(self, seconds: float) -> None:
        """Count ``seconds`` more of the quick build's calls; past ``hot_s``, build hot."""
        if self.spent is None:
            return
        self.spent += seconds
        if self.spent >= self.device.hot_s:
            self.spent = None  # once: a thread that runs meanwhile keeps the quick build
            self.fn = self.device.hot(self.fn, *self.source())

    def address(self) -> int:
        return ctypes.cast(self.fn, ctypes.c_void_p).value


__all__ = ["CDevice", "dtypes"]
