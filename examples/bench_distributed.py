"""Measure limn.distributed on this machine: all-reduce throughput and 2-rank step overhead.

    uv sync --extra mpi
    uv run mpiexec -n 2 python examples/bench_distributed.py [--device c|numpy] [--rounds 3]

All-reduce: float32 arrays from 64 KiB to 64 MiB, summed in place over the ranks, through
``World.all_reduce`` (the polled, non-blocking path training uses) and through a plain
blocking ``MPI_Allreduce`` for comparison; GB/s is bytes reduced per second on one rank
(the "algorithm bandwidth"), median of the repetitions with min..max.

Step overhead: an MLP trained with AdamW at a per-rank batch of 64. "1 rank" is rank 0
alone training on its own (no DataParallel; rank 1 idles at a barrier); "2 ranks" is both
ranks training data-parallel on 64 items each, so the two do the same work per process
and the difference is what data parallelism costs: the gradient buckets, the all-reduce,
and sharing the machine's cores. Rounds alternate the two, and medians are reported. On
the c device each rank runs one thread (``--threads``), so both measurements use one core
per process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import limn
from limn import Tensor, distributed, nn, optim


def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.3f}  ({min(xs):.3f}..{max(xs):.3f})"


def bench_all_reduce(world, MPI) -> None:
    world.print("all-reduce, float32, in place, GB/s per rank: median (min..max)")
    world.print(f"{'bytes':>10}  {'World.all_reduce':>24}  {'blocking MPI_Allreduce':>24}")
    for size in (1 << 16, 1 << 20, 1 << 24, 1 << 26):
        a = np.ones(size // 4, np.float32)
        reps = max(5, min(200, (1 << 28) // size))
        world.barrier()
        ours = timed(lambda a=a: world.all_reduce([a], average=False), reps)
        world.barrier()
        raw = timed(lambda a=a: world.comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), reps)
        gbs = lambda ts, size=size: [size / t / 1e9 for t in ts]  # noqa: E731
        world.print(f"{size:>10}  {summary(gbs(ours)):>24}  {summary(gbs(raw)):>24}")


def make_model(width: int):
    limn.set_seed(0)
    model = nn.Sequential(
        nn.Linear(64, width), Tensor.relu, nn.Linear(width, width), Tensor.relu, nn.Linear(width, 8)
    )
    return model, optim.AdamW(model.named_parameters(), lr=1e-3)


def train_steps(model, opt, ddp, world, steps: int, batch: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    x = Tensor(rng.standard_normal((batch, 64)).astype(np.float32))
    y = Tensor(rng.standard_normal((batch, 8)).astype(np.float32))
    times = []
    for _ in range(steps + 2):  # two warm-up steps compile and fill the plan cache
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        if ddp is None:
            opt.step(loss)
        else:
            ddp.sync_gradients(loss)
            opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    return times[2:]


def bench_steps(world, rounds: int, steps: int, batch: int, width: int) -> None:
    single, double = [], []
    model, opt = make_model(width)
    ddp = distributed.DataParallel(model, world)
    n_params = sum(p.size for p in model.parameters())
    for _ in range(rounds):
        if world.rank == 0:
            single += train_steps(model, opt, None, world, steps, batch, 1)
        world.barrier()
        double += train_steps(model, opt, ddp, world, steps, batch, 2 + world.rank)
        world.barrier()
    if not world.is_main:
        return
    s, d = statistics.median(single), statistics.median(double)
    print(
        f"\nstep time, MLP 64-{width}-{width}-8 ({n_params} parameters, "
        f"{4 * n_params / 1e6:.2f} MB of gradients), AdamW, {batch} items per rank, "
        f"device {limn.current_device()}, ms: median (min..max)"
    )
    print(f"1 rank alone      {summary([1e3 * t for t in single])}")
    print(f"{world.size} ranks, DP       {summary([1e3 * t for t in double])}")
    print(f"overhead of {world.size} ranks vs 1: {100 * (d / s - 1):+.1f}% per step", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="c", choices=["numpy", "c"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1, help="c device threads per rank")
    args = parser.parse_args()
    world = distributed.init()
    from mpi4py import MPI

    limn.set_device(args.device)
    if args.device == "c":  # one thread per rank: ranks, not threads, share the cores
        limn.get_device("c").set_threads(args.threads)
    world.print(f"{world.size} ranks, {MPI.Get_library_version().splitlines()[0]}")
    bench_all_reduce(world, MPI)
    bench_steps(world, args.rounds, args.steps, 64, args.width)


if __name__ == "__main__":
    main()
