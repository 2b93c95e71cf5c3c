"""The official three-link reacher tasks (``reacher-three-easy``, ``reacher-three-hard``),
with their model generated from dm_control's two-link ``reacher.xml``.

The official TD-MPC2 repository (``tdmpc2/envs/tasks/reacher.py`` and
``reacher_three_links.xml``, the same at the paper's commit 5f6fade and at e9f5932) defines
both tasks as dm_control's ``reacher.Reacher`` (target size 0.05 / 0.015, the target drawn
at radius U(0.05, 0.20) and angle U(0, 2 pi), the joints drawn by dm_control's
``randomize_limited_and_rotational_joints``, reward 1 inside the target's radius plus the
finger's, else 0) on a model with three links, a 20 s time limit (1000 control steps of
one 0.02 s MuJoCo step) and the observation ``position`` (3 joint angles, rad),
``to_target`` (2, m: target minus finger, x and y) and ``velocity`` (3, rad/s): 8 values;
3 actions in [-1, 1] (motor gear 0.05). The official task class only restates dm_control's
observation and the official ``Physics`` class has dm_control's two reacher methods, so
dm_control's ``reacher.Reacher`` and ``reacher.Physics`` are used here unchanged.

The model is not shipped. :func:`three_link_model` reads dm_control's installed
``reacher.xml`` (``dm_control.suite.common.read_model``) and replaces its arm (the body
``arm`` and everything in it) and its two motors; the arena, options, defaults, materials,
cameras and the target stay dm_control's. The new arm, in place of the old one so that the
element order (and so every body, geom and joint id) follows dm_control's file:

* three hinge links, each a body with a capsule geom along +x (dm_control's arm geom's
  type, radius and material) and a hinge joint (dm_control's defaults: z axis, damping
  0.01), :data:`LINKS` in order: ``arm0`` / joint ``shoulder0`` (0.09 m, unlimited),
  ``arm1`` / ``shoulder1`` (0.09 m, [-80, 80] degrees), ``hand`` / ``wrist`` (0.09 m,
  [-80, 80] degrees, its capsule 0.1 m long as dm_control's own hand capsule);
* the first link's body where dm_control's ``arm`` body is (0, 0, 0.01); each next body
  at (length of the previous link, 0, 0);
* dm_control's ``finger`` body (the ``hand`` tracking camera and the ``finger`` sphere)
  at the end of the last link;
* one motor per joint, named as the joint (dm_control's motor defaults: gear 0.05,
  control range [-1, 1]).

``tests/test_dmcontrol.py`` checks the compiled model's arrays and seeded episodes of both
tasks bit for bit against ``tests/fixtures/reacher_three.npz``, recorded from the official
files by ``tools/record_reacher_three.py`` (docs/deviations.md E8).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import NamedTuple

_TIME_LIMIT = 20.0            # seconds, dm_control's reacher (1000 control steps of 0.02 s)
_TARGET_SIZE = {"reacher-three-easy": 0.05, "reacher-three-hard": 0.015}   # m, dm_control's big / small


class Link(NamedTuple):
    """One link of the generated arm.

    Attributes:
        body: body (and geom) name.
        joint: hinge joint (and motor) name.
        length: m, where the next body (or the finger) starts along the link's x axis.
        capsule: m, the length of the link's capsule geom from the joint along +x.
        range: degrees, the joint's (lower, upper) limits, or None for an unlimited joint.
    """

    body: str
    joint: str
    length: float
    capsule: float
    range: tuple[float, float] | None


#: The three links, from the base out (the official three-link reacher's names and sizes).
LINKS: tuple[Link, ...] = (
    Link("arm0", "shoulder0", 0.09, 0.09, None),
    Link("arm1", "shoulder1", 0.09, 0.09, (-80.0, 80.0)),
    Link("hand", "wrist", 0.09, 0.1, (-80.0, 80.0)),
)


def _num(x: float) -> str:
    return repr(float(x))


def _one(parent: ET.Element, tag: str, name: str) -> ET.Element:
    found = [e for e in parent.findall(tag) if e.get("name") == name]
    if len(found) != 1:
        raise ValueError(f"dm_control reacher.xml: expected one <{tag} name={name!r}> under "
                         f"<{parent.tag}>, found {len(found)}")
    return found[0]


def three_link_model(xml: str | bytes, links: tuple[Link, ...] = LINKS) -> str:
    """dm_control's reacher model ``xml`` with its arm replaced by the chain ``links``.

    Args:
        xml: the text of dm_control's ``reacher.xml`` (``common.read_model("reacher.xml")``).
        links: the links from the base out (:data:`LINKS` by default).
    Returns:
        the model's XML text (its ``<include>`` files are dm_control's ``common.ASSETS``).
    Raises:
        ValueError: the file does not have dm_control's two-link arm (a body ``arm`` with a
            geom ``arm`` and joint ``shoulder``, holding ``hand`` which holds ``finger``)
            and its two motors: a dm_control version whose file changed.
    """
    root = ET.fromstring(xml)
    world = root.find("worldbody")
    actuator = root.find("actuator")
    if world is None or actuator is None:
        raise ValueError("dm_control reacher.xml: no <worldbody> or <actuator>")
    arm = _one(world, "body", "arm")
    arm_geom = _one(arm, "geom", "arm")
    _one(arm, "joint", "shoulder")
    finger = _one(_one(arm, "body", "hand"), "body", "finger")
    motors = actuator.findall("motor")
    if sorted(m.get("joint") for m in motors) != ["shoulder", "wrist"] or len(actuator) != 2:
        raise ValueError("dm_control reacher.xml: expected the two motors 'shoulder' and 'wrist'")

    geom_attrs = {k: v for k, v in arm_geom.attrib.items() if k not in ("name", "fromto")}
    chain = None
    parent = None
    pos = arm.get("pos")
    for link in links:
        body = ET.Element("body", {"name": link.body, "pos": pos})
        ET.SubElement(body, "geom", {"name": link.body, **geom_attrs,
                                     "fromto": f"0 0 0 {_num(link.capsule)} 0 0"})
        joint = {"name": link.joint}
        if link.range is not None:
            joint.update(limited="true", range=f"{_num(link.range[0])} {_num(link.range[1])}")
        ET.SubElement(body, "joint", joint)
        if parent is None:
            chain = body
        else:
            parent.append(body)
        parent, pos = body, f"{_num(link.length)} 0 0"
    finger.set("pos", pos)
    parent.append(finger)

    index = list(world).index(arm)
    world.remove(arm)
    world.insert(index, chain)
    for m in motors:
        actuator.remove(m)
    for link in links:
        ET.SubElement(actuator, "motor", {"name": link.joint, "joint": link.joint})
    return ET.tostring(root, encoding="unicode")


def load_reacher_three(name: str, random=None):
    """The ``dm_control.rl.control.Environment`` of ``reacher-three-easy`` or
    ``reacher-three-hard``: dm_control's ``reacher.Reacher`` (target size 0.05 / 0.015 m)
    on :func:`three_link_model`, with a 20 s time limit.

    Args:
        name: ``"reacher-three-easy"`` or ``"reacher-three-hard"``.
        random: the task's random state (an int seed, a ``numpy.random.RandomState`` or None).
    Raises:
        ValueError: another name.
    """
    from dm_control.rl import control
    from dm_control.suite import common, reacher

    if name not in _TARGET_SIZE:
        raise ValueError(f"not a three-link reacher task: {name!r}; these are {list(_TARGET_SIZE)}")
    physics = reacher.Physics.from_xml_string(three_link_model(common.read_model("reacher.xml")), common.ASSETS)
    task = reacher.Reacher(target_size=_TARGET_SIZE[name], random=random)
    return control.Environment(physics, task, time_limit=_TIME_LIMIT)
