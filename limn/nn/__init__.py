"""limn.nn: layers, losses and the Module tree that names their parameters.

The tree (``Module``, ``Sequential``, ``ModuleList``, ``ModuleDict``) is in
``limn/nn/module.py``; the layers with state in ``limn/nn/layers.py`` (Linear, the norms,
Embedding, Dropout, attention), the recurrent ones and their cells in ``limn/nn/rnn.py``
and torch's Transformer layers in ``limn/nn/transformer.py``; the layers as functions in
``limn/nn/functional.py`` (torch's ``F``); convolution (plain and transposed) and pooling
in ``limn/nn/conv.py``; initializers in ``limn/nn/init.py``; ``clip_grad_norm_`` in
``limn/nn/utils.py``; one-process stand-ins for torch's data-parallel wrappers in
``limn/nn/parallel.py``. Every layer keeps torch's weight layout and
default initialization, so a state dict moves between the two untransposed, and every
layer is composed from Tensor methods, so it runs on any device. A layer with no state
of its own (``nn.ReLU()``, ``nn.Softmax(dim=-1)``, ``nn.MaxPool2d(2)``, the loss modules)
is one function applied with the arguments it was made with (``module.Apply``).
"""

from __future__ import annotations

from limn.attention import scaled_dot_product_attention  # noqa: F401
from limn.nn import functional, init, parallel, utils  # noqa: F401
from limn.nn import functional as F
from limn.nn.conv import (  # noqa: F401
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    conv,
)
from limn.nn.functional import cross_entropy, mse_loss  # noqa: F401
from limn.nn.layers import (  # noqa: F401
    AlphaDropout,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    Embedding,
    EmbeddingBag,
    FeatureAlphaDropout,
    GPTBlock,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    RMSNorm,
    RReLU,
    Upsample,
)
from limn.nn.module import (  # noqa: F401
    Module,
    ModuleDict,
    ModuleList,
    Parameter,
    Sequential,
    _uniform_param,
    apply_module,
)
from limn.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from limn.nn.transformer import (  # noqa: F401
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from limn.tensor import Tensor

# ---- layers without state: one function each ----------------------------------------

ReLU, GELU, SiLU, Tanh, Sigmoid, Softplus, LeakyReLU, Softmax, LogSoftmax = (
    apply_module(name, fn, inplace_at=at)
    for name, fn, at in [
        ("ReLU", F.relu, 0), ("GELU", Tensor.gelu, None), ("SiLU", F.silu, 0),
        ("Tanh", Tensor.tanh, None), ("Sigmoid", Tensor.sigmoid, None),
        ("Softplus", Tensor.softplus, None), ("LeakyReLU", F.leaky_relu, 1),
        ("Softmax", Tensor.softmax, None), ("LogSoftmax", Tensor.log_softmax, None),
    ]
)  # fmt: skip
PairwiseDistance, CosineSimilarity = (
    apply_module("PairwiseDistance", F.pairwise_distance),
    apply_module("CosineSimilarity", F.cosine_similarity),
)
Identity = apply_module("Identity", lambda x, *_, **__: x)
Flatten = apply_module("Flatten", Tensor.flatten, defaults=(1,))  # torch's start_dim=1
MaxPool1d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d = (
    apply_module(name, getattr(F, fn))
    for name, fn in [("MaxPool1d", "max_pool1d"), ("MaxPool2d", "max_pool2d"),
                     ("AvgPool2d", "avg_pool2d"), ("AdaptiveAvgPool2d", "adaptive_avg_pool2d")]
)  # fmt: skip
CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss, BCELoss = (
    apply_module(name, getattr(F, fn))
    for name, fn in [("CrossEntropyLoss", "cross_entropy"), ("NLLLoss", "nll_loss"),
                     ("MSELoss", "mse_loss"), ("L1Loss", "l1_loss"),
                     ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits"),
                     ("BCELoss", "binary_cross_entropy")]
)  # fmt: skip
