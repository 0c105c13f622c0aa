"""Base-reasoning disagreement and one-token intervention: the claim on trained pairs.

Shen et al., "Reasoning Can Be Restored by Correcting a Few Decision Tokens"
(ICML 2026, arXiv 2605.16874). Paper (Qwen3-0.6B): salient disagreement on
~8 % of tokens, early, 17x enriched in planning tokens, at high base
uncertainty; one-token takeovers at high-disagreement positions with a small
budget recover (and can surpass) the reasoner's accuracy. Here, on pairs
trained in this repository (``flowerbed pretrain ti_pair``; tiny GPT-2s
sharing the byte tokenizer):

- ``toy``: the spec's plan-then-execute toy; reasoner = the base fine-tuned on
  correct traces;
- ``toy_sloppy``: the same base, a reasoner trained from scratch on correct
  traces for fewer steps (a weaker executor: the spec's surpass case);
- ``arith``: 3-digit addition word problems; base trained on answer-only traces
  with 40 % chain-of-thought traces mixed in, reasoner = that base fine-tuned on
  chain-of-thought traces;
- ``carry``: the setup the pre-implementation feasibility probe measured: 3-digit addition
  on a 16-symbol vocabulary, per-column chain of thought with explicit carries
  then the answer; base trained on traces whose carry decisions are coin flips,
  reasoner = the base fine-tuned on correct traces (d=64, 3 layers, B=64,
  600 + 150 steps); the decision tokens are the two carry decisions;
- ``carry_s1``, ``carry_s2``: the carry pair trained with seeds 1 and 2
  (initialisation and data order), with the cells the claims read (no
  response analysis or split traffic).

Per pair: base alone, reasoner alone, the spec's fixed-threshold table (budget
2), accuracy vs reasoner share for every trigger and baseline with thresholds
calibrated on held-out prompts, the analysis of finished responses (salient
fraction, relative positions, planning enrichment, entropy correlation), and
split-inference traffic per trigger. Cells are appended to
``benchmarks/results/token_intervention/cells.jsonl`` (a rerun skips finished
cells); ``--report-only`` rebuilds the tables and plots from it.

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/methods/token_intervention_experiment.py \
        [--pairs carry]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "token_intervention"
ARITH = {"task": "arith", "base_steps": 400, "reasoner_steps": 150, "sloppy_steps": 0,
         "reasoner_init": "base", "base_cot_share": 0.4, "batch_size": 32, "lr": 2e-3}
# the feasibility probe's setup (not in this repository): d=64, 3 layers, B=64,
# 600 base steps, +150 reasoner steps
CARRY = {"task": "carry", "hidden": 64, "layers": 3, "heads": 4, "base_steps": 600,
         "reasoner_steps": 150, "sloppy_steps": 0, "reasoner_init": "base", "batch_size": 64}
PAIRS: dict[str, dict[str, Any]] = {
    "toy": {"task": "toy", "pretrain": {}, "reasoner": "reasoner", "rhos": (0.05, 0.1, 0.2)},
    "toy_sloppy": {"task": "toy", "pretrain": {}, "reasoner": "sloppy",
                   "rhos": (0.05, 0.1, 0.2)},
    "arith": {"task": "arith", "pretrain": ARITH, "reasoner": "reasoner",
              "rhos": (0.05,)},
    "carry": {"task": "carry", "pretrain": CARRY, "reasoner": "reasoner",
              "rhos": (0.05, 0.1, 0.2), "extra_fixed": {
                  "js_tau0.1_b1": {"kind": "js", "tau": 0.1, "budget": 1},
                  "random_p0.09_b1": {"kind": "random", "rate": 0.09, "budget": 1}}},
}
#: Two more training seeds of the carry pair (the claims' units: training seeds), with the
#: cells the claims read (base, reasoner, the fixed table, every trigger at rho = 0.10).
PAIRS.update({f"carry_s{s}": {"task": "carry", "pretrain": {**CARRY, "seed": s},
                              "reasoner": "reasoner", "rhos": (0.1,), "analyses": False,
                              "extra_fixed": PAIRS["carry"]["extra_fixed"]} for s in (1, 2)})
KINDS = ("js", "entropy", "js_and_entropy", "random", "first_k")
H_GATE = 0.3  # js_and_entropy's entropy gate (nats)


def _load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(path: Path, cell: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(cell) + "\n")


def _models(pair: str) -> tuple[Any, Any]:
    from flowerbed.methods.token_intervention.model_pair import (
        TiPairParams,
        TiPairPretrainParams,
        build_ti_pair,
    )

    spec = PAIRS[pair]
    pre = TiPairPretrainParams(**spec["pretrain"])
    return (build_ti_pair(TiPairParams(role="base", pretrain=pre)),
            build_ti_pair(TiPairParams(role=spec["reasoner"], pretrain=pre)))


@dataclass(frozen=True)
class TaskOps:
    """How a task makes problems, scores a response and flags its decision tokens."""

    problems: Callable[[int, np.random.Generator], tuple[list[str], list[str]]]
    is_correct: Callable[[str, str], bool]
    flags: Callable[[str, int], np.ndarray]
    max_new_tokens: int


def task_ops(task: str) -> TaskOps:
    """Toy and arith from the task module; carry from the pair module (its own vocabulary)."""
    from flowerbed.methods.token_intervention import data as td
    from flowerbed.methods.token_intervention import model as tt
    from flowerbed.methods.token_intervention import model_pair as tp

    if task == "carry":
        def carry_flags(response: str, length: int) -> np.ndarray:
            out = np.zeros(length, dtype=bool)
            flags = tp.carry_decision_mask(response)[:length]
            out[:len(flags)] = flags
            return out

        return TaskOps(tp.carry_problems, tp.carry_correct, carry_flags,
                       tp.CARRY_MAX_NEW_TOKENS)
    t: Any = task
    return TaskOps(lambda n, gen: td.problems(t, n, gen),
                   lambda resp, ref: td.is_correct(t, resp, ref),
                   lambda resp, length: tt.plan_flags(t, resp, length),
                   tt.MAX_NEW_TOKENS[task])


def run_task(base: Any, reasoner: Any, ops: TaskOps, prompts: Sequence[str],
             refs: Sequence[str], trigger: Any, seed: int, batch: int = 100) -> Any:
    """Decode ``prompts`` with ``trigger`` in batches and score (``token_intervention_task.run``
    with the task's own scoring and length)."""
    from flowerbed.methods.token_intervention import algorithm_decode as dec
    from flowerbed.methods.token_intervention import model as tt

    ids = tt.encode_prompts(base, prompts)
    decoded: list[Any] = []
    for s in range(0, len(ids), batch):
        decoded += dec.intervene(base, reasoner, ids[s:s + batch], trigger,
                                 ops.max_new_tokens, seed=seed + s)
    texts = [base.decode(d.tokens) for d in decoded]
    return tt.Outcome(trigger, decoded, texts,
                      [ops.is_correct(t, r) for t, r in zip(texts, refs, strict=True)])


def calibrate_task(base: Any, reasoner: Any, ops: TaskOps, prompts: Sequence[str],
                   refs: Sequence[str], trigger: Any, target: float, h_gate: float,
                   seed: int) -> Any:
    """``token_intervention_task.calibrate`` through :func:`run_task`."""
    from flowerbed.methods.token_intervention import algorithm_decode as dec
    from flowerbed.methods.token_intervention import model as tt

    if trigger.kind == "js_and_entropy":
        trigger = replace(trigger, h=h_gate)
    reference = run_task(base, reasoner, ops, prompts, refs, tt.base_alone(), seed)
    cands = tt.candidates(trigger.kind, reference, h_gate)

    def rate_of(t: Any) -> float:
        return float(run_task(base, reasoner, ops, prompts, refs, t, seed).rate)

    return dec.calibrate(trigger, target, rate_of, cands)


def analyse_task(base: Any, reasoner: Any, ops: TaskOps, prompts: Sequence[str],
                 responses: Sequence[str]) -> Any:
    """``token_intervention_task.analyse_responses`` with the task's decision flags."""
    from flowerbed.methods.token_intervention import algorithm as ti
    from flowerbed.methods.token_intervention import algorithm_decode as dec
    from flowerbed.methods.token_intervention import model as tt

    ids = tt.encode_prompts(base, prompts)
    eos = [] if base.eos_id is None else [int(base.eos_id)]
    resp = [base.encode(r) + eos for r in responses]
    scores, ents = dec.teacher_forced(base, reasoner, ids, resp, "js")
    plan = [ops.flags(r, len(x)) for r, x in zip(responses, resp, strict=True)]
    return tt.TaskAnalysis(ti.analyse(scores, ents, plan, mass=0.5), scores, ents, plan)


def _trigger_dict(t: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
            for k, v in asdict(t).items()}


def run_pair(pair: str, n_test: int, n_cal: int, cells: Path, seed: int) -> None:
    """Every cell of one pair that is not in ``cells`` yet."""
    import torch

    from flowerbed.core.seeds import rng
    from flowerbed.methods.token_intervention import algorithm_decode as dec
    from flowerbed.methods.token_intervention import algorithm_split as sp
    from flowerbed.methods.token_intervention import model as tt

    torch.set_num_threads(1)
    done = {c["key"] for c in _load(cells)}
    spec = PAIRS[pair]
    task = spec["task"]
    ops = task_ops(task)
    base, reasoner = _models(pair)
    test_p, test_r = ops.problems(n_test, rng(seed, "ti.bench.test", task))
    cal_p, cal_r = ops.problems(n_cal, rng(seed, "ti.bench.cal", task))

    def cell(key: str, fn: Any) -> None:
        full = f"{pair}/{key}"
        if full in done:
            return
        t0 = time.perf_counter()
        out = fn()
        out.update(key=full, pair=pair, seconds=round(time.perf_counter() - t0, 2))
        _append(cells, out)
        print(f"{full}: {({k: v for k, v in out.items() if k != 'trigger'})}", flush=True)

    def outcome(trig: Any, prompts: list[str] = test_p, refs: list[str] = test_r) -> Any:
        return run_task(base, reasoner, ops, prompts, refs, trig, seed)

    def metrics(o: Any) -> dict[str, Any]:
        return {**o.metrics(), "trigger": _trigger_dict(o.trigger)}

    cell("base", lambda: metrics(outcome(tt.base_alone())))
    cell("reasoner", lambda: metrics(outcome(tt.reasoner_alone())))
    fixed = {"js_tau0.2_b2": dec.Trigger("js", tau=0.2, budget=2),
             "js_tau0.1_b2": dec.Trigger("js", tau=0.1, budget=2),
             "js_tau0.05_b2": dec.Trigger("js", tau=0.05, budget=2),
             "entropy_h0.5_b2": dec.Trigger("entropy", h=0.5, budget=2),
             "random_p0.18_b2": dec.Trigger("random", rate=0.18, budget=2)}
    fixed.update({k: dec.Trigger(**v) for k, v in spec.get("extra_fixed", {}).items()})
    for name, trig in fixed.items():
        cell(f"fixed/{name}", lambda trig=trig: metrics(outcome(trig)))
    calibrated: dict[tuple[str, float], Any] = {}
    for rho in spec["rhos"]:
        for kind in KINDS:
            def curve(kind: Any = kind, rho: float = rho) -> dict[str, Any]:
                cal = calibrate_task(base, reasoner, ops, cal_p, cal_r, dec.Trigger(kind),
                                     rho, h_gate=H_GATE, seed=seed)
                return {**metrics(outcome(cal.trigger)), "target": rho, "kind": kind,
                        "calibration_rate": cal.rate}
            cell(f"curve/{kind}/{rho}", curve)
    for c in _load(cells):
        if c["key"].startswith(f"{pair}/curve/"):
            calibrated[(c["kind"], c["target"])] = c["trigger"]
    if not spec.get("analyses", True):
        return
    for source in ("base", "reasoner"):
        def analysis(source: str = source) -> dict[str, Any]:
            trig = tt.base_alone() if source == "base" else tt.reasoner_alone()
            texts = outcome(trig).texts
            an = analyse_task(base, reasoner, ops, test_p, texts)
            a = an.analysis
            sal, every = a.histogram(10)
            early = a.early_share(0.25)
            d, flag = np.concatenate(an.scores), np.concatenate(an.plan)
            return {"tau": a.tau, "salient_fraction": a.salient_fraction,
                    "mass_share": a.mass_share, "enrichment": a.enrichment,
                    "pearson_entropy": a.pearson_entropy,
                    "spearman_entropy": a.spearman_entropy, "mean_score": a.mean_score,
                    "early_salient": early[0], "early_all": early[1],
                    "hist_salient": sal.tolist(), "hist_all": every.tolist(),
                    "plan_share": float(flag.mean()),
                    "plan_mass_share": float(d[flag].sum() / d.sum()),
                    "mean_js_plan": float(d[flag].mean()) if flag.any() else None,
                    "mean_js_other": float(d[~flag].mean()),
                    "by_position": [None if not np.isfinite(v) else float(v)
                                    for v in an.by_position(64)]}
        cell(f"analysis/{source}", analysis)
    rho_split = 0.1 if 0.1 in spec["rhos"] else spec["rhos"][-1]
    for kind in ("js", "entropy", "js_and_entropy"):
        def split(kind: str = kind) -> dict[str, Any]:
            raw = calibrated[(kind, rho_split)]
            fields: dict[str, Any] = {k: (float(v) if k in ("tau", "h") else v)
                                      for k, v in raw.items()}
            trig = dec.Trigger(**fields)
            ids = tt.encode_prompts(base, test_p[:100])
            session, rounds = sp.run_split(base, reasoner, ids, trig, ops.max_new_tokens, seed)
            rows, n = session.rows, len(session.rows)
            correct = [ops.is_correct(base.decode(r.tokens), ref)
                       for r, ref in zip(rows, test_r[:100], strict=True)]
            return {"kind": kind, "target": rho_split, "accuracy": float(np.mean(correct)),
                    "calls": sum(r.calls for r in rows) / n,
                    "bytes_up": sum(r.bytes_up for r in rows) / n,
                    "bytes_down": sum(r.bytes_down for r in rows) / n,
                    "tokens": sum(r.steps for r in rows) / n,
                    "reasoner_tokens": sum(sum(r.source) for r in rows) / n,
                    "rounds": rounds, "trigger": raw}
        cell(f"split/{kind}", split)


# --- report --------------------------------------------------------------------------------


def _by_key(cells: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in cells}


def report(cells: list[dict[str, Any]], out: Path) -> str:
    """Markdown tables (printed and written to ``report.md``) and the plots."""
    c = _by_key(cells)
    lines = ["## Token intervention: paper vs ours", ""]
    lines += ["| pair | B alone | R alone | JS tau=0.2 b2 | JS tau=0.1 b2 | JS tau=0.05 b2 | "
              "entropy h=0.5 b2 | random b2 |", "|---" * 8 + "|"]
    lines.append("| spec toy (strong R), spec's numbers | 0.197 | 1.000 | 1.000 (9.8%) | - | - | "
                 "1.000 (18.2%) | 0.333 (18.2%) |")
    lines.append("| spec toy (sloppy R), spec's numbers | 0.233 | 0.887 | 0.797 (9.7%) | "
                 "0.827 (18%) | 0.723 (18%) | 1.000 (18.2%) | 0.293 |")
    lines.append("| feasibility probe (carry), probe's numbers | 0.24 | 0.59 | - | "
                 "0.40 (7.6%) | - | - | 0.24 (6.5%, same budget) |")
    for pair in PAIRS:
        if f"{pair}/base" not in c:
            continue
        row = [pair, f"{c[f'{pair}/base']['accuracy']:.3f}",
               f"{c[f'{pair}/reasoner']['accuracy']:.3f}"]
        for name in ("js_tau0.2_b2", "js_tau0.1_b2", "js_tau0.05_b2", "entropy_h0.5_b2",
                     "random_p0.18_b2"):
            x = c.get(f"{pair}/fixed/{name}")
            row.append("-" if x is None else f"{x['accuracy']:.3f} ({100 * x['rate']:.1f}%)")
        lines.append("| " + " | ".join(row) + " |")
    extra = [(pair, name) for pair, spec in PAIRS.items()
             for name in spec.get("extra_fixed", {}) if f"{pair}/fixed/{name}" in c]
    if extra:
        lines += ["", "More fixed thresholds (feasibility probe (carry), JS tau=0.1 b1: "
                  "0.347 (4.0%)):", ""]
        lines += [f"- {pair}, {name}: {c[f'{pair}/fixed/{name}']['accuracy']:.3f} "
                  f"({100 * c[f'{pair}/fixed/{name}']['rate']:.1f}%)" for pair, name in extra]
    lines += ["", "Accuracy at a calibrated reasoner share (realised share on the test "
              "prompts in brackets); recovery = (acc - B)/(R - B):", ""]
    lines += ["| pair | target rho | " + " | ".join(KINDS) + " |", "|---" * (2 + len(KINDS)) + "|"]
    for pair, spec in PAIRS.items():
        if f"{pair}/base" not in c:
            continue
        b, r = c[f"{pair}/base"]["accuracy"], c[f"{pair}/reasoner"]["accuracy"]
        for rho in spec["rhos"]:
            row = [pair, f"{rho:g}"]
            for kind in KINDS:
                x = c.get(f"{pair}/curve/{kind}/{rho}")
                if x is None:
                    row.append("-")
                    continue
                rec = (x["accuracy"] - b) / (r - b) if r != b else math.nan
                row.append(f"{x['accuracy']:.3f} ({100 * x['rate']:.1f}%, rec {rec:.2f})")
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Analysis of finished responses (teacher forcing; salient = the fewest "
              "tokens carrying 50 % of sum JS; planning tokens: the toy's two plan "
              "positions, arith's plan words, carry's two carry decisions):", ""]
    lines += ["| responses | salient fraction | early (first 25 %): salient vs all | "
              "planning enrichment | JS mass on planning tokens (mean JS there vs elsewhere) | "
              "corr(JS, H_B) Pearson / Spearman |", "|---" * 6 + "|",
              "| paper (Qwen3-0.6B) | ~8 % | early | 17x | - | high |",
              "| feasibility probe (carry) | - | - | - | 85 % (13 % of tokens; "
              "0.130 vs 0.003) | - |"]
    for pair in PAIRS:
        for source in ("base", "reasoner"):
            x = c.get(f"{pair}/analysis/{source}")
            if x is None:
                continue
            mass = "-" if "plan_mass_share" not in x else (
                f"{100 * x['plan_mass_share']:.0f} % ({x['mean_js_plan']:.3f} vs "
                f"{x['mean_js_other']:.3f})")
            lines.append(
                f"| {pair}, {source}-written | {100 * x['salient_fraction']:.1f}% | "
                f"{x['early_salient']:.2f} vs {x['early_all']:.2f} | {x['enrichment']:.1f}x "
                f"(plan tokens {100 * x['plan_share']:.1f}%) | {mass} | "
                f"{x['pearson_entropy']:.2f} / {x['spearman_entropy']:.2f} |")
    lines += ["", "Split inference (client: base; server: reasoner), per response:", ""]
    lines += ["| pair | trigger | accuracy | R tokens | server calls | bytes up | bytes down |",
              "|---" * 7 + "|"]
    for pair in PAIRS:
        for kind in ("js", "entropy", "js_and_entropy"):
            x = c.get(f"{pair}/split/{kind}")
            if x is None:
                continue
            lines.append(f"| {pair} (rho={x['target']:g}) | {kind} | {x['accuracy']:.3f} | "
                         f"{x['reasoner_tokens']:.2f} | {x['calls']:.2f} | "
                         f"{x['bytes_up']:.0f} | {x['bytes_down']:.0f} |")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    _plots(c, out)
    return text


def _plots(c: dict[str, dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [p for p in PAIRS if f"{p}/base" in c]
    if not pairs:
        return
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 4.2), squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        for kind, marker in zip(KINDS, "osD^v", strict=True):
            pts = sorted((c[k]["rate"], c[k]["accuracy"]) for k in c
                         if k.startswith(f"{pair}/curve/{kind}/"))
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=marker, label=kind)
        ax.axhline(c[f"{pair}/base"]["accuracy"], color="grey", ls="--", label="base alone")
        ax.axhline(c[f"{pair}/reasoner"]["accuracy"], color="black", ls=":",
                   label="reasoner alone")
        ax.set(title=pair, xlabel="realised reasoner share of tokens", ylabel="accuracy",
               ylim=(-0.02, 1.05))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_budget.png", dpi=110)
    plt.close(fig)
    pairs = [p for p in pairs if f"{p}/analysis/base" in c]  # the seed pairs run none
    fig, axes = plt.subplots(2, len(pairs), figsize=(5.2 * len(pairs), 7.2), squeeze=False)
    for row, source in enumerate(("base", "reasoner")):
        for ax, pair in zip(axes[row], pairs, strict=True):
            x = c.get(f"{pair}/analysis/{source}")
            if x is None:
                continue
            centres = (np.arange(10) + 0.5) / 10
            ax.bar(centres - 0.02, x["hist_salient"], width=0.04, label="salient tokens")
            ax.bar(centres + 0.02, x["hist_all"], width=0.04, label="all tokens")
            ax.set(title=f"{pair}: {source}-written responses", xlabel="relative position t/T",
                   ylabel="share of tokens")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "position_histogram.png", dpi=110)
    plt.close(fig)


def main() -> None:
    """Run the missing cells (or only report) and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--n-test", type=int, default=300, help="test prompts (spec toy: 300)")
    ap.add_argument("--n-test-arith", type=int, default=100)
    ap.add_argument("--n-cal", type=int, default=100, help="held-out calibration prompts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    cells = OUT / "cells.jsonl"
    if not args.report_only:
        for pair in args.pairs.split(","):
            if pair not in PAIRS:
                raise SystemExit(f"--pairs: unknown pair {pair!r}; known: {', '.join(PAIRS)}")
            n = args.n_test_arith if PAIRS[pair]["task"] == "arith" else args.n_test
            run_pair(pair, n, min(args.n_cal, n), cells, args.seed)
    print(report(_load(cells), OUT))


if __name__ == "__main__":
    main()
