"""The README's snippet runs and its gradient matches torch's."""

import numpy as np
import torch

from limn import Tensor


def test_readme_snippet_gradient_matches_torch():
    x = Tensor.randn((4, 3), requires_grad=True)
    w = Tensor.randn((3, 2))
    loss = ((x @ w).relu() ** 2).sum()
    loss.backward()
    tx = torch.tensor(x.numpy(), requires_grad=True)
    ((tx @ torch.tensor(w.numpy())).relu() ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
