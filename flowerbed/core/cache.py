"""Where trained artefacts (pre-trained heads, estimator networks, feature caches) live.

One folder per user, overridable with ``FLOWERBED_CACHE``; nothing is ever
downloaded into it, only built locally (``flowerbed pretrain``) or copied there
by the user.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "FLOWERBED_CACHE"


def cache_dir() -> Path:
    """The artefact cache folder (created on first use).

    ``$FLOWERBED_CACHE`` when set, else ``$XDG_CACHE_HOME/flowerbed``, else
    ``~/.cache/flowerbed``.
    """
    root = os.environ.get(ENV_VAR)
    if root:
        path = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg) if xdg else Path.home() / ".cache") / "flowerbed"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_file(*parts: str) -> Path:
    """``cache_dir() / parts...`` with its parent folder created."""
    path = cache_dir().joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
