"""Virtual clients: when a run's clients are Flower nodes, and when they are ids in messages.

With one Flower node per client (``engine.clients: nodes``), every client is
registered, handed a node context and sent a setup message before round 1:
start-up grows with the population (about 5 ms per client on two cores). With
virtual clients (``engine.clients: virtual``) the simulation registers only a
few *worker nodes*, one per client that can run at once; each message carries
the partition id it is for, and the client materialises that partition's data
and state on demand. Nothing is built per client up front, so start-up and
memory do not grow with ``num_clients``.

``auto`` (the default) picks virtual clients above :data:`AUTO_VIRTUAL_ABOVE`
clients on ``simulation`` and ``inline``; every population up to that keeps
one node per client, as before. Both modes give identical results for the
same scenario and seed (``tests/test_population.py``). ``deployment`` always
keeps one SuperNode per client.

Examples
--------
>>> from types import SimpleNamespace as NS
>>> engine = NS(name="simulation", clients="auto", ray_num_cpus=2,
...             client_resources=NS(num_cpus=1.0))
>>> virtual_clients(NS(engine=engine, num_clients=1000))
False
>>> virtual_clients(NS(engine=engine, num_clients=1001))
True
>>> flower_nodes(NS(engine=engine, num_clients=10**6))
2
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario

#: ``engine.clients: auto`` uses virtual clients above this many clients.
AUTO_VIRTUAL_ABOVE = 1000

#: Virtual node ids a Flower strategy sees are this plus the partition id.
#: They never reach Flower's LinkState: the federation swaps in a worker node.
VIRTUAL_NODE_BASE = 1 << 52


def virtual_clients(scenario: Scenario) -> bool:
    """Whether ``scenario`` runs virtual clients (see the module docstring)."""
    engine = scenario.engine
    if engine.name == "deployment":
        return False
    if engine.clients == "auto":
        return scenario.num_clients > AUTO_VIRTUAL_ABOVE
    return engine.clients == "virtual"


def _cpus(scenario: Scenario) -> int:
    if scenario.engine.ray_num_cpus:
        return int(scenario.engine.ray_num_cpus)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def flower_nodes(scenario: Scenario) -> int:
    """Flower nodes the engine registers: one per client, or the worker nodes.

    Virtual clients get one worker node per client that can run at once
    (the CPUs over ``engine.client_resources.num_cpus``; one inline), at
    most ``num_clients``. Any worker node may serve any client.
    """
    if not virtual_clients(scenario):
        return scenario.num_clients
    if scenario.engine.name == "inline":
        return 1
    per_client = scenario.engine.client_resources.num_cpus
    return max(1, min(scenario.num_clients, math.floor(_cpus(scenario) / per_client)))
