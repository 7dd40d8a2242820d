"""The live compile line: shown on a terminal for slow work, never in a log."""

from __future__ import annotations

import io
import re
import sys

import pytest

import limn
from limn import Tensor
from limn.runtime import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fresh_compile():
    """A graph the c device (fresh, on an empty cache: the fixture) has to compile."""
    return (Tensor.arange(9, device="c").float() * 3.0).exp().sum()


@pytest.fixture
def c_device(monkeypatch, tmp_path):
    try:
        limn.get_device("c")
    except (RuntimeError, OSError) as e:
        pytest.skip(f"c device: {e}")
    from limn.runtime.c import CDevice
    from limn.runtime.device import install

    monkeypatch.setenv("LIMN_CACHE_DIR", str(tmp_path))
    old = install("c", CDevice())
    yield
    install("c", old)


def test_a_slow_compile_prints_one_live_line_with_units_and_elapsed(monkeypatch, c_device):
    out = Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "AFTER", 0.0)
    _fresh_compile().realize()
    text = out.getvalue()
    assert re.fullmatch(
        r"(\r\x1b\[Klimn: compiling \d+/\d+ units, [\d.]+ s)*"
        r"\r\x1b\[Klimn: compiled \d+ units in [\d.]+ s\n",
        text,
    ), text


def test_the_line_is_quiet_when_stderr_is_not_a_terminal(monkeypatch, c_device):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "AFTER", 0.0)
    _fresh_compile().realize()
    assert out.getvalue() == ""


def test_work_quicker_than_a_second_prints_nothing(monkeypatch, c_device):
    x = Tensor.arange(5, device="c").float() * 2
    x.numpy()  # the plan is built (or loaded) here
    out = Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    (Tensor.arange(5, device="c").float() * 2).numpy()
    assert out.getvalue() == ""


def test_a_plan_built_again_for_a_new_shape_says_which_shape_changed(monkeypatch, c_device):
    """A sequence that grows by one (sampling without a cache) builds a plan per length:
    the line and the profiler say why, and a new structure says nothing."""
    out = Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress, "AFTER", 0.0)
    with limn.profile() as prof:
        for n in (5, 6):
            (Tensor.arange(n, device="c").float() * 2.0).exp().realize()
        (Tensor.arange(6, device="c").float() + 1.0).realize()
    lines = re.findall(r"limn: (?:compiled \d+ units|built a plan) in [\d.]+ s.*\n", out.getvalue())
    assert len(lines) == 3 and ": a new shape" not in lines[0] + lines[2], lines
    assert lines[1].endswith(" s: a new shape, [5] -> [6], of a structure built before\n")
    assert prof.resized == ["a new shape, [5] -> [6], of a structure built before"]
    assert "1 plans built again, a new shape, [5] -> [6]" in prof.report()
