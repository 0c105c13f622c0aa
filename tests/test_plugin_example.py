"""The plugin tutorial's example package (``docs/examples/plugin_example``), in process.

``tests/test_docs_tutorials.py`` installs it with pip and runs the tutorial's
commands; here its maths is checked against scikit-learn and its claim (the
federation's pooled centroids score exactly what the centralized baseline
scores) on a run, with the package declared the way ``test_plugin_discovery``
declares a third-party one: a ``.dist-info`` with the entry points its
``pyproject.toml`` declares.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

import flowerbed
from flowerbed.core import plugins, registry
from flowerbed.core.scenario import scenario_model

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "plugin_example"
PACKAGE = "flowerbed_example_plugin"
COMPONENTS = (("dataset", "circle_blobs"), ("model", "tanh_mlp"), ("learner", "centroids"),
              ("strategy", "pooled_centroids"))


def _forget() -> None:
    plugins.clear_caches()
    scenario_model.cache_clear()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The example declared as an installed distribution; forgotten afterwards."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"]["flowerbed.plugins"]
    info = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[flowerbed.plugins]\n{lines}")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    _forget()
    yield entry_points
    for kind, name in COMPONENTS:
        if name in registry.names(kind):
            registry.unregister(kind, name)
    for module in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[module]
    _forget()


def test_the_entry_point_names_the_package_and_discovery_finds_all_four(installed):
    assert installed == {"example": PACKAGE}
    index = plugins.component_index()
    for kind, name in COMPONENTS:
        assert index[(kind, name)].startswith(PACKAGE + "."), (kind, name)
        assert plugins.component_source(kind, name) == "flowerbed-example-plugin"


def test_centroids_and_predictions_match_scikit_learn(installed):
    from flowerbed_example_plugin import algorithm
    from sklearn.neighbors import NearestCentroid

    gen = np.random.default_rng(0)
    x, y = gen.normal(size=(60, 3)), np.arange(60) % 4
    sums, counts = algorithm.class_sums(x, y, 4)
    centres = algorithm.centroids(sums, counts)
    reference = NearestCentroid().fit(x, y)
    np.testing.assert_allclose(centres, reference.centroids_, atol=1e-12)
    probe = gen.normal(size=(40, 3))
    np.testing.assert_array_equal(algorithm.predict(centres, probe), reference.predict(probe))
    # Sums of two halves give the pooled centroids.
    a, b = algorithm.class_sums(x[:25], y[:25], 4), algorithm.class_sums(x[25:], y[25:], 4)
    np.testing.assert_allclose(algorithm.centroids(a[0] + b[0], a[1] + b[1]), centres)
    # Full shrinkage is the overall mean for every class.
    np.testing.assert_allclose(algorithm.centroids(sums, counts, 1.0), np.tile(x.mean(0), (4, 1)))


def test_the_federation_scores_exactly_what_the_centralized_baseline_scores(installed):
    scenario = yaml.safe_load((EXAMPLE / "scenarios" / "centroids.yaml").read_text())
    result = flowerbed.run(scenario, save=False)
    federated, pooled = result.final("federated"), result.final("centralized")
    assert federated["local_test/accuracy"] == pytest.approx(pooled["local_test/accuracy"],
                                                             abs=1e-12)
    assert federated["test/accuracy"] > 1 / 6 + 0.3  # six classes: far above chance
    assert result.final("local_only")["local_test/accuracy"] < federated["local_test/accuracy"]
