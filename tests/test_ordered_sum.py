"""The numpy device's ordered sum against its definition, written out one add at a time.

``ir/graph/semantics.ordered_sum`` takes numpy's fast paths (a reduce down a slow axis,
cache-sized turns of lane groups, column-wise folds); each must give the bits of the plain
definition: lanes of ``LANE_BYTES``, each folded in row-major order from +0.0, blocks of
about ``SUM_BLOCK`` for a long whole-array sum, all combined by ``pairwise``.
"""

import itertools
import math

import numpy as np
import pytest

from ir.graph.semantics import LANE_BYTES, SUM_BLOCK, ordered_sum, pairwise


def _lanes(values, lanes, width):
    """One cell: element j of each row of ``width`` to lane j % lanes, folded in order."""
    tot = [values.dtype.type(0)] * lanes
    for i, v in enumerate(values):
        tot[(i % width) % lanes] += v
    return np.array(tot, values.dtype)


def definition(x, axes):
    kept = [d for d in range(x.ndim) if d not in axes]
    red = [x.shape[d] for d in axes if x.shape[d] != 1]
    n, lanes = math.prod(red), LANE_BYTES // x.itemsize
    shape = [1 if d in axes else e for d, e in enumerate(x.shape)]
    if not x.size:
        return np.zeros(shape, x.dtype)
    y = np.transpose(x, kept + list(axes)).reshape(-1, n)
    last = max((d for d, e in enumerate(x.shape) if e > 1), default=0)
    out = []
    for cell in y:
        if n < 2 * lanes or last not in axes:
            tot = x.dtype.type(0)
            for v in cell:
                tot += v
            out.append(tot)
        elif len(y) == 1 and n >= 4 * SUM_BLOCK:
            k = max(1, SUM_BLOCK // (n // red[0])) if len(red) > 1 else SUM_BLOCK
            block = k * (n // red[0])
            width = red[-1] if len(red) > 1 else block
            parts = [_lanes(cell[b : b + block], lanes, width) for b in range(0, n, block)]
            out.append(pairwise(pairwise(np.array(parts))))
        else:
            out.append(pairwise(_lanes(cell, lanes, red[-1] if len(red) > 1 else n)[None])[0])
    return np.array(out, x.dtype).reshape(shape)


SHAPES = [(7,), (17,), (33,), (1024,), (1100,), (3000,), (3, 5), (4, 40), (40, 4), (33, 100),
          (2, 3, 4), (5, 1, 70), (1, 1, 2000), (300, 7, 9), (1100, 3), (2, 1500), (3, 70, 6),
          (1030, 2), (7, 1, 1), (0, 5), (1, 1)]  # fmt: skip


def _same(a, b):
    return (
        a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_fast_path_gives_the_definitions_bits(shape, dtype):
    rng = np.random.default_rng(len(shape) * 1000 + sum(shape))
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)
    x[rng.random(shape) < 0.1] = -0.0
    if dtype is np.complex128:
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    for axes in [a for r in range(1, x.ndim + 1) for a in itertools.combinations(range(x.ndim), r)]:
        for view, ax in [(x, axes), (x.T, tuple(sorted(x.ndim - 1 - a for a in axes)))]:
            assert _same(ordered_sum(view, ax), definition(view, ax)), (shape, ax, dtype)


def test_a_sum_of_negative_zeros_is_positive_zero_as_a_register_starts():
    for shape, axes in [((40,), (0,)), ((3, 2000), (0,)), ((2000, 3), (1,)), ((5000,), (0,))]:
        assert not np.signbit(ordered_sum(np.full(shape, -0.0), axes)).any()


def test_sliced_and_flipped_views_fold_in_logical_order():
    x = np.random.default_rng(3).standard_normal((1200, 40)) * 1e6
    for view in [x[::-1], x[:, ::-1], x[::2, 3:], x[:, 1:]]:
        for axes in [(0,), (1,), (0, 1)]:
            assert _same(ordered_sum(view, axes), definition(view, axes))


def _fused_bodies(x, idx):
    """Sums over the last axis of values fused from a gather, a pad, a concatenation, a
    slice, a flip, a masked select and a padded gather from a column-major copy: each a
    different body for the reduce to fold (exact ops only: the two devices agree on every
    element, so any difference is the sum's)."""
    import limn

    return [
        x[idx],
        x.pad(((0, 0), (3, 5))),
        limn.cat([x[:, :37] * 2, x[:, 37:] - 1], 1),
        x[:, 1:-2],
        x.flip(1) - 1,
        limn.where(x > 0, x, x * 0.5),
        x.T.contiguous().T[idx].pad(((0, 0), (2, 1)))[:, 1:-2],  # rows gathered from columns
    ]


@pytest.mark.parametrize("width", [7, 40, 300])
def test_a_sums_bits_do_not_depend_on_what_was_fused_into_it(width):
    """Each value summed as it is built (fused into the reduce) and after it was read
    (the reduce over its buffer), on the c device, and on the numpy device: one sum's
    bits, whatever the body the c device folded (a gather's CHECK kept it serial once)."""
    from limn import Tensor

    rng = np.random.default_rng(width)
    data, rows = rng.standard_normal((9, width)).astype(np.float32), rng.integers(0, 9, 5)
    got = {}
    for dev in ("c", "numpy"):
        x, idx = Tensor(data, device=dev), Tensor(rows, device=dev)
        fused = [v.sum(-1).numpy() for v in _fused_bodies(x, idx)]
        stored = []
        for v in _fused_bodies(x, idx):
            v.numpy()  # read first: the sum reads its buffer
            stored.append(v.sum(-1).numpy())
        got[dev] = fused, stored
    for case, want in enumerate(got["numpy"][0]):
        for name, sums in (("c fused", got["c"][0]), ("c stored", got["c"][1])):
            assert sums[case].tobytes() == want.tobytes(), (case, name)
        assert got["numpy"][1][case].tobytes() == want.tobytes(), case
