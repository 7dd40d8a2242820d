"""Export the story model's next-byte step as C, build it with a short C main, and check
that it samples the bytes limn samples.

    uv run python examples/export_story.py --checkpoint stories.safetensors [--out DIR]
    uv run python examples/export_story.py          # trains the default model first (~4 min)

``--checkpoint`` is what ``examples/train_stories.py --checkpoint PATH`` saves. The step
(``limn.generate.step_function``: a byte, its position and the kv caches in; the next
byte's logits and the caches out) goes through ``limn.export_c`` into ``story.c``,
``story.h`` and ``story.bin``; ``examples/story_main.c`` is the loop around it, limn's
sampling rule in C. The example builds the pair with ``cc -O3`` (no Python, no limn, no
OpenMP), checks that ``cc -std=c11 -O2 -Wall`` says nothing, generates from the same
prompt, seed and rule on both sides, and prints the sizes and whether the bytes match;
the exit status is 1 when they do not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train_stories import DEFAULT, GPT, TEMPERATURE, TOP_K  # noqa: E402
from train_stories import main as train  # noqa: E402

import limn  # noqa: E402
from limn import Tensor, serialize  # noqa: E402
from limn.generate import empty_cache, generate, step_function  # noqa: E402

PROMPT = "Once upon a time"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="a train_stories checkpoint (default: train one)")
    ap.add_argument("--out", default="story_c", help="where the C files go")
    ap.add_argument("--bytes", type=int, default=300, help="bytes to sample on each side")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cc = shutil.which("cc")
    if cc is None:
        sys.exit("export_story: needs a C compiler (cc)")
    limn.set_device("c")
    if args.checkpoint:
        cfg = {k: DEFAULT[k] for k in ("ctx", "d", "layers", "heads")}
        model = GPT(**cfg)
        serialize.load_into({"model": model}, args.checkpoint, strict=False)
    else:
        model = train(["--sample", "0"])["model"]
    model.eval()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kv = [Tensor(a) for a in empty_cache(model)]
    example = [Tensor(np.zeros((1, 1), np.int32)), Tensor(np.zeros(1, np.int32)), *kv]
    with limn.no_grad():
        limn.export_c(step_function(model), *example, path=out / "story.c")
    shutil.copy(HERE / "story_main.c", out / "story_main.c")
    for f in ("story.c", "story.h", "story.bin"):
        print(f"{f:10} {os.path.getsize(out / f):>10,} bytes")

    sources = ["story_main.c", "story.c"]
    strict = [cc, "-std=c11", "-O2", "-Wall", "-o", "story_c11", *sources, "-lm"]
    said = subprocess.run(strict, cwd=out, capture_output=True, text=True).stderr
    warned = "warning" in said and said  # gcc's note on 64-byte vectors' ABI is none
    print(f"{' '.join(strict[:4])}: {'no warnings' if not warned else warned}")
    build = [cc, "-O3", "-o", "story", *sources, "-lm"]
    subprocess.run(build, cwd=out, check=True)
    print(" ".join(build))

    rule = [str(TEMPERATURE), str(TOP_K), str(args.seed)]
    run = ["./story", "story.bin", str(model.ctx), PROMPT, str(args.bytes), *rule]
    t = time.perf_counter()
    c_text = subprocess.run(run, cwd=out, capture_output=True, check=True).stdout
    c_time = time.perf_counter() - t
    t = time.perf_counter()
    with limn.no_grad():
        ours = bytes(generate(model, PROMPT.encode(), args.bytes, TEMPERATURE, TOP_K, args.seed))
    limn_time = time.perf_counter() - t
    print(f"the C program ({c_time:.2f} s, with its start):")
    print(c_text.decode("utf-8", errors="replace"))
    print(f"limn ({limn_time:.2f} s, with its first compile)")
    same = c_text == ours
    if not same:
        at = next(i for i, (a, b) in enumerate(zip(c_text, ours)) if a != b)
        print(f"limn differs from byte {at}:\n{ours.decode('utf-8', errors='replace')}")
    print(f"target {'met' if same else 'MISSED'}: the exported model samples limn's bytes")
    print(f"target {'met' if not warned else 'MISSED'}: cc -std=c11 -O2 -Wall says nothing")
    return 0 if same and not warned else 1


if __name__ == "__main__":
    sys.exit(main())
