"""The C toolchain: find ``cc``, compile a translation unit, and keep the result on disk.

Compiled libraries are cached by a hash of everything that decides their bytes (the
source, the compiler's identity and the flags), in a directory private to the user, so a
second process, or the second run of a script, loads instead of compiling. Three rules
keep that cache safe:

* the directory is created mode 0700 and refused if someone else owns it or it is
  writable by others, so nobody else can plant a library there;
* a library is compiled in a work directory of the compiling process's own, loaded from
  there, and only then renamed into place with its sha256 beside it, so two processes
  compiling the same source at once both succeed (a reader that catches the pair
  mid-rename rebuilds); an interrupted compile kills cc's whole process group, and the
  work directory of a process that died is swept by the next process to compile there;
* a library is loaded only if its key and bytes still hash to the digest recorded when
  this code wrote it; a corrupted or foreign entry (another key's pair under this name
  too) is rebuilt, never loaded.

Within one process, compiling and publishing is serialized by a lock, so two threads that
need the same new library build it once and neither sees the other's half-published pair.

The quick tier: a unit of small kernels (marked ``QUICK`` by the renderer) costs its
compile, not its run, and most of gcc's ~40 ms CPU on one is starting the compiler. Where
the Tiny C Compiler is installed (``tcc``; ``LIMN_TCC=0`` turns it off) and passes a
self-check (compile, load, call), those units are built by ``tcc -shared`` instead, in a
few milliseconds. tcc computes the same bits: no flag the c device passes gcc lets it
change what a float operation computes, tcc evaluates float and double in SSE registers at
their own precision and never contracts a*b+c, and the GCC builtins the renderer emits are
mapped (``TCC_PRELUDE``) to the C library functions with the same results (``rint`` is
round-to-nearest-even in the default mode, as ``__builtin_rint`` is; ``fma`` is exactly
fused). A unit tcc cannot take stays on gcc by rule (``tcc_can_build``): one with
``_Float16`` (tcc has no half type), with an OpenMP pragma other than ``omp simd``, or
with a builtin the prelude does not map. The cache key names the compiler that built each library.

Tiered compilation (``LIMN_TIERED=0`` turns it off): a unit gcc would build at -O3 (large
kernels) costs tens of milliseconds of gcc before its plan can run once. Where tcc can take
it (``tcc_first``: the rule above, less the QUICK mark, and no branch on the target's
vector extensions, such as a tiled contraction's micro-kernel, that tcc would not see),
``tiered_libraries`` builds it with tcc at once and hands back, beside that library, a
``Future`` of the gcc -O3 build of the same source, which a background thread compiles
(the GIL is released while it waits on gcc) and publishes to the disk cache under the
unit's ordinary key, so the next process loads the optimized library directly. The tcc
build is never cached on disk. Both builds compute the same bits, up to which nan comes
out of an operation on two nans (IEEE 754 leaves that open; gcc's -O0 and -O3 builds
already differ there). A background compile that fails leaves its error on the future
(the device keeps calling the tcc build); one still running when the process exits is
killed with its whole process group and its work directory removed, so nothing
half-written is left behind and exit does not wait for gcc.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import ctypes
import hashlib
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from ir.c.units import QUICK

# -fno-unswitch-loops: gcc 12 at -O3 miscompiles a vectorized loop that it also unswitches
# on a pad predicate (a reversed, masked read comes back in the wrong order; the corpus
# case is a flipped, value-padded view of a matmul). The pad splitting pass does the
# useful part of unswitching itself, so nothing is lost.
# -fno-trapping-math: no program reads the floating-point exception flags, and without it
# gcc will not vectorize floor, ceil, trunc or rint (the composite rows' C spellings).
# -ffp-contract=off: a*b+c is two roundings, as the nest (and the numpy reference) says;
# the one deliberate fused multiply-add is the tiled contraction's (ir/c/tile.py).
FLAGS = (
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fno-unswitch-loops",
    "-ffp-contract=off",
    "-shared",
    "-fPIC",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fwrapv",
    "-std=gnu11",
)


# What tcc needs to compute gcc's bits, put before a unit it builds. tcc has none of GCC's
# math builtins: each one the renderer emits becomes the C library function with the same
# results (these round exactly; rint in the default mode). tcc negates a float as -0.0 - x,
# which keeps a nan's sign where gcc (and IEEE negate) flips it: the renderer's LIMN_NEG
# flips the bit here. glibc's NAN without GCC is 0.0f / 0.0f, which x86 makes -nan: here
# it is the bits of gcc's quiet nan, 0x7fc00000. tcc folds an expression of float literals
# in long double, which can round a double result 1 ulp off gcc's (about 1 in 3000 double
# divisions; float results are safe): the templates' literal quotients (libm.c's
# 1.0 / 3628800.0, ...) fold to the same bits, and rendered kernels keep every value in a
# variable of its own, which tcc never folds; a new double constant is best one literal.
TCC_BUILTINS = ("rint", "floor", "ceil", "trunc")
TCC_PRELUDE = "".join(
    f"#define __builtin_{fn}{s} {fn}{s}\n" for fn in TCC_BUILTINS for s in ("f", "")
) + (
    "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
    "static inline float limn_tcc_negf(float x) { uint32_t u; memcpy(&u, &x, 4);\n"
    "  u ^= 0x80000000u; memcpy(&x, &u, 4); return x; }\n"
    "static inline double limn_tcc_neg(double x) { uint64_t u; memcpy(&u, &x, 8);\n"
    "  u ^= 0x8000000000000000ull; memcpy(&x, &u, 8); return x; }\n"
    "#define LIMN_NEG(x) _Generic((x), float: limn_tcc_negf(x), double: limn_tcc_neg(x), "
    "default: -(x))\n"
    "static const union { uint32_t u; float f; } limn_tcc_nan = {0x7fc00000u};\n"
    "#undef NAN\n#define NAN (limn_tcc_nan.f)\n"
)
TCC_FLAGS = ("-shared",)
_BUILTIN = re.compile(r"__builtin_(\w+)")
_TCC_MAPPED = frozenset(f"{fn}{s}" for fn in TCC_BUILTINS for s in ("f", ""))


_OMP_PRAGMA = re.compile(r"#pragma omp (?!simd\b)")  # a team or work-sharing pragma


def tcc_takes(source: str) -> bool:
    """Whether tcc can build ``source`` to gcc's bits: no half type, no OpenMP pragma but
    ``omp simd`` (which marks independent lanes, and whose only clause the renderer writes,
    an or-reduction of a flag, is exact in any order; tcc ignores it and runs the lanes in
    order) and no builtin that ``TCC_PRELUDE`` does not map (those stay on gcc)."""
    return (
        "_Float16" not in source
        and not _OMP_PRAGMA.search(source)
        and set(_BUILTIN.findall(source)) <= _TCC_MAPPED
    )


def tcc_can_build(source: str) -> bool:
    """Whether a unit goes to tcc for good: a QUICK unit that ``tcc_takes``."""
    return source.startswith(QUICK) and tcc_takes(source)


def tcc_first(source: str) -> bool:
    """Whether a unit gcc builds at -O3 runs a tcc build first, while gcc builds it in the
    background: one that ``tcc_takes`` and has no branch on the target's vector extensions
    (a tiled contraction's ``#if defined(__AVX512F__)`` micro-kernel, its 8 x 8 transpose),
    where gcc and tcc would compile different C."""
    return not source.startswith(QUICK) and "#if defined(__AVX" not in source and tcc_takes(source)


class CompilerError(RuntimeError):
    pass


class CompileStopped(CompilerError):
    """A background build the process's exit stopped (nothing of it was published)."""


_publish_lock = threading.Lock()  # one compile-and-publish at a time in this process


@dataclass
class Toolchain:
    cc: str
    version: str
    openmp: bool
    cache_dir: Path
    tcc: str | None = None  # the Tiny C Compiler for QUICK units, if found and checked
    tcc_version: str = ""
    # large units tcc can take: built by tcc now, by gcc -O3 in the background (the c device
    # turns it on unless LIMN_TIERED=0; off, every unit is built by its final compiler)
    tiered: bool = False
    stats: dict = field(
        default_factory=lambda: {
            "compiles": 0,
            "tcc_compiles": 0,
            "compile_s": 0.0,
            "loads": 0,
            "background_compiles": 0,
            "background_s": 0.0,
        }
    )
    _pending: dict = field(default_factory=dict, repr=False)  # library key -> its gcc Future

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS + (("-fopenmp",) if self.openmp else ())

    def flags_for(self, source: str) -> tuple[str, ...]:
        """The flags, at -O0 for a unit the renderer marks as small kernels only."""
        if source.startswith(QUICK):
            return tuple("-O0" if f == "-O3" else f for f in self.flags)
        return self.flags

    def compiler_for(self, source: str) -> tuple[str, str, tuple[str, ...], str]:
        """Who builds ``source`` for good: (compiler, its version, flags, text put before
        the source). The disk cache names a library by these and the source."""
        if self.tcc is not None and tcc_can_build(source):
            return self.tcc_build()
        return self.cc, self.version, self.flags_for(source), ""

    def library(self, source: str) -> ctypes.CDLL:
        """The shared library built from ``source``: from the disk cache, or compiled now."""
        return self.libraries([source])[0]

    def libraries(self, sources: list[str]) -> list[ctypes.CDLL]:
        """One library per source, each its final build; the ones not in the cache are
        compiled side by side."""
        return [lib for lib, _ in self._build(sources, tiered=False)]

    def tiered_libraries(self, sources: list[str]) -> list[tuple[ctypes.CDLL, Future | None]]:
        """One library per source to call now, each with the ``Future`` of its optimized
        build, or None where the library is already the final one.

        With ``tiered`` on and tcc found, a unit gcc builds at -O3 that ``tcc_first``
        admits and the cache lacks is built by tcc now and by gcc in the background;
        every other unit is loaded or compiled as ``libraries`` does."""
        return self._build(sources, tiered=self.tiered and self.tcc is not None)

    def wait(self) -> None:
        """Wait until every background build this toolchain started has finished."""
        concurrent.futures.wait(list(self._pending.values()))

    def _build(self, sources: list[str], tiered: bool) -> list[tuple[ctypes.CDLL, Future | None]]:
        paths = [self.cache_dir / f"{self._key(src)}.so" for src in sources]
        libs = [self._load_verified(so) for so in paths]
        later: list[Future | None] = [None] * len(sources)
        if all(lib is not None for lib in libs):
            return list(zip(libs, later))
        with _publish_lock:  # look again: another thread may have built them meanwhile
            libs = [lib or self._load_verified(so) for so, lib in zip(paths, libs)]
            todo = [i for i, lib in enumerate(libs) if lib is None]
            first = {i for i in todo if tiered and tcc_first(sources[i])}
            jobs = [(sources[i], paths[i], i in first) for i in todo]
            for i, lib in zip(todo, self._compile_many(jobs) if jobs else []):
                libs[i] = lib
            # a unit tcc unexpectedly refused: built by gcc now, as without tiers
            refused = [i for i in first if libs[i] is None]
            for i, lib in zip(
                refused,
                self._compile_many([(sources[i], paths[i], False) for i in refused])
                if refused
                else [],
            ):
                libs[i] = lib
            for i in first.difference(refused):
                later[i] = self._optimize(sources[i], paths[i])
        return list(zip(libs, later))

    def _optimize(self, source: str, so: Path) -> Future:
        """The Future of the gcc build of ``source``, published as ``so``: queued for a
        background worker, once per library however many plans ask."""
        fut = self._pending.get(so.stem)
        if fut is None:
            fut = self._pending[so.stem] = Future()
            _start_workers()
            with _background_lock:
                _unfinished[fut] = (self, source, so, fut)
            _queue.put(_unfinished[fut])
        return fut

    def _optimize_now(self, source: str, so: Path) -> ctypes.CDLL:
        """Compile ``source`` by gcc in a work directory of its own, load it, publish it
        (a background worker's job; ``_compile_many`` says why the order is safe)."""
        t0 = time.perf_counter()
        if _closing.is_set():
            raise CompileStopped("cc: background compile not started: the process is exiting")
        work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=self.cache_dir))
        try:
            proc, cmd = _spawn(self.compiler_for(source), source, so, work)
            with _background_lock:
                _running.add(proc)
            if _closing.is_set():  # exit began before the compiler was registered
                _kill_group(proc)
            try:
                _, err = proc.communicate()  # the GIL is released while gcc runs
            finally:
                with _background_lock:
                    _running.discard(proc)
            if _closing.is_set():
                raise CompileStopped("cc: background compile stopped: the process is exiting")
            if proc.returncode != 0:
                raise CompilerError(
                    f"cc: compiling a kernel failed ({' '.join(cmd[:-3])}):\n{err[-4000:]}"
                )
            lib = ctypes.CDLL(str(work / so.name))
            with _publish_lock:
                _publish(work / so.name, so)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with _background_lock:
            self.stats["background_compiles"] += 1
            self.stats["background_s"] += time.perf_counter() - t0
        return lib

    def load(self, key: str) -> ctypes.CDLL | None:
        """The library published under cache key ``key`` (``_key``), if it verifies."""
        return self._load_verified(self.cache_dir / f"{key}.so")

    def _key(self, source: str) -> str:
        cc, version, flags, prelude = self.compiler_for(source)
        text = "\0".join((cc, version, " ".join(flags), prelude + source))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _load_verified(self, so: Path) -> ctypes.CDLL | None:
        digest_file = so.with_suffix(".sha256")
        try:
            want = digest_file.read_text().strip()
            data = so.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(so.stem.encode() + data).hexdigest() != want:
            return None  # corrupted, truncated, mid-publish, another key's, or not ours
        self.stats["loads"] += 1
        return ctypes.CDLL(str(so))

    def _compile_many(self, jobs: list[tuple[str, Path, bool]]) -> list[ctypes.CDLL | None]:
        """Run one compiler per (source, library, first tier) at once, load each, then
        publish it.

        Each compile runs in a work directory of this process's own, under the name the
        cache entry will have, so the same source gives the same bytes in every process.
        The library is loaded from those bytes, which no other process can touch, and only
        then published, so a second process compiling the same source at the same moment
        can never make this one fail: at worst it publishes the same bytes again. A
        first-tier build (tcc standing in for gcc -O3) is loaded and never published, as
        the entry's name is the gcc build's; where it fails, its place holds None.
        """
        t0 = time.perf_counter()
        sweep_stale_work_dirs(self.cache_dir)
        work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=self.cache_dir))
        running = []
        try:
            for source, so, first in jobs:
                build = self.tcc_build() if first else self.compiler_for(source)
                proc, cmd = _spawn(build, source, so, work)
                self.stats["tcc_compiles"] += build[0] == self.tcc
                running.append((proc, cmd, so, first))
            libs: list[ctypes.CDLL | None] = []
            for proc, cmd, so, first in running:
                _, err = proc.communicate()
                if proc.returncode != 0 and first:
                    libs.append(None)
                elif proc.returncode != 0:
                    raise CompilerError(
                        f"cc: compiling a kernel failed ({' '.join(cmd[:-3])}):\n{err[-4000:]}"
                    )
                else:
                    libs.append(ctypes.CDLL(str(work / so.name)))
                    if not first:
                        _publish(work / so.name, so)
        finally:
            for proc, *_ in running:
                if proc.poll() is None:
                    _kill_group(proc)
            shutil.rmtree(work, ignore_errors=True)
        self.stats["compiles"] += len(jobs)
        self.stats["compile_s"] += time.perf_counter() - t0
        return libs

    def tcc_build(self) -> tuple[str, str, tuple[str, ...], str]:
        """tcc as ``compiler_for`` names it: (compiler, version, flags, prelude)."""
        assert self.tcc is not None
        return self.tcc, self.tcc_version, TCC_FLAGS, TCC_PRELUDE


def _spawn(build, source: str, so: Path, work: Path) -> tuple[subprocess.Popen, list[str]]:
    """Write ``source`` into ``work`` and start ``build``'s compiler (``compiler_for``'s
    tuple) on it, making ``so.name`` there: in a session of its own, so that killing it
    (an interrupted compile, exit during a background one) reaches cc's whole tree."""
    cc, _, flags, prelude = build
    (work / f"{so.stem}.c").write_text(prelude + source)
    cmd = [cc, *flags, "-o", so.name, f"{so.stem}.c", "-lm"]
    proc = subprocess.Popen(
        cmd,
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, cmd


# The background workers, shared by every toolchain of the process: each takes a queued
# (toolchain, source, library path, Future) and runs gcc on it. Daemon threads, so that
# exiting never waits for them; at exit ``_stop_background`` kills the compilers running.
_queue: queue.SimpleQueue = queue.SimpleQueue()
_workers: list[threading.Thread] = []
_running: set[subprocess.Popen] = set()  # background compilers now running
_unfinished: dict[Future, tuple] = {}  # jobs queued or running, for a forked child to redo
_background_lock = threading.Lock()
_closing = threading.Event()


def background_workers() -> int:
    """How many gcc builds run in the background at once: a core is left to the process's
    own thread, which keeps running plans (and building their tcc tier) meanwhile."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def _start_workers() -> None:
    with _background_lock:
        if _workers or _closing.is_set():
            return
        for n in range(background_workers()):
            t = threading.Thread(target=_work, name=f"limn-cc-{n}", daemon=True)
            t.start()
            _workers.append(t)


def _work() -> None:
    while True:
        job = _queue.get()
        if job is None:
            return
        tc, source, so, fut = job
        # a job a forked child redoes may be running already: in its parent, at the fork
        if not fut.running() and not fut.set_running_or_notify_cancel():
            continue
        try:
            lib = tc._load_verified(so) or tc._optimize_now(source, so)
        except BaseException as e:  # noqa: BLE001 - the future carries it to the device
            _finish(fut)
            fut.set_exception(e)
        else:
            _finish(fut)
            fut.set_result(lib)


def _finish(fut: Future) -> None:
    with _background_lock:
        _unfinished.pop(fut, None)


def _forget_background_in_child() -> None:
    """A forked child has none of its parent's threads, and a lock one of them held at the
    fork would stay held: it gets new locks and a queue, and its own workers redo the
    builds its parent had not finished, so the child's waits end (a build the parent
    publishes first is loaded instead)."""
    global _queue, _background_lock, _publish_lock
    _queue, _background_lock = queue.SimpleQueue(), threading.Lock()
    _publish_lock = threading.Lock()
    _workers.clear()
    _running.clear()
    if _unfinished:
        for job in _unfinished.values():
            _queue.put(job)
        _start_workers()


os.register_at_fork(after_in_child=_forget_background_in_child)


@atexit.register
def _stop_background() -> None:
    """At exit: kill each background compiler's process group and let its worker remove
    its work directory; builds still queued end with an error, never a published file."""
    _closing.set()
    with _background_lock:
        running = list(_running)
    for proc in running:
        _kill_group(proc)
    for _ in _workers:
        _queue.put(None)
    deadline = time.monotonic() + 2.0
    for t in _workers:
        t.join(max(0.0, deadline - time.monotonic()))


WORK_PREFIX = "work-"  # work-<pid>-<random>: one compiling process's temporary files


def _publish(built: Path, so: Path) -> None:
    """Rename the library into the cache, then its digest beside it.

    A reader that looks between the two renames (or while another process publishes the
    same entry) sees a pair that does not match, and rebuilds instead of loading.
    """
    digest = hashlib.sha256(so.stem.encode() + built.read_bytes()).hexdigest()  # key and bytes
    os.replace(built, so)
    tmp_digest = built.with_suffix(".sha256")
    tmp_digest.write_text(digest)
    os.replace(tmp_digest, so.with_suffix(".sha256"))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # cc and the cc1/as/ld it started
    except ProcessLookupError:
        pass
    proc.wait()


_swept: set[Path] = set()  # the cache directories this process has swept


def sweep_stale_work_dirs(cache_dir: Path) -> None:
    """Remove the work directories of compiling processes that died without cleaning up,
    on this process's first compile into ``cache_dir``: listing a cache of thousands of
    libraries at every compile cost ~2 ms each (a cold conformance run compiles ~1500
    units), and a process that dies later is swept by the next one to start."""
    if cache_dir in _swept:
        return
    _swept.add(cache_dir)
    for d in cache_dir.glob(f"{WORK_PREFIX}*"):
        try:
            pid = int(d.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cache_root() -> Path:
    base = os.environ.get("LIMN_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "limn"


def private_dir(path: Path) -> Path:
    """Create ``path`` for this user alone, or refuse one that others could write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"cannot write in {path}")
    except OSError as e:
        raise CompilerError(
            f"cc: the cache directory {path} is not usable ({e}); set LIMN_CACHE_DIR to a "
            "directory this user can write"
        ) from e
    st = path.stat()
    if st.st_uid != os.getuid():
        raise CompilerError(f"cc: cache directory {path} belongs to another user; refusing it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CompilerError(f"cc: cache directory {path} is writable by others; refusing it")
    return path


def _probe(cc: str, flags: list[str], d: Path) -> bool:
    src = d / "probe.c"
    if "-fopenmp" in flags:
        src.write_text("#include <omp.h>\nint f(void){return omp_get_max_threads();}\n")
    else:
        src.write_text("int f(int x){return x + 1;}\n")
    out = d / "probe.so"
    r = subprocess.run([cc, *flags, "-o", str(out), str(src)], capture_output=True)
    return r.returncode == 0


_TCC_CHECK = """
#include <math.h>
#include <stdint.h>
double limn_fused(double x) { return fma(x, x, -(x * x)); }
float limn_round(float x) { return __builtin_rintf(x) * (float)(int64_t)x; }
uint32_t limn_nan(float x) { float y = LIMN_NEG(x * NAN); uint32_t u; memcpy(&u, &y, 4);
  return u; }
"""


def find_tcc(tcc: bool | None = None) -> tuple[str | None, str]:
    """The Tiny C Compiler on PATH, if it builds, loads and runs a library with the
    prelude's builtins (fma fused, rint to even); ``(None, "")`` without it, or when
    ``tcc`` is False (``None``: ``LIMN_TCC=0`` turns it off)."""
    if tcc is None:
        tcc = os.environ.get("LIMN_TCC", "1") != "0"
    path = shutil.which("tcc") if tcc else None
    if path is None:
        return None, ""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "check.c", Path(tmp) / "check.so"
        src.write_text(TCC_PRELUDE + _TCC_CHECK)
        try:
            cmd = [path, *TCC_FLAGS, "-o", str(out), str(src), "-lm"]
            if subprocess.run(cmd, capture_output=True, timeout=30).returncode != 0:
                return None, ""
            lib = ctypes.CDLL(str(out))
            lib.limn_fused.restype, lib.limn_fused.argtypes = ctypes.c_double, [ctypes.c_double]
            lib.limn_round.restype, lib.limn_round.argtypes = ctypes.c_float, [ctypes.c_float]
            lib.limn_nan.restype, lib.limn_nan.argtypes = ctypes.c_uint32, [ctypes.c_float]
            # (1 + 2**-30)**2 = 1 + 2**-29 + 2**-60: only a fused multiply-add keeps the 2**-60
            if lib.limn_fused(1.0 + 2.0**-30) != 2.0**-60 or lib.limn_round(-3.5) != 12.0:
                return None, ""
            if lib.limn_nan(2.0) != 0xFFC00000:  # NAN is +nan, LIMN_NEG flips its sign
                return None, ""
            version = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError, AttributeError):
            return None, ""
    return path, (version.stdout.strip().splitlines() or ["tcc"])[0]


def find_toolchain(tcc: bool | None = None) -> Toolchain:
    """The system's ``cc``, checked by compiling a tiny library; raises with the reason.
    With it, ``tcc`` for the QUICK units where one is found (``find_tcc``)."""
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise CompilerError(
            f"set_device('c'): no C compiler: {cc!r} is not on PATH. Install gcc or clang "
            "(or set CC to a compiler) to use the c device; the numpy device needs none."
        )
    try:
        version = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        raise CompilerError(f"set_device('c'): {path} does not run: {e}") from e
    cache = private_dir(private_dir(cache_root()) / "c")
    with tempfile.TemporaryDirectory() as tmp:
        if not _probe(path, ["-shared", "-fPIC"], Path(tmp)) and not _probe(
            path, ["-shared", "-fPIC", "-fopenmp"], Path(tmp)
        ):
            raise CompilerError(f"set_device('c'): {path} cannot build a shared library")
        openmp = _probe(path, ["-shared", "-fPIC", "-fopenmp"], Path(tmp))
    tcc_path, tcc_version = find_tcc(tcc)
    return Toolchain(path, version, openmp, cache, tcc_path, tcc_version)
