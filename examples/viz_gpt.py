"""Write the stage viewer for training steps of a tiny GPT: every kernel of the step.

    uv run --no-dev python examples/viz_gpt.py [--out gpt.html] [--steps 2] [--device c]

The model is a 2-layer pre-norm transformer (causal attention composed from matmul and
softmax, a GELU MLP) trained with AdamW on random tokens. Every graph the steps realize
is recorded, as ``LIMN_VIZ=gpt.html`` would record it, and written as one page.
"""

from __future__ import annotations

import argparse

import numpy as np

import limn
from limn import Tensor, nn, optim
from limn.viewer import record


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, d: int, heads: int):
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def __call__(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1 / (d // h) ** 0.5)
        mask = np.triu(np.full((t, t), -1e9, np.float32), 1)
        att = (att + Tensor(mask)).softmax(-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d: int, t: int, layers: int, heads: int):
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = [Block(d, heads) for _ in range(layers)]
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def __call__(self, idx: Tensor) -> Tensor:
        x = self.tok(idx) + self.pos(Tensor(np.arange(idx.shape[1])))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpt.html")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="numpy", choices=["numpy", "c"])
    args = ap.parse_args(argv)
    limn.set_device(args.device)
    limn.set_seed(0)
    vocab, t, batch = 64, 16, 4
    model = TinyGPT(vocab, d=32, t=t, layers=2, heads=4)
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    idx, tgt = (Tensor(rng.integers(0, vocab, (batch, t))) for _ in range(2))
    rec = record(args.out, at_exit=False)
    for _ in range(args.steps):
        opt.zero_grad()
        logits = model(idx).reshape(batch * t, vocab)
        loss = nn.cross_entropy(logits, tgt.reshape(batch * t))
        loss.backward()
        opt.step(loss)
        print(f"loss {loss.item():.4f}")
    rec.stop()
    out = rec.write()
    kernels = sum(len(g["kernels"]) for g, _ in rec.graphs.values())
    print(f"{out}: {len(rec.graphs)} graphs, {kernels} kernels")
    return str(out)


if __name__ == "__main__":
    main()
