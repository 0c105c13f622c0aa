"""ReAugment with tuned arms, in a large-pool and a tiny-pool regime (issue 54).

Yuan et al., "ReAugment: Targeted Few-Shot Time Series Augmentation via Model
Zoo-Guided Reinforcement Learning", arXiv 2409.06282. The earlier grid
(``reaugment_experiment.py``) ran every arm at one fixed setting on pools of 21-137
windows, where the RL stage barely moved the augmenter and jitter at sigma 0.03 was a
no-op. Here, centralized (K-fold zoo, K = 5), per run (regime x forecaster x few-shot
% x seed):

- **Regimes.** ``m3_large``: M3 monthly, the first 40 series of each category (223
  series; 571 training windows at 5 %, 1005 at 10 %; lookback 36, the official
  horizon 18 and hold-out); ``elnino_tiny``: the earlier El Niño setting (3
  segments; 21 / 39 windows).
- **Equal tuning on the validation windows.** Every tuned arm tries three settings;
  the forecaster trained on ``D + D̃`` of each is scored on the validation windows
  (the early-stopping MSE) and the arm reports the test MSE of its best validation
  setting. Classic arms: jitter sigma, magnitude-warp sigma, FrAug mask rate. RL arms
  (``rl_random``: random anchors; ``reaugment``: zoo-variance anchors): the RL
  budget (iterations, lr, β_RL), from the spec's default to the review's suggestion.
  ``none`` and ``vmae`` (pre-trained VMAE, no RL, random anchors) have nothing to tune.
- **The RL stage's movement.** For every RL setting: KL(π_RL ‖ π_pre) of the prior
  head over the anchors (nats per window, :func:`~flowerbed.methods.reaugment.algorithm.policy_kl`)
  and the reward curve (mean reward in ten equal blocks of iterations).

Every arm of a run shares the data, zoo, pre-trained VMAE, initial forecaster
weights and batch order. Rows are appended to ``<out>/tuned_runs.jsonl`` as runs
finish; a re-run skips the runs already stored. ``--report-only`` writes
``tuned_table.md`` and ``tuned_rl.png``.

Usage::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/methods/reaugment_tuned.py \
        [--regimes m3_large elnino_tiny] [--seeds 0 1 2 3 4] [--fractions 5 10] \
        [--families dlinear] [--out benchmarks/results/reaugment] [--report-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

REGIMES: dict[str, dict[str, Any]] = {
    "m3_large": {"source": "m3", "frequency": "monthly", "lookback": 36, "max_series": 40},
    "elnino_tiny": {"source": "elnino", "lookback": 36, "horizon": 12, "segments": 3},
}
#: Settings tried per tuned arm (three each): classic ops' strength, the RL budget.
CLASSIC_GRID: dict[str, tuple[str, tuple[float, ...]]] = {
    "jitter": ("sigma", (0.03, 0.1, 0.3)),
    "magnitude_warp": ("sigma", (0.1, 0.2, 0.4)),
    "freq_mask": ("rate", (0.1, 0.2, 0.4)),
}
#: (iterations, lr, β_RL): the spec's default, then toward the review's suggestion.
RL_GRID: tuple[tuple[int, float, float], ...] = (
    (200, 1e-4, 1.0), (500, 1e-3, 0.1), (1000, 1e-3, 0.1)
)
RL_ANCHORS = {"rl_random": "random", "reaugment": "variance"}
ARMS = ("none", *CLASSIC_GRID, "vmae", *RL_ANCHORS)


def windows(regime: str, fraction: float) -> tuple[np.ndarray, ...]:
    """Training, validation and test windows, test MASE scales, lookback, horizon, channels."""
    from flowerbed.data.timeseries_data import (
        TEST,
        TRAIN,
        VAL,
        ForecastParams,
        forecast,
        unpack,
        window_layout,
    )

    data = forecast(ForecastParams(**REGIMES[regime], fewshot=fraction), seed=0)
    ws = unpack(data.x_train, data.meta)
    tr, va, te = ws.split(TRAIN), ws.split(VAL), ws.split(TEST)
    return tr.windows, va.windows, te.windows, te.scale, window_layout(data.meta)


def model_factory(family: str, layout: tuple[int, int, int]) -> Any:
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    t, h, c = layout
    spec = registry.get("model", family).params(name=family)  # type: ignore[call-arg]
    return lambda: registry.build(
        "model", spec, in_features=t * c, out_features=h * c, channels=c
    )


def blocks(history: list[float], n: int = 10) -> list[float]:
    """Mean of ``history`` in ``n`` equal consecutive blocks."""
    return [float(np.mean(b)) for b in np.array_split(np.asarray(history), n) if len(b)]


def run_point(regime: str, family: str, fraction: float, seed: int) -> dict:
    """Every arm and every setting of one run; the validation-chosen setting per arm."""
    import torch

    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.reaugment import algorithm as ra
    from flowerbed.methods.reaugment import algorithm_ops as ops
    from flowerbed.methods.reaugment.learner import ReAugmentParams

    wall, cpu = time.perf_counter(), time.process_time()
    tr, va, te, scale, layout = windows(regime, fraction)
    t = layout[0]
    make = model_factory(family, layout)
    cfg = ReAugmentParams().config()
    zoo = ra.fit_zoo(make, tr, t, cfg.folds, cfg.train, derive_seed(seed, "zoo"), va)
    errors = ra.zoo_errors(zoo.members, tr, t)
    size = int(np.ceil(cfg.anchor_share * len(tr)))
    rng = np.random.default_rng(derive_seed(seed, "sources"))
    sources = {
        "random": np.sort(rng.choice(len(tr), size, replace=False)),
        "variance": ra.select_anchors(ra.anchor_scores(errors, "variance"), cfg.anchor_share),
    }
    from flowerbed.methods.reaugment.algorithm_arms import pretrained_vmae

    base = pretrained_vmae(tr, cfg.vmae, derive_seed(seed, "vmae"))

    def fit(extra: np.ndarray | None) -> dict[str, float]:
        model = ops.seeded_model(make, derive_seed(seed, "final"))
        data = tr if extra is None else np.concatenate([tr, extra]).astype(np.float32)
        model, out = ops.train_forecaster(model, data, t, cfg.train, derive_seed(seed, "fit"), va)
        return {"val": out["best_val"], **ops.forecast_metrics(model, te, t, scale)}

    def generate(vmae: Any, anchors: np.ndarray, tag: str) -> np.ndarray:
        gen = torch.Generator().manual_seed(derive_seed(seed, tag, "generate"))
        src = ops.as_tensor(np.repeat(anchors, cfg.per_anchor, axis=0))
        return vmae.generate(src, gen).numpy()

    cands: dict[str, dict[str, dict]] = {"none": {"-": fit(None)}}
    random_src = np.repeat(tr[sources["random"]], cfg.per_anchor, axis=0)
    for arm, (name, values) in CLASSIC_GRID.items():
        cands[arm] = {}
        for v in values:
            op = partial(getattr(ops, arm), **{name: v})
            aug = op(random_src, np.random.default_rng(derive_seed(seed, "classic", arm, v)))
            cands[arm][f"{name}={v:g}"] = fit(aug)
    cands["vmae"] = {"-": fit(generate(base, tr[sources["random"]], "vmae"))}
    rl: dict[str, dict] = {}
    for arm, rule in RL_ANCHORS.items():
        anchors = tr[sources[rule]]
        cands[arm] = {}
        for iters, lr, beta in RL_GRID:
            label = f"it={iters},lr={lr:g},beta={beta:g}"
            vmae = copy.deepcopy(base)
            rcfg = replace(cfg.rl, iterations=iters, lr=lr, beta_rl=beta)
            hist = ra.reinforce(vmae, anchors, tr, zoo.members, t, rcfg, derive_seed(seed, arm))
            kl = ra.policy_kl(vmae, base, anchors, derive_seed(seed, "kl"))
            cands[arm][label] = fit(generate(vmae, anchors, arm))
            tail = max(1, iters // 5)
            rl[f"{arm}/{label}"] = {
                "kl": kl,
                "reward_first": float(np.mean(hist[:tail])),
                "reward_last": float(np.mean(hist[-tail:])),
                "reward_blocks": blocks(hist),
            }
    chosen = {arm: min(c, key=lambda k, c=c: c[k]["val"]) for arm, c in cands.items()}
    return {
        "regime": regime, "family": family, "fraction": fraction, "seed": seed,
        "n_train": len(tr), "n_val": len(va), "n_test": len(te),
        "chosen": chosen,
        "test": {arm: cands[arm][k]["mse"] for arm, k in chosen.items()},
        "test_mase": {arm: cands[arm][k]["mase"] for arm, k in chosen.items()},
        "val": {arm: cands[arm][k]["val"] for arm, k in chosen.items()},
        "rl_chosen": {arm: rl[f"{arm}/{chosen[arm]}"] for arm in RL_ANCHORS},
        "candidates": cands,
        "rl": rl,
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
    }


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def paired(rows: list[dict], a: str, b: str) -> str:
    """Geometric-mean MSE change of arm a against b and the t statistic of the log ratios."""
    d = np.array([np.log(r["test"][a] / r["test"][b]) for r in rows])
    if len(d) < 2:
        return f"{100 * np.expm1(d.mean()):+.1f} % (n = {len(d)})"
    tval = d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
    return f"{100 * np.expm1(d.mean()):+.1f} % (t = {tval:.1f}, n = {len(d)})"


def markdown(rows: list[dict]) -> str:
    lines = []
    for regime in REGIMES:
        sub = [r for r in rows if r["regime"] == regime]
        if not sub:
            continue
        lines += [f"### {regime}: test MSE of the validation-chosen setting "
                  "(mean ± sample sd over seeds)", "",
                  "| model | % | n train | seeds | " + " | ".join(ARMS) + " |",
                  "|" + "---|" * (4 + len(ARMS))]
        for fam, frac in sorted({(r["family"], r["fraction"]) for r in sub}):
            cell = [r for r in sub if r["family"] == fam and r["fraction"] == frac]
            vals = []
            for arm in ARMS:
                v = np.array([r["test"][arm] for r in cell])
                sd = f"±{v.std(ddof=1):.3f}" if len(v) > 1 else ""
                vals.append(f"{v.mean():.3f}{sd}")
            lines.append(f"| {fam} | {frac:g} | {cell[0]['n_train']} | {len(cell)} | "
                         + " | ".join(vals) + " |")
        lines += ["", "Paired over runs (geometric-mean MSE change, t of the log ratios):", ""]
        for a, b in (("reaugment", "none"), ("reaugment", "vmae"), ("reaugment", "rl_random"),
                     ("rl_random", "vmae"), ("vmae", "none"), ("freq_mask", "none"),
                     ("jitter", "none"), ("reaugment", "freq_mask")):
            lines.append(f"- {a} vs {b}: {paired(sub, a, b)}")
        lines += ["", "RL settings (mean over runs): KL(π_RL ‖ π_pre) in nats per window, "
                  "reward first → last fifth, times chosen on validation:", ""]
        for arm in RL_ANCHORS:
            for iters, lr, beta in RL_GRID:
                label = f"it={iters},lr={lr:g},beta={beta:g}"
                st = [r["rl"][f"{arm}/{label}"] for r in sub]
                picked = sum(r["chosen"][arm] == label for r in sub)
                lines.append(
                    f"- {arm}, {label}: KL {np.mean([s['kl'] for s in st]):.2f}, reward "
                    f"{np.mean([s['reward_first'] for s in st]):.3f} → "
                    f"{np.mean([s['reward_last'] for s in st]):.3f}, chosen {picked}/{len(sub)}"
                )
        lines += ["", "Classic settings chosen on validation: " + "; ".join(
            f"{arm}: " + ", ".join(
                f"{k} x{sum(r['chosen'][arm] == k for r in sub)}"
                for k in sorted({r["chosen"][arm] for r in sub}))
            for arm in CLASSIC_GRID), "",
            f"Cost: CPU {np.mean([r['cpu_s'] for r in sub]):.0f} s per run "
            f"(mean of {len(sub)}).", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = [g for g in REGIMES if any(r["regime"] == g for r in rows)]
    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        sub = [r for r in rows if r["regime"] == regime]
        for arm, style in (("reaugment", "-"), ("rl_random", "--")):
            for iters, lr, beta in RL_GRID:
                label = f"it={iters},lr={lr:g},beta={beta:g}"
                curves = np.array([r["rl"][f"{arm}/{label}"]["reward_blocks"] for r in sub])
                kl = np.mean([r["rl"][f"{arm}/{label}"]["kl"] for r in sub])
                x = (np.arange(curves.shape[1]) + 0.5) * iters / curves.shape[1]
                ax.plot(x, curves.mean(axis=0), style, label=f"{arm} {label} (KL {kl:.1f})")
        ax.set_xlabel("REINFORCE iteration")
        ax.set_ylabel("mean reward of the sampled windows")
        ax.set_title(f"{regime}: reward curve (mean over {len(sub)} runs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--fractions", type=float, nargs="+", default=[5.0, 10.0])
    ap.add_argument("--families", nargs="+", default=["dlinear"])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/reaugment"))
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "tuned_runs.jsonl"
    if not args.report_only:
        for seed in args.seeds:
            for regime in args.regimes:
                for fraction in args.fractions:
                    for family in args.families:
                        key = (regime, family, fraction, seed)
                        # read afresh: another process may be filling the same file
                        done = {(r["regime"], r["family"], r["fraction"], r["seed"])
                                for r in load(log)}
                        if key in done:
                            continue
                        row = run_point(regime, family, fraction, seed)
                        with log.open("a") as fh:
                            fh.write(json.dumps(row) + "\n")
                        print(f"{key}: none {row['test']['none']:.4f} reaugment "
                              f"{row['test']['reaugment']:.4f} cpu {row['cpu_s']:.0f} s",
                              flush=True)
    rows = load(log)
    if rows:
        (args.out / "tuned_table.md").write_text(markdown(rows))
        print(markdown(rows))
        plot(rows, args.out / "tuned_rl.png")


if __name__ == "__main__":
    main()
