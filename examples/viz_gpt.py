"""Write the stage viewer for training steps of a tiny GPT: every kernel of the step.

    uv run --no-dev python examples/viz_gpt.py [--out gpt.html] [--steps 2] [--device c]

The model is limn.nn's own: token and position embeddings, two ``nn.GPTBlock`` (pre-norm,
causal attention: the fused CUSTOM kernels on a device that has them, composed from
matmul and softmax elsewhere; a GELU MLP), a final LayerNorm and a linear head, trained
with AdamW on random tokens. Every graph the steps realize is recorded, as
``LIMN_VIZ=gpt.html`` would record it, with the line and module that made each node
(``blocks.1.attn``) and each kernel's measured time, and written as one page.
"""

from __future__ import annotations

import argparse

import numpy as np

import limn
from limn import Tensor, nn, optim
from limn.viewer import record


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d: int, t: int, layers: int, heads: int):
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList([nn.GPTBlock(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.tok(idx) + self.pos(Tensor.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
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
    opt = optim.AdamW(model.named_parameters(), lr=1e-3)
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
