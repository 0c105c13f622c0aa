"""Import every module that registers components (explicit, no filename magic).

:func:`load_plugins` imports them all (the CLI, the scenario schema).
:func:`import_component` imports only the module that registers one name,
found by reading the modules' source (:func:`component_index`); the registry
uses it on a miss, so client processes import just what their scenario names.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from pathlib import Path

#: Modules whose import registers datasets, partitioners, models, learners,
#: strategies and baselines. Add a method's modules here.
PLUGIN_MODULES = (
    # data: datasets and partitioners
    "flowerbed.data.sklearn_data",
    "flowerbed.data.partitioners",
    "flowerbed.data.synthetic_regression",
    "flowerbed.data.feature_partitions",
    "flowerbed.data.domain_shift",
    "flowerbed.data.statsmodels_data",
    "flowerbed.data.image_data",
    "flowerbed.data.table_data",
    "flowerbed.data.har_data",
    "flowerbed.data.gaussian_mixture",
    "flowerbed.data.synthetic_ridge",
    "flowerbed.data.frontier_tasks",
    "flowerbed.data.sequence_tasks",
    # models and learners
    "flowerbed.models.models",
    "flowerbed.models.vlm_two_tower",
    "flowerbed.models.vlm_open_clip",
    "flowerbed.clients.torch_learner",
    "flowerbed.clients.self_distill_learner",
    "flowerbed.clients.fault_injection",
    "flowerbed.clients.fqr_learner",
    "flowerbed.clients.slot_align_learner",
    "flowerbed.clients.frontier_learner",
    "flowerbed.clients.pruned_learner",
    "flowerbed.models.sequence_models",
    # strategies
    "flowerbed.strategies.fedavg",
    "flowerbed.strategies.fqr",
    "flowerbed.strategies.oneshot_average",
    "flowerbed.strategies.slot_align",
    "flowerbed.strategies.frontier",
    # baselines
    "flowerbed.platform.baselines",
    # FedSPA: the learner reads the vlm union at import, so it comes after the vlm modules
    "flowerbed.data.fewshot",
    "flowerbed.clients.fedspa_learner",
    "flowerbed.strategies.fedspa",
    "flowerbed.models.early_exit",
    "flowerbed.clients.early_exit_learner",
    "flowerbed.data.mi_synthetic",
    "flowerbed.clients.infoatlas_learner",
    "flowerbed.strategies.infoatlas",
)


@functools.cache
def load_plugins() -> None:
    """Import all plugin modules once."""
    for name in PLUGIN_MODULES:
        importlib.import_module(name)


#: Calls that register a component: ``name(kind, component_name, ...)``, or
#: ``name(component_name, ...)`` for helpers whose kind is fixed.
_REGISTERING_CALLS = {"register": None, "register_hint": None, "register_with_extra": "dataset"}


@functools.cache
def component_index() -> dict[tuple[str, str], str]:
    """``(kind, name)`` -> the plugin module that registers it, read from source.

    The modules are parsed, not imported, so a process can import only the
    modules a scenario names (:func:`import_component`). Registrations the
    parser cannot see (names computed at run time) are simply absent; callers
    then fall back to :func:`load_plugins`.
    """
    index: dict[tuple[str, str], str] = {}
    for module in PLUGIN_MODULES:
        for kind, name in _registrations(module):
            index.setdefault((kind, name), module)
    return index


def _registrations(module: str) -> list[tuple[str, str]]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        fname = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if fname not in _REGISTERING_CALLS:
            continue
        fixed = _REGISTERING_CALLS[fname]
        args = [a.value if isinstance(a, ast.Constant) else None for a in node.args[:2]]
        if fixed is not None and args and isinstance(args[0], str):
            found.append((fixed, args[0]))
        elif fixed is None and len(args) == 2 and all(isinstance(a, str) for a in args):
            found.append((str(args[0]), str(args[1])))
    return found


def import_component(kind: str, name: str) -> bool:
    """Import the plugin module that registers ``(kind, name)``; ``False`` if none is known.

    This is how a Ray worker loads only what its scenario uses: importing every
    plugin would pull in every optional dataset library in every worker.
    """
    module = component_index().get((kind, name))
    if module is None:
        return False
    importlib.import_module(module)
    return True


def import_kind(kind: str) -> None:
    """Import every plugin module that registers a component of ``kind``.

    For unions built at import time (a learner's ``vlm:`` or ``encoder:``
    field), which must see every registered name even in a process that
    imports only what its scenario names.
    """
    for (k, _), module in sorted(component_index().items()):
        if k == kind:
            importlib.import_module(module)
