"""limn.capture: a captured call gives what calling the function again would give, or the
function runs again; every kind of thing a step reads, seen or not seen, is pinned here.

Each test runs the same calls captured and plain and compares the bits, on the numpy
device (where capture calls the function) and the c device (where it replays)."""

import importlib
import warnings

import numpy as np
import pytest

import limn
from limn import Tensor, nn, optim


@pytest.fixture(params=["numpy", "c"])
def device(request):
    limn.set_device(request.param)
    yield request.param
    limn.set_device("numpy")


def _data(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _bits(t) -> bytes:
    return t.numpy().tobytes()


def test_a_changed_python_scalar_argument_records_again(device):
    w = _data(4, 3)
    f = limn.capture(lambda x, k=1.0: (x @ w) * k)
    x = _data(2, 4, seed=1)
    assert _bits(f(x)) == _bits(x @ w)
    assert _bits(f(x, k=3.0)) == _bits((x @ w) * 3.0)
    assert _bits(f(x, 3.0)) == _bits((x @ w) * 3.0)  # positionally: another call again
    assert _bits(f(x)) == _bits(x @ w)  # the first recording replays
    if device == "c":
        assert f.records == 3 and len(f.recordings) == 3


def test_python_scalars_are_told_apart_by_type_and_bits_as_the_graph_does(device):
    """1.0 and 1 (an int tensor times 1 stays int), 0.0 and -0.0 (the sign), and a nan
    argument replays its one recording."""
    f = limn.capture(lambda x, k: x * k)
    ints, floats = Tensor(np.arange(3)), _data(3)
    for x, k in [(ints, 1.0), (ints, 1), (floats, 0.0), (floats, -0.0), (floats, True)]:
        got, want = f(x, k), x * k
        assert (got.dtype, _bits(got)) == (want.dtype, _bits(want)), k
    for _ in range(3):
        assert np.isnan(f(floats, float("nan")).numpy()).all()
    if device == "c":
        assert f.records == 6


def test_backward_through_a_replayed_output_is_refused_saying_why(device):
    lin = nn.Linear(3, 2)
    f = limn.capture(lambda x: lin(x).sum())
    x = _data(4, 3)
    f(x).backward()  # the recording runs the Python: its output has history
    again = f(x)
    assert again.requires_grad
    if device == "c":
        with pytest.raises(RuntimeError, match="replayed limn.capture.*no autograd history"):
            again.backward()


def test_a_changed_shape_or_dtype_records_again_instead_of_failing(device):
    f = limn.capture(lambda x: (x * 2).sum(axis=0))
    for x in (_data(3, 4), _data(5, 4), Tensor(np.ones((3, 4), np.float64)), _data(3, 4)):
        assert _bits(f(x)) == _bits((x * 2).sum(axis=0))
    if device == "c":
        assert f.records == 3


def test_a_changed_closure_variable_or_global_records_again(device):
    global SCALE
    SCALE, k = 2.0, 5.0
    f = limn.capture(lambda x: x * SCALE + k)
    x = _data(3)
    assert _bits(f(x)) == _bits(x * 2.0 + 5.0)
    SCALE = 7.0
    assert _bits(f(x)) == _bits(x * 7.0 + 5.0)
    k = -1.0  # noqa: F841 (the lambda reads it)
    assert _bits(f(x)) == _bits(x * 7.0 - 1.0)


def test_python_state_changed_in_place_records_again(device):
    cfg = {"scale": 2.0, "shift": [1.0]}
    f = limn.capture(lambda x: x * cfg["scale"] + cfg["shift"][0])
    x = _data(3)
    f(x)
    cfg["scale"] = 4.0
    assert _bits(f(x)) == _bits(x * 4.0 + 1.0)
    cfg["shift"][0] = 9.0
    assert _bits(f(x)) == _bits(x * 4.0 + 9.0)


class Halves(nn.Module):
    """A module whose graph depends on ``training``, without random numbers."""

    def __init__(self):
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * (0.5 if self.training else 1.0)


def test_a_model_switched_between_train_and_eval_replays_each_mode(device):
    limn.set_seed(0)
    m = Halves()
    f = limn.capture(lambda x: m(x))
    x = _data(2, 4)
    for mode in ("train", "eval", "train", "eval"):
        getattr(m, mode)()
        assert _bits(f(x)) == _bits(m(x)), mode
    if device == "c":
        assert f.records == 2  # one recording per mode, both kept


def test_a_batchnorm_switched_between_train_and_eval_keeps_torchs_running_statistics(device):
    """The running statistics a train call writes are read by no result: the recording
    realizes them too, so each replay updates them (before, the eval after a replayed
    train read statistics one update behind)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.bn = nn.Linear(4, 4), nn.BatchNorm1d(4)

        def forward(self, x):
            y = self.bn(self.lin(x))
            return y * 2 if self.training else y - 1

    def run(captured):
        limn.set_seed(0)
        net = Net()
        f = limn.capture(lambda x: net(x)) if captured else net
        outs = []
        for mode in ("train", "eval", "train", "eval", "train"):
            getattr(net, mode)()
            outs.append(_bits(f(_data(8, 4, seed=len(outs)))))
        return outs, _bits(net.bn.running_mean), _bits(net.bn.running_var)

    assert run(True) == run(False)


def _training(device, captured, change):
    """Four AdamW steps, ``change(opt, model, step)`` between them; the final weights."""
    limn.set_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step(loss)
        return loss

    f = limn.capture(step) if captured else step
    losses = []
    for s in range(4):
        change(opt, model, s)
        losses.append(_bits(f(_data(6, 5, seed=s), _data(6, 3, seed=10 + s))))
    return losses, [_bits(p) for p in model.parameters()], f


def _lr_schedule(opt, model, s):
    opt.lr = 1e-2 / (1 + s)


def _weight_decay_off(opt, model, s):
    if s == 2:
        opt.param_groups[0]["weight_decay"] = 0.0


@pytest.mark.parametrize("change", [_lr_schedule, _weight_decay_off])
def test_a_captured_training_step_follows_what_changes_between_steps(device, change):
    losses, weights, f = _training(device, True, change)
    assert (losses, weights) == _training(device, False, change)[:2]
    if device == "c":  # an lr schedule lives on the device: one recording serves it
        assert f.records == (1 if change is _lr_schedule else 2)


def test_a_captured_step_returns_the_loss_of_the_weights_it_started_from(device):
    limn.set_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    opt = optim.SGD(model.parameters(), lr=0.5)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()  # torch's loop: the loss is not handed to the step
        return loss

    f = limn.capture(step)
    for s in range(3):
        x, y = _data(6, 5, seed=s), _data(6, 3, seed=10 + s)
        with limn.no_grad():
            held = model(x)  # built before the step, read after it
            before = ((held - y) ** 2).mean().item()
        assert f(x, y).item() == pytest.approx(before, rel=1e-6), s
        assert ((held - y) ** 2).mean().item() == pytest.approx(before, rel=1e-6), s
    if device == "c":
        assert f.records == 1


def test_a_tensor_rebound_between_calls_records_again(device):
    limn.set_seed(0)
    m = Halves()
    w = _data(4, 2, seed=4)
    f = limn.capture(lambda x: m(x) @ w)
    x = _data(2, 4)
    f(x)
    m.fc.weight = _data(4, 4, seed=5)  # an attribute: a new Tensor, a new buffer
    assert _bits(f(x)) == _bits(m(x) @ w)
    w = _data(4, 2, seed=6)  # a closure variable
    assert _bits(f(x)) == _bits(m(x) @ w)


def test_a_step_that_draws_host_random_numbers_runs_every_call(device):
    def steps(captured):
        limn.set_seed(3)
        m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
        f = limn.capture(lambda x: m(x)) if captured else (lambda x: m(x))
        return [_bits(f(_data(4, 8))) for _ in range(3)]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = steps(True)
    assert got == steps(False) and len(set(got)) == 3  # a fresh mask every call
    assert any("draws host random numbers" in str(w.message) for w in caught) == (device == "c")


def test_a_tensor_made_inside_the_step_from_fixed_host_data_replays(device):
    f = limn.capture(lambda x: x + Tensor(np.arange(3, dtype=np.float32)) + Tensor.ones(3))
    for i in range(3):
        x = Tensor(np.full(3, float(i), np.float32))
        assert f(x).numpy().tolist() == [i + 1.0, i + 2.0, i + 3.0]


def test_a_numpy_array_the_step_reads_is_replayed_as_recorded_on_c(device):
    """Documented: the contents of an array turned into a Tensor inside the step are not
    seen; a replay uses the recorded value. Pass such data in as a Tensor."""
    table = np.zeros(3, np.float32)
    f = limn.capture(lambda x: x + Tensor(table))
    x = Tensor(np.ones(3, np.float32))
    f(x)
    table[:] = 5.0
    assert f(x).numpy().tolist() == ([1.0] * 3 if device == "c" else [6.0] * 3)
    g = limn.capture(lambda x, t: x + t)  # the way that follows it
    g(x, Tensor(np.zeros(3, np.float32)))
    assert g(x, Tensor(table)).numpy().tolist() == [6.0] * 3


def test_a_recording_keeps_no_intermediate_of_the_recorded_call_alive():
    """The returned tensors' autograd history holds every intermediate of the call; kept
    by the recording, a replay's search for readers of what it overwrites walked them all
    again at every call (a quarter of a KV-cache decode step)."""
    import gc
    import weakref

    limn.set_device("c")
    w = Tensor(np.ones((4, 4), np.float32), requires_grad=True)
    inner = []

    def fn(x):
        h = (x @ w).relu()
        inner.append(weakref.ref(h))
        return (h * 2).sum()

    step = limn.capture(fn)
    out = step(Tensor(np.ones((2, 4), np.float32)))
    assert out.item() == 64.0
    del out
    gc.collect()
    assert inner[0]() is None
    assert step(Tensor(np.ones((2, 4), np.float32))).item() == 64.0


class Gated(nn.Module):
    """Python values a forward reads: a flag of its own, a scalar, a list of scalars, and
    a submodule's ``training``."""

    def __init__(self):
        self.fc, self.on, self.scale, self.shifts = nn.Linear(4, 4), True, 2.0, [1.0]

    def forward(self, x):
        y = self.fc(x) * self.scale + self.shifts[0]
        y = y.relu() if self.on else y
        return y * 3 if self.fc.training else y


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "on", False),  # a module's own flag
        lambda m: setattr(m.fc, "training", False),  # one submodule's training
        lambda m: m.eval(),
        lambda m: setattr(m, "scale", -0.5),  # a Python scalar attribute
        lambda m: m.shifts.__setitem__(0, -4.0),  # a scalar in a list, changed in place
    ],
    ids=["own_flag", "submodule_training", "eval", "scalar", "list_item"],
)
def test_a_python_value_the_step_reads_changed_between_calls_records_again(device, change):
    limn.set_seed(0)
    m = Gated()
    f = limn.capture(lambda x: m(x))
    x = _data(2, 4)
    for _ in range(2):
        assert _bits(f(x)) == _bits(m(x))
    change(m)
    for _ in range(2):
        assert _bits(f(x)) == _bits(m(x))
    if device == "c":
        assert f.records == 2


def test_a_parameter_written_in_place_between_calls_is_read_not_replayed(device):
    """The write is the caller's, not the step's: a replay reads the written weight and
    never writes it again (before, the pending write was recorded as part of the step
    and every replay doubled the weight once more)."""
    limn.set_seed(0)
    lin = nn.Linear(3, 2)
    f = limn.capture(lambda x: lin(x))
    x = _data(1, 3)
    f(x)
    w = lin.weight.numpy() * 2
    with limn.no_grad():
        lin.weight.mul_(2)
    for _ in range(3):
        assert _bits(f(x)) == _bits(lin(x))
        assert lin.weight.numpy().tobytes() == w.tobytes()


def test_a_parameter_replaced_by_one_of_another_shape_records_again(device):
    limn.set_seed(0)
    lin = nn.Linear(3, 2)
    f = limn.capture(lambda x: lin(x))
    x = _data(1, 3)
    f(x)
    lin.weight, lin.bias = _data(5, 3, seed=2), _data(5, seed=3)
    for _ in range(2):
        got = f(x)
        assert got.shape == (1, 5) and _bits(got) == _bits(lin(x))
    if device == "c":
        assert f.records == 2


def test_a_held_tensor_reshaped_in_place_records_again(device):
    """``t_()`` changes a tensor's shape without rebinding any attribute."""
    w = _data(3, 3, seed=1)
    f = limn.capture(lambda x: x @ w)
    x = _data(2, 3)
    f(x)
    w.t_()
    assert _bits(f(x)) == _bits(x @ w) and w.shape == (3, 3)
    v = _data(1, 3, seed=2)
    g = limn.capture(lambda x: x * v)
    g(x := _data(3, 3))
    v.t_()  # (3, 1) now: it broadcasts along the other axis
    assert _bits(g(x)) == _bits(x * v)


def test_a_parameter_frozen_between_training_steps_stays_as_it_is(device):
    def run(captured):
        limn.set_seed(0)
        model = nn.Sequential(nn.Linear(5, 3), nn.Linear(3, 2))
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = limn.capture(step) if captured else step
        for s in range(4):
            if s == 2:
                model[0].weight.requires_grad_(False)
            f(_data(6, 5, seed=s), _data(6, 2, seed=10 + s))
        return [_bits(p) for p in (model[0].weight, model[0].bias, model[1].weight)]

    frozen = run(False)
    assert run(True) == frozen


def test_a_replay_checks_its_guard_without_walking_the_model(device, monkeypatch):
    """What a replay looks at grows with its arguments, not with the model it reaches:
    the walk of a call's objects runs only over the arguments."""
    cap = importlib.import_module("limn.capture")  # (the module: limn.capture is the class)

    def visits(layers):
        limn.set_seed(0)
        m = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)])
        f = limn.capture(lambda x: m(x))
        x = _data(2, 4)
        f(x)
        count = [0]
        visit = cap._Walk.visit

        def counted(self, *a, **kw):
            count[0] += 1
            return visit(self, *a, **kw)

        monkeypatch.setattr(cap._Walk, "visit", counted)
        assert _bits(f(x)) == _bits(m(x))
        monkeypatch.setattr(cap._Walk, "visit", visit)
        return count[0]

    small, big = visits(2), visits(20)
    assert small == big
    if device == "c":
        assert big < 10
