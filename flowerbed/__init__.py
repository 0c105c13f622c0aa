"""flowerbed: federated-learning simulation platform built around Flower."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from flowerbed.platform.results import Result


def run(scenario: Any, overrides: list[str] | None = None, **kwargs: Any) -> Result:
    """Run a scenario (path, mapping or validated model).

    See :func:`flowerbed.platform.runner.run` for the parameters.
    """
    from flowerbed.platform.runner import run as _run

    return _run(scenario, overrides, **kwargs)


__all__ = ["__version__", "run"]
