"""Sphinx configuration: the pages are Markdown, read by MyST. `.ci/run` builds them with warnings as errors
(``sphinx-build -W -n``), so a broken cross-reference or link between pages fails CI."""

project = "r1build"
author = "r1build contributors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["deflist"]
myst_heading_anchors = 3  # `page.md#a-heading` links, checked by MyST (h1 to h3, GitHub's slugs)
nitpicky = True
html_theme = "alabaster"
html_title = "r1build"
