"""Lowering, passes and the printer, held to the numpy device through the nest interpreter."""

import copy
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from corpus import CASES, assert_matches, conv2d, reference

import limn
from ir.graph import dtypes
from ir.kernel.kernel import BufferSpec
from ir.kernel.schedule import schedule
from ir.loop.interp import interpret, run
from ir.loop.lower import _flat, lower
from ir.loop.nest import Accum, DefAcc, Index, Load, Loop, LoopNest, Store, walk
from ir.loop.passes import DEFAULT_PASSES, apply_passes, loop_order
from ir.loop.rewrite import Fresh, defines, instructions, substitute, tree_map, verify
from ir.printer import ir
from limn import Tensor

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_matches_the_numpy_device(case):
    outs = case.build()
    got = run([t.node for t in outs])  # first: the reference realizes assigns in place
    want = reference(outs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, f"{case.name} output {i}")


@pytest.mark.parametrize("case", CASES[:12], ids=[c.name for c in CASES[:12]])
def test_unpassed_nests_compute_the_same_as_passed_ones(case):
    outs = case.build()
    got = run([t.node for t in outs], passes=[])
    for i, (g, w) in enumerate(zip(got, reference(outs))):
        assert_matches(g, w, f"{case.name} output {i}")


# ---- the printer --------------------------------------------------------------------

MATMUL_TEXT = """\
k0  SUM  loop[4, 3, 5]
    in0 = buf0  float32[4, 5]
    in1 = buf1  float32[5, 3]
    out = buf2  float32[4, 3, 1]
  LOOP    i0 < 4
    LOOP    i1 < 3
      CONST   v0 = 0.0 : float32
      STORE   out[i0*3 + i1] = v0
    ENDLOOP i1
  ENDLOOP i0
  LOOP    i0 < 4
    LOOP    r2 < 5  reduce
      LOOP    i1 < 3
        LOAD    v1 = in0[i0*5 + r2] : float32
        LOAD    v2 = in1[i1 + r2*3] : float32
        ARITH   v3 = MUL v1, v2 : float32
        ACCUM   out[i0*3 + i1] = ADD out[i0*3 + i1], v3
      ENDLOOP i1
    ENDLOOP r2
  ENDLOOP i0

sink 0 = buf2  float32[4, 3]"""


def test_matmul_prints_one_fused_nest_with_the_stride_one_dim_innermost():
    assert ir(Tensor.randn((4, 5)) @ Tensor.randn((5, 3))) == MATMUL_TEXT


def test_the_printer_is_reachable_from_limn_on_the_command_line():
    """On the numpy device (the c device prints the plan it runs, with its own passes)."""
    code = "from limn import Tensor, ir; print(ir(Tensor.randn((4, 5)) @ Tensor.randn((5, 3))))"
    env = {**os.environ, "LIMN_DEVICE": "numpy"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == MATMUL_TEXT + "\n"


def test_padded_conv_prints_one_kernel_with_range_checked_loads():
    x, w = Tensor.randn((1, 1, 4, 4)), Tensor.randn((2, 1, 3, 3))
    text = ir(conv2d(x, w, padding=1))
    assert text.startswith("k0  SUM  loop[1, 2, 1, 4, 4, 9]\n")
    assert "k1" not in text
    assert "    out = buf2  float32[1, 2, 1, 4, 4, 1]\n" in text
    # the tap at kernel position (0, 0) reads x[i3 - 1, i4 - 1], inside the pad only
    tap = r"LOAD    v\d+ = in0\[i3\*4 \+ i4 - 5\] if 1 <= i3 < 4 and 1 <= i4 < 4 and 0 <= r5 < 1 :"
    assert re.search(tap, text), text
    assert text.endswith("sink 0 = buf2  float32[1, 2, 4, 4]")
    loops = [line.split()[1] for line in text.splitlines() if line.strip().startswith("LOOP")]
    assert loops[-1] == "i4"  # the stride-1 output column is innermost


def test_each_stage_prints():
    x = Tensor.randn((2, 3))
    y = (x * 2).sum(1)
    assert "SUM" in ir(y, stage="graph") and "%0 = BUFFER" in ir(y, stage="graph")
    assert "%2 = MUL" in ir(y, stage="kernel") and "sink 0 = buf1" in ir(y, stage="kernel")
    assert "ACCUM" in ir(y, stage="loop")
    with pytest.raises(ValueError, match="ir: unknown stage 'asm'"):
        ir(y, stage="asm")


def test_printer_takes_tensors_nodes_and_lists():
    x = Tensor.randn((2, 3))
    a, b = x * 2, x + 1
    assert ir([a, b.node]) == ir([a.node, b])
    assert ir([a, b]).count("sink") == 2
    with pytest.raises(TypeError, match="ir: cannot print a int"):
        ir(3)


# ---- passes -------------------------------------------------------------------------


def nests_of(*outs) -> list[LoopNest]:
    graph = schedule([t.node for t in outs]).graph
    return [lower(graph, i) for i, k in enumerate(graph.kernels) if k.kind != "CUSTOM"]


def sample_nests() -> list[LoopNest]:
    out = []
    for case in CASES:
        if case.name in ("matmul_2d", "conv2d_padded", "statistics", "scatter_with_collisions"):
            out += nests_of(*case.build())
    return out


@pytest.mark.parametrize("p", DEFAULT_PASSES, ids=[p.__name__ for p in DEFAULT_PASSES])
def test_each_pass_is_pure(p):
    for nest in sample_nests():
        before = copy.deepcopy(nest)
        first, second = p(nest), p(nest)
        assert first == second
        assert nest == before
        verify(first)


def loop_vars(nest: LoopNest) -> list[str]:
    return [ins.var for ins in walk(nest.body) if isinstance(ins, Loop)]


def test_loop_order_moves_the_dim_stride_one_in_most_buffers_innermost():
    x, y = Tensor.randn((4, 3)), Tensor.randn((4, 3))
    (nest,) = nests_of(x.T + y.T)  # both inputs walk i0 with stride 1, the output i1
    assert loop_vars(nest) == ["i0", "i1"]
    assert loop_vars(loop_order(nest)) == ["i1", "i0"]


def test_loop_order_never_moves_a_reduce_loop_past_another():
    x = Tensor.randn((3, 4, 5))
    (nest,) = nests_of(x.permute(2, 1, 0).sum((0, 1)))  # r1 walks in0 with stride 1
    ordered = loop_order(nest)
    main = [v for v in loop_vars(ordered) if v.startswith("r")]
    assert main == ["r0", "r1"]


def test_innermost_reduce_keeps_its_total_in_a_register():
    nest = apply_passes(nests_of(Tensor.randn((4, 5)).sum(1))[0])
    ops = [type(i).__name__ for i in walk(nest.body)]
    assert ops.count("Loop") == 2 and "DefAcc" in ops and "Const" not in ops
    (acc,) = [i for i in walk(nest.body) if isinstance(i, Accum)]
    assert acc.index is None


def test_reduce_with_loops_inside_it_fills_with_the_identity_then_accumulates():
    nest = apply_passes(nests_of(Tensor.randn((4, 5)).amax(0))[0])
    text = str(nest)
    assert "CONST   v0 = -inf : float32" in text
    assert "ACCUM   out[i1] = MAX out[i1], v1" in text


def test_half_sum_folds_in_float32_and_rounds_once():
    x = Tensor(np.full((2, 4000), 0.1), dtype=dtypes.float16)
    nest = apply_passes(nests_of(x.sum(1))[0])
    (acc,) = [i for i in walk(nest.body) if isinstance(i, DefAcc)]
    assert acc.dtype == dtypes.float32
    assert "CAST acc0 : float16" in str(nest)
    got = run([x.sum(1).node])[0]
    want = np.float16(np.float32(np.float16(0.1)) * 4000)
    assert got.dtype == np.float16 and abs(float(got[0]) - float(want)) <= 0.25


def test_a_malformed_pass_is_named_with_the_instruction_it_broke():
    def drop_first_load(nest):
        first = next(i for i in instructions(nest.body) if isinstance(i, Load))
        return replace(nest, body=tree_map(nest.body, lambda x: () if x is first else x))

    nest = nests_of(Tensor.randn((3,)) * 2)[0]
    with pytest.raises(ValueError, match="pass drop_first_load .* v0 is not defined here"):
        apply_passes(nest, [drop_first_load])


# ---- the interpreter ----------------------------------------------------------------


def hand_nest(body, shape=(4,)) -> LoopNest:
    spec = BufferSpec(dtypes.float32, shape)
    return LoopNest("k0", "MAP", shape, (spec,), spec, tuple(body))


def test_interpreter_refuses_an_address_outside_the_buffer():
    inner = (
        Load("v0", "in0", Index.var("i0") + 1, dtypes.float32),
        Store("out", Index.var("i0"), "v0"),
    )
    body = [Loop("i0", 4, body=inner)]
    with pytest.raises(IndexError, match=r"addresses in0\[i0 \+ 1\] = in0\[4\], outside 0..3"):
        interpret(hand_nest(body), [np.zeros(4, np.float32)], np.zeros(4, np.float32))


def test_cells_a_nest_forgets_to_write_stay_poisoned():
    inner = (
        Load("v0", "in0", Index.var("i0"), dtypes.float32),
        Store("out", Index.var("i0"), "v0"),
    )
    body = [Loop("i0", 3, body=inner)]
    graph_out = np.full(4, np.nan, np.float32)
    interpret(hand_nest(body), [np.arange(4, dtype=np.float32)], graph_out)
    assert np.isnan(graph_out[3]) and graph_out[2] == 2


def test_out_of_range_gather_fails_like_the_numpy_device():
    x, idx = Tensor.randn((2, 5)), Tensor(np.array([[0, 7], [1, 2]]))
    with pytest.raises(IndexError, match="gather: index 7 is out of range for axis 1 of size 5"):
        run([x.gather(1, idx).node])


def test_verify_rejects_a_store_of_the_wrong_dtype():
    inner = (
        Load("v0", "in0", Index.var("i0"), dtypes.float32),
        Store("out", Index.var("i0"), "v0"),
    )
    nest = hand_nest([Loop("i0", 4, body=inner)])
    bad = replace(nest, output=BufferSpec(dtypes.float16, (4,)))
    with pytest.raises(ValueError, match="v0 is float32 but out holds float16"):
        verify(bad)


def test_a_loop_owns_its_body_and_the_printer_closes_it():
    """The nest is a tree: each LOOP holds its body, and ENDLOOP exists only as a printed
    line, one after each loop's body (``LoopNest.lines`` lists a loop for both lines)."""
    for nest in sample_nests():
        loops = [x for x in walk(nest.body) if isinstance(x, Loop)]
        text = nest.format().splitlines()[-len(nest.lines()) :]
        assert sum(line.split()[0] == "ENDLOOP" for line in text) == len(loops)
        assert all(x.body for x in loops)
        assert all(sum(y is x for y in nest.lines()) == 2 for x in loops)


def test_rename_and_substitute_reach_every_loop_of_a_tree():
    """``rename``/``substitute`` ride on ``tree_map``: given a loop they rewrite everything
    inside it, inner loops included; ``Fresh.copy`` names a copy's values anew."""
    nest = sample_nests()[0]
    top = next(x for x in nest.body if any(isinstance(y, Load) for y in instructions((x,))))
    at = {top.var: Index.var(top.var) + 1}
    moved = substitute(top, at)
    old, new = ([x for x in instructions((t,)) if isinstance(x, Load)] for t in (top, moved))
    assert len(walk_loops := [x for x in walk((top,)) if isinstance(x, Loop)]) > 1, walk_loops
    assert old and [x.index for x in new] == [x.index.substitute(at) for x in old]
    copy = Fresh(nest.body).copy(top.body)
    old = {defines(x) for x in walk(top.body)} - {None}
    assert old and not old & {defines(x) for x in walk(copy)}


def test_custom_pass_example_runs_and_agrees_with_the_numpy_device():
    out = subprocess.run(
        [sys.executable, "examples/custom_pass.py"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "step 2" in out.stdout and "matches the numpy device" in out.stdout


def test_an_address_summed_in_one_pass_is_the_index_added_dim_by_dim():
    """``_flat`` sums every dim's terms at once; the Index, term order included, is the one
    adding dim by dim gives, also where two loop variables share a dim number."""
    import random

    def added(idx, strides, offset):
        out = Index((), offset)
        for e, st in zip(idx, strides):
            if st:
                out = out + e * st
        return out

    rng = random.Random(0)
    for names in (["i0", "r1", "i2", "v3", "v12"], ["i0", "i1", "r1", "r0", "v3"]):
        for _ in range(20000):
            idx = tuple(
                Index.of(
                    [(rng.choice(names), rng.randint(-3, 3)) for _ in range(rng.randint(0, 3))],
                    rng.randint(-5, 5),
                )
                for _ in range(rng.randint(0, 4))
            )
            strides = tuple(rng.choice([0, 1, 2, -1, 7, 12]) for _ in idx)
            offset = rng.randint(-9, 9)
            want, got = added(idx, strides, offset), _flat(idx, strides, offset)
            assert (got.terms, got.const, got.scaled) == (want.terms, want.const, want.scaled)


# The three edits docs/passes.md shows for a new primitive: (file, the line after which
# it goes, the line), each checked to stand in the doc as written here.
NEW_PRIMITIVE = [
    ("ir/graph/opcodes.py", '    RECIP = "RECIP"', '    SQUARE = "SQUARE"'),
    (
        "ir/graph/ops.py",
        '    OpRow(Op.RECIP, 1, "unary", "float", numpy=np.reciprocal, grad=grads.recip, cost=2),',
        '    OpRow(Op.SQUARE, 1, "unary", "numeric", numpy=np.square, grad=lambda ctx, out, g: '
        "(g.p_mul(ctx.parents[0]).p_mul(g.p_const(2)),)),",
    ),
    (
        "ir/c/spell.py",
        '    Op.RECIP: {"": "(({t})1 / {0})"},',
        '    Op.SQUARE: {"": "(({t})({0} * {0}))"},',
    ),
]

SQUARE_PROGRAM = """
import numpy as np, limn
from ir.graph.ops import Op
from ir.loop.interp import run
from limn import Tensor
a = np.array([1.5, -2.0, 3.0, np.nan, -0.0], np.float32)
for dev in ("numpy", "c"):
    x = Tensor(a, device=dev, requires_grad=True)
    y = x._unary(Op.SQUARE) + 1
    y.sum().backward()
    assert np.array_equal(y.numpy(), np.square(a) + 1, equal_nan=True), (dev, y.numpy())
    assert np.array_equal(x.grad.numpy(), 2 * a, equal_nan=True), (dev, x.grad.numpy())
got = run([(Tensor(a)._unary(Op.SQUARE)).node])[0]
assert np.array_equal(got, np.square(a), equal_nan=True)
assert "ARITH   v1 = SQUARE v0 : float32" in limn.ir(Tensor(a)._unary(Op.SQUARE))
assert "= ((float)(v0 * v0));" in limn.ir(Tensor(a)._unary(Op.SQUARE), stage="c")
assert "= ((float)(v0 * v0));" in limn.ir(Tensor(a)._unary(Op.SQUARE), stage="cuda")
print("ok")
"""


def test_a_new_primitive_is_its_row_and_its_spelling_end_to_end(tmp_path):
    """docs/passes.md's three lines, added to a copy of the tree (not this one), give an op
    the numpy and c devices compute, autograd differentiates, the interpreter runs and both
    renderers spell."""
    try:
        limn.get_device("c")
    except (ValueError, RuntimeError, OSError) as e:
        pytest.skip(f"c device: {e}")
    root = Path(__file__).parents[1]
    doc = (root / "docs" / "passes.md").read_text()
    for pkg in ("ir", "limn", "limn_array"):
        shutil.copytree(root / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for path, after, line in NEW_PRIMITIVE:
        assert line in doc, line
        text = (tmp_path / path).read_text()
        assert text.count(after + "\n") == 1, after
        (tmp_path / path).write_text(text.replace(after + "\n", after + "\n" + line + "\n"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", SQUARE_PROGRAM],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_the_nest_docs_passes_md_shows_is_what_ir_prints():
    doc = (Path(__file__).parents[1] / "docs" / "passes.md").read_text()
    shown = re.search(r"```\n(k0  SUM.*?)```", doc, re.S).group(1).strip()
    assert shown == ir(Tensor.randn((4, 5)) @ Tensor.randn((5, 3))).strip()


def _example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_pass", ROOT / "examples/custom_pass.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", CASES[:12], ids=[c.name for c in CASES[:12]])
def test_the_docs_rule_pass_interchanges_output_loops_only_and_keeps_every_bit(case):
    """docs/passes.md's pass written as a rule is the example's; after the default passes it
    swaps output loops (never a reduce or a scan loop), verifies, and computes the bits the
    nest computed before, in the interpreter."""
    doc = (ROOT / "docs" / "passes.md").read_text()
    code = re.search(r"```python\n(def interchange.*?)```", doc, re.S).group(1)
    assert code in (ROOT / "examples" / "custom_pass.py").read_text()
    interchange = _example().interchange
    outs = case.build()
    for nest in nests_of(*outs):
        before = apply_passes(nest)
        after = apply_passes(before, [interchange])
        kinds = [(lp.var, lp.kind) for lp in walk(after.body) if isinstance(lp, Loop)]
        assert sorted(kinds) == sorted(
            (lp.var, lp.kind) for lp in walk(before.body) if isinstance(lp, Loop)
        )
    got = run([t.node for t in outs], passes=[*DEFAULT_PASSES, interchange])
    for g, w in zip(got, run([t.node for t in outs])):
        np.testing.assert_array_equal(g, w)


def test_every_loop_has_the_kind_its_body_makes_it_and_verify_holds_it():
    """Lowering marks a matmul's reduce loop and a cumsum's scan loop; a loop that claims
    another kind than its body makes it is refused by verify, naming the loop."""
    from ir.loop.nest import Kind

    x = Tensor.randn((4, 5))
    (mm,) = nests_of(x @ Tensor.randn((5, 3)))
    kinds = {lp.var: lp.kind for lp in walk(mm.body) if isinstance(lp, Loop)}
    assert kinds == {"i0": Kind.OUTPUT, "i1": Kind.OUTPUT, "r2": Kind.REDUCE}
    (scan,) = nests_of(x.cumsum(1))
    assert [lp.kind for lp in walk(scan.body) if isinstance(lp, Loop)] == [Kind.OUTPUT, Kind.SCAN]
    wrong = tree_map(mm.body, lambda i: replace(i, kind=Kind.OUTPUT) if isinstance(i, Loop) else i)
    with pytest.raises(ValueError, match="r2 < 5: its body makes it a reduce loop, not output"):
        verify(replace(mm, body=wrong))


def test_the_docs_unroll_pass_is_the_example_and_its_note_is_what_the_c_passes_print():
    """docs/passes.md shows ``examples/custom_pass.py``'s pass whole, and the note it prints
    is the one the c device's passes write for the docs' matmul with the pass placed first."""
    import importlib.util
    import re

    from ir.c.passes import c_passes
    from limn.runtime.target import detect

    doc = (ROOT / "docs" / "passes.md").read_text()
    code = re.search(r"```python\n(def unroll_by_2.*?)```", doc, re.S).group(1)
    assert code in (ROOT / "examples" / "custom_pass.py").read_text()
    spec = importlib.util.spec_from_file_location("custom_pass", ROOT / "examples/custom_pass.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    y = Tensor.randn((4, 5)) @ Tensor.randn((5, 3))
    (nest,) = [n for n in nests_of(y) if n.kind == "SUM"] or nests_of(y)
    printed = [line for line in doc.splitlines() if line.startswith("    note  ")]
    got = apply_passes(nest, [mod.unroll_by_2, *c_passes(detect("avx2"))]).format()
    assert printed and all(line in got.splitlines() for line in printed), got
