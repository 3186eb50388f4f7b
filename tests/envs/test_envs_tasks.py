"""Every registered task: one rule check over its configs (dm_control suite_test style), its defining rule.

The configs are every ``configs/evo`` and ``configs/eval`` file; a task without one fails
``test_every_registered_task_has_a_config``, so a new task is tested by registering it with a config.
"""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from derl.checked_config import load_config
from derl.config import ConfigError
from derl.envs import TASKS, UnimalEnv, UnimalVectorEnv
from derl.envs.tasks.locomotion import Locomotion
from tests.conftest import check_env_strictly, sampled_xml

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parents[1] / "assets" / "envs" / "quadruped.xml"
CONFIGS = {p.stem: p for d in ("evo", "eval") for p in sorted((ROOT / "configs" / d).glob("*.yml"))
           if p.stem not in ("quick", "ft_gpu", "ft_warp")}  # ft's world, smaller or on MuJoCo Warp


def task_env(name: str, xml: Path = FIXTURE, **overrides) -> UnimalEnv:
    return UnimalEnv(xml, load_config(CONFIGS[name], overrides))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("unimals")


def summed_terms(env: UnimalEnv, info: dict) -> float:
    """The reward as the sum of its terms: every ``__reward__*`` value but the task's aggregates."""
    aggregates = env.task.aggregates
    for name, parts in aggregates.items():
        assert info[name] == pytest.approx(sum(info[p] for p in parts))
    return sum(v for k, v in info.items() if k.startswith("__reward__") and k not in aggregates)


def test_every_registered_task_has_a_config():
    tasks = {load_config(path).ENV.TASK for path in CONFIGS.values()}
    assert set(TASKS) <= tasks, f"tasks without a config in configs/: {sorted(set(TASKS) - tasks)}"
    assert {"patrol", "point_nav", "obstacle", "exploration", "incline", "push_box_incline", "escape_bowl",
            "manipulation_ball"} <= set(CONFIGS)


def _rollout(env: UnimalEnv, seed: int, steps: int):
    actions = np.random.default_rng(seed).uniform(-1, 1, (steps, env.action_space.shape[0]))
    obs, _ = env.reset(seed=seed)
    record = [obs]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        record.append((obs, reward, info))
        if terminated or truncated:
            break
    return record


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rules_hold_for_every_task(name, folder):
    env = task_env(name, sampled_xml(folder, 0), **{"ENV.EPISODE_LENGTH": 40})
    check_env_strictly(env)
    task = env.task
    declared = {"proprioceptive": env.observation_space["proprioceptive"].shape[0], **task.obs_sizes()}
    assert set(env.observation_space.spaces) == set(env.world.ENV.KEYS_TO_KEEP)
    terms = {*task.reward_terms, "__reward__ctrl", *task.aggregates}
    first = _rollout(env, seed=3, steps=40)
    for obs in [first[0]] + [step[0] for step in first[1:]]:
        assert {k: v.shape[0] for k, v in obs.items()} == {k: declared[k] for k in obs}
        assert all(np.isfinite(v).all() for v in obs.values())
    for _, reward, info in first[1:]:
        assert {k for k in info if k.startswith("__reward__")} == terms
        assert reward == pytest.approx(summed_terms(env, info), abs=1e-9)
        assert all(math.isfinite(v) for v in info.values())
    second = _rollout(task_env(name, sampled_xml(folder, 0), **{"ENV.EPISODE_LENGTH": 40}), seed=3, steps=40)
    assert len(first) == len(second)
    for a, b in zip(first[1:], second[1:], strict=True):
        assert a[1] == b[1] and a[2] == b[2]
        assert all(np.array_equal(a[0][k], b[0][k]) for k in a[0])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_task_renders_headless(name):
    try:
        env = UnimalEnv(FIXTURE, load_config(CONFIGS[name]), render_mode="rgb_array", width=64, height=48)
        env.reset(seed=0)
        frame = env.render()
    except Exception as err:  # no usable GL on this machine
        pytest.skip(f"no headless GL: {err}")
    assert frame.shape == (48, 64, 3) and frame.std() > 0
    env.close()


def test_config_check_names_the_unknown_key():
    with pytest.raises(ConfigError, match=r"unknown EVO.SELECTION_CRITERIA \['__reward__foward'\] for task "
                                          r"locomotion; known: __reward__forward, __reward__stand"):
        load_config(CONFIGS["ft"], {"EVO.SELECTION_CRITERIA": ["__reward__foward"]})
    with pytest.raises(ConfigError, match=r"unknown ENV.KEYS_TO_KEEP \['goal'\] for task obstacle; "
                                          r"known: proprioceptive, hfield \(set on the command line\)"):
        load_config(CONFIGS["obstacle"], {"ENV.KEYS_TO_KEEP": ["proprioceptive", "goal"]})
    with pytest.raises(ConfigError, match="unknown ENV.TASK 'dance'"):
        load_config(None, {"ENV.TASK": "dance"})
    message = ""
    try:
        load_config(CONFIGS["patrol"], {"EVO.SELECTION_CRITERIA": ["__reward__forward"]})
    except ConfigError as err:
        message = str(err)
    assert "\n" not in message and "__reward__reach" in message


# ---------------------------------------------------------------------------- defining rules
def _step(env: UnimalEnv):
    return env.step(np.zeros(env.action_space.shape))


def test_patrol_goal_flips_on_reaching_it():
    env = task_env("patrol")
    env.reset(seed=0)
    half = env.world.TERRAIN.PATROL_HALF_LEN
    assert env.qpos[0] == pytest.approx(-half, abs=0.01)
    assert env.task.goal.position[0, :2].tolist() == [half, 0.0]
    env.qpos[0:2] = half, 0.0
    obs, reward, _, _, info = _step(env)
    assert env.task.goal.position[0, :2].tolist() == [-half, 0.0]  # flipped
    assert info["__reward__reach"] > 10 and obs["goal"][0] < -half  # the new goal lies behind
    _, _, _, _, info = _step(env)
    assert env.task.goal.position[0, 0] == -half and info["metric"] == pytest.approx(
        1 - env.task.distance[0] / (2 * half) + 1)


def test_point_nav_goal_is_drawn_in_its_range():
    env = task_env("point_nav")
    goals = []
    for seed in range(30):
        env.reset(seed=seed)
        assert env.qpos[0] == pytest.approx(50.0, abs=0.01)  # the arena's centre
        goals.append(env.task.goal.position[0, :2].copy())
    goals = np.array(goals)
    assert np.all((goals[:, 0] >= 6.5) & (goals[:, 0] < 93.5))
    assert np.all((goals[:, 1] >= -39.5) & (goals[:, 1] < 39.5))
    assert np.allclose(goals * 10, np.round(goals * 10))  # DERL's 10 cells/m placement grid
    assert len({tuple(g) for g in goals}) == 30



def test_point_nav_goal_drawn_on_the_start_gives_a_finite_metric():
    # A 6 x 6 m arena whose goal cells (x in [2.5, 3.5), |y| < 0.5) include the start (3, 0): seed 16 draws it.
    env = task_env("point_nav", **{"TERRAIN.SIZE": [3, 3, 1], "OBJECT.PLACEMENT_BUFFER_LEN": 1,
                                   "OBJECT.PLACEMENT_BUFFER_WIDTH": 1, "ENV.EPISODE_LENGTH": 5})
    env.reset(seed=16)
    assert tuple(env.task.goal.position[0, :2]) == pytest.approx((3.0, 0.0))
    info = env.step(np.zeros(env.action_space.shape))[-1]
    assert math.isfinite(info["metric"]) and info["metric"] > 0.9

def test_obstacle_boxes_keep_clear_of_the_ends_and_appear_in_the_height_map():
    env = task_env("obstacle")
    extent, model = env.arena.extent, env.model
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        placed = env.task.placed[0]
        assert len(placed) >= 40
        for x, y, half_len, _ in placed:
            assert x - half_len >= extent.x_min + 10 and x + half_len <= extent.x_max - 10
            assert env.scene.height_at(0, x, y) == pytest.approx(extent.ground_z + 2.0)
        x, y, half_len, half_width = placed[0]
        geom = model.geom("obstacle/0")
        assert geom.pos.tolist() == pytest.approx([x, y, extent.ground_z])
        assert geom.size.tolist() == pytest.approx([half_len, half_width, 2.0])
    env.qpos[0:2] = x - half_len - 1.0, y  # 1 m before the box, facing it: it shows 2 m high ahead
    obs, *_ = _step(env)
    assert obs["hfield"].max() >= 1.5


def _boxes_as_before(cfg, extent, rng: np.random.Generator) -> list[tuple[float, float, float, float] | None]:
    """The obstacle task's boxes as drawn before ``PlacementGrid.place_boxes`` (the reference): per box,
    ``rng.choice`` of its half-length and half-width, then up to 10 (row, col) tries on a fresh grid."""
    from derl.envs.placement import PlacementGrid
    from derl.envs.terrain import value_range

    grid = PlacementGrid(extent, cfg)
    lengths, widths = value_range(cfg.OBJECT.OBSTACLE_LEN_RANGE), value_range(cfg.OBJECT.OBSTACLE_WIDTH_RANGE)
    boxes = []
    for _ in range(int(cfg.OBJECT.NUM_OBSTACLES)):
        half = (float(rng.choice(lengths)), float(rng.choice(widths)))
        sx, sy = (math.ceil(round(h * grid.divs, 6)) for h in half)
        spot = None
        for _ in range(10):
            row = int(rng.integers(sy + grid.buffer_width, grid.rows - sy - grid.buffer_width))
            col = int(rng.integers(sx + grid.buffer_len, grid.cols - sx - grid.buffer_len))
            window = grid.taken[row - sy:row + sy, col - sx:col + sx]
            if not window.any():
                window[:] = True
                spot = (extent.x_min + col / grid.divs, -extent.half_width + row / grid.divs)
                break
        boxes.append(None if spot is None else (*spot, *half))
    return boxes


def test_obstacle_boxes_are_the_draws_of_rng_choice_and_ten_tries_per_box():
    """place_boxes draws what the box-by-box placement drew (same generator calls, same order), for
    many seeds, on a grid reused from episode to episode; the stream after it is the same."""
    from derl.envs.placement import PlacementGrid
    from derl.envs.terrain import Corridor, value_range

    cfg = load_config(CONFIGS["obstacle"], {"OBJECT.PLACEMENT_BUFFER_WIDTH": 8})  # crowded: some boxes left out
    extent = Corridor.terrain(cfg)
    grid = PlacementGrid(extent, cfg)
    lengths, widths = value_range(cfg.OBJECT.OBSTACLE_LEN_RANGE), value_range(cfg.OBJECT.OBSTACLE_WIDTH_RANGE)
    left_out = 0
    for seed in range(150):
        new, old = np.random.default_rng(seed), np.random.default_rng(seed)
        placed = grid.place_boxes(lengths, widths, int(cfg.OBJECT.NUM_OBSTACLES), new)
        expected = _boxes_as_before(cfg, extent, old)
        assert placed == [(k, *box) for k, box in enumerate(expected) if box is not None]
        assert new.random() == old.random()
        left_out += expected.count(None)
    assert left_out > 0


def test_footprints_overlap_where_a_grid_of_them_has_a_taken_cell():
    """Footprints answer a window's overlap as ``taken[window].any()`` on the grid they mark, across strip
    edges and for windows wider than a strip; ``PlacementGrid.taken`` renders them."""
    from derl.envs.placement import Footprints, PlacementGrid
    from derl.envs.terrain import Corridor

    rng = np.random.default_rng(0)
    footprints, taken = Footprints(300), np.zeros((100, 300), dtype=bool)
    answers = []
    for _ in range(2000):
        r0, c0 = (int(v) for v in rng.integers(0, (99, 299)))
        long = rng.random() < 0.1  # mostly small windows: many only touch a footprint's edge
        r1 = r0 + int(rng.integers(1, (100 - r0 if long else min(100 - r0, 8)) + 1))
        c1 = c0 + int(rng.integers(1, (min(300 - c0, 150) if long else min(300 - c0, 8)) + 1))
        answers.append(footprints.overlaps(r0, r1, c0, c1))
        assert answers[-1] == taken[r0:r1, c0:c1].any()
        if rng.random() < 0.1 and not answers[-1]:
            footprints.add(r0, r1, c0, c1)
            taken[r0:r1, c0:c1] = True
    assert 0.2 < np.mean(answers) < 0.8
    footprints = Footprints(300)
    footprints.add(10, 20, 60, 70)  # across the first strip's edge (64)
    assert not any(footprints.overlaps(*w) for w in ((20, 30, 60, 70), (0, 10, 60, 70), (10, 20, 70, 80),
                                                     (10, 20, 50, 60)))
    assert all(footprints.overlaps(*w) for w in ((19, 20, 69, 70), (0, 11, 0, 61), (15, 16, 64, 65)))
    cfg = load_config(CONFIGS["obstacle"])
    grid = PlacementGrid(Corridor.terrain(cfg), cfg)
    assert not grid.taken.any()
    spot = grid.place_uniform((0.5, 1.0), np.random.default_rng(1))
    row, col = round((spot[1] + grid.extent.half_width) * 10), round((spot[0] - grid.extent.x_min) * 10)
    window = [[r, c] for r in range(row - 10, row + 10) for c in range(col - 5, col + 5)]
    assert np.argwhere(grid.taken).tolist() == window


def test_raw_integers_are_rng_integers_and_leave_the_stream_where_they_would():
    """Ranges of one (no draw), small, large with frequent rejections (3 * 2**30: a quarter of the
    outputs are rejected), 2**32, over more than one block; the generator continues as after the calls."""
    from derl.envs.placement import RawIntegers

    spans = [1, 2, 6, 585, 1300, 2**31 + 1, 3 * 2**30, 2**32 - 1, 2**32]
    for seed in range(6):
        choose = np.random.default_rng(100 + seed)
        ranges = [(int(low), int(low) + spans[i]) for low, i in
                  zip(choose.integers(0, 50, 1500), choose.integers(0, len(spans), 1500), strict=True)]
        for count in (0, 3, 200, 1500):
            new, old = np.random.default_rng(seed), np.random.default_rng(seed)
            draws = RawIntegers(new)
            assert [draws.integers(*r) for r in ranges[:count]] == [int(old.integers(*r)) for r in ranges[:count]]
            draws.close()
            assert new.random() == old.random() and new.integers(7) == old.integers(7)
    with pytest.raises(ValueError, match="ranges of 1 to 2"):
        RawIntegers(np.random.default_rng(0)).integers(3, 3)


def test_obstacle_episode_writes_the_boxes_into_the_model_and_only_them_into_the_map():
    from derl.envs.props import HIDDEN_Z

    env = task_env("obstacle")
    env.arena.draw_whole()  # the boxes are written where the agent reaches them: here all of them
    env.reset(seed=0)
    task, model, extent, heights = env.task, env.model, env.arena.extent, env.arena.heights
    for seed in range(4):
        new, old = np.random.default_rng(seed), np.random.default_rng(seed)
        Locomotion.initialize_episode(task, env.scene, 0, old)
        expected = _boxes_as_before(env.world, extent, old)
        task.initialize_episode(env.scene, 0, new)
        env.arena.cover(env.scene.qpos)  # as a reset does after its draws
        assert new.random() == old.random()
        grid = np.zeros(extent.shape, np.float32)
        for k, box in enumerate(expected):
            geom = model.geom(f"obstacle/{k}")
            centre, half = ((0.0, 0.0, HIDDEN_Z), (0.1, 0.1, 0.1)) if box is None else (
                (box[0], box[1], extent.ground_z), (box[2], box[3], 2.0))
            assert geom.pos.tolist() == list(centre) and geom.size.tolist() == list(half)
            assert geom.rbound[0] == float(np.linalg.norm(half))
            assert model.geom_aabb[geom.id].tolist() == [0, 0, 0, *half]
            if box is not None:
                r0, c0 = extent.cell(box[0] - box[2], box[1] - box[3])
                r1, c1 = extent.cell(box[0] + box[2], box[1] + box[3])
                grid[max(r0, 0):r1 + 1, max(c0, 0):c1 + 1] = 2.0
        np.testing.assert_array_equal(heights.interior[0], grid)


# Recorded from f17293c (before the reset was made cheaper): per seed, the boxes placed, sha256 of their
# (x, y, half-length, half-width) in tenths of a metre; sha256 of env 0's height map (float32, only 0 and 2);
# the generator's next ``integers(2**30)``; the sum of the boxes' geom_pos, geom_size, geom_rbound, geom_aabb.
OBSTACLE_EPISODES = {
    3: (50, "e6c7bda531870752", "5a88d901b3a3c9aa", 663766992, 4495.391553901339),
    11: (50, "c439cf587ef1da22", "a75b86b30214e6b1", 153282005, 4094.48047458336),
    2024: (50, "f78ff474c59749ad", "4d3ce08688c4353f", 648335287, 3969.0750303818145),
}


def test_obstacle_episodes_are_the_ones_recorded():
    """Three episodes in a row on one env (each clears the last one's boxes from the map): the same boxes,
    the same height map bitwise, the generator left where it was, as recorded before the reset was sped up."""
    import hashlib

    from derl.envs.tasks.locomotion import Obstacle

    env = task_env("obstacle")
    env.arena.draw_whole()  # the boxes are written where the agent reaches them: here all of them
    env.reset(seed=0)
    task, model, geoms = env.task, env.model, env.task._boxes.geoms
    for seed, (count, boxes_hash, map_hash, next_draw, fields_sum) in OBSTACLE_EPISODES.items():
        rng = np.random.default_rng(seed)
        Obstacle.initialize_episode(task, env.scene, 0, rng)
        env.arena.cover(env.scene.qpos)  # as a reset does after its draws
        boxes = [tuple(round(v * 10) for v in box) for box in task.placed[0]]
        assert len(boxes) == count
        assert hashlib.sha256(str(boxes).encode()).hexdigest()[:16] == boxes_hash
        heights = np.ascontiguousarray(env.arena.heights.interior[0])
        assert hashlib.sha256(heights.tobytes()).hexdigest()[:16] == map_hash
        assert int(rng.integers(1 << 30)) == next_draw
        fields = (model.geom_pos[geoms].sum() + model.geom_size[geoms].sum() + model.geom_rbound[geoms].sum()
                  + model.geom_aabb[geoms].sum())
        assert fields == pytest.approx(fields_sum, rel=1e-12)


def test_exploration_rewards_only_new_cells():
    env = task_env("exploration")
    env.reset(seed=0)
    rewards = []
    for x, y in ((60.5, 10.5), (60.6, 10.4), (61.5, 10.5), (60.5, 10.5)):
        env.qpos[0:2] = x, y
        rewards.append(_step(env)[3 + 1]["__reward__explore"])
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    assert _step(env)[4]["metric"] == env.task.count == 2


def test_incline_reward_is_divided_by_cos_10_degrees():
    env = task_env("incline")
    env.reset(seed=0)
    x_before = float(env.qpos[0])
    env.qvel[0] = 1.0
    _, _, _, _, info = _step(env)
    expected = (env.qpos[0] - x_before) / env.dt / math.cos(math.radians(10))
    assert info["__reward__forward"] == pytest.approx(expected) and expected > 0.5
    # The plane rises 10 degrees along +x and the agent starts on it, 2 m from the low end.
    assert env.scene.height_at(0, 10.0, 0.0) - env.scene.height_at(0, 0.0, 0.0) == pytest.approx(
        10 * math.tan(math.radians(10)), abs=0.02)
    assert env.qpos[0] == pytest.approx(math.cos(math.radians(10)) * -73, abs=0.05)
    assert 0 < env.torso_height < 1


def test_push_box_incline_box_and_goal_sit_where_the_original_puts_them():
    env = task_env("push_box_incline")
    env.reset(seed=0)
    task = env.task
    box = env.qpos[task.object.qpos:task.object.qpos + 3]
    assert box[:2].tolist() == [-35.0, 0.0] and task.goal.position[0, :2].tolist() == [35.0, 0.0]
    assert 0.2 < box[2] - env.scene.height_at(0, -35.0, 0.0) < 0.4  # on the slope, dropped from 0.1 m
    assert task.goal.position[0, 2] > env.scene.height_at(0, 35.0, 0.0)
    for _ in range(50):
        _step(env)
    assert env.qpos[task.object.qpos] == pytest.approx(-35.0, abs=0.05)  # friction holds it on the slope
    assert _step(env)[4]["metric"] < 0.1


def test_escape_bowl_ends_with_100_at_radius_42():
    env = task_env("escape_bowl")
    env.arena.draw_whole()  # the head is moved tens of metres at once: the whole bowl, not its start
    env.reset(seed=0)
    assert env.arena.heights.interior.max() == pytest.approx(1.3, abs=0.05)
    z = float(env.qpos[2])
    env.qpos[0:3] = 30.0, 0.0, z + env.scene.height_at(0, 30.0, 0.0)
    _, _, terminated, _, info = _step(env)
    assert not terminated and info["__reward__escape"] == 0 and info["metric"] == pytest.approx(30, abs=0.1)
    env.qpos[0:3] = 30.0, 30.0, z + env.scene.height_at(0, 30.0, 30.0)  # radius 42.4
    _, reward, terminated, _, info = _step(env)
    assert terminated and info["__reward__escape"] == 100 and reward > 90


def test_bowl_is_the_2d_spline_zoom_of_its_bumps():
    from scipy import ndimage

    from derl.envs.bowl import BOWL_MIN_RADIUS, BOWL_SMOOTHNESS, BowlShape

    side, divs, max_z = 10.0, 10, 1.3
    heights = BowlShape(side, divs, max_z).draw(np.random.default_rng(3))
    n, cells = 201, 10
    bumps = np.random.default_rng(3).uniform(BOWL_SMOOTHNESS, 1.0, (cells, cells))
    axis = np.linspace(-1.0, 1.0, n)
    rho = np.clip(np.hypot(axis[:, None], axis[None, :]), BOWL_MIN_RADIUS, 1.0)
    expected = np.clip(ndimage.zoom(bumps, n / cells), 0.0, 1.0)[:n, :n] * (0.5 - np.cos(2 * np.pi * rho) / 2) * max_z
    np.testing.assert_allclose(heights, expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("side", [7.3, 10.0])
def test_bowl_tile_rows_hold_the_whole_draws_values_bitwise(side):
    """Any run of a tile row's tiles, computed alone, holds the whole draw's values bitwise, also where the
    grid's last tile is partial and rises (side 7.3: 147 vertices, the last tile 47 wide); a run beyond the
    circle is None."""
    from derl.envs.bowl import BowlShape
    from derl.envs.lazy_terrain import TILE

    shape = BowlShape(side, 10, 1.3)
    n = shape.shape[0]
    heights = shape.draw(np.random.default_rng(4))
    bumps = shape.bumps(np.random.default_rng(4))
    tiles = -(-n // TILE)
    for r0, first, end in itertools.product(range(0, n, TILE), range(tiles), range(1, tiles + 1)):
        run = shape.tile_row(bumps, r0, first * TILE, min(end * TILE, n))
        if run is None:
            assert first >= end or not heights[r0:r0 + TILE, first * TILE:end * TILE].any()
            continue
        a, b, block = run
        assert first * TILE <= a < b <= min(end * TILE, n)
        np.testing.assert_array_equal(block, heights[r0:r0 + TILE, a:b])
        assert not heights[r0:r0 + TILE, first * TILE:a].any() and not heights[r0:r0 + TILE, b:end * TILE].any()
    assert heights[:, (tiles - 1) * TILE:].any() == (side == 7.3)  # the partial last tile rises at 7.3 only


def test_bowl_reset_writes_its_start_tiles_once_and_sets_the_rest_back_to_0():
    """A reset writes the tiles at the bowl's centre once, not set to 0 first (the map edited once per run
    written), and sets back to 0, in one edit, the last episode's tiles that the new one does not write: the
    map and height field hold the whole draw's values where written, 0 elsewhere."""
    from tests.envs.test_envs_lazy_terrain import ENVS, _batch, _check_maps

    lazy, whole = _batch("escape_bowl", whole=False), _batch("escape_bowl", whole=True)
    start = lazy.arena.lazy.written[0].copy()
    extent, heights = whole.arena.extent, whole.arena.heights.interior[0]
    row, col = extent.cell(20.0, 0.0)
    for sim in (lazy, whole):  # env 0's head put down 20 m out: the tiles there written too
        sim.scene.qpos[0, 0] += 20.0
        sim.scene.qpos[0, 2] += heights[row, col]
        sim.step(np.zeros((ENVS, lazy.model.nu)))
    assert (lazy.arena.lazy.written[0] & ~start).any()
    edits = []
    editing = lazy.arena.heights.editing
    lazy.arena.heights.editing = lambda env: (edits.append(env), editing(env))[1]
    everyone = np.arange(ENVS)
    lazy.reset(everyone), whole.reset(everyone)
    _check_maps(lazy, whole, everywhere=True)
    runs = [len(cells) for cells in lazy.arena.lazy._cells_written]
    assert edits.count(1) == runs[1]  # its start tiles written again, nothing set to 0 first
    assert edits.count(0) == runs[0] + 1  # and the tiles 20 m out set back to 0
    np.testing.assert_array_equal(lazy.arena.lazy.written[0], start)


def test_bowl_episode_drawn_whole_is_the_full_grid_product_bitwise():
    """The per-episode bowl (BANK_SIZE 0) drawn whole (as for a renderer) is computed in tiles over the
    circle where the rise is not 0: map and height field equal the full-grid product bitwise; the
    stream is the same."""
    from derl.envs.bowl import BOWL_SMOOTHNESS

    env = task_env("escape_bowl")
    arena = env.arena
    arena.draw_whole()
    shape, interior, hfield = arena._shape, arena.heights.interior[0], arena._hfields[0]
    for seed in range(3):
        new, old = np.random.default_rng(seed), np.random.default_rng(seed)
        arena.initialize_episode(0, new)
        arena.cover(env.scene.qpos)  # as a reset does after its draws
        bumps = old.uniform(BOWL_SMOOTHNESS, 1.0, (shape._bump_cells, shape._bump_cells))
        expected = np.clip(shape._zoom @ bumps @ shape._zoom.T, 0.0, 1.0) * shape._rise * arena._max_z
        np.testing.assert_array_equal(interior, expected.astype(np.float32))
        np.testing.assert_array_equal(hfield, (expected / arena._max_z).astype(np.float32))
        assert new.random() == old.random()


def test_manipulation_ball_is_reached_and_pushed_as_in_mvt():
    env = task_env("manipulation_ball")
    env.reset(seed=0)
    task, qpos = env.task, env.qpos
    assert env.model.geom("ball").type == 2 and env.model.geom("ball").size[0] == pytest.approx(0.2)
    ball, goal = qpos[task.object.qpos:task.object.qpos + 3].copy(), task.goal.position[0].copy()
    assert goal[0] - ball[0] >= 10 and ball[0] >= 4  # the goal lies beyond the ball
    qpos[0:2] = ball[0] - 0.5, ball[1]
    _, _, _, _, info = _step(env)
    assert task._reached[0] and info["__reward__reach"] > 10  # gained distance + the bonus
    before = float(np.linalg.norm(env.data.body("ball").xpos[:2] - goal[:2]))
    qpos[task.object.qpos:task.object.qpos + 2] = goal[0] - 0.3, goal[1]
    _, _, _, _, info = _step(env)
    after = float(np.linalg.norm(env.data.body("ball").xpos[:2] - goal[:2]))
    assert after <= 0.5 and info["__reward__push"] == pytest.approx(100 * (before - after) + 10)


@pytest.mark.slow
def test_a_thousand_random_episodes_over_every_task_and_twenty_morphologies(folder):
    """50 episodes per morphology, going round every task's config; random actions, 100 steps at
    most. No exception, every observation and reward finite."""
    morphologies, per_morphology = 20, 50
    names = list(CONFIGS)
    rng = np.random.default_rng(0)
    played = set()
    for m in range(morphologies):
        envs: dict[str, UnimalEnv] = {}
        for k in range(per_morphology):
            name = names[k % len(names)]
            if name not in envs:
                envs[name] = task_env(name, sampled_xml(folder, 100 + m), **{"ENV.EPISODE_LENGTH": 100})
            env = envs[name]
            obs, _ = env.reset(seed=m * per_morphology + k)
            done = False
            while not done:
                assert all(np.isfinite(v).all() for v in obs.values()), (m, name)
                obs, reward, terminated, truncated, _ = env.step(rng.uniform(-1, 1, env.action_space.shape))
                assert np.isfinite(reward), (m, name)
                done = terminated or truncated
            played.add((m, name))
        for env in envs.values():
            env.close()
    assert len(played) == morphologies * len(names)  # every morphology on every task


def _model_arrays(model) -> dict[str, np.ndarray]:
    """What a task could write into the compiled model per episode."""
    return {name: getattr(model, name).copy() for name in (
        "hfield_data", "geom_pos", "geom_size", "geom_quat", "site_pos", "body_pos", "body_quat", "geom_rgba")}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_task_that_claims_a_static_model_leaves_it_unchanged_and_its_envs_share_it(name, folder):
    envs = UnimalVectorEnv(sampled_xml(folder, 1), load_config(CONFIGS[name]), 3)
    models = envs.sim.models
    before = _model_arrays(envs.sim.model)
    actions = np.random.default_rng(0).uniform(-1, 1, (20, *envs.action_space.shape))
    for seed in range(3):  # resets (and autoresets) re-draw terrain, props and goals
        envs.reset(seed=seed)
        for action in actions:
            envs.step(action)
    if envs.sim.task.static_model():
        after = _model_arrays(envs.sim.model)
        changed = [key for key, array in after.items() if not np.array_equal(array, before[key])]
        assert changed == [], f"{name} claims a static model but its episodes change {changed}"
        assert all(model is envs.sim.model for model in models)  # one model object for the batch
    else:
        assert len({id(model) for model in models}) == len(models)


def test_envs_on_a_shared_model_step_as_envs_on_their_own_models(folder, monkeypatch):
    xml, cfg = sampled_xml(folder, 2), load_config(CONFIGS["ft"])
    shared = UnimalVectorEnv(xml, cfg, 2)
    assert shared.sim.models[0] is shared.sim.models[1]
    monkeypatch.setattr(Locomotion, "static_model", lambda self: False)  # a model per env, set in the batch
    own = UnimalVectorEnv(xml, cfg, 2)
    assert own.sim.models[0] is not own.sim.models[1]
    actions = np.random.default_rng(0).uniform(-1, 1, (60, *shared.action_space.shape))
    a, b = shared.reset(seed=0)[0], own.reset(seed=0)[0]
    np.testing.assert_array_equal(a["proprioceptive"], b["proprioceptive"])
    for action in actions:  # autoresets included
        a, b = shared.step(action), own.step(action)
        np.testing.assert_array_equal(a[0]["proprioceptive"], b[0]["proprioceptive"])
        for x, y in zip(a[1:4], b[1:4], strict=True):
            np.testing.assert_array_equal(x, y)
