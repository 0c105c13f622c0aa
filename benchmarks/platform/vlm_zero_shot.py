"""Zero-shot accuracy of the ``two_tower`` vision-language model on Fashion-MNIST's test set.

Builds (or reuses) the heads for the given pre-training recipe, encodes the
test rows, and classifies each image by its most similar class prompt:
"a photo of a {class}." alone, and the mean over every caption template. Seen
and held-out (unseen in pre-training) classes are reported separately. For
context, two linear probes (logistic regression) are fitted on ``--probe-rows``
training rows (the *first* rows of the training set, disjoint from the
pre-training slice at its end): one on the joint embeddings the zero-shot
classifier uses, one on the raw EfficientNet-Lite0 features.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/platform/vlm_zero_shot.py \
        [--set pretrain_rows=5000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from flowerbed.core.registry import get
from flowerbed.models import vlm_two_tower as tt
from flowerbed.models.vlm import build_vlm, cached_array
from flowerbed.platform import pretrain


def probe(train: np.ndarray, y: np.ndarray, test: np.ndarray, yt: np.ndarray) -> float:
    """Test accuracy of a standardised multinomial logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scale = StandardScaler().fit(train)
    clf = LogisticRegression(max_iter=500, C=0.1).fit(scale.transform(train), y)
    return float(clf.score(scale.transform(test), yt))


def main() -> None:
    """Print zero-shot and probe accuracies (and optionally write them as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="pre-training recipe override")
    parser.add_argument("--test-rows", type=int, default=10_000)
    parser.add_argument("--probe-rows", type=int, default=2_000)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)

    start = time.perf_counter()
    recipe = pretrain.parse_params(pretrain.target("two_tower"), args.overrides)
    vlm = build_vlm(get("vlm", "two_tower").params(name="two_tower", pretrain=recipe))
    r: tt.TwoTowerPretrainParams = vlm.recipe  # type: ignore[attr-defined]
    xt, yt = tt.fashion_rows(r.data_path, "t10k", slice(0, args.test_rows))
    x, y = tt.fashion_rows(r.data_path, "train", slice(0, args.probe_rows))
    # frozen EfficientNet features (cached), then the image head: what encode_images computes
    raw = [cached_array("vlm_features", f"effl0-{r.image_size}", a,
                        lambda a=a: tt.image_tower_features(a, tt.FASHION_META, r.image_size,
                                                            show=True))
           for a in (x, xt)]
    with torch.no_grad():
        joint = [vlm.heads.embed_image(torch.as_tensor(a)).numpy()  # type: ignore[attr-defined]
                 for a in raw]
    ft = joint[1]
    names = tt.FASHION_CLASSES
    unseen = np.isin(yt, [names.index(c) for c in r.holdout_classes])
    out: dict[str, float] = {"logit_scale": vlm.logit_scale, "test_rows": float(len(yt))}
    for label, templates in (("one_template", ("a photo of a {}.",)),
                             ("all_templates", tt.CAPTION_TEMPLATES)):
        pred = (ft @ vlm.class_text_features(names, templates).T).argmax(1)
        out[f"zero_shot_{label}"] = float((pred == yt).mean())
        if unseen.any():
            out[f"zero_shot_{label}_seen"] = float((pred == yt)[~unseen].mean())
            out[f"zero_shot_{label}_unseen"] = float((pred == yt)[unseen].mean())
        if label == "one_template":
            per_class = {n: float((pred == yt)[yt == c].mean()) for c, n in enumerate(names)}
    out["probe_joint"] = probe(joint[0], y, ft, yt)
    out["probe_effnet"] = probe(raw[0], y, raw[1], yt)
    out["seconds"] = time.perf_counter() - start
    print(f"recipe: {r.model_dump_json()}")
    for key, value in out.items():
        print(f"{key:36s} {value:.4f}")
    print("per class (one template): "
          + ", ".join(f"{n} {a:.2f}" for n, a in per_class.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"recipe": r.model_dump(mode="json"), **out, "per_class": per_class}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
