"""Bad input fails early, and the message says which op, on what, and what would work.

Each case names the exception type and a pattern the message must match: the op's name,
the shapes or dtypes involved, and the accepted range or rule. Errors are raised while
the graph is built, not later inside a device, except where the fault lives in the data
(an out-of-range gather index), which can only be seen when the bytes exist.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import limn
from limn import Tensor

A = Tensor.randn((2, 3))
B = Tensor.randn((4, 5))
C = Tensor.randn((2, 3, 4))

CASES = {
    # shapes that do not meet
    "add_broadcast": (
        lambda: A + B,
        ValueError,
        r"add: shapes \(2, 3\) and \(4, 5\) do not broadcast.*must match or be 1",
    ),
    "mul_broadcast": (lambda: A * C, ValueError, r"mul: shapes \(2, 3\) and \(2, 3, 4\)"),
    "where_broadcast": (
        lambda: limn.where(Tensor([True, False]), A, A),
        ValueError,
        r"where: shapes \(2,\) and \(2, 3\).*do not broadcast",
    ),
    "matmul_inner": (
        lambda: A @ B,
        ValueError,
        r"matmul: shapes \(2, 3\) and \(4, 5\) do not align: 3 != 4",
    ),
    "matmul_vectors": (
        lambda: Tensor.randn((3,)) @ Tensor.randn((4,)),
        ValueError,
        r"matmul: shapes \(3,\) and \(4,\) do not align",
    ),
    "matmul_batch": (
        lambda: Tensor.randn((2, 3, 4)) @ Tensor.randn((3, 4, 5)),
        ValueError,
        r"matmul: batch dims of shapes \(2, 3, 4\) and \(3, 4, 5\).*do not broadcast",
    ),
    "matmul_0d": (lambda: A @ Tensor(2.0), ValueError, r"matmul: needs at least 1-d.*\(\)"),
    "reshape_size": (
        lambda: A.reshape(4, 2),
        ValueError,
        r"reshape: cannot view \(2, 3\) \(6 elements\) as \(4, 2\) \(8 elements\)",
    ),
    "reshape_two_minus_ones": (lambda: A.reshape(-1, -1), ValueError, r"reshape: only one -1"),
    "reshape_minus_one_no_fit": (lambda: A.reshape(-1, 4), ValueError, r"reshape: .*\(2, 3\)"),
    "reshape_negative": (
        lambda: A.reshape(-2, -3),
        ValueError,
        r"reshape: sizes must be non-negative.*\(-2, -3\)",
    ),
    "expand_non_1": (
        lambda: A.expand(4, 3),
        ValueError,
        r"expand: dim 0 of \(2, 3\) has size 2.*only size-1 dims expand",
    ),
    "expand_fewer_dims": (lambda: A.expand(3), ValueError, r"expand: .*\(2, 3\).*fewer dims"),
    "pad_crops_past_empty": (
        lambda: A.pad(((-2, -2),)),
        ValueError,
        r"pad: \(\(0, 0\), \(-2, -2\)\) crops more than shape \(2, 3\) holds",
    ),
    "pad_too_many": (lambda: A.pad(((1, 1),) * 3), ValueError, r"pad: needs up to 2"),
    "shrink_out_of_bounds": (
        lambda: A.shrink(((0, 3), (0, 3))),
        ValueError,
        r"shrink: bounds .* do not fit shape \(2, 3\).*0 <= start <= end <= size",
    ),
    "cat_shapes": (
        lambda: limn.cat([A, B]),
        ValueError,
        r"cat: shapes \[\(2, 3\), \(4, 5\)\] differ outside axis 0",
    ),
    "stack_shapes": (lambda: limn.stack([A, B]), ValueError, r"stack: shapes differ"),
    "split_sizes": (
        lambda: A.split([1, 1], 1),
        ValueError,
        r"split: sizes \[1, 1\] do not add up to dim 1 of \(2, 3\)",
    ),
    "repeat_too_few": (
        lambda: C.repeat(2, 2),
        ValueError,
        r"repeat: needs at least 3 repeats for shape \(2, 3, 4\)",
    ),
    # axes
    "sum_axis": (
        lambda: A.sum(2),
        ValueError,
        r"sum: axis 2 is out of range for a 2-d tensor; accepted: -2\.\.1",
    ),
    "sum_negative_axis": (lambda: A.sum(-3), ValueError, r"sum: axis -3 .*accepted: -2\.\.1"),
    "sum_repeated_axis": (lambda: A.sum((0, 0)), ValueError, r"sum: repeated axis"),
    "sum_float_axis": (lambda: A.sum(1.0), TypeError, r"sum: axis must be an integer"),
    "mean_axis": (lambda: A.mean(5), ValueError, r"mean: axis 5 .*2-d.*accepted"),
    "max_axis": (lambda: A.max(-7), ValueError, r"max: axis -7 .*accepted"),
    "argmax_axis": (lambda: A.argmax(2), ValueError, r"argmax: axis 2 .*accepted"),
    "softmax_axis": (lambda: A.softmax(3), ValueError, r"softmax: axis 3 .*accepted: -2\.\.1"),
    "cumsum_axis": (lambda: A.cumsum(2), ValueError, r"cumsum: axis 2 .*accepted"),
    "flip_axis": (lambda: A.flip(2), ValueError, r"flip: axis 2 .*accepted"),
    "unsqueeze_axis": (lambda: C.unsqueeze(5), ValueError, r"unsqueeze: axis 5 .*accepted"),
    "transpose_axis": (lambda: C.transpose(0, 3), ValueError, r"transpose: axis 3 .*accepted"),
    "max_of_nothing": (
        lambda: Tensor.zeros((0, 3)).max(0),
        ValueError,
        r"max: cannot reduce a zero-size axis of shape \(0, 3\)",
    ),
    # permutations
    "permute_short": (
        lambda: C.permute(0, 1),
        ValueError,
        r"permute: \(0, 1\) is not a permutation of the 3 dims of \(2, 3, 4\)",
    ),
    "permute_repeat": (lambda: C.permute(0, 1, 1), ValueError, r"permute: \(0, 1, 1\) is not a"),
    "permute_range": (lambda: C.permute(0, 1, 3), ValueError, r"permute: axis 3 .*accepted"),
    # dtypes
    "no_common_int": (
        lambda: Tensor(np.array([1], np.int64)) + Tensor(np.array([1], np.uint64)),
        TypeError,
        r"add: .*int64 and uint64 have no common integer dtype; cast one operand",
    ),
    "logical_and_floats": (lambda: A & A, TypeError, r"and: needs bool or integer tensors, got f"),
    "invert_float": (lambda: ~A, TypeError, r"invert: needs a bool or integer tensor, got float32"),
    "grad_of_int": (
        lambda: Tensor([1, 2], requires_grad=True),
        TypeError,
        r"requires_grad: only float tensors take gradients, got int64",
    ),
    "unknown_dtype": (
        lambda: A.cast("float8"),
        TypeError,
        r"dtype: 'float8' is not a limn dtype; accepted: bool, int8.*float64",
    ),
    "exp_primitive_on_int": (
        lambda: Tensor([1, 2]).p_exp(),
        TypeError,
        r"exp: needs a float tensor, got int64",
    ),
    "combine_with_str": (lambda: A + "x", TypeError, r"add: cannot combine a Tensor with str"),
    "one_hot_float": (lambda: A.one_hot(3), TypeError, r"one_hot: needs integer.*float32"),
    "gather_float_index": (
        lambda: A.gather(1, Tensor([[0.5]])),
        TypeError,
        r"gather: index must be an integer tensor with 2 dims, got float32\[1, 1\]",
    ),
    "full_out_of_range": (
        lambda: Tensor.full((2,), 300, dtype="int8"),
        ValueError,
        r"full: 300 is out of range for int8; accepted: -128\.\.127",
    ),
    # indexing
    "index_out_of_range": (
        lambda: A[2],
        IndexError,
        r"index: 2 is out of range for dim 0 of size 2 in shape \(2, 3\); accepted: -2\.\.1",
    ),
    "index_negative_out_of_range": (
        lambda: A[0, -4],
        IndexError,
        r"index: -4 is out of range for dim 1 of size 3.*accepted: -3\.\.2",
    ),
    "index_too_many": (
        lambda: A[0, 0, 0],
        IndexError,
        r"index: too many indices \(3\) for a tensor of shape \(2, 3\)",
    ),
    "index_zero_step": (
        lambda: A[:, ::0],
        ValueError,
        r"index: slice step cannot be zero \(dim 1 of shape \(2, 3\)\); accepted: any non-zero",
    ),
    "index_float": (lambda: A[1.5], TypeError, r"index: float is not supported; accepted: int"),
    "index_two_ellipses": (lambda: A[..., ...], IndexError, r"index: only one ellipsis"),
    "gather_out_of_range": (
        lambda: A.gather(1, Tensor([[0, 5]])).numpy(),
        IndexError,
        r"gather: index 5 is out of range for axis 1 of size 3; accepted: 0\.\.2",
    ),
    # autograd
    "backward_non_scalar": (
        lambda: Tensor.randn((3,), requires_grad=True).exp().backward(),
        RuntimeError,
        r"backward: needs a gradient for a non-scalar tensor of shape \(3,\); pass gradient=",
    ),
    "backward_without_grad": (
        lambda: Tensor.randn((3,)).sum().backward(),
        RuntimeError,
        r"backward: this tensor does not require grad",
    ),
    "backward_gradient_shape": (
        lambda: Tensor.randn((3,), requires_grad=True).exp().backward(Tensor.randn((4,))),
        ValueError,
        r"backward: gradient shape \(4,\) != \(3,\)",
    ),
    # conversions and creation
    "bool_of_many": (
        lambda: bool(A),
        ValueError,
        r"bool: the truth value of a tensor of shape \(2, 3\) is ambiguous; use \.any\(\)",
    ),
    "item_of_many": (
        lambda: A.item(),
        ValueError,
        r"item: needs a tensor of one element.*\(2, 3\)",
    ),
    "len_of_0d": (lambda: len(Tensor(1.0)), TypeError, r"len: a 0-d tensor has no length"),
    "iter_of_0d": (lambda: iter(Tensor(1.0)), TypeError, r"iter: cannot iterate over a 0-d"),
    "arange_zero_step": (lambda: Tensor.arange(0, 5, 0), ValueError, r"arange: step must not"),
    "ragged_data": (
        lambda: Tensor([[1, 2], [3]]),
        ValueError,
        r"Tensor: nested data is ragged: items at depth 1 have length 2 and length 1; accepted",
    ),
    "assign_shape": (
        lambda: Tensor.zeros(2, 3).realize().assign(Tensor.ones(4)),
        ValueError,
        r"assign: value shape \(4,\) does not fit target shape \(2, 3\); accepted: .*broadcast",
    ),
    "shape_dtype_positional": (
        lambda: Tensor.zeros((2, 3), "int8"),
        TypeError,
        r"shape: needs ints, got .*'int8'.*dtype=",
    ),
    "shape_not_ints": (lambda: Tensor.zeros((2, "a")), TypeError, r"shape: needs ints"),
    "dropout_p": (lambda: A.dropout(1.5), ValueError, r"dropout: p must be in \[0, 1\], got 1\.5"),
    "gelu_mode": (lambda: A.gelu("fast"), ValueError, r"gelu: approximate must be 'none' or"),
    "unknown_device": (
        lambda: limn.set_device("tpu"),
        ValueError,
        r"unknown device 'tpu'; known: \[.*'numpy'.* and 'cpu'",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_raises_a_clear_error(name):
    fn, exc, pattern = CASES[name]
    with pytest.raises(exc, match=pattern):
        fn()


def test_shape_errors_are_raised_while_building_not_when_computing():
    """A lazy framework must still fail at the line that made the mistake."""
    lazy = Tensor.zeros((100_000, 100_000))  # never computed: it would not fit
    with pytest.raises(ValueError, match="broadcast"):
        lazy + Tensor.zeros((3,))
    with pytest.raises(ValueError, match="matmul"):
        lazy @ Tensor.zeros((3, 3))
    with pytest.raises(ValueError, match="axis"):
        lazy.sum(4)


def test_a_failed_op_leaves_its_operands_usable():
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    with pytest.raises(ValueError):
        x + B
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0))


def test_broadcast_shapes_is_numpys_rule_and_names_the_leftmost_dim_that_differs():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ir.graph.compose import broadcast_shapes

    shape = st.lists(st.sampled_from([1, 2, 3]), max_size=4).map(tuple)

    @settings(max_examples=400, deadline=None)
    @given(st.lists(shape, min_size=1, max_size=3))
    def check(shapes):
        try:
            want = np.broadcast_shapes(*shapes)
        except ValueError:
            nd = max(len(s) for s in shapes)
            bad = [
                i - nd
                for i in range(nd)
                if len({s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}) > 1
            ]
            with pytest.raises(ValueError, match=rf"op: shapes .* dim {bad[0]} has sizes"):
                broadcast_shapes(*shapes, op="op")
            return
        assert broadcast_shapes(*shapes) == want

    check()


def test_cpu_names_the_c_device_where_a_compiler_works_else_numpy():
    from limn.runtime.device import get_device, resolve

    try:
        get_device("c")
        want = "c"
    except (RuntimeError, OSError):
        want = "numpy"
    assert resolve("cpu") == want
    assert get_device("cpu") is get_device(want)


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_an_index_out_of_range_names_the_function_and_the_line_that_built_it(device):
    """The kernel runs at a later realize (here ``.item()``), fused into a step: the error
    names Embedding, cross_entropy or indexing and the user's line, not a bare gather."""
    import inspect

    from limn.nn import functional as F

    limn.set_device(device)
    line = inspect.currentframe().f_lineno
    emb = limn.nn.Embedding(10, 4)
    built = [emb(Tensor(np.array([1, 12]))).sum()]  # line + 2
    logits = Tensor(np.zeros((2, 5), np.float32))
    built.append(F.cross_entropy(logits, Tensor(np.array([1, 7]))))  # line + 4
    built.append(Tensor(np.arange(12.0, dtype=np.float32))[Tensor(np.array([3, 20]))].sum())
    for t, what, at in zip(built, ("Embedding", "cross_entropy", "index"), (2, 4, 5)):
        with pytest.raises(IndexError, match=f"^{what} at {re.escape(__file__)}:{line + at}: "):
            t.item()


def test_an_in_place_refusal_names_the_in_place_method_not_assign():
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    calls = {"mul_": lambda: w.mul_(2), "add_": lambda: w.add_(1), "copy_": lambda: w.copy_(w * 3)}
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match=f"^{name}: a leaf Variable that requires grad"):
            call()
