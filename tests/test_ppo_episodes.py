"""DERL's learning curve and fitness statistic on hand-made episode sequences."""

import pytest

from derl.ppo.episodes import EpisodeLog


def _episodes(*returns):
    return [{"return": float(r), "__reward__forward": 2.0 * r, "x_pos": 1.0, "ignored": 9.0} for r in returns]


def test_fitness_is_the_mean_of_per_iteration_means_of_the_last_ten_episodes():
    log = EpisodeLog()
    log.add_iteration([])                    # nothing finished yet: no point
    assert log.current() == {} and len(log.points) == 0
    log.add_iteration(_episodes(1, 2))       # point: (1 + 2) / 2 = 1.5
    log.add_iteration([])                    # no new episode: the same 1.5 again
    log.add_iteration(_episodes(*range(3, 13)))  # the last 10 are 3..12: point 7.5 (1 and 2 dropped)
    assert log.current()["return"] == 7.5
    # fitness = (1.5 + 1.5 + 7.5) / 3 = 3.5; forward is twice that; x_pos 1; unknown keys are not kept
    assert log.summary() == {"return": 3.5, "__reward__forward": 7.0, "x_pos": 1.0}
    assert log.finished == 12


def test_fitness_keeps_the_last_hundred_points():
    log = EpisodeLog()
    for k in range(150):  # one episode of return k per iteration, so the recent ten are k-9..k
        log.add_iteration(_episodes(k))
    # points for k >= 9 are k - 4.5; the last 100 points are k = 50..149: mean(k) - 4.5 = 99.5 - 4.5 = 95
    assert log.summary()["return"] == pytest.approx(95.0)


def test_a_run_with_no_finished_episode_reports_the_episodes_in_progress():
    log = EpisodeLog()
    log.add_iteration([])
    assert log.summary(_episodes(4, 6)) == {"return": 5.0, "__reward__forward": 10.0, "x_pos": 1.0}


def test_state_round_trip():
    log = EpisodeLog()
    log.add_iteration(_episodes(1, 2, 3))
    other = EpisodeLog()
    other.load_state_dict(log.state_dict())
    other.add_iteration(_episodes(5))
    log.add_iteration(_episodes(5))
    assert other.summary() == log.summary() and other.finished == log.finished == 4
