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
Who builds a unit is ``Toolchain.compiler_for``: gcc (``cc``) at -O3, a quick unit (small
kernels, ``ir/c/units.Unit``) at -O0, or by tcc where it is installed
(``limn/runtime/tcc.py``). A unit given as text alone is plain C, built at -O3.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ir.c.target import Target
from ir.c.units import Unit
from limn.runtime import progress, tcc
from limn.runtime.target import detect

# -fno-unswitch-loops: gcc 12 at -O3 miscompiles a vectorized loop that it also unswitches
# on a pad predicate (a reversed, masked read comes back in the wrong order; the corpus
# case is a flipped, value-padded view of a matmul). The pad splitting pass does the
# useful part of unswitching itself, so nothing is lost.
# -fno-trapping-math: no program reads the floating-point exception flags, and without it
# gcc will not vectorize floor, ceil, trunc or rint (the composite rows' C spellings).
# -ffp-contract=off: a*b+c is two roundings, as the nest (and the numpy reference) says;
# the one deliberate fused multiply-add is the tiled contraction's (ir/c/tile.py).
# The target's own flags (``-march``; ir/c/target.py) come after these.
FLAGS = (
    "-O3",
    "-fno-unswitch-loops",
    "-ffp-contract=off",
    "-shared",
    "-fPIC",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fwrapv",
    "-std=gnu11",
)


class CompilerError(RuntimeError):
    pass


_publish_lock = threading.Lock()  # one compile-and-publish at a time in this process


@dataclass
class Toolchain:
    cc: str
    version: str
    openmp: bool
    cache_dir: Path
    target: Target = field(default_factory=detect)  # its flags; its key in every cache key
    tcc: str | None = None  # the Tiny C Compiler for quick units, if found and checked
    tcc_version: str = ""
    stats: dict = field(
        default_factory=lambda: {"compiles": 0, "tcc_compiles": 0, "compile_s": 0.0, "loads": 0}
    )

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS + self.target.flags + (("-fopenmp",) if self.openmp else ())

    def compiler_for(self, unit: Unit) -> tuple[str, str, tuple[str, ...], str]:
        """Who builds ``unit``: (compiler, its version, flags, text put before the source),
        a quick unit (small kernels only) at -O0. The disk cache names a library by these
        and the source."""
        if self.tcc is not None and tcc.builds(unit):
            return self.tcc, self.tcc_version, tcc.FLAGS, tcc.PRELUDE
        flags = tuple("-O0" if f == "-O3" else f for f in self.flags) if unit.quick else self.flags
        return self.cc, self.version, flags, ""

    def library(self, unit: Unit | str) -> ctypes.CDLL:
        """The shared library built from ``unit``: from the disk cache, or compiled now."""
        return self.libraries([unit])[0]

    def libraries(self, units: list[Unit | str]) -> list[ctypes.CDLL]:
        """One library per unit; the ones not in the cache are compiled side by side."""
        sources = [u if isinstance(u, Unit) else Unit(u) for u in units]
        paths = [self.cache_dir / f"{self.key(src)}.so" for src in sources]
        libs = [self._load_verified(so) for so in paths]
        if all(lib is not None for lib in libs):
            return libs
        with _publish_lock:  # look again: another thread may have built them meanwhile
            libs = [lib or self._load_verified(so) for so, lib in zip(paths, libs)]
            todo = [i for i, lib in enumerate(libs) if lib is None]
            for i, lib in zip(todo, self._compile_many([(sources[i], paths[i]) for i in todo])):
                libs[i] = lib
        return libs

    def load(self, key: str) -> ctypes.CDLL | None:
        """The library published under cache key ``key`` (``Toolchain.key``), if it verifies."""
        return self._load_verified(self.cache_dir / f"{key}.so")

    def key(self, unit: Unit) -> str:
        """The cache key of ``unit``'s library: its compiler, flags, target and text."""
        cc, version, flags, prelude = self.compiler_for(unit)
        text = "\0".join((cc, version, " ".join(flags), self.target.key, prelude + unit.source))
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

    def _compile_many(self, jobs: list[tuple[Unit, Path]]) -> list[ctypes.CDLL]:
        """Run one compiler per (unit, library) at once, load each, then publish it.

        Each compile runs in a work directory of this process's own, under the name the
        cache entry will have, so the same source gives the same bytes in every process.
        The library is loaded from those bytes, which no other process can touch, and only
        then published, so a second process compiling the same source at the same moment
        can never make this one fail: at worst it publishes the same bytes again. Each
        compiler runs in a session of its own, so that killing it (an interrupted compile)
        reaches cc's whole tree.
        """
        t0 = time.perf_counter()
        sweep_stale_work_dirs(self.cache_dir)
        work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=self.cache_dir))
        running = []
        line = progress.start(len(jobs))  # a live line, in units, if this takes a while
        try:
            for source, so in jobs:
                cc, _, flags, prelude = self.compiler_for(source)
                (work / f"{so.stem}.c").write_text(prelude + source.source)
                cmd = [cc, *flags, "-o", so.name, f"{so.stem}.c", "-lm"]
                pipe = subprocess.PIPE
                proc = subprocess.Popen(
                    _with_python(cmd), cwd=work, stdout=pipe, stderr=pipe, text=True,
                    start_new_session=True, preexec_fn=_die_with(os.getpid()),
                )  # fmt: skip
                self.stats["tcc_compiles"] += cc == self.tcc
                running.append((proc, cmd, so))
            libs = []
            for proc, cmd, so in running:
                _, err = proc.communicate()
                line.done += 1
                if proc.returncode != 0:
                    raise CompilerError(
                        f"cc: compiling a kernel failed ({' '.join(cmd[:-3])}):\n{err[-4000:]}"
                    )
                libs.append(ctypes.CDLL(str(work / so.name)))
                _publish(work / so.name, so)
        finally:
            progress.end(line)
            for proc, *_ in running:
                if proc.poll() is None:
                    _kill_group(proc)
            shutil.rmtree(work, ignore_errors=True)
        self.stats["compiles"] += len(jobs)
        self.stats["compile_s"] += time.perf_counter() - t0
        return libs


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


# A compiler outlives a Python that was killed (no ``finally`` runs), and gcc's cc1 can hold
# gigabytes for minutes. On Linux each compile runs under a shell that the kernel signals
# when its Python dies (PR_SET_PDEATHSIG, which a process does not pass on to the cc1, as
# and ld it starts), and that shell then kills its session: the compiler's whole tree.
_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None  # not after a fork


def _with_python(cmd: list[str]) -> list[str]:
    return ["sh", "-c", 'trap "kill -9 0" TERM; "$@" & wait $!', "sh", *cmd] if _prctl else cmd


def _die_with(python: int):
    def preexec() -> None:
        _prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != python:  # it died before the line above
            os._exit(1)

    return preexec if _prctl else None


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


def find_toolchain(use_tcc: bool | None = None) -> Toolchain:
    """The system's ``cc``, checked by compiling a tiny library; raises with the reason.
    With it, tcc for the quick units where one is found (``tcc.find``; ``use_tcc`` False
    leaves it out, None asks ``LIMN_TCC``)."""
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
    return Toolchain(path, version, openmp, cache, detect(cc=path), *tcc.find(use_tcc))
