"""``flowerbed pretrain NAME``: build a trained artefact once and cache it.

The targets and :func:`~flowerbed.core.artefacts.ensure_artefact` live in
:mod:`flowerbed.core.artefacts`; this module is the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flowerbed.core.artefacts import parse_params, target, target_modules


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

    names = ", ".join(sorted(target_modules()))
    p = subparsers.add_parser(
        "pretrain", help=f"train and cache an artefact a component needs ({names})"
    )
    p.add_argument("target", help=f"one of: {names}")
    add_set_option(p, help="set one of the target's parameters (repeatable), e.g. --set seed=1")
    p.add_argument("--output", default=None, help="write here instead of the cache folder")
    p.add_argument("--force", action="store_true", help="retrain even if the artefact exists")
    commands["pretrain"] = cmd_pretrain
