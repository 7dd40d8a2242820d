"""limn.serialize against the safetensors library, resume from one file, and bad files."""

import json

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import limn
from ir.graph import dtypes
from limn import Tensor, nn, optim, serialize
from limn.serialize import CheckpointError

RNG = np.random.default_rng(0)


def sample(d) -> np.ndarray:
    """A (3, 4) array of ``d`` that uses its range: negatives, extremes, fractions."""
    npd = dtypes.to_numpy(d)
    if d == dtypes.bool_:
        return RNG.integers(0, 2, (3, 4)).astype(bool)
    if d.is_int:
        info = np.iinfo(npd)
        a = RNG.integers(info.min, info.max, (3, 4), dtype=npd, endpoint=True)
        a.flat[:2] = info.min, info.max
        return a
    if d.is_complex:
        return (RNG.standard_normal((3, 4)) + 1j * RNG.standard_normal((3, 4))).astype(npd)
    return (RNG.standard_normal((3, 4)) * 100).astype(npd)


ALL = list(serialize.CODES)
NUMPY_LIB = [d for d in ALL if d != dtypes.bfloat16]  # safetensors.numpy has no bfloat16
TORCH_LIB = [d for d in ALL if d != dtypes.complex64 or hasattr(torch, "complex64")]


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def from_torch(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# ---- against the library, both directions -----------------------------------------


@pytest.mark.parametrize("d", NUMPY_LIB, ids=str)
def test_every_dtype_written_by_limn_reads_back_in_safetensors_numpy(tmp_path, d):
    a = sample(d)
    serialize.save({"t": Tensor(a, dtype=d), "empty": np.zeros((0, 2), a.dtype)}, tmp_path / "f")
    got = safetensors.numpy.load_file(str(tmp_path / "f"))
    assert got["t"].dtype == a.dtype and got["empty"].shape == (0, 2)
    np.testing.assert_array_equal(got["t"], a)


@pytest.mark.parametrize("d", TORCH_LIB, ids=str)
def test_every_dtype_written_by_limn_reads_back_in_safetensors_torch(tmp_path, d):
    a = sample(d)
    serialize.save({"t": Tensor(a, dtype=d), "scalar": Tensor(a[0, 0], dtype=d)}, tmp_path / "f")
    got = safetensors.torch.load_file(str(tmp_path / "f"))
    assert got["scalar"].shape == ()
    np.testing.assert_array_equal(from_torch(got["t"]).view(np.uint8), a.view(np.uint8))


@pytest.mark.parametrize("d", NUMPY_LIB, ids=str)
def test_every_dtype_written_by_safetensors_numpy_loads_in_limn(tmp_path, d):
    a = sample(d)
    safetensors.numpy.save_file({"t": a, "s": np.array(a[0, 0])}, str(tmp_path / "f"))
    got = serialize.load(tmp_path / "f")
    assert got["t"].dtype == d and got["s"].shape == ()
    np.testing.assert_array_equal(got["t"].numpy(), a)


@pytest.mark.parametrize("d", TORCH_LIB, ids=str)
def test_every_dtype_written_by_safetensors_torch_loads_in_limn(tmp_path, d):
    a = sample(d)
    safetensors.torch.save_file({"t": to_torch(a), "b": to_torch(a[1:])}, str(tmp_path / "f"))
    got = serialize.load(tmp_path / "f", numpy=True)
    assert got["t"].dtype == a.dtype
    np.testing.assert_array_equal(got["t"].view(np.uint8), a.view(np.uint8))


def test_metadata_round_trips_with_the_library(tmp_path):
    meta = {"step": "7", "note": "résumé"}
    serialize.save({"x": np.ones(2, np.float32)}, tmp_path / "a", metadata=meta)
    with safetensors.safe_open(str(tmp_path / "a"), "np") as f:
        assert f.metadata() == {**meta, serialize.DIGEST: f.metadata()[serialize.DIGEST]}
    assert serialize.load_metadata(tmp_path / "a") == meta
    safetensors.numpy.save_file({"x": np.ones(2)}, str(tmp_path / "b"), metadata=meta)
    assert serialize.load_metadata(tmp_path / "b") == meta


@pytest.mark.parametrize("where", ["data", "a shape", "a name", "the metadata", "the digest"])
def test_a_bit_flipped_in_a_file_limn_wrote_is_refused_and_assigns_nothing(tmp_path, where):
    pair = {"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
            "v": Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))}  # fmt: skip
    serialize.save(pair, tmp_path / "f", metadata={"step": "4"})
    raw = bytearray((tmp_path / "f").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = raw[8 : 8 + n].decode()
    at = {
        "data": 8 + n + 13,  # a float's mantissa: still a number, a wrong one
        "a shape": 8 + header.index('"shape":[2,3]') + 9,  # "2" -> "3"
        "a name": 8 + header.index('"w"') + 1,
        "the metadata": 8 + header.index('"4"') + 1,
        "the digest": 8 + header.index(serialize.DIGEST) + len(serialize.DIGEST) + 5,
    }[where]
    raw[at] ^= 1
    (tmp_path / "f").write_bytes(bytes(raw))
    dest = {k: t.zeros_like().contiguous() for k, t in pair.items()}
    with pytest.raises(CheckpointError):
        serialize.load_into(dest, tmp_path / "f")
    assert not any(t.numpy().any() for t in dest.values())


def test_a_reserved_metadata_key_is_refused_when_saving(tmp_path):
    with pytest.raises(CheckpointError, match="limn.sha256"):
        serialize.save({"x": np.ones(2)}, tmp_path / "f", metadata={serialize.DIGEST: "0"})


def test_complex128_is_refused_with_the_tensor_name(tmp_path):
    with pytest.raises(CheckpointError, match="'z' has dtype complex128"):
        serialize.save({"z": np.zeros(2, np.complex128)}, tmp_path / "f")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


class Net(nn.Module):
    def __init__(self):
        self.embed = nn.Embedding(10, 6)
        self.conv = nn.Conv1d(6, 4, 3, padding=1, groups=2)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 3)

    def forward(self, ids):
        h = self.conv(self.embed(ids).permute(0, 2, 1)).permute(0, 2, 1)
        return self.head(self.norm(h).relu())


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 6)
        self.conv = torch.nn.Conv1d(6, 4, 3, padding=1, groups=2)
        self.norm = torch.nn.LayerNorm(4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, ids):
        h = self.conv(self.embed(ids).permute(0, 2, 1)).permute(0, 2, 1)
        return self.head(self.norm(h).relu())


def test_a_model_saved_by_limn_loads_into_torch_untransposed(tmp_path):
    net = Net()
    serialize.save(net, tmp_path / "m.safetensors")
    tnet = TorchNet()
    tnet.load_state_dict(safetensors.torch.load_file(str(tmp_path / "m.safetensors")))
    ids = RNG.integers(0, 10, (2, 5))
    np.testing.assert_allclose(
        net(Tensor(ids)).numpy(), tnet(torch.tensor(ids)).detach().numpy(), rtol=1e-5, atol=1e-6
    )
    # and back: torch's file into a fresh limn model
    safetensors.torch.save_file(tnet.state_dict(), str(tmp_path / "t.safetensors"))
    net2 = Net()
    serialize.load_into(net2, tmp_path / "t.safetensors")
    np.testing.assert_array_equal(net2(Tensor(ids)).numpy(), net(Tensor(ids)).numpy())


# ---- resume -----------------------------------------------------------------------


def make(kind: str, seed: int):
    limn.set_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), Tensor.tanh, nn.Linear(8, 2))
    if kind == "adamw":
        opt = optim.AdamW(model.named_parameters(), lr=0.05)
    elif kind == "sgd":
        opt = optim.SGD(model.named_parameters(), lr=0.1, momentum=0.9, dampening=0.3)
    else:
        opt = optim.muon_with_adamw(model, muon_lr=0.05, adamw_lr=0.05)
    return model, opt


DATA = [
    (RNG.standard_normal((8, 4)).astype(np.float32), RNG.standard_normal((8, 2)).astype(np.float32))
    for _ in range(8)
]


def train(model, opt, batches) -> list[dict[str, np.ndarray]]:
    trail = []
    for x, y in batches:
        loss = nn.mse_loss(model(Tensor(x)), Tensor(y))
        loss.backward()
        opt.step(loss)
        opt.zero_grad()
        trail.append({k: t.numpy() for k, t in model.state_dict().items()})
    return trail


@pytest.mark.parametrize("kind", ["adamw", "sgd", "muon+adamw"])
def test_resuming_from_one_file_follows_the_uninterrupted_trajectory(tmp_path, kind):
    k = 4
    model, opt = make(kind, 0)
    full = train(model, opt, DATA)

    model, opt = make(kind, 0)
    train(model, opt, DATA[:k])
    serialize.save({"model": model, "optim": opt}, tmp_path / "ckpt", metadata={"step": str(k)})

    resumed_model, resumed_opt = make(kind, 1)  # different init: everything must come from the file
    held = {n: (t, t.node.arg) for n, t in resumed_opt.state_dict().items()}
    meta = serialize.load_into({"model": resumed_model, "optim": resumed_opt}, tmp_path / "ckpt")
    assert meta == {"step": str(k)}
    for n, t in resumed_opt.state_dict().items():  # loaded in place, never rebound
        assert t is held[n][0] and t.node.arg is held[n][1]
    resumed = train(resumed_model, resumed_opt, DATA[k:])
    for a, b in zip(full[k:], resumed):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)

    fresh_model, fresh_opt = make(kind, 1)  # the model alone, optimizer state left at zero
    serialize.load_into({"model": fresh_model}, tmp_path / "ckpt", strict=False)
    np.testing.assert_array_equal(
        fresh_model.state_dict()["0.weight"].numpy(), full[k - 1]["0.weight"]
    )
    without = train(fresh_model, fresh_opt, DATA[k:])
    assert not all(np.array_equal(without[-1][n], full[-1][n]) for n in full[-1])


# ---- bad files --------------------------------------------------------------------


def raw_file(path, header, data: bytes = b"", n: int | None = None) -> None:
    if header is None:  # not even a header length
        (path).write_bytes(data)
        return
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(text) if n is None else n).to_bytes(8, "little") + text + data)


def good_header(**over):
    h = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "I16", "shape": [2, 1], "data_offsets": [8, 12]},
    }
    for k, v in over.items():
        h[k] = v
    return h


GOOD_DATA = np.array([1, 2], np.float32).tobytes() + np.array([3, 4], np.int16).tobytes()

BAD_FILES = {
    "tiny": (None, None, b"\x01\x02", r"has 2 bytes, fewer than the 8-byte header length"),
    "header beyond file": (good_header(), 10_000, GOOD_DATA, r"claims 10000 bytes but the file"),
    "header too large": (b"{}", 200_000_000, b"", r"more than the 100000000 allowed"),
    "not json": (b"{'a': 1}", None, b"", r"not valid JSON"),
    "deeply nested": (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None, b"", r"nested"),
    "deeply nested object": (
        b'{"a": ' + b'{"b": ' * 100_000 + b"1" + b"}" * 100_001,
        None,
        b"",
        r"nested",
    ),
    "deeply nested metadata": (
        b'{"__metadata__": {"k": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
        None,
        b"",
        r"nested",
    ),
    "not utf-8": (b"\xff\xfe{}", None, b"", r"not valid JSON"),
    "not an object": (b"[1, 2]", None, b"", r"must be a JSON object"),
    "duplicate name": (
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
        None,
        b"\x00\x00",
        r"names 'a' twice",
    ),  # fmt: skip
    "truncated": (good_header(), None, GOOD_DATA[:-3], r"'b'.*run past the 9-byte data.*truncated"),
    "offset out of range": (
        good_header(b={"dtype": "I16", "shape": [2, 1], "data_offsets": [12, 16]}),
        None,
        GOOD_DATA,
        r"'b'.*run past",
    ),  # fmt: skip
    "overlap": (
        good_header(b={"dtype": "I16", "shape": [2, 1], "data_offsets": [6, 10]}),
        None,
        GOOD_DATA[:10],
        r"'b' at bytes \[6, 10\) overlaps tensor 'a'",
    ),  # fmt: skip
    "gap": (
        good_header(a={"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}),
        None,
        GOOD_DATA,
        r"bytes \[4, 8\) of the data section belong to no tensor",
    ),  # fmt: skip
    "trailing bytes": (good_header(), None, GOOD_DATA + b"xx", r"bytes \[12, 14\) at the end"),
    "size mismatch": (
        good_header(a={"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}),
        None,
        GOOD_DATA,
        r"'a': F32\[3\] needs 12 bytes but data_offsets \[0, 8\] span 8",
    ),  # fmt: skip
    "unknown dtype": (
        good_header(a={"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}),
        None,
        GOOD_DATA,
        r"'a': unknown dtype 'F8_E4M3'",
    ),  # fmt: skip
    "negative shape": (
        good_header(a={"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}),
        None,
        GOOD_DATA,
        r"'a': shape must be a list of non-negative ints",
    ),  # fmt: skip
    "missing field": (
        good_header(a={"dtype": "F32", "shape": [2]}),
        None,
        GOOD_DATA,
        r"'a': needs",
    ),
    "bad metadata": (
        good_header(__metadata__={"step": 3}),
        None,
        GOOD_DATA,
        r"__metadata__ must map strings",
    ),
    "bool byte": (
        {"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}},
        None,
        b"\x01\x07",
        r"'a': a BOOL byte holds a value other than 0 or 1",
    ),  # fmt: skip
}


class Pair(nn.Module):
    def __init__(self):
        self.a = Tensor(np.zeros(2, np.float32), requires_grad=True)
        self.b = Tensor(np.zeros((2, 1), np.int16))


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_fail_clearly_and_assign_nothing(tmp_path, case):
    header, n, data, message = BAD_FILES[case]
    raw_file(tmp_path / "bad", header, data, n)
    pair = Pair()
    with pytest.raises(CheckpointError, match=message):
        serialize.load_into(pair, tmp_path / "bad")
    np.testing.assert_array_equal(pair.a.numpy(), [0, 0])
    np.testing.assert_array_equal(pair.b.numpy(), [[0], [0]])


def test_the_well_formed_version_of_those_files_loads(tmp_path):
    raw_file(tmp_path / "good", good_header(), GOOD_DATA)
    pair = Pair()
    serialize.load_into(pair, tmp_path / "good")
    np.testing.assert_array_equal(pair.a.numpy(), [1, 2])
    np.testing.assert_array_equal(pair.b.numpy(), [[3], [4]])


@pytest.mark.parametrize(
    "dest,message",
    [
        ({"a": Tensor(np.zeros(3, np.float32)), "b": Tensor(np.zeros((2, 1), np.int16))},
         r"'a' is float32\[3\] but the source holds float32\[2\]"),
        ({"a": Tensor(np.zeros(2, np.float64)), "b": Tensor(np.zeros((2, 1), np.int16))},
         r"'a' is float64\[2\] but the source holds float32\[2\]"),
        ({"a": Tensor(np.zeros(2, np.float32))}, r"not in the destination: \['b'\]"),
        ({"a": Tensor(np.zeros(2, np.float32)), "b": Tensor(np.zeros((2, 1), np.int16)),
          "c": Tensor(np.zeros(1, np.float32))}, r"missing from the source: \['c'\]"),
    ],
)  # fmt: skip
def test_a_file_that_does_not_fit_its_destination_fails_by_name_and_assigns_nothing(
    tmp_path, dest, message
):
    raw_file(tmp_path / "good", good_header(), GOOD_DATA)
    with pytest.raises(CheckpointError, match=message):
        serialize.load_into(dest, tmp_path / "good")
    for t in dest.values():
        assert not t.numpy().any()


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_a_torch_pickle_is_named_with_what_to_do_and_never_run(tmp_path, zipped):
    path = str(tmp_path / "model.pt")
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=zipped)
    with pytest.raises(CheckpointError, match="torch pickle.*load it with torch.*state dict"):
        serialize.load(path)


def test_a_torch_checkpoint_with_tied_weights_and_batch_counts_loads_whole(tmp_path):
    """torch's state dict names a tied weight twice and BatchNorm's num_batches_tracked;
    both load into the same model in limn, strictly, and limn saves what torch loads."""

    def model(lib):
        m = lib.Sequential(lib.Embedding(5, 4), lib.BatchNorm1d(3), lib.Linear(4, 5, bias=False))
        m[2].weight = m[0].weight
        return m

    torch.manual_seed(0)
    tmodel = model(torch.nn)
    tmodel[1](torch.randn(6, 3))  # a training batch: running stats and the count move
    state = {k: v.clone() for k, v in tmodel.state_dict().items()}
    assert {"0.weight", "2.weight", "1.num_batches_tracked"} <= set(state)
    safetensors.torch.save_file(state, str(tmp_path / "t.safetensors"))
    ours = model(nn)
    serialize.load_into(ours, tmp_path / "t.safetensors")
    assert ours[2].weight is ours[0].weight
    for k, v in tmodel.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[k].numpy(), v.numpy(), err_msg=k)
    serialize.save(ours, tmp_path / "ours.safetensors")
    back = model(torch.nn)
    back.load_state_dict(safetensors.torch.load_file(str(tmp_path / "ours.safetensors")))
    assert back[1].num_batches_tracked.item() == 1


def test_load_into_lists_every_mismatch_at_once(tmp_path):
    small, big = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), nn.Sequential(nn.Linear(5, 4))
    path = tmp_path / "small.safetensors"
    serialize.save(small, path)
    before = big.state_dict()["0.weight"].numpy()
    with pytest.raises(CheckpointError) as e:
        serialize.load_into(big, path)
    text = str(e.value)
    assert "2 mismatches" in text and "not in the destination: ['1.bias', '1.weight']" in text
    assert "'0.weight' is float32[4, 5] but the source holds float32[4, 3]" in text
    assert "'0.bias'" not in text  # that one fits
    np.testing.assert_array_equal(big.state_dict()["0.weight"].numpy(), before)
