"""One live line on stderr while a compile runs, so a long first step is not silent.

A plan build (``jit.py``) and every C compile (``cc.py``) run between ``start`` and
``end``; the outermost one owns the line and inner ones add their units to its count. After
``AFTER`` seconds the line appears (``limn: compiling 12/34 units, 3.4 s``) and a
timer redraws it; when the work ends it stays as ``limn: compiled 34 units in 17.6 s``.
A plan built again for a structure met before at other shapes says so, and which shape
changed (``jit.CompiledDevice.resized``): a loop whose sizes vary compiles per size.
Work quicker than ``AFTER`` prints nothing, and nothing is printed when stderr is not a
terminal (a log file, a test run), so only a person watching sees it.

While the line is open the cyclic garbage collector waits: a build makes tens of thousands
of objects that all live on (rows, kernels, nests), and each full collection they trigger
walks the program's whole heap (a SciPy client's: a fifth of a 1,000-resample
``permutation_test``'s planning time went to two of them).
"""

from __future__ import annotations

import gc
import sys
import threading
import time

AFTER = 1.0  # seconds of work before the line appears
_here = threading.local()


class Line:
    def __init__(self, why: str = ""):
        self.done = self.total = self.depth = 0
        self.why = why  # why the plan is built, if it is a structure met before
        self.gc = gc.isenabled()  # the collector's state to restore at the end
        gc.disable()
        self.t0 = time.perf_counter()
        self.stop, self.lock = threading.Event(), threading.Lock()
        if sys.stderr.isatty():
            threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self.stop.wait(0.25):
            self.draw()

    def draw(self, final: bool = False) -> None:
        took = time.perf_counter() - self.t0
        if took < AFTER or not sys.stderr.isatty():
            return
        if final:
            what = f"compiled {self.total} units" if self.total else "built a plan"
            text = f"{what} in {took:.1f} s{self.why}\n"
        else:
            count = f" {self.done}/{self.total} units" if self.total else ""
            text = f"compiling{count}, {took:.1f} s{self.why}"
        with self.lock:
            if final or not self.stop.is_set():
                sys.stderr.write(f"\r\x1b[Klimn: {text}")
                sys.stderr.flush()


def start(units: int = 0, why: str = "") -> Line:
    """The live line for work about to run (``units`` more to compile; ``why``: a plan built
    again, and why): this thread's open one, which then counts them too, or a new one."""
    line = getattr(_here, "line", None) or Line(why)
    _here.line = line
    line.depth += 1
    line.total += units
    return line


def end(line: Line) -> None:
    """The work ``start`` gave ``line`` for is over; the outermost draws it once more."""
    line.depth -= 1
    if not line.depth:
        _here.line = None
        line.stop.set()
        line.draw(final=True)
        if line.gc:
            gc.enable()
