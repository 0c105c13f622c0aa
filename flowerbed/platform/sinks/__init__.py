"""Result sinks besides ``metrics.jsonl``: TensorBoard event files and MLflow runs.

One sink per module, each registered under kind ``sink`` (``flowerbed list
sink``); the protocol and the helpers they share are in
:mod:`flowerbed.core.sinks`. Their packages (the ``tracking`` extra) are
imported only when a run opens the sink.
"""
