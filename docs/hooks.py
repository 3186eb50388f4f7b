"""mkdocs hooks (mkdocs.yml ``hooks``): the config reference generated from the typed config.

``docs/reference/config.md`` holds the marker line ``<!-- config-keys -->``; the build replaces it with
the table of every flattened key of ``derl.checked_config.Config`` from its one declaration in the
section that holds it (default, type, the range of its numbers, meaning), so the page cannot drift from
the code. ``tests/project/test_docs.py`` checks the table.
"""

from __future__ import annotations

import json

from derl.checked_config import Config
from derl.config import declared_keys

MARKER = "<!-- config-keys -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_table() -> str:
    """The Markdown table of every flattened config key, grouped by section."""
    lines = []
    section = None
    for doc in declared_keys(Config):
        head = doc.key.split(".")[0] if "." in doc.key else "Top level"
        if head != section:
            section = head
            lines += ["", f"## {section}", "", "| key | default | type | values | meaning |", "|---|---|---|---|---|"]
        default = json.dumps(doc.default) if not isinstance(doc.default, str) else doc.default
        values = f"`{doc.allowed.text()}`" if doc.allowed is not None else ""
        lines.append(f"| `{doc.key}` | `{_cell(default)}` | {doc.type} | {values} | {_cell(doc.meaning)} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Fills the config reference page's marker with the generated table."""
    return markdown.replace(MARKER, config_table()) if MARKER in markdown else markdown
