"""Genome -> MuJoCo MJCF text (lxml), and contacts at the reference pose.

The model has one body ``torso/0`` (the head, free joint ``root``) holding the
limbs; names carry limb ids. No floor, lights or cameras: the env adds them.
Contacts between limbs that overlap by design (the two limbs of a pair grown on
one site) are written as ``<exclude>`` pairs, which the env must keep.
"""

from __future__ import annotations

from collections.abc import Iterable

import mujoco
import numpy as np
from lxml import etree

from derl.morphology.config import MjcfOptions
from derl.morphology.genome import Genome
from derl.morphology.geometry import PlacedLimb, head_height, place_limbs

TIMESTEP = 0.005
TOUCH_MARGIN = 0.01
SITE_SIZE = 0.01
HIDDEN_GROUP = "3"


def fmt(*values: float) -> str:
    """Space-separated numbers, 8 significant digits, no negative zero."""
    return " ".join(format(round(float(v), 8) + 0.0, ".8g") for v in values)


def to_mjcf(genome: Genome, options: MjcfOptions) -> str:
    """The complete MJCF of ``genome``; loads alone with ``mujoco.MjModel.from_xml_string``."""
    limbs = place_limbs(genome)
    root = _build(genome, options, limbs, head_height(genome, limbs, options.BODY.FLOOR_OFFSET))
    pairs = contact_pairs(_to_text(root))
    contact = root.find("contact")
    for body1, body2 in pairs:
        etree.SubElement(contact, "exclude", body1=body1, body2=body2)
    return _to_text(root)


def contact_pairs(xml: str) -> list[tuple[str, str]]:
    """Body-name pairs in contact at the reference pose (parent-child pairs filtered)."""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    bodies = np.sort(model.geom_bodyid[data.contact.geom[: data.ncon]], axis=1)
    pairs = sorted({(int(a), int(b)) for a, b in bodies})
    return [tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in pair) for pair in pairs]


def unexcluded_xml(genome: Genome, options: MjcfOptions) -> str:
    """MJCF without ``<exclude>`` pairs (for collision checks while designing)."""
    limbs = place_limbs(genome)
    return _to_text(_build(genome, options, limbs, 0.0))


def _to_text(root: etree._Element) -> str:
    return etree.tostring(root, pretty_print=True, encoding="unicode")


def _build(genome: Genome, options: MjcfOptions, limbs: list[PlacedLimb], height: float) -> etree._Element:
    root = etree.Element("mujoco", model="unimal")
    etree.SubElement(root, "compiler", angle="degree")
    etree.SubElement(root, "option", timestep=fmt(TIMESTEP))
    _add_defaults(root, options)
    worldbody = etree.SubElement(root, "worldbody")
    head = _add_head(worldbody, genome, height)
    bodies: dict[int | None, etree._Element] = {None: head}  # None: the head
    for limb in limbs:
        bodies[limb.id] = _add_limb(bodies[limb.parent], limb, genome.limb_density)
    etree.SubElement(root, "contact")
    gears = {joint.name: joint.gear for limb in limbs for joint in limb.joints}
    _add_motors(root, worldbody.iter("joint"), gears)
    _add_sensors(root, worldbody.iter("body"))
    return root


def _add_defaults(root: etree._Element, options: MjcfOptions) -> None:
    default = etree.SubElement(root, "default")
    etree.SubElement(default, "joint", limited="true", damping="1", stiffness="1", armature="1",
                     solimplimit="0 0.99 0.01")
    etree.SubElement(default, "motor", ctrlrange="-1 1", ctrllimited="true")
    etree.SubElement(default, "geom", condim=str(options.XML.GEOM_CONDIM), friction=fmt(*options.XML.GEOM_FRICTION))
    etree.SubElement(default, "site", size=fmt(SITE_SIZE), group=HIDDEN_GROUP, rgba="0 0 0 0")


def _add_head(worldbody: etree._Element, genome: Genome, height: float) -> etree._Element:
    r = genome.head_radius
    head = etree.SubElement(worldbody, "body", name="torso/0", pos=fmt(0, 0, height))
    etree.SubElement(head, "freejoint", name="root")
    etree.SubElement(head, "geom", name="torso/0", type="sphere", size=fmt(r), density=fmt(genome.head_density))
    etree.SubElement(head, "site", name="root", pos=fmt(0, 0, 0))
    etree.SubElement(head, "site", name="torso/btm_pos/0", pos=fmt(0, 0, -r))
    etree.SubElement(head, "site", name="torso/touch/0", type="sphere", size=fmt(r + TOUCH_MARGIN))
    return head


def _add_limb(parent: etree._Element, limb: PlacedLimb, density: float) -> etree._Element:
    """A limb body: capsule, hinges anchored at -r*u, growth/tip/touch sites."""
    i, r = limb.id, limb.radius
    body = etree.SubElement(parent, "body", name=f"limb/{i}", pos=fmt(*limb.pos))
    fromto = fmt(0, 0, 0, *limb.segment_end)
    for joint in limb.joints:
        etree.SubElement(body, "joint", name=joint.name, type="hinge", pos=fmt(*(-r * limb.direction)),
                         axis=fmt(*joint.axis), range=fmt(*joint.range))
    etree.SubElement(body, "geom", name=f"limb/{i}", type="capsule", fromto=fromto, size=fmt(r),
                     density=fmt(density))
    for site in ("mid", "btm", "btm_pos"):
        etree.SubElement(body, "site", name=f"limb/{site}/{i}", pos=fmt(*limb.site(site)))
    etree.SubElement(body, "site", name=f"limb/touch/{i}", type="capsule", fromto=fromto,
                     size=fmt(r + TOUCH_MARGIN))
    return body


def _add_motors(root: etree._Element, joints: Iterable[etree._Element], gears: dict[str, float]) -> None:
    """One motor per hinge, in joint document order, named like its joint."""
    actuator = etree.SubElement(root, "actuator")
    for joint in joints:
        name = joint.get("name")
        etree.SubElement(actuator, "motor", name=name, joint=name, gear=fmt(gears[name]))


def _add_sensors(root: etree._Element, bodies: Iterable[etree._Element]) -> None:
    sensor = etree.SubElement(root, "sensor")
    etree.SubElement(sensor, "accelerometer", name="torso_accel", site="root")
    etree.SubElement(sensor, "gyro", name="torso_gyro", site="root")
    etree.SubElement(sensor, "velocimeter", name="torso_vel", site="root")
    etree.SubElement(sensor, "subtreeangmom", name="unimal_am", body="torso/0")
    for body in bodies:
        name = body.get("name")
        touch_site = "torso/touch/0" if name == "torso/0" else name.replace("limb/", "limb/touch/")
        etree.SubElement(sensor, "touch", name=touch_site, site=touch_site)

