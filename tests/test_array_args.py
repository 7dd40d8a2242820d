"""limn_array's integer parameters: anything with ``__index__`` is an integer, a bool or a
float is not.

Each case calls one function with its integer arguments passed through ``K``: plain ints
give the reference; numpy ints and 0-d integer arrays must give the same array; floats
and bools must raise a TypeError that names the rule. One case per integer parameter of
the namespace (axis, shape entries, n, k, repeats, offsets, indices, start/stop/step).
"""

from __future__ import annotations

import numpy as np
import pytest

import limn_array as xp

RNG = np.random.default_rng(0)
X = xp.asarray(RNG.standard_normal((3, 4)))
V = xp.asarray(RNG.standard_normal(5))
SQ = xp.asarray(RNG.standard_normal((3, 3)))
A3 = xp.asarray(RNG.standard_normal((3, 2)))
B3 = xp.asarray(RNG.standard_normal((3, 2)))
IDX = xp.asarray([2, 0, 3])
IDX2 = xp.asarray([[0, 3, 1, 2]] * 3)

# name -> (call(K), floats are valid values too)
CASES = {
    "cumulative_sum axis": lambda K: xp.cumulative_sum(X, axis=K(1)),
    "cumulative_prod axis": lambda K: xp.cumulative_prod(X, axis=K(0)),
    "diff axis": lambda K: xp.diff(X, axis=K(1)),
    "diff n": lambda K: xp.diff(X, n=K(2)),
    "sum axis": lambda K: xp.sum(X, axis=K(1)),
    "sum axes": lambda K: xp.sum(X, axis=(K(0), K(1))),
    "max axis": lambda K: xp.max(X, axis=K(0)),
    "mean axis": lambda K: xp.mean(X, axis=K(1)),
    "std axis": lambda K: xp.std(X, axis=K(0)),
    "any axis": lambda K: xp.any(X > 0, axis=K(1)),
    "count_nonzero axis": lambda K: xp.count_nonzero(X > 0, axis=K(1)),
    "argmax axis": lambda K: xp.argmax(X, axis=K(1)),
    "sort axis": lambda K: xp.sort(X, axis=K(0)),
    "argsort axis": lambda K: xp.argsort(X, axis=K(1)),
    "arange stop": lambda K: xp.arange(K(5)),
    "arange start stop step": lambda K: xp.arange(K(1), K(8), K(2)),
    "repeat repeats": lambda K: xp.repeat(V, K(2)),
    "repeat axis": lambda K: xp.repeat(X, K(2), axis=K(1)),
    "zeros shape": lambda K: xp.zeros((K(2), K(3))),
    "ones shape int": lambda K: xp.ones(K(3)),
    "full shape": lambda K: xp.full((K(2),), 1.5),
    "eye n": lambda K: xp.eye(K(3)),
    "eye n_cols k": lambda K: xp.eye(3, K(4), k=K(1)),
    "tril k": lambda K: xp.tril(X, k=K(1)),
    "triu k": lambda K: xp.triu(X, k=K(1)),
    "linspace num": lambda K: xp.linspace(0.0, 1.0, K(5)),
    "reshape shape": lambda K: xp.reshape(X, (K(4), K(3))),
    "broadcast_to shape": lambda K: xp.broadcast_to(V, (K(2), K(5))),
    "permute_dims axes": lambda K: xp.permute_dims(X, (K(1), K(0))),
    "expand_dims axis": lambda K: xp.expand_dims(X, axis=K(1)),
    "squeeze axis": lambda K: xp.squeeze(xp.expand_dims(X, axis=0), axis=K(0)),
    "moveaxis": lambda K: xp.moveaxis(X, K(0), K(1)),
    "flip axis": lambda K: xp.flip(X, axis=K(0)),
    "roll shift axis": lambda K: xp.roll(X, K(1), axis=K(0)),
    "tile repetitions": lambda K: xp.tile(X, (K(2), K(1))),
    "concat axis": lambda K: xp.concat([X, X], axis=K(1)),
    "stack axis": lambda K: xp.stack([X, X], axis=K(1)),
    "unstack axis": lambda K: xp.stack(xp.unstack(X, axis=K(1))),
    "take axis": lambda K: xp.take(X, IDX, axis=K(1)),
    "take_along_axis axis": lambda K: xp.take_along_axis(X, IDX2, axis=K(1)),
    "fft n axis": lambda K: xp.fft.fft(V, n=K(8), axis=K(0)),
    "fftn s axes": lambda K: xp.fft.fftn(X, s=(K(2), K(4)), axes=(K(0), K(1))),
    "rfft n": lambda K: xp.fft.rfft(V, n=K(8)),
    "irfft n": lambda K: xp.fft.irfft(xp.fft.rfft(V), n=K(8)),
    "fftfreq n": lambda K: xp.fft.fftfreq(K(8)),
    "rfftfreq n": lambda K: xp.fft.rfftfreq(K(8)),
    "fftshift axes": lambda K: xp.fft.fftshift(X, axes=K(1)),
    "diagonal offset": lambda K: xp.linalg.diagonal(X, offset=K(1)),
    "trace offset": lambda K: xp.linalg.trace(X, offset=K(1)),
    "matrix_power n": lambda K: xp.linalg.matrix_power(SQ, K(2)),
    "tensordot axes": lambda K: xp.tensordot(X, xp.permute_dims(X, (1, 0)), axes=K(1)),
    "tensordot axis pairs": lambda K: xp.tensordot(X, X, axes=((K(0),), (K(0),))),
    "vecdot axis": lambda K: xp.vecdot(X, X, axis=K(0)),
    "cross axis": lambda K: xp.linalg.cross(A3, B3, axis=K(0)),
    "vector_norm axis": lambda K: xp.linalg.vector_norm(X, axis=K(1)),
}
FLOATS_OK = {"arange stop", "arange start stop step"}  # arange also takes float bounds
INDEXING = {
    "index int": lambda K: X[K(1)],
    "index slice": lambda K: X[K(0) : K(2), :: K(2)],
    "index negative step": lambda K: X[:: K(-1)],
}
INTEGER_LIKE = {
    "numpy.int64": np.int64,
    "numpy.int32": np.int32,
    "0-d array": lambda v: xp.asarray(v),
}


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("kind", list(INTEGER_LIKE))
@pytest.mark.parametrize("name", list(CASES) + list(INDEXING))
def test_an_integer_parameter_accepts_anything_with_index(name, kind):
    call = CASES.get(name) or INDEXING[name]
    _same(call(INTEGER_LIKE[kind]), call(int))


@pytest.mark.parametrize("name", [n for n in CASES if n not in FLOATS_OK])
def test_an_integer_parameter_refuses_a_float(name):
    with pytest.raises(TypeError, match=r"must be an integer .*__index__.*got float"):
        CASES[name](float)


@pytest.mark.parametrize("name", list(CASES))
def test_an_integer_parameter_refuses_a_bool(name):
    with pytest.raises(TypeError, match=r"must be an integer .*got bool"):
        CASES[name](lambda v: bool(v))
