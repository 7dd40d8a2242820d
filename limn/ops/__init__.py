"""The torch surface of limn.Tensor, one module per concept.

Every torch name a Tensor or ``limn`` answers (``x.roll``, ``limn.logaddexp``,
``limn.linalg.norm``) lives in the module named for what it is:

| module | holds |
|---|---|
| ``math`` | elementwise: arithmetic, comparisons, logic, bits, exp/log/trig, activations |
| ``reductions`` | sums, extremes, means, var/std, norms, softmax, cumulative scans |
| ``sorting`` | ``sort``, ``argsort``, ``topk`` |
| ``order_statistics`` | ``median``, ``kthvalue``, ``quantile``, ``mode``: read off a sorted copy |
| ``counting`` | ``histc``, ``histogram``, ``bincount``, ``searchsorted``, ``isin``, ``unique`` |
| ``moments`` | ``cov``, ``corrcoef``, the trapezoid rule |
| ``pairs`` | ``combinations``, ``cdist``, ``pdist`` |
| ``matrices`` | ``matmul`` and the products, ``addmm`` and kin, ``trace``, ``tril``, ``triu`` |
| ``linalg`` | ``limn.linalg``, ``tensordot``, ``cross``, ``renorm`` |
| ``decompositions`` | inverse, determinant, solve, Cholesky, QR, SVD, eigh, pinv, lstsq (host) |
| ``lapack`` | LAPACK's packed forms: ``lu_factor``, ``lu_solve``, ``geqrf``, ``ormqr`` (host) |
| ``movement`` | views and copies that rearrange: ``reshape``, ``permute``, ``roll``, ``split`` |
| ``joining`` | ``cat``, ``stack``, ``hstack`` and kin, ``block_diag``, ``meshgrid`` |
| ``indexing`` | ``x[key]``, ``x[key] = v``, ``gather``, ``take``, ``masked_select``, ``nonzero`` |
| ``scatter`` | ``scatter``, ``scatter_add``, ``scatter_reduce``, ``index_add``/``copy``/``fill`` |
| ``view_scatter`` | ``select_scatter`` and the scatters into a view; ``index_put``, ``put`` |
| ``creation`` | ``linspace``, ``logspace``, ``tril_indices``, ``unravel_index``, ``empty*`` |
| ``normalization`` | ``native_layer_norm`` and kin: a norm with the statistics it saved |
| ``inplace`` | every in-place spelling (``x.add_``, ``x += y``, ``inplace=True``) |
| ``promotion`` | torch's type promotion (``result_type``) |
| ``facts`` | what a tensor is: ``is_floating_point``, ``is_cuda``, ``element_size`` |
| ``arguments`` | torch's argument forms: ``dim=`` beside ``axis=``, shapes, tensor lists |

The Tensor's own constructors (``zeros``, ``arange``, ``randn``, ``from_numpy``) are the
``Creation`` mixin of ``limn/creation.py``, beside the device and the generator.

Two kinds of module, because ``limn/tensor.py`` builds the class from some of them: a
mixin (``Math``, ``Reductions``, ``Sorting``, ``Matrices``, ``Movement``, ``Indexing``,
``Scatter``, ``Facts``) is a base class of ``Tensor`` and imports nothing that imports
the Tensor (``tests/test_layout.py`` holds the import graph to no cycle); the others
(``joining``, ``creation``, ``linalg``, ``decompositions``, ``lapack``, ``order_statistics``,
``counting``, ``moments``, ``pairs``, ``view_scatter``, ``normalization``) import the
Tensor, and set their methods on it where torch has them; ``limn/__init__.py`` imports
them. This package's own import does nothing, so either kind can be imported first.
"""
