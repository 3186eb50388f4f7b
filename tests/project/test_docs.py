"""The documentation stays true to the code: every config key is declared once with a meaning and
appears in the generated reference (docs/reference/config.md, filled by docs/hooks.py when
`make docs` builds the site); the Python API page's examples run, on a synthetic run and on a tiny real one."""

import importlib.util
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

from benchmarks.report import build_synthetic_run
from derl.checked_config import Config
from derl.config import declared_keys, flatten

ROOT = Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flattened_key_is_declared_with_a_one_line_meaning():
    declared = {doc.key: doc for doc in declared_keys(Config)}
    assert list(declared) == [key for key, _ in flatten(Config().to_dict())]
    for key, doc in declared.items():
        assert doc.meaning.strip() and "\n" not in doc.meaning, key
        assert doc.type == type(dict(flatten(Config().to_dict()))[key]).__name__, key


def test_the_config_reference_lists_every_key_with_its_default():
    hooks = _hooks()
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert hooks.MARKER in page
    built = hooks.on_page_markdown(page, None, None, None)
    for doc in declared_keys(Config):
        row = next(line for line in built.splitlines() if line.startswith(f"| `{doc.key}` |"))
        assert doc.meaning.replace("|", "\\|") in row, doc.key
    assert "| `SIM.NCONMAX` | `64` | int |" in built


# A docs reference in the code: `docs/<page>.md` or `docs/<page>.md#<anchor>`, the anchor being the
# slug mkdocs gives a heading of that page.
REFERENCE = re.compile(r"docs/([\w/.-]+?\.md)(?:#([\w-]+))?")
SCANNED = ("derl", "tools", "tests", "evo_single_proc.py", "Makefile", "pyproject.toml", "requirements.txt",
           "requirements-gpu.txt", "requirements-docs.txt", "requirements-bench.txt")
# A reference to a README section: the README is a door now, every section lives in docs/.
OLD_STYLE = re.compile(r"README\W{0,3}[\"(A-Z]")


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading: markup dropped, lower case, hyphens."""
    text = unicodedata.normalize("NFKD", re.sub(r"[`*]", "", heading)).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            found.add(slug(match.group(1)))
    return found


def _scanned_files():
    for name in SCANNED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        yield from (f for f in files if "__pycache__" not in f.parts)


def test_slug_is_mkdocs_anchor():
    assert slug("`summary.json`") == "summaryjson"
    assert slug("`metadata/<id>.json`") == "metadataidjson"
    assert slug("The output folder is untrusted input") == "the-output-folder-is-untrusted-input"


def test_every_docs_reference_in_the_code_points_to_a_page_and_anchor():
    references = 0
    for path in _scanned_files():
        for match in REFERENCE.finditer(path.read_text(errors="ignore")):
            page, anchor = ROOT / "docs" / match.group(1), match.group(2)
            where = f"{path.relative_to(ROOT)}: {match.group(0)}"
            assert page.is_file(), f"{where}: no such page"
            assert anchor is None or anchor in anchors(page), f"{where}: no such heading"
            references += 1
    assert references >= 20


def test_no_readme_section_is_referred_to():
    old = {str(path.relative_to(ROOT)) for path in _scanned_files() if path.name != "test_docs.py"
           and OLD_STYLE.search(path.read_text(errors="ignore"))}
    assert not old, sorted(old)


API_PAGE = ROOT / "docs" / "reference" / "api.md"


def _run_api_examples(folder: Path, monkeypatch) -> dict:
    """Each Python block of docs/reference/api.md, in order and in one namespace, from ``folder``
    (which holds a run in output/quick, as the page says); returns the namespace."""
    blocks = re.findall(r"```python\n(.*?)```", API_PAGE.read_text(), re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(folder)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(API_PAGE), "exec"), namespace)  # the page's own examples, as written
    # They write output/one and nothing else, and the page names everything they write there.
    assert sorted(path.name for path in folder.iterdir()) == ["output"]
    assert sorted(path.name for path in (folder / "output").iterdir()) == ["one", "quick"]
    written = {path.name for path in (folder / "output" / "one").iterdir()}
    assert {"metrics.json", "model.pt"} <= written
    assert all(name in blocks[-1] for name in written), written
    return namespace


def test_the_api_examples_run_on_a_synthetic_run(tmp_path, monkeypatch):
    build_synthetic_run(tmp_path / "output" / "quick", morphologies=12, iterations=20, genomes=3)
    _run_api_examples(tmp_path, monkeypatch)


def test_the_api_examples_run_on_a_tiny_real_quick_run(tmp_path, monkeypatch):
    """The page's examples on what a real search writes (a synthetic run holds every field in every
    record): configs/evo/quick.yml cut to 3 morphologies of 640 env steps whose bodies never fall
    (ENV.STAND_HEIGHT_RATIO 0), so no 1,000-step episode ends, in the search or in the examples'
    training: curves and records without episode fields, as early in a real run. About 12 s on 2 cores."""
    overrides = ["OUT_DIR", str(tmp_path / "output" / "quick"), "EVO.NUM_PROCESSES", "2",
                 "EVO.INIT_POPULATION_SIZE", "2", "EVO.SEARCH_SPACE_SIZE", "3", "EVO.AGING_WINDOW_SIZE", "2",
                 "PPO.NUM_ENVS", "2", "PPO.TIMESTEPS", "32", "PPO.MAX_STATE_ACTION_PAIRS", "640",
                 "ENV.STAND_HEIGHT_RATIO", "0"]
    done = subprocess.run([sys.executable, "evo_single_proc.py", "--cfg", "configs/evo/quick.yml", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    namespace = _run_api_examples(tmp_path, monkeypatch)
    assert namespace["forward"] is None  # the hard case was met: no episode ended in the search ...
    assert namespace["last"].get("return") is None and namespace["last"]["episodes"] == 0  # ... nor here
