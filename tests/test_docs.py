"""The documentation stays true to the code: every config key is declared once with a meaning and
appears in the generated reference (docs/reference/config.md, filled by docs/hooks.py when
`make docs` builds the site)."""

import importlib.util
from pathlib import Path

from derl.config import _defaults, declared_keys, flatten

ROOT = Path(__file__).resolve().parents[1]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flattened_key_is_declared_with_a_one_line_meaning():
    declared = {doc.key: doc for doc in declared_keys()}
    assert list(declared) == [key for key, _ in flatten(_defaults())]
    for key, doc in declared.items():
        assert doc.meaning.strip() and "\n" not in doc.meaning, key
        assert doc.type == type(dict(flatten(_defaults()))[key]).__name__, key


def test_the_config_reference_lists_every_key_with_its_default():
    hooks = _hooks()
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert hooks.MARKER in page
    built = hooks.on_page_markdown(page, None, None, None)
    for doc in declared_keys():
        row = next(line for line in built.splitlines() if line.startswith(f"| `{doc.key}` |"))
        assert doc.meaning.replace("|", "\\|") in row, doc.key
    assert "| `SIM.NCONMAX` | `64` | int |" in built
