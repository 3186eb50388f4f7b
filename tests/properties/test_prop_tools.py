"""Every tool's arguments and output paths, attacked from its own parser: each tool's ``argparse`` parser is
captured as the tool builds it (``declarations.tool_parser``), and every number option and every output path
option it declares is attacked, so a new option is attacked without a test of its own. ``INVOCATIONS`` holds the
one hand-written part: an invocation of each tool and subcommand that is valid but for the attacked option (a
new tool or subcommand fails ``test_every_tool_and_subcommand_has_an_invocation`` until it gets one).

The invariants, each tool run in a process of its own under a CPU limit set in that process (RLIMIT_CPU: past it
the tool is killed, which counts as a failure, never a time assertion):

- a number past any bound (``1e10``, ``10**12``, ``inf``, ``nan``) is refused: exit 2 and one line;
- a negative number in scientific notation is a value for a ``KEY VALUE`` override, not an unknown flag;
- an output path on a run's published files (a model, a record, a genome, ``config.yaml``, the run itself) leaves
  every published file as it was.
"""

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from derl.checked_config import load_config
from derl.morphology import random_genome
from tests.conftest import DEFAULT_CFG
from tests.evolution.test_evolution_protocol import ENV, ROOT, published, start
from tests.properties.declarations import (
    config_keys,
    examples,
    is_number,
    is_output_path,
    tool_parser,
    tool_paths,
)

pytestmark = pytest.mark.fuzz

TINY = ["PPO.MAX_STATE_ACTION_PAIRS", "64", "PPO.NUM_ENVS", "1", "PPO.TIMESTEPS", "64"]
# An invocation of each tool (and subcommand) that is valid but for the option attacked, which is appended
# (argparse keeps an option's last value). {run}: a finished search, {id}: one of its morphologies, {genome}: a
# genome file, {genomes}: a folder of them, {out}: a fresh folder of the test's own.
INVOCATIONS = {
    ("bench.py", "fidelity"): ["fidelity", "--cpu", "--genomes", "{genomes}", "--work", "{out}/work"],
    ("evaluate.py", None): ["{run}", "--tasks", "point_nav", "--top", "1"],
    ("evo_single_proc.py", None): ["--cfg", str(DEFAULT_CFG), "OUT_DIR", "{out}/run"],
    ("gpu_check.py", None): ["--quick"],
    ("morphology.py", "image"): ["image", "{genome}", "--out", "{out}/body.png"],
    ("morphology.py", "mutate"): ["mutate", "{genome}", "--seed", "0", "--out", "{out}/bodies"],
    ("morphology.py", "sample"): ["sample", "--num", "1", "--seed", "0", "--out", "{out}/bodies"],
    ("morphology.py", "stats"): ["stats", "{genomes}"],
    ("morphology.py", "xml"): ["xml", "{genome}"],
    ("replay.py", None): ["{run}", "{id}", "--steps", "5", "--episodes", "0"],
    ("report.py", None): ["{run}", "--no-media", "--out", "{out}/report"],
    ("status.py", None): ["{run}"],
    ("train_ppo.py", None): ["--quiet", "--genome", "{genome}", "--out", "{out}/training"],
}
# Config overrides that keep a run tiny, after the invocation.
BUDGETS = {("train_ppo.py", None): TINY}
# Exit codes a tool documents besides 0 and 2 (docs/reference/commands.md): gpu_check's 1, a check failed or no GPU.
OTHER_CODES = {"gpu_check.py": {1}}
PAST_ANY_BOUND = ["1e10", str(10**12), str(10**30), "inf", "nan"]
CPU_SECONDS = 120


def _parsers() -> dict[tuple[str, str | None], argparse.ArgumentParser]:
    """The parser of each tool and subcommand (``bench.py``: of each benchmark ``INVOCATIONS`` runs)."""
    found = {}
    for path in tool_paths():
        benchmarks = [sub for tool, sub in INVOCATIONS if tool == path.name] if path.name == "bench.py" else [None]
        for benchmark in benchmarks:
            parser = tool_parser(path, [benchmark] if benchmark else [])
            subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subparsers:
                found.update({(path.name, name): sub for name, sub in subparsers[0].choices.items()})
                TOOL_PARSERS[path.name] = parser
            else:
                found[(path.name, benchmark)] = parser
    return found


TOOL_PARSERS: dict[str, argparse.ArgumentParser] = {}  # a tool with subcommands: its own parser
PARSERS = _parsers()
NUMBER_OPTIONS = sorted((tool, sub, action.option_strings[-1]) for (tool, sub), parser in PARSERS.items()
                        for action in parser._actions if is_number(action))
OUTPUT_OPTIONS = sorted((tool, sub, action.option_strings[-1]) for (tool, sub), parser in PARSERS.items()
                        for action in parser._actions if is_output_path(action))
OVERRIDE_TOOLS = sorted((tool, sub) for (tool, sub), parser in PARSERS.items()
                        if any(action.dest == "overrides" for action in parser._actions))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, str]:
    """A finished fake search of 4 morphologies, a genome file and a folder of three."""
    root = tmp_path_factory.mktemp("tools")
    run = root / "run"
    assert start(run, "EVO.SEARCH_SPACE_SIZE", "4").wait(timeout=600) == 0
    unimal = load_config().unimal
    (root / "genomes").mkdir()
    for seed in range(3):
        genome = random_genome(unimal, np.random.default_rng(seed), f"g{seed}")
        (root / "genomes" / f"g{seed}.json").write_text(genome.to_json())
    return {"run": str(run), "id": sorted(published(run))[0], "genome": str(root / "genomes" / "g0.json"),
            "genomes": str(root / "genomes")}


def _limit():
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def _run(tool: str, sub: str | None, extra: list[str], places: dict[str, str]) -> subprocess.CompletedProcess:
    path = ROOT / ("evo_single_proc.py" if tool == "evo_single_proc.py" else f"tools/{tool}")
    argv = [arg.format(**places) for arg in [*INVOCATIONS[(tool, sub)], *BUDGETS.get((tool, sub), []), *extra]]
    return subprocess.run([sys.executable, str(path), *argv], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=10 * CPU_SECONDS, preexec_fn=_limit)


def _one_line_refusal(done: subprocess.CompletedProcess, what) -> None:
    """Exit 2 (or a code the tool documents for what it checks first, gpu_check's "no GPU") and one line."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode in {2} | OTHER_CODES.get(what[0], set()), (what, done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in done.stderr, (what, done.stderr[-2000:])


def test_every_tool_and_subcommand_has_an_invocation():
    assert set(PARSERS) == set(INVOCATIONS), set(PARSERS) ^ set(INVOCATIONS)
    assert NUMBER_OPTIONS and OUTPUT_OPTIONS and OVERRIDE_TOOLS


@settings(max_examples=examples(1, 1 / 40), phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(option=st.sampled_from(NUMBER_OPTIONS), value=st.sampled_from(PAST_ANY_BOUND))
def test_a_number_past_any_bound_is_refused_in_one_line(option, value, workspace, tmp_path_factory):
    tool, sub, flag = option
    places = {**workspace, "out": str(tmp_path_factory.mktemp("out"))}
    nargs = next(a.nargs for a in PARSERS[(tool, sub)]._actions if flag in a.option_strings)
    values = [value] * (nargs if isinstance(nargs, int) else 1)
    _one_line_refusal(_run(tool, sub, [flag, *values], places), (tool, sub, flag, value))


@settings(max_examples=examples(3, 1 / 50))
@given(tool=st.sampled_from(OVERRIDE_TOOLS), key=st.sampled_from([k for k in config_keys() if k.numeric
                                                                  and not k.derived and not k.span]),
       value=st.sampled_from(["-1e1", "-1e-3", "-2.5e+2", "-1E1"]))
def test_a_negative_number_is_an_override_value_not_a_flag(tool, key, value):
    """Parsed in this process (the parser the tool builds, nothing run): ``KEY -1e1`` is a pair, whatever the
    config then says of the value."""
    argv = [arg.replace("{", "").replace("}", "") for arg in INVOCATIONS[tool]] + [key.name, value]
    try:  # a tool with subcommands (morphology.py) parses as derl.arguments.parse_with_overrides: KEY VALUE may
        # follow the subcommand's options (a subparser's parse_args alone leaves them unrecognized); a benchmark
        # of bench.py has a parser of its own, after the benchmark's name
        args = TOOL_PARSERS[tool[0]].parse_with_overrides(argv) if tool[0] in TOOL_PARSERS else \
            PARSERS[tool].parse_args(argv[1:] if tool[1] else argv)
    except SystemExit as exit_:
        raise AssertionError(f"{tool} {argv}: the parser refused {value!r} as a value") from exit_
    assert args.overrides[-2:] == [key.name, value], args.overrides


def _digests(run: Path) -> dict[str, str | None]:
    """The run's published files (records, models, genomes, publications) and config, by path."""
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(run.rglob("*"))
            if p.parts[len(run.parts)] in ("metadata", "models", "genomes", "published", "config.yaml", "xml")}


TARGETS = ["{run}/models/{id}.pt", "{run}/metadata/{id}.json", "{run}/genomes/{id}.json", "{run}/config.yaml",
           "{run}", "{run}/published/00000000.json", "{run}/xml/{id}.xml"]


@settings(max_examples=examples(1, 1 / 40), phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(option=st.sampled_from(OUTPUT_OPTIONS), target=st.sampled_from(TARGETS))
def test_an_output_path_on_a_runs_published_files_leaves_them_as_they_were(option, target, workspace,
                                                                          tmp_path_factory):
    tool, sub, flag = option
    out = tmp_path_factory.mktemp("out")
    run = out / "run"  # a copy per example: what one example changed, the next does not see (nor a replay)
    shutil.copytree(workspace["run"], run, symlinks=True)
    places = {**workspace, "out": str(out), "run": str(run)}
    before = _digests(run)
    done = _run(tool, sub, [flag, target], places)
    assert _digests(run) == before, (tool, sub, flag, target, done.returncode, done.stderr[-1500:])
    assert done.returncode in {0, 2} | OTHER_CODES.get(tool, set()), (tool, sub, flag, target, done.stderr[-2000:])
    if done.returncode != 0:
        _one_line_refusal(done, (tool, sub, flag, target))
    json.dumps(before)  # the digests are plain data: a failure prints them
