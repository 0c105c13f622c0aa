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
    OVERRIDES_FILE,
    PLAN_FILE,
    REPORT_DIR,
    SKIP_DIRS,
    STATUS_FILE,
    RunInfo,
    find_runs,
    load_run,
    local_client_rows,
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
    "OVERRIDES_FILE",
    "PLAN_FILE",
    "REPORT_DIR",
    "SKIP_DIRS",
    "STATUS_FILE",
    "Command",
    "Report",
    "RunInfo",
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
    "find_runs",
    "group_label",
    "group_value",
    "load_run",
    "local_client_rows",
    "lookup",
    "markdown",
    "markdown_table",
    "mean_std",
    "metric_key",
    "phase_curves",
    "plot_bars",
    "plot_clients",
    "plot_curves",
    "plot_phases",
    "plot_run",
    "rich_table",
    "round_columns",
    "run_rows",
    "summary_rows",
    "write_client_plots",
    "write_client_tables",
    "write_csv",
    "write_phase_plots",
    "write_plots",
    "write_report",
]
