"""Small lxml helpers for writing MJCF elements."""

from __future__ import annotations

import math

from lxml import etree


def fmt(*values: float) -> str:
    """Numbers as an MJCF attribute: ``fmt(1, 0.5) == "1 0.5"``."""
    return " ".join(f"{v:.6g}" for v in values)


def sub(parent: etree._Element, tag: str, **attrib: str) -> etree._Element:
    """A child element; a trailing ``_`` in an attribute name is dropped (``class_``)."""
    return etree.SubElement(parent, tag, {k.rstrip("_"): v for k, v in attrib.items()})


def child(root: etree._Element, tag: str) -> etree._Element:
    """The first child ``tag`` of ``root``, created when missing."""
    found = root.find(tag)
    return found if found is not None else sub(root, tag)


def y_rotation_quat(degrees: float) -> str:
    """The MJCF quaternion of a rotation by ``degrees`` about +y (independent of compiler angle units)."""
    half = math.radians(degrees) / 2
    return fmt(math.cos(half), 0, math.sin(half), 0)
