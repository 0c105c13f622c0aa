"""Write ``flowerbed/strategies/flower_catalog.py`` from the installed Flower's signatures.

Usage: ``.venv/bin/python scripts/gen_flower_catalog.py`` (then ``ruff format`` is not
needed: the output is already formatted). ``tests/test_flower_strategies.py`` fails
when the committed table and Flower's constructors disagree.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import flwr
import flwr.serverapp.strategy as flower

#: registry name -> Flower class, for the strategies flowerbed runs by name.
NAMES = {
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "fedavgm": "FedAvgM",
    "fedadam": "FedAdam",
    "fedyogi": "FedYogi",
    "fedadagrad": "FedAdagrad",
    "qfedavg": "QFedAvg",
    "krum": "Krum",
    "multikrum": "MultiKrum",
    "bulyan": "Bulyan",
    "fedmedian": "FedMedian",
    "fedtrimmedavg": "FedTrimmedAvg",
}
#: registry name -> Flower class, for the differential-privacy wrappers (an inner strategy).
WRAPPERS = {
    "dp_server_fixed": "DifferentialPrivacyServerSideFixedClipping",
    "dp_server_adaptive": "DifferentialPrivacyServerSideAdaptiveClipping",
    "dp_client_fixed": "DifferentialPrivacyClientSideFixedClipping",
    "dp_client_adaptive": "DifferentialPrivacyClientSideAdaptiveClipping",
}
OUT = Path(__file__).resolve().parents[1] / "flowerbed" / "strategies" / "flower_catalog.py"


def type_name(annotation: Any) -> str:
    """``float``, ``int``, ``str``, ``bool``, ``float | None`` or ``callable``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    text = text.replace("NoneType", "None")
    if "Callable" in text:
        return "callable"
    return text


def parameters(cls: type) -> list[tuple[str, str, Any]]:
    """``(name, type, default)`` of every constructor parameter; ``REQUIRED`` when none."""
    rows = []
    for p in inspect.signature(cls.__init__).parameters.values():  # type: ignore[misc]
        if p.name == "self":
            continue
        default = "REQUIRED" if p.default is inspect.Parameter.empty else p.default
        rows.append((p.name, type_name(p.annotation), default))
    return rows


def mean_aggregating() -> list[str]:
    """Names whose Flower class aggregates with ``FedAvg.aggregate_train`` itself."""
    return [
        name
        for name, cls_name in NAMES.items()
        if getattr(flower, cls_name).aggregate_train is flower.FedAvg.aggregate_train
    ]


def table(names: dict[str, str]) -> list[str]:
    """The lines of one ``name -> (class, parameters)`` dict literal's entries."""
    lines = []
    for name, cls_name in names.items():
        lines.append(f"    {name!r}: (")
        lines.append(f"        {cls_name!r},")
        lines.append("        (")
        for pname, ptype, default in parameters(getattr(flower, cls_name)):
            value = "REQUIRED" if default == "REQUIRED" else repr(default)
            lines.append(f"            ({pname!r}, {ptype!r}, {value}),")
        lines.append("        ),")
        lines.append("    ),")
    return lines


def render() -> str:
    """The catalog module's source."""
    lines = [
        f'"""Constructors of Flower {flwr.__version__} message-API strategies '
        "(generated; do not edit).",
        "",
        "Written by ``scripts/gen_flower_catalog.py`` from ``inspect.signature``;",
        "``tests/test_flower_strategies.py`` checks it against the installed Flower.",
        "Read by :mod:`flowerbed.strategies.flower_strategies`, which must not import",
        "Flower to build the scenario schema.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f"FLOWER_VERSION = {flwr.__version__!r}",
        "#: The default of a parameter that has none.",
        'REQUIRED = "REQUIRED"',
        "",
        "#: registry name -> (Flower class, ((parameter, type, default), ...)).",
        "STRATEGIES: dict[str, tuple[str, tuple[tuple[str, str, object], ...]]] = {",
    ]
    lines += table(NAMES)
    lines.append("}")
    lines += [
        "#: The differential-privacy wrappers, same layout (their first parameter is the",
        "#: inner strategy).",
        "WRAPPERS: dict[str, tuple[str, tuple[tuple[str, str, object], ...]]] = {",
        *table(WRAPPERS),
        "}",
        "#: Strategies whose Flower class aggregates with ``FedAvg.aggregate_train`` itself",
        "#: (a plain weighted mean of the replies).",
        f"MEAN_AGGREGATING = {tuple(mean_aggregating())!r}",
    ]
    return "\n".join(lines).replace("'", '"') + "\n"


def main() -> int:
    """Write the catalog; with ``--check``, exit 1 when the committed one differs."""
    text = render()
    if "--check" in sys.argv[1:]:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
