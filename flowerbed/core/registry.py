"""Explicit registry of named components, keyed by the names scenario YAML uses."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict, create_model, model_validator

KINDS = (
    "dataset", "partition", "model", "learner", "strategy", "baseline", "encoder", "vlm", "lm",
    "sink",
)

#: Capabilities a strategy or baseline may require of the scenario's learner,
#: besides the message types it answers (``train.default``, ``query.<action>``).
SUPERVISED = "supervised"
LOCAL_TASK = "local_task"
CAPABILITY_TEXT = {
    SUPERVISED: "trainable weights (init_arrays, fit, score)",
    LOCAL_TASK: "a local task (run_local)",
}

#: Kinds of data a dataset ``provides`` and a model ``requires`` (any one of).
FEATURES = "features"
TOKENS = "tokens"
TOKEN_WINDOWS = "token_windows"
DATA_TEXT = {
    FEATURES: "numeric feature rows",
    TOKENS: "integer token sequences",
    TOKEN_WINDOWS: "language-model token windows",
}
#: What a component declares when it says nothing: almost every dataset yields
#: numeric feature rows and almost every model reads them, so only the
#: exceptions (token data, sequence models) need to say so.
_DEFAULT_PROVIDES = {"dataset": (FEATURES,)}
_DEFAULT_REQUIRES = {"model": (FEATURES,)}

#: One requirement: a capability, or a tuple of capabilities needed together.
Requirement: TypeAlias = str | tuple[str, ...]


class Params(BaseModel):
    """Base of every component's parameter model: strict, frozen, no unknown keys.

    A boolean is not a number here: pydantic would read ``rounds: true`` as 1
    and ``lr: true`` as 1.0, so a field (or an item of a list field) that takes
    numbers but not booleans refuses ``true`` / ``false``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_number(cls, data: Any) -> Any:
        """Mark booleans given for numbers, so each fails like any wrong type, at its path."""
        if not isinstance(data, dict):
            return data
        marked = dict(data)
        for name, field in cls.model_fields.items():
            key = field.alias or name
            if key in marked:
                marked[key] = _marked(field.annotation, marked[key])
        return marked


class BooleanGiven:
    """A boolean found where a number goes; no number validator accepts it.

    Its ``repr`` is what a validation error shows as the input: ``true, a boolean``.
    """

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{json.dumps(self.value)}, a boolean"


def _unwrapped(annotation: Any) -> list[Any]:
    """The types an annotation admits: ``Annotated`` metadata dropped, unions split."""
    if get_origin(annotation) is Annotated:
        return _unwrapped(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [t for arg in get_args(annotation) for t in _unwrapped(arg)]
    return [annotation]


def _marked(annotation: Any, value: Any) -> Any:
    """``value`` with each boolean given where ``annotation`` wants a number marked.

    A :class:`BooleanGiven` fails any number validator. A field (or list item)
    that takes numbers but not booleans would otherwise take them: pydantic
    reads ``rounds: true`` as 1 and ``lr: true`` as 1.0.

    Examples
    --------
    >>> _marked(int, True), _marked(float | None, False), _marked(tuple[int, ...], [64, True])
    (true, a boolean, false, a boolean, [64, true, a boolean])
    >>> _marked(bool, True), _marked(int | bool, True), _marked(Any, True), _marked(int, 3)
    (True, True, True, 3)
    >>> _marked(float | Literal["auto"], True), _marked(int | Literal[True], True)
    (true, a boolean, True)
    """
    members = _unwrapped(annotation)
    if isinstance(value, bool):
        if any(m is bool or m is Any or value in _literal_values(m) for m in members):
            return value
        return BooleanGiven(value) if any(m in (int, float) for m in members) else value
    if isinstance(value, list | tuple):
        items = [_item_type(m) for m in members if get_origin(m) in (list, tuple, set, frozenset)]
        if len(items) == 1 and items[0] is not None:
            return [_marked(items[0], v) for v in value]
    return value


def _literal_values(annotation: Any) -> tuple[Any, ...]:
    """The values of a ``Literal[...]`` (booleans kept apart from 0 and 1), else ``()``."""
    if get_origin(annotation) is not Literal:
        return ()
    return tuple(v for v in get_args(annotation) if isinstance(v, bool))


def _item_type(container: Any) -> Any:
    """The item type of ``list[T]`` / ``tuple[T, ...]`` (``None`` for fixed-length tuples)."""
    args = [a for a in get_args(container) if a is not Ellipsis]
    if len(args) == 1:
        return args[0]
    return None


@dataclass(frozen=True)
class Entry:
    """One registered component.

    Attributes
    ----------
    kind, name
        Registry coordinates; ``name`` is what a scenario writes.
    target
        The class or function that implements the component.
    params
        Pydantic model validating the component's YAML block, with a
        ``name: Literal[name]`` field added for discriminated unions.
    summary
        First line of the target's docstring, shown by ``flowerbed list``.
    requires
        For strategies and baselines: the learner must meet at least one of
        these requirements, each a capability (:data:`CAPABILITY_TEXT` or a
        message type) or a tuple of capabilities it must offer together. For
        models: the dataset must provide one of these data kinds
        (:data:`DATA_TEXT`). Empty means no requirement.
    provides
        For datasets: the data kinds (:data:`DATA_TEXT`) its rows are.
    """

    kind: str
    name: str
    target: Any
    params: type[Params]
    summary: str
    requires: tuple[Requirement, ...] = ()
    provides: tuple[str, ...] = ()


class UnknownComponentError(KeyError):
    """Raised for a name nobody registered; the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


_REGISTRY: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
_HINTS: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}

T = TypeVar("T")


def register(
    kind: str,
    name: str,
    params: type[Params] | None = None,
    requires: tuple[Requirement, ...] | None = None,
    provides: tuple[str, ...] | None = None,
) -> Callable[[T], T]:
    """Register ``target`` under ``(kind, name)``.

    Parameters
    ----------
    kind
        One of :data:`KINDS`.
    name
        The name used in scenario YAML.
    params
        Parameter model of the component; defaults to ``target.Params`` when
        the target defines one, else a model with no parameters.
    requires
        What the component needs of its counterpart (see :attr:`Entry.requires`);
        defaults to ``target.requires`` when the target defines it, else to
        numeric feature rows for a model.
    provides
        For a dataset, the data kinds it yields; defaults to
        ``target.provides``, else numeric feature rows.

    Examples
    --------
    >>> @register("baseline", "doc_example")
    ... def doc_example(ctx):
    ...     '''A baseline that does nothing.'''
    >>> get("baseline", "doc_example").summary
    'A baseline that does nothing.'
    >>> _ = unregister("baseline", "doc_example")
    """
    if kind not in _REGISTRY:
        raise ValueError(f"unknown registry kind {kind!r}; known: {', '.join(KINDS)}")

    def decorate(target: T) -> T:
        if name in _REGISTRY[kind]:
            raise ValueError(f"{kind} {name!r} is already registered")
        base: Any = params or getattr(target, "Params", None) or Params
        literal: Any = Literal[name]  # type: ignore[valid-type]
        model = cast(
            "type[Params]",
            create_model(f"{kind}:{name}", __base__=base, name=(literal, name)),
        )
        doc = (getattr(target, "__doc__", None) or "").strip().splitlines()
        summary = doc[0] if doc else ""
        needs = _declared(requires, target, "requires", _DEFAULT_REQUIRES.get(kind, ()))
        gives = _declared(provides, target, "provides", _DEFAULT_PROVIDES.get(kind, ()))
        _REGISTRY[kind][name] = Entry(kind, name, target, model, summary, needs, gives)
        return target

    return decorate


def _declared(given: tuple[Any, ...] | None, target: Any, attr: str,
              default: tuple[Any, ...]) -> tuple[Any, ...]:
    """A declaration: the one passed to :func:`register`, else the target's, else the kind's."""
    if given is not None:
        return tuple(given)
    return tuple(getattr(target, attr, None) or default)


def unregister(kind: str, name: str) -> Entry:
    """Remove and return an entry (used by tests that register throw-away parts)."""
    return _REGISTRY[kind].pop(name)


def register_hint(kind: str, name: str, hint: str) -> None:
    """Record that ``name`` exists but needs an optional extra (``hint`` says how)."""
    _HINTS[kind][name] = hint


def get(kind: str, name: str) -> Entry:
    """Return the entry for ``(kind, name)`` or raise listing the known names.

    A name not registered yet is looked up in the plugin modules: only its own
    module is imported when known, else every plugin (so errors list them all).
    """
    entries = _REGISTRY[kind]
    if name in entries:
        return entries[name]
    if name not in _HINTS[kind]:
        _import_plugin_for(kind, name)
        if name in entries:
            return entries[name]
    if name in _HINTS[kind]:
        raise UnknownComponentError(f"{kind} {name!r} is not available: {_HINTS[kind][name]}")
    raise UnknownComponentError(
        f"unknown {kind} {name!r}; known: {', '.join(sorted(entries)) or '(none)'}"
    )


def _import_plugin_for(kind: str, name: str) -> None:
    from flowerbed.core.plugins import import_component, load_plugins

    if not (import_component(kind, name) and name in _REGISTRY[kind]):
        load_plugins()


def names(kind: str) -> list[str]:
    """Sorted names registered under ``kind``."""
    return sorted(_REGISTRY[kind])


def entries(kind: str) -> list[Entry]:
    """Registered entries of ``kind`` sorted by name."""
    return [_REGISTRY[kind][n] for n in names(kind)]


def spec_union(kind: str) -> Any:
    """Discriminated union (on ``name``) of the params of every registered ``kind``.

    For a component field inside another component's params (a learner's
    ``encoder:`` or ``vlm:``). The union is fixed when it is built, so every
    module registering ``kind`` is imported first, also in a process that
    otherwise imports only what its scenario names.
    """
    from pydantic import Field

    from flowerbed.core.plugins import import_kind

    import_kind(kind)
    models = tuple(e.params for e in entries(kind))
    if not models:
        raise KeyError(f"no {kind} is registered")
    return Annotated[Union[models], Field(discriminator="name")]  # noqa: UP007


def hints(kind: str) -> dict[str, str]:
    """Names of ``kind`` that need an optional extra, with the install hint."""
    return dict(_HINTS[kind])


def name_of(spec: Params) -> str:
    """The registry name a validated params model was built for."""
    name: str = getattr(spec, "name")  # noqa: B009 - added dynamically by register()
    return name


def describe_capability(cap: str) -> str:
    """Human words for a capability name (a message type is named as a handler)."""
    return CAPABILITY_TEXT.get(cap, f"a handler for {cap!r}")


def _group(requirement: Requirement) -> tuple[str, ...]:
    return (requirement,) if isinstance(requirement, str) else tuple(requirement)


def missing_capability(kind: str, spec: Params, learner: Params) -> str | None:
    """Why the learner cannot serve component ``spec`` of ``kind``; ``None`` if it can.

    The learner's capabilities come from its class's ``capabilities()``; a
    learner class without that method is taken to offer everything.
    """
    entry = get(kind, name_of(spec))
    if not entry.requires:
        return None
    target = get("learner", name_of(learner)).target
    offered = getattr(target, "capabilities", None)
    if offered is None:
        return None
    caps = set(offered())
    groups = [_group(r) for r in entry.requires]
    if any(set(g) <= caps for g in groups):
        return None
    needs = " or ".join(" and ".join(describe_capability(c) for c in g) for g in groups)
    if len(groups) == 1 and len(groups[0]) > 1:
        lacks = " and ".join(describe_capability(c) for c in groups[0] if c not in caps)
        why = f"learner {name_of(learner)!r} lacks {lacks}"
    else:
        why = f"learner {name_of(learner)!r} has none of them"
    return f"{kind} {entry.name!r} needs a learner with {needs}; {why}"


def missing_data(kind: str, spec: Params, dataset: Params) -> str | None:
    """Why component ``spec`` of ``kind`` (a model) cannot read the dataset; ``None`` if it can.

    Decided from declarations alone (the dataset's ``provides``, the model's
    ``requires``), so validation never builds data.
    """
    entry = get(kind, name_of(spec))
    source = get("dataset", name_of(dataset))
    if not entry.requires or set(entry.requires) & set(source.provides):
        return None
    needs = " or ".join(DATA_TEXT.get(str(r), str(r)) for r in entry.requires)
    gives = " and ".join(DATA_TEXT.get(p, p) for p in source.provides) or "no declared data kind"
    return f"{kind} {entry.name!r} reads {needs}; dataset {source.name!r} gives {gives}"


def build(kind: str, spec: Params, **kwargs: Any) -> Any:
    """Instantiate the component that ``spec`` (a validated params model) names."""
    entry = get(kind, name_of(spec))
    return entry.target(spec, **kwargs)
