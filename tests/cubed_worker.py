"""Cubed computations over limn_array chunks, run by tests/test_cubed.py in its own process.

    CUBED_BACKEND_ARRAY_API_MODULE=limn_array LIMN_DEVICE=c \
        python tests/cubed_worker.py OUT single|processes

cubed reads its backend namespace once, when it is imported, and its processes executor
spawns workers that import everything again; both come from the environment, so the
computation runs in a fresh interpreter. Every chunk function checks that it was handed a
limn_array Array on the device LIMN_DEVICE names, so a run that silently fell back to
numpy chunks fails. The results go to OUT (an .npz) for the test to hold against numpy.
"""

from __future__ import annotations

import os
import sys

import numpy as np


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "a": rng.standard_normal((6, 8)),
        "b": rng.standard_normal((8, 4)),
        "i": rng.integers(-50, 50, (6, 8)).astype(np.int32),
    }


def on_limn(x):
    import limn
    import limn_array

    if not isinstance(x, limn_array.Array) or limn.current_device() != os.environ["LIMN_DEVICE"]:
        raise TypeError(f"cubed handed a chunk of type {type(x)} on {limn.current_device()}")
    return x


def main(out: str, executor: str) -> None:
    import cubed
    import cubed.array_api as xp
    from cubed.runtime.executors.local import ProcessesExecutor

    spec = cubed.Spec(work_dir=os.path.dirname(out), allowed_mem="200MB")
    data = inputs()
    a = cubed.from_array(data["a"], chunks=(3, 4), spec=spec)
    b = cubed.from_array(data["b"], chunks=(4, 2), spec=spec)
    i = cubed.from_array(data["i"], chunks=(3, 4), spec=spec)
    a = cubed.map_blocks(on_limn, a, dtype=a.dtype)
    results = {
        "elementwise": xp.exp(xp.sin(a)) * 2 - xp.sqrt(xp.abs(a)) / (a * a + 1),
        "int_math": (i * 3 + 7) // 4 - (i % 5),
        "sum_axis0": xp.sum(a, axis=0),
        "max_axis1": xp.max(a, axis=1),
        "mean": xp.mean(a),
        "int_sum": xp.sum(i, axis=1),
        "matmul": xp.matmul(a, b),
        "rechunk": (a.rechunk((2, 8)) + 1) * xp.asarray(0.5, spec=spec),
        # cubed's var and std pass mean(..., dtype=) and take(x, 0, axis=) to the chunks,
        # argmax and argmin ask default_dtypes(device=...)
        "var_axis0": xp.var(a, axis=0, correction=1),
        "std": xp.std(a),
        "argmax_axis1": xp.argmax(a, axis=1),
        "argmin_axis0": xp.argmin(a, axis=0),
        "ones_cpu": xp.ones((6, 8), chunks=(3, 4), device="cpu", spec=spec) + a,
    }
    # cubed's processes executor (workers that import everything again) or its default,
    # one thread in this process: the fast case the default suite runs
    executor = ProcessesExecutor(max_workers=2) if executor == "processes" else None
    computed = cubed.compute(*results.values(), executor=executor)
    arrays = {}
    for name, r in zip(results, computed):
        arrays[name] = np.asarray(r)
        arrays[f"{name}.type"] = np.array(type(r).__module__)
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
