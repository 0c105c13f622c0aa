"""Speed of the one-step mixture objective on synthetic-align, one process.

"Infinite Mask Diffusion for Few-Step Distillation" (Yoo, Kim, Lee, Hong, ICML 2026,
arXiv 2605.10518). Times a few Adam steps of ``imdm_experiment.cell_onestep``'s training
(V=8, L=6, the experiment's denoiser) with three implementations of the same objective
``-log (1/K) Σ_k Π_i p_θ(x^i | m, ε_k)``:

- ``loop``: one forward pass per ε draw (K passes of B sequences), the straightforward form;
- ``main``: all B·K (data point, draw) pairs in one pass (the code before this change);
- ``new``: :func:`flowerbed.methods.imdm.algorithm.one_step_mixture_nll` (one pass of B·K pairs,
  and one pass of B sequences for a denoiser without ε, whose K draws give equal logits).

All three see the same batches and ε draws (same generator state), so their losses agree
to rounding (checked and written out). Wall and CPU (process) time per step are both
recorded: on a shared machine wall time mostly measures the other processes. Also timed:
the one-off ``torch._dynamo`` import that ``torch.optim.Adam`` triggers on first use in a
process. Writes
``benchmarks/results/imdm/speed.json``. The machine is shared: the load average at the
start and end is recorded, and ratios, not absolute times, are the result.

Usage::

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python \
        benchmarks/methods/imdm_speed.py [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import imdm_experiment as ex

from flowerbed.methods.imdm import algorithm as imdm

OUT = Path(__file__).resolve().parents[1] / "results" / "imdm" / "speed.json"


def loss_main(model, x: torch.Tensor, draws: int, gen: torch.Generator) -> torch.Tensor:
    """The objective as it was before: every (data point, draw) pair through the network."""
    b = x.shape[0]
    x_t = torch.full_like(x, model.mask_id)
    xr = x.repeat_interleave(draws, 0)
    eps = model.sample_eps(b * draws, gen)
    logp = torch.log_softmax(model(x_t.repeat_interleave(draws, 0), eps).float(), dim=-1)
    seq = logp.gather(-1, xr.unsqueeze(-1)).squeeze(-1).sum(-1).view(b, draws)
    return -(torch.logsumexp(seq, dim=1) - math.log(draws)).mean()


def loss_loop(model, x: torch.Tensor, draws: int, gen: torch.Generator) -> torch.Tensor:
    """The same estimator with one forward pass per ε draw (same ε rows as ``main``)."""
    b = x.shape[0]
    eps = model.sample_eps(b * draws, gen)
    eps = eps.view(b, draws, *eps.shape[1:])  # row b·K + k is draw k of data point b
    x_t = torch.full_like(x, model.mask_id)
    per_draw = []
    for k in range(draws):
        logp = torch.log_softmax(model(x_t, eps[:, k]).float(), dim=-1)
        per_draw.append(logp.gather(-1, x.unsqueeze(-1)).squeeze(-1).sum(-1))
    seq = torch.stack(per_draw, dim=1)
    return -(torch.logsumexp(seq, dim=1) - math.log(draws)).mean()


IMPLS = {"loop": loss_loop, "main": loss_main, "new": imdm.one_step_mixture_nll}


def time_steps(kind: str, impl: str, budget: dict, steps: int) -> dict:
    """``steps`` Adam steps (after one warm-up step) from the same init and generator."""
    data = ex.align_data(0)
    model = ex.build_denoiser(ex.synth_arch(kind == "imdm"), ex.V, ex.L, 0)
    opt = torch.optim.Adam(model.parameters(), lr=budget["lr"])
    gen = torch.Generator().manual_seed(0)
    fn = IMPLS[impl]
    losses, t0, c0 = [], 0.0, 0.0
    for step in range(steps + 1):
        if step == 1:
            t0, c0 = time.perf_counter(), time.process_time()
        idx = torch.randint(0, len(data), (budget["batch"],), generator=gen)
        loss = fn(model, data[idx], budget["k"], gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    return {
        "s_per_step": (time.perf_counter() - t0) / steps,
        "cpu_s_per_step": (time.process_time() - c0) / steps,
        "losses": losses,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # first use imports torch._dynamo
    dynamo_import_s = time.perf_counter() - t0
    budgets = {
        "main_cells": {"k": 16, "batch": 16, "lr": 3e-3},
        "spec_1.6a": {"k": 64, "batch": 64, "lr": 1e-3},
    }
    res: dict = {}
    for bname, budget in budgets.items():
        for kind in ("mdm", "imdm"):
            cell = {impl: time_steps(kind, impl, budget, args.steps) for impl in IMPLS}
            ref = cell["main"]["losses"]
            out = {
                impl: {
                    "s_per_step": r["s_per_step"],
                    "cpu_s_per_step": r["cpu_s_per_step"],
                    "max_abs_loss_diff_vs_main": max(
                        abs(a - b) for a, b in zip(r["losses"], ref, strict=True)
                    ),
                }
                for impl, r in cell.items()
            }
            out["speedup_new_vs_main"] = cell["main"]["s_per_step"] / cell["new"]["s_per_step"]
            out["speedup_new_vs_loop"] = cell["loop"]["s_per_step"] / cell["new"]["s_per_step"]
            out["cpu_speedup_new_vs_main"] = (
                cell["main"]["cpu_s_per_step"] / cell["new"]["cpu_s_per_step"]
            )
            res[f"{bname}/{kind}"] = out
            print(
                f"{bname}/{kind}: "
                + ", ".join(
                    f"{i} {out[i]['s_per_step'] * 1e3:.1f} ms/step wall "
                    f"({out[i]['cpu_s_per_step'] * 1e3:.1f} CPU)"
                    for i in IMPLS
                )
                + f"; new vs main x{out['speedup_new_vs_main']:.2f} wall, "
                f"x{out['cpu_speedup_new_vs_main']:.2f} CPU",
                flush=True,
            )
    doc = {
        "steps_timed": args.steps,
        "threads": torch.get_num_threads(),
        "dynamo_import_on_first_adam_s": dynamo_import_s,
        "loadavg_start": load0,
        "loadavg_end": os.getloadavg(),
        "budgets": budgets,
        "results": res,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
