"""Imports inside ``flowerbed/`` only run downward through the layers.

core -> algorithms -> data -> models -> clients -> strategies -> platform: a module
may import its own layer and any layer below it, never one above. Imports under
``if TYPE_CHECKING:`` count too, since they are dependencies a reader must follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flowerbed

#: Bottom first. ``data`` sits below ``models`` because a pretrained part may be
#: aligned on a bundled dataset (the two-tower heads on Fashion-MNIST), while
#: no dataset needs a network; ``strategies`` sits above ``clients`` because a
#: server evaluates with the scenario's learner.
LAYERS = ("core", "algorithms", "data", "models", "clients", "strategies", "platform")
PACKAGE = Path(flowerbed.__file__).parent


def _layer(module: str) -> str | None:
    """The layer of a dotted ``flowerbed.<layer>...`` name; ``None`` outside the layers."""
    parts = module.split(".")
    if parts[0] != "flowerbed" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "flowerbed":  # ``from flowerbed import core``
            return [f"flowerbed.{alias.name}" for alias in node.names]
        return [node.module]
    return []


def upward_imports(package: Path) -> list[str]:
    """``file:line: <layer> imports <module> (<layer>)`` for every upward import."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        own = _layer(".".join(rel.with_suffix("").parts))
        if own is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for module in _imported(node):
                target = _layer(module)
                if target is not None and LAYERS.index(target) > LAYERS.index(own):
                    found.append(f"{rel}:{node.lineno}: {own} imports {module} ({target})")
    return found


def test_every_layer_exists() -> None:
    for layer in LAYERS:
        assert (PACKAGE / layer / "__init__.py").is_file(), layer


def test_no_upward_import() -> None:
    found = upward_imports(PACKAGE)
    assert not found, "upward imports:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("core/planted.py", "from flowerbed.platform.runner import run\n"),
        ("data/planted.py", "import flowerbed.models.models\n"),
        ("algorithms/planted.py", "from flowerbed import clients\n"),
        (
            "models/planted.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from flowerbed.strategies.base import Strategy\n",
        ),
    ],
)
def test_planted_upward_import_is_named(tmp_path: Path, where: str, line: str) -> None:
    root = tmp_path / "flowerbed"
    for layer in LAYERS:
        (root / layer).mkdir(parents=True)
        (root / layer / "__init__.py").write_text("")
    (root / where).write_text(line)
    (root / "platform" / "fine.py").write_text("from flowerbed.core import registry\n")
    found = upward_imports(root)
    assert len(found) == 1
    assert found[0].startswith(f"flowerbed/{where}:")
