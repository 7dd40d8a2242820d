"""torch's own sample inputs (its OpInfo database) through every torch op limn names.

For each op of ``op_db`` that limn answers by name (``tests/opinfo.py``), torch's samples
in float32, int64, float64 and bool (where torch supports the dtype) run through torch and
limn on limn's current device (``LIMN_DEVICE``) and must agree at torch's tolerances; a sample torch
refuses, and each of torch's error inputs, limn must refuse; a random op is compared by
distribution. The default suite takes the first ``FEW`` samples of each op and dtype; the
slow suite takes them all. The deliberate differences are ``opinfo.DIFFERENT``, each with
its reason in docs/torch.md.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import opinfo
import pytest
import torch

import limn

FEW = 2
DTYPES = (torch.float32, torch.int64, torch.float64, torch.bool)
OPS = opinfo.named_ops()


def _run(o, few: int | None) -> dict:
    if (o.name, o.variant_test_name) in opinfo.DIFFERENT:
        pytest.skip(opinfo.DIFFERENT[(o.name, o.variant_test_name)])
    seen: dict[str, int] = {}
    for dtype in DTYPES:
        if dtype not in o.supported_dtypes("cpu"):
            continue
        torch.manual_seed(0)
        samples = o.sample_inputs("cpu", dtype, requires_grad=False)
        gap = opinfo.DTYPE_GAPS.get((opinfo.op_id(o), str(dtype).removeprefix("torch.")))
        try:
            for s in itertools.islice(samples, few):
                kind = opinfo.check(o, s)
                seen[kind] = seen.get(kind, 0) + 1
        except AssertionError:
            if gap is None:
                raise
            continue
        if gap is not None and few is None:  # strict, as FULL_GAPS: a closed gap shows
            pytest.fail(f"{opinfo.op_id(o)} passes in {dtype} now; remove its gap: {gap}")
    errors = o.error_inputs("cpu") if o.error_inputs_func is not None else ()
    for e in itertools.islice(errors, few):
        s = e.sample_input
        try:
            opinfo._torch_out(o, s)
        except Exception as err:
            kind = opinfo.check_refused(o, s, err)
            seen[kind] = seen.get(kind, 0) + 1
    return seen


@pytest.mark.parametrize("o", OPS, ids=[opinfo.op_id(o) for o in OPS])
def test_op_few(o):
    _run(o, FEW)


def _gap(o):
    reason = opinfo.FULL_GAPS.get(opinfo.op_id(o))
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


@pytest.mark.slow
@pytest.mark.parametrize("o", [pytest.param(o, id=opinfo.op_id(o), marks=_gap(o)) for o in OPS])
def test_op_all(o):
    _run(o, None)


def test_count_of_named_ops():
    """The torch ops limn answers by name: at least 500 of op_db's entries."""
    assert len(OPS) >= 500, len(OPS)


def _resolve(path: str):
    obj = limn
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def test_the_torch_checklist_is_true():
    """docs/torch.md's checklist: a checked name exists under limn, an unchecked one not."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "torch.md").read_text()
    section = text.split("## Checklist: torch features not in limn", 1)[1]
    items = re.findall(r"^- \[([ x])\] (.*)$", section, re.M)
    assert len(items) > 10
    wrong = []
    for mark, line in items:
        for name in re.findall(r"`(limn\.[\w.]+)`", line):
            if (_resolve(name) is not None) != (mark == "x"):
                wrong.append(f"[{mark}] {name}")
    assert not wrong, wrong
    lacking = {
        n.split(".")[1]
        for mark, line in items
        if mark == " "
        for n in re.findall(r"`(limn\.[\w.]+)`", line)
        if n.count(".") == 1
    }
    assert lacking == set(limn.missing.LACKS), lacking ^ set(limn.missing.LACKS)
