"""IMDM: the longer distillation schedule, ε-dependence per phase, and IMReDi (issue 54).

"Infinite Mask Diffusion for Few-Step Distillation" (Yoo, Kim, Lee, Hong, ICML 2026,
arXiv 2605.10518; official code Ugness/IMDM). On synthetic-align (V = 8, L = 6), per seed:

1. MDLM (ELBO, ``--base-steps``, default 600), IMDM (MDLM weights + zero-initialised
   ε-MLP, a quarter as many ELBO steps) and the MDLM fine-tuned as many more (the
   budget of ``imdm_experiment.py``'s ``sdtt`` part at ``--steps-scale 1``).
2. SDTT of the MDLM and IM-SDTT of the IMDM (kl-bwd, 2 teacher steps, ε fixed and
   shared with the student) from a teacher sampled with ``--start`` steps (default
   128), halving until the student takes one step: log2(start) doublings of
   ``--phase-steps`` steps each. The official schedule: 1024 teacher steps, 10k
   steps per doubling. After every phase: the student's aligned rate at 1 and 2
   steps and its ε-dependence (:func:`~flowerbed.methods.imdm.algorithm_redi.eps_dependence`:
   the mutual information between ε and the one-step token, nats per position).
3. IMReDi from the IM-SDTT student: ``--redi-samples`` samples at ``--redi-gen-steps``
   steps with reproducible per-sample seeds, then ``--redi-steps`` ELBO steps on
   ``(x_t, ε(seed)) → x_0``; and the official control ``ignore_seed`` (fresh ε, same
   data and steps).

Cells (one per seed) are appended to ``benchmarks/results/imdm/long_cells.jsonl``; a
re-run skips the seeds already stored (the key holds the schedule).

Usage::

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/methods/imdm_long.py \
        [--seeds 0 1 2 3] [--start 128] [--phase-steps 150] [--report-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import torch

from flowerbed.methods.imdm import algorithm as imdm
from flowerbed.methods.imdm import algorithm_distill as dd
from flowerbed.methods.imdm import algorithm_redi as redi
from flowerbed.methods.imdm.model import DenoiserParams, build_denoiser
from flowerbed.methods.imdm.model_denoiser import load_mdlm_into_imdm

OUT = Path(__file__).resolve().parents[1] / "results" / "imdm"
V, L = 8, 6
EPS_DRAWS = 512


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def align_data(seed: int, n: int = 4000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (n, 1), generator=g).repeat(1, L)


def arch(imdm_on: bool) -> DenoiserParams:
    return DenoiserParams(hidden=32, layers=2, heads=2, imdm=imdm_on, noise_dim=16)


def aligned(model: torch.nn.Module, steps: int, seed: int, n: int = 1000) -> float:
    s = imdm.sample(model, n, L, steps, torch.Generator().manual_seed(10_000 + seed))
    return imdm.aligned_rate(s)


def probe(model: torch.nn.Module, seed: int) -> dict[str, float]:
    """Aligned rate at 1 and 2 steps and the ε-dependence (own generators: no side effects)."""
    dep = redi.eps_dependence(model, L, EPS_DRAWS, torch.Generator().manual_seed(20_000 + seed))
    return {"aligned@1": aligned(model, 1, seed), "aligned@2": aligned(model, 2, seed),
            "eps_mi": dep["mi"], "eps_tv": dep["tv"]}


def cell(seed: int, args: argparse.Namespace) -> dict:
    data = align_data(seed)
    gen = torch.Generator().manual_seed(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    elbo = lambda m, b, g: imdm.elbo_loss(m, b, g)  # noqa: E731
    mdlm = build_denoiser(arch(False), V, L, seed)
    dd.fit_steps(mdlm, data, elbo, args.base_steps, 64, 2e-3, gen)
    im = build_denoiser(arch(True), V, L, seed)
    load_mdlm_into_imdm(im, mdlm.state_dict())
    dd.fit_steps(im, data, elbo, args.base_steps // 4, 64, 1e-3, gen)
    dd.fit_steps(mdlm, data, elbo, args.base_steps // 4, 64, 1e-3, gen)
    out: dict = {"teacher": {}}
    students = {}
    for name, base in (("mdlm", mdlm), ("imdm", im)):
        out["teacher"][name] = {f"aligned@{k}": aligned(base, k, seed) for k in (1, 2, args.start)}
        out["teacher"][name].update(probe(base, seed))
        phases: list[dict] = []

        def on_phase(
            steps: int, student: torch.nn.Module, phases: list = phases, name: str = name
        ) -> None:
            phases.append({"student_steps": steps, **probe(student, seed)})
            log(f"  seed {seed} {name} phase -> {steps} steps: {phases[-1]}")

        student = copy.deepcopy(base)
        dd.distill(student, data, args.start, args.phase_steps, 64, 1e-3, gen, on_phase=on_phase)
        students[name] = student
        out[f"{name}-sdtt"] = {"phases": phases,
                               **{f"aligned@{k}": aligned(student, k, seed) for k in (1, 2, 4)}}
    pool = redi.redi_dataset(students["imdm"], args.redi_samples, L, args.redi_gen_steps,
                             seed + 1)
    out["redi_data_aligned"] = imdm.aligned_rate(pool[:, :-1])
    for label, ignore in (("imredi", False), ("imredi_ignore_seed", True)):
        model = copy.deepcopy(students["imdm"])
        curve: list[dict] = []

        def tick(step: int, loss: float, model=model, curve=curve) -> None:
            if (step + 1) % max(1, args.redi_steps // 4) == 0:
                model.eval()
                curve.append({"step": step + 1, **probe(model, seed)})
                model.train()

        dd.fit_steps(model, pool,
                     lambda m, b, g, ignore=ignore: redi.redi_loss(m, b, g, ignore_seed=ignore),
                     args.redi_steps, 64, 1e-3, torch.Generator().manual_seed(seed + 7),
                     progress=tick)
        out[label] = {"curve": curve,
                      **{f"aligned@{k}": aligned(model, k, seed) for k in (1, 2, 4)},
                      **{k: v for k, v in probe(model, seed).items() if k.startswith("eps")}}
        log(f"  seed {seed} {label}: {out[label]['aligned@1']:.3f} @1")
    out["seconds"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    return out


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_sd(vals: list[float]) -> str:
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return f"{m:.3f}"
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return f"{m:.3f} ± {sd:.3f}"


def mean_sd_e(vals: list[float]) -> str:
    """``mean ± sd`` in scientific notation (the ε mutual information spans decades)."""
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return f"{m:.2e}"
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return f"{m:.2e} ± {sd:.1e}"


def report(path: Path) -> str:
    rs = rows(path)
    if not rs:
        return ""
    lines = []
    for key in sorted({r["schedule"] for r in rs}):
        sub = [r["result"] for r in rs if r["schedule"] == key]
        lines += [f"### schedule {key}: {len(sub)} seed(s), mean ± sample sd", "",
                  "| model | aligned@1 | aligned@2 | aligned@4 | ε MI (nats/position) |",
                  "|---|---|---|---|---|"]
        for name in ("mdlm-sdtt", "imdm-sdtt", "imredi", "imredi_ignore_seed"):
            mis = [r[name]["phases"][-1]["eps_mi"] if "phases" in r[name] else r[name]["eps_mi"]
                   for r in sub]
            mi = mean_sd_e(mis)
            lines.append(f"| {name} | " + " | ".join(
                mean_sd([r[name][f"aligned@{k}"] for r in sub]) for k in (1, 2, 4)) + f" | {mi} |")
        lines += ["", "Per phase (student steps after the phase): IM-SDTT aligned@1, ε MI; "
                  "MDLM-SDTT aligned@1:", ""]
        n_phases = len(sub[0]["imdm-sdtt"]["phases"])
        for i in range(n_phases):
            st = sub[0]["imdm-sdtt"]["phases"][i]["student_steps"]
            lines.append(
                f"- → {st} steps: IM-SDTT "
                f"{mean_sd([r['imdm-sdtt']['phases'][i]['aligned@1'] for r in sub])}, MI "
                f"{mean_sd_e([r['imdm-sdtt']['phases'][i]['eps_mi'] for r in sub])}; MDLM-SDTT "
                f"{mean_sd([r['mdlm-sdtt']['phases'][i]['aligned@1'] for r in sub])}")
        many = max(int(x.split("@")[1]) for x in sub[0]["teacher"]["mdlm"] if "aligned@" in x)
        teachers = "; ".join(
            f"{n} aligned@{k} {mean_sd([r['teacher'][n][f'aligned@{k}'] for r in sub])}"
            for n in ("mdlm", "imdm") for k in (1, many))
        lines += ["", f"Teachers (before distillation): {teachers}",
                  f"IMReDi data (IM-SDTT samples) aligned: "
                  f"{mean_sd([r['redi_data_aligned'] for r in sub])}",
                  f"CPU per seed: {mean_sd([r.get('cpu_s', math.nan) for r in sub])} s", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--base-steps", type=int, default=600, help="MDLM ELBO steps (fine-tunes: 1/4)"
    )
    ap.add_argument("--start", type=int, default=128, help="teacher steps of the first phase")
    ap.add_argument("--phase-steps", type=int, default=150)
    ap.add_argument("--redi-samples", type=int, default=1000)
    ap.add_argument("--redi-gen-steps", type=int, default=32)
    ap.add_argument("--redi-steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=OUT / "long_cells.jsonl")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    schedule = (
        f"base{args.base_steps}/start{args.start}/phase{args.phase_steps}/"
        f"redi{args.redi_samples}x{args.redi_gen_steps}/{args.redi_steps}"
    )
    if not args.report_only:
        for seed in args.seeds:
            # read afresh: another process may be filling the same file
            if (schedule, seed) in {(r["schedule"], r["seed"]) for r in rows(args.out)}:
                continue
            log(f"cell seed {seed}, {schedule}")
            result = cell(seed, args)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as fh:
                fh.write(json.dumps({"key": f"long/{schedule}/{seed}", "schedule": schedule,
                                     "seed": seed, "result": result}) + "\n")
    text = report(args.out)
    if text:
        (args.out.parent / "long_table.md").write_text(text)
        print(text)


if __name__ == "__main__":
    main()
