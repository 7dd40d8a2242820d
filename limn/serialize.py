"""limn.serialize: safetensors checkpoints, read and written with numpy alone.

The format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
name to its dtype code, shape and ``data_offsets`` [begin, end) into the data section,
with an optional ``__metadata__`` of string pairs, then the data section, each tensor's
bytes row-major and little-endian. Nothing in a file is ever executed: the header goes
through ``json.loads`` and every field is checked against the file before a byte of data
is trusted. A file limn writes carries, in its metadata under ``limn.sha256``, the sha256
of its header and data, so a bit that flips on disk or in a copy is refused, not loaded
as a slightly different number; files from other writers have none and load as they are
(the key never shows in the metadata limn returns).

A checkpoint target is a Module or an optimizer (anything with ``state_dict()``), a dict
of Tensors, or a dict of those under prefixes: ``{"model": model, "optim": opt}`` saves
``model.fc.weight`` next to ``optim.fc.weight.exp_avg`` and ``optim.step``, so a run
resumes from one file. ``load_into`` writes a file into the target's own Tensors, every
write in one realize and only after the whole file and every destination have been
checked, so either everything is loaded or nothing is; a Tensor held elsewhere (by an
optimizer, by a captured step) keeps its buffer and sees the new values.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections import namedtuple

import numpy as np

from ir.graph import dtypes
from ir.graph.dtypes import DType
from limn.tensor import Tensor, realize

MAX_HEADER_BYTES = 100_000_000  # the bound the safetensors library itself enforces
DIGEST = "limn.sha256"  # the metadata key of the sha256 limn writes (the module docstring)

# safetensors' dtype codes: the kind's letter and the bits (I8 ... U64, F16, F32, F64, C64), but
# BOOL and BF16; every limn dtype but complex128, which the format has no code for
CODES: dict[DType, str] = {d: f"{d.kind.upper()}{d.bits}" for d in dtypes.ALL[:-1]}
CODES |= {dtypes.bool_: "BOOL", dtypes.bfloat16: "BF16"}
BY_CODE = {code: d for d, code in CODES.items()}


class CheckpointError(ValueError):
    """A checkpoint file, or its fit to the tensors it is loaded into, is wrong."""


# what torch's load_state_dict returns, so code that reads the lists ports unchanged
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


# ---- naming what goes into a file -------------------------------------------------


def flatten(target, prefix: str = "") -> dict[str, object]:
    """Name every tensor in ``target``: Tensors and arrays as themselves, anything with
    ``state_dict()`` by its keys, dicts by their keys, joined with dots."""
    if isinstance(target, Tensor | np.ndarray | np.generic):
        if not prefix:
            raise TypeError("checkpoint: a bare tensor needs a name; pass {'name': tensor}")
        return {prefix: target}
    if hasattr(target, "state_dict"):
        target = target.state_dict()
    if not isinstance(target, dict):
        raise TypeError(
            f"checkpoint: cannot name the tensors of a {type(target).__name__} at "
            f"{prefix or 'the top level'}; accepted: Tensor, numpy array, dict, Module, optimizer"
        )
    out: dict[str, object] = {}
    for k, v in target.items():
        if not isinstance(k, str):
            raise TypeError(f"checkpoint: names must be strings, got {k!r}")
        for name, t in flatten(v, f"{prefix}.{k}" if prefix else k).items():
            if name in out:
                raise CheckpointError(f"checkpoint: two tensors are both named {name!r}")
            out[name] = t
    return out


# ---- writing ----------------------------------------------------------------------


def _to_numpy(name: str, t) -> np.ndarray:
    arr = t.numpy() if isinstance(t, Tensor) else np.asarray(t)
    try:
        d = dtypes.as_dtype(arr.dtype)
    except TypeError:
        d = None
    if d not in CODES:
        raise CheckpointError(
            f"save: tensor {name!r} has dtype {arr.dtype}, which safetensors cannot store; "
            f"accepted: {', '.join(str(d) for d in CODES)}"
        )
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d as 0-d


def save(tensors, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (see ``flatten``) to ``path`` as one safetensors file.

    Lazy Tensors are computed in one realize first. The file is written beside ``path``
    and renamed over it, so a crash mid-write never leaves a truncated checkpoint.
    """
    named = flatten(tensors)
    if "__metadata__" in named or DIGEST in (metadata or {}):
        raise CheckpointError(f"save: '__metadata__' (a tensor name) and {DIGEST!r} (a "
                              "metadata key) are reserved")  # fmt: skip
    if metadata is not None and not _all_strings(metadata):
        raise TypeError("save: metadata must map strings to strings")
    realize(*(t for t in named.values() if isinstance(t, Tensor)))
    arrays = {name: _to_numpy(name, t) for name, t in named.items()}
    if sys.byteorder != "little":
        arrays = {name: a.byteswap() for name, a in arrays.items()}
    # widest items first keeps every tensor aligned to its itemsize, as the library does
    order = sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n))
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        a = arrays[name]
        code, end = CODES[dtypes.as_dtype(a.dtype)], offset + a.nbytes
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, end]}
        offset = end
    digest = _digest(header, [arrays[name] for name in order])
    header["__metadata__"] = {**header.get("__metadata__", {}), DIGEST: digest}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for name in order:
                f.write(arrays[name].tobytes())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# ---- reading ----------------------------------------------------------------------


def _digest(header: dict, chunks) -> str:
    """sha256 of the header as canonical JSON (without the digest) and the data's bytes."""
    h = hashlib.sha256(json.dumps(header, sort_keys=True, ensure_ascii=False).encode())
    for c in chunks:
        h.update(c if isinstance(c, bytes) else c.reshape(-1).view(np.uint8))
    return h.hexdigest()


def _all_strings(d) -> bool:
    return all(isinstance(k, str) and isinstance(v, str) for k, v in d.items())


def _fail(path, msg: str):
    raise CheckpointError(f"checkpoint {os.fspath(path)!r}: {msg}")


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"the header names {dup!r} twice")
    return dict(pairs)


def _parse_header(path, raw: bytes, data_len: int):
    """Validated (metadata, {name: (dtype, shape, begin, end)}) from the header bytes."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        _fail(path, f"the header is not valid JSON ({e})")
    except RecursionError:
        # json's parser recurses once per nesting level; no valid header nests past three
        _fail(path, "the header is nested too deeply to be a checkpoint header")
    if not isinstance(header, dict):
        _fail(path, f"the header must be a JSON object, got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not _all_strings(metadata):
        _fail(path, "__metadata__ must map strings to strings")
    digest = metadata.pop(DIGEST, None)
    signed = {**header, "__metadata__": metadata} if metadata else dict(header)
    entries = {}
    for name, info in header.items():
        where = f"tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            _fail(path, f"{where}: needs exactly dtype, shape and data_offsets, got {info!r}")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(code, str) or code not in BY_CODE:
            _fail(path, f"{where}: unknown dtype {code!r}; accepted: {', '.join(BY_CODE)}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            _fail(path, f"{where}: shape must be a list of non-negative ints, got {shape!r}")
        pair = isinstance(offsets, list) and len(offsets) == 2
        if (
            not pair
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            _fail(path, f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
        d = BY_CODE[code]
        begin, end = offsets
        if end - begin != math.prod(shape) * d.itemsize:
            _fail(
                path,
                f"{where}: {code}{shape} needs {math.prod(shape) * d.itemsize} bytes but "
                f"data_offsets {offsets} span {end - begin}",
            )
        if end > data_len:
            _fail(
                path,
                f"{where}: data_offsets {offsets} run past the {data_len}-byte data section "
                "(is the file truncated?)",
            )
        entries[name] = (d, tuple(shape), begin, end)
    pos, prev = 0, None
    for name, (_, _, begin, end) in sorted(entries.items(), key=lambda e: e[1][2:]):
        if begin < pos:
            _fail(path, f"tensor {name!r} at bytes [{begin}, {end}) overlaps tensor {prev!r}")
        if begin > pos:
            _fail(path, f"bytes [{pos}, {begin}) of the data section belong to no tensor")
        pos, prev = end, name
    if pos != data_len:
        _fail(path, f"bytes [{pos}, {data_len}) at the end of the data section belong to no tensor")
    return metadata, entries, (digest, signed)


def _pickled(head: bytes, size: int) -> bool:
    """Whether a file starting with ``head`` (its first 9 bytes) is torch.save's: a zip
    (``PK`` 3 4) or a pickle (0x80 and a protocol number), and not safetensors: an 8-byte
    little-endian header length that fits the file, then the header's JSON object, ``{``.
    A safetensors length may well start with 0x80 (its low byte), so that byte alone does
    not tell them apart."""
    n = int.from_bytes(head[:8], "little")
    if len(head) == 9 and 8 + n <= size and head[8:9] == b"{":
        return False
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80" and 1 <= head[1] <= 5


def _read(path):
    """(metadata, {name: numpy array}) of a fully validated file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            _fail(path, f"the file has {size} bytes, fewer than the 8-byte header length")
        head = f.read(9)
        if _pickled(head, size):
            _fail(path, "this is a torch pickle (torch.save's zip or legacy format), not "
                        "safetensors, and limn never unpickles; load it with torch and pass the "
                        "state dict (model.load_state_dict({k: v.numpy() for k, v in "
                        "torch.load(p).items()})), or convert it once with "
                        "safetensors.torch.save_file")  # fmt: skip
        n = int.from_bytes(head[:8], "little")
        f.seek(8)
        if n > MAX_HEADER_BYTES:
            _fail(path, f"the header claims {n} bytes, more than the {MAX_HEADER_BYTES} allowed")
        if 8 + n > size:
            _fail(path, f"the header claims {n} bytes but the file has only {size - 8} after it")
        metadata, entries, (digest, signed) = _parse_header(path, f.read(n), size - 8 - n)
        data = f.read(size - 8 - n)
    if len(data) != size - 8 - n:
        _fail(path, "the file changed size while being read")
    if digest is not None and _digest(signed, [data]) != digest:
        _fail(path, f"its bytes do not match the {DIGEST} limn wrote with them: the file "
                    "changed on disk or in a copy")  # fmt: skip
    arrays = {}
    for name, (d, shape, begin, _) in entries.items():
        a = np.frombuffer(data, dtypes.to_numpy(d), math.prod(shape), begin).reshape(shape)
        if sys.byteorder != "little":
            a = a.byteswap()
        if d == dtypes.bool_ and a.size and a.view(np.uint8).max() > 1:
            _fail(path, f"tensor {name!r}: a BOOL byte holds a value other than 0 or 1")
        arrays[name] = a.copy()
    return metadata, arrays


def load(path, numpy: bool = False, device: str | None = None) -> dict:
    """Every tensor in the file by name: Tensors, or numpy arrays with ``numpy=True``."""
    _, arrays = _read(path)
    if numpy:
        return arrays
    return {k: Tensor(a, dtype=dtypes.as_dtype(a.dtype), device=device) for k, a in arrays.items()}


def load_metadata(path) -> dict[str, str]:
    return _read(path)[0]


def assign_named(
    dests: dict, values: dict, strict: bool = True, source: str = "load", cast: bool = False
) -> IncompatibleKeys:
    """Write ``values`` (Tensors or arrays) into the Tensors ``dests``, by name.

    Checks every name, shape and dtype before building any write, then commits all the
    writes in one realize; ``strict`` demands the two name sets be equal, otherwise only
    the names both hold are written. ``cast`` converts a value of another dtype, as torch's
    ``load_state_dict`` copies into a parameter of its own dtype. Names of one Tensor (a tied
    weight's second path) are written once, through the first. A live Tensor is read as it
    is now, without its autograd history: loading copies values, it is not differentiable.
    """
    values = {k: _as_host(v) for k, v in values.items()}
    missing = [k for k in dests if k not in values]  # in torch's order, listed sorted
    unexpected = [k for k in values if k not in dests]
    problems = []  # every one of them, so a user fixes a checkpoint in one go
    if strict and (missing or unexpected):
        problems.append(
            f"names do not match; missing from the source: {sorted(missing) or 'none'}; "
            f"not in the destination: {sorted(unexpected) or 'none'}"
        )
    names, seen = [], set()
    for k in (k for k in dests if k in values):
        dst, v = dests[k], values[k]
        if not isinstance(dst, Tensor):
            raise TypeError(f"{source}: destination {k!r} is a {type(dst).__name__}, not a Tensor")
        if id(dst) not in seen:
            names.append(k)
        seen.add(id(dst))
        vshape = tuple(v.shape) if isinstance(v, Tensor | np.ndarray) else None
        try:
            vdtype = v.dtype if isinstance(v, Tensor) else dtypes.as_dtype(v.dtype)
        except (TypeError, AttributeError):
            vdtype = None
        if vshape != dst.shape or vdtype != dst.dtype and not (cast and vdtype is not None):
            got = f"{vdtype}{list(vshape)}" if vshape is not None else _class_name(v)
            problems.append(
                f"tensor {k!r} is {dst.dtype}{list(dst.shape)} but the source holds {got}"
            )
    if len(problems) == 1:
        raise CheckpointError(f"{source}: {problems[0]}")
    if problems:
        raise CheckpointError(f"{source}: {len(problems)} mismatches:\n  " + "\n  ".join(problems))
    writes = []
    for k in names:
        dst, v = dests[k], values[k]
        v = (
            v.detach().cast(dst.dtype)
            if isinstance(v, Tensor)
            else Tensor(v, dst.dtype, device=dst.device)
        )
        writes.append(dst.assign(v))
    realize(*writes)
    return IncompatibleKeys(missing, unexpected)


def _as_host(v):
    """A value of another framework's tensor class (torch's: it has ``detach`` and
    ``numpy``) as a numpy array; the rest as it is."""
    if isinstance(v, Tensor | np.ndarray) or not hasattr(v, "__array__"):
        return v
    try:
        return np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
    except (TypeError, ValueError, RuntimeError):
        return v  # refused below, by its class's full name


def _class_name(v) -> str:
    """``torch.Tensor``, not ``Tensor``: limn's own class has that short name."""
    cls = type(v)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def load_into(target, path, strict: bool = True) -> dict[str, str]:
    """Load the file at ``path`` into ``target``'s own Tensors; returns its metadata.

    ``target`` names its Tensors as ``save`` does. The file is read and checked whole,
    and every name, shape and dtype matched, before anything is written.
    """
    dests = flatten(target)
    metadata, arrays = _read(path)
    assign_named(dests, arrays, strict=strict, source=f"load_into {os.fspath(path)!r}")
    return metadata
