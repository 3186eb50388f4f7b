import subprocess
import sys

import pytest

from derl.checked_config import load_config, load_config_or_exit
from derl.config import ConfigError, dump_config, flatten
from tests.conftest import ROOT


def test_defaults_follow_derl():
    cfg = load_config()
    assert cfg.PPO.NUM_ENVS == 32 and cfg.PPO.TIMESTEPS == 128
    assert cfg.PPO.MAX_ITERS == 5_000_000 // (128 * 32) == 1220
    assert cfg.LIMB.MAX_LIMBS == 10
    assert cfg.EVO.MUTATION_OPS[0] == "grow_limb"


def test_full_and_leaf_keys_and_whole_float_for_int():
    cfg = load_config(overrides=["EVO.NUM_PROCESSES", "8", "MAX_STATE_ACTION_PAIRS", "1e6"])
    assert cfg.EVO.NUM_PROCESSES == 8
    assert cfg.PPO.MAX_STATE_ACTION_PAIRS == 1_000_000
    assert isinstance(cfg.PPO.MAX_STATE_ACTION_PAIRS, int)
    assert cfg.PPO.MAX_ITERS == 1_000_000 // 4096


def test_yaml_file_then_overrides(tmp_path):
    f = tmp_path / "c.yml"
    f.write_text("EVO:\n  NUM_PROCESSES: 3\nPPO:\n  MAX_STATE_ACTION_PAIRS: 1e4\nTERRAIN:\n  SIZE: [5, 6, 1]\n")
    cfg = load_config(f, ["NUM_PROCESSES", "4"])
    assert cfg.EVO.NUM_PROCESSES == 4
    assert cfg.PPO.MAX_STATE_ACTION_PAIRS == 10_000
    assert cfg.TERRAIN.SIZE == (5, 6, 1)


def test_list_and_bool_overrides():
    cfg = load_config(overrides=["ENV.KEYS_TO_KEEP", "[proprioceptive, hfield]", "IS_EVO", "false"])
    assert cfg.ENV.KEYS_TO_KEEP == ("proprioceptive", "hfield")
    assert cfg.EVO.IS_EVO is False


def test_frozen():
    cfg = load_config()
    with pytest.raises(AttributeError):
        cfg.RNG_SEED = 3
    with pytest.raises(AttributeError):
        cfg.EVO.NUM_PROCESSES = 3


def test_dump_and_load_round_trip(tmp_path):
    cfg = load_config(overrides=["NUM_PROCESSES", "5", "OUT_DIR", "x/y", "TIMESTEPS", "64"])
    f = tmp_path / "config.yaml"
    f.write_text(dump_config(cfg))
    assert load_config(f).to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["NUM_PROCESES", "2"], "unknown config key 'NUM_PROCESES' (did you mean NUM_PROCESSES"),
        (["DENSITY_RANGE", "[1]"], "ambiguous config key 'DENSITY_RANGE': use one of TORSO.DENSITY_RANGE"),
        (["NUM_PROCESSES", "many"], "config key EVO.NUM_PROCESSES expects int, got 'many'"),
        (["NUM_PROCESSES", "1.5"], "config key EVO.NUM_PROCESSES expects int, got 1.5"),
        (["IS_EVO", "3"], "config key EVO.IS_EVO expects bool, got 3"),
        (["PPO.MAX_ITERS", "3"], "config key PPO.MAX_ITERS is derived"),
        (["NUM_PROCESSES"], "KEY VALUE pairs"),
        (["PPO.EPOCHS", "0"], "config key PPO.EPOCHS must be positive, got 0"),
        (["NUM_ENVS", "0"], "config key PPO.NUM_ENVS must be positive, got 0"),
    ],
)
def test_bad_overrides(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_malformed_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "none.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(bad)


def test_script_error_is_one_line_exit_2(tmp_path):
    """A script entry point prints one line, no traceback, and exits with code 2."""
    code = "from derl.checked_config import load_config_or_exit; load_config_or_exit(None, ['NOPE', '1'])"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: unknown config key 'NOPE'"
    assert "Traceback" not in proc.stderr


def test_load_config_or_exit_passes_good_config():
    assert load_config_or_exit(None, ["RNG_SEED", "7"]).RNG_SEED == 7


def test_the_gpu_preset_is_ft_on_warp_with_large_batches():
    presets = ROOT / "configs" / "evo"
    ft, gpu = (dict(flatten(load_config(presets / name).to_dict())) for name in ("ft.yml", "ft_gpu.yml"))
    changed = {key for key in ft if ft[key] != gpu[key]}
    assert changed == {"SIM.BACKEND", "DEVICE", "OUT_DIR", "PPO.NUM_ENVS", "PPO.TIMESTEPS", "PPO.EPOCHS",
                       "PPO.BATCH_SIZE", "PPO.BASE_LR", "PPO.MAX_STATE_ACTION_PAIRS", "PPO.MAX_ITERS"}
    assert (gpu["SIM.BACKEND"], gpu["DEVICE"], gpu["PPO.NUM_ENVS"]) == ("warp", "cuda", 4096)
    assert gpu["PPO.NUM_ENVS"] * gpu["PPO.TIMESTEPS"] == 4 * gpu["PPO.BATCH_SIZE"]  # 4 minibatches a rollout
    assert gpu["PPO.MAX_ITERS"] == 20_000_000 // (4096 * 24)


def test_the_warp_preset_is_ft_with_its_physics_on_the_gpu_and_nothing_else():
    presets = ROOT / "configs" / "evo"
    ft, warp = (dict(flatten(load_config(presets / name).to_dict())) for name in ("ft.yml", "ft_warp.yml"))
    assert {key for key in ft if ft[key] != warp[key]} == {"SIM.BACKEND", "DEVICE", "OUT_DIR"}
    assert (warp["SIM.BACKEND"], warp["DEVICE"], warp["OUT_DIR"]) == ("warp", "cuda", "output/ft_warp")


def test_presets_load_and_unknown_preset_is_one_line():
    from derl.checked_config import load_preset

    assert load_preset("vt").TERRAIN.SIZE == (50, 50, 1)
    assert load_preset("ft", {"RNG_SEED": 3}).RNG_SEED == 3
    with pytest.raises(ConfigError, match="unknown preset 'ocean'; known: ft, ft_gpu, ft_warp, mvt, quick, vt"):
        load_preset("ocean")
