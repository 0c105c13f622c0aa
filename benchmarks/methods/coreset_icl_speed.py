"""Speed of the coreset-ICL scorer: the shared-prefix path against the reference, same cells.

For each (task, seed, selector, budget) cell of ``coreset_icl_experiment.py lm`` the
cell is run twice in this process on the same pool, queries and loaded SmolLM2:
``scoring: reference`` (the plain scorer: length-sorted left-padded batches, a KV
cache only for the random draws' prefixes) and ``scoring: shared`` (each shared token
prefix fed once, recursively; only last positions reach the LM head; its score memo
cleared first, so it starts cold). Reported per cell: wall seconds of both, their
ratio, and whether the two give the same selected set (vote-k's selection runs the
LM) and the same predicted label for every query in both demonstration modes, with
the largest difference of the normalised confidences.

Usage::

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        .venv/bin/python benchmarks/methods/coreset_icl_speed.py
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import coreset_icl_experiment as ex
import numpy as np

from flowerbed.core.seeds import derive_seed
from flowerbed.methods.coreset_icl import learner_prompts as pr


def run_cell(lrn, pool, words, seed: int, method: str, budget: int) -> dict:
    """One LM cell as ``coreset_icl_experiment.run_lm`` runs it: selection, then both modes."""
    start = time.perf_counter()
    conf = (
        lrn.confidence(pool, words, derive_seed(seed, "votek", budget))
        if method == "votek"
        else None
    )
    idx, _ = ex.select(method, pool, budget, seed, conf)
    name = f"{method}@{budget}"
    out: dict[str, Any] = {"idx": idx}
    for mode in lrn.p.demo_modes:
        out[mode] = lrn.answer(
            [pool.x[i] for i in idx],
            pool.y[idx],
            pool.emb[idx],
            pool.qx,
            pool.qemb,
            words,
            mode,
            derive_seed(seed, "demos", name),
        )
    out["wall_s"] = time.perf_counter() - start
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="supersense", choices=list(ex.TASKS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cells",
        nargs="+",
        default=["pacs@8", "kmeans@18", "pacs@100", "votek@18"],
        help="selector@budget",
    )
    ap.add_argument("--lm-queries", type=int, default=30)
    ap.add_argument("--out", type=Path, default=ex.OUT / "speed.json")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    data = ex.client_data(args.task, args.seed, 1000, 300)
    ref = ex.learner(args.task, selectors=tuple(ex.LM_METHODS), scoring="reference")
    new = ex.learner(args.task, selectors=tuple(ex.LM_METHODS), scoring="shared")
    pool = ex.Pool(ref, data)
    q = args.lm_queries
    pool.qx, pool.qy, pool.qemb = pool.qx[:q], pool.qy[:q], pool.qemb[:q]
    words = ref.words(data)
    rows = []
    for cell in args.cells:
        method, budget = cell.split("@")
        a = run_cell(ref, pool, words, args.seed, method, int(budget))
        pr.clear_memo()
        b = run_cell(new, pool, words, args.seed, method, int(budget))
        row = {
            "task": args.task,
            "seed": args.seed,
            "cell": cell,
            "n_queries": q,
            "reference_s": a["wall_s"],
            "shared_s": b["wall_s"],
            "speedup": a["wall_s"] / b["wall_s"],
            "same_selection": bool(np.array_equal(a["idx"], b["idx"])),
            "load_avg": os.getloadavg()[0],
        }
        for mode in ref.p.demo_modes:
            row[f"same_labels_{mode}"] = bool(np.array_equal(a[mode][0], b[mode][0]))
            row[f"max_conf_diff_{mode}"] = float(np.max(np.abs(a[mode][1] - b[mode][1])))
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    total_a = sum(r["reference_s"] for r in rows)
    total_b = sum(r["shared_s"] for r in rows)
    summary = {
        "reference_s": total_a,
        "shared_s": total_b,
        "speedup": total_a / total_b,
        "all_same": all(all(v for k, v in r.items() if k.startswith("same_")) for r in rows),
    }
    args.out.write_text(json.dumps({"cells": rows, "total": summary}, indent=1) + "\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
