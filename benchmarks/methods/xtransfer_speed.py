"""XTransfer episode speed: recomputing (before) vs reusing (after), same episode, same process.

Zhang et al., "XTransfer: Modality-Agnostic Few-Shot Model Transfer for Human
Sensing at the Edge", arXiv 2506.22726. One episode of the experiment
(``benchmarks/methods/xtransfer_experiment.py``: watch, subject 1, local, 5 shots, seed 0,
the default pool) runs its layer-wise search and both heads with
``SearchConfig.reuse=False`` (the spliced support recomputed at every repair step,
an MBConv block's expand and depthwise convolutions at every mask the channel
removal tries) and ``reuse=True``, ``--repeats`` times each in ABBA order (optionally after one
untimed warm-up of each). It checks that both give the same structure, search
record, predictions and macro-F1, and the largest difference between the two
recombined models' weights; it writes the wall times and their ratio to
``results/xtransfer/speed.json``.

Usage::

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
        .venv/bin/python benchmarks/methods/xtransfer_speed.py [--repeats 2] [--warmup]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "xtransfer"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each variant")
    ap.add_argument("--warmup", action="store_true", help="one untimed run of each first")
    ap.add_argument("--subject", type=int, default=1)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT / "speed.json")
    args = ap.parse_args()

    import torch

    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.xtransfer import algorithm_search as xs
    from flowerbed.methods.xtransfer import model_baselines as xb
    from flowerbed.methods.xtransfer.data import WatchRawParams, watch_raw
    from flowerbed.methods.xtransfer.learner import XTransferParams, build_pool, search_config

    torch.set_num_threads(1)
    ds = watch_raw(WatchRawParams(), seed=0)
    rows = ds.groups_train == args.subject
    x = ds.x_train[rows].reshape(int(rows.sum()), *ds.meta.input_shape)
    _, y = np.unique(ds.y_train[rows], return_inverse=True)
    # The experiment's episode: its seed derivation, pool (6 EfficientNet blocks, 8 tokens).
    seed = derive_seed(args.seed, "xtransfer", "watch", "local", args.subject)
    p = XTransferParams(shots=args.shots, efficientnet_blocks=6, tokens=8)
    split = xb.fewshot_split(y, p.shots, p.val, seed)
    xt = torch.as_tensor(x, dtype=torch.float32)
    t0 = time.perf_counter()
    pool = build_pool(p)
    pool_s = time.perf_counter() - t0

    def run(reuse: bool) -> dict:
        """Search and both heads, as ``run_xtransfer`` does; wall times and outputs."""
        cfg = dataclasses.replace(search_config(p, seed), reuse=reuse)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        res = xs.search(pool, xt[split.support], y[split.support], xt[split.val], y[split.val], cfg)
        search_s = time.perf_counter() - t
        knn = xs.knn_predict(
            res.model, xt[split.support], y[split.support], xt[split.query], p.knn_k
        )
        head = xs.finetune(
            res.model, xt[split.val], y[split.val], int(y.max()) + 1, p.finetune_steps, cfg.seed
        )
        with torch.no_grad():
            pred = head(xt[split.query]).argmax(1).numpy()
        for h in res.history:  # per-candidate seconds differ by nature
            for c in h["candidates"].values():
                c.pop("seconds")
        return {
            "reuse": reuse,
            "search_s": search_s,
            "total_s": time.perf_counter() - t,
            "load": load,
            "model": res.model,
            "history": res.history,
            "pred": {"xtransfer": pred, "xtransfer_knn": knn},
        }

    if args.warmup:
        run(False)
        run(True)
    # ABBA order (after, before, before, after, ...): drift in the machine's load and
    # first-call warm-up fall on both variants alike.
    order = [i % 4 in (1, 2) for i in range(2 * args.repeats)]
    runs = [run(not before) for before in order]
    old, new = [r for r in runs if not r["reuse"]], [r for r in runs if r["reuse"]]
    a, b = old[0], new[0]
    sa, sb = a["model"].state_dict(), b["model"].state_dict()
    weight_diff = (
        max(
            float((sa[k].float() - sb[k].float()).abs().max()) if sa[k].numel() else 0.0 for k in sa
        )
        if sa.keys() == sb.keys()
        else float("inf")
    )
    y_q = y[split.query]
    same = {
        "structure": a["model"].structure == b["model"].structure,
        "search_record": a["history"] == b["history"],
        "predictions": all(np.array_equal(a["pred"][m], b["pred"][m]) for m in a["pred"]),
    }
    f1 = {
        f"{tag}_{m}": xb.scores(y_q, r["pred"][m])["macro_f1"]
        for tag, r in (("before", a), ("after", b))
        for m in r["pred"]
    }

    def mean(rs: list[dict], k: str) -> float:
        return float(np.mean([r[k] for r in rs]))

    result = {
        "episode": {
            "target": "watch",
            "mode": "local",
            "subject": args.subject,
            "shots": args.shots,
            "seed": args.seed,
            "pool_build_s": pool_s,
        },
        "before_search_s": [r["search_s"] for r in old],
        "after_search_s": [r["search_s"] for r in new],
        "before_total_s": [r["total_s"] for r in old],
        "after_total_s": [r["total_s"] for r in new],
        "load_avg_1min": [r["load"] for r in runs],
        "speedup_search": mean(old, "search_s") / mean(new, "search_s"),
        "speedup_total": mean(old, "total_s") / mean(new, "total_s"),
        "same": same,
        "max_weight_diff": weight_diff,
        "macro_f1": f1,
        "structure": b["model"].structure,
        "note": "before = SearchConfig.reuse False, after = True; ABBA-ordered runs in one "
        "process, one thread; total = search + KNN head + fine-tuned linear head",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
