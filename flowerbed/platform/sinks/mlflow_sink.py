"""The ``mlflow`` sink: one MLflow run per flowerbed run, in a local store by default.

Through ``MlflowClient`` (never MLflow's global active run, so sweep points
and threads cannot mix runs up), from ``mlflow-skinny`` (the ``tracking``
extra; the full ``mlflow`` package works the same). The run holds the
resolved scenario flattened into params (``learner.lr``, ``partition.alpha``),
each metrics row as metrics at step = round, and the summary's final metrics
as ``final/<source>/<split>/<metric>``. A single run goes to the experiment
named after its scenario; every point of a sweep to the one named after the
sweep.

A run resumed with ``--resume`` continues its own MLflow run (found by the
``flowerbed.run_dir`` tag, set back to ``RUNNING``, tagged
``flowerbed.resumed_from_round``), so a killed and resumed run is one MLflow
run that ends ``FINISHED``; the rounds computed again after the checkpoint
are logged again at the same steps (MLflow keeps every value of a step; the
later one is the resumed run's).

``mlflow_uri`` is a folder (a local file store, which MLflow 3 keeps only on
request: the sink allows it while it opens the store) or any MLflow tracking
URI (``sqlite:///…``, ``http://…``), passed on as given.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from flowerbed.core.registry import register
from flowerbed.core.sinks import (
    SinkContext,
    SinkParams,
    final_metrics,
    metric_values,
    require,
)

#: MLflow's own limits (``mlflow.utils.validation``) on one ``log_batch`` and a param value.
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_PARAM_LENGTH = 6000
#: MLflow refuses a plain-folder store unless this is set (its file store is frozen).
ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


class MlflowParams(SinkParams):
    """Where the MLflow runs go."""

    packages: ClassVar[tuple[str, ...]] = ("mlflow",)

    mlflow_uri: str = Field(
        "runs/mlruns",
        min_length=1,
        description="tracking store: a folder (a local file store, relative to the current "
        "directory) or an MLflow tracking URI (sqlite:///..., http://...)",
    )


def tracking_uri(given: str) -> str:
    """A folder as a ``file://`` URI (absolute); any other tracking URI as given.

    Examples
    --------
    >>> tracking_uri("sqlite:///mlflow.db")
    'sqlite:///mlflow.db'
    >>> tracking_uri("runs/mlruns") == (Path.cwd() / "runs" / "mlruns").as_uri()
    True
    """
    if "://" in given or given.startswith(("sqlite:", "databricks", "file:")):
        return given
    return Path(given).expanduser().resolve().as_uri()


@contextlib.contextmanager
def file_store_allowed(uri: str) -> Iterator[None]:
    """Let MLflow open a ``file://`` store inside the block (it caches the store by URI)."""
    if not uri.startswith("file:") or os.environ.get(ALLOW_FILE_STORE) is not None:
        yield
        return
    os.environ[ALLOW_FILE_STORE] = "true"
    try:
        yield
    finally:
        os.environ.pop(ALLOW_FILE_STORE, None)


def flat_params(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings as dotted keys; lists and scalars as compact JSON, strings as they are.

    Examples
    --------
    >>> flat_params({"learner": {"name": "sgd", "lr": 0.1}, "baselines": [{"name": "c"}]})
    {'learner.name': 'sgd', 'learner.lr': '0.1', 'baselines': '[{"name":"c"}]'}
    """
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            flat[name] = text[:MAX_PARAM_LENGTH]
    return flat


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@register("sink", "mlflow", params=MlflowParams)
class MlflowSink:
    """One MLflow run per run (a sweep: per point, one experiment): params, metrics, summary."""

    def __init__(self, params: MlflowParams, ctx: SinkContext) -> None:
        require("mlflow", "mlflow")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri(params.mlflow_uri)
        self.experiment = ctx.sweep or ctx.scenario.name
        with file_store_allowed(self.uri):
            self.client = MlflowClient(tracking_uri=self.uri)
            experiment_id = self._experiment_id(self.experiment)
        tags = {
            "flowerbed.scenario": ctx.scenario.name,
            "flowerbed.digest": ctx.scenario.digest(),
            "flowerbed.run_dir": str(ctx.run_dir.resolve()),
        }
        if ctx.sweep is not None:
            tags["flowerbed.sweep"] = ctx.sweep
        self.interrupted = False
        resumed = ctx.resumed_round is not None
        previous = self._previous_run(experiment_id, tags) if resumed else None
        if previous is not None:
            self.run_id: str = previous
            self.client.update_run(self.run_id, status="RUNNING")
            self.client.set_tag(self.run_id, "flowerbed.resumed_from_round", ctx.resumed_round)
            return
        run = self.client.create_run(experiment_id, run_name=ctx.run_dir.name, tags=tags)
        self.run_id = run.info.run_id
        params_ = [Param(k, v) for k, v in flat_params(ctx.scenario.to_dict()).items()]
        for batch in _chunks(params_, MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=batch)

    def _previous_run(self, experiment_id: str, tags: dict[str, str]) -> str | None:
        """The MLflow run this run folder started before it was killed (newest first)."""
        folder = tags["flowerbed.run_dir"].replace("'", "\\'")
        found = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`flowerbed.run_dir` = '{folder}'",
            order_by=["attributes.start_time DESC"], max_results=1,
        )
        return str(found[0].info.run_id) if found else None

    def _experiment_id(self, name: str) -> str:
        """The experiment called ``name``, created if missing (a concurrent creator wins)."""
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except MlflowException:
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for batch in _chunks(metrics, MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch)

    def row(self, row: dict[str, Any]) -> None:
        """Log a metrics row's values at step = its round; note an interruption."""
        if row.get("event") == "interrupted":
            self.interrupted = True
        values = metric_values(row)
        if values:
            self._log(values, int(row["round"]))

    def close(self, summary: dict[str, Any] | None) -> None:
        """Log the summary's final metrics and end the run: finished, failed or killed."""
        if summary is not None:
            final = {f"final/{k}": v for k, v in final_metrics(summary).items()}
            if "wall_time_s" in summary:
                final["wall_time_s"] = float(summary["wall_time_s"])
            self._log(final, int(summary.get("rounds", 0)))
        status = "FINISHED" if summary is not None else "KILLED" if self.interrupted else "FAILED"
        self.client.set_terminated(self.run_id, status=status)
