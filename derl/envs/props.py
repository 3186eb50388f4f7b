"""Props: small entities that write their own MJCF, bind to the compiled model and are placed per episode.

- ``Box``: a free box with a site at the centre of each face (DERL's manipulation box).
- ``Ball``: a free ball with a site at its centre (DERL's manipulation ball).
- ``GoalMarker``: a site marking a goal point (no collision).
- ``StaticBoxes``: fixed boxes (DERL's obstacle task) moved and resized in the model per episode.

Props bind to the scene (``derl.envs.scene.Scene``: every env's model and the batch's arrays) and
are placed one env at a time, at its reset. ``Box`` and ``Ball`` expose ``points`` (site ids the
reach distance is measured to) and ``state(scene)`` (positions, linear and angular velocities in the
world frame, ``[N, 3]`` each).
"""

from __future__ import annotations

import numpy as np
from lxml import etree

from derl.envs.mjcf import fmt, sub
from derl.envs.scene import Array, Scene

# Face centres of a unit cube, scaled by the box half-side.
BOX_FACES = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))
HIDDEN_Z = -50.0  # where unused static boxes wait, far below any ground


class _FreeProp:
    """A body with a free joint named ``name`` (joint and body share the name)."""

    name: str
    half_height: float

    def bind(self, scene: Scene) -> None:
        model = scene.model
        joint = model.joint(self.name)
        self.qpos = int(joint.qposadr[0])
        self.dof = int(joint.dofadr[0])
        self.body = model.body(self.name).id
        self.points = np.array([model.site(n).id for n in self._point_names()], dtype=np.intp)
        self._scene = scene

    def _point_names(self) -> list[str]:
        raise NotImplementedError

    def place(self, env: int, x: float, y: float, z: float) -> None:
        """Puts env ``env``'s prop at rest at (x, y, z), upright."""
        scene = self._scene
        scene.qpos[env, self.qpos:self.qpos + 7] = scene.asarray((x, y, z, 1, 0, 0, 0))
        scene.qvel[env, self.dof:self.dof + 6] = 0

    def state(self, scene: Scene) -> tuple[Array, Array, Array]:
        """(positions, linear velocities, angular velocities) ``[N, 3]``, world frame."""
        adr, dof = self.qpos, self.dof
        local = scene.qvel[:, dof + 3:dof + 6]  # a free joint's angular velocity is in its body frame
        spin = (scene.xp.reshape(scene.xmat[:, self.body], (-1, 3, 3)) @ local[:, :, None])[:, :, 0]
        return scene.qpos[:, adr:adr + 3], scene.qvel[:, dof:dof + 3], spin


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
    """A goal point per env, shown as a translucent red sphere (a site: it collides with nothing).

    ``position[i]`` is env i's goal (``[N, 3]``, in the scene's namespace: step hooks read it);
    ``place`` also moves the site in env i's host model, for rendering (a simulator of one model for
    every world leaves its site where the model has it: nothing but a renderer reads it).
    """

    def __init__(self, name: str = "goal"):
        self.name = name

    def build(self, worldbody: etree._Element) -> None:
        sub(worldbody, "site", name=self.name, pos=fmt(0, 0, 10), type="sphere", size="0.2", rgba="1 0 0 .5")

    def bind(self, scene: Scene) -> None:
        self.site = scene.model.site(self.name).id
        self._models = scene.models
        self._scene = scene
        self.position = scene.asarray(np.repeat(scene.model.site_pos[self.site][None], scene.num_envs, axis=0))

    def place(self, env: int, x: float, y: float, z: float) -> None:
        self.position[env] = self._scene.asarray((x, y, z))
        self._models[env].site_pos[self.site] = (x, y, z)


class StaticBoxes:
    """``count`` fixed boxes (world geoms ``<prefix>k``) that each episode moves and resizes."""

    #: the model fields ``set`` writes (a simulator of one model holds them per world)
    MODEL_ROWS = ("geom_pos", "geom_size", "geom_rbound", "geom_aabb")

    def __init__(self, count: int, prefix: str = "obstacle/"):
        self.count, self.prefix = int(count), prefix

    def build(self, worldbody: etree._Element) -> None:
        for k in range(self.count):
            sub(worldbody, "geom", name=f"{self.prefix}{k}", type="box", pos=fmt(0, 0, HIDDEN_Z),
                size="0.1 0.1 0.1", rgba=".45 .45 .5 1")

    def bind(self, scene: Scene) -> None:
        self._models = scene.models
        self.geoms = np.array([scene.model.geom(f"{self.prefix}{k}").id for k in range(self.count)], dtype=np.intp)

    def set(self, env: int, k: int, centre: tuple[float, float, float],
            half_sizes: tuple[float, float, float]) -> None:
        """Env ``env``'s box ``k`` at ``centre`` with ``half_sizes`` (its bounding data updated for collisions)."""
        model, geom = self._models[env], self.geoms[k]
        model.geom_pos[geom] = centre
        model.geom_size[geom] = half_sizes
        model.geom_rbound[geom] = float(np.linalg.norm(half_sizes))
        model.geom_aabb[geom] = (0, 0, 0, *half_sizes)

    def set_all(self, env: int, centres: np.ndarray, half_sizes: np.ndarray) -> None:
        """Env ``env``'s boxes at once, ``[count, 3]`` each (one write per field: an episode's 50 boxes
        cost what one costs); a box left where ``hidden`` puts it waits far below the ground."""
        model, geoms = self._models[env], self.geoms
        model.geom_pos[geoms] = centres
        model.geom_size[geoms] = half_sizes
        model.geom_rbound[geoms] = np.linalg.norm(half_sizes, axis=1)
        model.geom_aabb[geoms, 3:] = half_sizes
        model.geom_aabb[geoms, :3] = 0.0

    def hidden(self) -> tuple[np.ndarray, np.ndarray]:
        """(centres, half-sizes) ``[count, 3]`` of every box out of the way, far below the ground (for
        ``set_all``, once filled with the boxes placed)."""
        return np.tile((0.0, 0.0, HIDDEN_Z), (self.count, 1)), np.full((self.count, 3), 0.1)
