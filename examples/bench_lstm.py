"""The word language model's LSTM step, timed in limn or torch (one library a process).

pytorch/examples' word_language_model trains Embedding -> 2-layer LSTM -> Linear over
batches of ``--bptt`` positions, carrying the hidden state from batch to batch (detached),
clipping the gradient norm at 0.25 and stepping plain SGD. This runs that step on random
tokens ``--batches`` times and prints the first step's seconds (graph build, schedule and
compile included), the median of the rest, and the total::

    uv run python examples/bench_lstm.py --lib limn --threads 1
    uv run python examples/bench_lstm.py --lib torch --threads 1

Run the two alternately and compare medians: the machine's load moves each by 20-30%.
Each batch is a slice of one tensor, as the example's ``get_batch`` takes it; limn plans
each slice's offset anew, so ``--copy-batches`` (a fresh tensor per batch) shows the step
once one plan serves every batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=["limn", "torch"], required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, default=21)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument(
        "--copy-batches", action="store_true",
        help="each batch a fresh tensor, not a slice of the whole (limn: one plan for all)",
    )  # fmt: skip
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if a.lib == "torch":
        import torch

        torch.set_num_threads(a.threads)
    else:
        import limn as torch
    nn = torch.nn

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.encoder = nn.Embedding(a.vocab, a.hidden)
            self.rnn = nn.LSTM(a.hidden, a.hidden, a.layers, dropout=0.2)
            self.decoder = nn.Linear(a.hidden, a.vocab)

        def forward(self, x, hidden):
            emb = self.drop(self.encoder(x))
            out, hidden = self.rnn(emb, hidden)
            return self.decoder(self.drop(out)).view(-1, a.vocab), hidden

    torch.manual_seed(0)
    model = RNNModel()
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    zeros = torch.zeros(a.layers, a.batch, a.hidden)
    hidden = (zeros, zeros)
    data = torch.randint(0, a.vocab, (a.batches + 1, a.bptt + 1, a.batch))
    times = []
    t_all = time.perf_counter()
    for i in range(a.batches):
        t0 = time.perf_counter()
        x, y = data[i, :-1], data[i, 1:]
        if a.copy_batches:
            x, y = torch.tensor(x.numpy().copy()), torch.tensor(y.numpy().copy())
        hidden = tuple(h.detach() for h in hidden)
        opt.zero_grad()
        logits, hidden = model(x, hidden)
        loss = nn.functional.cross_entropy(logits, y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    print(
        f"lib={a.lib} threads={a.threads} first_step_s={times[0]:.3f} "
        f"step_ms_median={statistics.median(times[1:]) * 1000:.1f} total_s={total:.2f}"
    )


if __name__ == "__main__":
    main()
