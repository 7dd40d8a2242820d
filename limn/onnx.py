"""limn.onnx: importable, so a torch program that imports ``torch.onnx`` runs; exporting
raises, naming what limn exports instead (C source, ``limn.export_c``)."""

from __future__ import annotations


def export(model, args=None, f=None, *rest, **kwargs):
    raise NotImplementedError(
        "limn.onnx.export: limn does not write ONNX; limn.export_c(fn, *examples, "
        "path=...) exports a model's forward as C source (docs/api.md)"
    )
