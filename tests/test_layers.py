"""The package's layers and method packages keep their import rules.

Order, bottom first: core -> algorithms -> data -> models -> clients ->
strategies -> methods -> platform. A module may import its own layer and any
layer below it, never one above. On top of that:

- ``platform/`` never imports ``flowerbed.methods``: methods are found by
  plugin discovery, never named by the platform;
- a method package (``flowerbed/methods/<name>/``) never imports another one:
  what two methods share lives in a shared layer;
- a method's ``algorithm*.py`` and the shared ``algorithms/`` import no flwr
  and no ray, and of flowerbed only ``core``, ``algorithms`` and (for a
  method) its own package's other ``algorithm*.py``: the maths is testable
  without Flower, Ray or a scenario.

Imports under ``if TYPE_CHECKING:`` and inside functions count too, since they
are dependencies a reader must follow. Each rule has a planted violation below
that the checker must name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import flowerbed

#: Bottom first. ``data`` sits below ``models`` because a pretrained part may be
#: aligned on a bundled dataset (the two-tower heads on Fashion-MNIST), while
#: no dataset needs a network; ``strategies`` sits above ``clients`` because a
#: server evaluates with the scenario's learner; ``methods`` use every shared
#: layer and are used by none.
LAYERS = (
    "core", "algorithms", "data", "models", "clients", "strategies", "methods", "platform",
)
#: Third-party packages the pure maths must not import.
FRAMEWORKS = ("flwr", "ray")
PACKAGE = Path(flowerbed.__file__).parent


def _layer(module: str) -> str | None:
    """The layer of a dotted ``flowerbed.<layer>...`` name; ``None`` outside the layers."""
    parts = module.split(".")
    if parts[0] != "flowerbed" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _method(module: str) -> str | None:
    """The method package of ``flowerbed.methods.<name>...``; ``None`` elsewhere."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["flowerbed", "methods"] and len(parts) > 2 else None


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        # ``from flowerbed import core`` / ``from flowerbed.methods import fqr``:
        # name the submodules, so the layer or package imported is the one checked.
        if node.module in ("flowerbed", "flowerbed.methods") or (
            _method(node.module) is not None and node.module.count(".") == 2
        ):
            return [f"{node.module}.{alias.name}" for alias in node.names]
        return [node.module]
    return []


def _imports(package: Path) -> Iterator[tuple[Path, str, int, str]]:
    """``(relative path, own module, line, imported module)`` for every import."""
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        own = ".".join(rel.with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for module in _imported(node):
                yield rel, own, node.lineno, module


def _is_pure_maths(own: str) -> bool:
    """Shared ``algorithms/`` modules and a method's ``algorithm*.py``."""
    if _layer(own) == "algorithms":
        return True
    return _method(own) is not None and own.rsplit(".", 1)[-1].startswith("algorithm")


def _pure_maths_allows(own: str, module: str) -> bool:
    """Whether a pure-maths module ``own`` may import ``module``."""
    if module.split(".")[0] in FRAMEWORKS:
        return False
    if module.split(".")[0] != "flowerbed":
        return True
    if _layer(module) in ("core", "algorithms"):
        return True
    same_package = _method(module) is not None and _method(module) == _method(own)
    return same_package and _is_pure_maths(module)


def _broken_rule(own: str, module: str) -> str | None:
    """Why importing ``module`` from ``own`` breaks a rule; ``None`` if it does not."""
    own_layer, target = _layer(own), _layer(module)
    if own_layer and target and LAYERS.index(target) > LAYERS.index(own_layer):
        return f"{own_layer} imports {module} ({target}, a layer above)"
    if own_layer == "platform" and target == "methods":
        return f"platform imports {module} (methods are found by discovery)"
    if _method(own) and _method(module) and _method(own) != _method(module):
        return f"method {_method(own)} imports method {_method(module)}"
    if _is_pure_maths(own) and not _pure_maths_allows(own, module):
        return f"pure maths {own} imports {module}"
    return None


def violations(package: Path) -> list[str]:
    """``file:line: <why>`` for every import that breaks a rule."""
    found = []
    for rel, own, line, module in _imports(package):
        why = _broken_rule(own, module)
        if why is not None:
            found.append(f"{rel}:{line}: {why}")
    return found


def test_every_layer_exists() -> None:
    for layer in LAYERS:
        assert (PACKAGE / layer / "__init__.py").is_file(), layer


def test_no_import_breaks_a_rule() -> None:
    found = violations(PACKAGE)
    assert not found, "import rules broken:\n" + "\n".join(found)


def test_every_method_package_documents_itself() -> None:
    packages = [p for p in sorted((PACKAGE / "methods").iterdir()) if (p / "__init__.py").is_file()]
    assert packages
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
        assert doc, f"methods/{package.name}/__init__.py has no docstring"
        for path in sorted(package.glob("*.py")):
            if path.name != "__init__.py":
                assert path.name in doc, f"methods/{package.name}: docstring omits {path.name}"


#: Where a file named after a method may live, relative to the repository root.
METHOD_PLACES = (
    "flowerbed/methods/", "scenarios/", "tests/methods/", "benchmarks/methods/",
    "benchmarks/results/", "benchmarks/claims/", "docs/methods/",
)
#: Folders of the repository that hold the project's own files.
PROJECT_FOLDERS = ("flowerbed", "tests", "benchmarks", "docs", "scenarios", "scripts", "docker")
#: Methods that share a package under another name (``drift``).
MEMBERS = ("scaffold", "feddyn", "moon")
#: Generated, git-ignored output inside the project's folders (``make docs``).
BUILD_OUTPUTS = ("docs/_build/",)


def misplaced_method_files(root: Path) -> list[str]:
    """Files under ``root`` named after a method but outside :data:`METHOD_PLACES`."""
    names = [p.name for p in (root / "flowerbed" / "methods").iterdir()
             if (p / "__init__.py").is_file()]
    found = []
    for folder in PROJECT_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if not path.is_file() or "__pycache__" in rel or rel.startswith(
                    (*METHOD_PLACES, *BUILD_OUTPUTS)):
                continue
            hit = [n for n in (*names, *MEMBERS) if n in path.name]
            if hit:
                found.append(f"{rel} (named after {hit[0]})")
    return found


def test_no_method_file_outside_its_places() -> None:
    found = misplaced_method_files(PACKAGE.parent)
    assert not found, "files of a method outside its places:\n" + "\n".join(found)


def test_planted_misplaced_method_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "flowerbed" / "methods" / "alpha").mkdir(parents=True)
    (tmp_path / "flowerbed" / "methods" / "alpha" / "__init__.py").write_text("")
    (tmp_path / "flowerbed" / "models").mkdir()
    (tmp_path / "flowerbed" / "models" / "alpha_net.py").write_text("")
    (tmp_path / "tests" / "methods").mkdir(parents=True)
    (tmp_path / "tests" / "methods" / "test_alpha.py").write_text("")
    (tmp_path / "docs" / "img").mkdir(parents=True)
    (tmp_path / "docs" / "img" / "moon_rounds.png").write_text("")
    assert misplaced_method_files(tmp_path) == [
        "flowerbed/models/alpha_net.py (named after alpha)",
        "docs/img/moon_rounds.png (named after moon)",
    ]


def _planted(tmp_path: Path, where: str, text: str) -> Path:
    """A fake ``flowerbed`` tree with every layer, two methods and one planted file."""
    root = tmp_path / "flowerbed"
    for layer in LAYERS:
        (root / layer).mkdir(parents=True)
        (root / layer / "__init__.py").write_text("")
    for method in ("alpha", "beta"):
        (root / "methods" / method).mkdir()
        (root / "methods" / method / "__init__.py").write_text("")
        (root / "methods" / method / "algorithm.py").write_text("import numpy as np\n")
    # Allowed imports, so only the planted one can be reported.
    (root / "platform" / "fine.py").write_text("from flowerbed.core import registry\n")
    (root / "methods" / "alpha" / "learner.py").write_text(
        "from flowerbed.clients.learner import Learner\n"
        "from flowerbed.methods.alpha import algorithm\n"
        "import flwr\n"
    )
    (root / "methods" / "alpha" / "algorithm_more.py").write_text(
        "import torch\nfrom flowerbed.algorithms import clip_loss\n"
        "from flowerbed.methods.alpha.algorithm import np\n"
    )
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("where", "line", "why"),
    [
        ("core/planted.py", "from flowerbed.platform.runner import run\n", "a layer above"),
        ("data/planted.py", "import flowerbed.models.models\n", "a layer above"),
        ("algorithms/planted.py", "from flowerbed import clients\n", "a layer above"),
        (
            "models/planted.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from flowerbed.strategies.base import Strategy\n",
            "a layer above",
        ),
        ("strategies/planted.py", "from flowerbed.methods.alpha import strategy\n",
         "a layer above"),
        ("clients/planted.py", "def f():\n    from flowerbed.methods import alpha\n",
         "a layer above"),
        ("platform/planted.py", "from flowerbed.methods.alpha.strategy import run\n",
         "found by discovery"),
        ("platform/planted.py", "from flowerbed.methods import beta\n", "found by discovery"),
        ("methods/alpha/planted.py", "from flowerbed.methods.beta import algorithm\n",
         "method alpha imports method beta"),
        ("methods/alpha/planted.py", "import flowerbed.methods.beta.learner\n",
         "method alpha imports method beta"),
        ("methods/alpha/algorithm_x.py", "import flwr.app\n", "pure maths"),
        ("methods/alpha/algorithm_x.py", "def f():\n    import ray\n", "pure maths"),
        ("methods/alpha/algorithm_x.py", "from flowerbed.data.base import ClientData\n",
         "pure maths"),
        ("methods/alpha/algorithm_x.py", "from flowerbed.methods.alpha import learner\n",
         "pure maths"),
        ("algorithms/planted.py", "from flwr.app import Message\n", "pure maths"),
    ],
)
def test_planted_violation_is_named(tmp_path: Path, where: str, line: str, why: str) -> None:
    root = _planted(tmp_path, where, line)
    found = violations(root)
    assert len(found) == 1, found
    assert found[0].startswith(f"flowerbed/{where}:")
    assert why in found[0]


def test_planted_tree_without_violation_is_clean(tmp_path: Path) -> None:
    root = _planted(tmp_path, "methods/beta/learner.py",
                    "from flowerbed.methods.beta import algorithm\nimport flwr\n")
    assert violations(root) == []
