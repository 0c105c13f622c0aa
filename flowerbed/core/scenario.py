"""Scenario schema: strict, frozen pydantic models built from the registry.

Reading files and overrides is :mod:`flowerbed.core.scenario_text`'s and the
one-line problem reports are :mod:`flowerbed.core.scenario_checks`'s; the
names code uses from both are re-exported here, so ``flowerbed.core.scenario``
stays the one place to import a scenario's API from.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from flowerbed.core import registry
from flowerbed.core.attacks import AttackParams, NoAttack
from flowerbed.core.availability import AvailabilityParams
from flowerbed.core.checkpoints import CheckpointConfig
from flowerbed.core.registry import Params
from flowerbed.core.scenario_checks import (
    COMPONENT_FIELDS,
    LIST_COMPONENT_FIELDS,
    capability_problems,
    checkpoint_problems,
    component_problems,
    validation_line,
)
from flowerbed.core.scenario_text import (
    DuplicateKeyError,
    ScenarioError,
    apply_overrides,
    load_yaml,
    parse_override,
    read_yaml,
)
from flowerbed.core.sinks import JSONL

__all__ = [
    "COMPONENT_FIELDS",
    "LIST_COMPONENT_FIELDS",
    "ClientResources",
    "ClientsConfig",
    "DuplicateKeyError",
    "Engine",
    "FederationConfig",
    "MetricsConfig",
    "Scenario",
    "ScenarioBase",
    "ScenarioError",
    "apply_overrides",
    "checkpoint_problems",
    "from_dict",
    "load_scenario",
    "load_yaml",
    "parse_override",
    "produced_metrics",
    "read_yaml",
    "scenario_model",
    "summary_problem",
    "validate_scenario",
]

class ClientResources(Params):
    """Resources Ray reserves for each simulated client (fractions allowed)."""

    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)


class Engine(Params):
    """How the federation executes: Flower simulation on Ray, in one process, or deployed.

    ``deployment`` runs ``flwr run`` against the SuperLink named ``connection``
    in ``<flwr_home>/config.toml`` (default ``$FLWR_HOME``, else ``~/.flwr``).
    """

    name: Literal["simulation", "inline", "deployment"] = "simulation"
    backend: Literal["auto", "process", "ray"] = Field(
        "auto",
        description="what runs the simulation's clients: local worker processes or Ray actors; "
        "auto: Ray when RAY_ADDRESS (or `flowerbed up`) names a cluster or a client asks for "
        "a GPU, else processes",
    )
    client_resources: ClientResources = ClientResources()
    ray_num_cpus: int | None = Field(
        None, ge=1, description="CPUs the simulation may use, either backend (default: all)"
    )
    connection: str = Field(
        "flowerbed-local", description="SuperLink connection name (deployment engine)"
    )
    flwr_home: str | None = Field(
        None, description="folder holding the CLI's config.toml (deployment engine)"
    )
    clients: Literal["auto", "nodes", "virtual"] = Field(
        "auto",
        description="how clients map to Flower nodes (simulation, inline): nodes, one node per "
        "client; virtual, a few worker nodes and the client id in each message; auto: virtual "
        "above 1,000 clients (see flowerbed.core.population); deployment always uses nodes",
    )

    @model_validator(mode="after")
    def _gpus_need_ray(self) -> Engine:
        if self.backend == "process" and self.client_resources.num_gpus > 0:
            raise ValueError(
                "engine.backend=process does not place clients on GPUs "
                "(engine.client_resources.num_gpus > 0): use backend ray or auto"
            )
        return self

    @model_validator(mode="after")
    def _virtual_clients_simulated(self) -> Engine:
        if self.name == "deployment" and self.clients == "virtual":
            raise ValueError(
                "engine.clients=virtual: a deployment keeps one SuperNode per client; "
                "use clients: auto or nodes"
            )
        return self

    def simulation_backend(self) -> str:
        """``process`` or ``ray``: what runs a ``simulation`` run's clients (``auto`` resolved).

        Read while the run starts, after ``flowerbed up``'s head has been put
        in ``RAY_ADDRESS``.
        """
        if self.backend != "auto":
            return self.backend
        if os.environ.get("RAY_ADDRESS") or self.client_resources.num_gpus > 0:
            return "ray"
        return "process"


class FederationConfig(Params):
    """Round-level messaging rules shared by every strategy."""

    timeout: float = Field(600.0, gt=0, description="seconds to wait for replies")
    min_replies: float = Field(
        1,
        gt=0,
        description="minimum successful replies per ask; a value < 1 is a fraction",
    )


class ClientsConfig(Params):
    """Per-client data handling and availability common to all datasets."""

    local_test_fraction: float = Field(
        0.2, ge=0, lt=1, description="share of each client's rows held out for its own evaluation"
    )
    availability: AvailabilityParams = AvailabilityParams()
    keep_state: bool = Field(
        True,
        description="keep each client's persistent state folder after the run "
        "(run folder's client_state/, or the SuperNode's state-dir); false deletes it at the end",
    )
    attack: AttackParams = Field(
        NoAttack(),
        description="malicious clients and their attack (see flowerbed.core.attacks)",
    )


def _metric_name(name: str) -> str:
    """A summary name: ``metric`` or ``split/metric``, no empty or space-padded part."""
    if any(not part or part != part.strip() for part in name.split("/")):
        raise ValueError(f"{name!r} is not a metric name (empty or space-padded part)")
    return name


class MetricsConfig(Params):
    """Which metrics the summary table shows and how often the server evaluates."""

    summary: tuple[Annotated[str, AfterValidator(_metric_name)], ...] = Field(
        ("accuracy", "loss"),
        description="metrics the summary table shows: a bare name is the test metric "
        "(accuracy: test/accuracy), split/name another split's or phase's",
    )
    eval_every: int = Field(1, ge=1, description="server evaluation every N rounds (and the last)")

    def summary_keys(self) -> dict[str, str]:
        """Each summary name -> its metric key: a bare name is ``test/<name>``."""
        return {k: k if "/" in k else f"test/{k}" for k in self.summary}


def produced_metrics(summary: dict[str, Any], rows: list[dict[str, Any]]) -> set[str]:
    """Metric keys (``split/metric``) a finished run produced, in any phase or result.

    ``summary`` is ``summary.json``'s content; ``rows`` are ``metrics.jsonl``'s
    rows, whose values are named ``<phase>/<split>/<metric>``.
    """
    results = (summary.get("results") or {}).values()
    found = {k for values in results if isinstance(values, dict) for k in values}
    for row in rows:
        if "event" not in row:
            found |= {k.split("/", 1)[1] for k in row if k.count("/") >= 2}
    return found


def summary_problem(
    config: MetricsConfig, summary: dict[str, Any], rows: list[dict[str, Any]]
) -> str | None:
    """One line naming the ``metrics.summary`` names no phase of the run produced, or ``None``.

    Which metrics a run produces depends on its strategy, learner and data,
    so this is checked once the run is over (everything is saved by then);
    the line lists what the run does have, to pick from.
    """
    produced = produced_metrics(summary, rows)
    missing = [name for name, key in config.summary_keys().items() if key not in produced]
    if not missing:
        return None
    names = ", ".join(repr(n) for n in missing)
    return (
        f"metrics.summary: no phase produced {names}; "
        f"this run has: {', '.join(sorted(produced)) or '(no metrics)'}"
    )


class ScenarioBase(Params):
    """Fields every scenario has; component fields are added by :func:`scenario_model`."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the scenario's name: its run folders go to <output_dir>/<name>/",
    )
    description: str = Field("", description="free text about the scenario (not in the digest)")
    seed: int = Field(0, ge=0, description="the root seed every random choice derives from")
    num_clients: int = Field(10, ge=1, description="clients (partitions) in the federation")
    rounds: int = Field(1, ge=1, description="server rounds of a round-based strategy")
    engine: Engine = Engine()
    federation: FederationConfig = FederationConfig()
    clients: ClientsConfig = ClientsConfig()
    metrics: MetricsConfig = MetricsConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    output_dir: str = Field("runs", description="root folder of run folders")
    # Component fields; :func:`scenario_model` narrows each to the union of the
    # registered parameter models, discriminated by ``name``.
    dataset: Params = Field(description="where the rows come from")
    partition: Params = Field(description="how the training rows are split over the clients")
    model: Params | None = Field(
        None, description="the network a weights learner trains (none for learners without one)"
    )
    learner: Params = Field(description="what runs on each client")
    strategy: Params = Field(description="what runs on the server")
    baselines: list[Params] = Field(
        [], description="run beside the federation, on identical data and seeds"
    )
    #: Where rows go besides ``metrics.jsonl`` (``jsonl``, always on: added
    #: when not listed, so the resolved scenario names every sink).
    sinks: list[Params] = Field([], description="where rows go besides the run folder")

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _component_shorthand(cls, data: Any) -> Any:
        """Accept ``learner: mlp`` for ``learner: {name: mlp}``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        # Written here, not as a field default, so it is validated like any block.
        data.setdefault("partition", {"name": "iid"})
        for key in COMPONENT_FIELDS:
            if isinstance(data.get(key), str):
                data[key] = {"name": data[key]}
        for key in LIST_COMPONENT_FIELDS:
            if isinstance(data.get(key), list):
                data[key] = [{"name": v} if isinstance(v, str) else v for v in data[key]]
        sinks = data.get("sinks", [])
        if isinstance(sinks, list) and not any(
            isinstance(s, dict) and s.get("name") == JSONL for s in sinks
        ):
            # Appended, not prepended: the listed sinks keep their indices in errors.
            data["sinks"] = [*sinks, {"name": JSONL}]
        return data

    def component(self, field: str) -> Params:
        """The validated params of component ``field`` (e.g. ``"learner"``)."""
        value: Params = getattr(self, field)
        return value

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the form written to ``scenario.resolved.yaml``)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The fully resolved scenario, every default spelt out."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def digest(self) -> str:
        """Short hash of what decides the run's numbers (stable across processes).

        Left out, because they never change a result: where the run folder
        goes (``output_dir``), ``description``, ``clients.keep_state``, the
        summary table's columns (``metrics.summary``), where results are
        tracked besides the run folder (``sinks``), checkpoints (a resumed
        run ends bit for bit where an uninterrupted one does) and the engine (inline,
        simulation and deployment give the same numbers: see
        ``tests/test_simulation.py`` and ``tests/test_deploy.py``). Whether
        clients ask for a GPU stays in: on a GPU they compute differently.
        So a sweep resumes however its output folder is spelt or wherever
        it was moved, and equal digests mean equal results.
        """
        data = self.to_dict()
        for key in ("output_dir", "description", "engine", "sinks", "checkpoint"):
            data.pop(key, None)
        data["clients"].pop("keep_state", None)
        if data["clients"].get("attack") == {"name": "none"}:
            data["clients"].pop("attack")  # digests from before attacks existed still hold
        data["metrics"].pop("summary", None)
        data["clients_use_gpu"] = self.engine.client_resources.num_gpus > 0
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


# ``Scenario`` is the static type code annotates with; instances are of the
# dynamic subclass built from the registry, so components validate by name.
Scenario = ScenarioBase


def _union(kind: str) -> Any:
    models = [e.params for e in registry.entries(kind)]
    if not models:
        return Params
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007


@functools.cache
def scenario_model() -> type[ScenarioBase]:
    """The scenario model for everything registered (plugins are imported first)."""
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    fields: dict[str, Any] = {
        "dataset": (_union("dataset"), ...),
        "partition": (_union("partition"), ...),
        "model": (_union("model") | None, None),
        "learner": (_union("learner"), ...),
        "strategy": (_union("strategy"), ...),
        "baselines": (list[_union("baseline")], []),  # type: ignore[misc]
        "sinks": (list[_union("sink")], []),  # type: ignore[misc]
    }
    model: type[ScenarioBase] = create_model(  # type: ignore[call-overload]
        "Scenario", __base__=ScenarioBase, **fields
    )
    return model


def validate_scenario(data: Any, source: str = "scenario") -> ScenarioBase:
    """Validate plain data into a scenario or raise :class:`ScenarioError`."""
    model = scenario_model()
    if not isinstance(data, dict):
        raise ScenarioError(["(top level): a scenario must be a YAML mapping"], source)
    try:
        scenario = model.model_validate(data)
    except ValidationError as exc:
        problems = [validation_line(dict(e), model, data) for e in exc.errors()]
        raise ScenarioError(list(dict.fromkeys(problems)), source) from None
    problems = capability_problems(scenario) + component_problems(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> ScenarioBase:
    """Load a scenario YAML file, apply ``--set`` overrides and validate it.

    Examples
    --------
    >>> s = load_scenario("scenarios/quickstart.yaml", ["rounds=2"])  # doctest: +SKIP
    >>> s.rounds  # doctest: +SKIP
    2
    """
    data = apply_overrides(read_yaml(path), overrides or [])
    return validate_scenario(data, str(path))


def from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> ScenarioBase:
    """Validate a scenario given as a Python mapping (the API's entry point)."""
    return validate_scenario(apply_overrides(data, overrides or []))
