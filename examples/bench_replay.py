"""The Python of one run of a 100-kernel plan (issue 38: <= 30 us), on the c device.

A chain of 100 map-and-sum steps of an 8x8 float32 array makes one plan of 101 kernels;
the script times ``jit.execute`` of it with the driver's foreign call replaced by a no-op
(the Python around the call: binding buffers, wrapping results), and the call alone.

    OMP_NUM_THREADS=1 uv run python examples/bench_replay.py
"""

import time

import numpy as np

import limn
from limn import Tensor
from limn.runtime.jit import execute, walk

limn.set_device("c")
dev = limn.get_device("c")
x = Tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
y = x
for _ in range(100):  # a sum between two maps cuts a kernel each time
    y = y * 1.01 + y.sum(axis=1, keepdims=True) * 1e-3
_, inputs, bufs, _, _ = walk([y.node])
plan, _ = dev.plan_for([y.node])
in_bufs = [bufs[i] for i in plan.slots]
d = plan.runner
print("kernels", len(plan.graph.kernels), "rows", len(d.rows))


def best(fn, n=300):
    for _ in range(30):
        fn()
    out = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t) / n * 1e6)
    return min(out)


arena = d.free[-1] if d.free else d._arena()
table, views, err, ns, _ = arena
for b, a in enumerate(in_bufs):
    table[b] = a.data.ctypes.data
for b, shape, dtype in d.bound:
    table[b] = np.empty(shape, dtype).ctypes.data
c_only = best(lambda: d.drive(d.table, 0, len(d.rows), table, err, None))
whole = best(lambda: execute(plan, in_bufs, None))
print(f"one execute of the plan {whole:.1f} us, the C call alone {c_only:.1f} us")
real = d.drive
d.drive = lambda *a: 0  # the Python around the one foreign call, without the call
py = best(lambda: execute(plan, in_bufs, None), 2000)
d.drive = real
print(
    f"Python of one run of a {len(plan.graph.kernels)}-kernel plan "
    f"(execute without the C call): {py:.1f} us"
)
