"""Population scale (issue 55): a million registered clients on one machine, beside raw Flower.

Every arm is a whole process (``flowerbed run``, the hand-written Flower app
``raw_flower_e2e.py``, or the plain PyTorch loop ``floor.py``), timed from its
start and sampled for the summed RSS of its process tree (Ray's processes and
flowerbed's workers included). All parts run in one invocation, so ratios
share the machine's load; the 1-minute load average is recorded beside every
arm.

- ``population``: ``scenarios/benchmarks/population_{synthetic,fmnist}.yaml``
  (Synthetic(1, 1) and Fashion-MNIST logistic regression, cohort 100, 20
  rounds) at 10^3 .. 10^6 clients (virtual clients, lazy data): start-up to
  round 1, per-round time, peak memory. Raw Flower runs the same workload at
  ``--raw-sizes`` (the clients' rows exported to an ``.npz`` first, Flower's
  ``FedAvg`` through ``run_simulation``, one node per client).
- ``floor``: ``scenarios/benchmarks/cross_device_fmnist.yaml`` (1,000 clients,
  10 per round, 100 rounds): flowerbed with virtual clients and with one node
  per client, raw Flower, and ``floor.py``, which does the same updates and
  evaluations in one process (its final accuracy equals flowerbed's).
- ``peers``: the peers' published workloads, ``scenarios/benchmarks/``
  ``flute_lr`` (with its floor), ``blazefl_cnn`` (1 and 2 clients in parallel;
  a rerun compared bit for bit through its final checkpoint) and
  ``pfl_cifar`` (``--pfl-rounds`` of its 150 rounds), each beside raw Flower;
  updates/s over the whole process and over the rounds alone.

Run ``python benchmarks/platform/population.py`` (full, about 40 minutes on two
cores) or ``--quick`` (10^3 and 10^4 clients, fewer rounds). ``--parts``
picks parts; results go to ``results/platform/population[_<parts>][_quick].json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import Check, TreeMemory, load_avg, median, print_checks, print_table, save

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
FLOWERBED = str(Path(sys.executable).with_name("flowerbed"))
SCENARIOS = "scenarios/benchmarks"
COHORT = 100


def run_tree(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` from the repository root: wall, peak memory of its tree, output, load."""
    load = load_avg()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})})
    with TreeMemory(interval=0.2, pss_every=2.0, root=proc.pid) as memory:
        out, _ = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed:\n{out[-3000:]}")
    peak = memory.peak()
    return {"wall_s": round(wall, 3), "peak_rss_mib": peak["rss_mib"],
            "peak_pss_mib": peak["pss_mib"], "processes": peak["processes"],
            "load": load, "output": out}


def flowerbed_arm(scenario: str, sets: list[str], out: Path) -> dict[str, Any]:
    """One ``flowerbed run`` process; its start-up, rounds and phases from its run folder."""
    before = set(out.rglob("summary.json"))
    cmd = [FLOWERBED, "run", f"{SCENARIOS}/{scenario}.yaml", "--output-dir", str(out)]
    for s in sets:
        cmd += ["--set", s]
    res = run_tree(cmd, {"OMP_NUM_THREADS": "1"})
    (summary_path,) = set(out.rglob("summary.json")) - before
    run_dir = summary_path.parent
    summary = json.loads(summary_path.read_text())
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    start = next(r["time_s"] for r in rows if r.get("phase") == "server_eval"
                 and r.get("round") == 0)
    ends = [r["time_s"] for r in rows
            if r.get("event") == "replies" and str(r.get("phase", "")).startswith("train")]
    del res["output"]
    return {
        **res, **round_times(start, ends),
        "phases_s": summary["phases_s"],
        "accuracy": summary["results"]["federated"].get("test/accuracy"),
        "run_dir": str(run_dir),
    }


def round_times(start: float, ends: list[float]) -> dict[str, float]:
    """Start-up (to round 1), round 1, and the median of the later rounds, in seconds."""
    steps = [b - a for a, b in itertools.pairwise([start, *ends])]
    return {
        "startup_s": round(start, 3),
        "to_round1_end_s": round(ends[0], 3) if ends else float("nan"),
        "round1_s": round(steps[0], 3) if steps else float("nan"),
        "round_s": round(median(steps[1:]), 4) if len(steps) > 1 else float("nan"),
        "rounds_s": round(ends[-1] - start, 3) if ends else float("nan"),
    }


def export(scenario: str, sets: list[str], path: Path) -> dict[str, Any]:
    """The scenario's clients' rows and test split as the raw arm's ``.npz``, and its settings."""
    from flowerbed.core import registry
    from flowerbed.core.scenario import load_scenario
    from flowerbed.data.federated import federated_data

    sc = load_scenario(ROOT / SCENARIOS / f"{scenario}.yaml", sets)
    fed = federated_data(sc)
    arrays: dict[str, np.ndarray] = {}
    for pid in range(sc.num_clients):
        client = fed.client(pid)
        arrays[f"x{pid}"], arrays[f"y{pid}"] = client.x_train, client.y_train
    arrays["x_test"], arrays["y_test"] = fed.dataset.x_test, fed.dataset.y_test
    model = registry.name_of(sc.model) if sc.model is not None else "mlp"
    hidden = getattr(sc.model, "hidden", ())
    arrays["model"] = np.array("mlp" if model == "linear" else model)
    arrays["hidden"] = np.array(hidden[0] if hidden else 0)
    arrays["num_classes"] = np.array(fed.dataset.meta.num_classes)
    np.savez(path, **arrays)  # type: ignore[arg-type]
    lr = sc.learner
    return {
        "rounds": sc.rounds, "fraction": sc.strategy.fraction_train,
        "eval_every": sc.metrics.eval_every,
        "flags": ["--lr", str(lr.lr), "--momentum", str(lr.momentum),
                  "--batch-size", str(lr.batch_size), "--local-epochs", str(lr.local_epochs)],
    }


def raw_arm(data: Path, settings: dict[str, Any], ray_num_cpus: int | None = None
            ) -> dict[str, Any]:
    """One hand-written Flower process on the exported data (one CPU per client)."""
    cmd = [sys.executable, str(BENCH / "raw_flower_e2e.py"), str(data),
           "--rounds", str(settings["rounds"]), "--fraction", str(settings["fraction"]),
           "--eval-every", str(settings["eval_every"]), *settings["flags"]]
    if ray_num_cpus:
        cmd += ["--ray-num-cpus", str(ray_num_cpus)]
    res = run_tree(cmd)
    marks = [line.split() for line in res.pop("output").splitlines()
             if line.startswith("raw-round ")]
    times = {int(r): float(t) for _, r, t in marks}
    start = times.get(0, float("nan"))
    ends = [times[r] for r in sorted(times) if r >= 1]
    return {**res, **round_times(start, ends)}


def floor_arm(scenario: str, sets: list[str]) -> dict[str, Any]:
    """``floor.py``: the same updates and evaluations as a plain PyTorch loop."""
    cmd = [sys.executable, str(BENCH / "floor.py"), f"{SCENARIOS}/{scenario}.yaml"]
    for s in sets:
        cmd += ["--set", s]
    res = run_tree(cmd, {"OMP_NUM_THREADS": "1"})
    line = res.pop("output").strip().splitlines()[-1]
    return {**res, **json.loads(line)}


def population(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[Check]]:
    """Start-up, per-round time and peak memory from 10^3 to 10^6 clients; raw Flower beside."""
    results: dict[str, Any] = {}
    checks: list[Check] = []
    for work in args.workloads:
        scenario = f"population_{work}"
        arms: dict[str, Any] = {"flowerbed": {}, "raw_flower": {}}
        for n in args.sizes:
            sets = [f"num_clients={n}", f"strategy.fraction_train={COHORT / n!r}",
                    f"rounds={args.rounds}"]
            arms["flowerbed"][n] = arm = flowerbed_arm(scenario, sets, out)
            print(f"{work} {n:>9,}: start-up {arm['startup_s']:.1f} s, round "
                  f"{arm['round_s']:.3f} s, peak {arm['peak_rss_mib']:.0f} MiB "
                  f"(load {arm['load']:.1f})", flush=True)
            if n in args.raw_sizes:
                data = out / f"{scenario}_{n}.npz"
                settings = export(scenario, sets, data)
                arms["raw_flower"][n] = raw = raw_arm(data, settings)
                print(f"{work} {n:>9,}: raw Flower start-up {raw['startup_s']:.1f} s, round "
                      f"{raw['round_s']:.3f} s, peak {raw['peak_rss_mib']:.0f} MiB, wall "
                      f"{raw['wall_s']:.1f} s (load {raw['load']:.1f})", flush=True)
        results[work] = arms
        fb = arms["flowerbed"]
        small, large = min(fb), max(fb)
        checks += [
            Check(f"{work}: start-up to round 1 at {large:,} clients", fb[large]["startup_s"],
                  30.0, "s"),
            Check(f"{work}: peak memory (process tree) at {large:,} clients",
                  fb[large]["peak_rss_mib"] / 1024, 4.0, "GiB"),
            Check(f"{work}: per-round time at {large:,} / at {small:,} clients",
                  fb[large]["round_s"] / fb[small]["round_s"], 1.2),
        ]
    return results, checks


def floor_part(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[Check]]:
    """The 1,000-client cross-device workload: flowerbed, raw Flower and the floor."""
    results: dict[str, Any] = {}
    data = out / "cross_device.npz"
    settings = export("cross_device_fmnist", [], data)
    for name, arm in [
        ("floor", lambda: floor_arm("cross_device_fmnist", [])),
        ("flowerbed_virtual", lambda: flowerbed_arm("cross_device_fmnist", [], out)),
        ("flowerbed_nodes", lambda: flowerbed_arm(
            "cross_device_fmnist", ["engine.clients=nodes"], out)),
        ("raw_flower", lambda: raw_arm(data, settings)),
    ]:
        results[name] = arm()
        print(f"cross-device {name}: {results[name]['wall_s']:.1f} s "
              f"(load {results[name]['load']:.1f})", flush=True)
    floor = results["floor"]["wall_s"]
    checks = [Check("cross-device: flowerbed (virtual clients) / floor, whole process",
                    results["flowerbed_virtual"]["wall_s"] / floor, 2.0)]
    return results, checks


def blazefl(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[Check]]:
    """BlazeFL's CNN workload at 1 and 2 clients in parallel; a rerun compared bit for bit.

    P clients run at once on P of the two cores, one torch thread each
    (``engine.ray_num_cpus`` = P; BlazeFL's Flower case gives a client all
    CPUs over P instead, but two threads per client on this shared two-core
    machine made LeNet's steps 4.5 times slower, not faster).
    """
    rounds = args.blazefl_rounds
    base = [f"rounds={rounds}", f"checkpoint.every={rounds}"]
    data = out / "blazefl.npz"
    settings = export("blazefl_cnn", [f"rounds={rounds}"], data)
    res: dict[str, Any] = {"rounds": rounds, "flowerbed": {}, "raw_flower": {}}
    for parallel in (1, 2):
        sets = [*base, f"engine.ray_num_cpus={parallel}"]
        res["flowerbed"][parallel] = flowerbed_arm("blazefl_cnn", sets, out)
        res["raw_flower"][parallel] = raw_arm(data, settings, ray_num_cpus=parallel)
        print(f"blazefl P={parallel}: flowerbed {res['flowerbed'][parallel]['wall_s']:.1f} s, "
              f"raw {res['raw_flower'][parallel]['wall_s']:.1f} s", flush=True)
    rerun = flowerbed_arm("blazefl_cnn", [*base, "engine.ray_num_cpus=2"], out)
    res["rerun_P2"] = rerun
    res["bitwise_equal"] = same_run(res["flowerbed"][2]["run_dir"], rerun["run_dir"], rounds)
    print(f"blazefl rerun at P=2 bit for bit equal: {res['bitwise_equal']}", flush=True)
    checks = [Check("blazefl: rerun bit for bit equal (final weights, every metric)",
                    float(res["bitwise_equal"]), 1.0, "", higher_is_better=True)]
    return res, checks


def same_run(a: str, b: str, rounds: int) -> bool:
    """Equal final weights (the last checkpoint's global arrays) and metric rows, times aside.

    A checkpoint also holds the driver's global random generators' states,
    which no result depends on (seeded draws restore them) and which differ
    from process to process: they are left out.
    """
    def arrays(run: str) -> dict[str, np.ndarray]:
        (last,) = (Path(run) / "checkpoints").glob(f"round_*{rounds}")
        meta = json.loads((last / "meta.json").read_text())
        names = {k: v["__array__"] for k, v in meta["state"]["arrays"].items()}
        with np.load(last / "arrays.npz") as npz:
            return {k: npz[v] for k, v in names.items()}

    def rows(run: str) -> list[dict[str, Any]]:
        lines = (Path(run) / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k != "time_s"} for x in lines if x]

    wa, wb = arrays(a), arrays(b)
    same_weights = wa.keys() == wb.keys() and all(
        wa[k].tobytes() == wb[k].tobytes() for k in wa
    )
    clients = [(Path(r) / "client_metrics.jsonl").read_text() for r in (a, b)]
    return same_weights and rows(a) == rows(b) and clients[0] == clients[1]


def peers(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[Check]]:
    """FLUTE's LR, BlazeFL's CNN and pfl-research's CIFAR workloads beside raw Flower."""
    results: dict[str, Any] = {}
    checks: list[Check] = []
    if args.peers != ["flute_lr", "blazefl_cnn", "pfl_cifar"]:
        return selected_peers(args, out)
    flute_sets = ["rounds=20"] if args.quick else []
    data = out / "flute.npz"
    settings = export("flute_lr", flute_sets, data)
    results["flute_lr"] = {
        "flowerbed": flowerbed_arm("flute_lr", flute_sets, out),
        "raw_flower": raw_arm(data, settings),
        "floor": floor_arm("flute_lr", flute_sets),
        "updates": 10 * settings["rounds"],
    }
    print(f"flute_lr: {json.dumps({k: v['wall_s'] for k, v in results['flute_lr'].items() if isinstance(v, dict)})}",  # noqa: E501
          flush=True)
    try:
        results["blazefl_cnn"], more = blazefl(args, out)
        results["blazefl_cnn"]["updates"] = 100 * results["blazefl_cnn"]["rounds"]
        checks += more
    except Exception as exc:  # noqa: BLE001 - pfl_cifar still runs
        results["blazefl_cnn_error"] = f"{type(exc).__name__}: {exc}"[:2000]
    rounds = args.pfl_rounds
    pfl_sets = [f"rounds={rounds}"]
    data = out / "pfl.npz"
    settings = export("pfl_cifar", pfl_sets, data)
    results["pfl_cifar"] = {
        "rounds": rounds,
        "flowerbed": flowerbed_arm("pfl_cifar", pfl_sets, out),
        "raw_flower": raw_arm(data, settings),
        "updates": 50 * rounds,
    }
    print(f"pfl_cifar: flowerbed {results['pfl_cifar']['flowerbed']['wall_s']:.1f} s, raw "
          f"{results['pfl_cifar']['raw_flower']['wall_s']:.1f} s", flush=True)
    for name in ("flute_lr", "pfl_cifar"):
        r = results[name]
        checks.append(Check(f"{name}: flowerbed / raw Flower, whole process",
                            r["flowerbed"]["wall_s"] / r["raw_flower"]["wall_s"], 1.0))
    b = results.get("blazefl_cnn")
    if b is not None:
        best_fb = min(v["wall_s"] for v in b["flowerbed"].values())
        best_raw = min(v["wall_s"] for v in b["raw_flower"].values())
        checks.append(Check("blazefl_cnn: best flowerbed / best raw Flower, whole process",
                            best_fb / best_raw, 1.0))
    return results, checks


def selected_peers(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[Check]]:
    """Only the peer workloads ``--peers`` names (BlazeFL's alone: its curve and rerun)."""
    if args.peers != ["blazefl_cnn"]:
        raise SystemExit("--peers: all three, or blazefl_cnn alone")
    res, checks = blazefl(args, out)
    res["updates"] = 100 * res["rounds"]
    return {"blazefl_cnn": res}, checks


def tables(results: dict[str, Any]) -> None:
    """Print the README's tables."""
    results = {k: v for k, v in results.items() if "error" not in v}
    for work, arms in results.get("population", {}).items():
        rows = []
        for arm, label in (("flowerbed", "flowerbed"), ("raw_flower", "raw Flower")):
            for n, a in arms[arm].items():
                rows.append([label, f"{n:,}", a["startup_s"], a["to_round1_end_s"],
                             a["round_s"], a["peak_rss_mib"], a["peak_pss_mib"], a["wall_s"],
                             a.get("accuracy", ""), a["load"]])
        print_table(f"population: {work}", [
            "arm", "clients", "start-up s", "end of round 1 s", "round s", "peak RSS MiB",
            "peak PSS MiB", "wall s", "accuracy", "load"], rows)
    if "floor" in results:
        rows = [[k, v["wall_s"], v.get("peak_rss_mib"), v.get("accuracy", ""), v["load"]]
                for k, v in results["floor"].items()]
        print_table("cross-device (1,000 clients x 10 x 100 rounds)",
                    ["arm", "wall s", "peak MiB", "accuracy", "load"], rows)
    for name, r in results.get("peers", {}).items():
        if not isinstance(r, dict):
            continue
        rows = []
        for arm, v in r.items():
            if isinstance(v, dict) and "wall_s" in v:
                rows.append([arm, v["wall_s"], r["updates"] / v["wall_s"],
                             r["updates"] / v["rounds_s"] if v.get("rounds_s") else "",
                             v["peak_rss_mib"], v["load"]])
            elif isinstance(v, dict):
                for p, w in v.items():
                    rows.append([f"{arm} P={p}", w["wall_s"], r["updates"] / w["wall_s"],
                                 r["updates"] / w["rounds_s"], w["peak_rss_mib"], w["load"]])
        print_table(name, ["arm", "wall s", "updates/s (whole)", "updates/s (rounds)",
                           "peak MiB", "load"], rows)


PARTS = {"population": population, "floor": floor_part, "peers": peers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^3 and 10^4 clients, fewer rounds")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--sizes", nargs="+", type=int, default=None)
    parser.add_argument("--raw-sizes", nargs="*", type=int, default=[1000])
    parser.add_argument("--workloads", nargs="+", default=["synthetic", "fmnist"],
                        choices=["synthetic", "fmnist"])
    parser.add_argument("--rounds", type=int, default=None, help="population rounds (20)")
    parser.add_argument("--pfl-rounds", type=int, default=None, help="pfl_cifar rounds (10)")
    parser.add_argument("--blazefl-rounds", type=int, default=None,
                        help="blazefl_cnn rounds (its 5)")
    parser.add_argument("--peers", nargs="+", default=["flute_lr", "blazefl_cnn", "pfl_cifar"],
                        help="peer workloads: all three (default) or blazefl_cnn alone")
    args = parser.parse_args()
    args.sizes = args.sizes or ([1000, 10_000] if args.quick else [10**3, 10**4, 10**5, 10**6])
    args.rounds = args.rounds or (5 if args.quick else 20)
    args.pfl_rounds = args.pfl_rounds or (3 if args.quick else 10)
    args.blazefl_rounds = args.blazefl_rounds or (2 if args.quick else 5)
    results: dict[str, Any] = {}
    checks: list[Check] = []
    name = "population" if set(args.parts) == set(PARTS) else "_".join(["population", *args.parts])
    if "peers" in args.parts and len(args.peers) < 3:
        name = "_".join([name, *args.peers])
    with tempfile.TemporaryDirectory(prefix="fb-population-") as tmp:
        for part in args.parts:
            try:
                results[part], more = PARTS[part](args, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - the other parts still run and are saved
                results[part], more = {"error": f"{type(exc).__name__}: {exc}"[:2000]}, []
                print(f"part {part} failed: {results[part]['error']}", flush=True)
            checks += more
            _drop_run_dirs(results[part])
            # Saved after every part: a late failure keeps the finished parts.
            save(name, args.quick, {"results": results}, checks)
    tables(results)
    print_checks(checks)
    return 0


def _drop_run_dirs(tree: Any) -> None:
    """Temporary run folders are gone once the run ends: not worth keeping in the JSON."""
    if isinstance(tree, dict):
        tree.pop("run_dir", None)
        for v in tree.values():
            _drop_run_dirs(v)


if __name__ == "__main__":
    sys.exit(main())
