"""DERL's learning curve and fitness statistic on hand-made episode sequences, at several batch shapes."""

import math

import numpy as np
import pytest

from derl.ppo.episodes import FITNESS_STEPS, POINT_STEPS, EpisodeLog, merge_ranks

DERL = POINT_STEPS  # 32 envs x 128 steps: one point per iteration


def _episodes(*returns):
    return [{"return": float(r), "__reward__forward": 2.0 * r, "x_pos": 1.0, "ignored": 9.0} for r in returns]


def _iteration(log, *returns, per_iteration=DERL):
    """One iteration of ``per_iteration`` env steps whose episodes all end at its last step."""
    end = log.env_steps + per_iteration
    log.add_iteration([(end, episode) for episode in _episodes(*returns)], end)


def _train(stream, total, envs, steps):
    """Feeds ``stream`` ([(env step at which it ended, return)], ordered) to a log in iterations of
    ``envs`` x ``steps`` env steps, each episode at the end of the vector step (``envs`` env steps) that
    holds it, as a trainer does; returns the log after ``total`` env steps."""
    log = EpisodeLog()
    for start in range(0, total, envs * steps):
        end = start + envs * steps
        log.add_iteration([(-(-at // envs) * envs, _episodes(r)[0]) for at, r in stream if start < at <= end], end)
    return log


def _random_stream(total, seed=0):
    """Episodes ending at random env steps (about one per 300), with returns that rise with training."""
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.choice(np.arange(1, total + 1), size=total // 300, replace=False))
    return [(int(at), float(at / 1000 + rng.normal())) for at in ends]


def test_fitness_is_the_mean_of_per_iteration_means_of_the_last_ten_episodes():
    log = EpisodeLog()
    _iteration(log)                          # nothing finished yet: no point
    assert log.current() == {} and len(log.points) == 0
    _iteration(log, 1, 2)                    # point: (1 + 2) / 2 = 1.5
    _iteration(log)                          # no new episode: the same 1.5 again
    _iteration(log, *range(3, 13))           # the last 10 are 3..12: point 7.5 (1 and 2 dropped)
    assert log.current()["return"] == 7.5
    # fitness = (1.5 + 1.5 + 7.5) / 3 = 3.5; forward is twice that; x_pos 1; unknown keys are not kept
    assert log.summary() == {"return": 3.5, "__reward__forward": 7.0, "x_pos": 1.0}
    assert log.finished == 12


def test_derl_shape_keeps_the_last_hundred_iterations():
    log = EpisodeLog()
    for k in range(150):  # one episode of return k per iteration, so the recent ten are k-9..k
        _iteration(log, k)
    # points for k >= 9 are k - 4.5; the last 100 points are k = 50..149: mean(k) - 4.5 = 99.5 - 4.5 = 95
    assert log.summary()["return"] == pytest.approx(95.0)
    assert len(log.points) == 100 and log.env_steps == 150 * DERL


@pytest.mark.parametrize("envs, steps", [(4096, 24), (8, 64), (2 * 32, 128), (16, 128), (1000, 7)],
                         ids=["ft_gpu 4096x24", "quick 8x64", "2 ranks of 32x128", "16x128", "1000x7"])
def test_every_shape_measures_the_same_env_steps_as_derl(envs, steps):
    """The same episodes (each ending at the end of the vector step that holds it) give the same fitness
    whether the env steps come in DERL's iterations or in another shape's, at the same total."""
    both = math.lcm(envs * steps, DERL)
    total = both * -(-2 * FITNESS_STEPS // both)  # a multiple of both iteration sizes, two windows or more
    stream = [(-(-at // envs) * envs, r) for at, r in _random_stream(total)]  # as the shape sees them
    shaped, derl = _train(stream, total, envs, steps), _train(stream, total, 1, DERL)
    assert total >= 2 * FITNESS_STEPS and shaped.finished == derl.finished == len(stream)
    assert shaped.summary() == derl.summary()
    assert list(shaped.points) == list(derl.points)


def test_the_fitness_covers_the_last_409600_env_steps_at_4096_by_24():
    """ft_gpu.yml's shape: 98,304 env steps per iteration, 203 of them; the fitness reads the last 100
    vector steps (409,600 env steps), not the last 100 iterations (the second half of training)."""
    envs, steps, iterations = 4096, 24, 203
    total = envs * steps * iterations
    stream = [(-(-at // envs) * envs, r) for at, r in _random_stream(total, seed=1)]
    log = _train(stream, total, envs, steps)
    # The reference computed directly: a point every 4,096 env steps of the window, the last 10 episodes by then.
    points = [np.mean([r for at, r in stream if at <= boundary][-10:])
              for boundary in range(total - FITNESS_STEPS + POINT_STEPS, total + 1, POINT_STEPS)]
    assert len(points) == 100
    assert log.summary()["return"] == pytest.approx(np.mean(points), rel=1e-12)
    # What came before the window and its last 10 episodes does not count.
    early = [(at, r + (100.0 if at < total - FITNESS_STEPS - 50_000 else 0.0)) for at, r in stream]
    assert _train(early, total, envs, steps).summary() == log.summary()


def test_a_training_that_ends_between_points_adds_its_end():
    log = EpisodeLog()
    _iteration(log, 1, per_iteration=3000)       # no point yet (3,000 < 4,096)
    assert len(log.points) == 0
    assert log.summary()["return"] == 1.0        # the end is the one point
    _iteration(log, 3, per_iteration=3000)       # ends at 6,000: the point at 4,096 saw 1 alone
    assert [p["return"] for p in log.points] == [1.0]
    assert log.summary()["return"] == pytest.approx((1.0 + 2.0) / 2)  # and the end sees 1 and 3


def test_a_point_counts_the_episodes_ended_by_its_step():
    log = EpisodeLog()
    end = 3 * POINT_STEPS
    log.add_iteration([(POINT_STEPS, _episodes(1)[0]), (POINT_STEPS + 1, _episodes(5)[0]),
                       (end, _episodes(9)[0])], end)
    assert [p["return"] for p in log.points] == [1.0, 3.0, 5.0]


def test_a_run_with_no_finished_episode_reports_the_episodes_in_progress():
    log = EpisodeLog()
    _iteration(log)
    assert log.summary(_episodes(4, 6)) == {"return": 5.0, "__reward__forward": 10.0, "x_pos": 1.0}


def test_state_round_trip():
    log = EpisodeLog()
    _iteration(log, 1, 2, 3, per_iteration=3000)
    other = EpisodeLog()
    other.load_state_dict(log.state_dict(), log.env_steps)
    _iteration(other, 5, per_iteration=3000)
    _iteration(log, 5, per_iteration=3000)
    assert other.summary() == log.summary() and other.finished == log.finished == 4
    assert list(other.points) == list(log.points)


def test_the_ranks_episodes_are_merged_by_step_then_rank():
    rank0 = [(0, {"return": 0.0}), (3, {"return": 1.0}), (3, {"return": 2.0})]
    rank1 = [(1, {"return": 10.0}), (3, {"return": 11.0})]
    merged = merge_ranks([rank0, rank1])
    assert [(step, ep["return"]) for step, ep in merged] == [(0, 0.0), (1, 10.0), (3, 1.0), (3, 2.0), (3, 11.0)]
