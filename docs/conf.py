"""Sphinx configuration of flowerbed's documentation site (``make docs``)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

import flowerbed  # noqa: E402  (the checkout's package, found through the path above)

project = "flowerbed"
author = "the flowerbed developers"
copyright = "the flowerbed developers"
version = release = flowerbed.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "flowerbed_reference",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples/**/README.md", "README.md"]

# MyST: ``[text](page.md#a-heading)`` links resolve to heading anchors, checked at build time.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_links_external_new_tab = False

# autodoc: numpy-style docstrings, signatures as written, members in source order.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# Code blocks: the copy button leaves prompts and output out.
copybutton_prompt_text = r"^\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False

# Curly quotes and ellipses, but ``--`` stays two hyphens: prose names command-line options.
smartquotes_action = "qe"

html_theme = "furo"
html_title = f"flowerbed {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

# autodoc imports the documented modules; Flower and Ray are mocked so the build stays light
# (the API pages document flowerbed's own signatures and docstrings only).
autodoc_mock_imports = ["flwr", "ray"]
