"""Rule checks on compiled UNIMAL models, shared by the morphology tests."""

import mujoco
import numpy as np

FLOOR = '<worldbody><geom name="floor" type="plane" size="50 50 0.1"/></worldbody>'


def with_floor(xml: str) -> str:
    return xml.replace("</mujoco>", FLOOR + "\n</mujoco>")


def simulate_on_floor(xml: str, steps: int = 500) -> None:
    """Zero torques on a floor: no NaN, no warnings, no geom below the floor by a limb radius."""
    model = mujoco.MjModel.from_xml_string(with_floor(xml))
    data = mujoco.MjData(model)
    limb_radius = 0.05
    for _ in range(steps):
        mujoco.mj_step(model, data)
    assert np.all(np.isfinite(data.qpos)) and np.all(np.isfinite(data.qvel))
    assert sum(w.number for w in data.warning) == 0, [w.number for w in data.warning]
    for g in range(1, model.ngeom):  # geom 0 is the floor
        radius = model.geom_size[g, 0]
        half = model.geom_size[g, 1] if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
        ends_z = data.geom_xpos[g, 2] + np.array([-1, 1]) * half * data.geom_xmat[g, 8]
        assert ends_z.min() - radius > -limb_radius, model.geom(g).name


def assert_mirror_symmetric(xml: str) -> None:
    """Every limb off the xz plane has a twin with the same size, mirrored position and axes."""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    flip = np.array([1.0, -1.0, 1.0])
    limbs = [b for b in range(model.nbody) if model.body(b).name.startswith("limb/")]
    for b in limbs:
        if abs(data.xpos[b, 1]) < 1e-12 and abs(_geom_end(model, data, b)[1]) < 1e-12:
            continue
        twins = [
            t for t in limbs
            if np.allclose(data.xpos[t], data.xpos[b] * flip, atol=1e-9)
            and np.allclose(_geom_end(model, data, t), _geom_end(model, data, b) * flip, atol=1e-9)
            and np.allclose(model.geom_size[model.body_geomadr[t]], model.geom_size[model.body_geomadr[b]])
            and np.allclose(_joint_axes(model, data, t), -_joint_axes(model, data, b) * flip, atol=1e-9)
        ]
        assert twins, f"{model.body(b).name} has no mirror image"


def _geom_end(model, data, body):
    g = model.body_geomadr[body]
    return data.geom_xpos[g] + model.geom_size[g, 1] * data.geom_xmat[g].reshape(3, 3)[:, 2]


def _joint_axes(model, data, body):
    start, count = model.body_jntadr[body], model.body_jntnum[body]
    return data.xaxis[start:start + count]
