"""The env's MJCF: the unimal as the morphology wrote it, in the world its task builds.

The unimal file is kept whole (its ``<contact>`` excludes included, unlike the original, which
dropped them); the head is put at the task's start pose (on the ground, ``Task.start_pose``),
the XML.* overrides (njmax, nconmax, filterparent, default geom condim and friction) are
applied, sensors for the observation (``obs/*``) are appended after the unimal's own, lights,
textures and the task's camera are added, then the task adds its arena and props
(``Task.build``).
"""

from __future__ import annotations

import mujoco
from lxml import etree

from derl.envs.config import WorldCfg
from derl.envs.mjcf import child, fmt, sub
from derl.envs.tasks import make_task


def _add_visuals(root: etree._Element, worldbody: etree._Element, head: etree._Element, task) -> None:
    visual = child(root, "visual")
    sub(visual, "headlight", ambient="0.4 0.4 0.4", diffuse="0.6 0.6 0.6")
    sub(visual, "quality", shadowsize="2048")
    asset = child(root, "asset")
    sub(asset, "texture", name="grid", type="2d", builtin="checker", rgb1=".2 .3 .4", rgb2=".1 .15 .2",
        width="300", height="300", mark="edge", markrgb=".3 .4 .5")
    sub(asset, "material", name="ground", texture="grid", texrepeat="1 1", texuniform="true",
        reflectance=".1")
    worldbody.insert(0, etree.Element("light", directional="true", pos="0 0 30", dir="0 0 -1",
                                      diffuse=".6 .6 .6", castshadow="false"))
    camera = task.camera
    sub(head if camera.on_head else worldbody, "camera", name="track", mode=camera.mode, pos=camera.pos,
        xyaxes=camera.xyaxes)


def _add_observation_sensors(root: etree._Element, head: etree._Element) -> None:
    """Sensors for the proprioceptive observation, after the unimal's own (whose order is kept):
    each limb tip in the head frame, which MuJoCo fills during the step."""
    sensor = child(root, "sensor")
    for site in head.iter("site"):
        name = site.get("name", "")
        if name.startswith("limb/btm/"):
            sub(sensor, "framepos", name=f"obs/tip/{name[len('limb/btm/'):]}", objtype="site", objname=name,
                reftype="xbody", refname="torso/0")


def head_height(unimal_xml: str | bytes) -> float:
    """The head's height above the ground in a unimal MJCF (its ``torso/0`` z)."""
    return _parse(unimal_xml)[2]


def _parse(unimal_xml: str | bytes) -> tuple[etree._Element, etree._Element, float]:
    if isinstance(unimal_xml, str):
        unimal_xml = unimal_xml.encode()
    try:
        root = etree.fromstring(unimal_xml, etree.XMLParser(remove_comments=True))
    except etree.XMLSyntaxError as err:
        raise ValueError(f"unimal MJCF is not well-formed XML: {err}") from None
    worldbody = root.find("worldbody")
    head = worldbody.find("body[@name='torso/0']") if worldbody is not None else None
    if head is None:
        raise ValueError("unimal MJCF has no worldbody body named torso/0")
    return root, head, float((head.get("pos") or "0 0 0").split()[2])


def build_world(unimal_xml: str | bytes, world: WorldCfg, task) -> str:
    """The env's MJCF text: the unimal in ``task``'s world (see the module docstring)."""
    root, head, height = _parse(unimal_xml)
    worldbody = root.find("worldbody")
    pos, quat = task.start_pose(height)
    head.set("pos", fmt(*pos))
    if quat is not None:
        for key in ("quat", "euler", "axisangle", "xyaxes", "zaxis"):
            head.attrib.pop(key, None)
        head.set("quat", quat)
    size = child(root, "size")
    size.set("njmax", str(world.XML.NJMAX))
    size.set("nconmax", str(world.XML.NCONMAX))
    child(child(root, "option"), "flag").set("filterparent", world.XML.FILTER_PARENT)
    geom_defaults = child(child(root, "default"), "geom")
    geom_defaults.set("condim", str(world.XML.GEOM_CONDIM))
    geom_defaults.set("friction", fmt(*world.XML.GEOM_FRICTION))
    _add_observation_sensors(root, head)
    _add_visuals(root, worldbody, head, task)
    task.build(root, worldbody)
    return etree.tostring(root, pretty_print=True, encoding="unicode")


def build_xml(unimal_xml: str | bytes, world: WorldCfg) -> str:
    """The env's MJCF text for a unimal's MJCF in the world of ``world.ENV.TASK`` (a terrain bank's height
    fields are empty in the text: ``compile_world`` fills them)."""
    return build_world(unimal_xml, world, make_task(world))


def compile_world(unimal_xml: str | bytes, world: WorldCfg, task) -> mujoco.MjModel:
    """The compiled model of ``build_world``, with what the task's arena draws at build written into it
    (a terrain bank's height fields, ``derl.envs.terrain_bank``): simulate this, not the bare text."""
    model = mujoco.MjModel.from_xml_string(build_world(unimal_xml, world, task))
    task.arena.fill_model(model)
    return model
