"""Where the checkout's own files are: its root and the preset folders, named once for all of derl.

derl runs from its checkout (``pip install -e .``), so the presets under ``configs/`` and the scripts
the benchmarks start (``evo_single_proc.py``, ``tools/``) lie beside the package.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EVO_PRESETS = REPO_ROOT / "configs" / "evo"  # ft, vt, mvt (DERL's), quick, ft_gpu, ft_warp
EVAL_PRESETS = REPO_ROOT / "configs" / "eval"  # the evaluation tasks
GPU_SERVER_PRESET = REPO_ROOT / "configs" / "gpu_server.yml"


def evo_preset(name: str) -> Path:
    """``configs/evo/<name>.yml`` (not checked: ``derl.checked_config.load_preset`` says which exist)."""
    return EVO_PRESETS / f"{name}.yml"
