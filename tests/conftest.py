"""Suite-wide settings: which device the tests' tensors default to.

``uv run pytest`` runs everything on the numpy reference device. ``LIMN_DEVICE=c uv run
pytest`` makes the c device the default for every test, so each test that the numpy
device passes is also a check of the compiled path (tests that pin a device still pin it).
"""

import os

import pytest

import limn
from limn.tensor import _pending_writes


@pytest.fixture(autouse=True)
def _default_device():
    name = os.environ.get("LIMN_DEVICE", "numpy")
    limn.set_device(name)
    yield
    limn.set_device(name)
    # a write a test made and never read is not the next test's (it would commit at the
    # next test's first realize, on whatever device it named)
    _pending_writes().clear()
