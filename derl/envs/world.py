"""The env's MJCF: the unimal as the morphology wrote it, plus floor or terrain, walls and objects.

The unimal file is kept whole (its ``<contact>`` excludes included, unlike the original, which
dropped them); the head is lifted onto the ground (``TERRAIN.SIZE[2]``), the XML.* overrides
(njmax, nconmax, filterparent, default geom condim and friction) are applied and the world
around it is added. The
structure is fixed for a config: terrain that changes per episode lives in one height field
spanning the corridor, whose data the env re-fills in place at each reset.

Modules (``ENV.MODULES``): ``Agent`` (required), ``Floor`` (one box, half-sizes SIZE, top at
``SIZE[2]``) or ``Terrain`` (the corridor of ``derl.envs.terrain``: a floor box, plus a height field
for the obstacles when TERRAIN.TYPES has any, and boundary walls if TERRAIN.BOUNDARY_WALLS), ``Objects``
(a free box with six face sites and a goal site). Sensors for the observation (``obs/*``) are
appended after the unimal's own.
"""

from __future__ import annotations

from lxml import etree

from derl.envs.terrain import WALL_HALF_THICKNESS, WALL_HEIGHT, Corridor, max_height, obstacles_fit

MODULES = ("Agent", "Floor", "Terrain", "Objects")
HFIELD_BASE_THICKNESS = 0.1
# The height field lies this far below the floor box where the terrain is flat, so that bodies
# on flat ground touch only the box (cheap contacts); obstacle vertices are raised by as much.
HFIELD_SINK = 0.05
# Face centres of a unit cube, scaled by the box half-side.
BOX_FACES = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))


def check_modules(modules) -> tuple[str, ...]:
    """Validates ENV.MODULES; returns them as a tuple."""
    modules = tuple(modules)
    unknown = sorted(set(modules) - set(MODULES))
    if unknown:
        raise ValueError(f"unknown ENV.MODULES {unknown}; known: {list(MODULES)}")
    if "Agent" not in modules:
        raise ValueError("ENV.MODULES must include Agent")
    if ("Floor" in modules) == ("Terrain" in modules):
        raise ValueError("ENV.MODULES needs exactly one of Floor and Terrain")
    return modules


def uses_hfield(cfg) -> bool:
    return obstacles_fit(cfg)


def _fmt(*values: float) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def _sub(parent: etree._Element, tag: str, **attrib: str) -> etree._Element:
    return etree.SubElement(parent, tag, {k.rstrip("_"): v for k, v in attrib.items()})


def _child(root: etree._Element, tag: str) -> etree._Element:
    found = root.find(tag)
    return found if found is not None else _sub(root, tag)


def _add_visuals(root: etree._Element, worldbody: etree._Element, head: etree._Element) -> None:
    visual = _child(root, "visual")
    _sub(visual, "headlight", ambient="0.4 0.4 0.4", diffuse="0.6 0.6 0.6")
    _sub(visual, "quality", shadowsize="2048")
    asset = _child(root, "asset")
    _sub(asset, "texture", name="grid", type="2d", builtin="checker", rgb1=".2 .3 .4", rgb2=".1 .15 .2",
         width="300", height="300", mark="edge", markrgb=".3 .4 .5")
    _sub(asset, "material", name="ground", texture="grid", texrepeat="1 1", texuniform="true",
         reflectance=".1")
    worldbody.insert(0, etree.Element("light", directional="true", pos="0 0 30", dir="0 0 -1",
                                      diffuse=".6 .6 .6", castshadow="false"))
    _sub(head, "camera", name="track", mode="trackcom", pos="0 -4 1.5", xyaxes="1 0 0 0 0.35 1")


def _add_ground(root: etree._Element, worldbody: etree._Element, cfg) -> None:
    size = cfg.TERRAIN.SIZE
    if "Floor" in cfg.ENV.MODULES:
        _sub(worldbody, "geom", name="floor", type="box", pos="0 0 0", size=_fmt(*size), material="ground")
        return
    corridor = Corridor.from_cfg(cfg)
    half_len = (corridor.x_max - corridor.x_min) / 2
    centre = (corridor.x_max + corridor.x_min) / 2
    _sub(worldbody, "geom", name="floor", type="box", pos=_fmt(centre, 0, 0),
         size=_fmt(half_len, corridor.half_width, corridor.ground_z), material="ground")
    if uses_hfield(cfg):
        rows, cols = corridor.shape
        _sub(_child(root, "asset"), "hfield", name="terrain", nrow=str(rows), ncol=str(cols),
             size=_fmt(half_len, corridor.half_width, max_height(cfg) + HFIELD_SINK, HFIELD_BASE_THICKNESS))
        _sub(worldbody, "geom", name="terrain", type="hfield", hfield="terrain",
             pos=_fmt(centre, 0, corridor.ground_z - HFIELD_SINK), material="ground")
    if corridor.walls:
        t, h, z = WALL_HALF_THICKNESS, WALL_HEIGHT, corridor.ground_z
        width = corridor.half_width
        walls = {
            "wall/back": (_fmt(corridor.x_min - t, 0, z), _fmt(t, width + 2 * t, h)),
            "wall/front": (_fmt(corridor.x_max + t, 0, z), _fmt(t, width + 2 * t, h)),
            "wall/left": (_fmt(centre, width + t, z), _fmt(half_len, t, h)),
            "wall/right": (_fmt(centre, -width - t, z), _fmt(half_len, t, h)),
        }
        for name, (pos, half_sizes) in walls.items():
            _sub(worldbody, "geom", name=name, type="box", pos=pos, size=half_sizes, rgba=".5 .5 .5 .3")


def _add_observation_sensors(root: etree._Element, head: etree._Element) -> None:
    """Sensors for the proprioceptive observation, after the unimal's own (whose order is kept).

    Hinge angles and velocities, the head's linear velocity (world frame, as the free joint's
    qvel; its angular part is the unimal's gyro) and each limb tip in the head frame. MuJoCo fills
    them during the step, so the env gathers its observation with one ``take``.
    """
    sensor = _child(root, "sensor")
    hinges = [j.get("name") for j in head.iter("joint") if j.get("type", "hinge") == "hinge"]
    for name in hinges:
        _sub(sensor, "jointpos", name=f"obs/pos/{name}", joint=name)
    _sub(sensor, "framelinvel", name="obs/linvel", objtype="xbody", objname="torso/0")
    for name in hinges:
        _sub(sensor, "jointvel", name=f"obs/vel/{name}", joint=name)
    for site in head.iter("site"):
        name = site.get("name", "")
        if name.startswith("limb/btm/"):
            _sub(sensor, "framepos", name=f"obs/tip/{name[len('limb/btm/'):]}", objtype="site", objname=name,
                 reftype="xbody", refname="torso/0")


def _add_objects(worldbody: etree._Element, cfg) -> None:
    side = float(cfg.OBJECT.BOX_SIDE)
    if cfg.OBJECT.TYPE != "box":
        raise ValueError(f"OBJECT.TYPE {cfg.OBJECT.TYPE!r} is not supported; use box")
    box = _sub(worldbody, "body", name="box", pos=_fmt(0, 0, 10))
    _sub(box, "freejoint", name="box")
    _sub(box, "geom", name="box", type="box", size=_fmt(side, side, side), mass=str(cfg.OBJECT.BOX_MASS),
         rgba=".8 .5 .2 1")
    for k, face in enumerate(BOX_FACES):
        _sub(box, "site", name=f"box/face/{k}", pos=_fmt(*(side * c for c in face)), size="0.02")
    _sub(worldbody, "site", name="goal", pos=_fmt(0, 0, 10), type="sphere", size="0.2", rgba="1 0 0 .5")


def build_xml(unimal_xml: str | bytes, cfg) -> str:
    """The env's MJCF text for a unimal's MJCF and the config (see the module docstring)."""
    check_modules(cfg.ENV.MODULES)
    if isinstance(unimal_xml, str):
        unimal_xml = unimal_xml.encode()
    root = etree.fromstring(unimal_xml, etree.XMLParser(remove_comments=True))
    worldbody = root.find("worldbody")
    head = worldbody.find("body[@name='torso/0']") if worldbody is not None else None
    if head is None:
        raise ValueError("unimal MJCF has no worldbody body named torso/0")
    head_height = float((head.get("pos") or "0 0 0").split()[2])
    head.set("pos", _fmt(0, 0, head_height + cfg.TERRAIN.SIZE[2]))
    size = _child(root, "size")
    size.set("njmax", str(cfg.XML.NJMAX))
    size.set("nconmax", str(cfg.XML.NCONMAX))
    _child(_child(root, "option"), "flag").set("filterparent", cfg.XML.FILTER_PARENT)
    geom_defaults = _child(_child(root, "default"), "geom")
    geom_defaults.set("condim", str(cfg.XML.GEOM_CONDIM))
    geom_defaults.set("friction", _fmt(*cfg.XML.GEOM_FRICTION))
    _add_observation_sensors(root, head)
    _add_visuals(root, worldbody, head)
    _add_ground(root, worldbody, cfg)
    if "Objects" in cfg.ENV.MODULES:
        _add_objects(worldbody, cfg)
    return etree.tostring(root, pretty_print=True, encoding="unicode")
