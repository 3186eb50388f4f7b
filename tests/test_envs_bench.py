"""`tools/bench.py env` runs small and reports the batched env's throughput, the physics alone (batch and
loop) and reset costs."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from derl.bench import env as bench

ROOT = Path(__file__).resolve().parents[1]


def test_bench_reports_ratio_and_reset_cost_per_env():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--envs", "ft,vt,escape_bowl", "--morphologies", "1", "--steps", "30",
                              "--num-envs", "4", "--resets", "2"])
    result = bench.run(args)
    assert set(bench.env_configs()) >= {"ft", "vt", "mvt", "patrol", "point_nav", "obstacle", "exploration",
                                        "incline", "push_box_incline", "escape_bowl", "manipulation_ball"}
    for name in ("ft", "vt", "escape_bowl"):
        row = result[name]["per_morphology"][0]
        assert row["env_steps_per_sec"] > 0 and row["batch_physics_steps_per_sec"] > 0
        assert abs(row["ratio"] - row["env_steps_per_sec"] / row["batch_physics_steps_per_sec"]) < 1e-2
        assert abs(row["ratio_to_loop"] - row["env_steps_per_sec"] / row["loop_physics_steps_per_sec"]) < 1e-2
        assert result[name]["median_reset_ms"] > 0 and result[name]["median_compile_ms"] > 0
    json.dumps(result)


def test_bench_script_rejects_an_unknown_env():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "env", "--envs", "ocean"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "unknown env 'ocean'" in done.stderr
