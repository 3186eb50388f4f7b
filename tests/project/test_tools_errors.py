"""Every user error of tools/*.py and evo_single_proc.py: one line on stderr, exit code 2, no traceback,
and nothing written outside the folder the command was given (docs/reference/commands.md).

Each case runs the real script in a fresh working folder ``work/`` holding the inputs below; ``out/``
is the only place a command may write to, and ``work/`` must be unchanged afterwards except for it.
"""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from derl.checked_config import load_config
from derl.config import dump_config
from derl.morphology import random_genome, to_mjcf
from tests.conftest import DEFAULT_CFG, ROOT


def _genome(**changes) -> str:
    cfg = load_config(None, [])
    data = json.loads(random_genome(cfg.unimal, np.random.default_rng(0), "g0").to_json())
    data.update({k: v for k, v in changes.items() if k != "group"})
    data["groups"][0].update(changes.get("group", {}))
    return json.dumps(data)


def _inputs(work: Path) -> None:
    """The inputs the cases refer to, by file name."""
    cfg = load_config(None, [])
    good = random_genome(cfg.unimal, np.random.default_rng(0), "g0")
    (work / "good.json").write_text(good.to_json())
    (work / "good.xml").write_text(to_mjcf(good, cfg))
    (work / "corrupt.json").write_text("{not json")
    (work / "negative_radius.json").write_text(_genome(group={"radius": -0.05}))
    (work / "negative_head.json").write_text(_genome(head_radius=-0.1))
    (work / "nan_gear.json").write_text(_genome(group={"joints": [{"axis": "x", "range": [-30, 30],
                                                                  "gear": float("nan")}]}))
    (work / "string_length.json").write_text(_genome(group={"length": "long"}))
    (work / "huge_head.json").write_text(_genome(head_radius=1e300))  # a mujoco.FatalError once built
    (work / "deep.json").write_text("[" * 200_000)  # a RecursionError in json.loads
    (work / "linked_run").mkdir()
    (work / "linked_run" / "quarantine").symlink_to("../out")  # quarantined files would leave the run
    (work / "escape.json").write_text(_genome(id="../../escaped"))
    (work / "malformed.xml").write_text("<mujoco><worldbody><geom></mujoco>")
    (work / "not_unimal.xml").write_text("<mujoco><worldbody/></mujoco>")
    (work / "corrupt.pt").write_bytes(b"\x80\x04 this is not a checkpoint")
    buffer = io.BytesIO()
    torch.save({"weights": torch.zeros(3)}, buffer)
    (work / "foreign.pt").write_bytes(buffer.getvalue())
    (work / "bad.yml").write_text("PPO: [unclosed\n")
    (work / "a_file").write_text("")
    (work / "out").mkdir()
    (work / "out" / "model.pt").write_bytes(b"garbage")  # read by --resume; out/ is the only folder written
    # A run folder whose one published morphology has a corrupt checkpoint.
    run = work / "run"
    for folder in ("metadata", "xml", "models", "genomes"):
        (run / folder).mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    (run / "xml" / "000000.xml").write_text(to_mjcf(good, cfg))
    (run / "genomes" / "000000.json").write_text(good.to_json().replace('"g0"', '"000000"'))
    (run / "models" / "000000.pt").write_bytes(b"garbage")
    (run / "metadata" / "000000.json").write_text(json.dumps({
        "id": "000000", "slot": 0, "attempt": 0, "publication": 0, "lineage": "000000", "parent_id": None,
        "return": 1.0, "__reward__forward": 1.0}))
    training = work / "training"  # a folder of tools/train_ppo.py, not an evolution run
    training.mkdir()
    (training / "config.yaml").write_text(dump_config(cfg))
    (training / "run.json").write_text(json.dumps({"xml": "good.xml"}))
    (work / "bad_genomes").mkdir()
    (work / "bad_genomes" / "x.json").write_text(_genome(group={"radius": -1.0}))


MORPHOLOGY = ["tools/morphology.py"]
EVO = ["evo_single_proc.py", "--cfg", str(DEFAULT_CFG)]
TRAIN = ["tools/train_ppo.py", "--quiet", "PPO.MAX_STATE_ACTION_PAIRS", "64", "PPO.NUM_ENVS", "1",
         "PPO.TIMESTEPS", "64"]
CASES = {
    "morphology xml: missing file": [*MORPHOLOGY, "xml", "missing.json"],
    "morphology xml: not JSON": [*MORPHOLOGY, "xml", "corrupt.json"],
    "morphology xml: negative limb radius": [*MORPHOLOGY, "xml", "negative_radius.json"],
    "morphology xml: negative head radius": [*MORPHOLOGY, "xml", "negative_head.json"],
    "morphology xml: NaN gear": [*MORPHOLOGY, "xml", "nan_gear.json"],
    "morphology xml: string length": [*MORPHOLOGY, "xml", "string_length.json"],
    "morphology xml: huge head radius": [*MORPHOLOGY, "xml", "huge_head.json"],
    "morphology image: huge size": [*MORPHOLOGY, "image", "good.json", "--out", "out/x.png", "--size", "100000",
                                    "100000"],
    "train_ppo: deeply nested genome": [*TRAIN, "--genome", "deep.json", "--out", "out"],
    "morphology xml: a folder": [*MORPHOLOGY, "xml", "bad_genomes"],
    "morphology mutate: crafted id": [*MORPHOLOGY, "mutate", "escape.json", "--seed", "1", "--out", "out"],
    "morphology mutate: negative seed": [*MORPHOLOGY, "mutate", "good.json", "--seed", "-1", "--out", "out"],
    "morphology image: bad genome": [*MORPHOLOGY, "image", "negative_radius.json", "--out", "out/x.png"],
    "morphology stats: bad genome": [*MORPHOLOGY, "stats", "bad_genomes"],
    "morphology stats: missing folder": [*MORPHOLOGY, "stats", "missing"],
    "morphology sample: --num 0": [*MORPHOLOGY, "sample", "--num", "0", "--seed", "1", "--out", "out"],
    "morphology sample: bad config": [*MORPHOLOGY, "sample", "--num", "1", "--seed", "1", "--out", "out",
                                      "--cfg", "bad.yml"],
    "morphology sample: --out is a file": [*MORPHOLOGY, "sample", "--num", "1", "--seed", "1", "--out", "a_file"],
    "train_ppo: missing xml": [*TRAIN, "--xml", "missing.xml", "--out", "out"],
    "train_ppo: malformed xml": [*TRAIN, "--xml", "malformed.xml", "--out", "out"],
    "train_ppo: xml without a unimal": [*TRAIN, "--xml", "not_unimal.xml", "--out", "out"],
    "train_ppo: crafted genome id": [*TRAIN, "--genome", "escape.json", "--out", "out"],
    "train_ppo: negative radius": [*TRAIN, "--genome", "negative_radius.json", "--out", "out"],
    "train_ppo: no source": [*TRAIN, "--out", "out"],
    "train_ppo: missing config": [*TRAIN, "--cfg", "missing.yml", "--xml", "good.xml", "--out", "out"],
    "train_ppo: --out is a file": [*TRAIN, "--xml", "good.xml", "--out", "a_file"],
    "train_ppo --eval: corrupt checkpoint": [*TRAIN, "--eval", "corrupt.pt", "--xml", "good.xml"],
    "train_ppo --eval: non-derl checkpoint": [*TRAIN, "--eval", "foreign.pt", "--xml", "good.xml"],
    "train_ppo --eval: missing checkpoint": [*TRAIN, "--eval", "missing.pt", "--xml", "good.xml"],
    "train_ppo --eval: missing folder": [*TRAIN, "--eval", "missing/model.pt"],
    "train_ppo --eval: no run.json": [*TRAIN, "--eval", "corrupt.pt"],
    "train_ppo --resume: corrupt model.pt": [*TRAIN, "--xml", "good.xml", "--out", "out", "--resume"],
    "replay: missing run": ["tools/replay.py", "missing", "000000"],
    "replay: crafted id": ["tools/replay.py", "run", "../../escaped"],
    "replay: unpublished id": ["tools/replay.py", "run", "000001"],
    "replay: corrupt checkpoint": ["tools/replay.py", "run", "000000", "--video", "out/v.mp4", "--steps", "5"],
    "report: missing run": ["tools/report.py", "missing"],
    "report: --out is a file": ["tools/report.py", "run", "--out", "a_file", "--no-media"],
    "status: missing run": ["tools/status.py", "missing"],
    "status: not a run": ["tools/status.py", "bad_genomes"],
    "status: a training folder": ["tools/status.py", "training"],
    "report: a training folder": ["tools/report.py", "training", "--no-media"],
    "replay: a training folder": ["tools/replay.py", "training", "000000"],
    "replay: negative --episodes": ["tools/replay.py", "run", "000000", "--episodes", "-1"],
    "report: unknown flag": ["tools/report.py", "run", "--bogus"],
    "train_ppo: unknown flag": ["tools/train_ppo.py", "--bogus"],
    "train_ppo --resume: no training there": [*TRAIN, "--out", "missing", "--resume"],
    "morphology: unknown subcommand": [*MORPHOLOGY, "nonsense"],
    "bench: no benchmark": ["tools/bench.py"],
    "bench ppo: unknown flag": ["tools/bench.py", "ppo", "--bogus"],
    "bench: unknown benchmark": ["tools/bench.py", "nonsense"],
    "bench env: unknown env": ["tools/bench.py", "env", "--envs", "nonsense"],
    "bench sim: unknown backend": ["tools/bench.py", "sim", "--backends", "mjx"],
    "bench compile: no bodies": ["tools/bench.py", "compile", "--mutations", "2"],
    "bench ab: unknown revision": ["tools/bench.py", "ab", "--base", "no-such-rev"],
    "evaluate: missing run": ["tools/evaluate.py", "missing", "--tasks", "point_nav"],
    "evaluate: unknown task": ["tools/evaluate.py", "run", "--tasks", "nonsense"],
    "evaluate: crafted id": ["tools/evaluate.py", "run", "--tasks", "point_nav", "--ids", "../../escaped"],
    "evo_single_proc: missing config": ["evo_single_proc.py", "--cfg", "missing.yml"],
    "evo_single_proc: no --cfg": ["evo_single_proc.py", "OUT_DIR", "out"],
    "evo_single_proc: unknown key": [*EVO, "NO.SUCH_KEY", "1", "OUT_DIR", "out"],
    "evo_single_proc: OUT_DIR under a file": [*EVO, "OUT_DIR", "a_file/run"],
    "evo_single_proc: quarantine/ is a link": [*EVO, "OUT_DIR", "linked_run"],
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    _inputs(folder)
    return folder


def _outside_out(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but ``work/out/``, with its content."""
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    return {name: path.read_bytes() for name, path in files.items() if not name.startswith("work/out/")}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_user_error_is_one_line_and_exit_2(argv, inputs, tmp_path):
    work = tmp_path / "work"
    subprocess.run(["cp", "-a", str(inputs), str(work)], check=True)
    before = _outside_out(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / argv[0]), *argv[1:]], cwd=work, capture_output=True,
                          text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(("error: ", "usage: ")), done.stderr[-3000:]
    assert _outside_out(tmp_path) == before  # nothing written, changed or removed outside out/
