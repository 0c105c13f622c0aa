"""The ``tensorboard`` sink: TensorBoard event files in ``<run_dir>/tensorboard/``.

Written through ``torch.utils.tensorboard.SummaryWriter`` (it needs the
``tensorboard`` package, in the ``tracking`` extra). Each metrics row becomes
one scalar per metric, tagged as ``metrics.jsonl`` names it
(``<phase>/<split>/<metric>``, so TensorBoard groups the charts by phase),
at step = round; flushed after every row, so a killed run's events are kept.
A resumed run writes to the same folder with ``purge_step`` at the round after
its checkpoint, so TensorBoard shows one log in which the rounds recomputed
after the checkpoint appear once.
"""

from __future__ import annotations

from typing import Any, ClassVar

from flowerbed.core.records import TENSORBOARD_DIR
from flowerbed.core.registry import register
from flowerbed.core.sinks import SinkContext, SinkParams, metric_values, require


class TensorBoardParams(SinkParams):
    """The TensorBoard sink has no parameters: its files go to ``<run_dir>/tensorboard/``."""

    packages: ClassVar[tuple[str, ...]] = ("tensorboard",)


@register("sink", "tensorboard", params=TensorBoardParams)
class TensorBoardSink:
    """TensorBoard event files in the run folder's tensorboard/: a scalar per metric per round.

    ``tensorboard --logdir runs/quickstart`` shows every run of the quickstart
    scenario, one chart per ``<phase>/<split>/<metric>``.
    """

    def __init__(self, params: TensorBoardParams, ctx: SinkContext) -> None:
        del params
        require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = ctx.run_dir / TENSORBOARD_DIR
        purge = None if ctx.resumed_round is None else ctx.resumed_round + 1
        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge)

    def row(self, row: dict[str, Any]) -> None:
        """Add one scalar per metric of a metrics row, at step = its round."""
        values = metric_values(row)
        if not values:
            return
        step = int(row["round"])
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self, summary: dict[str, Any] | None) -> None:
        """Flush and close the event file (the final metrics are the last rounds' scalars)."""
        del summary
        self.writer.close()
