"""The documentation site: generated reference, navigation, snippets, the build itself.

The reference is checked against the registry, the scenario model and the
argument parser read here directly, not against the extension's own helpers.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from docutils.nodes import make_id

from flowerbed.core import registry
from flowerbed.core.plugins import UNKNOWN_SOURCE, component_source, load_plugins
from flowerbed.core.scenario import ScenarioBase, ScenarioError, from_dict
from flowerbed.platform.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))

import check_doc_links  # noqa: E402
import flowerbed_reference as ref  # noqa: E402

#: Pages Sphinx builds: every Markdown file under docs/ but the build output and the
#: example package's own README (conf.py's exclude_patterns).
PAGES = sorted(
    p.relative_to(DOCS).with_suffix("").as_posix()
    for p in DOCS.rglob("*.md")
    if p.relative_to(DOCS).parts[0] not in ("_build", "examples")
)
#: Libraries the build must not import: the reference reads parameter models and docstrings.
HEAVY = ("torch", "flwr", "ray", "sklearn", "transformers")
TOCTREE = re.compile(r"^```\{toctree\}\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _section(page: str, kind: str, name: str) -> str:
    """The Markdown of one component's section on its kind's page."""
    start = page.index(f"({ref.ANCHOR.format(kind=kind, name=name)})=")
    after = page.find("\n(ref-", start + 1)
    return page[start:] if after < 0 else page[start:after]


def _fields(model: Any) -> list[str]:
    return [f for f in model.model_fields if f != "name"]


# --- the generated reference ------------------------------------------------------


@pytest.mark.parametrize("kind", registry.KINDS)
def test_the_reference_lists_every_component_with_every_parameter(kind):
    load_plugins()
    page = ref.components_page(kind)
    entries = registry.entries(kind)
    assert entries, kind
    for entry in entries:
        section = _section(page, kind, entry.name)
        assert f"## `{entry.name}`" in section
        for field in _fields(entry.params):
            info = entry.params.model_fields[field]
            row = next((ln for ln in section.splitlines() if ln.startswith(f"| `{field}` |")),
                       None)
            assert row is not None, f"{kind} {entry.name}: no row for {field}"
            if info.is_required():
                assert "| required |" in row
            if info.description:
                assert " ".join(info.description.split())[:30].replace("|", "\\|").replace(
                    "<", "\\<") in row
    # One heading per component, nothing more.
    assert page.count("\n## `") + page.startswith("## `") == len(entries) + len(
        registry.hints(kind))


def test_a_parameter_row_shows_type_default_and_constraint():
    load_plugins()
    section = _section(ref.components_page("partition"), "partition", "dirichlet")
    alpha = registry.get("partition", "dirichlet").params.model_fields["alpha"]
    assert f"| `alpha` | float | `{alpha.default}` | > 0 |" in section


def test_every_kind_has_a_reference_page_in_the_components_toctree():
    components = (DOCS / "ref-components.md").read_text()
    for kind in registry.KINDS:
        page = DOCS / f"ref-{kind}.md"
        assert f"```{{flowerbed-reference}} components {kind}\n```" in page.read_text()
        assert f"\nref-{kind}\n" in components


def test_the_scenario_reference_lists_every_block_and_field():
    page = ref.scenario_page()
    for field, info in ScenarioBase.model_fields.items():
        assert f"| `{field}` |" in page, field
        model = info.annotation
        if isinstance(model, type) and hasattr(model, "model_fields"):
            for inner in model.model_fields:
                assert f"| `{field}.{inner}` |" in page, f"{field}.{inner}"


def _parsers(parser: argparse.ArgumentParser, prog: str) -> list[tuple[str, Any]]:
    found = [(prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{prog} {name}")
    return found


def test_the_cli_reference_lists_every_command_and_option():
    page = ref.cli_page()
    commands = _parsers(build_parser(), "flowerbed")
    assert len(commands) > 10
    for prog, parser in commands:
        heading = f"`{prog}`"
        assert heading in page, prog
        section = page[page.index(heading):]
        nxt = section.find("\n(ref-cli-", 1)
        section = section if nxt < 0 else section[:nxt]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = action.option_strings or [str(action.metavar or action.dest)]
            assert all(n in section for n in names), f"{prog}: {names}"


def test_the_run_folder_reference_names_every_file():
    from flowerbed.core import checkpoints, records
    from flowerbed.platform.report import runs

    page = (DOCS / "ref-run-folder.md").read_text()
    constants = {
        v for m in (records, checkpoints, runs) for k, v in vars(m).items()
        if k.isupper() and (k.endswith("_FILE") or k.endswith("_DIR") or k.endswith("_DIR_NAME"))
        and isinstance(v, str)
    }
    assert {"metrics.jsonl", "summary.json", "checkpoints", "report"} <= constants
    for name in constants:
        assert f"`{name}" in page, name


def test_an_unknown_generated_part_is_an_error():
    with pytest.raises(ValueError, match="unknown part 'nope'"):
        ref.expand("```{flowerbed-reference} nope\n```\n")


def test_field_descriptions_come_from_a_numpy_attributes_section():
    doc = textwrap.dedent('''\
        A block.

        Attributes
        ----------
        a, b
            Shared words.
        c
            Own words
            on two lines.

        Notes
        -----
        x
            not an attribute
        ''')
    assert ref.attribute_docs(doc) == {
        "a": "Shared words.", "b": "Shared words.", "c": "Own words on two lines.",
    }


# --- navigation and snippets --------------------------------------------------------


def _toctree_entries(page: str) -> list[str]:
    """Pages a page's toctrees name, relative to docs/, globs expanded."""
    text = (DOCS / f"{page}.md").read_text()
    folder = Path(page).parent
    found = []
    for block in TOCTREE.findall(text):
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith(":"):
                continue
            target = (folder / line).as_posix()
            if "*" in line:
                found += [p for p in PAGES if Path(p).match(target) and p != page]
            else:
                found.append(target)
    return found


def test_every_page_is_reachable_from_the_index():
    seen, todo = {"index"}, ["index"]
    while todo:
        for target in _toctree_entries(todo.pop()):
            assert target in PAGES, f"toctree names a missing page: {target}"
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert sorted(set(PAGES) - seen) == []


def test_the_site_has_flowers_four_sections_and_the_methods():
    names = {Path(p).name for p in PAGES}
    for prefix, least in (("tutorial-", 4), ("how-to-", 15), ("explanation-", 4), ("ref-", 5)):
        assert sum(n.startswith(prefix) for n in names) >= least, prefix
    methods = {p for p in PAGES if p.startswith("methods/")}
    assert {f"methods/{p.stem}" for p in (DOCS / "methods").glob("*.md")} == methods


def _yaml_snippets() -> list[tuple[str, str]]:
    """YAML blocks of the hand-written site pages (method pages quote their own files)."""
    found = []
    for page in PAGES:
        if page.startswith(("methods/", "strategies/")):
            continue
        for lang, body in FENCE.findall((DOCS / f"{page}.md").read_text()):
            if lang == "yaml":
                found.append((page, body))
    return found


@pytest.mark.parametrize(("page", "snippet"), _yaml_snippets())
def test_every_scenario_snippet_validates(page, snippet, tmp_path, monkeypatch):
    """A fragment merged onto the quickstart (or a whole scenario) validates; a sweep parses.

    ``validate`` checks that a user table exists; the page's example file stands
    in an empty folder, so the rest of the snippet is what is checked.
    """
    data = yaml.safe_load(snippet)
    assert isinstance(data, dict), page
    if "sweep" in data:
        assert isinstance(data["sweep"], dict) and "name" in data["sweep"]
        return
    base = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    merged = data if "name" in data else {**base, **data}
    if "clients" in data:
        merged["clients"] = data["clients"]
    dataset = merged.get("dataset")
    table = dataset.get("path") if isinstance(dataset, dict) else None
    if table and not Path(table).is_absolute():
        monkeypatch.chdir(tmp_path)
        (tmp_path / table).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / table).write_text("x,y\n1,0\n")
    try:
        from_dict(merged)
    except ScenarioError as exc:
        pytest.fail(f"{page}: {exc}\n{snippet}")


# --- the link checker ------------------------------------------------------------


def test_the_link_checker_finds_missing_pages_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/a.html#here">ok</a> <a href="sub/a.html#gone">x</a>'
        '<a href="missing.html">y</a> <a href="https://flower.ai">out</a> <a href="#">top</a>'
        '<img src="img/p.png">'
    )
    (tmp_path / "sub" / "a.html").write_text('<h1 id="here">A</h1><a href="../index.html">up</a>')
    problems = check_doc_links.broken_links(tmp_path)
    assert problems == [
        "index.html: sub/a.html#gone: no anchor #gone",
        "index.html: missing.html: no such file",
        "index.html: img/p.png: no such file",
    ]


# --- the build ------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_builds_without_warnings_and_every_internal_link_holds(tmp_path):
    """``make docs``: Sphinx with warnings as errors, then the internal link check."""
    out = tmp_path / "html"
    # Sphinx in a process of its own, which then says which heavy libraries it imported.
    args = ["-W", "--keep-going", "-b", "html", "-q", str(DOCS), str(out)]
    code = textwrap.dedent(f"""\
        import sys
        from sphinx.cmd.build import build_main
        rc = build_main({args!r})
        print("HEAVY", sorted(m for m in {HEAVY!r} if m in sys.modules))
        sys.exit(rc)
        """)
    build = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    assert "HEAVY []" in build.stdout, build.stdout[-2000:]
    assert check_doc_links.broken_links(out) == []
    load_plugins()
    for kind in registry.KINDS:
        html = (out / f"ref-{kind}.html").read_text()
        # Components other tests registered in this process are no plugin the site can see.
        for name in (n for n in registry.names(kind)
                     if component_source(kind, n) != UNKNOWN_SOURCE):
            anchor = make_id(ref.ANCHOR.format(kind=kind, name=name))  # as Sphinx spells ids
            assert f'id="{anchor}"' in html, (kind, name)
    api = (out / "ref-api.html").read_text()
    for name in ("flowerbed.run", "Learner", "SupervisedLearner", "Strategy", "Federation"):
        assert name in api
    for page in PAGES:
        assert (out / f"{page}.html").is_file(), page
