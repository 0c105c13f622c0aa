"""FedSPA client (github.com/eejiarong/FedSPA-main): visual prototypes on frozen VLM features.

Answers ``query.fedspa_stats`` (per-class sums and counts of the few-shot
features, for the round-0 prototypes), ``train.fedspa`` (one round of the
prototype objective; ``P_k`` persists in the client's state folder between
rounds, ``ctx.client_state("fedspa")``, and is uploaded, never averaged),
``train.fedspa_linear`` and ``train.fedspa_prompt`` (the FedAvg linear-head and
PromptFL baselines) and ``evaluate.fedspa`` (accuracy of a text-feature, linear
or prompt classifier on the client's test rows). The maths is in
``flowerbed.methods.fedspa.algorithm``.

Also registers the ``synthetic_clip`` vision-language model, a toy/test asset
paired with the ``synthetic_clip`` dataset.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.algorithms import adapter_training as at
from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.data.federated import federated_data
from flowerbed.data.fewshot import FewShotPartition, world_centre, world_offset
from flowerbed.methods.fedspa import algorithm as fs
from flowerbed.models.vlm import (
    DEFAULT_TEMPLATES,
    VisionLanguageModel,
    build_vlm,
    vlm_spec_type,
)

#: Message types and record keys shared with ``flowerbed.methods.fedspa.strategy``.
STATS_MESSAGE = "query.fedspa_stats"
TRAIN_MESSAGE = "train.fedspa"
LINEAR_MESSAGE = "train.fedspa_linear"
PROMPT_MESSAGE = "train.fedspa_prompt"
EVAL_MESSAGE = "evaluate.fedspa"
SUMS, COUNTS = "class_sums", "class_counts"
TEXT, PROTOS, INIT_PROTOS = "text", "prototypes", "init_prototypes"
HEAD_W, HEAD_B, CONTEXT = "head_w", "head_b", "context"
ARM, EPOCHS, HEAD = "arm", "epochs", "head"
ARMS = ("fedspa", "local_only")
HEADS = ("text", "linear", "prompt")


# --- the synthetic CLIP-like vision-language model (toy / test asset) ---------------------


class SyntheticClipParams(Params):
    """Text side of the toy world: modality gap, text noise, prompt-context width."""

    dim: int = Field(64, ge=2, description="must equal the synthetic_clip dataset's dim")
    gap: float = Field(3.0, ge=0, description="length of the offset shared by all texts")
    text_noise: float = Field(1.5, ge=0, description="std of the per-class text noise")
    context_dim: int = Field(16, ge=1)


_WORLD_NAME = re.compile(r"w(\d+)-c(\d+)")


@register("vlm", "synthetic_clip", params=SyntheticClipParams)
class SyntheticClip(VisionLanguageModel):
    """Toy CLIP-like VLM: image rows are already features; text = normalise(gap + u_c + noise).

    Class names ``w<world>-c<i>`` (the ``synthetic_clip`` dataset's) name class
    centre ``u_i`` of world ``world``; other texts map to seeded random directions.
    A prompt context shifts every class feature by ``mean(ctx) @ M`` (``M`` fixed).
    """

    def __init__(self, params: Params) -> None:
        # torch only once a model or learner runs: validating a scenario must stay light.
        import torch

        super().__init__(params)
        p: SyntheticClipParams = params  # type: ignore[assignment]
        self.dim, self.context_dim = p.dim, p.context_dim
        proj = rng(0, "synthetic_clip", "context").standard_normal((p.context_dim, p.dim))
        self._proj = torch.as_tensor(proj / np.sqrt(p.dim), dtype=torch.float32)

    def encode_images_uncached(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Rows normalised (they are features of the synthetic_clip dataset)."""
        if x.shape[1] != self.dim:
            raise ValueError(
                f"vlm synthetic_clip: dim={self.dim} but dataset {meta.name!r} rows have "
                f"{x.shape[1]} values; set the vlm's dim to the dataset's"
            )
        z = np.asarray(x, dtype=np.float64)
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """``normalise(gap + u_c + noise_c)`` for texts naming a class, else a seeded direction."""
        p: SyntheticClipParams = self.params  # type: ignore[assignment]
        rows = []
        for text in texts:
            found = _WORLD_NAME.search(text)
            if found is None:
                rows.append(rng(0, "synthetic_clip", "text", text).standard_normal(self.dim))
                continue
            world, c = int(found.group(1)), int(found.group(2))
            noise = rng(world, "clip-world", "text-noise", c).standard_normal(self.dim)
            gap = world_offset(world, self.dim, p.gap, "text")
            rows.append(world_centre(world, c, self.dim) + gap
                        + p.text_noise * noise / np.sqrt(self.dim))
        z = np.asarray(rows)
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)

    def init_context(self, n_ctx: int, seed: int) -> Any:
        """CoOp's init: ``N(0, 0.02^2)`` context vectors."""
        import torch

        gen = torch.Generator().manual_seed(seed % 2**63)
        return 0.02 * torch.randn(n_ctx, self.context_dim, generator=gen)

    def context_from_text(self, text: str) -> Any:
        """Zero context vectors, one per word: the prompt then equals the class text."""
        import torch

        return torch.zeros(len(text.split()), self.context_dim)

    def prompt_text_features(self, context: Any, class_names: Sequence[str]) -> Any:
        """``normalise(text(name) + mean(ctx) @ M)``, differentiable in ``ctx``."""
        import torch

        base = torch.as_tensor(self.encode_texts(list(class_names)))
        shift = context.mean(dim=0) @ self._proj
        return torch.nn.functional.normalize(base + shift, dim=1)


# --- the learner ---------------------------------------------------------------------------

VlmSpec = vlm_spec_type()


class FedSpaLearnerParams(Params):
    """Frozen VLM, FedSPA's cache terms and learning rates, and the baselines' client settings.

    Defaults are argued in docs/methods/fedspa.md (medians of the authors'
    per-dataset values for alpha and beta; a learning rate for about one
    optimiser step per epoch).
    """

    vlm: VlmSpec  # type: ignore[valid-type]
    templates: tuple[str, ...] = Field(DEFAULT_TEMPLATES, min_length=1)
    alpha: float = Field(5.0, ge=0, description="weight of the cache logits")
    beta: float = Field(5.0, ge=0, description="sharpness of the cache affinities")
    lr: float = Field(2e-3, gt=0, description="AdamW lr of the prototypes")
    batch_size: int = Field(8, ge=1)
    head_lr: float = Field(1e-2, gt=0, description="FedAvg linear-head baseline: AdamW lr")
    prompt_lr: float = Field(2e-3, gt=0, description="PromptFL baseline: AdamW lr of the context")
    prompt_init: str | None = Field(
        "a photo of a", description="PromptFL baseline: context spelling this text (CoOp); "
        "null: n_ctx random vectors")
    n_ctx: int = Field(4, ge=1, description="PromptFL baseline: random context vectors")


_FEATURES: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()


@functools.lru_cache(maxsize=4)
def _vlm(spec_json: str, spec: Params) -> VisionLanguageModel:
    del spec_json  # the cache key (pydantic models hash by identity)
    return build_vlm(spec)


@register("learner", "fedspa")
class FedSpaLearner(Learner):
    """FedSPA prototypes, linear-head and prompt baselines on frozen VLM features."""

    Params = FedSpaLearnerParams

    @property
    def vlm(self) -> VisionLanguageModel:
        """The frozen vision-language model (built once per process)."""
        spec = self.params.vlm  # type: ignore[attr-defined]
        return _vlm(spec.model_dump_json(), spec)

    def text_features(self, meta: DatasetMeta) -> np.ndarray:
        """Zero-shot class features ``T0`` (``C x D``)."""
        p: FedSpaLearnerParams = self.params  # type: ignore[assignment]
        return self.vlm.class_text_features(list(meta.class_names), p.templates)

    def features(self, data: ClientData, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Frozen image features and labels of the few-shot ``train`` or the ``test`` rows.

        Under ``fewshot_dirichlet`` the test rows of all clients are encoded
        together (the same rows for every seed and alpha, so the vlm's disk cache
        serves them) and each client takes its share.
        """
        fed = federated_data(self.scenario)
        part = fed.partition
        if split == "test" and isinstance(part, FewShotPartition) and part.test_indices:
            if self.scenario.clients.local_test_fraction > 0:
                raise ValueError(
                    "learner fedspa: the fewshot_dirichlet partition gives each client its "
                    "test rows; set clients.local_test_fraction: 0 (it would drop shots)"
                )
            pool = part.test_pool()
            f, y = self._encoded(fed.dataset.x_test[pool], fed.dataset.y_test[pool], data.meta,
                                 "all-test")
            idx = np.searchsorted(pool, part.test_indices[data.partition_id])
            return f[idx], y[idx]
        x, y = (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)
        return self._encoded(x, y, data.meta, f"{data.partition_id}-{split}")

    def _encoded(
        self, x: np.ndarray, y: np.ndarray, meta: DatasetMeta, label: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """``encode_images(x)``, kept in this process per scenario data and vlm."""
        s = self.scenario
        key = json.dumps([s.component("dataset").model_dump(mode="json"),
                          s.component("partition").model_dump(mode="json"), s.seed,
                          s.num_clients, self.params.vlm.model_dump(mode="json"),  # type: ignore[attr-defined]
                          label])
        if key not in _FEATURES:
            f = self.vlm.encode_images(x, meta) if len(y) else np.zeros((0, self.vlm.dim))
            _FEATURES[key] = (np.asarray(f, dtype=np.float32), y)
            while len(_FEATURES) > 64:
                _FEATURES.popitem(last=False)
        return _FEATURES[key]

    def query_fedspa_stats(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Per-class sums and counts of the few-shot features (round-0 prototypes)."""
        f, y = self.features(data, "train")
        sums, counts = fs.class_sums(f, y, data.meta.num_classes)
        arrays = {SUMS: sums.astype(np.float32), COUNTS: counts.astype(np.float32)}
        return Payload(arrays=arrays, num_examples=len(y))

    def train_fedspa(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """One round of the prototype objective, then personalised test accuracy.

        ``fedspa``: T from the server, P from the last round (round 0: the
        server's P0), P uploaded. ``local_only``: T = T0 and P0 from local class
        means (T0 rows for absent classes), nothing uploaded.
        """
        import torch

        p: FedSpaLearnerParams = self.params  # type: ignore[assignment]
        arm = str(payload.config[ARM])
        if arm not in ARMS:
            raise ValueError(f"learner fedspa: unknown arm {arm!r}; known: {', '.join(ARMS)}")
        # Each client's prototypes outlive the message (and the worker process): they
        # are the client's own model, never averaged, kept in its state folder.
        state = ctx.client_state("fedspa")
        saved = state.load_array(arm)
        f, y = self.features(data, "train")
        t0 = None if arm == "fedspa" else self.text_features(data.meta)
        t = payload.arrays[TEXT] if t0 is None else t0
        if saved is not None:
            protos = saved
        elif t0 is None:
            protos = payload.arrays[INIT_PROTOS]
        else:
            protos = fs.init_prototypes(*fs.class_sums(f, y, data.meta.num_classes), t0)[0]
        cfg = at.TrainConfig(p.lr, int(payload.config[EPOCHS]), p.batch_size, ctx.seed)
        start = time.perf_counter()
        protos, losses = fs.train_prototypes(protos, t, f, y, cfg, alpha=p.alpha, beta=p.beta,
                                             logit_scale=self.vlm.logit_scale)
        seconds = time.perf_counter() - start
        state.save_array(arm, protos)
        ft, yt = self.features(data, "test")
        logits = fs.tip_logits(torch.as_tensor(ft), torch.as_tensor(t), torch.as_tensor(protos),
                               p.alpha, p.beta, self.vlm.logit_scale)
        metrics = {**self._score(logits, yt), "train_seconds": seconds}
        if losses:
            metrics["train_loss"] = losses[-1]
        arrays = {PROTOS: protos} if arm == "fedspa" else {}
        return Payload(arrays=arrays, metrics=metrics, num_examples=len(y))

    def train_fedspa_linear(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """FedAvg baseline's client: linear head on frozen features from the global head."""
        p: FedSpaLearnerParams = self.params  # type: ignore[assignment]
        f, y = self.features(data, "train")
        cfg = at.TrainConfig(p.head_lr, int(payload.config[EPOCHS]), p.batch_size, ctx.seed)
        start = time.perf_counter()
        w, b, _ = fs.train_linear_head(payload.arrays[HEAD_W], payload.arrays[HEAD_B], f, y, cfg)
        metrics = {"train_seconds": time.perf_counter() - start}
        return Payload(arrays={HEAD_W: w, HEAD_B: b}, metrics=metrics, num_examples=len(y))

    def train_fedspa_prompt(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """PromptFL baseline's client: CoOp context trained on the local few-shot features."""
        import torch

        p: FedSpaLearnerParams = self.params  # type: ignore[assignment]
        f, y = self.features(data, "train")
        names = list(data.meta.class_names)
        cfg = at.TrainConfig(p.prompt_lr, int(payload.config[EPOCHS]), p.batch_size, ctx.seed)
        start = time.perf_counter()
        context, _ = fs.train_prompt(
            torch.as_tensor(payload.arrays[CONTEXT]),
            lambda c: self.vlm.prompt_text_features(c, names), f, y, cfg, self.vlm.logit_scale)
        metrics = {"train_seconds": time.perf_counter() - start}
        return Payload(arrays={CONTEXT: context}, metrics=metrics, num_examples=len(y))

    def evaluate_fedspa(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Accuracy on the client's test rows of text features, a linear head or a prompt."""
        import torch

        head = str(payload.config[HEAD])
        ft, yt = self.features(data, "test")
        arr = payload.arrays
        if head == "text":
            logits = self.vlm.logit_scale * ft @ arr[TEXT].T
        elif head == "linear":
            logits = ft @ arr[HEAD_W].T + arr[HEAD_B]
        elif head == "prompt":
            with torch.no_grad():
                t = self.vlm.prompt_text_features(torch.as_tensor(arr[CONTEXT]),
                                                  list(data.meta.class_names))
            logits = ft @ np.asarray(t).T
        else:
            raise ValueError(f"learner fedspa: unknown head {head!r}; known: {', '.join(HEADS)}")
        return Payload(metrics=self._score(logits, yt), num_examples=len(yt))

    @staticmethod
    def _score(logits: Any, y: np.ndarray) -> dict[str, float]:
        """``accuracy`` (0 without test rows), ``correct`` and ``n_test``."""
        correct, n = fs.accuracy(logits, y) if len(y) else (0, 0)
        return {"accuracy": correct / n if n else 0.0, "correct": float(correct),
                "n_test": float(n)}

