"""Find the modules that register components, by reading source, and import them.

Nobody lists plugin modules by hand. A module of the ``flowerbed`` package is
a plugin when its source calls ``register(kind, name, ...)`` (or one of the
helpers in :data:`_REGISTERING_CALLS`); another distribution declares its
modules as entry points in the group :data:`ENTRY_POINT_GROUP`, whose value
is a module or a package (a package's files are read the same way)::

    [project.entry-points."flowerbed.plugins"]
    myplugin = "mypkg.flowerbed_plugin"

Discovery parses files and never imports them (:func:`discover`), so a
process can import only what it uses. :func:`load_plugins` imports every
plugin (the CLI, the scenario schema); :func:`import_component` imports the
one module that registers a name; the registry uses it on a miss, so client
processes import just what their scenario names. The same reading finds the
modules that define a ``PRETRAIN_TARGET`` (:func:`pretrain_targets`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import flowerbed
from flowerbed.core import registry

logger = logging.getLogger("flowerbed.plugins")

#: Entry-point group a third-party distribution declares its plugin modules in.
ENTRY_POINT_GROUP = "flowerbed.plugins"
#: :func:`component_source` of the project's own components.
PROJECT_SOURCE = "flowerbed"
#: :func:`component_source` of a component no discovered module registers
#: (registered by a script or a test at run time).
UNKNOWN_SOURCE = "?"

#: Calls that register a component: ``name(kind, component_name, ...)``, or
#: ``name(component_name, ...)`` for helpers whose kind is fixed.
_REGISTERING_CALLS = {"register": None, "register_hint": None, "register_with_extra": "dataset"}
#: Text every file worth parsing contains: a registering call or a pretrain target.
_CANDIDATE = re.compile(r"\b(?:register(?:_hint|_with_extra)?\s*\(|PRETRAIN_TARGET\s*[:=])")
#: Defines ``register`` rather than using it; its docstring shows registering code.
_NOT_PLUGINS = frozenset({"flowerbed.core.registry"})


@dataclass(frozen=True)
class PluginModule:
    """One module that discovery read.

    Attributes
    ----------
    module
        Dotted module name.
    source
        :data:`PROJECT_SOURCE`, or the name of the distribution declaring it.
    registrations
        ``(kind, name)`` pairs its source registers with literal names.
    pretrain_target
        Name of the ``PRETRAIN_TARGET`` it defines, if any.
    declared
        Named by an entry point: imported by :func:`load_plugins` even when
        its registrations are computed at run time (invisible to the parser).
    """

    module: str
    source: str
    registrations: tuple[tuple[str, str], ...] = ()
    pretrain_target: str | None = None
    declared: bool = False


@dataclass(frozen=True)
class Discovery:
    """Everything :func:`discover` found.

    Attributes
    ----------
    modules
        Modules with registrations or a pretrain target, in import order: the
        project's sorted by name, then each entry point's (sorted by name).
    roots
        ``(module or package, source)`` of the project and of each entry
        point, to attribute a component registered by a module nobody parsed.
    """

    modules: tuple[PluginModule, ...]
    roots: tuple[tuple[str, str], ...]


@functools.cache
def discover() -> Discovery:
    """Read the project's package and every ``flowerbed.plugins`` entry point (cached).

    An entry point whose module cannot be found is logged as one warning and
    skipped; it never stops the platform.
    """
    root = Path(flowerbed.__file__).parent
    memo = _ScanMemo.load()
    modules = [m for m in _scan_package(root, flowerbed.__name__, PROJECT_SOURCE, memo)
               if m.module not in _NOT_PLUGINS]
    roots = [(flowerbed.__name__, PROJECT_SOURCE)]
    for ep in _entry_points():
        # A module read once keeps its first source (two entry points, or an
        # entry point inside the project's package, may name it again).
        seen = {m.module for m in modules}
        found = [m for m in _scan_entry_point(ep) if m.module not in seen]
        if found:
            modules.extend(found)
            roots.append((ep.module, _dist_name(ep)))
    memo.save()
    return Discovery(tuple(modules), tuple(roots))


def clear_caches() -> None:
    """Forget what was discovered and loaded (after changing ``sys.path``, in tests)."""
    discover.cache_clear()
    component_index.cache_clear()
    load_plugins.cache_clear()


def plugin_modules() -> tuple[str, ...]:
    """Modules :func:`load_plugins` imports, in order."""
    return tuple(m.module for m in discover().modules if m.registrations or m.declared)


def pretrain_targets() -> dict[str, str]:
    """Pretrain target name -> module defining its ``PRETRAIN_TARGET`` (first one wins)."""
    targets: dict[str, str] = {}
    for m in discover().modules:
        if m.pretrain_target is not None:
            targets.setdefault(m.pretrain_target, m.module)
    return targets


@functools.cache
def load_plugins() -> None:
    """Import all plugin modules once.

    A third-party plugin that fails to import is logged and skipped: a broken
    extra package must not take ``flowerbed list`` or a run down with it.
    """
    sources = {m.module: m.source for m in discover().modules}
    for name in plugin_modules():
        if sources[name] == PROJECT_SOURCE:
            importlib.import_module(name)
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - foreign code, any error
            logger.warning("plugin %s (from %s) failed to import, skipped: %s: %s",
                           name, sources[name], type(exc).__name__, exc)


@functools.cache
def component_index() -> dict[tuple[str, str], str]:
    """``(kind, name)`` -> the plugin module that registers it, read from source.

    The modules are parsed, not imported, so a process can import only the
    modules a scenario names (:func:`import_component`). Registrations the
    parser cannot see (names computed at run time) are simply absent; callers
    then fall back to :func:`load_plugins`.
    """
    index: dict[tuple[str, str], str] = {}
    for m in discover().modules:
        for key in m.registrations:
            index.setdefault(key, m.module)
    return index


def component_source(kind: str, name: str) -> str:
    """Who provides ``(kind, name)``: :data:`PROJECT_SOURCE` or a distribution name.

    :data:`UNKNOWN_SOURCE` for a component registered outside every
    discovered package (by a script or a test).
    """
    module = component_index().get((kind, name)) or _registered_module(kind, name)
    if module is None:
        return UNKNOWN_SOURCE
    found = discover()
    sources = {m.module: m.source for m in found.modules}
    if module in sources:
        return sources[module]
    # A module nobody parsed (it registers computed names): the innermost
    # package that the project or an entry point covers.
    for root, source in sorted(found.roots, key=lambda r: -len(r[0])):
        if module == root or module.startswith(root + "."):
            return source
    return UNKNOWN_SOURCE


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


def _registered_module(kind: str, name: str) -> str | None:
    entry = next((e for e in registry.entries(kind) if e.name == name), None)
    module = getattr(entry.target, "__module__", None) if entry is not None else None
    return module if isinstance(module, str) else None


# --- reading source -----------------------------------------------------------


class _ScanMemo:
    """What each project file registers, kept in the artefact cache between processes.

    Parsing the project's ~100 registering modules took 0.6 s of every
    command's start (``validate``, ``list``); a file whose size and
    modification time are unchanged is not read again.
    """

    VERSION = 1

    def __init__(self, path: Path | None, entries: dict[str, list[Any]]) -> None:
        self.path, self.entries, self.dirty = path, entries, False

    @classmethod
    def load(cls) -> _ScanMemo:
        from flowerbed.core.cache import cache_dir

        try:
            path = cache_dir() / "plugins" / f"scan-v{cls.VERSION}.json"
            data = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            return cls(None, {})
        return cls(path, data if isinstance(data, dict) else {})

    def get(self, path: Path, stamp: list[int]) -> PluginModule | bool | None:
        """The memoised scan of ``path`` (``None``: no plugin), or ``False`` when unknown."""
        entry = self.entries.get(str(path))
        if not entry or entry[0] != stamp:
            return False
        if entry[1] is None:
            return None
        module, source, regs, target, declared = entry[1]
        return PluginModule(module, source, tuple(tuple(r) for r in regs), target, declared)

    def put(self, path: Path, stamp: list[int], found: PluginModule | None) -> None:
        value = None if found is None else [
            found.module, found.source, [list(r) for r in found.registrations],
            found.pretrain_target, found.declared,
        ]
        self.entries[str(path)] = [stamp, value]
        self.dirty = True

    def save(self) -> None:
        if not (self.dirty and self.path):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.entries))
            os.replace(tmp, self.path)
        except OSError as exc:  # a read-only cache only costs the next start its parse
            logger.debug("plugin discovery: cannot save %s: %s", self.path, exc)


def _scan_package(
    root: Path, package: str, source: str, memo: _ScanMemo | None = None
) -> Iterator[PluginModule]:
    """The plugin modules among the files under ``root`` (the package ``package``)."""
    for module, path in _package_files(root, package):
        if memo is None:
            found = _scan_file(module, path, source)
        else:
            try:
                info = path.stat()
            except OSError:
                continue
            stamp = [info.st_mtime_ns, info.st_size]
            memoised = memo.get(path, stamp)
            if memoised is False:
                found = _scan_file(module, path, source)
                memo.put(path, stamp, found)
            else:
                found = memoised  # type: ignore[assignment]
        if found is not None:
            yield found


def _package_files(root: Path, package: str) -> list[tuple[str, Path]]:
    """``(module name, file)`` of every importable ``.py`` file, sorted by module name."""
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        # Not importable under a dotted name (scripts such as ``my-tool.py``).
        if all(p.isidentifier() for p in parts):
            files.append((".".join((package, *parts)), path))
    return sorted(files)


def _scan_file(
    module: str, path: Path, source: str, declared: bool = False
) -> PluginModule | None:
    """What ``path`` registers; ``None`` when nothing (and it is not ``declared``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("plugin discovery: cannot read %s, skipped: %s", path, exc)
        return None
    registrations: tuple[tuple[str, str], ...] = ()
    target = None
    # Parsing costs far more than reading, and most files can be ruled out by text.
    if _CANDIDATE.search(text):
        try:
            tree = ast.parse(text, str(path))
        except SyntaxError as exc:
            logger.warning("plugin discovery: %s does not parse, skipped: %s", path, exc)
            return None
        registrations, target = _registrations(tree), _pretrain_target(tree)
    if not (registrations or target or declared):
        return None
    return PluginModule(module, source, registrations, target, declared)


def _registrations(tree: ast.AST) -> tuple[tuple[str, str], ...]:
    """``(kind, name)`` of every registering call with literal arguments."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fname = _called_name(node)
        if fname not in _REGISTERING_CALLS:
            continue
        fixed = _REGISTERING_CALLS[fname]
        args = [a.value if isinstance(a, ast.Constant) else None for a in node.args[:2]]
        if fixed is not None and args and isinstance(args[0], str):
            found.append((fixed, args[0]))
        # The kind must be a registry kind: ``atexit.register("a", "b")`` is no plugin.
        elif fixed is None and len(args) == 2 and args[0] in registry.KINDS:
            if isinstance(args[1], str):
                found.append((str(args[0]), args[1]))
    return tuple(found)


def _pretrain_target(tree: ast.Module) -> str | None:
    """The ``name=`` of a top-level ``PRETRAIN_TARGET = PretrainTarget(name=...)``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == "PRETRAIN_TARGET"):
            continue
        if not (isinstance(value, ast.Call) and _called_name(value) == "PretrainTarget"):
            continue
        for kw in value.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                name = kw.value.value
                return name if isinstance(name, str) else None
    return None


def _called_name(call: ast.Call) -> str | None:
    """``f`` of ``f(...)`` or of ``module.f(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


# --- entry points ---------------------------------------------------------------


def _entry_points() -> list[Any]:
    """Entry points of :data:`ENTRY_POINT_GROUP`, sorted by name (then value) for a stable order."""
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (ep.name, ep.value))


def _dist_name(ep: Any) -> str:
    """Name of the distribution declaring ``ep`` (:data:`UNKNOWN_SOURCE` if it has none)."""
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    return str(name) if name else UNKNOWN_SOURCE


def _scan_entry_point(ep: Any) -> list[PluginModule]:
    """The plugin modules one entry point declares; ``[]`` (and a warning) if not found."""
    source = _dist_name(ep)
    spec = _find_spec(ep.module)
    if spec is None:
        logger.warning("plugin entry point %s = %r (from %s): module %s not found, skipped",
                       ep.name, ep.value, source, ep.module)
        return []
    is_package = spec.submodule_search_locations is not None
    is_source = bool(spec.origin and spec.has_location and spec.origin.endswith(".py"))
    if not (is_package or is_source):
        logger.warning("plugin entry point %s = %r (from %s): %s is not Python source, skipped",
                       ep.name, ep.value, source, ep.module)
        return []
    found = []
    if is_source:
        declared = _scan_file(ep.module, Path(str(spec.origin)), source, declared=True)
        found = [declared] if declared is not None else []
    if not spec.submodule_search_locations:
        return found
    # A package: its submodules are read like the project's own files.
    inner = [
        m
        for location in spec.submodule_search_locations
        for m in _scan_package(Path(location), ep.module, source)
        if m.module != ep.module
    ]
    return found + sorted(inner, key=lambda m: m.module)


def _find_spec(module: str) -> ModuleSpec | None:
    """Spec of ``module`` without importing it or its parents.

    :func:`importlib.util.find_spec` imports the parent packages of a dotted
    name; asking the finders level by level, with the parent's search path,
    only reads directories.
    """
    parts = module.split(".")
    spec = None
    path: list[str] | None = None
    for depth in range(1, len(parts) + 1):
        if spec is not None:
            if spec.submodule_search_locations is None:
                return None  # a parent that is a plain module has no submodules
            path = list(spec.submodule_search_locations)
        spec = _ask_finders(".".join(parts[:depth]), path)
        if spec is None:
            return None
    return spec


def _ask_finders(name: str, path: list[str] | None) -> ModuleSpec | None:
    # Every meta-path finder, as the import system does: editable installs
    # resolve their top-level packages with a finder of their own.
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None
