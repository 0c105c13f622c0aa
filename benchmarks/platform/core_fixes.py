"""Before/after ratios of flowerbed's own per-process and per-message costs.

Each "before" re-creates the replaced code path next to the current one, and
the two alternate in one process (A B A B ...), so the ratio is robust to load:

* **worker start-up**: a fresh Python process imports the generic ClientApp,
  answers ``query.setup`` and one ``train`` message of the quickstart
  scenario (the first work a Ray worker does). *Before*: every plugin module
  imported first (the old ``build_client_app`` did ``load_plugins()``).
  *After*: only the modules the scenario names. Wall time and peak RSS of the
  child process.
* **broadcast packing**: ``Federation.ask`` building N messages that carry
  the same arrays. *Before*: the arrays serialised once per client. *After*:
  once per ask, the record shared.
* **client lookup per message**: what ``handle`` does before calling the
  learner. *Before*: the scenario text read through
  ``state.config_records`` (a copy of the map) and the data-cache key
  (``model_dump`` of four blocks + ``json.dumps``) per message. *After*: the
  record read in place, the data memoised per scenario text.
* **delivery sweep**: one pass of the simulation engine's delivery loop
  (``get_message_ins(node, limit=1)`` for every node, done every 0.1 s) with
  1,000 nodes and 1,000 delivered messages awaiting replies. *Before*:
  Flower's ``InMemoryLinkState``, which walks the whole store per node.
  *After*: flowerbed's ``IndexedLinkState`` (undelivered ids per node).
* **array codec**: encoding and decoding one MLP update's four arrays.
  *Before*: Flower's ``Array(ndarray)`` / ``Array.numpy()`` (``np.save`` /
  ``np.load``, which parse the ``.npy`` header each time). *After*:
  ``encode_array`` / ``decode_array`` (same bytes, header cached per dtype
  and shape).
* **torch seeding** before a client trains. *Before*: ``torch.manual_seed``
  (which also queues a CUDA seeding with a stack trace). *After*:
  ``seed_torch`` (CPU generator; CUDA's only on a GPU). Same numbers.

Run ``python benchmarks/platform/core_fixes.py`` (full) or ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import Check, load_avg, median, print_checks, print_table, save

ROOT = Path(__file__).resolve().parents[2]

_WORKER = r"""
import json, resource, sys, time
start = time.perf_counter()
eager = sys.argv[1] == "before"
if eager:
    from flowerbed.core.plugins import load_plugins
    load_plugins()
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flowerbed.clients.client_app import app
from flowerbed.core import keys
from flowerbed.core.messages import Payload
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
if eager:
    from flowerbed.core.scenario import validate_scenario
    import yaml
    validate_scenario(yaml.safe_load(sys.argv[2]))
scenario_yaml, init = sys.argv[2], json.loads(sys.argv[3])
context = Context(run_id=1, node_id=1, node_config={keys.PARTITION_ID: 0},
                  state=RecordDict(), run_config={})
def ask(message_type, payload):
    msg = Message(payload.to_record(), dst_node_id=1, message_type=message_type)
    return Payload.from_record(app(msg, context).content)
ask(keys.SETUP, Payload(config={keys.SCENARIO_YAML: scenario_yaml}))
import numpy as np
arrays = {k: np.asarray(v, dtype=np.float32) for k, v in init.items()}
reply = ask("train", Payload(arrays=arrays, config={keys.SERVER_ROUND: 1}))
assert reply.num_examples > 0, reply
took = time.perf_counter() - start
mods = sum(1 for m in sys.modules if m.startswith("flowerbed."))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"s": took, "maxrss_mib": rss,
                  "flowerbed_modules": mods}))
"""


def quickstart() -> Any:
    """The quickstart scenario (digits, MLP, sgd learner, FedAvg)."""
    from flowerbed.core.scenario import load_scenario

    return load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["baselines=[]"])


def worker_startup(repeats: int) -> dict[str, Any]:
    """Fresh-process start-up of the ClientApp, eager plugins vs lazy, alternated."""
    from flowerbed.core import registry
    from flowerbed.core.seeds import derive_seed

    scenario = quickstart()
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    from flowerbed.data.federated import federated_data

    meta = federated_data(scenario).dataset.meta
    init = learner.init_arrays(meta, derive_seed(scenario.seed, "init"))
    init_json = json.dumps({k: v.tolist() for k, v in init.items()})
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(repeats):
        for mode in ("before", "after") if i % 2 == 0 else ("after", "before"):
            out = subprocess.run(
                [sys.executable, "-c", _WORKER, mode, scenario.to_yaml(), init_json],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if out.returncode != 0:
                raise RuntimeError(f"worker ({mode}) failed:\n{out.stderr[-2000:]}")
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            rec["load"] = load_avg()
            runs[mode].append(rec)
            print(f"  worker {mode}: {rec}", file=sys.stderr)
    return runs


def broadcast(clients: int, repeats: int) -> dict[str, float]:
    """ms to pack one ask's messages for ``clients`` clients (median), before vs after."""
    from flowerbed.core.messages import Payload

    body = Payload(arrays={"w": np.linspace(0, 1, 1000, dtype=np.float32)})
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(repeats):
        for mode in ("before", "after") if i % 2 == 0 else ("after", "before"):
            start = time.perf_counter()
            shared = body.to_array_record() if mode == "after" else None
            for pid in range(clients):
                config = {**body.config, "server-round": pid}
                Payload(body.arrays, config, body.metrics, body.num_examples).to_record(shared)
            times[mode].append(1e3 * (time.perf_counter() - start))
    return {k: median(v) for k, v in times.items()}


def lookup(repeats: int, messages: int) -> dict[str, float]:
    """µs per message of the client-side lookups ``handle`` does, before vs after."""
    from flwr.app import ConfigRecord, RecordDict

    from flowerbed.clients import client_app
    from flowerbed.core import keys
    from flowerbed.data.federated import federated_data

    scenario = quickstart()
    text = scenario.to_yaml()
    state = RecordDict()
    state["flowerbed"] = ConfigRecord({keys.SCENARIO_YAML: text})
    client_app._data(text)  # build once (both ways share the process cache)

    def before(pid: int) -> Any:
        yaml_text = str(state.config_records["flowerbed"][keys.SCENARIO_YAML])
        return federated_data(client_app._scenario(yaml_text)).client(pid)

    def after(pid: int) -> Any:
        yaml_text = str(state["flowerbed"][keys.SCENARIO_YAML])  # type: ignore[index]
        return client_app._data(yaml_text).client(pid)

    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(repeats):
        for mode in ("before", "after") if i % 2 == 0 else ("after", "before"):
            fn = before if mode == "before" else after
            start = time.perf_counter()
            for m in range(messages):
                fn(m % scenario.num_clients)
            times[mode].append(1e6 * (time.perf_counter() - start) / messages)
    return {k: median(v) for k, v in times.items()}


def delivery_sweep(nodes: int, repeats: int) -> dict[str, float]:
    """ms for one sweep of the simulation's delivery loop, Flower's state vs the indexed one.

    Every node has one message that was already delivered and awaits its reply:
    the state of a round in progress, when the loop finds nothing new to hand
    out. The sweep is what Flower's loop does every 0.1 s: ``get_message_ins``
    for each node, ``limit=1``.
    """
    from flwr.app import Message, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.supercore.task_identity import TaskIdentity

    from flowerbed.platform.linkstate import IndexedLinkStateFactory, simulation_state

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 2, 1, SUPERLINK_NODE_ID
    states = {}
    for mode, factory in (("before", LinkStateFactory), ("after", IndexedLinkStateFactory)):
        grid, ids = simulation_state(factory, nodes, run_id=1, task_id=2)
        grid.push_messages([Message(RecordDict(), node, "train") for node in ids])
        for node in ids:
            assert len(grid.state.get_message_ins(node_id=node, limit=1)) == 1
        states[mode] = (grid.state, ids)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(repeats):
        for mode in ("before", "after") if i % 2 == 0 else ("after", "before"):
            state, ids = states[mode]
            start = time.perf_counter()
            for node in ids:
                state.get_message_ins(node_id=node, limit=1)
            times[mode].append(1e3 * (time.perf_counter() - start))
    return {k: median(v) for k, v in times.items()}


def codec(repeats: int, messages: int) -> dict[str, float]:
    """µs to encode and decode one MLP update's arrays (Flower's codec vs flowerbed's)."""
    from flwr.app import Array, ArrayRecord

    from flowerbed.core.messages import decode_array, encode_array

    rng = np.random.default_rng(0)
    weights = {
        "0.weight": rng.normal(size=(64, 20)).astype(np.float32),
        "0.bias": rng.normal(size=64).astype(np.float32),
        "2.weight": rng.normal(size=(4, 64)).astype(np.float32),
        "2.bias": rng.normal(size=4).astype(np.float32),
    }

    def before() -> Any:
        record = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in weights.items()})
        return {k: a.numpy() for k, a in record.items()}

    def after() -> Any:
        record = ArrayRecord({k: encode_array(v) for k, v in weights.items()})
        return {k: decode_array(a) for k, a in record.items()}

    return _alternate({"before": before, "after": after}, repeats, messages)


def seeding(repeats: int, calls: int) -> dict[str, float]:
    """µs per torch seeding before a client trains (``torch.manual_seed`` vs ``seed_torch``)."""
    import torch

    from flowerbed.clients.torch_learner import seed_torch

    cpu = torch.device("cpu")
    fns = {"before": lambda: torch.manual_seed(1), "after": lambda: seed_torch(1, cpu)}
    return _alternate(fns, repeats, calls)


def _alternate(fns: dict[str, Any], repeats: int, calls: int) -> dict[str, float]:
    """Median µs per call of each function, the two alternated (A B, B A, ...)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(repeats):
        for mode in list(fns) if i % 2 == 0 else list(fns)[::-1]:
            start = time.perf_counter()
            for _ in range(calls):
                fns[mode]()
            times[mode].append(1e6 * (time.perf_counter() - start) / calls)
    return {k: median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure every before/after pair and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    reps = 2 if args.quick else 4
    load_start = load_avg()
    workers = worker_startup(reps)
    pack = broadcast(1000, 5 if args.quick else 11)
    look = lookup(5 if args.quick else 11, 500)
    sweep = delivery_sweep(1000, 3 if args.quick else 5)
    arrays = codec(5 if args.quick else 11, 200)
    seeds = seeding(5 if args.quick else 11, 200)
    w = {m: {k: median(r[k] for r in workers[m]) for k in workers[m][0]} for m in workers}
    rows = [
        ["worker start-up s (import, setup, 1st train)", w["before"]["s"], w["after"]["s"]],
        ["worker peak RSS MiB", w["before"]["maxrss_mib"], w["after"]["maxrss_mib"]],
        ["flowerbed modules imported", w["before"]["flowerbed_modules"],
         w["after"]["flowerbed_modules"]],
        ["broadcast packing ms / ask (1,000 clients, 1,000 floats)",
         pack["before"], pack["after"]],
        ["client lookup µs / message", look["before"], look["after"]],
        ["delivery sweep ms (1,000 nodes, 1,000 messages in flight)",
         sweep["before"], sweep["after"]],
        ["array codec µs / MLP update (encode + decode, 4 arrays)",
         arrays["before"], arrays["after"]],
        ["torch seeding µs / training call", seeds["before"], seeds["after"]],
    ]
    rows = [[*r, r[2] / r[1]] for r in rows]
    print_table(
        f"flowerbed's own costs, before / after (alternated; load {load_start}-{load_avg()})",
        ["figure", "before", "after", "after / before"],
        rows,
    )
    checks = [
        Check("core fixes: worker start-up after / before", rows[0][3], 1.0),
        Check("core fixes: worker peak RSS after / before", rows[1][3], 1.0),
        Check("core fixes: broadcast packing after / before", rows[3][3], 1.0),
        Check("core fixes: client lookup after / before", rows[4][3], 1.0),
        Check("core fixes: delivery sweep after / before", rows[5][3], 1.0),
        Check("core fixes: array codec after / before", rows[6][3], 1.0),
        Check("core fixes: torch seeding after / before", rows[7][3], 1.0),
    ]
    print_checks(checks)
    payload = {
        "workers": workers,
        "broadcast_ms": pack,
        "lookup_us": look,
        "delivery_sweep_ms": sweep,
        "codec_us": arrays,
        "seeding_us": seeds,
        "rows": rows,
        "load_start": load_start,
        "load_end": load_avg(),
    }
    save("core_fixes", args.quick, payload, checks)
    return payload


if __name__ == "__main__":
    main()
