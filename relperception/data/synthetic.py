# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Synthetic indoor scenes with exact ground truth: RGB, metric depth, labels and poses.

A seeded generator builds a closed room (floor, four walls, ceiling) with boxes standing on the
floor and floor-to-ceiling pillars. Every planar face carries its own procedural texture
(multi-octave value noise, blobs, rectangles, ellipses, stripes, small checker patches) in its own
palette, sampled in surface coordinates (metres) from a mip-mapped texture atlas with trilinear
filtering, so the texture moves rigidly with the surface and does not flicker. Each face has a
constant Lambert shade baked into its texture (brightness constancy holds exactly up to
resampling). Rendering is vectorised ray casting: one analytic ray-plane test for the room and a
slab test per box inside the box's projected bounding rectangle.

Conventions
-----------
* World frame: z up; origin at the centre of the floor; the room spans
  ``[-Lx/2, Lx/2] x [-Ly/2, Ly/2] x [0, Lz]`` metres (``SyntheticScene.room_size``).
* Camera frame: REP 103 optical (z forward, x right, y down); ``T_world_cam`` maps camera
  coordinates to world coordinates. Intrinsics: square pixels, principal point at the image centre
  (pixel centres at integer coordinates), no distortion; ``fov_deg`` is the horizontal field of
  view.
* Depth: float32 metres along the optical axis (z), NaN where a ray hits nothing (which cannot
  happen for a camera inside the closed room).
* Labels: uint8 indices into ``CLASS_NAMES``; ``VOID_LABEL`` (255) where nothing is hit.
* Trajectory: a smooth closed loop around the room centre (never closer than about 1.6 m to a wall
  or 0.9 m to a box), driven at about 0.4-1.0 m/s (slower in turns, yaw rate below 0.33 rad/s),
  with small lateral/vertical sway and small roll/pitch; at 10 fps that is 0.04-0.08 m per frame.
"""

from __future__ import annotations

import collections.abc
import colorsys
import dataclasses
import logging
import math

import cv2
import numpy as np

from relperception.core_types import Camera
from relperception.transforms import check_transform, make_transform
from relperception.validation import check_frame_rate

logger = logging.getLogger(__name__)

CLASS_NAMES: tuple[str, ...] = ('floor', 'wall', 'ceiling', 'box', 'pillar')
"""Label id -> class name of the synthetic scenes."""

VOID_LABEL = 255
"""Label of pixels whose ray hits nothing."""

DEFAULT_SEQUENCE_FRAMES = 100
"""Frames of ``iter_sequence`` and ``write_synthetic_bag`` given neither a number nor poses."""

_FLOOR, _WALL, _CEILING, _BOX, _PILLAR = range(len(CLASS_NAMES))

# Rotation from the camera optical frame (z forward, x right, y down) to the REP 103 body frame
# (x forward, y left, z up); its columns are the camera axes in body coordinates.
_R_BODY_CAM = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])

_LIGHT_DIR = np.array([0.45, -0.3, 0.84]) / np.linalg.norm([0.45, -0.3, 0.84])
_ATLAS_WIDTH = 8192
_ATLAS_PAD = 2
_MAX_LEVELS = 8
_LOD_BIAS = 0.25

# Per class: (texel size m, value range, saturation range, shape density per m^2).
_STYLE = {
    _FLOOR: (0.010, (0.12, 0.80), (0.15, 0.55), 22.0),
    _WALL: (0.010, (0.20, 0.95), (0.05, 0.50), 22.0),
    _CEILING: (0.010, (0.35, 1.00), (0.00, 0.30), 18.0),
    _BOX: (0.006, (0.08, 0.95), (0.35, 0.95), 40.0),
    _PILLAR: (0.006, (0.15, 0.90), (0.00, 0.40), 40.0),
}


@dataclasses.dataclass
class SyntheticFrame:
    """One rendered frame with its exact ground truth.

    Attributes:
        stamp_ns: integer nanoseconds, ``start_time_ns + i * 1e9 / fps``.
        rgb: (H, W, 3) uint8 RGB image.
        depth: (H, W) float32 depth in metres along the optical axis, NaN where nothing is hit.
        labels: (H, W) uint8 class ids (indices into ``CLASS_NAMES``, ``VOID_LABEL`` if none).
        T_world_cam: (4, 4) float64 pose of the camera optical frame in the world (z up).
    """

    stamp_ns: int
    rgb: np.ndarray
    depth: np.ndarray
    labels: np.ndarray
    T_world_cam: np.ndarray


@dataclasses.dataclass(frozen=True)
class Box:
    """An upright box (rotated about world z) standing on the floor.

    Attributes:
        centre: (3,) float64 centre in world coordinates, metres.
        half_size: (3,) float64 half extents along the box's own x, y, z axes, metres.
        yaw: rotation about world z in radians.
        label: class id (``'box'`` or ``'pillar'``).
    """

    centre: np.ndarray
    half_size: np.ndarray
    yaw: float
    label: int

    @property
    def R_world_box(self) -> np.ndarray:
        """(3, 3) float64 rotation from box coordinates to world coordinates."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def corners(self) -> np.ndarray:
        """Return the (8, 3) float64 world coordinates of the box corners."""
        signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
        return (signs * self.half_size) @ self.R_world_box.T + self.centre

    def footprint_distance(self, xy: np.ndarray) -> np.ndarray:
        """Return the (N,) distance in metres from points ``xy`` (N, 2) to the box footprint."""
        local = (xy - self.centre[:2]) @ self.R_world_box[:2, :2]
        outside = np.maximum(np.abs(local) - self.half_size[:2], 0.0)
        return np.hypot(outside[:, 0], outside[:, 1])


# ----------------------------------------------------------------------------------------------
# Procedural textures
# ----------------------------------------------------------------------------------------------

def _palette(rng: np.random.Generator, label: int, count: int = 6) -> np.ndarray:
    """Return (count, 3) float32 RGB colours in [0, 255] spanning a wide range of luminance."""
    _, (v_lo, v_hi), (s_lo, s_hi), _ = _STYLE[label]
    hue = rng.random()
    values = np.linspace(v_lo, v_hi, count) + rng.uniform(-0.05, 0.05, count)
    rng.shuffle(values)
    colours = []
    for i, value in enumerate(values):
        h = (hue + (0.5 if i == count - 1 else rng.uniform(-0.12, 0.12))) % 1.0
        s = rng.uniform(s_lo, s_hi)
        colours.append(colorsys.hsv_to_rgb(h, s, float(np.clip(value, 0.02, 1.0))))
    return np.asarray(colours, np.float32) * 255.0


def _value_noise(rng: np.random.Generator, h: int, w: int, cell: float) -> np.ndarray:
    """Return (h, w) float32 smooth noise in about [0, 1] with feature size ``cell`` texels."""
    cell = max(float(cell), 1.0)
    gh, gw = math.ceil(h / cell) + 3, math.ceil(w / cell) + 3
    grid = rng.random((gh, gw), dtype=np.float32)
    up = cv2.resize(grid, (max(int(gw * cell), w + 1), max(int(gh * cell), h + 1)),
                    interpolation=cv2.INTER_CUBIC)
    oy = int(rng.integers(0, max(1, up.shape[0] - h)))
    ox = int(rng.integers(0, max(1, up.shape[1] - w)))
    return up[oy:oy + h, ox:ox + w]


def _colour(rng: np.random.Generator, palette: np.ndarray) -> tuple[float, float, float]:
    c = palette[rng.integers(len(palette))] * rng.uniform(0.75, 1.2)
    return tuple(float(v) for v in np.clip(c, 0, 255))


def _draw_shapes(rng: np.random.Generator, img: np.ndarray, texel: float,
                 palette: np.ndarray, count: int) -> None:
    """Draw ``count`` random anti-aliased shapes (sizes 3-45 cm) into ``img`` in place."""
    h, w = img.shape[:2]
    shift = 4
    one = 1 << shift
    sizes = np.exp(rng.uniform(math.log(0.03), math.log(0.45), count)) / texel
    kinds = rng.choice(6, size=count, p=[0.32, 0.2, 0.14, 0.12, 0.1, 0.12])
    centres = rng.uniform(0, 1, (count, 2)) * (w, h)
    angles = rng.uniform(0, math.pi, count)
    aspects = rng.uniform(0.25, 1.0, count)
    for size, kind, (cx, cy), angle, aspect in zip(sizes, kinds, centres, angles, aspects):
        ca, sa = math.cos(angle), math.sin(angle)
        ax_u = np.array([ca, sa]) * size / 2
        ax_v = np.array([-sa, ca]) * size * aspect / 2
        centre = np.array([cx, cy])
        if kind == 0:  # rotated rectangle
            pts = np.array([centre - ax_u - ax_v, centre + ax_u - ax_v,
                            centre + ax_u + ax_v, centre - ax_u + ax_v])
            cv2.fillPoly(img, [np.round(pts * one).astype(np.int32)], _colour(rng, palette),
                         cv2.LINE_AA, shift)
        elif kind == 1:  # ellipse
            cv2.ellipse(img, (round(cx * one), round(cy * one)),
                        (max(round(size / 2 * one), one),
                         max(round(size * aspect / 2 * one), one)),
                        math.degrees(angle), 0, 360, _colour(rng, palette), -1, cv2.LINE_AA,
                        shift)
        elif kind == 2:  # triangle
            pts = centre + rng.uniform(-0.5, 0.5, (3, 2)) * size
            cv2.fillPoly(img, [np.round(pts * one).astype(np.int32)], _colour(rng, palette),
                         cv2.LINE_AA, shift)
        elif kind == 3:  # thick line segment
            p0, p1 = centre - ax_u, centre + ax_u
            cv2.line(img, tuple(np.round(p0 * one).astype(int)),
                     tuple(np.round(p1 * one).astype(int)),
                     _colour(rng, palette), max(2, int(size * aspect * 0.2)), cv2.LINE_AA, shift)
        elif kind == 4:  # small checker patch (few cells, so not repetitive at large)
            n = int(rng.integers(2, 5))
            c0, c1 = _colour(rng, palette), _colour(rng, palette)
            cell_u, cell_v = 2 * ax_u / n, 2 * ax_v / n
            origin = centre - ax_u - ax_v
            for i in range(n):
                for j in range(n):
                    q = origin + i * cell_u + j * cell_v
                    pts = np.array([q, q + cell_u, q + cell_u + cell_v, q + cell_v])
                    cv2.fillPoly(img, [np.round(pts * one).astype(np.int32)],
                                 c0 if (i + j) % 2 else c1, cv2.LINE_AA, shift)
        else:  # a few parallel stripes of random widths
            n = int(rng.integers(2, 5))
            colour = _colour(rng, palette)
            offsets = np.sort(rng.uniform(-1, 1, n))
            thickness = max(2, int(size * 0.06))
            for off in offsets:
                q = centre + off * ax_v
                cv2.line(img, tuple(np.round((q - ax_u) * one).astype(int)),
                         tuple(np.round((q + ax_u) * one).astype(int)), colour, thickness,
                         cv2.LINE_AA, shift)


def _make_texture(rng: np.random.Generator, width_m: float, height_m: float, texel: float,
                  palette: np.ndarray, density: float, shade: float) -> np.ndarray:
    """Return an (h, w, 3) uint8 texture covering ``width_m`` x ``height_m`` metres."""
    w = math.ceil(width_m / texel) + 1
    h = math.ceil(height_m / texel) + 1
    noise = np.zeros((h, w), np.float32)
    for cell_m, amplitude in ((0.8, 1.0), (0.3, 0.7), (0.1, 0.45), (0.035, 0.25)):
        noise += amplitude * _value_noise(rng, h, w, cell_m / texel)
    lo, hi = np.percentile(noise[::4, ::4], (2, 98))
    noise = np.clip((noise - lo) / max(hi - lo, 1e-6), 0.0, 1.0)
    # Colour ramp through three palette colours.
    ramp = palette[rng.choice(len(palette), 3, replace=False)]
    ramp = ramp[np.argsort(ramp.sum(axis=1))]
    xs = np.array([0.0, 0.5, 1.0], np.float32)
    img = np.stack([np.interp(noise, xs, ramp[:, c]).astype(np.float32) for c in range(3)], -1)
    # Blobs: thresholded mid-scale noise painted in another colour (curved, corner-rich edges).
    for _ in range(2):
        cell = rng.uniform(0.08, 0.25) / texel
        blob = _value_noise(rng, h, w, cell)
        # The noise changes by about 1 / cell per texel: a slope of ``cell`` gives ~1-texel edges.
        alpha = np.clip((blob - rng.uniform(0.6, 0.7)) * cell, 0.0, 1.0)
        img += alpha[..., None] * (np.asarray(_colour(rng, palette), np.float32) - img)
    img = np.clip(img, 0, 255).astype(np.uint8)
    area = width_m * height_m
    _draw_shapes(rng, img, texel, palette, round(area * density) + 3)
    grain = rng.standard_normal((h, w), dtype=np.float32) * 4.0
    out = (img.astype(np.float32) + grain[..., None]) * shade
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# Trajectory: a perturbed ellipse driven with curvature-limited speed
# ----------------------------------------------------------------------------------------------

#: Period of the slow speed modulation of ``SyntheticScene.trajectory(speed_ratio=...)``.
_SPEED_PERIOD_S = 20.0


class _LoopPath:
    """A closed, smooth planar loop parameterised by arc length (dense tables)."""

    def __init__(self, rng: np.random.Generator, a: float, b: float, centre: np.ndarray,
                 samples: int = 4096):
        """Sample a perturbed ellipse with semi-axes ``a``, ``b`` metres around ``centre`` (2,)."""
        phi = np.linspace(0.0, 2 * math.pi, samples, endpoint=False)
        radius = np.ones_like(phi)
        for k in (2, 3):
            radius += rng.uniform(-0.05, 0.05) * np.cos(k * phi + rng.uniform(0, 2 * math.pi))
        if rng.random() < 0.5:
            phi = -phi
        xy = np.stack([a * radius * np.cos(phi), b * radius * np.sin(phi)], -1) + centre
        start = int(rng.integers(samples))
        xy = np.roll(xy, -start, axis=0)
        seg = np.linalg.norm(np.diff(np.vstack([xy, xy[:1]]), axis=0), axis=1)
        self.perimeter = float(seg.sum())
        self.s = np.concatenate([[0.0], np.cumsum(seg)])          # (samples + 1,)
        self.xy = np.vstack([xy, xy[:1]])                          # (samples + 1, 2)
        tangent = np.gradient(np.vstack([xy[-2:], xy, xy[:2]]), axis=0)[2:-2]
        heading = np.unwrap(np.arctan2(tangent[:, 1], tangent[:, 0]))
        self.turn = float(np.round((heading[-1] - heading[0]) / (2 * math.pi)) * 2 * math.pi)
        self.heading = np.concatenate([heading, [heading[0] + self.turn]])
        dh = np.gradient(self.heading[:-1]) / np.maximum(seg, 1e-9)
        curvature = np.abs(dh)
        self.curvature = np.concatenate([curvature, curvature[:1]])

    def _wrap(self, s):
        loops = np.floor(np.asarray(s) / self.perimeter)
        return np.asarray(s) - loops * self.perimeter, loops

    def point(self, s) -> tuple[np.ndarray, np.ndarray]:
        """Return xy (N, 2) and heading (N,) radians at arc lengths ``s`` (N,)."""
        local, loops = self._wrap(s)
        x = np.interp(local, self.s, self.xy[:, 0])
        y = np.interp(local, self.s, self.xy[:, 1])
        heading = np.interp(local, self.s, self.heading) + loops * self.turn
        return np.stack([x, y], -1), heading

    def kappa(self, s: float) -> float:
        local, _ = self._wrap(s)
        return float(np.interp(local, self.s, self.curvature))


def _sines(rng: np.random.Generator, count: int, period_range: tuple[float, float]):
    """Return random (angular frequency, phase) pairs for a sum of sines."""
    periods = rng.uniform(*period_range, count)
    return 2 * math.pi / periods, rng.uniform(0, 2 * math.pi, count)


def _sum_sines(t: np.ndarray, amplitudes, omegas, phases) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)[..., None]
    return np.sum(np.asarray(amplitudes) * np.sin(omegas * t + phases), axis=-1)


# ----------------------------------------------------------------------------------------------
# Scene
# ----------------------------------------------------------------------------------------------

class SyntheticScene:
    """A seeded textured room with boxes, a camera loop through it and an exact renderer.

    Args:
        seed: changes the room size, box layout, textures and trajectory.
        width: image width in pixels (16..4096).
        height: image height in pixels (16..4096).
        fov_deg: horizontal field of view in degrees (20..120).

    Attributes:
        camera: undistorted ``Camera`` with square pixels and the principal point at the centre.
        room_size: (Lx, Ly, Lz) metres; the room spans ``[-Lx/2, Lx/2] x [-Ly/2, Ly/2] x [0, Lz]``.
        boxes: the boxes and pillars (``Box``), all standing on the floor.
    """

    def __init__(self, seed: int = 0, width: int = 640, height: int = 480,
                 fov_deg: float = 70.0):
        """Build the room, boxes, textures and trajectory of ``seed`` (see the class docstring)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f'seed must be a non-negative integer, got {seed!r}')
        for name, value in (('width', width), ('height', height)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 16 <= value <= 4096:
                raise ValueError(f'{name} must be an integer in [16, 4096], got {value!r}')
        if not (isinstance(fov_deg, (int, float, np.number)) and 20.0 <= fov_deg <= 120.0):
            raise ValueError(f'fov_deg must be in [20, 120] degrees, got {fov_deg!r}')
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        focal = (width / 2.0) / math.tan(math.radians(fov_deg) / 2.0)
        self.camera = Camera.from_intrinsics(focal, focal, (width - 1) / 2.0, (height - 1) / 2.0,
                                             int(width), int(height))
        # Room and loop path.
        b = rng.uniform(2.4, 3.0)
        a = b * rng.uniform(1.15, 1.6)
        margin_x, margin_y = rng.uniform(1.7, 2.2, 2)
        self.room_size = (2 * (a * 1.1 + margin_x), 2 * (b * 1.1 + margin_y),
                          float(rng.uniform(2.6, 3.2)))
        self._path = _LoopPath(rng, a, b, centre=np.zeros(2))
        self._motion = self._sample_motion(rng)
        self.boxes: tuple[Box, ...] = tuple(self._place_boxes(rng))
        self._build_surfaces(rng)
        x, y = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
        self._ray_x = ((x - self.camera.cx) / self.camera.fx).astype(np.float32)
        self._ray_y = ((y - self.camera.cy) / self.camera.fy).astype(np.float32)
        logger.debug('scene seed=%d room=%s boxes=%d atlas=%s', self.seed,
                     np.round(self.room_size, 2), len(self.boxes), self._atlas.shape)

    # -- layout ----------------------------------------------------------------------------------

    def _sample_motion(self, rng: np.random.Generator) -> dict:
        return {
            'v0': rng.uniform(0.65, 0.8),
            'speed': (rng.uniform(0.08, 0.15, 2),) + _sines(rng, 2, (4.0, 12.0)),
            'omega_max': 0.33,
            'yaw': (np.radians(rng.uniform(2.0, 5.0, 2)),) + _sines(rng, 2, (3.0, 9.0)),
            'pitch0': math.radians(rng.uniform(-4.0, 2.0)),
            'pitch': (np.radians(rng.uniform(0.5, 1.5, 2)),) + _sines(rng, 2, (2.0, 7.0)),
            'roll': (np.radians(rng.uniform(0.5, 1.5, 2)),) + _sines(rng, 2, (2.0, 7.0)),
            'lateral': (rng.uniform(0.01, 0.03, 2),) + _sines(rng, 2, (3.0, 9.0)),
            'height0': rng.uniform(1.0, 1.4),
            'height': (rng.uniform(0.005, 0.015, 2),) + _sines(rng, 2, (1.0, 5.0)),
        }

    def _place_boxes(self, rng: np.random.Generator) -> list[Box]:
        lx, ly, lz = self.room_size
        path_xy = self._path.xy[::8]
        boxes: list[Box] = []
        wanted_boxes, wanted_pillars = int(rng.integers(6, 10)), int(rng.integers(1, 4))
        for attempt in range(2000):
            if len(boxes) >= wanted_boxes + wanted_pillars:
                break
            pillar = sum(bx.label == _PILLAR for bx in boxes) < wanted_pillars and attempt % 2
            if pillar:
                half = np.array([*(rng.uniform(0.15, 0.3, 2)), lz / 2])
            else:
                half = np.array([*(rng.uniform(0.15, 0.75, 2)), rng.uniform(0.15, 0.9)])
            centre = np.array([rng.uniform(-lx / 2, lx / 2), rng.uniform(-ly / 2, ly / 2),
                               half[2]])
            box = Box(centre=centre, half_size=half, yaw=float(rng.uniform(0, math.pi)),
                      label=_PILLAR if pillar else _BOX)
            corners = box.corners()[:, :2]
            if np.any(np.abs(corners) > np.array([lx / 2, ly / 2]) - 0.05):
                continue
            if box.footprint_distance(path_xy).min() < 0.9:
                continue
            if any(other.footprint_distance(corners).min() < 0.25
                   or box.footprint_distance(other.corners()[:, :2]).min() < 0.25
                   for other in boxes):
                continue
            boxes.append(box)
        return boxes

    def _build_surfaces(self, rng: np.random.Generator) -> None:
        """Build per-face textures, the mip atlas and the per-surface lookup tables."""
        lx, ly, lz = self.room_size
        lo = np.array([-lx / 2, -ly / 2, 0.0])
        hi = np.array([lx / 2, ly / 2, lz])
        self._room_lo, self._room_hi = lo, hi
        faces = []  # (label, normal, u-axis, v-axis, origin, width_m, height_m, palette)
        room_palettes = {label: _palette(rng, label) for label in (_FLOOR, _WALL, _CEILING)}
        eye = np.eye(3)
        for axis in range(3):
            for side in range(2):   # room surface id = 2 * axis + side; side 1 = the high wall
                u_axis, v_axis = (1, 2) if axis == 0 else (0, 2) if axis == 1 else (0, 1)
                label = _WALL if axis < 2 else (_FLOOR if side == 0 else _CEILING)
                origin = lo.copy()
                origin[axis] = hi[axis] if side else lo[axis]
                normal = eye[axis] * (-1.0 if side else 1.0)   # pointing into the room
                palette = room_palettes[label] if label != _WALL else _palette(rng, _WALL)
                faces.append((label, normal, eye[u_axis], eye[v_axis], origin,
                              hi[u_axis] - lo[u_axis], hi[v_axis] - lo[v_axis], palette))
        for box in self.boxes:
            R = box.R_world_box
            palette = _palette(rng, box.label)
            for axis in range(3):
                for side in range(2):   # box surface id = base + 2 * axis + side; side 1 = +axis
                    u_axis, v_axis = (1, 2) if axis == 0 else (0, 2) if axis == 1 else (0, 1)
                    sign = 1.0 if side else -1.0
                    normal = R[:, axis] * sign
                    u_dir, v_dir = R[:, u_axis], R[:, v_axis]
                    origin = box.centre + sign * box.half_size[axis] * R[:, axis] \
                        - box.half_size[u_axis] * u_dir - box.half_size[v_axis] * v_dir
                    faces.append((box.label, normal, u_dir, v_dir, origin,
                                  2 * box.half_size[u_axis], 2 * box.half_size[v_axis], palette))
        num = len(faces)
        self._num_room_surfaces = 6
        self._surface_label = np.array([f[0] for f in faces] + [VOID_LABEL], np.uint8)
        self._surface_normal = np.array([f[1] for f in faces], np.float64)
        levels_all = []
        texel = np.zeros(num)
        for i, (label, normal, _, _, _, w_m, h_m, palette) in enumerate(faces):
            texel[i], _, _, density = _STYLE[label]
            shade = 0.55 + 0.45 * abs(float(normal @ _LIGHT_DIR))
            tex = _make_texture(rng, w_m, h_m, texel[i], palette, density, shade)
            levels = [tex]
            while len(levels) < _MAX_LEVELS and min(levels[-1].shape[:2]) >= 8:
                levels.append(cv2.pyrDown(levels[-1]))
            levels_all.append(levels)
        # Shelf-pack every level (with replicated borders) into one atlas.
        items = [(i, lvl, img) for i, levels in enumerate(levels_all)
                 for lvl, img in enumerate(levels)]
        items.sort(key=lambda it: -it[2].shape[0])
        offsets = np.zeros((num, _MAX_LEVELS, 2), np.float32)
        placements = []
        x = y = shelf_h = 0
        for i, lvl, img in items:
            h, w = img.shape[0] + 2 * _ATLAS_PAD, img.shape[1] + 2 * _ATLAS_PAD
            if x + w > _ATLAS_WIDTH:
                x, y, shelf_h = 0, y + shelf_h, 0
            placements.append((x, y, img))
            offsets[i, lvl] = (x + _ATLAS_PAD, y + _ATLAS_PAD)
            x += w
            shelf_h = max(shelf_h, h)
        atlas = np.zeros((y + shelf_h, _ATLAS_WIDTH, 3), np.uint8)
        for x, y, img in placements:
            padded = cv2.copyMakeBorder(img, _ATLAS_PAD, _ATLAS_PAD, _ATLAS_PAD, _ATLAS_PAD,
                                        cv2.BORDER_REPLICATE)
            atlas[y:y + padded.shape[0], x:x + padded.shape[1]] = padded
        if atlas.shape[0] >= 32767:
            raise RuntimeError('texture atlas too large')
        self._atlas = atlas
        num_levels = np.array([len(levels) for levels in levels_all])
        # Texel coordinates: u_tex = (p - origin) . u_dir / texel  -> affine table (a, b, c, d).
        u_dirs = np.array([f[2] for f in faces]) / texel[:, None]
        v_dirs = np.array([f[3] for f in faces]) / texel[:, None]
        origins = np.array([f[4] for f in faces])
        self._u_table = np.concatenate([u_dirs, -(u_dirs * origins).sum(1, keepdims=True)], 1)
        self._v_table = np.concatenate([v_dirs, -(v_dirs * origins).sum(1, keepdims=True)], 1)
        self._u_dir32 = [np.ascontiguousarray(u_dirs[:, k], np.float32) for k in range(3)]
        self._v_dir32 = [np.ascontiguousarray(v_dirs[:, k], np.float32) for k in range(3)]
        self._normal32 = [np.ascontiguousarray(self._surface_normal[:, k], np.float32)
                          for k in range(3)]
        self._max_lod = (num_levels - 1).astype(np.float32)
        self._lod_offset = (-np.log2(self.camera.fx * texel) + _LOD_BIAS).astype(np.float32)
        # Flattened (surface, level) -> atlas offset, with the last level repeated.
        lvl_idx = np.minimum(np.arange(_MAX_LEVELS)[None, :], (num_levels - 1)[:, None])
        offsets = np.take_along_axis(offsets, lvl_idx[..., None], axis=1)
        self._offset_x = offsets[..., 0].reshape(-1)
        self._offset_y = offsets[..., 1].reshape(-1)
        self._level_scale = (0.5 ** np.arange(_MAX_LEVELS)).astype(np.float32)

    # -- trajectory ------------------------------------------------------------------------------

    def trajectory(self, num_frames: int, fps: float = 10.0,
                   speed_ratio: float = 1.0) -> np.ndarray:
        """Return the camera poses of ``num_frames`` frames sampled at ``fps``.

        The motion is defined in continuous time (speed in m/s), so poses at time ``i / fps``
        do not depend on ``num_frames``.

        Args:
            num_frames: number of poses (>= 1).
            fps: frames per second (> 0).
            speed_ratio: ratio (>= 1) of the fastest to the slowest cruise speed: the cruise
                speed is multiplied by ``speed_ratio ** (0.5 sin(2 pi t / 20 s))`` (1: the
                default motion). Curvature limits the speed further in turns.

        Returns:
            (num_frames, 4, 4) float64 ``T_world_cam`` (camera optical frame -> world, z up).
        """
        from scipy.spatial.transform import Rotation  # imported where used

        if isinstance(num_frames, bool) or not isinstance(num_frames, (int, np.integer)) \
                or num_frames < 1:
            raise ValueError(f'num_frames must be an integer >= 1, got {num_frames!r}')
        check_frame_rate(fps)
        if not (isinstance(speed_ratio, (int, float, np.number)) and math.isfinite(speed_ratio)
                and 1.0 <= speed_ratio <= 100.0):
            raise ValueError(f'speed_ratio must be a number in [1, 100], got {speed_ratio!r}')
        times = np.arange(num_frames, dtype=np.float64) / float(fps)
        m = self._motion
        # Integrate ds/dt = v_cruise(t) / sqrt(1 + (v_cruise kappa / omega_max)^2) on a fixed grid.
        dt = 0.01
        steps = math.ceil(times[-1] / dt) + 2
        grid_t = np.arange(steps) * dt

        def modulation(t):
            return float(speed_ratio) ** (0.5 * np.sin(2 * math.pi * t / _SPEED_PERIOD_S))

        cruise = m['v0'] * (1.0 + _sum_sines(grid_t, *m['speed'])) * modulation(grid_t)
        half_cruise = (m['v0'] * (1.0 + _sum_sines(grid_t + dt / 2, *m['speed']))
                       * modulation(grid_t + dt / 2))
        grid_s = np.zeros(steps)
        s = 0.0

        def speed(v, s_now):
            return v / math.sqrt(1.0 + (v * self._path.kappa(s_now) / m['omega_max']) ** 2)

        for k in range(steps - 1):   # midpoint rule
            k1 = speed(cruise[k], s)
            s += dt * speed(half_cruise[k], s + 0.5 * dt * k1)
            grid_s[k + 1] = s
        arc = np.interp(times, grid_t, grid_s)
        xy, heading = self._path.point(arc)
        lateral = _sum_sines(times, *m['lateral'])
        normal = np.stack([-np.sin(heading), np.cos(heading)], -1)
        position = np.concatenate([xy + lateral[:, None] * normal,
                                   (m['height0'] + _sum_sines(times, *m['height']))[:, None]], 1)
        yaw = heading + _sum_sines(times, *m['yaw'])
        pitch = m['pitch0'] + _sum_sines(times, *m['pitch'])
        roll = _sum_sines(times, *m['roll'])
        R_world_body = Rotation.from_euler('ZYX', np.stack([yaw, pitch, roll], -1)).as_matrix()
        poses = np.empty((num_frames, 4, 4))
        for i in range(num_frames):
            poses[i] = make_transform(R_world_body[i] @ _R_BODY_CAM, position[i])
        return poses

    # -- rendering -------------------------------------------------------------------------------

    def _box_rect(self, box: Box, T_cam_world: np.ndarray):
        """Return the pixel rectangle (r0, r1, c0, c1) that can contain ``box``, or None."""
        corners = box.corners() @ T_cam_world[:3, :3].T + T_cam_world[:3, 3]
        z = corners[:, 2]
        h, w = self.camera.height, self.camera.width
        if np.all(z <= 1e-3):
            return None
        if np.any(z <= 1e-3):
            return 0, h, 0, w
        u = self.camera.fx * corners[:, 0] / z + self.camera.cx
        v = self.camera.fy * corners[:, 1] / z + self.camera.cy
        c0, c1 = max(math.floor(u.min()) - 1, 0), min(math.ceil(u.max()) + 2, w)
        r0, r1 = max(math.floor(v.min()) - 1, 0), min(math.ceil(v.max()) + 2, h)
        if c0 >= c1 or r0 >= r1:
            return None
        return r0, r1, c0, c1

    def check_camera_position(self, position: np.ndarray, name: str = 'camera position') -> None:
        """Raise ``ValueError`` unless ``position`` (3,) metres is in the room, outside boxes."""
        if np.any(position <= self._room_lo) or np.any(position >= self._room_hi):
            raise ValueError(f'{name} {np.asarray(position).tolist()} is outside the room '
                             f'{np.round(self.room_size, 3).tolist()}')
        for box in self.boxes:
            local = (position - box.centre) @ box.R_world_box
            if np.all(np.abs(local) < box.half_size):
                raise ValueError(f'{name} {np.asarray(position).tolist()} is inside a box')

    def render(self, T_world_cam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Render the view of a camera at ``T_world_cam``.

        Args:
            T_world_cam: (4, 4) float64 pose of the camera optical frame in the world; the camera
                must be inside the room and outside every box.

        Returns:
            rgb (H, W, 3) uint8, depth (H, W) float32 metres along the optical axis (NaN where
            nothing is hit) and labels (H, W) uint8 class ids (``VOID_LABEL`` where nothing is
            hit).
        """
        T = check_transform(T_world_cam, 'T_world_cam')
        origin = T[:3, 3]
        self.check_camera_position(origin)
        R = T[:3, :3]
        X, Y = self._ray_x, self._ray_y
        d = [np.float32(R[k, 0]) * X + np.float32(R[k, 1]) * Y + np.float32(R[k, 2])
             for k in range(3)]   # unnormalised world directions with unit optical-axis component
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            # Room: the exit distance through the box [lo, hi]; t equals depth since d_cam.z = 1.
            t_axis, positive = [], []
            for k in range(3):
                pos = d[k] > 0
                bound = np.where(pos, np.float32(self._room_hi[k] - origin[k]),
                                 np.float32(self._room_lo[k] - origin[k]))
                t_axis.append(bound / d[k])
                positive.append(pos)
            tx, ty, tz = [np.where(np.isfinite(t_k) & (t_k >= 0), t_k, np.inf) for t_k in t_axis]
            is_x = (tx <= ty) & (tx <= tz)
            is_y = ~is_x & (ty <= tz)
            t = np.minimum(np.minimum(tx, ty), tz)
            surface = np.where(is_x, positive[0], np.where(is_y, 2 + positive[1], 4 + positive[2]))
            surface = surface.astype(np.int32)
            T_cam_world = np.linalg.inv(T)
            for b, box in enumerate(self.boxes):
                rect = self._box_rect(box, T_cam_world)
                if rect is None:
                    continue
                self._intersect_box(b, box, origin, d, t, surface, rect)
        hit = np.isfinite(t)
        if not np.all(hit):
            surface[~hit] = -1
            t = np.where(hit, t, np.float32(0.0))
        depth = t.astype(np.float32)
        labels = self._surface_label[surface]
        # Texel coordinates of the hit point p = origin + t d (affine per surface).
        u0 = (self._u_table[:, :3] @ origin + self._u_table[:, 3]).astype(np.float32)
        v0 = (self._v_table[:, :3] @ origin + self._v_table[:, 3]).astype(np.float32)
        u_dir, v_dir = self._u_dir32, self._v_dir32
        u = u0[surface] + t * (u_dir[0][surface] * d[0] + u_dir[1][surface] * d[1]
                               + u_dir[2][surface] * d[2])
        v = v0[surface] + t * (v_dir[0][surface] * d[0] + v_dir[1][surface] * d[1]
                               + v_dir[2][surface] * d[2])
        normal = self._normal32
        n_dot_d = np.abs(normal[0][surface] * d[0] + normal[1][surface] * d[1]
                         + normal[2][surface] * d[2])
        # Pixel footprint on the surface (area equivalent): depth / (f sqrt(|n . d|)).
        lod = 0.5 * np.log2(np.maximum(t * t, 1e-12) / np.maximum(n_dot_d, 1e-12)) \
            + self._lod_offset[surface]
        lod = np.clip(lod, 0.0, self._max_lod[surface])
        level0 = np.floor(lod).astype(np.int32)
        frac = (lod - level0).astype(np.float32)
        level1 = np.minimum(level0 + 1, _MAX_LEVELS - 1)
        rgb = None
        for level, weight in ((level0, 1.0 - frac), (level1, frac)):
            flat = surface * _MAX_LEVELS + level
            scale = self._level_scale[level]
            map_x = u * scale + self._offset_x[flat]
            map_y = v * scale + self._offset_y[flat]
            sample = cv2.remap(self._atlas, map_x, map_y, cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
            if rgb is None:
                first, first_weight = sample, weight
                rgb = sample
            else:
                rgb = cv2.blendLinear(first, sample, np.ascontiguousarray(first_weight),
                                      np.ascontiguousarray(weight))
        if not np.all(hit):
            depth[~hit] = np.nan
            rgb[~hit] = 0
        return rgb, depth, labels

    def _intersect_box(self, index: int, box: Box, origin: np.ndarray, d, t: np.ndarray,
                       surface: np.ndarray, rect) -> None:
        """Slab-test the rays in ``rect`` against ``box``; update ``t`` and ``surface``."""
        r0, r1, c0, c1 = rect
        R = box.R_world_box
        o_local = (origin - box.centre) @ R
        dw = [dk[r0:r1, c0:c1] for dk in d]
        # Local ray direction: R^T d.
        dl = [np.float32(R[0, k]) * dw[0] + np.float32(R[1, k]) * dw[1]
              + np.float32(R[2, k]) * dw[2] for k in range(3)]
        t_near = []
        t_far = None
        for k in range(3):
            lo = np.float32(-box.half_size[k] - o_local[k])
            hi = np.float32(box.half_size[k] - o_local[k])
            t1, t2 = lo / dl[k], hi / dl[k]
            t_near.append(np.minimum(t1, t2))
            far = np.maximum(t1, t2)
            t_far = far if t_far is None else np.minimum(t_far, far)
        near = np.maximum(np.maximum(t_near[0], t_near[1]), t_near[2])
        t_sub, s_sub = t[r0:r1, c0:c1], surface[r0:r1, c0:c1]
        hit = (near <= t_far) & (near > 0) & (near < t_sub)
        if not np.any(hit):
            return
        is_x = t_near[0] >= near
        is_y = ~is_x & (t_near[1] >= near)
        # The face hit is the one facing the ray: the +axis face when the local direction is < 0.
        face = np.where(is_x, dl[0] < 0, np.where(is_y, 2 + (dl[1] < 0), 4 + (dl[2] < 0)))
        base = self._num_room_surfaces + 6 * index
        t_sub[hit] = near[hit]
        s_sub[hit] = base + face[hit]


def _checked_poses(scene: SyntheticScene, poses, num_frames) -> np.ndarray:
    """Return ``poses`` as (N, 4, 4) float64 after checking them (see ``iter_sequence``)."""
    poses = np.asarray(poses, dtype=np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or len(poses) < 1:
        raise ValueError(f'poses must have shape (N >= 1, 4, 4), got {poses.shape}')
    if num_frames is not None and num_frames != len(poses):
        raise ValueError(f'num_frames ({num_frames!r}) differs from the number of poses '
                         f'({len(poses)})')
    for i, T in enumerate(poses):
        check_transform(T, f'poses[{i}]')
        scene.check_camera_position(T[:3, 3], f'poses[{i}]')
    return poses


def iter_sequence(num_frames: int | None = None, seed: int = 0, width: int = 640,
                  height: int = 480, fps: float = 10.0,
                  start_time_ns: int = 1_700_000_000_000_000_000,
                  image_noise_std: float = 0.0, speed_ratio: float = 1.0, poses=None
                  ) -> tuple[Camera, collections.abc.Iterator[SyntheticFrame]]:
    """Return the camera and a lazy iterator over a rendered synthetic sequence.

    Arguments are validated at once; frames are rendered as the iterator is consumed.

    Args:
        num_frames: number of frames (>= 1; default ``DEFAULT_SEQUENCE_FRAMES``, or
            ``len(poses)``, which it must equal when both are given).
        seed: scene, texture, trajectory and noise seed (>= 0).
        width: image width in pixels.
        height: image height in pixels.
        fps: frame rate in Hz (> 0); frame i is stamped
            ``start_time_ns + round(i * 1e9 / fps)`` nanoseconds.
        start_time_ns: stamp of the first frame, integer nanoseconds (>= 0).
        image_noise_std: standard deviation of additive Gaussian noise in grey levels, applied
            to ``rgb`` only (seeded, >= 0).
        speed_ratio: fastest / slowest cruise speed (see ``SyntheticScene.trajectory``).
        poses: optional (N, 4, 4) ``T_world_cam`` (metres) to render instead of the scene's
            trajectory (``speed_ratio`` then has no effect), e.g. a camera that stops or turns
            in place; every pose must be a finite rigid transform inside the room (see
            ``SyntheticScene.render``). Frame i is still stamped at ``i / fps``.

    Returns:
        (camera, frames): the ``Camera`` and an iterator of ``SyntheticFrame``.

    Raises:
        ValueError: a bad argument, or ``poses`` that are not (N >= 1, 4, 4) rigid transforms
            inside the room or outside every box.
    """
    if isinstance(start_time_ns, bool) or not isinstance(start_time_ns, (int, np.integer)) \
            or start_time_ns < 0:
        raise ValueError(f'start_time_ns must be a non-negative integer, got {start_time_ns!r}')
    if not (isinstance(image_noise_std, (int, float, np.number)) and math.isfinite(image_noise_std)
            and image_noise_std >= 0):
        raise ValueError(f'image_noise_std must be a finite number >= 0, got {image_noise_std!r}')
    scene = SyntheticScene(seed=seed, width=width, height=height)
    if poses is None:
        poses = scene.trajectory(DEFAULT_SEQUENCE_FRAMES if num_frames is None else num_frames,
                                 fps, speed_ratio)
    else:
        poses = _checked_poses(scene, poses, num_frames)
        check_frame_rate(fps)

    def frames() -> collections.abc.Iterator[SyntheticFrame]:
        noise_rng = np.random.default_rng([int(seed), 0x5EED])
        for i, T_world_cam in enumerate(poses):
            rgb, depth, labels = scene.render(T_world_cam)
            if image_noise_std > 0:
                noisy = noise_rng.standard_normal(rgb.shape, dtype=np.float32)
                noisy *= np.float32(image_noise_std)
                noisy += rgb
                noisy += np.float32(0.5)   # round to nearest when truncating below
                rgb = np.clip(noisy, 0, 255, out=noisy).astype(np.uint8)
            stamp = int(start_time_ns) + round(i * 1e9 / float(fps))
            yield SyntheticFrame(stamp_ns=stamp, rgb=rgb, depth=depth, labels=labels,
                                 T_world_cam=T_world_cam.copy())

    return scene.camera, frames()
