"""Live progress of a run: what it is doing now, rounds, replies, latest metrics, and timing.

Three small pieces, usable apart:

* :func:`activity` tells every live display what the run is doing right now
  ("starting Ray", "waiting for 4 replies ..."); engines and the server call
  it at each step, so a long wait never shows a frozen screen;
* :class:`RunClock` measures wall time from a given start (the process start
  for the CLI) and the seconds spent in each named phase, for ``summary.json``;
* :class:`LiveProgress`, the rich display ``flowerbed run`` shows on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from flowerbed.core import keys

Listener = Callable[[str], None]
#: Fallback for :func:`process_started`: the first flowerbed import of this process.
_IMPORTED = time.time()
_LISTENERS: list[Listener] = []
_LOCK = threading.Lock()


def activity(text: str) -> None:
    """Tell the live displays what the run is doing now (a no-op when none is shown)."""
    with _LOCK:
        listeners = list(_LISTENERS)
    for listener in listeners:
        listener(text)


@contextlib.contextmanager
def activity_listener(listener: Listener) -> Iterator[None]:
    """Call ``listener(text)`` for every :func:`activity` inside the block."""
    with _LOCK:
        _LISTENERS.append(listener)
    try:
        yield
    finally:
        with _LOCK:
            _LISTENERS.remove(listener)


def waiting_text(expected: int, received: int, message_type: str, group: str = "") -> str:
    """``waiting for 4 replies (train.default, round 2): 1 in``: one phase's wait, as shown.

    The setup message is the clients' first: its wait reads as connecting them.
    """
    if message_type == keys.SETUP:
        return f"connecting clients: {received} of {expected} answered the setup message"
    where = f", round {group}" if group else ""
    return f"waiting for {expected} replies ({message_type}{where}): {received} in"


def process_started() -> float:
    """When this process started, in epoch seconds (interpreter start-up and imports included).

    On Linux, from ``/proc``: the process's start in clock ticks since boot
    against the uptime, both to the hundredth of a second (psutil's
    ``create_time`` adds the boot time, which ``/proc/stat`` rounds to the
    second). Elsewhere psutil, when installed; failing both, the time of
    this module's import.
    """
    try:
        with open("/proc/self/stat") as fh:
            # the command name (field 2) may hold spaces: count the fields after its ")"
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil, or it cannot tell: use the import time
        return _IMPORTED


class RunClock:
    """Wall time since ``started`` and the seconds spent in each named phase.

    Parameters
    ----------
    started
        Epoch seconds the wall time counts from (default: now).

    Examples
    --------
    >>> clock = RunClock()
    >>> with clock.phase("data"):
    ...     pass
    >>> sorted(clock.report())
    ['data', 'total']
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else started
        self.phases: dict[str, float] = {}
        #: Set by the server when it times its phases on this clock (in-process engines).
        self.shared_with_server = False

    @contextlib.contextmanager
    def phase(self, name: str, doing: str | None = None) -> Iterator[None]:
        """Add the block's duration to phase ``name``; announce ``doing`` to live displays."""
        if doing:
            activity(doing)
        begin = time.time()
        try:
            yield
        finally:
            self.add(name, time.time() - begin)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name``."""
        self.phases[name] = round(self.phases.get(name, 0.0) + max(0.0, seconds), 3)

    def elapsed(self) -> float:
        """Seconds since ``started``."""
        return round(time.time() - self.started, 3)

    def report(self) -> dict[str, float]:
        """Every phase and ``total``, the wall time so far (the ``phases_s`` of a summary)."""
        return {**self.phases, "total": self.elapsed()}


# The clock of each running run, by recorder: the server finds it there, so the
# engines' ``(scenario, recorder)`` signature stays as it is. Keyed by id because
# a recorder (a dataclass) is not hashable; entries live only while the run does.
_CLOCKS: dict[int, RunClock] = {}


@contextlib.contextmanager
def timed_by(recorder: object, clock: RunClock) -> Iterator[None]:
    """Make :func:`clock_of` return ``clock`` for ``recorder`` inside the block."""
    _CLOCKS[id(recorder)] = clock
    try:
        yield
    finally:
        _CLOCKS.pop(id(recorder), None)


def clock_of(recorder: object) -> RunClock | None:
    """The clock the caller runs ``recorder``'s run on, if any."""
    return _CLOCKS.get(id(recorder))


#: Plain mode: seconds before an activity with the same stem is printed again.
PLAIN_REPEAT_S = 30.0


def _number(value: Any) -> str:
    """``0.8125`` as ``0.8125``; anything that is not a number as it is."""
    return f"{value:.4f}" if isinstance(value, (int, float)) else str(value)


class LiveProgress:
    """A rich table refreshed from the recorder's rows (``Recorder.listeners``) and activities.

    Redrawn four times a second, so the time spent in the current activity
    keeps counting even while nothing else happens. On a console that is not a
    terminal (output sent to a log file, CI) a live table draws nothing until
    the end, so there it prints one plain line per change of activity, reply
    count and shown metric instead, and the table once at the end.
    """

    def __init__(
        self,
        scenario_name: str,
        rounds: int,
        shown: tuple[str, ...] = ("accuracy", "loss"),
        console: Console | None = None,
    ) -> None:
        self.scenario_name = scenario_name
        self.shown = shown
        self.rounds = rounds
        self.console = console or Console(stderr=True)
        self.round = 0
        self.phase = "starting"
        self.replies: dict[str, Any] = {}
        self.latest: dict[str, float] = {}
        self.failures = 0
        self.doing = "starting"
        self.started = self.doing_since = time.monotonic()
        # Rows can arrive twice (a deployment's rows are followed live, then
        # collected); each is counted once.
        self._seen: set[str] = set()
        self._listening: contextlib.ExitStack | None = None
        self.plain = not self.console.is_terminal
        self._last_line = ("", 0.0)
        self.live = Live(
            console=self.console,
            refresh_per_second=4,
            transient=False,
            get_renderable=self._render,
        )

    def __enter__(self) -> LiveProgress:
        self._listening = contextlib.ExitStack()
        self._listening.enter_context(activity_listener(self.set_activity))
        if not self.plain:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._listening is not None:
            self._listening.close()
            self._listening = None
        if self.plain:
            self.console.print(self._render())
            return
        self.live.refresh()
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def set_activity(self, text: str) -> None:
        """Show ``text`` as what the run is doing now (its timer restarts when it changes)."""
        if text != self.doing:
            now = time.monotonic()
            self.doing, self.doing_since = text, now
            self._line(text, now, every_s=PLAIN_REPEAT_S)

    def _line(self, text: str, now: float | None = None, every_s: float = 0.0) -> None:
        """Print ``[elapsed] text`` in plain mode.

        A line whose stem (the text before ``:``) repeats the last one's is
        printed only ``every_s`` seconds after it, so "waiting for 1000
        replies: k in" does not print a line per reply.
        """
        if not self.plain:
            return
        now = time.monotonic() if now is None else now
        stem = text.split(":", 1)[0]
        last_stem, last_at = self._last_line
        if stem == last_stem and now - last_at < every_s:
            return
        self._last_line = (stem, now)
        self.console.print(
            f"[{now - self.started:.0f} s] {text}", markup=False, highlight=False, soft_wrap=True
        )

    def __call__(self, row: dict[str, Any]) -> None:
        """Take one recorder row and refresh the display."""
        key = json.dumps(row, sort_keys=True, default=str)
        if key in self._seen:
            return
        self._seen.add(key)
        if "round" in row:
            self.round = max(self.round, int(row["round"]))
        if row.get("event") == "replies":
            self.phase = str(row["phase"])
            self.replies = {k: row[k] for k in ("ok", "failed", "missing")}
            self.failures += int(row["failed"]) + int(row["missing"])
            r = self.replies
            self._line(
                f"{self._round_text()} {self.phase}: replies {r['ok']} ok, "
                f"{r['failed']} failed, {r['missing']} missing"
            )
        elif "event" in row:
            self.phase = str(row["event"])
        else:
            self.phase = str(row.get("phase", self.phase))
            shown = {
                k: v
                for k, v in row.items()
                # a summary name is a bare metric or "split/metric"
                if k.count("/") == 2
                and (k.rsplit("/", 1)[1] in self.shown or k.split("/", 1)[1] in self.shown)
            }
            self.latest.update(shown)
            if shown:
                values = ", ".join(f"{k} {_number(v)}" for k, v in sorted(shown.items()))
                self._line(f"{self._round_text()}: {values}")
        if not self.plain:
            self.live.refresh()

    def _round_text(self) -> str:
        """``round 3/10``, or ``round 41 (beyond rounds: 1, ...)`` past the scenario's rounds.

        A comparison arm may run rounds of its own inside a shorter scenario
        (FQR's iterative FedAvg: 40 rounds inside ``rounds: 1``).
        """
        if self.round <= self.rounds:
            return f"round {self.round}/{self.rounds}"
        return f"round {self.round} (beyond rounds: {self.rounds}, a comparison arm's own)"

    def _render(self) -> Table:
        now = time.monotonic()
        table = Table(title=f"flowerbed · {self.scenario_name}", show_header=False, expand=False)
        table.add_column(style="bold cyan")
        table.add_column()
        table.add_row("now", f"{self.doing} ({now - self.doing_since:.0f} s)")
        table.add_row("elapsed", f"{now - self.started:.0f} s")
        table.add_row("round", self._round_text().removeprefix("round "))
        table.add_row("phase", self.phase)
        if self.replies:
            r = self.replies
            table.add_row(
                "replies", f"{r['ok']} ok · {r['failed']} failed · {r['missing']} missing"
            )
        table.add_row("failed/missing so far", str(self.failures))
        for key, value in sorted(self.latest.items())[:12]:
            table.add_row(key, f"{value:.4f}")
        return table
