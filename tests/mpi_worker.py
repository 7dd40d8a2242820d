"""What each rank runs in tests/test_distributed.py (launched by mpiexec), and the model,
data and step that the tests' 1-rank reference shares with it.

    mpiexec -n 2 python tests/mpi_worker.py SCENARIO DEVICE OUTDIR

Scenarios: ``train`` (10 AdamW steps; rank 0 checkpoints after step 5), ``capture`` (the
same under limn.capture), ``resume`` (from that checkpoint, steps 6..10), ``raise`` (rank 1
raises in step 3), ``silent`` (rank 1 stops taking part in step 3), ``exit`` (rank 1's
program ends in step 3), ``killed`` (rank 1 dies in step 3). Each rank writes its
parameters and gradients after every step to OUTDIR/<scenario>_rank<r>_step<s>.npz.
``branch`` and ``disagree`` are the ranks-that-differ checks below.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import limn
from limn import Tensor, nn, optim

STEPS, GLOBAL_BATCH, SAVE_AFTER = 10, 8, 5


def build(seed: int):
    limn.set_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), Tensor.tanh, nn.Linear(16, 3))
    opt = optim.AdamW(model.named_parameters(), lr=1e-2, weight_decay=1e-2)
    return model, opt


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of ``step`` (1-based): the same on every rank and in the reference."""
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((GLOBAL_BATCH, 6)).astype(np.float32)
    y = np.sin(x[:, :3] * 2 + x[:, 3:]).astype(np.float32)
    return x, y


def params(model) -> dict[str, np.ndarray]:
    """The parameters and, under ``grad.<name>``, the gradients the step used."""
    out = {k: v.numpy() for k, v in model.named_parameters()}
    out.update({f"grad.{k}": v.grad.numpy() for k, v in model.named_parameters()})
    return out


def reference(steps=range(1, STEPS + 1)) -> list[dict[str, np.ndarray]]:
    """One process, the whole batch: what every 2-rank run must reproduce."""
    model, opt = build(0)
    out = []
    for s in steps:
        x, y = batch(s)
        loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
        loss.backward()
        opt.step(*(p.grad for p in model.parameters()))  # the gradients, kept for the check
        out.append(params(model))
        opt.zero_grad()
    return out


def branch(world, outdir: Path, captured: bool) -> None:
    """A parameter that gets a gradient on rank 0 only (``extra``), one that gets none
    anywhere (``unused``): 3 SGD steps, plainly or captured."""
    from limn import distributed

    limn.set_seed(0)
    m = nn.Sequential(nn.Linear(6, 3))
    m.extra, m.unused = nn.Linear(6, 3), nn.Linear(6, 3)
    opt = optim.SGD(m.named_parameters(), lr=0.1, momentum=0.9)
    ddp = distributed.DataParallel(m)

    def step(x):
        opt.zero_grad()
        loss = m(x).sum() + (m.extra(x).sum() if world.rank == 0 else 0)
        loss.backward()
        ddp.sync_gradients()
        opt.step()

    run = limn.capture(step) if captured else step
    for s in range(1, 4):
        run(Tensor(np.full((4, 6), float(s), np.float32)))
        p = {k: v.numpy() for k, v in m.named_parameters()}
        p.update(
            {f"grad.{k}": v.grad.numpy() for k, v in m.named_parameters() if v.grad is not None}
        )
        np.savez(outdir / f"branch_rank{world.rank}_step{s}.npz", **p)


def disagree(world) -> None:
    """Each collective with ranks that disagree: every rank must refuse it, and go on."""
    from limn import distributed as dist

    r = world.rank
    cases = {
        "lengths": lambda: world.all_reduce([np.ones(4 + 2 * r, np.float32)]),
        "dtypes": lambda: world.all_reduce([np.ones(4, (np.float32, np.float64)[r])]),
        "roots": lambda: world.broadcast({"w": Tensor(np.ones(3, np.float32))}, root=r),
        "object roots": lambda: world.broadcast_object("x", root=r),
        "shapes": lambda: dist.DataParallel(nn.Linear(3 + r, 2), broadcast=False),
        "names": lambda: world.broadcast({f"w{r}": Tensor(np.ones(3, np.float32))}),
        "extra": lambda: dist.DataParallel(nn.Linear(3, 2)).sync_gradients(
            Tensor(np.ones(1 + r, np.float32))
        ),
        "collectives": lambda: world.barrier() if r == 0 else world.broadcast_object("x"),
    }
    for name, call in cases.items():
        try:
            call()
        except ValueError as e:
            print(f"rank {r} refused {name}: {e}", flush=True)
        else:
            print(f"rank {r} accepted {name}", flush=True)
    world.all_reduce([np.ones(4, np.float32)])  # and the ranks still work together
    print(f"rank {r} still in step", flush=True)


def main(scenario: str, device: str, outdir: Path) -> None:
    from limn import distributed

    world = distributed.init(timeout=60.0)
    limn.set_device(device)
    if scenario in ("branch", "branch-captured"):
        return branch(world, outdir, scenario == "branch-captured")
    if scenario == "disagree":
        return disagree(world)
    # every rank starts from its own random weights: the broadcast must fix them
    model, opt = build(world.rank + (100 if scenario == "resume" else 0))
    ddp = distributed.DataParallel(model, broadcast=scenario != "resume")
    first = 1
    if scenario == "resume":
        world.load_into({"model": model, "optim": opt}, outdir / "ckpt.safetensors")
        first = SAVE_AFTER + 1

    def step(x, y):
        opt.zero_grad()
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        (mean_loss,) = ddp.sync_gradients(loss)
        opt.step()
        return mean_loss

    run = limn.capture(step) if scenario == "capture" else step
    for s in range(first, STEPS + 1):
        if scenario == "silent" and s == 3:
            world.timeout = 3.0  # short from here on, where rank 1 goes quiet
        if world.rank == 1 and s == 3:
            if scenario == "raise":
                raise ValueError("rank 1 fails on purpose in step 3")
            if scenario == "silent":
                time.sleep(60)  # alive, but never reaches the all-reduce
            if scenario == "exit":
                sys.exit(0)  # cleanly, before the others are done
            if scenario == "killed":
                os._exit(3)  # no exit handler runs
        x, y = batch(s)
        mean_loss = run(Tensor(world.shard(x)), Tensor(world.shard(y)))
        world.print(f"step {s} loss {mean_loss.item():.6f}")
        np.savez(outdir / f"{scenario}_rank{world.rank}_step{s}.npz", **params(model))
        if scenario == "train" and s == SAVE_AFTER:
            world.save({"model": model, "optim": opt}, outdir / "ckpt.safetensors")
    if scenario == "capture":  # every step after the first replayed the recording
        assert run.records == 1, run.records
    world.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
