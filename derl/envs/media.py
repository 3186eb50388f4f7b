"""Pictures and videos: headless MuJoCo rendering (``MUJOCO_GL=egl``), PNG, MP4 with a GIF fallback.

Videos are MP4 (H.264, yuv420p) through imageio-ffmpeg's bundled ffmpeg binary; where that is not
usable they are written as GIF next to the requested path. Every file is encoded in memory (ffmpeg,
which writes by path: in a private temporary folder) and written atomically through a descriptor of
its folder (``derl.fileio.writes.atomic_write_bytes``): below ``root`` (``OUT_DIR``: the report's media), a
folder swapped for a symbolic link at any moment is refused, never written through.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import mujoco
import numpy as np

from derl.envs.config import WorldCfg
from derl.envs.unimal_env import UnimalEnv
from derl.fileio.writes import atomic_write_bytes

IMAGE_SIZE = (480, 360)  # width, height of a body picture
VIDEO_SIZE = (320, 240)  # width, height of a policy video; multiples of 16 for MP4
# Free camera for body pictures: seen from the front left, a little from above.
AZIMUTH, ELEVATION = 135.0, -20.0


def write_png(frame: np.ndarray, path: str | Path, root: str | Path | None = None) -> Path:
    """Writes an ``[H, W, 3]`` uint8 frame as PNG, atomically (``root``: as ``atomic_write_bytes``)."""
    import imageio.v3 as iio

    path = Path(path)
    atomic_write_bytes(path, iio.imwrite("<bytes>", np.ascontiguousarray(frame), extension=".png"), root)
    return path


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: float, root: str | Path | None = None,
                overwrite: bool = True) -> Path:
    """Writes ``frames`` as MP4 (or GIF if ``path`` ends in .gif, or if MP4 fails); returns the file written.

    Frame sizes should be multiples of 16 (MP4 blocks); others are padded by ffmpeg's scaler.
    ``root``: as ``atomic_write_bytes`` (a folder that is a link is refused, MP4 or GIF alike).

    Raises:
        FileExistsError: ``overwrite`` is false and the file to write exists: a user's ``--video`` is
            checked before the run (derl.fileio.outputs), the GIF written in place of a failing MP4 only here.
    """
    if not frames:
        raise ValueError(f"no frames to write to {path}")
    path = Path(path)
    if path.suffix.lower() != ".gif":
        try:
            data = _mp4(frames, fps)
        except (ImportError, RuntimeError, OSError) as err:
            print(f"warning: MP4 unavailable ({type(err).__name__}: {err}); writing GIF", flush=True)
        else:
            return _write_new(path, data, root, overwrite)
    return _write_new(path.with_suffix(".gif"), _gif(frames, fps), root, overwrite)


def _write_new(path: Path, data: bytes, root: str | Path | None, overwrite: bool) -> Path:
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(f"{path}: exists; give --overwrite to replace it, or another path")
    atomic_write_bytes(path, data, root)
    return path


def _mp4(frames: Sequence[np.ndarray], fps: float) -> bytes:
    """The MP4 of ``frames``; ffmpeg writes by path, so in a private temporary folder, removed after."""
    import imageio.v2 as imageio
    import imageio_ffmpeg  # noqa: F401 - the ffmpeg binary; ImportError selects the GIF fallback

    with tempfile.TemporaryDirectory(prefix="derl-video-") as private:
        encoded = Path(private) / "video.mp4"
        with imageio.get_writer(encoded, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                pixelformat="yuv420p", macro_block_size=16, ffmpeg_log_level="error") as writer:
            for frame in frames:
                writer.append_data(np.ascontiguousarray(frame))  # type: ignore[attr-defined]  # imageio's v2 Writer has it; its stubs type the base class
        return encoded.read_bytes()


def _gif(frames: Sequence[np.ndarray], fps: float) -> bytes:
    import imageio.v3 as iio

    return iio.imwrite("<bytes>", np.stack(frames), extension=".gif", duration=1000.0 / fps, loop=0)


def read_video(path: str | Path) -> np.ndarray:
    """All frames of a video file, ``[T, H, W, 3]`` uint8 (for tests and checks)."""
    path = Path(path)
    if path.suffix.lower() == ".gif":
        import imageio.v3 as iio

        return iio.imread(path, index=None)[..., :3]
    import imageio.v2 as imageio

    with imageio.get_reader(path, format="FFMPEG") as reader:
        return np.stack([frame for frame in reader])  # type: ignore[attr-defined]  # a v2 Reader iterates its frames; its stubs type the base class


def picture_config(world: WorldCfg) -> WorldCfg:
    """``world`` with a plain floor: a body picture shows the body only."""
    env = dataclasses.replace(world.ENV, MODULES=("Floor", "Agent"), TASK="locomotion",
                              KEYS_TO_KEEP=("proprioceptive",))
    return dataclasses.replace(world, ENV=env)


# The largest picture side rendered: OpenGL's framebuffers stop at 8192-16384 pixels (driver-dependent),
# and 4096 x 4096 RGB is already 48 MB.
MAX_IMAGE_SIDE = 4096


def render_body(mjcf: str, world: WorldCfg, size: tuple[int, int] = IMAGE_SIZE) -> np.ndarray:
    """A picture ``[H, W, 3]`` of a unimal (MJCF text) standing at its start pose on a floor."""
    width, height = size
    if not (16 <= min(size) and max(size) <= MAX_IMAGE_SIDE):
        raise ValueError(f"picture size {width} x {height} is outside 16 .. {MAX_IMAGE_SIDE} pixels a side")
    env = UnimalEnv(None, picture_config(world), mjcf=mjcf)
    try:
        model, data = env.model, env.data
        mujoco.mj_forward(model, data)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        renderer = mujoco.Renderer(model, height, width)
        try:
            renderer.update_scene(data, camera=_body_camera(model, data, env.head_body))
            return renderer.render().copy()
        finally:
            renderer.close()
    finally:
        env.close()


def _body_camera(model: mujoco.MjModel, data: mujoco.MjData, head_body: int) -> mujoco.MjvCamera:
    """A free camera that frames every geom of the agent."""
    agent = np.flatnonzero(model.body_rootid[model.geom_bodyid] == head_body)
    centre = data.subtree_com[head_body].copy()
    reach = max(float(np.linalg.norm(data.geom_xpos[g] - centre) + model.geom_rbound[g]) for g in agent)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.lookat[:] = centre
    half_fov = np.radians(model.vis.global_.fovy / 2)
    camera.distance = 1.15 * reach / np.sin(half_fov)
    camera.azimuth, camera.elevation = AZIMUTH, ELEVATION
    return camera
