"""Trained artefacts a component needs, built once and cached.

Some components need a trained piece that no package ships (projection heads of
the two-tower vision-language model, the amortized mutual-information network).
Each such piece is a :class:`PretrainTarget` declared by the module that uses it
(a top-level ``PRETRAIN_TARGET = PretrainTarget(name=...)``, found by reading
source: :func:`flowerbed.core.plugins.pretrain_targets`); this module looks
targets up, parses ``--set`` overrides against the target's strict parameters
and runs it. Components call :func:`ensure_artefact` so a missing artefact is
built on first use (with progress shown) instead of failing.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flowerbed.core import plugins
from flowerbed.core.registry import Params

logger = logging.getLogger("flowerbed.pretrain")


def target_modules() -> dict[str, str]:
    """Target name -> module defining its ``PRETRAIN_TARGET`` (imported only when used)."""
    return plugins.pretrain_targets()


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
    modules = target_modules()
    if name not in modules:
        known = ", ".join(sorted(modules)) or "(none)"
        raise KeyError(f"unknown pretrain target {name!r}; known: {known}")
    found: PretrainTarget = importlib.import_module(modules[name]).PRETRAIN_TARGET
    return found


def parse_params(t: PretrainTarget, overrides: list[str]) -> Params:
    """``t.params`` validated from ``key=value`` strings (values parsed as YAML)."""
    from flowerbed.core.scenario import apply_overrides

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
