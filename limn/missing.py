"""torch's names that limn does not have, and what to use instead.

A torch program ported by its imports meets a name limn lacks as an AttributeError. The
error says so in torch's terms (``torch.fft is not in limn``) and names what limn offers
instead where it has something (``LACKS``), or the torch name limn answers that the
misspelt one is nearest to. It never hints at one of limn's own modules (``limn.versions``
is limn's write tracking, not ``torch.version``): Python's own "Did you mean" reads every
attribute of the module, so the error carries its ``name`` and Python adds none.
docs/torch.md's checklist lists the same names (a test keeps the two in step).
"""

from __future__ import annotations

import difflib

# limn's modules that stand for torch's of the same name (the rest are limn's own)
TORCH_MODULES = {
    "_inductor", "accelerator", "amp", "autograd", "backends", "cuda", "distributed", "fft",
    "linalg", "masked", "nn", "onnx", "optim", "signal", "special", "utils", "version",
}  # fmt: skip

# torch.<name> -> what limn offers instead (an empty string: nothing)
LACKS = {
    "jit": "limn compiles every realize already; limn.capture(step) also skips the Python",
    "sparse": "limn's tensors are dense",
    "complex": "limn has no complex dtypes",
    "view_as_real": "limn has no complex dtypes",
}


def no_such_name(module: str, name: str, answers: list[str], instead: str = "") -> AttributeError:
    """The error for ``module.name``: torch's name is not in limn, and what instead
    (``instead``, or ``LACKS``'s word for a name of limn's top level)."""
    torch_path = "torch" + module.removeprefix("limn")
    said = f"module {module!r} has no attribute {name!r}: {torch_path}.{name} is not in limn"
    instead = instead or (LACKS.get(name, "") if module == "limn" else "")
    if instead:
        said += f"; {instead}"
    elif name not in LACKS:
        near = difflib.get_close_matches(name, answers, n=1, cutoff=0.8)
        said += f" (did you mean {module}.{near[0]}?)" if near else ""
    return AttributeError(said + " (docs/torch.md lists what limn answers)", name=name)
