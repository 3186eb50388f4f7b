"""Terrain maps and the height-field observation grid (no physics)."""

import math

import numpy as np
import pytest

from derl.checked_config import load_preset
from derl.envs.observations import HeightPatch
from derl.envs.terrain import Corridor, draw_heights, max_height, obstacles_fit, pick, value_range


def vt_cfg(**overrides):
    return load_preset("vt", overrides)


def test_value_range_includes_the_stop_and_accepts_a_constant():
    assert value_range([4, 8, 4]).tolist() == [4.0, 8.0]
    assert value_range([0.6, 1.2, 0.1]).round(6).tolist() == [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
    assert value_range([3]).tolist() == [3.0]
    with pytest.raises(ValueError, match="range"):
        value_range([1, 2])


def test_corridor_grid_matches_mujoco_vertex_spacing():
    corridor = Corridor.of(vt_cfg())
    assert (corridor.x_min, corridor.x_max, corridor.half_width) == (-3.0, 97.0, 50.0)
    rows, cols = corridor.shape
    assert (rows, cols) == (1001, 1001)  # vertex spacing 2W/(n-1) = 0.1 m
    assert corridor.cell(-3.0, -50.0) == (0, 0)
    assert corridor.cell(97.0, 50.0) == (rows - 1, cols - 1)
    assert corridor.cell(0.0, 0.0) == (500, 30)


def test_cells_of_arrays_are_cell_of_each_point():
    """``Corridor.cells`` (a whole episode's box corners at once) gives ``cell``'s vertex for every point,
    points half-way between two vertices (rounded half to even) and points off the grid included."""
    corridor = Corridor(-3.0, 147.0, 30.0, 1.0, 10, True)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-5, 150, 500), -3.0 + (np.arange(40) + 0.5) / 10, [-3.25, -2.95, 147.05]])
    y = np.concatenate([rng.uniform(-32, 32, 500), -30.0 + (np.arange(40) + 0.5) / 10, [-30.25, 0.05, 30.05]])
    rows, cols = corridor.cells(x, y)
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [corridor.cell(a, b) for a, b in
                                                                    zip(x.tolist(), y.tolist(), strict=True)]


def test_heights_keep_the_start_flat_and_stay_within_the_hfield_scale():
    cfg = vt_cfg()
    corridor = Corridor.of(cfg)
    for seed in range(5):
        heights = draw_heights(cfg, corridor, np.random.default_rng(seed))
        assert heights.shape == corridor.shape
        start_cols = round(2 * cfg.TERRAIN.START_FLAT * corridor.divs)
        assert not heights[:, : start_cols + 1].any()
        assert heights.min() >= 0 and heights.max() <= max_height(cfg) + 1e-9
        assert heights.max() > 0  # 100 m of corridor always holds an obstacle


def test_heights_depend_on_the_generator_only():
    cfg = vt_cfg()
    corridor = Corridor.of(cfg)
    one = draw_heights(cfg, corridor, np.random.default_rng(1))
    assert np.array_equal(one, draw_heights(cfg, corridor, np.random.default_rng(1)))
    assert not np.array_equal(one, draw_heights(cfg, corridor, np.random.default_rng(2)))


@pytest.mark.parametrize("kind", ["curve_slope", "steps", "rugged_square"])
def test_each_obstacle_type_alone(kind):
    cfg = vt_cfg(**{"TERRAIN.TYPES": [kind]})
    heights = draw_heights(cfg, Corridor.of(cfg), np.random.default_rng(0))
    assert heights.max() > 0
    if kind == "steps":
        levels = np.unique(heights.round(6))
        assert levels.tolist() == [0.0, 0.2, 0.4, 0.6]
    if kind != "rugged_square":  # the others are constant along y
        assert np.array_equal(heights[0], heights[-1])


class _Scripted:
    """A generator whose ``integers`` returns the given draws in order, whatever is asked (the corridor draws
    its choices as indices: ``pick``)."""

    def __init__(self, draws):
        self.draws = iter(draws)

    def integers(self, *args, size=None):
        return next(self.draws)


def test_an_obstacle_that_does_not_fit_is_skipped_and_the_corridor_goes_on():
    # DERL's corridor: a flat stretch and an obstacle until it is full; a too long obstacle is left out.
    corridor = Corridor.of(vt_cfg())
    start = round(2 * -corridor.x_min * corridor.divs)
    cols = corridor.shape[1]
    long_flat = (cols - 1 - start - 6 * corridor.divs) // (2 * corridor.divs)  # leaves 6 m of corridor
    cfg = vt_cfg(**{"TERRAIN.TYPES": ["curve_slope"], "TERRAIN.FLAT_LENGTH_RANGE": [1, long_flat, 1],
                    "TERRAIN.HFIELD_LENGTH_RANGE": [1, 8, 1]})
    # per stretch, as indices: flat half-length, type, obstacle half-length (then the hump's height, if it fits)
    long, one, eight, metre_high = long_flat - 1, 0, 7, 4
    draws = [long, 0, eight, one, 0, one, metre_high, one, 0, eight, one, 0, eight]
    heights = draw_heights(cfg, corridor, _Scripted(draws))
    end_of_flats = start + round(2 * long_flat * corridor.divs) + 2 * corridor.divs
    assert heights[:, :end_of_flats].max() == 0.0
    assert heights[0, end_of_flats + corridor.divs] == pytest.approx(1.0)  # the short hump's top


def test_pick_draws_as_rng_choice():
    """``pick`` (the corridor's choices) takes what ``Generator.choice`` of a 1-D array takes, from the same
    draws, and so do sized ``integers`` as indices (the rubble's bands), leaving the generator where it
    does (NumPy's source: ``integers(0, n, size)``)."""
    for seed in range(300):
        mine, numpy = np.random.default_rng(seed), np.random.default_rng(seed)
        for n in (1, 2, 3, 5, 7, 16, 1000):
            options = np.arange(n) * 0.25 - 1.0
            assert pick(mine, options) == numpy.choice(options)
            np.testing.assert_array_equal(options[mine.integers(0, n, size=11)], numpy.choice(options, 11))
        assert mine.bit_generator.state == numpy.bit_generator.state


def test_rugged_square_draws_a_clip_height_per_band():
    cfg = vt_cfg(**{"TERRAIN.TYPES": ["rugged_square"], "TERRAIN.RUGGED_SQUARE_CLIP_RANGE": [0.2, 0.3, 0.1]})
    heights = draw_heights(cfg, Corridor.of(cfg), np.random.default_rng(0))
    used = np.flatnonzero(heights.any(axis=0))
    first = used[: np.argmax(np.diff(used) > 1)]  # the columns of the first obstacle
    assert {round(float(top), 6) for top in heights[:, first].max(axis=1)} == {0.2, 0.3}


def test_flat_and_unknown_types():
    cfg = load_preset("ft")  # asks for curve_slope, but a 75 m flat stretch fills the corridor
    assert not obstacles_fit(cfg)
    assert not draw_heights(cfg, Corridor.of(cfg), np.random.default_rng(0)).any()
    with pytest.raises(ValueError, match="config key TERRAIN.TYPES: unknown value 'lava'"):
        vt_cfg(**{"TERRAIN.TYPES": ["lava"]})  # checked when the config loads (derl.checked_config)


def test_height_patch_has_derl_size_and_log_spacing():
    patch = HeightPatch([1, 4, 4, 4], 10, map_width=200)
    assert patch.shape == (47, 30) and patch.size == 1410
    assert patch.reach == math.ceil(math.hypot(40, 40))


def test_height_patch_rows_follow_mujoco_rows_and_turn_with_the_heading():
    pad = HeightPatch.reach_for([1, 4, 4, 4], 10) + 1
    patch = HeightPatch([1, 4, 4, 4], 10, map_width=2 * pad + 1)
    # Height = row index: rises towards +y, as MuJoCo rows do.
    heights = np.tile(np.arange(2 * pad + 1, dtype=float)[:, None], (1, 2 * pad + 1)).reshape(1, -1)  # one env
    centre = np.array([pad])
    grid = patch(heights, centre, centre, np.array([0.0])).reshape(patch.shape)
    assert grid[0, 0] == -40 and grid[-1, 0] == 40  # row 0 = -y (the agent's right)
    assert np.all(np.diff(grid[:, 0]) > 0) and np.all(grid[23] == 0)
    # Facing +y (yaw 90 degrees), the cells ahead are the high ones, the left ones are at -x.
    turned = patch(heights, centre, centre, np.array([math.pi / 2])).reshape(patch.shape)
    assert turned[23, -1] == 40 and turned[23, 0] == -10
    assert np.all(turned[:, 15] == turned[0, 15])


def test_no_height_field_when_no_obstacle_can_fit():
    """DERL's FT config asks for curve_slope but a 75 m flat stretch fills the corridor:
    no obstacle can ever appear, so no height field (24 MB per env) is built."""
    ft_like = vt_cfg(**{"TERRAIN.SIZE": [75, 75, 1], "TERRAIN.TYPES": ["curve_slope"],
                        "TERRAIN.FLAT_LENGTH_RANGE": [75, 75, 1]})
    assert not obstacles_fit(ft_like)
    assert obstacles_fit(vt_cfg())
    assert not obstacles_fit(vt_cfg(**{"TERRAIN.TYPES": []}))


@pytest.mark.parametrize("kind", ["curve_slope", "steps", "rugged_square"])
def test_an_obstacle_is_a_few_row_profiles_spread_over_the_rows(kind):
    """A reset computes the height-field data of each profile once (one for a hump or stairs, one per
    half-period and clip of rubble), not of every vertex; the heights are the profiles spread over the rows."""
    from derl.envs.terrain import OBSTACLES

    block = OBSTACLES[kind].build(vt_cfg(**{"TERRAIN.RUGGED_SQUARE_CLIP_RANGE": [0.2, 0.3, 0.1]}),
                                  np.random.default_rng(4), 401, 81)
    assert block.heights().shape == (401, 81) and block.columns == 81
    assert len(block.profiles) == (1 if kind != "rugged_square" else 2 * 2)  # half-periods 10, 15 x clips 0.2, 0.3
    np.testing.assert_array_equal(block.heights()[7], block.profiles[block.row_of[7]])


def test_rugged_square_is_its_per_band_formula_bitwise():
    """The rubble's few distinct profiles give the heights that one profile per band gave (same draws)."""
    from derl.envs.terrain import rugged_square

    cfg = vt_cfg(**{"TERRAIN.RUGGED_SQUARE_CLIP_RANGE": [0.1, 0.4, 0.1]})
    for seed in range(20):
        new, old = np.random.default_rng(seed), np.random.default_rng(seed)
        heights = rugged_square(cfg, new, 401, 40 + seed).heights()
        bands = 401 // 10 + 1
        widths, half_periods = old.integers(10, 20, size=bands), old.choice([10, 15], size=bands)
        clips = old.choice(value_range(cfg.TERRAIN.RUGGED_SQUARE_CLIP_RANGE), size=bands)
        phase = (np.linspace(0.0, 1.0, 40 + seed) * half_periods[:, None] / 2) % 1.0
        profiles = np.minimum(2.0 * (1.0 - np.abs(2.0 * phase - 1.0)), clips[:, None])
        np.testing.assert_array_equal(heights, np.repeat(profiles, widths, axis=0)[:401])
        assert new.random() == old.random()
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_grid_cells_are_the_nearest_vertices_clamped_and_corners_for_non_finite_points(dtype):
    """HeightMap.grid_cells against DERL's formula per point: round half to even, clamped onto the grid;
    a point with a non-finite coordinate reads the corner (0, 0), in the coordinates' float type."""
    from derl.envs.arenas import height_map

    cfg = vt_cfg()
    extent = Corridor.of(cfg)
    heights = height_map(extent, cfg, True, 1)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(extent.x_min - 3, extent.x_max + 3, 200), [extent.x_min + 0.05, np.nan, 1.0,
                                                                               np.inf, extent.x_max + 1e-9]])
    y = np.concatenate([rng.uniform(-extent.half_width - 3, extent.half_width + 3, 200), [0.15, 1.0, -np.inf, 2.0,
                                                                                         extent.half_width]])
    x, y = x.astype(dtype), y.astype(dtype)
    last_row, last_col = heights.last_cell
    expected = []
    for px, py in zip(x, y, strict=True):  # NumPy scalars: arithmetic in their float type
        if not math.isfinite(px + py):
            expected.append((0, 0))
            continue
        row = round(float((py + extent.half_width) * extent.divs))  # round(): half to even, as np.round
        col = round(float((px - extent.x_min) * extent.divs))
        expected.append((min(max(row, 0), last_row), min(max(col, 0), last_col)))
    rows, cols = heights.grid_cells(x, y)
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == expected
    assert rows.dtype == cols.dtype == np.int64


def test_height_patch_on_numpy_equals_the_array_api_path_whatever_the_batch_sizes():
    """NumPy's gather (buffers kept between calls, conversion fused into the subtraction) gives, bit for bit,
    what the array-API path gives on torch's CPU tensors of the same values, as the number of envs grows and
    shrinks between calls (an autoreset observes the restarted envs only)."""
    from types import SimpleNamespace

    import array_api_compat.torch as xtorch
    import torch

    patch, on_torch = HeightPatch([1, 4, 4, 4], 10, 200), HeightPatch([1, 4, 4, 4], 10, 200)
    on_torch.bind(SimpleNamespace(xp=xtorch, asarray=lambda values, dtype: torch.as_tensor(values, dtype=dtype)))
    rng = np.random.default_rng(3)
    heights = rng.uniform(-1, 1, (4, 200 * 200)).astype(np.float32)
    for n in (3, 5, 2, 5):
        rows, cols = rng.integers(90, 110, n), rng.integers(90, 110, n)
        yaw, maps = rng.uniform(-4, 4, n), rng.integers(0, 4, n)
        yaw[0] = np.nan
        expected = on_torch(*(torch.from_numpy(a) for a in (heights, rows, cols, yaw, maps))).numpy()
        got = patch(heights, rows, cols, yaw, maps)
        assert got.dtype == np.float64 and got.shape == (n, patch.size)
        np.testing.assert_array_equal(got, expected)
