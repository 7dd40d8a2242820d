"""What each rank runs in tests/test_distributed.py (launched by mpiexec), and the model,
data and step that the tests' 1-rank reference shares with it.

    mpiexec -n 2 python tests/mpi_worker.py SCENARIO DEVICE OUTDIR

Scenarios: ``train`` (10 AdamW steps; rank 0 checkpoints after step 5), ``capture`` (the
same under limn.capture), ``resume`` (from that checkpoint, steps 6..10), ``raise`` (rank 1
raises in step 3), ``silent`` (rank 1 stops taking part in step 3). Each rank writes its
parameters and gradients after every step to OUTDIR/<scenario>_rank<r>_step<s>.npz.
"""

from __future__ import annotations

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


def main(scenario: str, device: str, outdir: Path) -> None:
    from limn import distributed

    world = distributed.init(timeout=60.0)
    limn.set_device(device)
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
        x, y = batch(s)
        mean_loss = run(Tensor(world.shard(x)), Tensor(world.shard(y)))
        world.print(f"step {s} loss {mean_loss.item():.6f}")
        np.savez(outdir / f"{scenario}_rank{world.rank}_step{s}.npz", **params(model))
        if scenario == "train" and s == SAVE_AFTER:
            world.save({"model": model, "optim": opt}, outdir / "ckpt.safetensors")
    world.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
