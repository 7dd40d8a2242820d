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
from ir.c.render import program, renders
from ir.c.units import Units, compile, generic_unit
from ir.graph import dtypes
from ir.graph.dtypes import compute_dtype
from ir.kernel.kernel import KernelGraph, constant_kernels
from ir.loop.passes import Pass
from ir.printer import c_sources, format_loops
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
    Kernel,
)
from limn.runtime.jit import CompiledDevice, Plan
from limn.runtime.numpy_ref import evaluate_kernel
from limn.runtime.target import physical_cores


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
            # tcc builds the quick units where installed (None: unless LIMN_TCC=0)
            self.toolchain = find_toolchain(tcc)
        except CompilerError as e:
            raise RuntimeError(str(e)) from None
        self.openmp = self.toolchain.openmp if openmp is None else openmp
        if self.openmp:
            short_spin(self.toolchain.version)
        self.target = self.toolchain.target  # the CPU the passes tune for (ir/c/target.py)
        self.passes = list(passes) if passes is not None else c_passes(self.target)
        self.threads = default_threads()
        # size-generic kernel -> the build its calls use (and its library's cache key)
        self.tiers: dict[str, _Tier] = {}
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
        self.drive.argtypes = [ctypes.c_void_p, *[ctypes.c_int64] * 2, *[ctypes.c_void_p] * 3]
        from limn.runtime import c_sdpa

        # fused attention: the CUSTOM kernels sdpa, sdpa_bwd_q, _kv (their C functions, which
        # the driver calls, by ``self.sdpa.fn``)
        self.sdpa = c_sdpa.register(self)

    def ir(self, roots, stage: str) -> str:
        """What ``limn.ir`` prints for ``roots`` on this device: the plan it runs for them
        (built now if it has none), at ``stage``: "kernel", "loop" (with this device's
        passes) or "c" (the units it compiles, then each CUSTOM kernel's). The plan's
        inputs that are values the runtime holds print first, marked ``held``."""
        plan, inputs = self.plan_for(roots, carry=True)
        g = plan.graph
        held = [f"buf{i} = held {n.op.value}" for i, n in enumerate(inputs) if n.srcs]
        if stage == "c":  # the units the plan compiled, as it keeps them
            return c_sources(g, plan.product)
        return "\n".join([*held, str(g) if stage == "kernel" else format_loops(g, self.passes)])

    def renders(self, node) -> bool:
        """The composites ``ir/c/libm.py`` spells at the node's compute dtype."""
        return self.composites and renders(node.op, compute_dtype(node.dtype))

    def set_threads(self, n: int) -> None:
        self.threads = n
        self._driver.limn_driver_threads(n)

    def build(self, graph: KernelGraph, slots=(), kept=(), sites=()) -> Plan:
        u = compile(graph, self.passes, self.target, self.openmp, self.generic_kernels)
        # a generic kernel compiled for an earlier plan is called from that plan's library;
        # the ones this process has not compiled yet go in one unit with this plan's others
        missing = {name: f for name, f in u.generic.items() if name not in self.tiers}
        units = u.units + ([generic_unit(missing, self.target)] if missing else [])
        keys = [self.toolchain.key(unit) for unit in units]
        unit_key = {i: key for unit, key in zip(u.units, keys) for i in unit.kernels}
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
                lib = self.tiers[name].lib if name in self.tiers else keys[-1]
                steps.append(Kernel(lib, name, sizes))
            else:
                steps.append(Kernel(unit_key[i], f"k{i}"))
        # the CUSTOM kernels' units are built beside the plan's (to the disk cache, where
        # the plan's first run loads them), not after it, one at a time
        custom = {sdpa.unit(s.part, s.dtype, self.target) for s in steps if getattr(s, "part", 0)}
        self.by_key.update(zip(keys, self.toolchain.libraries(units + sorted(custom))))
        return self.plan(graph, tuple(steps), u, slots, kept, sites)

    def plan(self, graph: KernelGraph, steps: tuple, u: Units, slots=(), kept=(), sites=()) -> Plan:
        """The one place a plan is made, built now or loaded from disk: its ``steps`` (one
        per kernel) run by a driver whose rows' functions ``_function`` finds (a KeyError
        names a library that is not there, an AttributeError a function it lacks), and
        the units ``u`` it compiled, which it keeps: what prints and what builds hot."""
        held = [b for b, _ in kept]
        function = lambda row: self._function(graph, row, steps, u)  # noqa: E731
        driver = Driver(self.drive, graph, steps, held, function, self.target)
        passes = tuple(self.passes)
        return Plan(graph, steps, tuple(slots), tuple(kept), tuple(sites), passes, driver, u)

    def _function(self, graph: KernelGraph, row, steps, u: Units) -> tuple:
        """What driver row ``row`` calls: a C function's address (or a host step's
        callable), and the ``_Tier`` of a quick build whose time decides its -O3 build:
        the unit that defines it, built again at -O3."""
        step, i = steps[row.kernel] if row.kernel >= 0 else None, row.kernel
        if row.kind in (ATTENTION, ATTENTION_GRAD):
            return ctypes.cast(self.sdpa.fn(step.part, step.dtype), ctypes.c_void_p).value, None
        if row.kind in (HOST, COPY):
            return (self._host(graph, graph.kernels[i], step) if row.kind == HOST else None), None
        # a generic function this device holds runs where it is (a plan loaded from disk may
        # name another library that defines it); else the library held, or the one on disk
        if step.sizes is None or row.fn not in self.tiers:
            lib = self.by_key.get(step.lib) or self.toolchain.load(step.lib)
            if lib is None:
                raise KeyError(f"c device: no library {step.lib}")
            fn = getattr(self.by_key.setdefault(step.lib, lib), row.fn)
        if step.sizes is not None:  # generic: one build for every plan that calls it, there
            if row.fn not in self.tiers:
                hot = program([u.generic[row.fn]], self.target)
                self.tiers[row.fn] = _Tier(self, fn, row.fn, hot, step.lib)
            tier = self.tiers[row.fn]
        else:
            unit = next(x for x in u.units if i in x.kernels)
            tier = _Tier(self, fn, row.fn, unit.source if unit.quick else None)
        return tier.address(), tier if tier.spent is not None else None

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

    def stored_plan(self, key: tuple) -> Plan | None:
        return plan_cache.load(self, key) if self.keep_plans else None

    def store_plan(self, key: tuple, plan: Plan, build_s: float) -> None:
        if self.keep_plans:
            plan_cache.save(self, key, plan, build_s)


HOT_S = 0.1  # about what cc -O3 takes for one small kernel (docs/runtime.md)


class _Tier:
    """A kernel's build. A small one's is the quick build, timed, until its calls have
    spent the device's ``hot_s``, then its text built at -O3 (the module docstring)."""

    def __init__(self, device: CDevice, fn, name: str, source: str | None = None, lib: str = ""):
        # source: the unit that defines function ``name``, built at -O3 when hot; None: a
        # build to keep. lib: the cache key of the library it was first found in
        self.device, self.fn, self.name, self.source, self.lib = device, fn, name, source, lib
        self.spent = 0.0 if source else None

    def spend(self, seconds: float) -> None:
        """Count ``seconds`` more of the quick build's calls; past ``hot_s``, build hot."""
        if self.spent is None:
            return
        self.spent += seconds
        if self.spent >= self.device.hot_s:  # built again at -O3 (the quick build if that fails)
            self.spent = None  # once: a thread that runs meanwhile keeps the quick build
            try:
                dev = self.device
                self.fn = getattr(dev.toolchain.library(self.source), self.name)
                dev.stats["hot_kernels"] += 1
            except CompilerError:
                pass

    def address(self) -> int:
        return ctypes.cast(self.fn, ctypes.c_void_p).value


__all__ = ["CDevice", "dtypes"]
