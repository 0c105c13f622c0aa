"""``flowerbed pretrain``: target lookup, strict overrides, build-once caching."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from flowerbed.core import artefacts as pretrain
from flowerbed.core import cache, plugins
from flowerbed.core.registry import Params
from flowerbed.platform.cli import main


class _ToyParams(Params):
    width: int = 3


def _toy_module(calls: list[int]) -> types.ModuleType:
    def run(params: _ToyParams, out: Path) -> dict[str, float]:
        calls.append(params.width)
        out.write_text(str(params.width))
        return {"width": float(params.width)}

    module = types.ModuleType("toy_target")
    module.PRETRAIN_TARGET = pretrain.PretrainTarget(  # type: ignore[attr-defined]
        name="toy",
        params=_ToyParams,
        run=run,
        default_path=lambda p: cache.cached_file("toy", f"w{p.width}.txt"),
        help="a toy artefact",
    )
    return module


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    calls: list[int] = []
    monkeypatch.setitem(sys.modules, "toy_target", _toy_module(calls))
    # As if discovery had read a module defining the toy target.
    found = plugins.pretrain_targets()
    monkeypatch.setattr(plugins, "pretrain_targets", lambda: {**found, "toy": "toy_target"})
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "cache"))
    return calls


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "c"))
    assert cache.cached_file("a", "b.bin") == tmp_path / "c" / "a" / "b.bin"
    assert (tmp_path / "c" / "a").is_dir()


def test_pretrain_builds_once_then_reuses(toy: list[int], tmp_path: Path, capsys):
    assert main(["pretrain", "toy", "--set", "width=5"]) == 0
    path = tmp_path / "cache" / "toy" / "w5.txt"
    assert path.read_text() == "5"
    assert main(["pretrain", "toy", "--set", "width=5"]) == 0
    assert "already built" in capsys.readouterr().out
    assert main(["pretrain", "toy", "--set", "width=5", "--force"]) == 0
    assert toy == [5, 5]


def test_ensure_artefact_trains_only_when_missing(toy: list[int]):
    params = _ToyParams(width=2)
    first = pretrain.ensure_artefact("toy", params)
    second = pretrain.ensure_artefact("toy", params)
    assert first == second and first.read_text() == "2" and toy == [2]


def test_bad_target_and_bad_field_are_named(toy: list[int], capsys):
    assert main(["pretrain", "toyy"]) == 2
    assert "unknown pretrain target 'toyy'" in capsys.readouterr().err
    assert main(["pretrain", "toy", "--set", "widht=4"]) == 2
    err = capsys.readouterr().err
    assert "widht" in err and "toy" in err
    assert toy == []
