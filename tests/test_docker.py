"""Docker deployment: what the image installs (fast) and the whole path for real (slow).

The slow test runs ``scripts/docker-test.sh`` (what ``make docker-test`` runs after
the setup step): base image, offline wheelhouse, image, compose up, the quickstart
through it with and without TLS, compared with plain processes. It is skipped, with
the script's reason, where no Docker engine can be had (not root, no apt, no dockerd).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import tiny_scenario
from packaging.requirements import Requirement

from flowerbed.platform.deploy.compose import compose_yaml, runs_overlay_yaml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP_STATUS = 77


def _image_requirements(*args: str) -> list[Requirement]:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "docker/image_requirements.py"),
            str(ROOT / "pyproject.toml"),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [Requirement(line) for line in out.splitlines()]


def _pins() -> dict[str, Requirement]:
    deps = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    return {r.name: r for r in deps}


# --- torchvision is not a dependency of flowerbed/ (fast) -------------------------------


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.partition(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # importlib.import_module("torchvision...") / find_spec("torchvision")
            if node.value.partition(".")[0] == "torchvision":
                names.add("torchvision")
    return names


def test_no_module_under_flowerbed_imports_torchvision():
    users = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "flowerbed").rglob("*.py"))
        if "torchvision" in _imported_modules(path)
    ]
    assert users == []
    assert "torchvision" not in {Requirement(r).name for r in PYPROJECT["project"]["dependencies"]}
    assert PYPROJECT["project"]["optional-dependencies"]["torchvision"] == ["torchvision==0.29.1"]


_BLOCKED_RUN = """
import sys
sys.modules["torchvision"] = None  # any `import torchvision` now raises ImportError
import json, flowerbed
scenario = json.loads(sys.argv[1])
result = flowerbed.run(scenario, save=False)
print(json.dumps({"results": result.summary["results"],
                  "loaded": sorted(m for m in sys.modules if m.startswith("torchvision"))}))
"""


def test_a_federated_run_needs_no_torchvision():
    scenario = tiny_scenario(num_clients=2, rounds=1, baselines=["centralized", "local_only"])
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, json.dumps(scenario)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert set(report["results"]) == {"federated", "centralized", "local_only"}
    assert all(0.0 < r["test/accuracy"] <= 1.0 for r in report["results"].values())
    assert report["loaded"] == ["torchvision"]  # only our blocking entry, never a real import


# --- what the image installs (fast) -----------------------------------------------------


def test_image_installs_the_torch_pin_or_the_given_spec():
    (torch,) = _image_requirements("torch")
    assert str(torch) == str(_pins()["torch"])
    (cpu,) = _image_requirements("torch", "torch==2.13.0")
    assert cpu.name == "torch" and cpu.specifier.contains("2.13.0+cpu")


def test_image_installs_the_base_dependencies_without_ray_or_extras():
    rest = {r.name: r for r in _image_requirements("rest")}
    pins = _pins()
    assert "torch" not in rest and "torchvision" not in rest
    assert rest["flwr"].extras == set()  # flwr[simulation] would bring Ray
    assert str(rest["flwr"].specifier) == str(pins["flwr"].specifier)
    for name, pin in pins.items():
        if name != "torch":
            assert str(rest[name].specifier) == str(pin.specifier), name
    # the build backend, so flowerbed installs with --no-build-isolation and no index
    backend = {Requirement(r).name for r in PYPROJECT["build-system"]["requires"]}
    assert backend <= set(rest)


# --- compose: one image for every role, loopback, no telemetry (fast) -------------------


def test_images_come_from_the_environment_with_flower_defaults():
    services = yaml.safe_load(compose_yaml(2))["services"]
    flwr = _pins()["flwr"].specifier
    (version,) = [s.version for s in flwr]
    assert services["superlink"]["image"] == (
        f"${{SUPERLINK_IMAGE:-flwr/superlink:{version}-py3.11-ubuntu24.04}}"
    )
    for i in range(2):
        assert services[f"supernode-{i}"]["image"].startswith("${SUPERNODE_IMAGE:-flwr/supernode:")
        assert services[f"superexec-clientapp-{i}"]["image"] == (
            "${SUPEREXEC_IMAGE:-flowerbed-superexec:latest}"
        )
    # every service names its program, so one image can serve all roles
    programs = {name: s["entrypoint"] for name, s in services.items()}
    assert programs["superlink"] == ["flower-superlink"]
    assert programs["supernode-1"] == ["flower-supernode"]
    assert programs["superexec-serverapp"] == ["flower-superexec"]
    for name, service in services.items():
        assert service["environment"]["FLWR_TELEMETRY_ENABLED"] == "0", name
    # published on loopback unless SUPERLINK_BIND says otherwise
    published = "${SUPERLINK_BIND:-127.0.0.1}:${SUPERLINK_PORT:-9091}:9091"
    assert services["superlink"]["ports"] == [published]


def test_runs_overlay_mounts_the_host_folder_at_the_same_path():
    (service,) = yaml.safe_load(runs_overlay_yaml(2))["services"].values()
    source, target = service["volumes"][0].split("}:")
    assert source.startswith("${FLOWERBED_RUNS:?") and target == "${FLOWERBED_RUNS}"
    assert service["user"].startswith("${FLOWERBED_RUNS_USER:?")
    assert service["environment"] == {"HOME": "/tmp"}


def test_dockerfile_takes_base_image_indexes_and_torch_as_arguments():
    text = (ROOT / "docker/Dockerfile").read_text()
    args = {line.split()[1].split("=")[0] for line in text.splitlines() if line.startswith("ARG ")}
    assert {"BASE_IMAGE", "PIP_INDEX", "TORCH_INDEX", "TORCH_SPEC", "FLWR_VERSION"} <= args
    assert "FROM ${BASE_IMAGE}" in text
    assert "ARG BASE_IMAGE=flwr/superexec:${FLWR_VERSION}-py3.11-ubuntu24.04" in text
    assert "FLWR_TELEMETRY_ENABLED=0" in text
    ignore = (ROOT / "docker/Dockerfile.dockerignore").read_text().split()
    assert "!docker/image_requirements.py" in ignore


# --- the real thing (slow) --------------------------------------------------------------


@pytest.mark.slow
def test_docker_deployment_matches_plain_processes():
    if os.environ.get("FLOWERBED_DOCKER_TEST") == "skip":
        pytest.skip("FLOWERBED_DOCKER_TEST=skip")
    env = {**os.environ, "PYTHON": sys.executable}
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/docker-test.sh")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=1800,
    )
    text = out.stdout + out.stderr
    print(text)  # the script's timings and disk use (shown with -s or -rP)
    if out.returncode == SKIP_STATUS:
        reason = [line for line in text.splitlines() if "SKIP:" in line]
        pytest.skip(reason[-1].split("SKIP:", 1)[1].strip() if reason else "no Docker engine")
    assert out.returncode == 0, text[-6000:]
    assert "equal results in all three" in text
