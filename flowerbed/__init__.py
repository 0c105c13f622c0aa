"""flowerbed: federated-learning simulation platform built around Flower."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from flowerbed.platform.results import Result


def run(scenario: Any, overrides: list[str] | None = None, **kwargs: Any) -> Result:
    """Run a scenario (path, mapping or validated model).

    See :func:`flowerbed.platform.runner.run` for the parameters and errors:
    bad input (an invalid scenario, an unusable scenario file or output
    folder) raises ``ScenarioError`` before any work, with a message that
    names every problem.
    """
    from flowerbed.core.scenario import ScenarioError
    from flowerbed.platform.runner import run as _run

    try:
        return _run(scenario, overrides, **kwargs)
    except ScenarioError as exc:
        # The message names the problem; flowerbed's own frames would only bury it.
        raise exc.with_traceback(None) from None


__all__ = ["__version__", "run"]
