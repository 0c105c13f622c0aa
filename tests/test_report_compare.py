"""``flowerbed report DIR --compare``: pairing of fabricated run folders, numbers, files.

Run folders are fabricated (``scenario.resolved.yaml``, ``overrides.yaml`` and
``summary.json``, as a sweep writes them); the expected statistics are
computed here with scipy / statsmodels from the fabricated values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from flowerbed.platform.cli import main
from flowerbed.platform.report import find_runs
from flowerbed.platform.report.compare import CompareError, comparisons, pair_runs

pytest.importorskip("statsmodels")

ALPHAS = (0.1, 1.0)
SEEDS = (0, 1, 2, 3)


def fake_run(root: Path, index: int, strategy: str, alpha: float, seed: int, acc: float,
             learner: str = "sgd") -> Path:
    """A finished sweep point with the given federated accuracy (loss = 1 - accuracy)."""
    folder = root / f"{index:03d}-{strategy[:4]}{seed}"
    folder.mkdir(parents=True)
    scenario = {
        "name": "cmp", "seed": seed, "output_dir": "somewhere",
        "partition": {"name": "dirichlet", "alpha": alpha},
        "strategy": {"name": strategy, **({"proximal_mu": 0.01} if strategy == "fedprox" else {})},
        "learner": {"name": learner, "lr": 0.05},
        "metrics": {"summary": ["accuracy", "loss"]},
    }
    (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump(scenario))
    overrides = {"strategy": scenario["strategy"], "partition.alpha": alpha, "seed": seed}
    (folder / "overrides.yaml").write_text(yaml.safe_dump({"index": index,
                                                           "overrides": overrides}))
    results = {"federated": {"test/accuracy": acc, "test/loss": 1 - acc},
               "centralized": {"test/accuracy": 0.99, "test/loss": 0.01}}
    (folder / "summary.json").write_text(json.dumps({"seed": seed, "results": results}))
    return folder


def base_acc(alpha: float, seed: int) -> float:
    """A strong cell effect (alpha) and seed effect that pairing must remove."""
    return 0.6 + 0.25 * (alpha == 1.0) + 0.02 * seed


def make_sweep(root: Path, gain: dict[str, float], noise: float = 0.004, skip=()) -> dict:
    """Strategies x alphas x seeds; ``gain[s]`` is added to strategy ``s``'s accuracy."""
    rng = np.random.default_rng(7)
    accs, index = {}, 0
    for strategy, g in gain.items():
        for alpha in ALPHAS:
            for seed in SEEDS:
                acc = base_acc(alpha, seed) + g + rng.normal(0, noise)
                if (strategy, alpha, seed) not in skip:
                    fake_run(root, index, strategy, alpha, seed, acc)
                    accs[strategy, alpha, seed] = acc
                index += 1
    return accs


def test_planted_difference_is_found_and_pairs_stay_in_their_cell(tmp_path):
    accs = make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.03})
    runs = find_runs(tmp_path)
    pairs = pair_runs(runs, "strategy.name", "fedprox", "fedavg")
    assert len(pairs.pairs) == 8 and pairs.keys == ["partition.alpha", "seed"]
    for ra, rb in pairs.pairs:
        assert ra.scenario["seed"] == rb.scenario["seed"]
        assert ra.scenario["partition"]["alpha"] == rb.scenario["partition"]["alpha"]
    result = comparisons(runs, "strategy.name=fedprox,fedavg", ["test/accuracy", "test/loss"])
    acc = next(e for e in result.entries if e["metric"] == "test/accuracy")
    a = [accs["fedprox", al, s] for al in ALPHAS for s in SEEDS]
    b = [accs["fedavg", al, s] for al in ALPHAS for s in SEEDS]
    assert acc["n"] == 8 and acc["verdict"] == "a better"
    assert acc["mean_diff"] == pytest.approx(np.mean(np.subtract(a, b)))
    assert acc["test"].startswith("wilcoxon")
    assert acc["p_value"] == pytest.approx(stats.wilcoxon(a, b).pvalue)
    loss = next(e for e in result.entries if e["metric"] == "test/loss")
    assert loss["direction"] == "lower" and loss["verdict"] == "a better"  # lower loss: a better
    assert loss["mean_diff"] == pytest.approx(acc["mean_diff"])  # loss = 1 - accuracy


def test_no_difference_gives_no_difference_shown(tmp_path):
    make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.0}, noise=0.01)
    result = comparisons(find_runs(tmp_path), "strategy.name=fedprox,fedavg", ["test/accuracy"])
    assert result.entries[0]["verdict"] == "no difference shown"


def test_reference_mode_t_interval_and_holm_against_scipy_statsmodels(tmp_path):
    from statsmodels.stats.multitest import multipletests

    # one cell, 4 seeds: n < 8, so the t interval and the paired t-test
    accs = {}
    for i, (strategy, g) in enumerate({"fedavg": 0.0, "fedprox": 0.01, "qfedavg": -0.2}.items()):
        for seed in SEEDS:
            acc = base_acc(0.1, seed) + g + 0.003 * ((seed * 7 + i) % 3 - 1)
            fake_run(tmp_path, 10 * i + seed, strategy, 0.1, seed, acc)
            accs[strategy, seed] = acc
    result = comparisons(find_runs(tmp_path), "strategy.name", ["test/accuracy", "test/loss"],
                         reference="fedavg")
    assert [(e["a"], e["b"]) for e in result.entries] == [
        ("fedprox", "fedavg"), ("fedprox", "fedavg"), ("qfedavg", "fedavg"), ("qfedavg", "fedavg")]
    q = result.entries[2]
    a = [accs["qfedavg", s] for s in SEEDS]
    b = [accs["fedavg", s] for s in SEEDS]
    ref = stats.ttest_rel(a, b)
    assert (q["ci_low"], q["ci_high"]) == pytest.approx(tuple(ref.confidence_interval(0.95)))
    assert q["p_value"] == pytest.approx(ref.pvalue) and q["verdict"] == "b better"
    holm = multipletests([e["p_value"] for e in result.entries], method="holm")[1]
    assert [e["p_adjusted"] for e in result.entries] == pytest.approx(list(holm))


def test_missing_partner_is_named_and_left_out(tmp_path):
    make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.03}, skip={("fedavg", 1.0, 3)})
    result = comparisons(find_runs(tmp_path), "strategy.name=fedprox,fedavg", ["test/accuracy"])
    assert result.entries[0]["n"] == 7
    lonely = [n for n in result.notes if n.startswith("unpaired")]
    assert len(lonely) == 1
    assert "strategy.name=fedprox partition.alpha=1.0 seed=3" in lonely[0]


def test_a_setting_one_arm_never_varies_is_a_block(tmp_path):
    """fedprox ran only at alpha 0.1: the alpha-1.0 fedavg runs have no partner."""
    make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.03},
               skip={("fedprox", 1.0, s) for s in SEEDS})
    result = comparisons(find_runs(tmp_path), "strategy.name=fedprox,fedavg", ["test/accuracy"])
    assert result.entries[0]["n"] == 4
    assert sum(n.startswith("unpaired") for n in result.notes) == 4


def test_settings_set_with_the_field_belong_to_the_arm(tmp_path):
    for seed in SEEDS:
        fake_run(tmp_path, seed, "fedavg", 0.1, seed, base_acc(0.1, seed))
        fake_run(tmp_path, 10 + seed, "scaffold", 0.1, seed, base_acc(0.1, seed) + 0.02,
                 learner="sgd_drift")
    result = comparisons(find_runs(tmp_path), "strategy.name=scaffold,fedavg", ["test/accuracy"])
    assert result.entries[0]["n"] == 4
    assert any("learner.name=sgd_drift / sgd set together with strategy.name" in n
               for n in result.notes)


def test_cli_writes_csv_json_png(tmp_path, capsys):
    make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.03})
    rc = main(["report", str(tmp_path), "--compare", "strategy.name=fedprox,fedavg"])
    out = capsys.readouterr().out
    assert rc == 0 and "fedprox" in out and "a better" in out
    report = tmp_path / "report"
    entries = json.loads((report / "comparisons.json").read_text())
    keys = {"a", "b", "field", "metric", "n", "mean_diff", "ci_low", "ci_high", "p_value",
            "p_adjusted", "test", "verdict", "ci_method", "detectable_diff"}
    assert len(entries) == 2 and keys <= set(entries[0])
    assert (report / "comparisons.csv").read_text().startswith("a,b,field,metric")
    assert (report / "comparisons_accuracy.png").stat().st_size > 0
    assert (report / "comparisons_loss.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare", "strategy.nme=fedprox,fedavg"], "no finished run has this scenario field"),
        (["--compare", "strategy.name=fedprx,fedavg"], "no run has strategy.name=fedprx"),
        (["--compare", "strategy.name"], "give two values"),
        (["--compare", "strategy.name=fedprox"], "give two different values"),
        (["--compare", "strategy.name=fedprox,fedavg", "--reference", "fedavg"], "exclusive"),
        (["--compare", "strategy.name=fedprox,fedavg", "--better", "accuracy=up"],
         "METRIC=higher"),
        (["--reference", "fedavg"], "go with --compare"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, args, message):
    make_sweep(tmp_path, {"fedavg": 0.0, "fedprox": 0.03})
    assert main(["report", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_too_few_pairs_is_one_line(tmp_path, capsys):
    fake_run(tmp_path, 0, "fedavg", 0.1, 0, 0.8)
    fake_run(tmp_path, 1, "fedprox", 0.1, 0, 0.82)
    fake_run(tmp_path, 2, "fedprox", 0.1, 1, 0.83)
    with pytest.raises(CompareError, match="1 pair"):
        comparisons(find_runs(tmp_path), "strategy.name=fedprox,fedavg", ["test/accuracy"])
    assert main(["report", str(tmp_path), "--compare", "strategy.name=fedprox,fedavg"]) == 2
    err = capsys.readouterr().err
    assert "no comparison has 2 or more pairs" in err and len(err.strip().splitlines()) == 1
