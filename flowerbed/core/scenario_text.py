"""Scenario files and ``--set`` overrides as plain data, before any schema.

YAML that refuses a key written twice, ``key.path=value`` overrides, and
errors (:class:`ScenarioError`) that name the file and the path of each
problem. Validation against the registry's schema is
:mod:`flowerbed.core.scenario`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; one line per problem, each naming its path."""

    def __init__(self, problems: list[str], source: str = "scenario") -> None:
        self.problems = problems
        self.source = source
        super().__init__("\n".join(problems))

    def __str__(self) -> str:
        head = f"{self.source}: {len(self.problems)} problem(s)"
        return "\n".join([head, *(f"  {p}" for p in self.problems)])


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that writes one key twice (PyYAML would silently keep the last value)."""

    def __init__(self, path: str, line: int, first: int) -> None:
        self.path, self.line, self.first = path, line, first
        super().__init__(f"{path}: duplicate key at line {line} (first at line {first})")

    def problem(self) -> str:
        """The one-line problem, naming the key path and both lines."""
        return (
            f"{self.path}: duplicate key at line {self.line} (first at line {self.first}); "
            "write each key once"
        )


def _key_path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping.

    The check runs on the composed node tree, before any value is built, so it
    knows each key's path and line; merge keys (``<<: *base``) and the keys
    they bring in are not duplicates.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_unique(node, "", set())
        return super().construct_document(node)

    def _check_unique(self, node: yaml.Node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias: already checked where its anchor is
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_unique(item, f"{path}[{i}]", seen)
        elif isinstance(node, yaml.MappingNode):
            lines: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self._key(key_node)
                line = key_node.start_mark.line + 1
                if key in lines:
                    raise DuplicateKeyError(_key_path(path, key), line, lines[key])
                lines[key] = line
                self._check_unique(value_node, _key_path(path, key), seen)

    def _key(self, node: yaml.Node) -> Any:
        """A key as the loader will build it (``1`` and ``"1"`` differ), or its text."""
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.construct_object(node)
            except yaml.YAMLError:
                return node.value
        return f"<{node.tag} at line {node.start_mark.line + 1}>"  # a complex key: never equal


def load_yaml(text: str) -> Any:
    r"""``yaml.safe_load`` that raises :class:`DuplicateKeyError` for a key written twice.

    Examples
    --------
    >>> load_yaml("a: 1\nb: {c: 2}")
    {'a': 1, 'b': {'c': 2}}
    >>> load_yaml("a: 1\nb: {c: 2, c: 3}")
    Traceback (most recent call last):
    ...
    flowerbed.core.scenario_text.DuplicateKeyError: b.c: duplicate key at line 2 (first at line 2)
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: builds plain data only


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ScenarioError([f"--set {text!r}: expected key.path=value"], "--set")
    key, _, raw = text.partition("=")
    path = key.strip().split(".")
    if not all(path):
        raise ScenarioError([f"--set {text!r}: empty key in {key!r}"], "--set")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except DuplicateKeyError as exc:
        raise ScenarioError([f"--set {text!r}: {exc.problem()}"], "--set") from None
    except yaml.YAMLError:
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied."""
    out = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for depth, key in enumerate(path[:-1]):
            child = node.get(key)
            if isinstance(child, str):
                # ``engine: inline`` / ``learner: sgd`` shorthand: keep the name.
                child = {"name": child}
            elif child is not None and not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise ScenarioError(
                    [
                        f"--set {text!r}: {where} is {json.dumps(child)}, a value, not a "
                        f"section; it has no key {path[depth + 1]!r}"
                    ],
                    "--set",
                )
            if child is None:
                child = {}
            node[key] = child
            node = child
        node[path[-1]] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a scenario file into plain data, with errors that name the file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError([f"file not found: {p}"], str(p))
    try:
        data = load_yaml(p.read_text())
    except DuplicateKeyError as exc:
        raise ScenarioError([exc.problem()], str(p)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError([f"{where}malformed YAML: {problem}"], str(p)) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError([f"byte {exc.start}: not UTF-8 text ({exc.reason})"], str(p)) from None
    except RecursionError:
        raise ScenarioError(["(top level): malformed YAML: nested too deeply"], str(p)) from None
    if data is None:
        raise ScenarioError(["(top level): the file is empty"], str(p))
    if not isinstance(data, dict):
        raise ScenarioError(["(top level): a scenario must be a YAML mapping"], str(p))
    data.pop("sweep", None)
    return data
