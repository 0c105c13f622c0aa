"""XTransfer network pieces: source layers that can be spliced, repaired and pruned.

Method: "XTransfer: Modality-Agnostic Few-Shot Model Transfer for Human Sensing at
the Edge" (Zhang et al., arXiv 2506.22726), official code github.com/zhangy10/XTransfer
(``xtransfer/encoder.py``: ``AutoEncoderOG``, ``PreResizer``, ``Resizer``;
``xtransfer/trans.py``: ``PruneTrans``). Tensors are channel-first: ``(n, C, L)``
for 1-D layers (signals, token sequences) and ``(n, C, H, W)`` for 2-D layers.

A :class:`PoolLayer` is one "layer" of a source model in the search pool: a
``head`` (what is spliced, repaired, scored and pruned) and an optional ``tail``
(activation/pooling appended after it, as the code's ``struc.json`` splits
them). Its prunable channel groups say which anchor activation ranks their
channels (``inter``: inside the layer, ``out``: the layer's output).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

Dims = int  # 1 or 2


def gap(x: torch.Tensor) -> torch.Tensor:
    """Global average pool over every axis after the channels (the code's ``mmc``)."""
    return x if x.dim() == 2 else x.mean(dim=tuple(range(2, x.dim())))


def _conv(dims: Dims) -> type[nn.Conv1d] | type[nn.Conv2d]:
    return nn.Conv1d if dims == 1 else nn.Conv2d


def _bn(dims: Dims) -> type[nn.BatchNorm1d] | type[nn.BatchNorm2d]:
    return nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d


def _channel_view(mask: torch.Tensor, dims: Dims) -> torch.Tensor:
    return mask.view(1, -1, *([1] * dims))


def tf_same_pad(x: torch.Tensor, kernel: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """Pad like TensorFlow ``SAME`` (extra element at the end for even totals)."""
    pads: list[int] = []
    for size, k, s in zip(x.shape[:1:-1], kernel[::-1], stride[::-1], strict=False):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


@dataclass(frozen=True)
class Group:
    """A set of channels pruned together, ranked by the anchor activation ``anchor``."""

    size: int
    anchor: str  # "inter" | "out"


class PoolLayer(nn.Module):
    """One source layer: ``head`` (spliced, repaired, pruned) then ``tail``.

    Contract: :meth:`forward` maps ``(n, in_channels, *in_size)`` to the head's
    output; :meth:`forward_inter` also returns the pooled inner activation that
    ranks the ``inter`` group (``None`` if the layer has none); :meth:`pruned`
    returns a new, physically smaller layer and never changes ``self``.
    """

    dims: Dims
    in_channels: int
    in_size: tuple[int, ...]
    kernel: tuple[int, ...] | None
    stride: tuple[int, ...] | None

    def __init__(
        self, dims: Dims, in_channels: int, in_size: tuple[int, ...], tail: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.dims, self.in_channels, self.in_size = dims, in_channels, tuple(in_size)
        self.tail = tail
        self.kernel = self.stride = None

    def groups(self) -> list[Group]:
        """Prunable channel groups, in the order the removal search visits them."""
        return []

    def set_masks(self, masks: list[torch.Tensor | None]) -> None:
        """Soft channel masks (1 keep, 0 drop) per group, used while searching."""
        del masks

    def pruned(self, keep: list[torch.Tensor]) -> PoolLayer:
        """A copy keeping channels ``keep[g]`` of each group (index tensors)."""
        del keep
        return copy.deepcopy(self)

    def forward_inter(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Head output and the pooled inner activation (``None`` without one)."""
        return self(x), None

    def masked_forward(
        self, x: torch.Tensor, group: int
    ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """``mask -> head output with group `group` masked``, other groups as set.

        For a layer whose group sits deep inside it, the part before the mask is
        computed once for every mask the removal search tries (the same
        operations, so the same output as :meth:`set_masks` then a forward
        pass). ``None``: no such shortcut, run the whole layer.
        """
        del x, group
        return None

    def apply_tail(self, h: torch.Tensor) -> torch.Tensor:
        """The tail (activation, pooling) after the head; identity without one."""
        return h if self.tail is None else self.tail(h)


class ConvUnit(PoolLayer):
    """``conv -> [bn, act] in a given order``: a plain conv layer of a CNN source.

    ``order`` is a string over ``b`` (batch norm) and ``a`` (activation): ``"ba"``
    for conv-BN-act (EfficientNet stem, Conv4), ``"ab"`` for CREPE's conv-ReLU-BN.
    ``padding`` is an int/tuple of symmetric padding, ``"same"`` for TensorFlow
    SAME padding, or an explicit ``F.pad`` list.
    """

    def __init__(
        self,
        conv: nn.Conv1d | nn.Conv2d,
        bn: nn.Module | None,
        act: Callable[[torch.Tensor], torch.Tensor] | None,
        order: str,
        in_size: tuple[int, ...],
        padding: str | list[int] | None = None,
        tail: nn.Module | None = None,
    ) -> None:
        dims = 1 if isinstance(conv, nn.Conv1d) else 2
        super().__init__(dims, conv.in_channels * 1, in_size, tail)
        if conv.groups != 1:
            raise ValueError("ConvUnit: grouped convolutions are pruned inside InvertedResidual")
        self.conv, self.bn, self.act, self.order, self.padding = conv, bn, act, order, padding
        self.kernel, self.stride = tuple(conv.kernel_size), tuple(conv.stride)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.ones(conv.out_channels))

    @property
    def out_channels(self) -> int:
        """Channels of the head's output."""
        return int(self.conv.out_channels)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return tf_same_pad(x, self.conv.kernel_size, self.conv.stride)
        if isinstance(self.padding, list):
            return F.pad(x, self.padding)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Conv, then BN and activation in ``order``, then the channel mask."""
        h = self.conv(self._pad(x))
        for op in self.order:
            if op == "b" and self.bn is not None:
                h = self.bn(h)
            elif op == "a" and self.act is not None:
                h = self.act(h)
        return h * _channel_view(self.mask, self.dims)

    def groups(self) -> list[Group]:
        """The output channels (ranked by the output anchors)."""
        return [Group(self.out_channels, "out")]

    def set_masks(self, masks: list[torch.Tensor | None]) -> None:
        """Mask output channels."""
        self.mask = torch.ones(self.out_channels) if masks[0] is None else masks[0].float()

    def pruned(self, keep: list[torch.Tensor]) -> ConvUnit:
        """Keep output channels ``keep[0]`` (conv rows, BN entries)."""
        new = copy.deepcopy(self)
        idx = keep[0]
        new.conv = _slice_conv(self.conv, out_idx=idx)
        if self.bn is not None:
            new.bn = _slice_bn(self.bn, idx)
        new.mask = torch.ones(len(idx))
        return new


class InvertedResidual(PoolLayer):
    """MBConv: optional 1x1 expand, depthwise kxk, 1x1 project, identity skip.

    Groups: the expanded channels (``inter``: pooled depthwise output), only when
    there is an expand conv, and the output channels (``out``). Pruning output
    channels of a residual block keeps the skip by selecting the same channels
    of the input, as the code's ``Downsample(idx)`` does for ResNet blocks.
    """

    skip_idx: torch.Tensor
    mid_mask: torch.Tensor
    out_mask: torch.Tensor

    def __init__(
        self,
        expand: nn.Sequential | None,
        depthwise: nn.Sequential,
        project: nn.Sequential,
        residual: bool,
        in_size: tuple[int, ...],
    ) -> None:
        conv0, _ = _pair(expand if expand is not None else depthwise)
        super().__init__(2, int(conv0.in_channels), in_size)
        self.expand, self.depthwise, self.project = expand, depthwise, project
        self.residual = residual
        self.kernel, self.stride = tuple(conv0.kernel_size), tuple(conv0.stride)
        self.register_buffer("skip_idx", torch.arange(_pair(project)[0].out_channels))
        self.register_buffer("mid_mask", torch.ones(_pair(depthwise)[0].out_channels))
        self.register_buffer("out_mask", torch.ones(_pair(project)[0].out_channels))

    @property
    def out_channels(self) -> int:
        """Channels of the block's output."""
        return int(_pair(self.project)[0].out_channels)

    @staticmethod
    def _run(seq: nn.Sequential, x: torch.Tensor, act: bool) -> torch.Tensor:
        conv, bn = _pair(seq)
        h = bn(conv(tf_same_pad(x, tuple(conv.kernel_size), tuple(conv.stride))))
        return F.relu6(h) if act else h

    def _mid(self, x: torch.Tensor) -> torch.Tensor:
        """Depthwise activation before the expanded-channel mask."""
        h = self._run(self.expand, x, True) if self.expand is not None else x
        return self._run(self.depthwise, h, True)

    def _finish(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Project the masked depthwise activation ``h``, add the skip, mask the output."""
        out = self._run(self.project, h, False)
        if self.residual:
            out = out + x[:, self.skip_idx]
        return out * _channel_view(self.out_mask, 2)

    def forward_inter(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Block output and the pooled depthwise activation."""
        h = self._mid(x) * _channel_view(self.mid_mask, 2)
        return self._finish(x, h), gap(h)

    def masked_forward(
        self, x: torch.Tensor, group: int
    ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The expanded-channel group: expand and depthwise run once, not once per mask."""
        if self.expand is None or group != 0:
            return None
        mid = self._mid(x)
        return lambda mask: self._finish(x, mid * _channel_view(mask.float(), 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Block output."""
        return self.forward_inter(x)[0]

    def groups(self) -> list[Group]:
        """Expanded channels (if expanded), then output channels."""
        mid = [Group(_pair(self.depthwise)[0].out_channels, "inter")] if self.expand else []
        return [*mid, Group(self.out_channels, "out")]

    def set_masks(self, masks: list[torch.Tensor | None]) -> None:
        """Mask expanded and/or output channels."""
        if self.expand is not None:
            mid, out = masks
            self.mid_mask = torch.ones_like(self.mid_mask) if mid is None else mid.float()
        else:
            (out,) = masks
        self.out_mask = torch.ones_like(self.out_mask) if out is None else out.float()

    def pruned(self, keep: list[torch.Tensor]) -> InvertedResidual:
        """A copy keeping expanded channels ``keep[0]`` and output channels ``keep[-1]``.

        Expanded channels: expand rows, depthwise channels, project columns;
        output channels: project rows (the skip keeps the same input channels).
        """
        new = copy.deepcopy(self)
        out_idx = keep[-1]
        dw, dw_bn = _pair(self.depthwise)
        if self.expand is not None:
            mid = keep[0]
            ex, ex_bn = _pair(self.expand)
            new.expand = nn.Sequential(_slice_conv(ex, out_idx=mid), _slice_bn(ex_bn, mid))
            new.depthwise = nn.Sequential(_slice_depthwise(dw, mid), _slice_bn(dw_bn, mid))
            new.mid_mask = torch.ones(len(mid))
        else:
            mid = torch.arange(dw.out_channels)
        pr, pr_bn = _pair(self.project)
        new.project = nn.Sequential(
            _slice_conv(pr, out_idx=out_idx, in_idx=mid), _slice_bn(pr_bn, out_idx)
        )
        new.skip_idx = self.skip_idx[out_idx]
        new.out_mask = torch.ones(len(out_idx))
        return new


class OpaqueLayer(PoolLayer):
    """A layer without convolutions (e.g. a transformer layer).

    Spliced and repaired, never pruned (the code's removal step only prunes
    convolutions).
    """

    def __init__(
        self,
        module: nn.Module,
        dims: Dims,
        in_channels: int,
        in_size: tuple[int, ...],
        out_channels: int,
    ) -> None:
        super().__init__(dims, in_channels, in_size)
        self.module = module
        self._out = out_channels

    @property
    def out_channels(self) -> int:
        """Channels of the output."""
        return self._out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The wrapped module."""
        out: torch.Tensor = self.module(x)
        return out


def _pair(seq: nn.Sequential) -> tuple[nn.Conv2d, nn.Module]:
    """The (conv, BN) of a two-module stage."""
    conv, bn = seq[0], seq[1]
    assert isinstance(conv, nn.Conv2d)
    return conv, bn


def _slice_conv(
    conv: nn.Conv1d | nn.Conv2d,
    out_idx: torch.Tensor | None = None,
    in_idx: torch.Tensor | None = None,
) -> nn.Conv1d | nn.Conv2d:
    w = conv.weight.detach()
    if out_idx is not None:
        w = w[out_idx]
    if in_idx is not None:
        w = w[:, in_idx]
    new = type(conv)(
        w.shape[1],
        w.shape[0],
        conv.kernel_size,  # type: ignore[arg-type]
        stride=conv.stride,  # type: ignore[arg-type]
        padding=conv.padding,  # type: ignore[arg-type]
        dilation=conv.dilation,  # type: ignore[arg-type]
        bias=conv.bias is not None,
    )
    new.weight.data.copy_(w)
    if conv.bias is not None and new.bias is not None:
        b = conv.bias.detach()
        new.bias.data.copy_(b if out_idx is None else b[out_idx])
    return new


def _slice_depthwise(conv: nn.Conv2d, idx: torch.Tensor) -> nn.Conv2d:
    new = nn.Conv2d(
        len(idx),
        len(idx),
        conv.kernel_size,  # type: ignore[arg-type]
        stride=conv.stride,  # type: ignore[arg-type]
        padding=conv.padding,  # type: ignore[arg-type]
        dilation=conv.dilation,  # type: ignore[arg-type]
        groups=len(idx),
        bias=conv.bias is not None,
    )
    new.weight.data.copy_(conv.weight.detach()[idx])
    if conv.bias is not None and new.bias is not None:
        new.bias.data.copy_(conv.bias.detach()[idx])
    return new


def _slice_bn(bn: nn.Module, idx: torch.Tensor) -> nn.Module:
    assert isinstance(bn, nn.BatchNorm1d | nn.BatchNorm2d)
    new = type(bn)(len(idx), eps=bn.eps, momentum=bn.momentum)
    new.weight.data.copy_(bn.weight.detach()[idx])
    new.bias.data.copy_(bn.bias.detach()[idx])
    assert bn.running_mean is not None and bn.running_var is not None
    assert new.running_mean is not None and new.running_var is not None
    new.running_mean.copy_(bn.running_mean[idx])
    new.running_var.copy_(bn.running_var[idx])
    new.train(bn.training)
    return new


# --- splice: resizers, the dims adapter and the connector --------------------------------


class Resize(nn.Module):
    """Interpolate the spatial axes to ``size`` (linear in 1-D, bilinear in 2-D)."""

    def __init__(self, size: tuple[int, ...]) -> None:
        super().__init__()
        self.size = tuple(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Resize (no-op when the size already matches)."""
        if tuple(x.shape[2:]) == self.size:
            return x
        mode = "linear" if len(self.size) == 1 else "bilinear"
        return F.interpolate(x, size=self.size, mode=mode, align_corners=False)


class DimsAdapter(nn.Module):
    """Between a 2-D and a 1-D layer: average the height away, or add a unit height.

    Not in the code (its pools are all 2-D or all 1-D); the recombined model here
    may mix image, audio, signal and text layers, so a feature map must change
    dimensionality. Resizing to the next layer's size follows.
    """

    def __init__(self, to_dims: Dims) -> None:
        super().__init__()
        self.to_dims = to_dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, C, H, W) -> (n, C, W)`` or ``(n, C, L) -> (n, C, 1, L)``."""
        return x.mean(dim=2) if self.to_dims == 1 else x.unsqueeze(2)


class PreResizer(nn.Module):
    """Raw ``(n, C, T)`` sensor window to a one-channel ``size x size`` image.

    As the code's ``PreResizer``: when ``T >= size`` a Conv1d maps the C channels to
    ``size`` rows (kernel 7 for inputs of at least 84 pixels, else 3; stride
    ``T // size`` and the dilation that makes the output length about ``size``)
    with BN; the ``(rows, length)`` map is then resized bilinearly to the square.
    """

    def __init__(self, channels: int, length: int, size: int) -> None:
        super().__init__()
        self.size = size
        self.conv: nn.Conv1d | None = None
        self.bn: nn.BatchNorm1d | None = None
        if length >= size:
            kernel = 7 if size >= 84 else 3
            stride = max(1, length // size)
            dilation = int((length - (size - 1) * stride - 1) / (kernel - 1)) + 1
            self.conv = nn.Conv1d(channels, size, kernel, stride=stride, dilation=max(1, dilation))
            self.bn = nn.BatchNorm1d(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, C, T) -> (n, 1, size, size)``."""
        if self.conv is not None and self.bn is not None:
            x = self.bn(self.conv(x))
        x = x.unsqueeze(1)
        return F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)


class Connector(nn.Module):
    """The splice between the current feature map and a candidate layer (``AutoEncoderOG``).

    ``Conv(c_in -> mid, kernel/stride of the candidate's first conv, dilation 3
    when size / (3 kernel) > 3 else 1) + BN + ConvTranspose(mid -> c_out) + BN``,
    ``mid = c_in + c_out`` at a source's input layer (the code's size list
    {224, 84, 32, 100} is the set of its sources' input sizes) and
    ``ceil(c_out / 2)`` elsewhere. A first 2-D layer gets a :class:`PreResizer`
    in front (sensor -> 1-channel image). The transposed convolution's
    ``output_padding`` is set so that the output size equals the input size
    exactly (the code leaves it at 0, which loses a pixel for even sizes at
    stride 2; its fully convolutional layers accept either), and the kernel is
    capped at the input size (CREPE's 64-tap layers see 32- to 8-sample inputs,
    which the code's unpadded connector cannot take).
    """

    def __init__(
        self,
        dims: Dims,
        c_in: int,
        c_out: int,
        size: tuple[int, ...],
        kernel: tuple[int, ...] | None,
        stride: tuple[int, ...] | None,
        wide: bool,
        pre: PreResizer | None = None,
    ) -> None:
        super().__init__()
        self.pre = pre
        k = tuple(kernel) if kernel is not None else (3,) * dims
        s = tuple(stride) if stride is not None else (1,) * dims
        if pre is not None:
            c_in, size = 1, (pre.size, pre.size)
        k = tuple(min(kk, n) for kk, n in zip(k, size, strict=True))
        dilation = 3 if size[0] / (k[0] * 3) > 3 else 1
        mid = c_in + c_out if wide else math.ceil(c_out / 2)
        conv_t = nn.ConvTranspose1d if dims == 1 else nn.ConvTranspose2d
        self.encoder = _conv(dims)(c_in, mid, k, stride=s, dilation=dilation)  # type: ignore[arg-type]
        self.bn_i = _bn(dims)(mid)
        inner = [
            (n - dilation * (kk - 1) - 1) // ss + 1 for n, kk, ss in zip(size, k, s, strict=True)
        ]
        if min(inner) < 1:
            raise ValueError(
                f"connector: input size {size} is smaller than kernel {k} "
                f"(dilation {dilation}) allows"
            )
        pad_out = tuple(
            n - ((m - 1) * ss + dilation * (kk - 1) + 1)
            for n, m, kk, ss in zip(size, inner, k, s, strict=True)
        )
        self.decoder = conv_t(
            mid,
            c_out,
            k,  # type: ignore[arg-type]
            stride=s,  # type: ignore[arg-type]
            dilation=dilation,
            output_padding=pad_out,  # type: ignore[arg-type]
        )
        self.bn_o = _bn(dims)(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map the current features to the candidate's input channels."""
        if self.pre is not None:
            x = self.pre(x)
        return self.bn_o(self.decoder(self.bn_i(self.encoder(x))))


class Step(nn.Module):
    """One position of the recombined model: splice, (repaired, pruned) layer, tail."""

    def __init__(
        self, splice: nn.Module, connector: Connector, layer: PoolLayer, name: str
    ) -> None:
        super().__init__()
        self.splice, self.connector, self.layer, self.name = splice, connector, layer, name

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Output of the layer's head (what the S-score sees)."""
        return self.layer(self.connector(self.splice(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Head then tail."""
        return self.layer.apply_tail(self.head(x))


def make_splice(x_shape: tuple[int, ...], layer: PoolLayer) -> nn.Module:
    """Dims adapter and/or resizer from a feature map of shape ``(C, *spatial)``."""
    parts: list[nn.Module] = []
    dims = len(x_shape) - 1
    if dims != layer.dims:
        parts.append(DimsAdapter(layer.dims))
        spatial = x_shape[-1:] if layer.dims == 1 else (1, x_shape[-1])
    else:
        spatial = tuple(x_shape[1:])
    if tuple(spatial) != layer.in_size:
        parts.append(Resize(layer.in_size))
    return nn.Sequential(*parts)


def bn_layers(module: nn.Module) -> list[nn.BatchNorm1d | nn.BatchNorm2d]:
    """Every batch-norm layer inside ``module``."""
    return [m for m in module.modules() if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d)]
