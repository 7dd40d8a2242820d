"""The README's first snippet: a tiny graph, its gradient, and the graph itself."""

from limn import Tensor

x = Tensor.randn((4, 3), requires_grad=True)
w = Tensor.randn((3, 2))
loss = ((x @ w).relu() ** 2).sum()
loss.backward()  # gradients are lazy graphs too
print("the gradient's op graph, before anything runs:")
print(x.grad.graph())
print("loss:", loss.item())
print("x.grad:")
print(x.grad.numpy())  # nothing computes until here
