"""The read side of a run: typed records, learning curves, lineage, replays, pictures and the report.

- ``run``: ``RunView``, a read-only view of an ``OUT_DIR`` (finished or in progress).
- ``records``: ``Morphology`` records and body statistics from genome JSON (no MuJoCo).
- ``curves``: learning curves and the learning-speed statistic (Baldwin effect).
- ``lineage``: the lineage graph and a family-tree layout.
- ``stats``: running best, aging-window mean, linear trend.
- ``replay``: deterministic replays of a trained policy, with video (pictures and video files:
  ``derl.envs.media``).
- ``plots``: matplotlib figures from records; ``report``: the static HTML report (``write_report``
  and its sections; ``report_page``: the page and its writer; ``report_top``: the table of the top K
  with their media; ``report_content``: what the sections compute apart from their HTML).
"""

from derl.analysis.records import BodyStats, Morphology, body_stats
from derl.analysis.run import RunError, RunView, Training

__all__ = ["BodyStats", "Morphology", "RunError", "RunView", "Training", "body_stats"]
