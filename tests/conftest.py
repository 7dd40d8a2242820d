"""Suite-wide settings: which device the tests' tensors default to, and their seeds.

A program's default device is the compiled cpu device where a C compiler works; the
suite's is explicit instead. ``uv run pytest`` runs everything on the numpy reference
device. ``LIMN_DEVICE=c uv run pytest`` makes the c device the default for every test, so
each test that the numpy device passes is also a check of the compiled path (tests that
pin a device still pin it). Both passes are in ``.ci/run``.

Every test starts from ``limn.set_seed(0)`` and hypothesis draws its examples from a
fixed seed, so a failure replays alone, in any order, in any process.
"""

import os

import pytest
from hypothesis import settings

import limn

settings.register_profile("limn", derandomize=True)
settings.load_profile("limn")


def host_devices() -> list[str]:
    """The host devices that work here: numpy, and c where a C compiler does."""
    names = ["numpy"]
    try:
        limn.get_device("c")
        names.append("c")
    except (ValueError, RuntimeError, OSError):
        pass
    return names


@pytest.fixture(params=host_devices())
def device(request):
    """Each host device in turn, as the default for the test's tensors (a file's own
    ``device`` fixture, where it needs another, wins)."""
    prev = limn.current_device()
    limn.set_device(request.param)
    yield request.param
    limn.set_device(prev)


@pytest.fixture(autouse=True)
def _default_device():
    name = os.environ.get("LIMN_DEVICE", "numpy")
    limn.set_device(name)
    limn.set_seed(0)
    yield
    limn.set_device(name)
