"""limn_array: the Python Array API standard (2025.12) over limn's lazy op graph.

``xp = limn.array_namespace()`` (or ``import limn_array as xp``) gives a namespace that
array code written against the standard runs on unchanged. Arrays are lazy handles on
limn op-graph nodes: functions build graph through the same composition layer as
``limn.Tensor`` and bytes are computed only when asked for. One module per section of
the standard; ``linalg`` and ``fft`` are the extensions.
"""

# ruff: noqa: F401  (the names imported here are the namespace: __all__ lists them)
import math

from limn_array import (
    _operators,  # noqa: F401  (installs the operators: x + y, x[k], x @ y, ...)
    fft,
    linalg,
)
from limn_array._array import Array, from_tensor, to_tensor
from limn_array._creation import (  # noqa: A004
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from limn_array._data_types import (  # noqa: A004
    astype,
    bool,
    can_cast,
    complex64,
    complex128,
    finfo,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from limn_array._elementwise import (  # noqa: A004
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clip,
    conj,
    copysign,
    cos,
    cosh,
    divide,
    equal,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    imag,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    nextafter,
    not_equal,
    positive,
    pow,
    real,
    reciprocal,
    remainder,
    round,
    sign,
    signbit,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
)
from limn_array._indexing import (  # noqa: A004
    take,
    take_along_axis,
)
from limn_array._info import (  # noqa: A004
    __array_namespace_info__,
)
from limn_array._linalg import (  # noqa: A004
    matmul,
    matrix_transpose,
    tensordot,
    vecdot,
)
from limn_array._manipulation import (  # noqa: A004
    broadcast_arrays,
    broadcast_shapes,
    broadcast_to,
    concat,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    unstack,
)
from limn_array._policy import API_VERSION as __array_api_version__
from limn_array._policy import Device
from limn_array._searching import (  # noqa: A004
    argmax,
    argmin,
    count_nonzero,
    nonzero,
    searchsorted,
    where,
)
from limn_array._set import (  # noqa: A004
    isin,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from limn_array._sorting import (  # noqa: A004
    argsort,
    sort,
)
from limn_array._statistical import (  # noqa: A004
    cumulative_prod,
    cumulative_sum,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from limn_array._utility import (  # noqa: A004
    all,
    any,
    diff,
)

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

# every public name above, and the two dunders the standard names
__all__ = sorted(n for n in globals() if n[0] != "_" and n != "math")
__all__ += ["__array_api_version__", "__array_namespace_info__"]
