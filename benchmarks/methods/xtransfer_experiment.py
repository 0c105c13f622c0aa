"""XTransfer claim experiment: few-shot cross-modal transfer to smartwatch IMU, with costs.

Zhang et al., "XTransfer: Modality-Agnostic Few-Shot Model Transfer for Human
Sensing at the Edge", arXiv 2506.22726. Claim checked: recombined, repaired
layers of other-modality sources beat the baselines at 3, 5 and 10 shots per
class (the paper's shots) at lower edge cost. Targets: seglearn watch (7
exercises, per subject = per client, the rest of the subject's windows as query)
and sktime BasicMotions (4 activities, one group); plus leave-one-subject-out for
the centralized transfer (shots pooled from 9 subjects, the 10th as query).

XTransfer is scored with four heads on one searched model (``xtransfer_heads``):
the official metric (``xtransfer_official``: KNN on the support after the final
fine-tune, last step), an equal-data arm (``xtransfer_equal``: the probes' head
on support and validation, the baselines' rows) and the two earlier heads
(``xtransfer``: linear head on the validation windows; ``xtransfer_knn``: KNN
before the fine-tune). KNN uses ``k = min(5, shots)``.

Stand-in sources (no ImageNet or miniImageNet offline): EfficientNet-Lite0 at
64 px with Fashion-MNIST anchors instead of the paper's ResNet18 at 224 px with
miniImageNet anchors; MiniLM sees the 100-sample window decimated to
``--tokens`` steps (8 here).

Each finished episode is appended to ``<out>/episodes.jsonl`` (a re-run skips
it), so the grid can be grown in steps; its searched model goes to
``<out>/models/<episode>.pt`` (not committed: ``--refit`` re-fits the heads from
it; without it, the episode's seed rebuilds the same model by searching again).
``--report-only`` (alias ``--table``) only prints and plots.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/xtransfer_experiment.py \
        --shots 5 --seeds 0 1 2 --workers 2 [--baselines ...] [--modes local loso] [--report-only]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "xtransfer"
#: Third-party reported XTransfer accuracy on HHAR (wizwand; unverified).
PAPER = {"HHAR 5-shot": 74.3, "HHAR 10-shot": 80.7}
BASELINES = ("scratch_cnn", "stats_logreg", "linear_probe", "finetune")
#: Revision of the XTransfer arm an episode was computed with. 2: the repair restores
#: the weights that gave its lowest loss (rev 1 kept the state one SGD step later,
#: which could hold NaN weights) and collapsed target features get scale 1. 3: four
#: heads (official metric, equal data), KNN k = min(5, shots), no 1-shot search. Rows
#: of earlier revisions are kept apart (``archive_rev2/``), never mixed in.
REV = 3
#: Metrics the XTransfer search produces (the rest are baselines, unaffected by a revision).
SEARCH_ARMS = ("xtransfer", "single_")
#: XTransfer's heads on one searched model (``model_baselines.xtransfer_heads``).
HEADS = ("xtransfer_official", "xtransfer_equal", "xtransfer", "xtransfer_knn")
#: What the stand-in sources change against the paper, printed beside the numbers.
STAND_INS = (
    "stand-in sources: EfficientNet-Lite0 at 64 px with Fashion-MNIST anchors (paper: "
    "ResNet18 at 224 px with miniImageNet anchors); MiniLM on the window decimated to "
    "{tokens} steps; plus a Fashion-MNIST CNN and a signal CNN trained here"
)


def _params(args: argparse.Namespace, shots: int, baselines: tuple[str, ...]):
    from flowerbed.methods.xtransfer.learner import XTransferParams

    return XTransferParams(
        shots=shots,
        baselines=baselines,
        sources=tuple(args.sources),
        efficientnet_blocks=args.blocks,
        tokens=args.tokens,
    )


@functools.cache
def _data(target: str):
    """The target's windows, read once per worker process."""
    if target == "watch":
        from flowerbed.methods.xtransfer.data import WatchRawParams, watch_raw

        ds = watch_raw(WatchRawParams(), seed=0)
    else:
        from flowerbed.methods.xtransfer.data import BasicMotionsParams, basic_motions

        ds = basic_motions(BasicMotionsParams(), seed=0)
    x = ds.x_train.reshape(len(ds.x_train), *ds.meta.input_shape)
    return x, ds.y_train, ds.groups_train


def run_job(job: dict) -> dict:
    import torch

    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.xtransfer.learner import baseline_metrics, episode_metrics

    torch.set_num_threads(1)
    args = argparse.Namespace(**job["args"])
    x, y, g = _data(job["target"])
    p = _params(args, job["shots"], tuple(job["baselines"]))
    seed = derive_seed(job["seed"], "xtransfer", job["target"], job["mode"], job["subject"])
    ft = tuple(args.finetune_sources) if args.finetune_sources else None
    kw: dict = {"finetune_sources": ft}
    run = baseline_metrics
    if not job.get("arms_only"):
        run = episode_metrics
        kw["save_model"] = job.get("model_file")
        if kw["save_model"]:
            Path(kw["save_model"]).parent.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    if job["mode"] == "loso":
        held = g == job["subject"]
        metrics, record = run(p, x[~held], y[~held], seed, (x[held], y[held]), **kw)
    else:
        rows = g == job["subject"]
        metrics, record = run(p, x[rows], y[rows], seed, **kw)
    return {
        **{k: job[k] for k in ("target", "mode", "subject", "shots", "seed")},
        "metrics": metrics,
        "record": record,
        "wall": time.perf_counter() - t0,
        "cpu": time.process_time() - c0,
        "load": os.getloadavg()[0],
        "rev": REV,
        "episode_seed": seed,
    }


def model_file(out: Path, r: dict) -> Path:
    """Where the searched model of episode ``r`` is kept."""
    return out / "models" / (
        f"{r['target']}_{r['mode']}_s{r['subject']}_k{r['shots']}_seed{r['seed']}.pt")


def refit_job(job: dict) -> dict:
    """The heads of a saved episode re-fitted on its stored model (no search)."""
    import torch

    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.xtransfer.learner import refit_heads

    torch.set_num_threads(1)
    args = argparse.Namespace(**job["args"])
    x, y, g = _data(job["target"])
    p = _params(args, job["shots"], ())
    seed = derive_seed(job["seed"], "xtransfer", job["target"], job["mode"], job["subject"])
    if job["mode"] == "loso":
        held = g == job["subject"]
        return refit_heads(p, job["model_file"], x[~held], y[~held], seed, (x[held], y[held]))
    rows = g == job["subject"]
    return refit_heads(p, job["model_file"], x[rows], y[rows], seed)


def _job_args(args: argparse.Namespace) -> dict:
    """The command-line settings a worker needs to rebuild the episode's pool."""
    return {
        "sources": args.sources,
        "blocks": args.blocks,
        "tokens": args.tokens,
        "finetune_sources": args.finetune_sources,
    }


def _selected(args: argparse.Namespace, r: dict) -> bool:
    """Whether the saved episode ``r`` lies in the grid the command line selects."""
    if r["target"] not in args.targets or r["mode"] not in args.modes:
        return False
    if int(r["shots"]) not in args.shots or int(r["seed"]) not in args.seeds:
        return False
    return r["target"] != "watch" or int(r["subject"]) in args.subjects


def refresh_jobs(args: argparse.Namespace, rows: list[dict]) -> list[dict]:
    """Jobs re-running only the search arms of episodes computed at an older ``REV``."""
    out = []
    for r in rows:
        if r.get("rev", 1) >= REV or not _selected(args, r):
            continue
        single = any(k.startswith("single_") for k in r["metrics"])
        out.append(
            {
                **{k: r[k] for k in ("target", "mode", "subject", "shots", "seed")},
                "baselines": ["single_source"] if single else [],
                "args": _job_args(args),
                "base": r,
            }
        )
    return out


def _arm_prefixes(name: str, args: argparse.Namespace) -> list[str]:
    """The metric prefixes baseline ``name`` writes under the command line's sources."""
    from flowerbed.methods.xtransfer.learner import arm_names

    srcs = args.finetune_sources if name == "finetune" and args.finetune_sources else args.sources
    return arm_names(name, tuple(srcs))


def add_jobs(args: argparse.Namespace, rows: list[dict]) -> list[dict]:
    """Jobs running only the ``--baselines`` arms that the selected saved episodes lack.

    A fine-tune job is restricted to the sources it lacks; the XTransfer search and the
    arms already saved are not re-run (each arm draws from the episode's seed alone).
    """
    out = []
    for r in rows:
        if not _selected(args, r):
            continue
        missing = {
            b: [m for m in _arm_prefixes(b, args) if f"{m}_macro_f1" not in r["metrics"]]
            for b in args.baselines
        }
        missing = {b: ms for b, ms in missing.items() if ms}
        if not missing:
            continue
        job_args = _job_args(args)
        if "finetune" in missing:
            job_args["finetune_sources"] = [
                m.split("_", 1)[1] for m in missing["finetune"]
            ]
        out.append(
            {
                **{k: r[k] for k in ("target", "mode", "subject", "shots", "seed")},
                "baselines": sorted(missing),
                "args": job_args,
                "base": r,
                "arms_only": True,
            }
        )
    return out


def merge_arms(base: dict, new: dict) -> dict:
    """``base`` with ``new``'s arms added (the search arms and saved baselines kept)."""
    return base | {
        "metrics": base["metrics"] | new["metrics"],
        "record": base["record"] | new["record"],
        "added_wall": base.get("added_wall", 0.0) + new["wall"],
    }


def merge_refresh(base: dict, new: dict) -> dict:
    """``base`` with the search arms' metrics and records replaced by ``new``'s."""
    metrics = {k: v for k, v in base["metrics"].items() if not k.startswith(SEARCH_ARMS)}
    record = {k: v for k, v in base["record"].items() if not k.startswith(SEARCH_ARMS)}
    return base | {
        "metrics": metrics | new["metrics"],
        "record": record | new["record"],
        "rev": REV,
        "search_wall": new["wall"],
        "search_load": new["load"],
    }


def merge_heads(base: dict, metrics: dict) -> dict:
    """``base`` with the head arms' quality metrics replaced by re-fitted ones."""
    new = {k: v for k, v in metrics.items()
           if k.startswith(HEADS) and k.endswith(("_macro_f1", "_accuracy"))}
    return base | {"metrics": base["metrics"] | new, "refit": True}


def _key(r: dict) -> tuple:
    return (r["target"], r["mode"], int(r["subject"]), int(r["shots"]), int(r["seed"]))


def jobs(args: argparse.Namespace, done: set) -> list[dict]:
    """The episodes still to run, every shot count of one subject before the next subject
    (so a cut-short run still pairs its shot counts over the same subjects)."""
    out = []
    for seed in args.seeds:
        for target in args.targets:
            subjects = [0] if target == "basic_motions" else list(args.subjects)
            modes = [m for m in args.modes if m == "local" or target == "watch"]
            for mode in modes:
                for s in subjects:
                    for shots in args.shots:
                        job = {
                            "target": target,
                            "mode": mode,
                            "subject": s,
                            "shots": shots,
                            "seed": seed,
                            "baselines": list(args.baselines),
                            "args": _job_args(args),
                        }
                        job["model_file"] = str(model_file(args.out, job))
                        if _key(job) not in done:
                            out.append(job)
    return out


def load(path: Path) -> list[dict]:
    """The episodes of revision ``REV``, the last line of each key winning (a refresh
    appends its row). Rows of an older revision are never mixed in."""
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    old = sum(r.get("rev", 1) != REV for r in rows)
    if old:
        raise SystemExit(f"{path}: {old} rows of another revision than {REV}; keep them in "
                         "another folder (--out) instead of mixing them in")
    return list({_key(r): r for r in rows}.values())


def methods_of(rows: list[dict]) -> list[str]:
    names = {k[: -len("_macro_f1")] for r in rows for k in r["metrics"] if k.endswith("_macro_f1")}
    order = [*HEADS, "scratch_cnn", "stats_logreg"]
    return order + sorted(n for n in names if n not in order) if names else []


def summarise(rows: list[dict], target: str, mode: str, shots: int) -> dict[str, dict]:
    """Per method: subject-averaged macro-F1 per seed -> mean, sample std over seeds; costs."""
    sel = [r for r in rows if r["target"] == target and r["mode"] == mode and r["shots"] == shots]
    table: dict[str, dict] = {}
    for m in methods_of(sel):
        by_seed: dict[int, list[float]] = defaultdict(list)
        costs = defaultdict(list)
        for r in sel:
            if f"{m}_macro_f1" in r["metrics"]:
                by_seed[r["seed"]].append(r["metrics"][f"{m}_macro_f1"])
                for c in ("accuracy", "params", "mflops", "train_seconds"):
                    costs[c].append(r["metrics"][f"{m}_{c}"])
        if not by_seed:
            continue
        means = [float(np.mean(v)) for v in by_seed.values()]
        subjects = {r["subject"] for r in sel if f"{m}_macro_f1" in r["metrics"]}
        std = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
        table[m] = {
            "f1": float(np.mean(means)),
            "std": std,
            "seeds": len(means),
            "episodes": sum(len(v) for v in by_seed.values()),
            "subjects": len(subjects),
            **{c: float(np.mean(v)) for c, v in costs.items()},
        }
    return table


def _subjects(subjects: set[int]) -> str:
    """``1-10`` for a run of consecutive subjects, else the list."""
    ss = sorted(subjects)
    if len(ss) > 2 and ss == list(range(ss[0], ss[-1] + 1)):
        return f"{ss[0]}-{ss[-1]}"
    return ", ".join(map(str, ss))


def views(sel: list[dict]) -> list[tuple[str, list[dict]]]:
    """Balanced subsets of one cell's episodes, each with the subjects and seeds it holds.

    The mean over subjects per seed only compares seeds when every seed ran the
    same subjects. When they did not, two balanced views replace the mixed one:
    every subject at the seeds that ran all of them, and the subjects that every
    seed ran, at every seed.
    """
    by_seed: dict[int, set[int]] = defaultdict(set)
    for r in sel:
        by_seed[int(r["seed"])].add(int(r["subject"]))
    union = set().union(*by_seed.values())
    if all(s == union for s in by_seed.values()):
        return [(f"subjects {_subjects(union)}, seeds {sorted(by_seed)}", sel)]
    out = []
    full = sorted(k for k, s in by_seed.items() if s == union)
    if full:
        out.append((f"subjects {_subjects(union)}, seeds {full}",
                    [r for r in sel if int(r["seed"]) in full]))
    common = set.intersection(*by_seed.values())
    if common:
        out.append((f"subjects {_subjects(common)}, seeds {sorted(by_seed)}",
                    [r for r in sel if int(r["subject"]) in common]))
    return out or [("unbalanced: every episode", sel)]


def print_tables(rows: list[dict], tokens: int) -> None:
    print(
        "\nPaper (third-party, unverified; accuracy on HHAR, 6 classes; the official "
        "evaluation keeps the best fine-tune step on the test set):",
        ", ".join(f"{k} {v}%" for k, v in PAPER.items()),
    )
    print(STAND_INS.format(tokens=tokens))
    for target in ("watch", "basic_motions"):
        for mode in ("local", "loso"):
            shots = sorted(
                {r["shots"] for r in rows if r["target"] == target and r["mode"] == mode}
            )
            for k in shots:
                sel = [r for r in rows
                       if r["target"] == target and r["mode"] == mode and r["shots"] == k]
                for label, sub in views(sel):
                    table(sub, target, mode, k, label)
                per_subject(rows, target, mode, k)


def table(rows: list[dict], target: str, mode: str, k: int, label: str) -> None:
    """One cell's table (methods by macro-F1, with costs)."""
    t = summarise(rows, target, mode, k)
    if not t:
        return
    print(
        f"\n## {target} / {mode} / {k}-shot, {label}  (macro-F1: mean over subjects, then "
        "mean ± sample std over seeds; one seed: no ±)"
    )
    print(
        f"{'method':26s} {'macro-F1':>14s} {'acc %':>6s} {'seeds':>5s} "
        f"{'subj':>4s} {'params':>10s} {'MFLOPs':>8s} {'train s':>8s}"
    )
    for m, v in sorted(t.items(), key=lambda kv: -kv[1]["f1"]):
        f1 = f"{v['f1']:.3f} ± {v['std']:.3f}" if v["seeds"] > 1 else f"{v['f1']:.3f}        "
        print(
            f"{m:26s} {f1:>14s} {100 * v['accuracy']:6.1f} "
            f"{v['seeds']:5d} {v['subjects']:4d} {v['params']:10.0f} "
            f"{v['mflops']:8.2f} {v['train_seconds']:8.1f}"
        )


def per_subject(rows: list[dict], target: str, mode: str, shots: int) -> None:
    """With several subjects in a cell: macro-F1 per subject (mean ± std over its seeds)."""
    sel = [r for r in rows if r["target"] == target and r["mode"] == mode and r["shots"] == shots]
    subjects = sorted({int(r["subject"]) for r in sel})
    if len(subjects) < 2:
        return
    print(
        f"per subject ({mode}: {'held-out ' if mode == 'loso' else ''}subject; "
        "macro-F1 mean ± sample std over that subject's seeds, [seeds])"
    )
    print(f"{'method':26s} " + " ".join(f"{'s' + str(s):>20s}" for s in subjects))
    for m in methods_of(sel):
        cells = []
        for s in subjects:
            v = [
                r["metrics"][f"{m}_macro_f1"]
                for r in sel
                if int(r["subject"]) == s and f"{m}_macro_f1" in r["metrics"]
            ]
            if not v:
                cells.append(f"{'-':>20s}")
            elif len(v) == 1:
                cells.append(f"{v[0]:.3f} [1]".rjust(20))
            else:
                cells.append(f"{np.mean(v):.3f} ± {np.std(v, ddof=1):.3f} [{len(v)}]".rjust(20))
        print(f"{m:26s} " + " ".join(cells))


def plot(rows: list[dict], path: Path) -> None:
    """Per measured (target, mode, shots) cell: macro-F1 against MFLOPs per inference.

    With several shot counts for a target, a first panel shows macro-F1 vs shots.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["target"], r["mode"], r["shots"]) for r in rows})
    curves = [
        t
        for t in ("watch", "basic_motions")
        if len({k for tt, m, k in cells if tt == t and m == "local"}) > 1
    ]
    n = len(curves) + len(cells)
    if n == 0:
        return
    ncol = min(n, 3)
    nrow = -(-n // ncol)
    fig, grid = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 5.6 * nrow), squeeze=False)
    axes = grid.ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax, target in zip(axes, curves, strict=False):
        shots = sorted({k for t, m, k in cells if t == target and m == "local"})
        local = [r for r in rows if r["target"] == target and r["mode"] == "local"]
        pairs = set.intersection(*(
            {(r["subject"], r["seed"]) for r in local if r["shots"] == k} for k in shots))
        local = [r for r in local if (r["subject"], r["seed"]) in pairs]
        tables = {k: summarise(local, target, "local", k) for k in shots}
        methods = sorted({m for t in tables.values() for m in t})
        ours = [m for m in methods if m.startswith("xtransfer")]
        others = [m for m in methods if m not in ours]
        # XTransfer's variants in black (as its bars), told apart by line and marker;
        # the baselines in distinct colours of one qualitative palette.
        styles = {m: {"color": "black", "lw": 2.2, "ls": ls, "marker": mk}
                  for m, ls, mk in zip(ours, ("-", "--", ":", "-."), "sDv^", strict=False)}
        palette = plt.get_cmap("tab10")(np.arange(len(others)) % 10)
        styles |= {m: {"color": c, "lw": 1, "ls": "-", "marker": "o"}
                   for m, c in zip(others, palette, strict=True)}
        for m in methods:
            ks = [k for k in shots if m in tables[k]]
            ax.errorbar(
                ks,
                [tables[k][m]["f1"] for k in ks],
                yerr=[tables[k][m]["std"] for k in ks],
                capsize=3,
                label=m,
                **styles[m],
            )
        ax.set_xticks(shots)
        ax.set_xlabel("shots per class")
        ax.set_ylabel("macro-F1 (error bars: sample sd over seeds\nof the subject mean)")
        ax.set_title(f"{target}, per subject: macro-F1 vs shots\n"
                     f"({len(pairs)} (subject, seed) pair(s) run at every shot count)",
                     fontsize=10)
        # Beside the panel: inside it the legend covers the low XTransfer curves.
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(alpha=0.3)
    for ax, (target, mode, k) in zip(axes[len(curves) : n], cells, strict=True):
        sel = [r for r in rows if r["target"] == target and r["mode"] == mode and r["shots"] == k]
        # The balanced view with the most episodes (then seeds): 3 episodes of one
        # subject must not hide 20 of ten subjects.
        label, sub = max(views(sel), key=lambda v: (len(v[1]), len({r["seed"] for r in v[1]})))
        t = summarise(sub, target, mode, k)
        eps = max(v["episodes"] for v in t.values())
        order = sorted(t, key=lambda m: t[m]["f1"])
        ys = np.arange(len(order))
        ax.barh(
            ys,
            [t[m]["f1"] for m in order],
            xerr=[t[m]["std"] for m in order],
            color=["black" if m.startswith("xtransfer") else "C0" for m in order],
        )
        for y, m in zip(ys, order, strict=True):
            # A short bar cannot hold its label: it goes past the bar's error bar, in black.
            inside = t[m]["f1"] >= 0.35
            ax.text(
                0.01 if inside else t[m]["f1"] + t[m]["std"] + 0.02,
                y,
                f"{t[m]['f1']:.3f}, {t[m]['mflops']:.2f} MFLOPs",
                va="center",
                fontsize=7,
                color="white" if inside else "black",
            )
        ax.set_yticks(ys, order, fontsize=7)
        ax.set_xlim(0, 1.02)
        ax.set_xlabel("macro-F1 on the query windows (bar text: F1, MFLOPs per inference;\n"
                      "error bars: sample sd over seeds of the subject mean)")
        what = (
            "per subject"
            if mode == "local" and target == "watch"
            else ("leave-one-subject-out" if mode == "loso" else "IID, one group")
        )
        ax.set_title(f"{target}, {what}, {k}-shot ({eps} episode(s))\n{label}", fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle("XTransfer (black bars) vs baselines: accuracy and edge cost", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    where = Path(path).resolve()
    root = OUT.parents[1]
    print(f"plot: {where.relative_to(root) if where.is_relative_to(root) else where}")


def print_against(rows: list[dict], other: list[dict], label: str) -> None:
    """Per arm, over the episodes both files hold: mean macro-F1 in each and mean |change|."""
    theirs = {_key(r): r for r in other}
    pairs = [(r, theirs[_key(r)]) for r in rows if _key(r) in theirs]
    print(f"\n## against {label}: {len(pairs)} episodes in both (macro-F1: here / there)")
    if not pairs:
        return
    print(f"{'method':<24}{'episodes':>9}{'here':>8}{'there':>8}{'mean |diff|':>13}")
    for m in methods_of([r for r, _ in pairs]):
        k = f"{m}_macro_f1"
        both = [(a["metrics"][k], b["metrics"][k]) for a, b in pairs
                if k in a["metrics"] and k in b["metrics"]]
        if both:
            here, there = np.asarray(both).T
            print(f"{m:<24}{len(both):>9}{here.mean():>8.3f}{there.mean():>8.3f}"
                  f"{np.abs(here - there).mean():>13.3f}")
    same = sum(a["record"]["xtransfer"]["structure"] == b["record"]["xtransfer"]["structure"]
               for a, b in pairs)
    print(f"XTransfer structure unchanged in {same} of {len(pairs)} episodes")


def _progress(r: dict, job: dict) -> str:
    """One line on a finished episode: its XTransfer result, or the arms just added."""
    m = r["metrics"]
    head = f"{r['target']} {r['mode']} s{r['subject']} k{r['shots']} seed{r['seed']}: "
    if job.get("refit"):
        return head + "heads re-fitted"
    if job.get("arms_only"):
        added = sorted(k[: -len("_macro_f1")] for k in m if k.endswith("_macro_f1")
                       and k not in job["base"]["metrics"])
        return head + f"added {', '.join(added)}"
    return head + (
        f"official {m['xtransfer_official_macro_f1']:.3f}, "
        f"equal {m['xtransfer_equal_macro_f1']:.3f}, "
        f"linear {m['xtransfer_macro_f1']:.3f} ({r['record']['xtransfer']['structure']}), "
        f"{r.get('search_wall', r['wall']):.0f}s, load {r.get('search_load', r['load']):.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="+", default=["watch", "basic_motions"])
    ap.add_argument("--shots", nargs="+", type=int, default=[5])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES))
    ap.add_argument(
        "--sources", nargs="+", default=["efficientnet", "minilm", "fmnist_cnn", "signal_cnn"]
    )
    ap.add_argument(
        "--finetune-sources",
        nargs="*",
        default=None,
        help="sources the finetune baseline runs on (default: every source)",
    )
    ap.add_argument("--blocks", type=int, default=6, help="EfficientNet MBConv blocks in the pool")
    ap.add_argument("--tokens", type=int, default=8, help="MiniLM sequence length")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["local"],
        choices=["local", "loso"],
        help="local: per subject; loso: leave-one-subject-out (watch only)",
    )
    ap.add_argument(
        "--subjects",
        nargs="+",
        type=int,
        default=list(range(1, 11)),
        help="watch subjects (local: the clients; loso: the held-out ones)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--refit",
        action="store_true",
        help="re-fit XTransfer's heads of the selected episodes on their stored models",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--refresh",
        action="store_true",
        help=f"re-run only the XTransfer arms of the selected episodes older than rev {REV}",
    )
    ap.add_argument(
        "--add-baselines",
        action="store_true",
        help="run only the --baselines arms the selected saved episodes lack, and add them",
    )
    ap.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another episodes.jsonl: compare each arm over the episodes both hold",
    )
    ap.add_argument(
        "--report-only",
        "--table",
        dest="table",
        action="store_true",
        help="only print the tables and plot what episodes.jsonl holds",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "episodes.jsonl"
    rows = load(path)
    if not args.table:
        if args.refresh:
            # BasicMotions episodes (with the single-source searches) are the slowest: last.
            todo = sorted(refresh_jobs(args, rows), key=lambda j: j["target"] == "basic_motions")
            print(f"{len(todo)} episodes to refresh to rev {REV}", flush=True)
        elif args.refit:
            todo = [
                {**{k: r[k] for k in ("target", "mode", "subject", "shots", "seed")},
                 "args": _job_args(args), "base": r, "refit": True,
                 "model_file": str(model_file(args.out, r))}
                for r in rows if _selected(args, r) and model_file(args.out, r).is_file()
            ]
            print(f"{len(todo)} episodes to re-fit the heads of", flush=True)
        elif args.add_baselines:
            todo = add_jobs(args, rows)
            print(f"{len(todo)} episodes to add baseline arms to", flush=True)
        else:
            todo = jobs(args, {_key(r) for r in rows})
            print(f"{len(todo)} episodes to run ({len(rows)} done)", flush=True)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.workers) as pool, path.open("a") as fh:
            futures = {pool.submit(refit_job if j.get("refit") else run_job, j): j
                       for j in todo}
            failed = 0
            for i, fut in enumerate(as_completed(futures)):
                try:
                    r = fut.result()
                    job = futures[fut]
                    if job.get("refit"):
                        r = merge_heads(job["base"], r)
                    elif job.get("arms_only"):
                        r = merge_arms(job["base"], r)
                    elif "base" in job:
                        r = merge_refresh(job["base"], r)
                except Exception as exc:  # noqa: BLE001 - one bad episode must not lose the others
                    failed += 1
                    print(f"[{i + 1}/{len(todo)}] episode failed: {type(exc).__name__}: {exc}",
                          flush=True)
                    continue
                fh.write(json.dumps(r) + "\n")
                fh.flush()
                print(f"[{i + 1}/{len(todo)}] {_progress(r, job)}", flush=True)
        print(f"wall {time.perf_counter() - t0:.0f}s"
              + (f", {failed} episodes failed (not saved; a rerun retries them)" if failed else ""))
        rows = load(path)
    print_tables(rows, args.tokens)
    if args.against is not None:
        if not args.against.is_file():
            raise SystemExit(f"--against: no file {args.against}")
        print_against(rows, load(args.against), str(args.against))
    plot(rows, args.out / "xtransfer_shots.png")


if __name__ == "__main__":
    main()
