"""``flowerbed pretrain NAME``: build a trained artefact once and cache it.

Some components need a trained piece that no package ships (projection heads of
the two-tower vision-language model, the amortized mutual-information network).
Each such piece is a :class:`PretrainTarget` declared by the module that uses it;
this module only lists where targets live, parses ``--set`` overrides against the
target's strict parameters and runs it. Components call :func:`ensure_artefact`
so a missing artefact is built on first use (with progress shown) instead of
failing.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flowerbed.platform.registry import Params

logger = logging.getLogger("flowerbed.pretrain")

#: Target name -> module defining ``PRETRAIN_TARGET`` (imported only when used).
TARGET_MODULES: dict[str, str] = {
    "two_tower": "flowerbed.clients.vlm_two_tower",
    "infoatlas": "flowerbed.clients.infoatlas_model",
}


@dataclass(frozen=True)
class PretrainTarget:
    """A trainable artefact.

    Attributes
    ----------
    name
        The name on the command line.
    params
        Strict parameter model; ``--set key=value`` overrides its defaults.
    run
        ``run(params, output)`` trains and writes the artefact to ``output``
        (atomically: write a temporary file, then rename) and returns metrics
        worth printing.
    default_path
        Where the artefact for ``params`` is cached.
    help
        One line for ``flowerbed pretrain --help``.
    """

    name: str
    params: type[Params]
    run: Callable[[Any, Path], dict[str, float]]
    default_path: Callable[[Any], Path]
    help: str


def target(name: str) -> PretrainTarget:
    """The target called ``name``; the error lists the known names."""
    if name not in TARGET_MODULES:
        known = ", ".join(sorted(TARGET_MODULES)) or "(none)"
        raise KeyError(f"unknown pretrain target {name!r}; known: {known}")
    found: PretrainTarget = importlib.import_module(TARGET_MODULES[name]).PRETRAIN_TARGET
    return found


def parse_params(t: PretrainTarget, overrides: list[str]) -> Params:
    """``t.params`` validated from ``key=value`` strings (values parsed as YAML)."""
    from flowerbed.platform.scenario import apply_overrides

    data = apply_overrides({}, overrides)
    try:
        params: Params = t.params.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise ValueError(f"pretrain {t.name}: " + "; ".join(lines)) from None
    return params


def ensure_artefact(name: str, params: Params, path: Path | None = None) -> Path:
    """Path of the artefact for ``params``, training it first if it is missing."""
    t = target(name)
    out = Path(path) if path is not None else t.default_path(params)
    if not out.exists():
        logger.warning("%s: no artefact at %s; training it now (once)", name, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        t.run(params, out)
    return out


def cmd_pretrain(args: argparse.Namespace) -> int:
    """Train (or, with ``--force``, retrain) one target's artefact."""
    try:
        t = target(args.target)
        params = parse_params(t, args.overrides)
    except (KeyError, ValueError) as exc:
        print(str(exc).strip("'\""), file=sys.stderr)
        return 2
    out = Path(args.output) if args.output else t.default_path(params)
    if out.exists() and not args.force:
        print(f"{t.name}: already built at {out} (use --force to retrain)")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    metrics = t.run(params, out)
    for key, value in metrics.items():
        print(f"{key}: {value:.6g}")
    print(f"wrote {out}")
    return 0


def add_commands(subparsers: Any, commands: dict[str, Any]) -> None:
    """Add ``flowerbed pretrain TARGET [--set k=v] [--output PATH] [--force]``."""
    from flowerbed.platform.cli import add_set_option

    names = ", ".join(sorted(TARGET_MODULES))
    p = subparsers.add_parser(
        "pretrain", help=f"train and cache an artefact a component needs ({names})"
    )
    p.add_argument("target", help=f"one of: {names}")
    add_set_option(p, help="set one of the target's parameters (repeatable), e.g. --set seed=1")
    p.add_argument("--output", default=None, help="write here instead of the cache folder")
    p.add_argument("--force", action="store_true", help="retrain even if the artefact exists")
    commands["pretrain"] = cmd_pretrain
