"""The benchmarks' harness: the one child-process protocol (``benchmarks.children``) and the paired
statistics (``benchmarks.stats``)."""

import os
import sys
from pathlib import Path

import pytest

from benchmarks.children import ChildError, failure, run_command, run_json
from benchmarks.stats import median, over_seeds, paired_median, ratio_of_totals

CHILDREN = {
    "answers": "from benchmarks.children import serve\nserve(lambda spec: {'twice': 2 * spec['x']})\n",
    "fails": "import sys\nprint('loading')\nprint('a warning', file=sys.stderr)\nsys.exit('error: no such body')\n",
    "sleeps": "import os, time\nopen(os.path.join(os.path.dirname(__file__), 'pid'), 'w').write(str(os.getpid()))\n"
              "while True:\n    time.sleep(1)\n",
    "mumbles": "print('no json here')\n",
}


@pytest.fixture
def child_env(tmp_path):
    """An environment in which ``python -m bench_child_NAME`` runs each of ``CHILDREN``."""
    for name, text in CHILDREN.items():
        (tmp_path / f"bench_child_{name}.py").write_text(text)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))


def test_a_json_child_answers_its_spec(child_env):
    answer = run_json("bench_child_answers", {"x": 21}, "child", env=child_env)
    assert answer["twice"] == 42 and answer["child_seconds"] > 0


def test_a_failing_child_is_one_line_naming_it_and_its_last_words(child_env):
    with pytest.raises(ChildError) as caught:
        run_json("bench_child_fails", {}, "bench child sb3", env=child_env)
    assert str(caught.value) == "bench child sb3 exited 1: error: no such body"
    with pytest.raises(ChildError, match=r"^child answered no JSON object: no output$"):
        run_json("bench_child_mumbles", {}, "child", env=child_env)


def test_a_child_past_its_time_limit_is_killed(child_env, tmp_path):
    """The child sleeps for ever: the call returns only because it was killed, and the child is gone (its
    pid, where it lived long enough to write it on a busy machine, beside its module: children run in the
    checkout)."""
    with pytest.raises(ChildError, match=r"^slow child still running after 1 s: killed$"):
        run_json("bench_child_sleeps", {}, "slow child", timeout=1, env=child_env)
    if (tmp_path / "pid").exists() and (pid := (tmp_path / "pid").read_text()):
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_a_command_logs_its_output_and_reports_its_cpu_time(tmp_path):
    log = tmp_path / "logs" / "spin.log"
    ended = run_command([sys.executable, "-c", "print('spun', sum(range(3_000_000)))"], "spin", log=log)
    assert ended.returncode == 0 and ended.cpu_seconds > 0 and ended.seconds > 0  # both measured
    assert log.read_text().startswith("spun") and ended.output == log.read_text()
    polled = []
    run_command([sys.executable, "-c", "import time; time.sleep(0.5)"], "nap", poll=lambda: polled.append(1))
    assert len(polled) > 2
    with pytest.raises(ChildError, match="^nap exited 3: no output$"):
        run_command([sys.executable, "-c", "raise SystemExit(3)"], "nap")


def test_failure_lines():
    assert failure("x", 0, "fine", None) is None
    assert failure("training 2", 1, "step 1\nCUDA out of memory\n\n", None) == "training 2 exited 1: CUDA out of memory"
    assert failure("training 2", None, "", 240.0) == "training 2 still running after 240 s: killed"


def test_paired_statistics_take_ratios_within_each_pair():
    # Pair 2 ran on a host twice as slow: its ratio stays 1.5, which a ratio of medians would not see.
    fast, slow = [9000.0, 4500.0, 9300.0], [6000.0, 3000.0, 6000.0]
    assert paired_median(fast, slow) == 1.5
    assert paired_median([1.0, 2.0], [1.0, 1.0]) == 1.5  # an even count: the mean of the middle two
    assert ratio_of_totals(fast, slow) == round(22800 / 15000, 4)
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError):
        paired_median([1.0, 2.0], [1.0])  # unpaired lengths are a bug, not a figure
    assert over_seeds([1.0, 3.0]) == {"final_returns": [1.0, 3.0], "mean": 2.0, "std": 1.0}
