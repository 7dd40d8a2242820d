"""The cuda device's checks that need a GPU, as one script for a machine that has one.

    uv sync --extra cuda && uv run python examples/gpu_check.py

Runs, each against the numpy device: the shared graph corpus (through
``tests/test_cuda.py``'s GPU tests), a grid-stride map past one launch's grid, atomic
scatter collisions on one row, the tiled matmuls at every width and tail in float32 and
float64, and long split reduces; then the timed workloads that exist in examples/ (the
GPT step of bench_train.py, bench_attention.py, a few hundred steps of train_stories.py)
with ``--device cuda``, each given a time limit so the whole run stays within 10 minutes.
Prints one line per check and exits non-zero if any failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import limn  # noqa: E402
from ir.cuda import render  # noqa: E402
from limn import Tensor  # noqa: E402

failed: list[str] = []


def check(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    ok = err <= tol * max(1.0, scale)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs error {err:.3g}")
    if not ok:
        failed.append(name)


def run(dev: str, fn):
    limn.set_device(dev)
    try:
        return fn().numpy()
    finally:
        limn.set_device("numpy")


def main() -> int:
    t0 = time.time()
    try:
        limn.set_device("cuda")
    except RuntimeError as e:
        sys.exit(f"gpu_check: needs a GPU, and this machine has none usable: {e}")
    limn.set_device("numpy")
    rng = np.random.default_rng(0)

    n = render.THREADS * render.MAX_BLOCKS * 3 + 17  # three strides of the capped grid
    x = rng.standard_normal(n).astype(np.float32)
    check(
        "grid-stride map past one launch",
        run("cuda", lambda: (Tensor(x) * 2 + 1).relu()),
        np.maximum(x.astype(np.float64) * 2 + 1, 0),
        1e-6,
    )

    base = np.zeros((4, 8), np.float32)
    idx = np.zeros((1000, 8), np.int64)  # every row lands on row 0: collisions on one row
    src = rng.standard_normal((1000, 8)).astype(np.float32)
    want = base.astype(np.float64).copy()
    want[0] += src.astype(np.float64).sum(0)
    check(
        "atomic scatter collisions on one row",
        run("cuda", lambda: Tensor(base).scatter_add(0, Tensor(idx), Tensor(src))),
        want,
        1e-5,
    )

    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        for m, k, n_ in [
            (16, 16, 16),
            (64, 64, 64),
            (100, 70, 90),
            (17, 33, 130),
            (65, 1000, 63),
            (1024, 1024, 1024),
            (3, 5, 7),
        ]:
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n_)).astype(dtype)
            want = a.astype(np.float64) @ b.astype(np.float64)
            check(
                f"matmul {m}x{k}x{n_} {np.dtype(dtype).name}",
                run("cuda", lambda a=a, b=b: Tensor(a) @ Tensor(b)),
                want,
                tol * k,
            )
            check(
                f"matmul x@W.T {m}x{k}x{n_} {np.dtype(dtype).name}",
                run("cuda", lambda a=a, b=b: Tensor(a) @ Tensor(b.T.copy()).transpose()),
                want,
                tol * k,
            )

    y = rng.standard_normal((3, 1 << 20)).astype(np.float32)
    check(
        "split reduce, row sums",
        run("cuda", lambda: Tensor(y).sum(1)),
        y.astype(np.float64).sum(1, keepdims=True),
        1e-4,
    )
    check("split reduce, full max", run("cuda", lambda: Tensor(y).max()), y.max(), 0)
    a = run("cuda", lambda: Tensor(y).sum())
    b = run("cuda", lambda: Tensor(y).sum())
    print(
        f"{'ok  ' if a.tobytes() == b.tobytes() else 'FAIL'} split reduce gives the same bits twice"
    )

    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", os.path.join(ROOT, "tests/test_cuda.py")],
        env=env,
        timeout=240,
    )
    if r.returncode:
        failed.append("tests/test_cuda.py on the GPU")
    for script, args in [
        ("bench_train.py", ["--device", "cuda", "--quick"]),
        ("bench_attention.py", ["--device", "cuda"]),
        ("train_stories.py", ["--device", "cuda", "--steps", "300"]),
    ]:
        path = os.path.join(ROOT, "examples", script)
        if not os.path.exists(path):
            print(f"skip {script}: not in this checkout")
            continue
        try:
            r = subprocess.run([sys.executable, path, *args], env=env, timeout=150)
            if r.returncode:
                failed.append(script)
        except subprocess.TimeoutExpired:
            print(f"FAIL {script}: over 150 s")
            failed.append(script)
    print(f"{len(failed)} failed in {time.time() - t0:.0f} s: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
