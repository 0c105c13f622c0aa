"""The claims runner (``benchmarks/claims.py``) on a tiny fixture: a case for every verdict.

Stored results are fabricated: two cells x five seeds of a score for arms that
are clearly better, clearly worse, no different, or differ by noise only.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

pytest.importorskip("statsmodels")

RUNNER = Path(__file__).resolve().parents[1] / "benchmarks" / "claims.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("claims_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    sys.modules["claims_runner"] = module  # pydantic resolves the models' annotations here
    spec.loader.exec_module(module)
    return module


claims = _load_runner()


def _rows() -> list[dict]:
    """Arms on (cell, seed): ``new`` = ``old`` + 0.05; ``noisy`` = ``old`` ± 0.04 (mean 0)."""
    rng = np.random.default_rng(0)
    flips = [1, -1, 1, -1, 1, -1, -1, 1, -1, 1]
    rows, k = [], 0
    for cell in ("c1", "c2"):
        for seed in range(5):
            old = 0.6 + 0.1 * rng.random()
            noise = rng.normal(0, 0.003)
            values = {"old": old, "new": old + 0.05 + noise, "noisy": old + 0.04 * flips[k],
                      "same": old + noise, "zero_shot": old + noise / 3}
            k += 1
            rows += [{"cell": cell, "seed": seed, "method": m, "metrics": {"score": v}}
                     for m, v in values.items()]
    rows.append({"cell": "c3", "seed": 0, "method": "new", "metrics": {"score": 0.7}})
    return rows


def _paired(a: str, b: str, **extra) -> dict:
    return {
        "metric": "metrics.score", "direction": "higher", "source": {"file": "cells.jsonl"},
        "a": {"label": a, "where": {"method": a}}, "b": {"label": b, "where": {"method": b}},
        "pair_on": ["cell", "seed"], **extra,
    }


CLAIMS = {
    "method": "toy",
    "paper": "A toy paper (fixture)",
    "claims": [
        {"id": "holds", "claim": "new beats old", "paper": 0.05,
         "comparison": _paired("new", "old")},
        {"id": "contradicted", "claim": "old beats new", "comparison": _paired("old", "new")},
        {"id": "inconclusive", "claim": "noisy beats old",
         "comparison": _paired("noisy", "old")},
        {"id": "untestable", "claim": "new beats old, given few-shot helps",
         "comparison": _paired("new", "old"),
         "power_check": {"description": "few-shot beats zero-shot on every cell",
                         "each": ["cell"], "comparison": _paired("same", "zero_shot")}},
        {"id": "one-unit", "claim": "new is above 0.5 on cell c3", "paper": 0.5,
         "comparison": {"kind": "one_sample", "metric": "metrics.score",
                        "direction": "higher",
                        "source": {"file": "cells.jsonl", "where": {"cell": "c3"}},
                        "a": {"label": "new", "where": {"method": "new"}},
                        "pair_on": ["seed"]}},
        {"id": "no-rows", "claim": "something the runs never stored",
         "untestable": "the experiment logged means only"},
        {"id": "pooled", "claim": "new beats old, per seed averaged over cells",
         "comparison": _paired("new", "old", pair_on=["seed"], mean_over=["cell"])},
        {"id": "arm-mean", "claim": "the trained arms (mean of new and noisy) beat zero-shot",
         "comparison": {**_paired("new", "zero_shot"),
                        "a": {"label": "trained", "where": {"method": ["new", "noisy"]},
                              "mean_over": ["method"]}}},
        {"id": "json-equivalence", "claim": "the two readers agree within 0.01",
         "comparison": {"kind": "equivalence", "metric": "acc", "direction": "higher",
                        "margin": 0.01,
                        "source": {"file": "summary.json", "path": "results.runs"},
                        "a": {"label": "reader A", "metric": "acc"},
                        "b": {"label": "reader B", "metric": "acc_ref"},
                        "pair_on": ["seed"]}},
        {"id": "keyed-rows", "claim": "tuned beats base on every task",
         "comparison": {"metric": "tuned", "direction": "higher",
                        "source": {"file": "tasks.json", "path": "model.tasks"},
                        "a": {"label": "tuned"}, "b": {"label": "base", "metric": "base"},
                        "pair_on": ["key"]}},
        {"id": "unnested", "claim": "one step is worse than two",
         "comparison": {"metric": "ppl", "direction": "lower",
                        "source": {"file": "curves.jsonl", "unnest": "result",
                                   "where": {"part": "text"}},
                        "a": {"label": "two steps", "where": {"steps": 2}},
                        "b": {"label": "one step", "where": {"steps": 1}},
                        "pair_on": ["seed"]}},
        {"id": "csv-one-sample", "claim": "accuracy beats chance (0.5)",
         "comparison": {"kind": "one_sample", "metric": "acc", "direction": "higher",
                        "against": 0.5, "source": {"file": "table.csv"},
                        "a": {"label": "probe"}, "pair_on": ["seed"]}},
        {"id": "keyed-log-equivalence", "claim": "the fitted slopes are within 5 % of theory",
         "comparison": {"kind": "equivalence", "metric": "fit", "direction": "higher",
                        "transform": "log_ratio", "margin": 0.05,
                        "source": {"file": "fits.json", "path": "by_rho", "key": "rho",
                                   "where": {"rho": [0.5, 0.7, 0.9]}},
                        "a": {"label": "fitted", "metric": "fit"},
                        "b": {"label": "theory", "metric": "theory"},
                        "pair_on": ["rho"]}},
        {"id": "star-path", "claim": "the student beats the teacher in every setting",
         "comparison": {"metric": "student", "direction": "lower",
                        "source": {"file": "fits.json", "path": "settings.*.rows",
                                   "key": "setting"},
                        "a": {"label": "student", "metric": "student"},
                        "b": {"label": "teacher", "metric": "teacher"},
                        "pair_on": ["setting", "lam"]}},
    ],
}

#: Fitted slopes keyed by rho, as an experiment stores them: an object, not a list.
FITS = {"0.5": {"fit": 1.36, "theory": 1.3333}, "0.7": {"fit": 1.95, "theory": 1.9608},
        "0.9": {"fit": 5.20, "theory": 5.2632}, "0.95": {"fit": 9.0, "theory": 10.256}}
#: Rows nested one level deeper, under one object per setting.
SETTINGS = {"n=4": {"rows": [{"lam": 0.1, "student": 1.0, "teacher": 1.3},
                             {"lam": 1.0, "student": 1.1, "teacher": 1.2}]},
            "n=8": {"rows": [{"lam": 0.1, "student": 0.9, "teacher": 1.25},
                             {"lam": 1.0, "student": 1.0, "teacher": 1.05}]}}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    claims_dir, results = tmp_path / "claims", tmp_path / "results" / "toy"
    claims_dir.mkdir()
    results.mkdir(parents=True)
    (claims_dir / "toy.yaml").write_text(yaml.safe_dump(CLAIMS, sort_keys=False))
    gone = ("old", "c2", 4)
    rows = [r for r in _rows() if (r["method"], r["cell"], r["seed"]) != gone]
    (results / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = [{"seed": s, "acc": 0.8 + 0.001 * s, "acc_ref": 0.8 + 0.001 * s + 0.0005 * (-1) ** s}
            for s in range(6)]
    (results / "summary.json").write_text(json.dumps({"results": {"runs": runs}}))
    (results / "table.csv").write_text("seed,acc\n0,0.61\n1,0.64\n2,0.58\n3,0.66\n")
    tasks = {f"t{i}": {"tuned": 0.5 + 0.1 * i, "base": 0.4 + 0.1 * i + 0.01 * i} for i in range(4)}
    (results / "tasks.json").write_text(json.dumps({"model": {"tasks": tasks}}))
    curves = [{"part": "text", "model": "all", "seed": s,
               "result": [{"model": "m", "steps": k, "ppl": 100 / k + s} for k in (1, 2)]}
              for s in range(3)]
    curves.append({"part": "onestep", "model": "m", "seed": 0, "result": {"ppl": 1.0}})
    (results / "curves.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curves))
    (results / "fits.json").write_text(json.dumps({"by_rho": FITS, "settings": SETTINGS}))
    return claims_dir, tmp_path / "results"


def _by_id(tree: tuple[Path, Path]) -> dict[str, dict]:
    assert claims.main(["toy", "--claims-dir", str(tree[0]), "--results-dir", str(tree[1])]) == 0
    entries = json.loads((tree[1] / "toy" / "claims.json").read_text())
    return {e["id"]: e for e in entries}


def test_each_verdict_comes_from_the_case_built_for_it(tree):
    got = _by_id(tree)
    assert got["holds"]["verdict"] == "holds"
    assert got["contradicted"]["verdict"] == "contradicted"
    assert got["inconclusive"]["verdict"] == "inconclusive"
    assert "detects a true difference of" in got["inconclusive"]["notes"]
    untestable = got["untestable"]
    assert untestable["verdict"] == "not testable here"
    assert untestable["power_check"]["passed"] is False
    assert "cell=c1" in untestable["power_check"]["evidence"]
    assert "does not show that few-shot beats zero-shot" in untestable["notes"]
    assert untestable["mean_diff"] == pytest.approx(got["holds"]["mean_diff"])  # still computed


def test_output_keys_and_numbers(tree):
    got = _by_id(tree)
    entry = got["holds"]
    required = {"claim", "comparison", "metric", "paper", "ours", "n", "mean_diff", "ci_low",
                "ci_high", "p_value", "test", "power_check", "verdict", "notes"}
    assert required <= set(entry)
    assert set(entry["power_check"]) == {"description", "passed", "evidence"}
    assert entry["n"] == 9  # 10 (cell, seed) units, one without its `old` partner
    assert entry["ours"] == pytest.approx(0.05, abs=0.003)
    assert entry["paper"] == 0.05
    md = (tree[1] / "toy" / "claims.md").read_text()
    assert "| holds | 0.05 |" in md and "**not testable here**" in md


def test_a_unit_without_partner_is_named_and_left_out(tree):
    notes = _by_id(tree)["holds"]["notes"]
    assert "Unpaired, left out: cell=c2, seed=4 has new but no old" in notes
    assert "cell=c3, seed=0 has new but no old" in notes


def test_mean_over_averages_cells_within_a_seed(tree):
    pooled = _by_id(tree)["pooled"]
    by = {(r["method"], r["cell"], r["seed"]): r["metrics"]["score"] for r in _rows()}
    # seed 4 lacks `old` on c2: its c2 cell is left out of both arms, not averaged in
    cells = {s: ("c1", "c2") if s < 4 else ("c1",) for s in range(5)}
    expected = [np.mean([by["new", c, s] - by["old", c, s] for c in cells[s]]) for s in range(5)]
    assert pooled["n"] == 5
    assert pooled["mean_diff"] == pytest.approx(np.mean(expected))
    assert "seed=4, cell=c2 has new but no old" in pooled["notes"]


def test_an_arm_can_average_its_own_rows(tree):
    got = _by_id(tree)["arm-mean"]
    by = {(r["method"], r["cell"], r["seed"]): r["metrics"]["score"] for r in _rows()}
    units = [(c, s) for c in ("c1", "c2") for s in range(5)]
    expected = [(by["new", c, s] + by["noisy", c, s]) / 2 - by["zero_shot", c, s] for c, s in units]
    assert got["n"] == 10 and got["mean_diff"] == pytest.approx(np.mean(expected))


def test_too_few_units_is_not_testable_and_says_why(tree):
    got = _by_id(tree)
    one = got["one-unit"]
    assert one["verdict"] == "not testable here" and one["n"] == 1
    assert "per-seed or per-cell values are missing" in one["notes"]
    assert got["no-rows"]["verdict"] == "not testable here"
    assert "means only" in got["no-rows"]["notes"]


def test_json_path_and_csv_sources(tree):
    got = _by_id(tree)
    eq = got["json-equivalence"]
    assert eq["verdict"] == "holds" and eq["test"] == "TOST (paired t)" and eq["n"] == 6
    one = got["csv-one-sample"]
    assert one["n"] == 4 and one["ours"] == pytest.approx(0.6225)
    assert one["mean_diff"] == pytest.approx(0.1225) and one["verdict"] == "holds"


def test_an_object_of_rows_gives_its_keys_as_a_column(tree):
    got = _by_id(tree)["keyed-rows"]
    # tuned - base = 0.1 - 0.01 i for the tasks t0..t3
    assert got["n"] == 4 and got["mean_diff"] == pytest.approx(np.mean([0.1 - 0.01 * i
                                                                        for i in range(4)]))
    assert "rows: tasks.json at model.tasks" in got["comparison"]


def test_unnest_makes_a_row_of_each_listed_object_with_its_parents_columns(tree):
    got = _by_id(tree)["unnested"]
    # per seed, ppl(1 step) - ppl(2 steps) = 100 - 50; the onestep row (a dict) is left out
    assert got["n"] == 3 and got["mean_diff"] == pytest.approx(50.0)
    assert got["verdict"] == "holds"
def test_keyed_rows_and_log_ratio_equivalence(tree):
    got = _by_id(tree)["keyed-log-equivalence"]
    rho = [0.5, 0.7, 0.9]  # the numeric keys are matched by `where`; 0.95 is left out
    d = np.log([FITS[str(r)]["fit"] / FITS[str(r)]["theory"] for r in rho])
    half = stats.t.ppf(0.95, 2) * d.std(ddof=1) / np.sqrt(3)  # TOST's 90 % t interval
    assert got["n"] == 3 and got["mean_diff"] == pytest.approx(d.mean())
    assert got["ci_low"] == pytest.approx(d.mean() - half)
    assert got["ci_high"] == pytest.approx(d.mean() + half)
    assert got["ours"] == pytest.approx(100 * np.expm1(d.mean()))
    assert abs(d.mean()) + half < 0.05 and got["verdict"] == "holds"
    assert "log(a / b)" in got["comparison"] and "is better" not in got["comparison"]


def test_a_star_in_the_path_stands_for_each_key(tree):
    got = _by_id(tree)["star-path"]
    d = [r["teacher"] - r["student"] for v in SETTINGS.values() for r in v["rows"]]
    assert got["n"] == 4 and got["mean_diff"] == pytest.approx(np.mean(d))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["claims"][0].update(colour="red"), "claims.0.colour: Extra inputs"),
        (lambda c: c["claims"][0]["comparison"].pop("b"), "needs arm b"),
        (lambda c: c["claims"][1].update(id="holds"), "claim ids repeat: holds"),
        (lambda c: c["claims"][0]["comparison"]["source"].update(file="nope.jsonl"),
         "nope.jsonl: no such stored results file"),
        (lambda c: c["claims"][0]["comparison"].update(pair_on=["seed"]),
         "two rows for seed=0"),
        (lambda c: c["claims"][-2]["comparison"]["source"].update(path="by_rho.0.5"),
         "'fit' holds no row objects"),
        (lambda c: c["claims"][-1]["comparison"]["source"].update(key=None),
         "a * in source.path needs source.key"),
        (lambda c: c["claims"][-2]["comparison"]["source"].update(key="fit"),
         "already has a column 'fit'"),
        (lambda c: c["claims"][-2]["comparison"].update(kind="one_sample", b=None, against=1),
         "transform log_ratio needs arm b"),
    ],
)
def test_bad_input_is_one_line(tree, capsys, edit, message):
    data = json.loads(json.dumps(CLAIMS))
    edit(data)
    (tree[0] / "toy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    rc = claims.main(["toy", "--claims-dir", str(tree[0]), "--results-dir", str(tree[1])])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def _write_toy(tmp_path: Path, claim_list: list[dict], files: dict[str, str]) -> tuple[Path, Path]:
    claims_dir, results = tmp_path / "claims", tmp_path / "results" / "toy"
    claims_dir.mkdir()
    results.mkdir(parents=True)
    spec = {"method": "toy", "paper": "A toy paper (fixture)", "claims": claim_list}
    (claims_dir / "toy.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    for name, text in files.items():
        (results / name).write_text(text)
    return claims_dir, tmp_path / "results"


KEYED = [{"key": f"{m}/{s}", "ppl": v} for s, (x, y) in enumerate([(7.0, 7.5), (7.1, 7.4),
                                                                  (6.9, 7.6)])
         for m, v in (("new", x), ("old", y))] + [{"key": "dense", "ppl": 6.8}]
ESTIMATES = [{"task": t, "true": tr, "fast": f, "slow": sl}
             for t, tr, f, sl in [(0, 1.0, 1.1, 0.7), (1, 0.5, 0.45, 0.9), (2, 2.0, 1.7, 2.6),
                                  (3, 0.2, 0.25, 0.1)]]


def test_parse_reads_columns_out_of_a_key(tmp_path):
    source = {"file": "cells.jsonl", "parse": {"key": "(?P<method>[^/]+)/(?P<seed>[0-9]+)"}}
    comp = {"metric": "ppl", "direction": "lower", "source": source,
            "a": {"label": "new", "where": {"method": "new"}},
            "b": {"label": "old", "where": {"method": "old"}}, "pair_on": ["seed"]}
    tree = _write_toy(tmp_path, [{"id": "keyed", "claim": "new beats old", "comparison": comp}],
                      {"cells.jsonl": "".join(json.dumps(r) + "\n" for r in KEYED)})
    got = _by_id(tree)["keyed"]
    assert got["n"] == 3  # the unmatched "dense" row gets no method and joins no arm
    assert got["mean_diff"] == pytest.approx(np.mean([0.5, 0.3, 0.7]))
    assert got["verdict"] == "holds"


def test_abs_error_to_compares_errors_against_the_truth(tmp_path):
    comp = {"metric": "fast", "direction": "lower", "source": {"file": "rows.json"},
            "a": {"label": "fast", "abs_error_to": "true"},
            "b": {"label": "slow", "metric": "slow", "abs_error_to": "true"},
            "pair_on": ["task"]}
    tree = _write_toy(tmp_path, [{"id": "err", "claim": "fast errs less", "comparison": comp}],
                      {"rows.json": json.dumps(ESTIMATES)})
    got = _by_id(tree)["err"]
    fast = np.abs([r["fast"] - r["true"] for r in ESTIMATES])
    slow = np.abs([r["slow"] - r["true"] for r in ESTIMATES])
    assert got["n"] == 4 and got["mean_diff"] == pytest.approx(np.mean(slow - fast))
    assert "absolute error against true" in got["comparison"]


def test_a_one_unit_power_check_shows_its_value(tmp_path):
    source = {"file": "cells.jsonl", "parse": {"key": "(?P<method>[a-z]+)"}}
    check = {"description": "the dense model is above 7", "comparison": {
        "kind": "one_sample", "metric": "ppl", "direction": "higher", "against": 7.0,
        "source": source, "a": {"label": "dense", "where": {"method": "dense"}},
        "pair_on": ["method"]}}
    comp = {"metric": "ppl", "direction": "lower",
            "source": {**source, "parse": {"key": "(?P<method>[a-z]+)/(?P<seed>[0-9]+)"}},
            "a": {"label": "new", "where": {"method": "new"}},
            "b": {"label": "old", "where": {"method": "old"}}, "pair_on": ["seed"]}
    tree = _write_toy(tmp_path, [{"id": "gated", "claim": "new beats old", "comparison": comp,
                                  "power_check": check}],
                      {"cells.jsonl": "".join(json.dumps(r) + "\n" for r in KEYED)})
    got = _by_id(tree)["gated"]
    assert got["verdict"] == "not testable here" and got["power_check"]["passed"] is False
    assert "ours = 6.8;" in got["power_check"]["evidence"]


def test_a_pattern_without_named_groups_is_one_line(tmp_path, capsys):
    comp = {"metric": "ppl", "direction": "lower",
            "source": {"file": "cells.jsonl", "parse": {"key": "[a-z]+/[0-9]+"}},
            "a": {"label": "new"}, "b": {"label": "old"}, "pair_on": ["seed"]}
    tree = _write_toy(tmp_path, [{"id": "bad", "claim": "x", "comparison": comp}],
                      {"cells.jsonl": "".join(json.dumps(r) + "\n" for r in KEYED)})
    rc = claims.main(["toy", "--claims-dir", str(tree[0]), "--results-dir", str(tree[1])])
    err = capsys.readouterr().err
    assert rc == 2 and "the pattern names no group" in err and len(err.strip().splitlines()) == 1


def test_a_check_shared_by_two_claims_prints_the_same_interval(tmp_path):
    check = {"description": "few-shot beats zero-shot",
             "comparison": _paired("noisy", "zero_shot")}
    claims_list = [{"id": cid, "claim": "new beats old", "comparison": _paired("new", "old"),
                    "power_check": check} for cid in ("first", "second")]
    tree = _write_toy(tmp_path, claims_list,
                      {"cells.jsonl": "".join(json.dumps(r) + "\n" for r in _rows())})
    got = _by_id(tree)
    first, second = got["first"]["power_check"], got["second"]["power_check"]
    assert "[" in first["evidence"] and first == second


def test_the_comparison_names_the_columns_the_arms_read(tree):
    got = _by_id(tree)
    assert "; acc vs acc_ref;" in got["json-equivalence"]["comparison"]
    assert "; tuned vs base (higher is better);" in got["keyed-rows"]["comparison"]
    assert "; metrics.score (higher is better);" in got["holds"]["comparison"]
