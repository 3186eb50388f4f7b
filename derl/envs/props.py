"""Props: small entities that write their own MJCF, bind to the compiled model and are placed per episode.

- ``Box``: a free box with a site at the centre of each face (DERL's manipulation box).
- ``Ball``: a free ball with a site at its centre (DERL's manipulation ball).
- ``GoalMarker``: a site marking a goal point (no collision).
- ``StaticBoxes``: fixed boxes (DERL's obstacle task) moved and resized in the model per episode.

``Box`` and ``Ball`` expose ``points`` (site ids the reach distance is measured to) and
``state(data)`` (position, linear velocity, angular velocity in the world frame).
"""

from __future__ import annotations

import mujoco
import numpy as np
from lxml import etree

from derl.envs.mjcf import fmt, sub

# Face centres of a unit cube, scaled by the box half-side.
BOX_FACES = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))
HIDDEN_Z = -50.0  # where unused static boxes wait, far below any ground


class _FreeProp:
    """A body with a free joint named ``name`` (joint and body share the name)."""

    name: str
    half_height: float

    def bind(self, model: mujoco.MjModel) -> None:
        joint = model.joint(self.name)
        self.qpos = int(joint.qposadr[0])
        self.dof = int(joint.dofadr[0])
        self.body = model.body(self.name).id
        self.points = np.array([model.site(n).id for n in self._point_names()], dtype=np.intp)

    def _point_names(self) -> list[str]:
        raise NotImplementedError

    def place(self, data: mujoco.MjData, x: float, y: float, z: float) -> None:
        """Puts the prop at rest at (x, y, z), upright."""
        data.qpos[self.qpos:self.qpos + 7] = (x, y, z, 1, 0, 0, 0)
        data.qvel[self.dof:self.dof + 6] = 0

    def state(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position, linear velocity, angular velocity), world frame."""
        adr, dof = self.qpos, self.dof
        spin = data.xmat[self.body].reshape(3, 3) @ data.qvel[dof + 3:dof + 6]  # free joint: local -> world
        return data.qpos[adr:adr + 3], data.qvel[dof:dof + 3], spin


class Box(_FreeProp):
    """A free box of half-side ``half_side`` and mass ``mass`` with six face sites ``<name>/face/k``."""

    def __init__(self, half_side: float, mass: float, name: str = "box"):
        self.name, self.half_side, self.mass = name, float(half_side), float(mass)
        self.half_height = self.half_side

    def build(self, worldbody: etree._Element) -> None:
        side = self.half_side
        body = sub(worldbody, "body", name=self.name, pos=fmt(0, 0, 10))
        sub(body, "freejoint", name=self.name)
        sub(body, "geom", name=self.name, type="box", size=fmt(side, side, side), mass=str(self.mass),
            rgba=".8 .5 .2 1")
        for k, face in enumerate(BOX_FACES):
            sub(body, "site", name=f"{self.name}/face/{k}", pos=fmt(*(side * c for c in face)), size="0.02")

    def _point_names(self) -> list[str]:
        return [f"{self.name}/face/{k}" for k in range(len(BOX_FACES))]


class Ball(_FreeProp):
    """DERL's ball: radius ``radius``, density 600, condim 6, rolling friction, bouncy contact."""

    def __init__(self, radius: float, name: str = "ball"):
        self.name, self.radius = name, float(radius)
        self.half_height = self.radius

    def build(self, worldbody: etree._Element) -> None:
        body = sub(worldbody, "body", name=self.name, pos=fmt(0, 0, 10))
        sub(body, "freejoint", name=self.name)
        sub(body, "geom", name=self.name, type="sphere", size=fmt(self.radius), density="600", condim="6",
            priority="1", friction="0.7 0.005 0.005", solref="-10000 -30", rgba=".8 .5 .2 1")
        sub(body, "site", name=f"{self.name}/centre", pos="0 0 0", size="0.02")

    def _point_names(self) -> list[str]:
        return [f"{self.name}/centre"]


class GoalMarker:
    """A goal point shown as a translucent red sphere (a site: it collides with nothing)."""

    def __init__(self, name: str = "goal"):
        self.name = name

    def build(self, worldbody: etree._Element) -> None:
        sub(worldbody, "site", name=self.name, pos=fmt(0, 0, 10), type="sphere", size="0.2", rgba="1 0 0 .5")

    def bind(self, model: mujoco.MjModel) -> None:
        self.site = model.site(self.name).id
        self.position = model.site_pos[self.site]  # a view: where the goal is

    def place(self, x: float, y: float, z: float) -> None:
        self.position[:] = (x, y, z)


class StaticBoxes:
    """``count`` fixed boxes (world geoms ``<prefix>k``) that each episode moves and resizes."""

    def __init__(self, count: int, prefix: str = "obstacle/"):
        self.count, self.prefix = int(count), prefix

    def build(self, worldbody: etree._Element) -> None:
        for k in range(self.count):
            sub(worldbody, "geom", name=f"{self.prefix}{k}", type="box", pos=fmt(0, 0, HIDDEN_Z),
                size="0.1 0.1 0.1", rgba=".45 .45 .5 1")

    def bind(self, model: mujoco.MjModel) -> None:
        self._model = model
        self.geoms = np.array([model.geom(f"{self.prefix}{k}").id for k in range(self.count)], dtype=np.intp)

    def set(self, k: int, centre: tuple[float, float, float], half_sizes: tuple[float, float, float]) -> None:
        """Box ``k`` at ``centre`` with ``half_sizes`` (its bounding data updated for collisions)."""
        model, geom = self._model, self.geoms[k]
        model.geom_pos[geom] = centre
        model.geom_size[geom] = half_sizes
        model.geom_rbound[geom] = float(np.linalg.norm(half_sizes))
        model.geom_aabb[geom] = (0, 0, 0, *half_sizes)

    def hide(self, k: int) -> None:
        """Box ``k`` out of the way, far below the ground."""
        self.set(k, (0.0, 0.0, HIDDEN_Z), (0.1, 0.1, 0.1))
