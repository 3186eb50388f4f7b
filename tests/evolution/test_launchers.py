"""tools/launch_ssh.sh and tools/slurm/derl.sbatch run a real two-node search (fake training).

``ssh`` and ``srun`` are replaced by scripts that run the node's command locally, so the test checks
what the launchers own: one node per host/task, NODE_ID and NUM_NODES, per-node logs, exit codes.
"""

import os
import stat
import subprocess
from pathlib import Path

from tests.evolution.test_evolution_protocol import ENV, ROOT, assert_complete

CFG = ["--cfg", str(ROOT / "tests" / "assets" / "evolution" / "defaults.yml")]  # the defaults, no preset
SEARCH = ["EVO.NUM_PROCESSES", "1", "EVO.INIT_POPULATION_SIZE", "4", "EVO.SEARCH_SPACE_SIZE", "6",
          "EVO.AGING_WINDOW_SIZE", "4", "PPO.MAX_STATE_ACTION_PAIRS", str(2 * 4096),
          "EVO.SELECTION_CRITERIA", "[__reward__forward]", "EVO.SELECTION_CRITERIA_OBJ", "[-1]"]


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_launch_ssh_runs_one_node_per_host(tmp_path):
    fake_ssh = _script(tmp_path / "fake_ssh", '#!/bin/sh\necho "host $1" >&2\nshift\nexec sh -c "$*"\n')
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# the machines\nnode-a\n\n  node-b  # second\n")
    out, logs = tmp_path / "run", tmp_path / "logs"
    env = dict(ENV, DERL_SSH=str(fake_ssh), DERL_LOG_DIR=str(logs), PYTHON=_python())
    done = subprocess.run(["tools/launch_ssh.sh", str(hosts), *CFG, "OUT_DIR", str(out), *SEARCH], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node 1 on node-b exited with code 0" in done.stdout
    assert sorted(p.name for p in logs.iterdir()) == ["node-0.log", "node-1.log"]
    assert "host node-b" in (logs / "node-1.log").read_text()
    assert "node 1: started 1 workers" in (logs / "node-1.log").read_text()
    assert_complete(out, 6)


def test_launch_ssh_shows_why_a_node_failed(tmp_path):
    """ssh's exit code alone (255) says nothing: the end of the node's log follows it on the console."""
    fake_ssh = _script(tmp_path / "fake_ssh", '#!/bin/sh\necho "ssh: connect to host $1 port 22: Connection '
                                              'refused" >&2\nexit 255\n')
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("unreachable\n")
    env = dict(ENV, DERL_SSH=str(fake_ssh), DERL_LOG_DIR=str(tmp_path / "logs"), PYTHON=_python())
    done = subprocess.run(["tools/launch_ssh.sh", str(hosts), "OUT_DIR", str(tmp_path / "run")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 255
    assert "node 0 on unreachable exited with code 255\n  node 0: ssh: connect to host unreachable port 22: " \
           "Connection refused" in done.stdout, done.stdout


def test_launch_ssh_bad_hosts_file(tmp_path):
    done = subprocess.run(["tools/launch_ssh.sh", str(tmp_path / "none.txt")], cwd=ROOT, capture_output=True,
                          text=True)
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert "hosts file not found" in done.stderr


def test_sbatch_runs_one_node_per_task(tmp_path):
    # srun runs the task command once per task, with the per-task SLURM variables.
    _script(tmp_path / "srun", '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
                        'for k in 0 1; do SLURM_PROCID=$k SLURM_NTASKS=2 "$@" & done\nwait -n; a=$?; wait -n; '
                        'b=$?; exit $(( a > b ? a : b ))\n')
    out, logs = tmp_path / "run", tmp_path / "logs"
    env = dict(ENV, PATH=f"{tmp_path}:{os.environ['PATH']}", DERL_LOG_DIR=str(logs), SLURM_SUBMIT_DIR=str(ROOT),
               PYTHON=_python())
    sbatch = ROOT / "tools" / "slurm" / "derl.sbatch"
    done = subprocess.run(["bash", str(sbatch), *CFG, "OUT_DIR", str(out), *SEARCH], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + "".join(p.read_text() for p in logs.iterdir())
    assert sorted(p.name for p in logs.iterdir()) == ["node-0.log", "node-1.log"]
    for k in (0, 1):
        assert f"node {k}: started 1 workers" in (logs / f"node-{k}.log").read_text()
    assert_complete(out, 6)


def _python() -> str:
    import sys

    return sys.executable
