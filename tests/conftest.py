"""Suite-wide settings: which device the tests' tensors default to.

``uv run pytest`` runs everything on the numpy reference device. ``LIMN_DEVICE=c uv run
pytest`` makes the c device the default for every test, so each test that the numpy
device passes is also a check of the compiled path (tests that pin a device still pin it).
"""

import os

import pytest

import limn


@pytest.fixture(autouse=True)
def _default_device():
    name = os.environ.get("LIMN_DEVICE", "numpy")
    limn.set_device(name)
    yield
    limn.set_device(name)
