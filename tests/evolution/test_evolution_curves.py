"""The search's TensorBoard curves (derl.evolution.curves), from fixed records, read back with
TensorBoard's own reader."""

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from derl.checked_config import load_config
from derl.evolution.coordinator import eta_text
from derl.evolution.curves import SearchCurves
from derl.evolution.folder.record import PublishedRecord, morphology_files
from derl.evolution.folder.run_dir import RunDir


def _points(accumulator: EventAccumulator, tag: str) -> dict[int, float]:
    return {event.step: round(event.value, 6) for event in accumulator.Scalars(tag)}


def test_running_best_and_aging_window_mean_by_publication(tmp_path):
    cfg = load_config(None, ["EVO.SELECTION_CRITERIA", "[__reward__forward]", "EVO.SELECTION_CRITERIA_OBJ", "[-1]",
                             "EVO.AGING_WINDOW_SIZE", "2"])
    run = RunDir(tmp_path)
    curves = SearchCurves(cfg.EVO, run)
    fitness = [3.0, 1.0, 5.0, 2.0]
    records = [PublishedRecord(id=f"{k:06d}", lineage=f"{k:06d}", slot=k, attempt=0, publication=k,
                               fitness={"__reward__forward": f, "return": f + 1}, files=morphology_files(f"{k:06d}"))
               for k, f in enumerate(fitness)]
    curves.update(records[:2])
    curves.update(records, morphologies_per_hour=120.0)  # the first two are not written twice
    curves.close()
    accumulator = EventAccumulator(str(run.tensorboard_dir("search")))
    accumulator.Reload()
    assert _points(accumulator, "search/fitness") == {0: 3.0, 1: 1.0, 2: 5.0, 3: 2.0}
    assert _points(accumulator, "search/best") == {0: 3.0, 1: 3.0, 2: 5.0, 3: 5.0}  # maximised
    # The window of the last 2 publications: (3), (3+1)/2, (1+5)/2, (5+2)/2.
    assert _points(accumulator, "search/aging_window_mean") == {0: 3.0, 1: 2.0, 2: 3.0, 3: 3.5}
    assert _points(accumulator, "search/morphologies_per_hour") == {3: 120.0}
    assert len(accumulator.Scalars("search/return")) == 4


def test_the_coordinator_line_carries_rate_and_eta():
    assert eta_text({"published": 9, "total": 24, "morphologies_per_hour": 95.2, "eta_hours": 0.158}) == (
        ", 95/h, ETA 9 min")
    assert eta_text({"published": 10, "total": 4000, "morphologies_per_hour": 180.0, "eta_hours": 22.17}) == (
        ", 180/h, ETA 22.2 h")
    assert eta_text({"published": 24, "total": 24, "morphologies_per_hour": 95.0, "eta_hours": 0.0}) == ""
    assert eta_text({"published": 0, "total": 24, "morphologies_per_hour": 0.0, "eta_hours": None}) == ""
