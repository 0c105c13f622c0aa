"""Edge cost of a (recombined) network: parameters, FLOPs per inference, bytes to deploy.

FLOPs come from :class:`torch.utils.flop_counter.FlopCounterMode`, which counts
``2 * MACs`` for every convolution, transposed convolution and matrix product
(the operations that dominate; batch norm, activations and pooling are not
counted, as in ``thop``'s conv/linear totals that the XTransfer code reports).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Cost:
    """What deploying a network costs.

    ``params`` (trainable and frozen weights), ``flops`` per single-sample
    inference, ``bytes`` of weights and buffers.
    """

    params: int
    flops: int
    bytes: int

    @property
    def mflops(self) -> float:
        """FLOPs per inference in millions."""
        return self.flops / 1e6

    @property
    def macs(self) -> int:
        """Multiply-accumulates per inference (``flops / 2``)."""
        return self.flops // 2


def count_params(module: nn.Module) -> int:
    """Number of parameter entries."""
    return sum(p.numel() for p in module.parameters())


def count_bytes(module: nn.Module) -> int:
    """Bytes of every parameter and buffer (what a device has to store)."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def count_flops(module: nn.Module, example: torch.Tensor) -> int:
    """FLOPs of one forward pass on ``example`` (a batch of one, usually)."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = module.training
    module.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(example)
    module.train(was_training)
    return int(counter.get_total_flops())


def cost(module: nn.Module, example: torch.Tensor) -> Cost:
    """:class:`Cost` of ``module`` for one input shaped like ``example[:1]``."""
    return Cost(count_params(module), count_flops(module, example[:1]), count_bytes(module))
