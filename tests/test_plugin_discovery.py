"""Plugin discovery: the project's modules by reading source, others by entry point."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.core import plugins, registry
from flowerbed.core.scenario import scenario_model
from flowerbed.platform.cli import main

ROOT = Path(__file__).resolve().parents[1]

#: The hand-written list discovery replaced: every module in it must still be found.
OLD_PLUGIN_MODULES = (
    "flowerbed.data.sklearn_data",
    "flowerbed.data.partitioners",
    "flowerbed.methods.fqr.data",
    "flowerbed.data.feature_partitions",
    "flowerbed.data.domain_shift",
    "flowerbed.data.statsmodels_data",
    "flowerbed.data.image_data",
    "flowerbed.data.table_data",
    "flowerbed.data.har_data",
    "flowerbed.data.gaussian_mixture",
    "flowerbed.methods.self_distill.data",
    "flowerbed.methods.frontier.data",
    "flowerbed.methods.hipe.data",
    "flowerbed.models.models",
    "flowerbed.models.vlm_two_tower",
    "flowerbed.models.vlm_open_clip",
    "flowerbed.clients.torch_learner",
    "flowerbed.methods.self_distill.learner",
    "flowerbed.clients.fault_injection",
    "flowerbed.methods.fqr.learner",
    "flowerbed.methods.slot_align.learner",
    "flowerbed.methods.frontier.learner",
    "flowerbed.methods.compute_reduction.learner",
    "flowerbed.methods.hipe.model",
    "flowerbed.strategies.fedavg",
    "flowerbed.methods.fqr.strategy",
    "flowerbed.strategies.oneshot_average",
    "flowerbed.methods.slot_align.strategy",
    "flowerbed.methods.frontier.strategy",
    "flowerbed.platform.baselines",
    "flowerbed.data.fewshot",
    "flowerbed.methods.fedspa.learner",
    "flowerbed.methods.fedspa.strategy",
    "flowerbed.methods.compute_reduction.model",
    "flowerbed.methods.compute_reduction.learner_early_exit",
    "flowerbed.methods.infoatlas.data",
    "flowerbed.methods.infoatlas.learner",
    "flowerbed.methods.infoatlas.strategy",
)

#: The hand-written pretrain targets discovery replaced.
OLD_TARGET_MODULES = {
    "two_tower": "flowerbed.models.vlm_two_tower",
    "infoatlas": "flowerbed.methods.infoatlas.model",
}

PACKAGE = "fb_thirdparty_plugin"
DIST = "fb-thirdparty-plugin"

_INIT = '''
"""A third-party flowerbed plugin: two separable Gaussian blobs."""

import numpy as np

from flowerbed.core.registry import Params, register
from flowerbed.data.base import Dataset, DatasetMeta


class BlobParams(Params):
    n_train: int = 200
    n_test: int = 80
    dim: int = 4


def _draw(n, dim, gen):
    y = np.arange(n) % 2
    x = gen.standard_normal((n, dim)) + 3.0 * y[:, None]
    return x.astype(np.float32), y.astype(np.int64)


@register("dataset", "thirdparty_blobs", params=BlobParams)
def thirdparty_blobs(params, *, seed):
    """Two Gaussian blobs shipped by a third-party package."""
    gen = np.random.default_rng(seed)
    x_tr, y_tr = _draw(params.n_train, params.dim, gen)
    x_te, y_te = _draw(params.n_test, params.dim, gen)
    meta = DatasetMeta(
        name="thirdparty_blobs", task="classification", num_features=params.dim,
        num_classes=2, class_names=("low", "high"), source="fb-thirdparty-plugin",
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)
'''

# A submodule: found only by walking the package the entry point names.
_HALVES = '''
"""Contiguous shards, from a submodule of the third-party package."""

import numpy as np

from flowerbed.core.registry import register
from flowerbed.data.base import Partition


@register("partition", "thirdparty_halves")
def thirdparty_halves(params, data, num_clients, *, seed):
    """Contiguous shards of the training split (third-party)."""
    return Partition(list(np.array_split(np.arange(len(data.y_train)), num_clients)))
'''


def _dist_info(root: Path, dist: str, entry_points: str) -> None:
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[flowerbed.plugins]\n{entry_points}\n")


def _forget() -> None:
    plugins.clear_caches()
    scenario_model.cache_clear()  # its unions were built from the registry at the time


@pytest.fixture
def fresh() -> Iterator[None]:
    """Discovery, plugin loading and the scenario schema recomputed, before and after."""
    _forget()
    yield
    _forget()


@pytest.fixture
def thirdparty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> Iterator[Path]:
    """An installed third-party distribution declaring one plugin package."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(_INIT))
    (pkg / "halves.py").write_text(textwrap.dedent(_HALVES))
    _dist_info(tmp_path, DIST, f"thirdparty = {PACKAGE}")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for kind, name in (("dataset", "thirdparty_blobs"), ("partition", "thirdparty_halves")):
        if name in registry.names(kind):
            registry.unregister(kind, name)
    for module in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[module]


def _listing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    assert main(["list", "dataset"]) == 0
    return capsys.readouterr().out.splitlines()


def _row(lines: list[str], name: str) -> list[str]:
    """The cells of the table row whose name column is ``name``."""
    for line in lines:
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) > 1 and cells[1] == name:
            return cells
    raise AssertionError(f"no row for {name!r} in:\n" + "\n".join(lines))


def test_the_projects_own_modules_include_every_module_of_the_old_hand_list(fresh: None):
    found = plugins.plugin_modules()
    assert set(OLD_PLUGIN_MODULES) <= set(found)
    assert "flowerbed.core.registry" not in found  # defines register, registers nothing
    assert all(m.startswith("flowerbed.") for m in found)  # no entry point is installed here
    assert list(found) == sorted(found)


def test_pretrain_targets_include_the_old_ones_and_each_names_itself(fresh: None):
    import importlib

    from flowerbed.core import artefacts

    found = plugins.pretrain_targets()
    assert OLD_TARGET_MODULES.items() <= found.items()
    assert artefacts.target_modules() == found
    for name, module in found.items():  # read from source; importing must agree
        assert importlib.import_module(module).PRETRAIN_TARGET.name == name
    assert artefacts.target("two_tower").name == "two_tower"


def test_the_projects_components_come_from_flowerbed(fresh: None):
    assert plugins.component_source("dataset", "digits") == "flowerbed"
    assert plugins.component_source("strategy", "fedavg") == "flowerbed"
    assert plugins.component_index()[("learner", "sgd")] == "flowerbed.clients.torch_learner"
    assert plugins.component_source("dataset", "no_such_dataset") == plugins.UNKNOWN_SOURCE


def test_discovery_reads_the_plugin_without_importing_it(thirdparty: Path):
    index = plugins.component_index()
    assert index[("dataset", "thirdparty_blobs")] == PACKAGE
    assert index[("partition", "thirdparty_halves")] == f"{PACKAGE}.halves"
    assert PACKAGE not in sys.modules
    # The project's modules first (sorted), then the entry point's.
    found = plugins.plugin_modules()
    assert found[-2:] == (PACKAGE, f"{PACKAGE}.halves")
    assert list(found[:-2]) == sorted(found[:-2])


def test_list_shows_a_third_party_dataset_and_its_distribution(
    thirdparty: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    lines = _listing(capsys, monkeypatch)
    assert _row(lines, "thirdparty_blobs")[2:] == [
        DIST, "Two Gaussian blobs shipped by a third-party package.",
    ]
    assert _row(lines, "digits")[2] == "flowerbed"
    assert plugins.component_source("partition", "thirdparty_halves") == DIST


def test_a_scenario_runs_on_third_party_components(thirdparty: Path):
    scenario = tiny_scenario(
        name="thirdparty",
        num_clients=2,
        rounds=2,
        dataset={"name": "thirdparty_blobs"},
        partition={"name": "thirdparty_halves"},
        model={"name": "mlp", "hidden": [8]},
        learner={"name": "sgd", "lr": 0.1, "batch_size": 16, "local_epochs": 1},
        strategy={"name": "fedavg"},
        engine={"name": "inline"},
        baselines=[],
    )
    result = flowerbed.run(scenario, save=False)
    assert result.summary["scenario"] == "thirdparty"
    # Blobs three standard deviations apart per feature: far above chance.
    assert result.final("federated")["test/accuracy"] > 0.8


def test_a_bad_entry_point_warns_once_and_list_still_works(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    fresh: None,
):
    _dist_info(tmp_path, "fb-broken-plugin",
               "gone = fb_no_such_module\nnested = fb_no_such_package.plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="flowerbed.plugins"):
        lines = _listing(capsys, monkeypatch)
    assert _row(lines, "digits")[2] == "flowerbed"
    warnings = [r for r in caplog.records if r.name == "flowerbed.plugins"]
    assert len(warnings) == 2
    text = "\n".join(r.getMessage() for r in warnings)
    assert "fb_no_such_module" in text and "fb_no_such_package.plugin" in text
    assert "fb-broken-plugin" in text
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in warnings)


_CHILD = r"""
import importlib, json, sys, typing
from flowerbed.core import plugins, registry
order = list(plugins.plugin_modules())
if sys.argv[1] == "reversed":
    order.reverse()
for module in order:
    importlib.import_module(module)
union = registry.get("learner", "fedspa").params.model_fields["vlm"].annotation
names = sorted(m.model_fields["name"].default for m in typing.get_args(union))
print(json.dumps({"union": names, "vlm": registry.names("vlm")}))
"""


@pytest.mark.parametrize("order", ["discovered", "reversed"])
def test_import_order_does_not_change_the_vlm_union(order: str):
    """The FedSPA learner builds its ``vlm`` union at import; it must see every vlm."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, order], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["union"] == child["vlm"]
    assert {"two_tower", "open_clip", "synthetic_clip"} <= set(child["union"])


def test_discovery_memo_gives_what_parsing_gives_and_rereads_an_edited_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
):
    """The project's scan is kept between processes; a changed file is parsed again."""
    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path / "cache"))
    root = Path(flowerbed.__file__).parent
    parsed = list(plugins._scan_package(root, "flowerbed", plugins.PROJECT_SOURCE))
    cold = plugins.discover()
    plugins.clear_caches()
    warm = plugins.discover()
    assert (tmp_path / "cache" / "plugins").is_dir()
    assert warm == cold
    assert [m for m in parsed if m.module != "flowerbed.core.registry"] == list(warm.modules)

    pkg = tmp_path / "memo_pkg"
    pkg.mkdir()
    plugin = pkg / "mod.py"
    plugin.write_text('register("dataset", "memo_a")\n')
    memo = plugins._ScanMemo.load()
    first = list(plugins._scan_package(pkg, "memo_pkg", "x", memo))
    plugin.write_text('register("dataset", "memo_b")  # longer, so the size changes\n')
    second = list(plugins._scan_package(pkg, "memo_pkg", "x", memo))
    assert [m.registrations for m in first] == [(("dataset", "memo_a"),)]
    assert [m.registrations for m in second] == [(("dataset", "memo_b"),)]
