"""Reports: final-metric tables and PNG plots from run folders and sweeps.

``flowerbed report PATH`` takes one run folder (it holds ``summary.json``) or
a folder of runs (a sweep, or ``runs/<scenario>/``) and writes, under
``PATH/report/``:

- ``runs.csv``: final metrics of every run and source (federated, baselines);
- ``summary.csv``: mean and sample std over the runs of each group (by
  default the swept keys other than ``seed``, so: mean ± std over seeds);
- ``report.md``: both tables in markdown, failed runs, the plots;
- ``curves_<metric>.png``: the metric per round (per run, or a group's mean
  with a ±std band), and ``runs/<run>_<metric>.png`` for each run;
- ``phases_<split>_<metric>.png``: every other quantity some phase logged
  over two rounds or more, a line per phase (``runs/<run>_phases_...`` in a sweep);
- ``bars_<metric>.png``: final metric per group and source, with std bars;
- for a local-task run (strategy ``local``): ``clients.csv``, a per-client
  table in ``report.md`` and ``clients_<metric>.png`` (a bar per client, the
  mean over clients and the centralized value); ``runs/<run>_clients...`` in a sweep.

With ``--compare FIELD=A,B`` (or ``--compare FIELD --reference X``) the report
pairs runs that differ only in that scenario field and writes
``comparisons.csv``, ``comparisons.json`` and ``comparisons_<metric>.png``
instead (:mod:`.compare`; the statistics are
:mod:`flowerbed.algorithms.paired_stats`).

A run killed before its ``summary.json`` is reported from ``metrics.jsonl``
at its last evaluated round, its source marked ``(partial: round r of R)``.
The printed summary (:mod:`.summary_table`, also ``flowerbed run``'s) never
cuts a number: a table wider than the terminal is transposed, and
``--format json|csv|markdown`` prints it at full precision.
"""

from flowerbed.platform.report.build import (
    Report,
    build_report,
    markdown,
    write_client_plots,
    write_client_tables,
    write_phase_plots,
    write_plots,
    write_report,
)
from flowerbed.platform.report.cli import Command, add_commands, cmd_report, rich_table
from flowerbed.platform.report.plots import (
    CURVE_PREFIXES,
    curve,
    phase_curves,
    plot_bars,
    plot_clients,
    plot_curves,
    plot_phases,
    plot_run,
    round_columns,
)
from flowerbed.platform.report.runs import (
    ERROR_FILE,
    FEDERATED_PHASES,
    OVERRIDES_FILE,
    PLAN_FILE,
    REPORT_DIR,
    SKIP_DIRS,
    STATUS_FILE,
    RunInfo,
    find_runs,
    latest_metrics,
    load_run,
    local_client_rows,
    metrics_round,
    metrics_rows,
)
from flowerbed.platform.report.summary_table import (
    FORMATS,
    SummaryGrid,
    direction,
    format_number,
    render,
    report_grid,
    run_grid,
)
from flowerbed.platform.report.tables import (
    client_lines,
    client_markdown,
    client_means,
    client_metrics,
    client_table,
    default_group_by,
    default_metrics,
    group_label,
    group_value,
    lookup,
    markdown_table,
    mean_std,
    metric_key,
    run_rows,
    summary_rows,
    write_csv,
)

__all__ = [
    "CURVE_PREFIXES",
    "ERROR_FILE",
    "FEDERATED_PHASES",
    "FORMATS",
    "OVERRIDES_FILE",
    "PLAN_FILE",
    "REPORT_DIR",
    "SKIP_DIRS",
    "STATUS_FILE",
    "Command",
    "Report",
    "RunInfo",
    "SummaryGrid",
    "add_commands",
    "build_report",
    "client_lines",
    "client_markdown",
    "client_means",
    "client_metrics",
    "client_table",
    "cmd_report",
    "curve",
    "default_group_by",
    "default_metrics",
    "direction",
    "find_runs",
    "format_number",
    "group_label",
    "group_value",
    "latest_metrics",
    "load_run",
    "local_client_rows",
    "lookup",
    "markdown",
    "markdown_table",
    "mean_std",
    "metric_key",
    "metrics_round",
    "metrics_rows",
    "phase_curves",
    "plot_bars",
    "plot_clients",
    "plot_curves",
    "plot_phases",
    "plot_run",
    "render",
    "report_grid",
    "rich_table",
    "round_columns",
    "run_grid",
    "run_rows",
    "summary_rows",
    "write_client_plots",
    "write_client_tables",
    "write_csv",
    "write_phase_plots",
    "write_plots",
    "write_report",
]
