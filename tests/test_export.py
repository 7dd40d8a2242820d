"""limn.export_c: a plan as one C file, built by cc alone, computing the c device's bits."""

import runpy
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import limn
from ir.c.target import ISAS
from limn import Tensor, nn
from limn.export import export_c
from limn.generate import empty_cache, step_function
from limn.runtime import driver
from limn.runtime.target import detect

CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
/* driver WEIGHTS IN... : reads each input file, runs, writes out<j>.bin */
static const long OUT_BYTES[] = {@SIZES@};
int main(int argc, char **argv) {
  if (model_load(argv[1])) return 10;
  const void *in[MODEL_INPUTS]; void *out[MODEL_OUTPUTS];
  for (int j = 0; j < MODEL_INPUTS && j + 2 < argc; j++) {
    FILE *f = fopen(argv[j + 2], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    void *b = malloc(n); if (fread(b, 1, n, f) != (size_t)n) return 11; fclose(f); in[j] = b;
  }
  for (int j = 0; j < MODEL_OUTPUTS; j++) out[j] = malloc(OUT_BYTES[j]);
  int rc = model_run(in, out);
  for (int j = 0; j < MODEL_OUTPUTS; j++) {
    char p[32]; snprintf(p, sizeof p, "out%d.bin", j);
    FILE *f = fopen(p, "wb"); fwrite(out[j], 1, OUT_BYTES[j], f); fclose(f);
  }
  model_free();
  return rc;
}
"""


def _build_and_run(
    tmp_path: Path, fn, args, flags=("-std=c11", "-O2", "-Wall", "-Werror"), name="model"
):
    """Export ``fn``, build it with a driver, run it on ``args``; (C outputs, c device's).
    ``name``: the file's stem, the driver's prefix for the names it calls ``model_...``."""
    with limn.no_grad():
        info = export_c(fn, *args, path=tmp_path / f"{name}.c")
        want = fn(*args)
        want = [want] if isinstance(want, Tensor) else list(want)
        want = [t.numpy() for t in want]
    sizes = ", ".join(str(w.nbytes) for w in want)
    prefix = "model_1_model" if name == "1-model" else name
    driver = (
        DRIVER.replace("@SIZES@", sizes).replace("model", prefix).replace("MODEL", prefix.upper())
    )
    (tmp_path / "driver.c").write_text(driver.replace(f'"{prefix}.h"', f'"{name}.h"'))
    build = [CC, *flags, "-o", "driver", "driver.c", f"{name}.c", "-lm"]
    r = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True)
    # no warnings (gcc's note that 64-byte vector arguments changed ABI in gcc 4.6 is not one)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    files = []
    for j, a in enumerate(args):
        files.append(f"in{j}.bin")
        a.numpy().tofile(tmp_path / files[-1])
    r = subprocess.run(["./driver", f"{name}.bin", *files], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r
    got = [
        np.fromfile(tmp_path / f"out{j}.bin", w.dtype).reshape(w.shape) for j, w in enumerate(want)
    ]
    assert [shape for _, shape in info["outputs"]] == [w.shape for w in want]
    return got, want


def test_an_exported_gpt_step_computes_the_c_devices_bits(tmp_path):
    """The kv-cache step of a 2-layer GPT (gathers, LayerNorm, one-row matmuls, the fused
    attention kernel, the cache write) built with cc -std=c11 -O2 -Wall alone: no warning,
    every output the c device's bytes."""
    limn.set_device("c")
    gpt = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "train_stories.py"))
    limn.set_seed(0)
    model = gpt["GPT"](32, 32, 2, 2).eval()
    step = step_function(model)
    kv = [Tensor(np.random.default_rng(j).standard_normal(a.shape, np.float32)) for j, a in
          enumerate(empty_cache(model))]  # fmt: skip
    args = [Tensor(np.array([[65]], np.int32)), Tensor(np.array([5], np.int32)), *kv]
    got, want = _build_and_run(tmp_path, step, args)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    text = (tmp_path / "model.c").read_text()
    assert "(void *)limn_sdpa_fwd_float32," in text and "_Float16" not in text  # one dtype's
    assert driver.SOURCE in text  # the driver the c device runs its plans with


def test_an_exported_mlp_built_without_openmp_or_optimization_is_bit_exact(tmp_path):
    limn.set_device("c")
    limn.set_seed(1)
    mlp = nn.Sequential(nn.Linear(24, 48), Tensor.relu, nn.Linear(48, 5))
    x = Tensor(np.random.default_rng(2).standard_normal((3, 24), np.float32))
    (got,), (want,) = _build_and_run(tmp_path, mlp, [x], ("-O0", "-Wall"))
    assert got.tobytes() == want.tobytes()
    h = (tmp_path / "model.h").read_text()
    assert "in[0]: float32 [3, 24], 288 bytes" in h and "out[0]: float32 [3, 5]" in h


def test_a_missing_or_short_weights_file_is_refused_by_model_load(tmp_path):
    limn.set_device("c")
    lin = nn.Linear(4, 3)
    x = Tensor(np.ones((1, 4), np.float32))
    _build_and_run(tmp_path, lin, [x])
    (tmp_path / "model.bin").write_bytes((tmp_path / "model.bin").read_bytes()[:-4])
    r = subprocess.run(["./driver", "model.bin", "in0.bin"], cwd=tmp_path)
    assert r.returncode == 10
    r = subprocess.run(["./driver", "nothing.bin", "in0.bin"], cwd=tmp_path)
    assert r.returncode == 10


def test_export_refuses_a_function_that_assigns(tmp_path):
    limn.set_device("c")
    w = Tensor(np.ones(3, np.float32))

    def bump(x):
        w.assign(w + x)
        return w

    with pytest.raises(ValueError, match="export_c: fn assigns"):
        export_c(bump, Tensor(np.ones(3, np.float32)), path=tmp_path / "m.c")


def test_the_header_counts_one_input_per_argument_even_unread_or_passed_twice(tmp_path):
    """``model_run`` reads ``in[j]`` for argument j: an argument fn ignores keeps its slot,
    and one Tensor passed twice is two inputs (the caller may pass different bytes), so a
    caller that sizes ``in[]`` by the header never reads past it."""
    limn.set_device("c")
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = Tensor(np.full((2, 3), 0.5, np.float32))
    got, want = _build_and_run(tmp_path, lambda unused, a, b: a * 2 + b, [y, x, x])
    assert got[0].tobytes() == want[0].tobytes()
    h = (tmp_path / "model.h").read_text()
    assert "#define MODEL_INPUTS 3" in h and "in[2]: float32 [2, 3]" in h
    # the same Tensor twice, then different bytes in each slot: two inputs, not one
    (tmp_path / "in2.bin").write_bytes(np.ones((2, 3), np.float32).tobytes())
    r = subprocess.run(["./driver", "model.bin", "in0.bin", "in1.bin", "in2.bin"], cwd=tmp_path)
    assert r.returncode == 0
    out = np.fromfile(tmp_path / "out0.bin", np.float32).reshape(2, 3)
    assert np.array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3) * 2 + 1)


def test_a_file_name_that_is_no_c_identifier_gives_names_that_compile(tmp_path):
    limn.set_device("c")
    x = Tensor(np.arange(6, dtype=np.float32))
    (got,), (want,) = _build_and_run(tmp_path, lambda a: a.exp() + 1, [x], name="1-model")
    assert got.tobytes() == want.tobytes()
    assert "int model_1_model_run(" in (tmp_path / "1-model.h").read_text()


# what builds and runs each target's C here: the compiler and, where the host cannot run
# it, an emulator (None: compiled only)
CROSS = {"neon": ("aarch64-linux-gnu-gcc", ("qemu-aarch64",))}


def _contractions_and_attention():
    """Contractions of every layout the schedule meets (tiled, blocked, with edges), in
    float32 and float64, a long sum, and fused attention: one program."""
    from limn.attention import scaled_dot_product_attention

    rng = np.random.default_rng(7)
    a, b, g = (rng.standard_normal(s, np.float32) for s in ((37, 70), (70, 53), (37, 53)))
    q, k, v = (rng.standard_normal((2, 3, 40, 16), np.float32) for _ in range(3))
    outs = [Tensor(a.astype(np.float64)) @ Tensor(b.astype(np.float64))]
    outs += [Tensor(a) @ Tensor(b), Tensor(a) @ Tensor(b.T.copy()).T, Tensor(a).T.T @ Tensor(b)]
    outs += [Tensor(a.T.copy()).T @ Tensor(b), Tensor(a).T @ Tensor(g)]
    outs += [Tensor(rng.standard_normal(1 << 14, np.float32)).sum()]
    outs += [scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=True)]
    return outs


def _corpus():
    """Every case of the corpus but the writes, then ``_contractions_and_attention``."""
    from corpus import CASES

    outs = [t for c in CASES if not c.tags & {"assign"} for t in c.build()]
    return outs + _contractions_and_attention()


@pytest.mark.parametrize("isa", ISAS)
def test_every_targets_contractions_and_attention_compute_the_c_devices_bits(isa, tmp_path):
    """The C tuned for each target (tiles, lanes and blocks of its ISA; its FMAs fused by
    its instructions, or by fmaf where it has none) is built with that target's compiler
    and flags and run where this host can (NEON under qemu-user, an AVX-512 build only on
    an AVX-512 host): every output has the c device's bytes."""
    _every_target(isa, tmp_path, _contractions_and_attention)


@pytest.mark.slow
@pytest.mark.parametrize("isa", ISAS)
def test_every_targets_c_of_the_corpus_computes_the_c_devices_bits(isa, tmp_path):
    _every_target(isa, tmp_path, _corpus)


def _every_target(isa: str, tmp_path: Path, fn) -> None:
    cc, runner = CROSS.get(isa, (CC, ()))
    if shutil.which(cc) is None or runner and shutil.which(runner[0]) is None:
        pytest.skip(f"no {cc} {' '.join(runner)} for {isa}")
    limn.set_device("c")
    with limn.no_grad():
        export_c(fn, path=tmp_path / "model.c", target=isa)
        want = [t.numpy() for t in fn()]
    sizes = ", ".join(str(max(1, w.nbytes)) for w in want)
    (tmp_path / "driver.c").write_text(DRIVER.replace("@SIZES@", sizes))
    runs = runner or isa != "avx512" or detect().isa == "avx512"  # else compiled only
    flags = [*detect(isa).flags, "-O1" if runs else "-O0", "-std=gnu11"]
    build = [cc, *flags, *(("-static",) if runner else ()), "-o", "driver", "driver.c", "model.c"]
    r = subprocess.run([*build, "-lm"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    if not runs:
        return
    r = subprocess.run([*runner, "./driver", "model.bin"], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r
    for j, w in enumerate(want):
        got = np.fromfile(tmp_path / f"out{j}.bin", w.dtype, count=w.size).reshape(w.shape)
        assert got.tobytes() == w.tobytes(), f"output {j} of {len(want)} differs on {isa}"


def test_limn_ir_export_c_and_the_viewer_print_the_units_the_plan_ran(tmp_path):
    """One compiled product: what ``limn.ir(stage="c")`` prints, each function ``export_c``
    writes and the C the viewer shows for a kernel are the plan's own units, not a second
    derivation of them."""
    from limn.viewer import fill_kernels, graph_data

    w = Tensor(np.random.default_rng(3).standard_normal((24, 40)).astype(np.float32))
    x = Tensor(np.random.default_rng(4).standard_normal((8, 24)).astype(np.float32))

    def fn(x):
        return ((x @ w).relu().exp() + 1.0).log().sum(1)  # tiled, quick and generic kernels

    dev = limn.get_device("c")
    y = fn(x)
    plan, _ = dev.plan_for([y.node])
    units = plan.product.all()
    assert len({u.quick for u in units}) == 2  # an -O3 unit and a quick one
    assert limn.ir(y, stage="c") == "\n".join(u.source for u in units)
    written = export_c(fn, x, path=tmp_path / "model.c")["c"].read_text()
    for text, _ in plan.product.functions:  # the plan's every function, as it compiled it
        assert text in written
    data, graph = graph_data([y.node])
    fill_kernels(data, graph)
    shown = {
        k["name"]: "\n".join(k["pipelines"]["c"]["source"])
        for k in data["kernels"]
        if "c" in k["pipelines"] and not k["pipelines"]["c"].get("on_host")
    }
    compiled = "\n".join(u.source for u in units)
    assert shown and all(source in compiled for source in shown.values())
