"""Validating a scenario, listing components and ``--help`` import no heavy library.

Building the scenario schema imports every plugin module, so each must keep
torch, scikit-learn, scipy, Ray, Flower and the dataset libraries out of its
top level (they are imported by the functions that use them). Each check runs
in a fresh interpreter, where ``sys.modules`` shows what the action imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_scenario

import flowerbed
from flowerbed.core import registry

ROOT = Path(__file__).resolve().parents[1]

#: Top-level packages none of the light actions may import.
HEAVY = (
    "torch", "torchvision", "sklearn", "scipy", "pandas", "pyarrow", "statsmodels", "skimage",
    "open_clip", "matplotlib", "flwr", "flwr_datasets", "datasets", "ray", "transformers",
    "tensorboard", "mlflow",
)  # fmt: skip

#: Runs one action, then prints which heavy packages got imported and by whom.
_CHILD = r"""
import contextlib, io, json, os, sys, traceback

heavy = set(sys.argv[2].split(","))
importer = {}


class _Watch:
    # Records where each heavy package was asked for, until it is really imported
    # (an optional-extra probe asks without importing; the real import asks last).
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in heavy and top not in sys.modules:
            marker = os.sep + "flowerbed" + os.sep
            frames = [f for f in traceback.extract_stack() if marker in f.filename]
            importer[top] = [f"{f.filename}:{f.lineno}: {f.line}" for f in frames[-4:]]
        return None


sys.meta_path.insert(0, _Watch())
action = sys.argv[1]
with contextlib.redirect_stdout(io.StringIO()):
    if action == "schema":
        from flowerbed.core.plugins import load_plugins
        from flowerbed.core.scenario import load_scenario, scenario_model

        load_scenario("scenarios/quickstart.yaml")
        load_plugins()
        scenario_model()
    else:
        from flowerbed.platform.cli import main

        argv = {"list": ["list"], "validate": ["validate", "scenarios/quickstart.yaml"],
                "help": ["--help"]}[action]
        try:
            status = main(argv)
        except SystemExit as exc:  # --help exits
            status = exc.code
        assert status == 0, status
loaded = sorted(top for top in heavy if top in sys.modules)
print(json.dumps({top: importer.get(top, ["(not seen by the watch)"]) for top in loaded}))
"""


def _heavy_imports(action: str) -> dict[str, list[str]]:
    """Heavy package -> innermost flowerbed frames of its import, for one fresh action."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, action, ",".join(HEAVY)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    found: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def _explain(found: dict[str, list[str]]) -> str:
    lines = []
    for top, frames in found.items():
        lines.append(f"{top} imported via:")
        lines += [f"    {f}" for f in frames]
    return "\n".join(lines)


@pytest.mark.parametrize("action", ["schema", "validate", "list", "help"])
def test_light_action_imports_no_heavy_library(action: str) -> None:
    found = _heavy_imports(action)
    assert not found, f"`{action}` imported heavy libraries:\n{_explain(found)}"


def test_tiny_scenario_still_trains_and_scores() -> None:
    """Torch, Flower's FedAvg and scikit-learn's data load when the run needs them."""
    result = flowerbed.run(tiny_scenario(), save=False)
    for source in ("federated", "centralized"):
        metrics = result.final(source)
        assert 0.3 < metrics["test/accuracy"] <= 1.0, (source, metrics)
        assert np.isfinite(metrics["test/loss"])


@pytest.mark.parametrize(
    ("model", "width"),
    [
        ({"name": "mlp", "hidden": [8]}, 6),
        ({"name": "linear"}, 6),
        ({"name": "early_exit_mlp", "hidden": [8, 8, 8], "exits": [1, 2]}, 6),
        ({"name": "transformer", "vocab_size": 6, "d_model": 8, "pos_emb": "hipe"}, 6),
    ],
)
def test_models_whose_networks_moved_still_build_and_run(model: dict, width: int) -> None:
    spec = registry.get("model", model["name"]).params(**model)
    net = registry.build("model", spec, in_features=width, out_features=3)
    assert isinstance(net, torch.nn.Module)
    x = torch.randint(0, 6, (5, width)).float()
    assert net(x).shape == (5, 3)
