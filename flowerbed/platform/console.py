"""What reaches the terminal during a run: Flower quiet, no colour codes in pipes, warnings once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("flowerbed")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: what a batch scheduler sends to end a job (or ``kill PID``).

    A ``KeyboardInterrupt``, so a run stops as on Ctrl-C: finished rounds
    kept, an ``interrupted`` row written, child processes ended. The CLI
    exits with 143 (128 + SIGTERM) instead of Ctrl-C's 130.
    """

    signal_name = "SIGTERM"


def _raise_terminated(signum: int, frame: Any) -> None:
    del signum, frame
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` while the block runs (main thread only).

    Python's default for SIGTERM is to die on the spot: no row, no message,
    no cleanup of worker processes. Signal handlers can only be set from
    the main thread; elsewhere (a run started from a thread) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _DropRunSimulationBanner(logging.Filter):
    """Drops Flower's ``run_simulation`` deprecation banner, from the console and run.log.

    Flower 1.42 deprecates ``run_simulation`` in favour of ``flwr run``
    against a simulation SuperLink, which loads a packaged app in another
    process: not a drop-in for an engine that hands Flower live Python
    objects and reads results back in-process. flowerbed keeps it knowingly
    (``flwr run`` is its deployment engine), so the banner, logged on every
    start, gives users nothing to act on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the banner, True for every other record."""
        if not str(record.msg).lstrip().startswith("DEPRECATED FEATURE"):
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not any("run_simulation" in str(a) for a in args)


BANNER_FILTER = _DropRunSimulationBanner()


@contextlib.contextmanager
def quiet_flower() -> Iterator[None]:
    """Keep Flower's log lines out of the terminal (they all go to run.log).

    Flower's console shows nothing unless flowerbed logs at DEBUG (``-v``),
    and then Flower's own level; it writes plain text, without colour codes,
    when its stream is not a terminal. Client failures still reach the
    terminal through flowerbed's own one-line warnings, named by partition id.
    """
    flwr_log = logging.getLogger("flwr")
    verbose = log.isEnabledFor(logging.DEBUG)
    console = [
        h
        for h in flwr_log.handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    saved = [(h.level, getattr(h, "colored", None)) for h in console]
    for h in console:
        if not verbose:
            h.setLevel(logging.CRITICAL + 1)
        if hasattr(h, "colored"):  # Flower's ConsoleHandler
            setattr(h, "colored", _is_terminal(h.stream))  # noqa: B010 - not a StreamHandler field
    added = BANNER_FILTER not in flwr_log.filters  # nested blocks: the outermost removes it
    flwr_log.addFilter(BANNER_FILTER)
    # Ray warns on every start that a future release changes a GPU env default.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        yield
    finally:
        if added:
            flwr_log.removeFilter(BANNER_FILTER)
        for h, (level, colored) in zip(console, saved, strict=True):
            h.setLevel(level)
            if colored is not None:
                setattr(h, "colored", colored)  # noqa: B010


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def warnings_once() -> Iterator[None]:
    """Python warnings raised during a run go to the log; each source reaches the terminal once.

    Libraries warn from loops with a changing message (flwr-datasets'
    Dirichlet partitioner on every resampling try), which Python's
    once-per-message rule repeats. Here the first warning from each
    (category, file, line) is a one-line WARNING; repeats go to run.log only.
    Warning filters (``-W``, pytest's) apply as usual.
    """
    seen: set[tuple[Any, ...]] = set()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        del file, line
        key = (category, filename, lineno)
        level = logging.INFO if key in seen else logging.WARNING
        seen.add(key)
        log.log(level, "%s: %s", category.__name__, " ".join(str(message).split()))

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield
