"""The MuJoCo Warp backend's logic without warp or a GPU: graph capture on warp's own stream with a
warm-up that leaves the state as it was (a fake warp recording its calls), overflow bits by type
(planted), and the time check of a 5,000-step float32 episode."""

import re
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from derl.envs.batch import time_went_back
from derl.envs.warp_graphs import Graphs
from derl.envs.warp_overflow import BITS, Buffers, OverflowTally, describe, grown

STATE = ("qpos", "qvel", "time", "act", "qacc_warmstart")


class FakeWarp:
    """Records the warp calls ``Graphs`` makes; kernels run at once, or are recorded while capturing
    and run by ``capture_launch``, as on CUDA."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.scopes: list[tuple] = []  # the device and stream scopes open now
        self.recording: list | None = None

    @contextmanager
    def _scope(self, kind, value):
        self.calls.append((kind, value))
        self.scopes.append((kind, value))
        yield
        self.scopes.pop()

    def ScopedDevice(self, device):  # noqa: N802 - warp's names
        return self._scope("device", device)

    def ScopedStream(self, stream):  # noqa: N802
        return self._scope("stream", stream)

    @contextmanager
    def ScopedCapture(self, device=None, stream=None):  # noqa: N802
        self.calls.append(("capture", device, stream, tuple(self.scopes)))
        self.recording = []
        capture = type("Capture", (), {})()
        yield capture
        capture.graph, self.recording = self.recording, None

    def clone(self, array):
        return array.copy()

    def copy(self, dest, src):
        dest[...] = src

    def capture_launch(self, graph, stream=None):
        self.calls.append(("launch", stream))
        for kernel in graph:
            kernel()

    def kernel(self, fn):
        """Runs ``fn`` now, or records it while capturing."""
        if self.recording is not None:
            self.recording.append(fn)
        else:
            fn()


def _world():
    return {name: np.zeros(3) for name in STATE}


def _substep(fake, state):
    def advance():
        state["time"] += 0.005
        state["qvel"] += 1.0
        state["qpos"] += state["qvel"] * 0.005
        state["act"] += 0.1
        state["qacc_warmstart"] += 2.0
    fake.kernel(advance)


@pytest.mark.parametrize("calls", [1, 3])
def test_graphs_capture_on_warps_own_stream_and_the_warm_up_leaves_the_state_as_it_was(calls):
    fake, reference, state = FakeWarp(), FakeWarp(), _world()
    expected = _world()
    graphs = Graphs(fake, "cuda:0", "warp-stream", [state[name] for name in STATE], capture=True)
    for _ in range(calls):
        graphs.run("step4", lambda: [_substep(fake, state) for _ in range(4)])
        for _ in range(4):
            _substep(reference, expected)
    for name in STATE:  # the warm-up's step was undone: each call advanced 4 substeps, no more
        np.testing.assert_array_equal(state[name], expected[name], err_msg=name)
    captures = [call for call in fake.calls if call[0] == "capture"]
    assert captures == [("capture", "cuda:0", "warp-stream", (("device", "cuda:0"), ("stream", "warp-stream")))]
    assert [call for call in fake.calls if call[0] == "launch"] == [("launch", "warp-stream")] * calls


def test_graphs_without_capture_run_the_body_on_the_device():
    fake, state = FakeWarp(), _world()
    Graphs(fake, "cpu", None, [], capture=False).run("step1", lambda: _substep(fake, state))
    assert fake.calls == [("device", "cpu")] and state["time"][0] == 0.005


def test_overflow_bits_are_counted_by_type_and_cleared_each_step():
    overflow = torch.zeros(4, dtype=torch.int32)
    tally = OverflowTally(overflow)
    overflow[:] = BITS["NARROWPHASE"] | BITS["BROADPHASE"]  # a contact buffer: every world's bit
    tally.add()
    overflow[1] = BITS["ITERATIONS"]
    overflow[2] = BITS["ITERATIONS"] | BITS["NEFC"]
    tally.add()
    tally.add()  # nothing set: add cleared the bits
    counts = tally.counts()
    assert (counts["NARROWPHASE"], counts["BROADPHASE"], counts["ITERATIONS"], counts["NEFC"]) == (4, 4, 2, 1)
    assert sum(counts.values()) == 11 and tally.steps == 3 and not overflow.any()


def test_a_buffer_that_ran_out_grows_and_solver_limits_only_count():
    buffers = Buffers(64, 256)
    assert grown(buffers, {"NARROWPHASE": 3}) == Buffers(128, 256)
    assert grown(buffers, {"NEFC": 1, "CCD": 2}) == Buffers(128, 512)
    assert grown(buffers, {"ITERATIONS": 40, "LS_ITERATIONS": 5}) == buffers
    assert describe({name: 0 for name in BITS}, 100, buffers) is None
    line = describe({"NARROWPHASE": 4096, "ITERATIONS": 7}, 100, buffers)
    assert "NARROWPHASE 4096" in line and "SIM.NCONMAX 128" in line and "ITERATIONS 7" in line
    assert "\n" not in line


def test_capped_height_field_contacts_are_counted_and_grow_no_buffer():
    """HFIELD: a geom pair met more than mjMAXCONPAIR (50) height-field prisms, a cap MuJoCo C has too;
    doubling SIM.NCONMAX would not lift it (an MVT body on a terrain bank set it in 57 of 2,048 world-steps)."""
    buffers = Buffers(64, 256)
    assert grown(buffers, {"HFIELD": 57}) == buffers
    line = describe({"HFIELD": 57}, 256, buffers)
    assert "HFIELD 57" in line and "capped at 50" in line and "SIM.NCONMAX" not in line


def test_a_5000_step_float32_episode_is_never_taken_for_a_reset():
    """Warp's time is float32: 20,000 additions of 5 ms leave it 0.015 s off 100 s, more than the
    half-substep tolerance of a check against the episode's summed time (which fired at step 1,494)."""
    dt, substep = np.float32(0.02), np.float32(0.005)
    time = np.zeros(4, dtype=np.float32)
    steps = np.zeros(4, dtype=np.int64)
    for _ in range(5000):
        before = time.copy()
        for _ in range(4):
            time = time + substep
        steps += 1
        assert not time_went_back(before, time, float(dt) - 0.0025).any(), f"step {steps[0]}"
    assert (steps >= 5000).all() and abs(float(time[0]) - 100.0) > 0.0025
    reset = np.float32(0.015)  # MuJoCo C reset the state in the step's first substep: 3 substeps after it
    assert time_went_back(np.float32(50.0), reset, 0.02 - 0.0025)


@pytest.mark.parametrize("toolkit, driver, min_driver, mempool, words", [
    (None, None, None, False, "built without CUDA"),
    ((12, 8), None, (12, 0), False, "no NVIDIA driver; install one for CUDA >= 12.4"),
    ((13, 0), (12, 8), (13, 0), True, "built with CUDA 13.0 and needs a driver for CUDA >= 13.0"),
    ((12, 8), (12, 2), (12, 0), True, "conditional CUDA graphs (CUDA >= 12.4), the driver's CUDA 12.2 is older"),
    ((12, 3), (12, 8), (12, 0), True, "warp's CUDA 12.3 is older"),
    ((12, 8), (12, 8), (12, 0), False, "no CUDA memory pool"),
])
def test_warp_on_cuda_is_checked_at_start_up_in_one_line(toolkit, driver, min_driver, mempool, words):
    from derl.config import ConfigError
    from derl.envs.warp_check import check_warp_cuda

    with pytest.raises(ConfigError, match=re.escape(words)) as raised:
        check_warp_cuda("cuda:0", toolkit, driver, min_driver, mempool)
    assert "\n" not in str(raised.value) and raised.value.key == "SIM.BACKEND"


def test_a_driver_for_warps_cuda_with_conditional_graphs_and_a_mempool_passes():
    from derl.envs.warp_check import check_warp_cuda

    check_warp_cuda("cuda:0", (12, 8), (12, 4), (12, 0), True)
