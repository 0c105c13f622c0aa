"""Sphinx extension: the reference pages, generated from the code at build time.

A page asks for a generated part with a fenced block naming what it wants::

    ```{flowerbed-reference} components dataset
    ```

Before the page is parsed, the block is replaced by Markdown written from the
code itself, so the reference cannot drift from it:

``components KIND``
    every registered component of ``KIND`` (plugin discovery first), each with
    its parameter table read from its pydantic ``Params`` model: name, type,
    default, constraint and description;
``scenario``
    the scenario file's top-level blocks, from the ``Scenario`` model;
``cli``
    every command and option of ``flowerbed``, from its argparse parser;
``kinds``
    the registry's kinds, each linked to its page.

Everything here reads parameter models, docstrings and the parser only: no
torch, Ray or Flower is imported, so the build stays light. The functions that
write Markdown are plain functions, tested without Sphinx
(``tests/test_docs.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

#: A generated part: ```` ```{flowerbed-reference} WHAT [ARG] ```` then a closing fence.
BLOCK = re.compile(
    r"^```\{flowerbed-reference\}[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*\n```[ \t]*$", re.MULTILINE
)
#: Docstring roles (``:class:`X```) shown as plain code in Markdown.
ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
#: A command-line option in prose (``--set``), shown as code.
OPTION = re.compile(r"(?<![\w`-])--[a-z][\w-]*")
#: Page of each registry kind (``ref-<kind>.md``) and the anchor of one component.
PAGE = "ref-{kind}"
ANCHOR = "ref-{kind}-{name}"


@dataclass(frozen=True)
class FieldRow:
    """One parameter as the reference shows it (all texts are Markdown)."""

    name: str
    type: str
    default: str
    constraint: str
    description: str


# --- reading parameter models ---------------------------------------------------


def param_rows(model: type[BaseModel], prefix: str = "") -> list[FieldRow]:
    """Every parameter of ``model``, nested parameter models flattened as ``outer.inner``.

    The ``name`` tag the registry adds to each component is left out: it is
    the component's own name, shown in the heading.
    """
    described = attribute_docs(model.__doc__ or "")
    rows: list[FieldRow] = []
    for field, info in model.model_fields.items():
        if field == "name" and not prefix:
            continue
        name = f"{prefix}{field}"
        rows.append(field_row(name, info, described.get(field, "")))
        for inner in nested_models(info.annotation):
            tag = _variant_tag(inner)
            rows.extend(
                _tagged(r, tag) for r in param_rows(inner, f"{name}.")
                if not (tag and r.name == f"{name}.name")
            )
    return rows


def field_row(name: str, info: Any, fallback: str = "") -> FieldRow:
    """One field's row; ``fallback`` describes it when the field has no description.

    A block whose fields have rows of their own gets no default here: each of
    its fields shows its own.
    """
    block = bool(nested_models(info.annotation))
    return FieldRow(
        name=name,
        type=type_text(info.annotation),
        default="its fields' defaults" if block and not info.is_required() else default_text(info),
        constraint=constraint_text(info.metadata),
        description=clean(info.description or fallback),
    )


def _tagged(row: FieldRow, tag: str | None) -> FieldRow:
    """``row`` with ``(name: tag)`` in front of its description, for one variant of a union."""
    if not tag:
        return row
    text = f"(`name: {tag}`) {row.description}".strip()
    return FieldRow(row.name, row.type, row.default, row.constraint, text)


def _variant_tag(model: type[BaseModel]) -> str | None:
    """The literal ``name`` of one variant of a tagged union of blocks, if it has one."""
    field = model.model_fields.get("name")
    if field is None or typing.get_origin(field.annotation) is not typing.Literal:
        return None
    return str(typing.get_args(field.annotation)[0])


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """Parameter models a field holds directly (not registry components: those have pages)."""
    found = []
    for part in _flat(annotation):
        if isinstance(part, type) and issubclass(part, BaseModel) and not registry_kind(part):
            found.append(part)
    return found


def registry_kind(model: type[BaseModel]) -> str | None:
    """``"vlm"`` for a model the registry built for a ``vlm`` component, else ``None``."""
    from flowerbed.core import registry

    kind, sep, _ = model.__name__.partition(":")
    return kind if sep and kind in registry.KINDS else None


def _flat(annotation: Any) -> list[Any]:
    """The members of a union (``Optional`` and ``Annotated`` unwrapped), or the type itself."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flat(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _flat(a)]
    return [annotation]


def type_text(annotation: Any) -> str:
    """A type as a scenario's author reads it: ``float``, ``"sgd" or "adam"``, ``list of int``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return _union_text(annotation)
    if origin in (tuple, list, set, frozenset):
        items = [a for a in args if a is not Ellipsis]
        if origin is tuple and Ellipsis not in args and items:
            return "[" + ", ".join(type_text(a) for a in items) + "]"
        return "list of " + (type_text(items[0]) if items else "any")
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "null"
    if annotation is typing.Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        kind = registry_kind(annotation)
        return f"a `{kind}` block" if kind else "block"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _union_text(annotation: Any) -> str:
    """A union: registry blocks of one kind said once, the rest joined with ``or``."""
    members = _flat(annotation)
    tags = [_variant_tag(m) for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if tags and len(tags) == len(members) and all(tags):
        return "block with `name` " + " or ".join(json.dumps(t) for t in tags)
    parts: list[str] = []
    for member in members:
        text = type_text(member)
        if text not in parts:
            parts.append(text)
    return " or ".join(parts)


def constraint_text(metadata: list[Any]) -> str:
    """``> 0``, ``≤ 1``, ``at least 1 item``, ``matches ^[a-z]+$``: a field's constraints."""
    words = []
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, attr, None)
            if value is not None:
                words.append(f"{sign} {value}")
        if getattr(item, "min_length", None) is not None:
            n = item.min_length
            words.append(f"at least {n} item{'s' if n != 1 else ''}")
        if getattr(item, "max_length", None) is not None:
            words.append(f"at most {item.max_length} items")
        if getattr(item, "multiple_of", None) is not None:
            words.append(f"multiple of {item.multiple_of}")
        if getattr(item, "pattern", None) is not None:
            words.append(f"matches `{item.pattern}`")
    return ", ".join(words)


def default_text(info: Any) -> str:
    """The default as YAML would write it (JSON form), or ``required``."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        text = json.dumps(value, ensure_ascii=False, default=_plain)
    except (TypeError, ValueError):
        text = repr(value)
    return code(text)


def _plain(value: Any) -> Any:
    """JSON stand-in for tuples of models, sets and other values ``json`` cannot write."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)


def attribute_docs(doc: str) -> dict[str, str]:
    """Field descriptions from a numpy-style ``Attributes`` section of a class docstring.

    ``a, b`` on one line documents both names with the indented text below.
    """
    _, _, rest = doc.partition("\n")
    lines = textwrap.dedent(rest).splitlines()
    out: dict[str, str] = {}
    names: list[str] = []
    inside = False
    for i, line in enumerate(lines):
        underlined = i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        if underlined:
            inside = line.strip() == "Attributes"
            names = []
            continue
        if not inside or not line.strip() or set(line.strip()) == {"-"}:
            continue
        if not line.startswith(" "):
            names = [n.strip() for n in line.split(",")]
            continue
        for name in names:
            out[name] = f"{out.get(name, '')} {line.strip()}".strip()
    return out


def clean(text: str) -> str:
    """Docstring text for one table cell: roles as code, one line, pipes escaped."""
    text = ROLE.sub(r"`\1`", text or "")
    text = " ".join(text.split()).replace("|", "\\|")
    # ``<name>`` outside code would be read as an HTML tag and vanish.
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(p if p.startswith("`") else _plain_text(p) for p in parts)


def _plain_text(text: str) -> str:
    """Prose outside code: ``<`` escaped, ``--options`` as code (not turned into dashes)."""
    text = text.replace("<", "\\<")
    return OPTION.sub(lambda m: f"`{m.group(0)}`", text)


def code(text: str) -> str:
    """``text`` as inline code, whatever backticks it holds, safe in a table cell."""
    text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(rows: list[FieldRow]) -> list[str]:
    """A Markdown table of parameter rows."""
    out = [
        "| parameter | type | default | constraint | description |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        type_cell = r.type.replace("|", "\\|")
        out.append(f"| `{r.name}` | {type_cell} | {r.default} | {r.constraint} | {r.description} |")
    return out


# --- components -------------------------------------------------------------------


def components_page(kind: str) -> str:
    """Markdown for every registered component of ``kind`` (and those missing an extra)."""
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    entries = registry.entries(kind)
    out = [_index_line(kind, [e.name for e in entries]), ""]
    for entry in entries:
        out += component_section(entry)
    for name, hint in sorted(registry.hints(kind).items()):
        out += [f"({ANCHOR.format(kind=kind, name=name)})=", f"## `{name}`", "",
                f"Not available here: {clean(hint)}", ""]
    return "\n".join(out)


def _index_line(kind: str, names: list[str]) -> str:
    """One line linking every component of ``kind`` on its page."""
    links = ", ".join(f"[`{n}`](#{ANCHOR.format(kind=kind, name=n)})" for n in names)
    return f"{len(names)} registered: {links}." if names else "None registered."


def component_section(entry: Any) -> list[str]:
    """One component: heading, summary, where it comes from, what it needs, its parameters."""
    from flowerbed.core.plugins import component_source

    out = [f"({ANCHOR.format(kind=entry.kind, name=entry.name)})=", f"## `{entry.name}`", ""]
    if entry.summary:
        out += [clean(entry.summary), ""]
    facts = [f"from `{component_source(entry.kind, entry.name)}`",
             f"code `{getattr(entry.target, '__module__', '?')}`"]
    if entry.requires:
        facts.append("requires " + _requirements(entry.requires))
    if entry.provides:
        facts.append("provides " + ", ".join(f"`{p}`" for p in entry.provides))
    out += ["; ".join(facts).capitalize() + ".", ""]
    doc = _params_doc(entry.params)
    if doc:
        out += [doc, ""]
    rows = param_rows(entry.params)
    out += table(rows) if rows else ["No parameters."]
    return [*out, ""]


def _requirements(requires: tuple[Any, ...]) -> str:
    """``a or (b and c)`` in code font."""
    parts = []
    for req in requires:
        group = (req,) if isinstance(req, str) else tuple(req)
        text = " and ".join(f"`{g}`" for g in group)
        parts.append(f"({text})" if len(group) > 1 and len(requires) > 1 else text)
    return " or ".join(parts)


def _params_doc(model: type[BaseModel]) -> str:
    """The first paragraph of the parameter model's own docstring (not the base's)."""
    from flowerbed.core.registry import Params

    for cls in model.__mro__[1:]:
        if cls is Params or not issubclass(cls, Params):
            return ""
        if cls.__doc__ and "__doc__" in cls.__dict__:
            first = cls.__doc__.strip().split("\n\n")[0]
            return clean(first)
    return ""


def kinds_page() -> str:
    """A table of the registry's kinds, each with its count and a link to its page."""
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    out = ["| kind | registered | page |", "|---|---|---|"]
    for kind in registry.KINDS:
        page = PAGE.format(kind=kind)
        out.append(f"| `{kind}` | {len(registry.names(kind))} | [{page}]({page}.md) |")
    return "\n".join(out)


# --- scenario --------------------------------------------------------------------


def scenario_page() -> str:
    """The scenario's top-level blocks, then each block's own fields."""
    from flowerbed.core.registry import KINDS
    from flowerbed.core.scenario import COMPONENT_FIELDS, LIST_COMPONENT_FIELDS, ScenarioBase

    kinds = {**COMPONENT_FIELDS, **LIST_COMPONENT_FIELDS}
    out = ["| block | type | default | constraint | description |", "|---|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for field, info in ScenarioBase.model_fields.items():
        kind = kinds.get(field)
        if kind in KINDS:
            many = "a list of" if field in LIST_COMPONENT_FIELDS else "a"
            block = f"{many} [`{kind}`]({PAGE.format(kind=kind)}.md) block"
            kind_type = block + ("s" if field in LIST_COMPONENT_FIELDS else "")
            row = FieldRow(field, kind_type, _component_default(field, info), "",
                           clean(info.description or ""))
        else:
            row = field_row(field, info, _first_paragraph(info.annotation))
            models = nested_models(info.annotation)
            nested += [(field, m) for m in models]
            if models:
                link = f"[block](#ref-scenario-{field})"
                row = FieldRow(row.name, link, row.default, row.constraint, row.description)
        out.append(table([row])[-1])
    for field, model in nested:
        out += ["", f"(ref-scenario-{field})=", f"## `{field}`", ""]
        doc = clean(_first_paragraph(model))
        out += [doc, ""] if doc else []
        out += table(param_rows(model, f"{field}."))
    return "\n".join(out)


def _component_default(field: str, info: Any) -> str:
    """A component field's default (``partition`` defaults to ``iid`` before validation)."""
    if field == "partition":
        return code('{"name": "iid"}')
    if field == "sinks":
        return code('[{"name": "jsonl"}]')
    return default_text(info)


def _first_paragraph(annotation: Any) -> str:
    """The docstring's first paragraph of the block model a field holds, if one."""
    models = nested_models(annotation)
    doc = (models[0].__doc__ or "") if len(models) == 1 else ""
    return doc.strip().split("\n\n")[0]


# --- command line ----------------------------------------------------------------


def cli_page() -> str:
    """Every ``flowerbed`` command: usage, description and a table of its arguments."""
    from flowerbed.platform.cli import build_parser

    parser = build_parser()
    out = _command(parser, "flowerbed", level=2, top=True)
    for name, sub in _subcommands(parser):
        out += _commands_below(sub, f"flowerbed {name}", level=2)
    return "\n".join(out)


def _commands_below(parser: argparse.ArgumentParser, prog: str, level: int) -> list[str]:
    out = _command(parser, prog, level)
    for name, sub in _subcommands(parser):
        out += _commands_below(sub, f"{prog} {name}", level + 1)
    return out


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _command(
    parser: argparse.ArgumentParser, prog: str, level: int, top: bool = False
) -> list[str]:
    """One command's section."""
    anchor = "ref-cli-" + "-".join(prog.split()[1:]) if not top else "ref-cli-flowerbed"
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    out = [f"({anchor})=", f"{'#' * level} `{prog}`", "", "```text", usage, "```", ""]
    if parser.description:
        out += [clean(parser.description), ""]
    rows = [_argument_row(a) for a in parser._actions if not _skipped(a)]
    if rows:
        out += ["| argument | default | description |", "|---|---|---|", *rows, ""]
    return out


def _skipped(action: argparse.Action) -> bool:
    """``-h`` and the subcommand list itself (each subcommand has its own section)."""
    return isinstance(action, argparse._HelpAction | argparse._SubParsersAction)


def _argument_row(action: argparse.Action) -> str:
    """One argument: its spelling (with metavar), default, choices and help."""
    if action.option_strings:
        flags = ", ".join(action.option_strings)
        takes = action.nargs != 0
        metavar = action.metavar or (action.dest.upper() if takes else "")
        spelled = f"{flags} {metavar}".strip()
    else:
        spelled = str(action.metavar or action.dest)
        if action.nargs in ("?", "*"):
            spelled = f"[{spelled}]"
        if action.nargs in ("+", "*"):
            spelled += " ..."
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else code(
        json.dumps(default) if not isinstance(default, str) else default)
    text = action.help if action.help not in (None, argparse.SUPPRESS) else ""
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text = f"{text} (one of: {', '.join(map(str, action.choices))})".strip()
    if isinstance(action, argparse._AppendAction):
        text = f"{text} (repeatable)".strip() if "repeatable" not in (text or "") else text
    return f"| {code(spelled)} | {shown} | {clean(str(text))} |"


# --- Sphinx ----------------------------------------------------------------------

GENERATORS = {
    "components": components_page,
    "scenario": scenario_page,
    "cli": cli_page,
    "kinds": kinds_page,
}


def expand(text: str) -> str:
    """``text`` with every ``flowerbed-reference`` block replaced by its generated Markdown."""

    def generate(match: re.Match[str]) -> str:
        what, arg = match.group(1), match.group(2)
        if what not in GENERATORS:
            raise ValueError(f"flowerbed-reference: unknown part {what!r}; known: "
                             f"{', '.join(GENERATORS)}")
        return GENERATORS[what](arg) if arg else GENERATORS[what]()

    return BLOCK.sub(generate, text)


def _on_source_read(app: Any, docname: str, source: list[str]) -> None:
    if BLOCK.search(source[0]):
        source[0] = expand(source[0])
        app.env.flowerbed_generated = getattr(app.env, "flowerbed_generated", set()) | {docname}


def _always_outdated(app: Any, env: Any, added: Any, changed: Any, removed: Any) -> list[str]:
    """Pages with generated parts are read again on every build (the code may have changed)."""
    del app, added, changed, removed
    return sorted(d for d in getattr(env, "flowerbed_generated", set()) if d in env.all_docs)


def setup(app: Any) -> dict[str, Any]:
    """Register the source hook (Sphinx entry point)."""
    app.connect("source-read", _on_source_read)
    app.connect("env-get-outdated", _always_outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
