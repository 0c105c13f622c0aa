"""SDTT / IM-SDTT few-step distillation of a masked diffusion model, and the training loop.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (arXiv 2605.10518; official code
Ugness/IMDM ``algo.py::IMSDTT``, ``configs/algo/im-sdtt.yaml``) on top of SDTT (Deschenaux &
Gulcehre 2024, arXiv 2410.21035). A frozen teacher (a copy of the student) runs
``n_teacher_steps`` (2) ancestral steps of size ``dt`` from ``(x_t, ε)`` with ε kept fixed
(``sdtt_fix_eps``: no reset), recording its log-probs of each token at the step where the
token was unmasked (positions still masked: the last step's prediction). The student, one
step of size ``n_teacher_steps · dt`` from the same ``(x_t, ε)``, is fitted by
``kl-bwd`` = KL(student ‖ teacher) per masked token. After each phase the student is
copied into the teacher and ``dt`` doubles, until the student takes a single step.

For MDLM (no ε-MLP) the same code is plain SDTT (MDLM-SDTT).
RECONSTRUCTED here: one ``t`` per mini-batch drawn from the student's own time grid, and
phases of a fixed number of optimiser steps (the paper: 10k steps per doubling).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING

from flowerbed.methods.imdm.algorithm import (
    EPS_MIN,
    Denoiser,
    Posterior,
    ancestral_step,
    forward_mask,
)

if TYPE_CHECKING:
    import torch

LossFn = Callable[["torch.nn.Module", "torch.Tensor", "torch.Generator"], "torch.Tensor"]
Progress = Callable[[int, float], None]


def teacher_targets(
    teacher: Denoiser,
    x_t: torch.Tensor,
    eps: torch.Tensor,
    t: float,
    dt: float,
    n_steps: int = 2,
    gen: torch.Generator | None = None,
    fix_eps: bool = True,
) -> torch.Tensor:
    """Teacher log-probs ``(B, L, V)`` per position from ``n_steps`` steps ``t → t - n·dt``.

    Each position's target is the teacher's distribution at the step in which
    it was unmasked; positions still masked at the end take the last step's.
    ``fix_eps`` keeps every ε (MDLM posterior); otherwise IMDM's reset applies.
    """
    import torch

    kind: Posterior = "mdlm" if fix_eps else "imdm"
    target: torch.Tensor | None = None
    x_cur, eps_cur = x_t, eps
    with torch.no_grad():
        for j in range(n_steps):
            t_j = t - j * dt
            x_next, eps_next, logp = ancestral_step(
                teacher, x_cur, eps_cur, t_j, max(t_j - dt, EPS_MIN), gen, kind
            )
            if target is None:
                target = logp.clone()
            newly = (x_cur == teacher.mask_id) & (x_next != teacher.mask_id)
            last = j == n_steps - 1
            pick = newly | ((x_next == teacher.mask_id) if last else torch.zeros_like(newly))
            target = torch.where(pick.unsqueeze(-1), logp, target)
            x_cur, eps_cur = x_next, eps_next
    assert target is not None
    return target


def kl_backward(
    student_logits: torch.Tensor, target_logp: torch.Tensor, masked: torch.Tensor
) -> torch.Tensor:
    """Mean over masked positions of KL(student ‖ teacher) = Σ_v s_v (log s_v - log t_v)."""
    import torch

    logs = torch.log_softmax(student_logits.float(), dim=-1)
    kl = (logs.exp() * (logs - target_logp.clamp_min(-1e4))).sum(-1)
    return (kl * masked).sum() / masked.sum().clamp_min(1)


def sdtt_loss(
    student: Denoiser,
    teacher: Denoiser,
    x: torch.Tensor,
    teacher_dt: float,
    gen: torch.Generator | None = None,
    n_teacher_steps: int = 2,
    fix_eps: bool = True,
) -> torch.Tensor:
    """One SDTT mini-batch loss: x_t at a student grid time, teacher targets, kl-bwd."""
    import torch

    student_dt = n_teacher_steps * teacher_dt
    grid = max(1, round((1 - EPS_MIN) / student_dt))
    k = int(torch.randint(0, grid, (1,), generator=gen))
    t = 1 - k * student_dt
    x_t = forward_mask(x, torch.full((x.shape[0],), t), student.mask_id, gen)
    eps = student.sample_eps(x.shape[0], gen)
    target = teacher_targets(teacher, x_t, eps, t, teacher_dt, n_teacher_steps, gen, fix_eps)
    masked = (x_t == student.mask_id).float()
    return kl_backward(student(x_t, eps), target, masked)


def sdtt_phases(start_steps: int, n_teacher_steps: int = 2) -> list[int]:
    """Teacher step counts per phase: ``start, start/2, …`` until the student takes one step."""
    if start_steps < n_teacher_steps or start_steps & (start_steps - 1):
        raise ValueError(
            f"start_steps must be a power of two >= {n_teacher_steps}, got {start_steps}"
        )
    out, n = [], start_steps
    while n >= n_teacher_steps:
        out.append(n)
        n //= 2
    return out


def fit_steps(
    model: torch.nn.Module,
    data: torch.Tensor,
    loss_fn: LossFn,
    steps: int,
    batch_size: int,
    lr: float,
    gen: torch.Generator,
    grad_clip: float | None = 1.0,
    optimizer: str = "adam",
    progress: Progress | None = None,
) -> float:
    """``steps`` seeded mini-batch optimiser steps of ``loss_fn``; mean loss of the last 10%."""
    import torch

    opt: torch.optim.Optimizer
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    tail: list[float] = []
    for step in range(steps):
        idx = torch.randint(0, len(data), (min(batch_size, len(data)),), generator=gen)
        loss = loss_fn(model, data[idx], gen)
        opt.zero_grad()
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        if step >= steps - max(1, steps // 10):
            tail.append(float(loss.detach()))
        if progress is not None:
            progress(step, float(loss.detach()))
    model.eval()
    return sum(tail) / max(len(tail), 1)


def distill(
    student: torch.nn.Module,
    data: torch.Tensor,
    start_steps: int,
    steps_per_phase: int,
    batch_size: int,
    lr: float,
    gen: torch.Generator,
    n_teacher_steps: int = 2,
    fix_eps: bool = True,
    teacher: torch.nn.Module | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    max_phases: int | None = None,
    on_phase: Callable[[int, torch.nn.Module], None] | None = None,
) -> dict[str, float]:
    """SDTT (MDLM) or IM-SDTT (IMDM) in place on ``student``; returns the last loss per phase.

    ``teacher`` (default: a frozen copy of ``student``) is replaced by a copy of the
    student after every phase, as in SDTT's ``grow_dt_every``. ``on_phase(steps,
    student)`` is called after each phase with the student's step count.
    """
    teacher = copy.deepcopy(student if teacher is None else teacher).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    out: dict[str, float] = {}
    for n in sdtt_phases(start_steps, n_teacher_steps)[:max_phases]:
        dt = (1 - EPS_MIN) / n
        frozen = teacher

        def loss(
            model: torch.nn.Module,
            batch: torch.Tensor,
            g: torch.Generator,
            dt: float = dt,
            frozen: torch.nn.Module = frozen,
        ) -> torch.Tensor:
            return sdtt_loss(model, frozen, batch, dt, g, n_teacher_steps, fix_eps)  # type: ignore[arg-type]

        def tick(step: int, value: float, n: int = n) -> None:
            if progress is not None:
                progress(n // n_teacher_steps, step, value)

        out[f"phase{n // n_teacher_steps}"] = fit_steps(
            student, data, loss, steps_per_phase, batch_size, lr, gen, progress=tick
        )
        teacher = copy.deepcopy(student).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        if on_phase is not None:
            on_phase(n // n_teacher_steps, student)
    return out
