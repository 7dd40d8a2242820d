"""Train a small MLP with AdamW on a toy regression; the loss must drop at least 20x.

    uv run --no-dev python examples/train_mlp.py [--device cpu|numpy|c] [--steps N]
        [--optimizer adamw|muon]

The target is a fixed smooth function of 8 inputs; the whole data set is one batch.
Each step is one realize: the forward pass, the gradients, every parameter and Adam
moment written in place, and the logged loss, computed together.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import limn
from limn import Tensor, nn, optim


def make_data(n: int = 256, d: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    a, b = rng.standard_normal((2, d)).astype(np.float32) / np.sqrt(d)
    y = np.sin(2 * x @ a) + 0.5 * np.tanh(x @ b) * (x @ a)
    return x, y.reshape(n, 1).astype(np.float32)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=["cpu", "numpy", "c"], help="default: limn's (cpu: c where cc works)"
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument(
        "--optimizer",
        default="adamw",
        choices=["adamw", "muon"],
        help="muon: the weight matrices on Muon, the biases on AdamW, stepped together",
    )
    args = parser.parse_args(argv)
    try:
        limn.set_device(args.device or limn.current_device())
    except (ValueError, RuntimeError) as e:
        sys.exit(f"train_mlp: device {args.device!r} is not available: {e}")
    print(f"device {limn.current_device()}", flush=True)

    limn.set_seed(0)
    xs, ys = make_data()
    x, y = Tensor(xs), Tensor(ys)
    model = nn.Sequential(
        nn.Linear(8, 64), Tensor.relu, nn.Linear(64, 64), Tensor.relu, nn.Linear(64, 1)
    )
    if args.optimizer == "adamw":
        opt = optim.AdamW(model.named_parameters(), lr=args.lr, weight_decay=1e-4)
    else:  # route by shape: 2-d parameters to Muon, the rest to AdamW
        opt = optim.muon_with_adamw(model, muon_lr=2 * args.lr, adamw_lr=args.lr)

    every = max(1, args.steps // 10)
    first = last = None
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        opt.step(loss)  # the update and the logged loss in one realize
        opt.zero_grad()
        last = loss.item()
        first = last if first is None else first
        if step % every == 0 or step == 1:
            rate = step / (time.perf_counter() - t0)
            print(f"step {step:5d}  loss {last:.6f}  {rate:6.1f} steps/s", flush=True)
    ratio = first / last
    print(f"loss {first:.6f} -> {last:.6f}: dropped {ratio:.1f}x (needs >= 20x)")
    return ratio


if __name__ == "__main__":
    sys.exit(0 if main() >= 20 else 1)
