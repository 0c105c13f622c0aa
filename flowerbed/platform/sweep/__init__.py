"""Sweeps: expand a scenario's ``sweep:`` block into validated points and run them.

A sweep block maps dotted scenario keys to value lists::

    sweep:
      name: quickstart_alpha          # folder under the output dir (default: <scenario>-sweep)
      partition.alpha: [0.1, 1.0]     # bare keys are grid axes (cartesian product)
      grid: {learner.lr: [0.01, 0.1]} # the same, spelt out
      zip:                            # each group varies its keys together, position-wise
        - {rounds: [2, 4], learner.local_epochs: [2, 1]}
      seeds: [0, 1]                   # the root seed, always the innermost axis

Planning (:func:`expand`) is a pure function: every point is resolved and
validated before anything runs. Running (:func:`run_sweep`) writes each point
to ``<output_dir>/<sweep>/<index>-<digest>/`` with the layout of a plain run,
skips points whose ``summary.json`` carries the same digest, records failures
without stopping, and runs all simulation points that can share one Flower
simulation (same engine, clients and resources) in a single Ray start-up.
"""

from flowerbed.platform.sweep.cli import add_commands, cmd_sweep, plan_table, result_table
from flowerbed.platform.sweep.execute import (
    GROUP_RUNNERS,
    PointResult,
    RunPoint,
    SweepResult,
    group_points,
    run_inline_group,
    run_simulation_group,
    run_sweep,
)
from flowerbed.platform.sweep.folders import (
    ATTEMPT_FILES,
    ERROR_FILE,
    OVERRIDES_FILE,
    PLAN_FILE,
    PREVIOUS_DIR,
    SOURCE_FILE,
    STATUS_FILE,
    archive_attempt,
    point_state,
    sweep_folder_of,
    write_plan,
)
from flowerbed.platform.sweep.plan import (
    MAX_PROBLEMS,
    SweepPlan,
    SweepPoint,
    assign,
    expand,
    format_value,
    label,
    load_plan,
)
from flowerbed.platform.sweep.progress import SweepProgress
from flowerbed.platform.sweep.schema import RESERVED, Axis, SweepSpec, combinations, parse_sweep

__all__ = [
    "ATTEMPT_FILES",
    "ERROR_FILE",
    "GROUP_RUNNERS",
    "MAX_PROBLEMS",
    "OVERRIDES_FILE",
    "PLAN_FILE",
    "PREVIOUS_DIR",
    "RESERVED",
    "SOURCE_FILE",
    "STATUS_FILE",
    "Axis",
    "PointResult",
    "RunPoint",
    "SweepPlan",
    "SweepPoint",
    "SweepProgress",
    "SweepResult",
    "SweepSpec",
    "add_commands",
    "archive_attempt",
    "assign",
    "cmd_sweep",
    "combinations",
    "expand",
    "format_value",
    "group_points",
    "label",
    "load_plan",
    "parse_sweep",
    "plan_table",
    "point_state",
    "result_table",
    "run_inline_group",
    "run_simulation_group",
    "run_sweep",
    "sweep_folder_of",
    "write_plan",
]
