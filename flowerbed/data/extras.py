"""Register datasets that need an optional package, or leave an install hint instead."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TypeVar

from flowerbed.core.registry import Params, register, register_hint

T = TypeVar("T")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def register_with_extra(
    name: str, params: type[Params], module: str, package: str
) -> Callable[[T], T]:
    """Register dataset ``name`` when ``module`` is installed, else record a pip hint.

    The loader itself still imports ``module`` lazily (see
    :func:`flowerbed.data.base.require`), so importing this package stays cheap.
    """
    if installed(module):
        return register("dataset", name, params=params)

    def hint_only(target: T) -> T:
        register_hint("dataset", name, f"needs {package}: pip install {package}")
        return target

    return hint_only
