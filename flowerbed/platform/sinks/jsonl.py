"""The ``jsonl`` sink: ``metrics.jsonl``, which every run writes."""

from __future__ import annotations

from flowerbed.core.registry import register
from flowerbed.core.sinks import SinkContext, SinkParams


@register("sink", "jsonl", params=SinkParams)
def jsonl(params: SinkParams, ctx: SinkContext) -> None:
    """metrics.jsonl in the run folder, a row per round and phase (always on)."""
    del params, ctx  # the recorder writes metrics.jsonl itself, sinks or not
