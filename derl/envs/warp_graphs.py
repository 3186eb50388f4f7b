"""``Graphs``: warp launches captured once in a graph on a stream of warp's own, with a warm-up that
leaves the state as it was (``derl.envs.warp_physics``). No warp import: warp is passed in, so that
the capture logic is tested with a fake warp that records its calls."""

from __future__ import annotations

from collections.abc import Callable


class Graphs:
    """Bodies of warp launches, each captured once in a graph on ``stream`` and replayed.

    The first call of a body runs it uncaptured (warp compiles and loads its kernels: CUDA cannot
    load a module inside a capture on drivers before 12.3), between a copy of the arrays of
    ``restored`` and their restore, then captures it inside ``wp.ScopedDevice`` on ``stream``. Without
    ``capture`` (warp's CPU device) a body just runs. ``wp`` is the warp module (a test passes a fake).
    """

    def __init__(self, wp_module, device, stream, restored: list, capture: bool):
        self.wp, self.device, self.stream, self.restored, self.capture = wp_module, device, stream, restored, capture
        self.graphs: dict[str, object] = {}

    def run(self, key: str, body: Callable[[], None]) -> None:
        wp_ = self.wp
        if not self.capture:
            with wp_.ScopedDevice(self.device):
                body()
            return
        graph = self.graphs.get(key)
        if graph is None:
            with wp_.ScopedDevice(self.device), wp_.ScopedStream(self.stream):
                saved = [wp_.clone(array) for array in self.restored]
                body()  # the warm-up: compiles and loads the kernels outside the capture
                for array, before in zip(self.restored, saved, strict=True):
                    wp_.copy(array, before)
                with wp_.ScopedCapture(device=self.device, stream=self.stream) as capture:
                    body()
            graph = self.graphs[key] = capture.graph
        wp_.capture_launch(graph, stream=self.stream)
