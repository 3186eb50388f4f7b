"""The terrain bank (derl.envs.terrain_bank): K terrains of DERL's distribution in one model, one per episode."""

import numpy as np
import pytest
from scipy import stats

from derl.checked_config import load_preset
from derl.envs import batch
from derl.envs.batch import UnimalBatch
from derl.envs.terrain import Corridor, draw_heights
from derl.envs.terrain_bank import GEOM, asset
from tests.envs.test_envs_tasks import FIXTURE

# A short, narrow corridor (41 x 201 cells): the statistics need many draws.
SMALL = {"TERRAIN.SIZE": [10, 2, 1], "TERRAIN.FLAT_LENGTH_RANGE": [1, 3, 1]}


def _vt(**overrides):
    return load_preset("vt", {**SMALL, **overrides})


def _features(heights: np.ndarray) -> tuple[float, float, float]:
    """What tells terrains apart: the share of raised columns, the mean and the highest height."""
    return float((heights.max(axis=0) > 0).mean()), float(heights.mean()), float(heights.max())


def test_bank_entries_have_the_distribution_of_the_per_episode_draws():
    """The bank's K entries come from draw_heights with its own stream: two-sample KS tests of the
    terrain features against as many draws of DERL's per-episode code do not tell them apart."""
    count = 300
    cfg = _vt(**{"TERRAIN.BANK_SIZE": count})
    sim = UnimalBatch(FIXTURE.read_text(), cfg, 2)
    bank = np.asarray(sim.task.arena.heights.interior)
    assert bank.shape[0] == count
    corridor = Corridor.of(cfg)
    rng = np.random.default_rng(12345)
    direct = [draw_heights(cfg, corridor, rng) for _ in range(count)]
    for k, name in enumerate(("raised share", "mean height", "highest")):
        banked = [_features(entry)[k] for entry in bank]
        drawn = [_features(heights)[k] for heights in direct]
        assert stats.ks_2samp(banked, drawn).pvalue > 0.001, name


def test_episodes_pick_entries_uniformly_and_the_physics_and_maps_follow_them():
    cfg = _vt(**{"TERRAIN.BANK_SIZE": 4})
    num_envs = 6
    sim = UnimalBatch(FIXTURE.read_text(), cfg, num_envs)
    assert sim.static and sim.models[0] is sim.models[-1]  # one model: the terrains are in it
    heights = sim.task.arena.heights
    ids = np.array([sim.model.hfield(asset(k)).id for k in range(4)])
    geom = sim.model.geom(GEOM).id
    picks = []
    sim.seed(3)
    for _ in range(40):
        sim.reset(np.arange(num_envs))
        entries = heights.host_entry.copy()
        picks.extend(entries.tolist())
        np.testing.assert_array_equal(sim.physics.batch.expanded("geom_dataid")[:, geom], ids[entries])
        # the clearance reads each env's own entry
        x, y = np.full(num_envs, 50.0), np.zeros(num_envs)
        rows, cols = heights.grid_cells(x, y)
        np.testing.assert_array_equal(heights.under(rows, cols), heights.interior[entries, rows, cols])
    assert stats.chisquare(np.bincount(picks, minlength=4)).pvalue > 0.001
    # an episode's pick is the env's generator's first draw: the same seed picks the same entries
    sim.seed(3)
    sim.reset(np.arange(num_envs))
    assert heights.host_entry.tolist() == picks[:num_envs]


def test_mvt_on_a_bank_points_each_envs_own_model_at_its_entry():
    """MVT moves its props in a model per env on MuJoCo C: the bank's rows go into those models (the
    batch cannot expand a field when it steps the caller's models)."""
    cfg = load_preset("mvt", {"TERRAIN.SIZE": [20, 3, 1], "TERRAIN.BANK_SIZE": 4})
    sim = UnimalBatch(FIXTURE.read_text(), cfg, 3)
    assert not sim.static
    ids = np.array([sim.model.hfield(asset(k)).id for k in range(4)])
    geom = sim.model.geom(GEOM).id
    sim.seed(5)
    for _ in range(5):
        sim.reset(np.arange(3))
        entries = sim.task.arena.heights.host_entry
        assert [model.geom_dataid[geom] for model in sim.models] == ids[entries].tolist()
        sim.step(np.zeros((3, sim.model.nu)))


def test_a_body_lands_on_its_own_entry():
    """Two simulations of one model on two entries, dropped at a point where the entries differ most:
    each body rests on its own entry's ground."""
    cfg = _vt(**{"TERRAIN.BANK_SIZE": 2, "TERRAIN.TYPES": ["curve_slope"], "TERRAIN.SIZE": [25, 2, 1],
                 "ENV.RESET_NOISE_SCALE": 0.0})
    sim = UnimalBatch(FIXTURE.read_text(), cfg, 2)
    heights = sim.task.arena.heights
    sim.reset(np.arange(2))
    gap = heights.interior[1] - heights.interior[0]
    low, high = (0, 1) if gap.max() > -gap.min() else (1, 0)
    row, col = np.unravel_index(np.argmax(np.abs(gap)), gap.shape)
    assert abs(gap[row, col]) > 0.3
    for env, entry in enumerate((low, high)):
        heights.set_entry(env, entry)
    sim.task.arena.set_model_rows(sim.physics, np.arange(2))
    qpos = sim.scene.qpos
    qpos[:, 0] = heights.extent.x_min + col / heights.extent.divs
    qpos[:, 1] = -heights.extent.half_width + row / heights.extent.divs
    qpos[:, 2] += float(heights.interior[high, row, col])  # above both grounds
    sim.physics.forward(np.ones(2, dtype=bool))
    for _ in range(100):
        sim.physics.step(4)
    under = heights.under(*heights.grid_cells(qpos[:, 0], qpos[:, 1]))
    assert under[1] - under[0] > 0.2
    assert qpos[1, 2] - qpos[0, 2] > 0.2  # the higher entry carries its body higher


def test_bank_size_zero_draws_a_terrain_per_episode_as_derl():
    sim = UnimalBatch(FIXTURE.read_text(), _vt(**{"TERRAIN.BANK_SIZE": 0}), 2)
    assert sim.task.arena.bank is None and not sim.static


@pytest.mark.slow
def test_vt_on_warp_picks_its_entries_and_follows_mujoco_c(capsys):
    """VT with a bank on warp's CPU device: the worlds' geom_dataid rows are their entries (host restarts),
    and the same seed and actions give MuJoCo C's trajectories (the fidelity row of the report)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("mujoco_warp")
    cfg = load_preset("vt", {"TERRAIN.BANK_SIZE": 4})
    num_envs, steps = 4, 200
    sims = {backend: UnimalBatch(FIXTURE.read_text(), cfg, num_envs, backend=backend) for backend in ("mujoco", "warp")}
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, num_envs, sims["mujoco"].model.nu))
    returns = {backend: np.zeros(num_envs) for backend in sims}
    alive = np.ones(num_envs, dtype=bool)  # until an env's first episode ends on either backend
    diffs = []
    for sim in sims.values():
        sim.seed(7)
        sim.reset(np.arange(num_envs))
    warp = sims["warp"]
    geom = warp.model.geom(GEOM).id
    ids = np.array([warp.model.hfield(asset(k)).id for k in range(4)])
    rows = torch.as_tensor(warp.physics.model.geom_dataid.numpy())
    assert rows.shape[0] == num_envs
    np.testing.assert_array_equal(rows[:, geom].numpy(), ids[warp.task.arena.heights.host_entry])
    for t in range(steps):
        ended = {}
        for backend, sim in sims.items():
            step_actions = actions[t] if backend == "mujoco" else torch.as_tensor(actions[t], dtype=torch.float32)
            _, reward, terminated, truncated, _ = sim.step(step_actions)
            returns[backend] += np.where(alive, np.asarray(torch.as_tensor(reward)), 0.0)
            ended[backend] = np.asarray(torch.as_tensor(terminated | truncated))
        qpos_c = sims["mujoco"].scene.qpos
        qpos_w = np.asarray(warp.scene.qpos)
        if alive.any():
            diffs.append(float(np.abs(qpos_w[alive] - qpos_c[alive]).mean()))
        alive &= ~(ended["mujoco"] | ended["warp"])
        for backend, sim in sims.items():
            if ended[backend].any():
                sim.restart(ended[backend] if backend == "mujoco" else torch.as_tensor(ended[backend]))
    np.testing.assert_array_equal(warp.physics.model.geom_dataid.numpy()[:, geom],
                                  ids[warp.task.arena.heights.entry.numpy()])  # restarts pick on the device
    with capsys.disabled():
        print(f"\nVT warp (CPU) vs MuJoCo C, {num_envs} envs x {steps} steps: mean |qpos diff| at steps 10/50/"
              f"{len(diffs)}: {diffs[9]:.2e}/{diffs[min(49, len(diffs) - 1)]:.2e}/{diffs[-1]:.2e}; "
              f"first-episode returns C {np.round(returns['mujoco'], 2).tolist()} warp "
              f"{np.round(returns['warp'], 2).tolist()}")
    assert diffs[9] < 1e-3
    np.testing.assert_allclose(returns["warp"], returns["mujoco"], rtol=0.25, atol=1.0)


def _forbid_host_reads(monkeypatch, torch) -> None:
    """A value read back to the host (on a GPU, a wait for the device) raises: the batch's to_host and
    the tensor methods that read values."""

    def read(*_args, **_kwargs):
        raise AssertionError("a value read back to the host")

    monkeypatch.setattr(batch, "to_host", read)
    for name in ("item", "tolist", "numpy", "cpu", "nonzero", "__bool__", "__int__", "__float__", "__array__"):
        monkeypatch.setattr(torch.Tensor, name, read)


@pytest.mark.slow
def test_vt_restarts_on_warp_pick_entries_on_the_device_without_a_host_read(monkeypatch):
    """VT with a bank on warp's CPU device: after the first episodes (reset: each env's generator), a
    restart draws the ended worlds' entries from the simulator's generator before their reset noise,
    keeps the others', points each world's terrain geom at its height map's entry, and reads nothing
    back to the host; the picks are uniform over the K entries."""
    torch = pytest.importorskip("torch")
    wp = pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    size, num_envs, restarts = 4, 8, 120
    sim = UnimalBatch(FIXTURE.read_text(), _vt(**{"TERRAIN.BANK_SIZE": size}), num_envs, backend="warp")
    heights, physics = sim.task.arena.heights, sim.physics
    ids = torch.tensor([sim.model.hfield(asset(k)).id for k in range(size)])
    geom = sim.model.geom(GEOM).id
    sim.seed(3)
    sim.reset(np.arange(num_envs))
    masks = torch.rand((restarts, num_envs), generator=torch.Generator().manual_seed(0)) < 0.5
    records = []
    with monkeypatch.context() as patched:
        _forbid_host_reads(patched, torch)
        for ended in masks:
            before, state = heights.entry.clone(), physics._generator.get_state()
            sim.restart(ended)
            records.append((before, state, heights.entry.clone(),
                            wp.to_torch(physics.model.geom_dataid)[:, geom].clone()))
    picks = []
    for ended, (before, state, after, dataid) in zip(masks, records, strict=True):
        physics._generator.set_state(state)  # the restart's draws, again: the entries come first
        drawn = physics.integers(size, (num_envs,))
        torch.testing.assert_close(after, torch.where(ended, drawn, before), rtol=0, atol=0)
        torch.testing.assert_close(dataid.long(), ids[after], rtol=0, atol=0)
        picks.extend(after[ended].tolist())
    assert len(picks) > 300
    assert stats.chisquare(np.bincount(picks, minlength=size)).pvalue > 0.001
    x, y = torch.full((num_envs,), 5.0), torch.zeros(num_envs)  # the clearance reads each world's entry
    rows, cols = heights.grid_cells(x, y)
    torch.testing.assert_close(heights.under(rows, cols), heights.interior[after, rows, cols])


def test_obstacle_maps_hold_exactly_this_episodes_boxes():
    """The obstacle task clears only the last episode's boxes: after many episodes the map is 2 m on
    this episode's boxes and 0 elsewhere, as a map drawn from zeros."""
    from derl.checked_config import load_config
    from derl.envs.tasks.locomotion import OBSTACLE_HALF_HEIGHT
    from tests.envs.test_envs_tasks import ROOT

    cfg = load_config(ROOT / "configs" / "eval" / "obstacle.yml", {"TERRAIN.SIZE": [20, 6, 1],
                      "OBJECT.NUM_OBSTACLES": 8, "OBJECT.PLACEMENT_BUFFER_LEN": 1})
    sim = UnimalBatch(FIXTURE.read_text(), cfg, 2)
    heights, task = sim.task.arena.heights, sim.task
    sim.arena.draw_whole()  # the boxes are written where the agent reaches them: here all of them
    sim.seed(0)
    for _ in range(5):
        sim.reset(np.arange(2))
        for env in range(2):
            expected = np.zeros_like(heights.interior[env])
            for x, y, *half in task.placed[env]:
                r0, c0 = heights.cell(x - half[0], y - half[1])
                r1, c1 = heights.cell(x + half[0], y + half[1])
                expected[max(r0, 0):r1 + 1, max(c0, 0):c1 + 1] = OBSTACLE_HALF_HEIGHT
            assert task.placed[env]
            np.testing.assert_array_equal(heights.interior[env], expected)


def test_the_single_env_renders_its_episodes_entry():
    from derl.envs.unimal_env import UnimalEnv

    env = UnimalEnv(FIXTURE, _vt(**{"TERRAIN.BANK_SIZE": 4}))
    ids = np.array([env.model.hfield(asset(k)).id for k in range(4)])
    geom = env.model.geom(GEOM).id
    seen = set()
    for seed in range(12):
        env.reset(seed=seed)
        entry = int(env.arena.heights.host_entry[0])
        seen.add(entry)
        assert env.model.geom_dataid[geom] == ids[entry]
    assert len(seen) > 1


def test_a_per_episode_redraw_writes_only_the_obstacles_and_equals_a_fresh_draw():
    """BANK_SIZE 0 (DERL's way, and MVT) drawn whole (as for a renderer): a reset flattens the last
    episode's tiles and draws this episode's; after many episodes the map and the height field equal a
    map drawn from zeros."""
    from derl.envs.arenas import HFIELD_SINK

    cfg = _vt(**{"TERRAIN.BANK_SIZE": 0})
    sim = UnimalBatch(FIXTURE.read_text(), cfg, 1)
    arena = sim.task.arena
    corridor = Corridor.of(cfg)
    scale = 1.0 / sim.model.hfield("terrain").size[2]
    arena.draw_whole()
    for seed in range(8):
        arena.initialize_episode(0, np.random.default_rng(seed))
        arena.cover(sim.scene.qpos)  # as a reset does after its draws
        expected = draw_heights(cfg, corridor, np.random.default_rng(seed)).astype(np.float32)
        np.testing.assert_array_equal(arena.heights.interior[0], expected)
        elevation = (expected + HFIELD_SINK) * (expected > 0)
        elevation *= scale
        np.testing.assert_array_equal(sim.models[0].hfield_data.reshape(expected.shape), elevation)
