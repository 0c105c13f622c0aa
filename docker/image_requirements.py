"""What the flowerbed image installs, read from ``pyproject.toml`` (written once, there).

    python image_requirements.py PYPROJECT torch [SPEC]   # the torch pin, or SPEC
    python image_requirements.py PYPROJECT rest           # everything else

``rest`` is the base dependencies without torch, with ``flwr[simulation]``
turned into plain ``flwr`` (no Ray in a deployment image), plus the build
backend, so that flowerbed itself installs with ``--no-deps
--no-build-isolation`` and no index. Extras (torchvision among them) are
left out. The Dockerfile and ``scripts/docker-wheels.sh`` both call this, so
an offline wheelhouse holds exactly what the image asks for.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

#: A requirement's project name: letters, digits, ``.``, ``_`` and ``-`` up to the first
#: extra bracket, version operator, marker or space.
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def name_of(requirement: str) -> str:
    """The normalised project name of ``requirement`` (PEP 503: lower case, runs of ``-_.``)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def without_extras(requirement: str) -> str:
    """``flwr[simulation]==1.42.0`` -> ``flwr==1.42.0``."""
    return re.sub(r"\[[^\]]*\]", "", requirement, count=1)


def torch_requirement(pyproject: dict, spec: str = "") -> str:
    """``spec`` when given, else the torch pin among the base dependencies."""
    if spec.strip():
        return spec.strip()
    pins = [r for r in pyproject["project"]["dependencies"] if name_of(r) == "torch"]
    if len(pins) != 1:
        raise ValueError(f"expected one torch requirement in pyproject.toml, found {pins}")
    return str(pins[0])


def rest_requirements(pyproject: dict) -> list[str]:
    """Base dependencies other than torch (extras dropped), then the build backend."""
    deps = [
        without_extras(r) for r in pyproject["project"]["dependencies"] if name_of(r) != "torch"
    ]
    return deps + list(pyproject["build-system"]["requires"])


def main(argv: list[str]) -> int:
    """Print one requirement a line; exit 2 on a wrong call."""
    if len(argv) < 2 or argv[1] not in ("torch", "rest"):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    pyproject = tomllib.loads(Path(argv[0]).read_text())
    if argv[1] == "torch":
        print(torch_requirement(pyproject, argv[2] if len(argv) > 2 else ""))
    else:
        print("\n".join(rest_requirements(pyproject)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
