# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""One configuration schema whose keys are the ROS parameter names.

A configuration is a flat ``dict`` keyed by dotted ROS parameter names
(``ncc.patch_size``, ``odometry.mode``, ...). YAML files may be written either flat or
nested, and either bare or in the ROS 2 parameter-file form::

    /**:
      ros__parameters:
        matcher: ncc
        ncc:
          patch_size: 9

so the same file feeds ``ros2 launch``, ``relperception run`` and ``relperception eval``.
Each component takes its own section (``section(config, 'ncc')``) as its ``conf`` dict.
"""

from __future__ import annotations

from dataclasses import dataclass
import difflib
import math
from pathlib import Path
import re
from typing import Any, Dict, Hashable, Mapping, Optional, Sequence, Tuple, Union

import yaml
import yaml.composer
import yaml.constructor


def _number_text_hint(value: Any) -> str:
    """Explain a number YAML read as text (YAML 1.1 needs a dot in '5e-1'), else ''."""
    if not isinstance(value, str):
        return ''
    try:
        number = float(value)
    except ValueError:
        return ''
    return (f' (YAML 1.1, as ROS 2 parameter files use it, reads {value!r} as text: write '
            f'{number!r})')


@dataclass(frozen=True)
class ParameterSpec:
    """Declaration of one parameter: name, default, description and allowed values."""

    name: str
    default: Any
    description: str
    min_value: Optional[float] = None
    max_value: Optional[float] = None
    choices: Optional[Sequence[Any]] = None
    read_only: bool = False
    #: strings only: a regular expression the whole value must match, and what it means
    pattern: Optional[Tuple[str, str]] = None
    #: integers only: allowed values are ``min_value`` + a multiple of it (2 from 3: odd)
    step: Optional[int] = None

    def validate(self, value: Any) -> Any:
        """Return ``value`` converted to the default's type, or raise ``ValueError`` saying why."""
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f'{self.name} must be true or false, got {value!r}')
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                else:
                    raise ValueError(f'{self.name} must be an integer, got {value!r}')
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f'{self.name} must be a number, got {value!r}'
                                 f'{_number_text_hint(value)}')
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f'{self.name} must be a finite number, got {value!r}')
        elif kind is str:
            if not isinstance(value, str):
                raise ValueError(f'{self.name} must be a string, got {value!r}')
            if self.pattern is not None and not re.fullmatch(self.pattern[0], value):
                raise ValueError(f'{self.name} must be {self.pattern[1]}, got {value!r}')
        elif kind is list:
            return self._validate_list(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f'{self.name} must be one of {list(self.choices)}, got {value!r}')
        if self.min_value is not None and value < self.min_value:
            raise ValueError(f'{self.name} must be >= {self.min_value}, got {value!r}')
        if self.max_value is not None and value > self.max_value:
            raise ValueError(f'{self.name} must be <= {self.max_value}, got {value!r}')
        if self.step is not None and (value - self.min_value) % self.step:
            kind = 'odd' if self.step == 2 and self.min_value % 2 else \
                f'{self.min_value} plus a multiple of {self.step}'
            raise ValueError(f'{self.name} must be {kind}, got {value!r}')
        return value

    def _validate_list(self, value: Any) -> list:
        """Check a value for a list default: as many finite numbers, of its element type."""
        element = type(self.default[0])
        if not isinstance(value, (list, tuple)) or len(value) != len(self.default) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            raise ValueError(f'{self.name} must be a list of {len(self.default)} numbers, '
                             f'got {value!r}')
        if not all(math.isfinite(v) for v in value):
            raise ValueError(f'{self.name} must hold finite numbers, got {value!r}')
        if element is int and not all(float(v).is_integer() for v in value):
            raise ValueError(f'{self.name} must hold integers, got {value!r}')
        return [element(v) for v in value]


#: What a device parameter takes (torch's names for the devices this package runs on).
DEVICE_PATTERN = (r'cpu|cuda(:\d+)?', 'cpu, cuda or cuda:N')

#: Precisions a TensorRT engine is built with (``int8``: from a QDQ ONNX file).
ENGINE_PRECISIONS = ('fp16', 'fp32', 'int8')


def _exported_model_specs(section: str) -> tuple:
    """Return the exported-model parameters of ``section`` (``dense`` or ``loftr``)."""
    return (
        ParameterSpec(f'{section}.onnx_path', '',
                      'exported ONNX model (backends onnxruntime and tensorrt: the engine is '
                      'built from it and cached) or a TensorRT engine file (tensorrt)'),
        ParameterSpec(f'{section}.onnxruntime_threads', 0,
                      'onnxruntime intra-op CPU threads (backend onnxruntime; 0 = chosen by '
                      'onnxruntime, one per core)', 0, 256),
    )


def _engine_specs(section: str) -> tuple:
    """Return the TensorRT engine parameters of ``section`` (``dense`` or ``loftr``)."""
    return (
        ParameterSpec(f'{section}.engine_file_path', '',
                      f'TensorRT engine (backend tensorrt with an .onnx {section}.onnx_path): '
                      "built from the ONNX file when missing or stale; '' = next to it, keyed "
                      'by TensorRT version, GPU and precision'),
        ParameterSpec(f'{section}.force_engine_update', False,
                      'rebuild the TensorRT engine even when the cached one fits'),
        ParameterSpec(f'{section}.engine_precision', 'fp16', 'precision of a built TensorRT '
                      'engine (int8 needs a QDQ ONNX file: export --int8)',
                      choices=ENGINE_PRECISIONS),
        ParameterSpec(f'{section}.max_workspace_size_mib', 1024,
                      'TensorRT builder workspace limit (MiB)', 1, 1048576),
        ParameterSpec(f'{section}.dla_core', -1, 'DLA core a TensorRT engine is built for '
                      '(Jetson); -1 = the GPU', -1, 15),
    )


#: The correspondence methods (the ``matcher`` parameter, ``run --matcher``, ``matcher:=``).
MATCHERS = ('ncc', 'loftr', 'klt', 'orb')
#: Transports of the image input (``image_transport``) and of the depth input
#: (``depth_transport``), as image_transport names them.
IMAGE_TRANSPORTS = ('raw', 'compressed')
DEPTH_TRANSPORTS = ('raw', 'compressedDepth')

PARAMETERS = (
    # --- matcher choice -------------------------------------------------------------------
    ParameterSpec('matcher', 'ncc',
                  'correspondence method: ncc (patch correlation), loftr (learned detector-free '
                  'transformer matcher), or the baselines klt (pyramidal Lucas-Kanade) and orb '
                  '(ORB + ratio test)', choices=MATCHERS),
    # --- NCC matcher (relperception.matching.ncc.NCCMatcher.default_conf) -------------------
    ParameterSpec('ncc.max_keypoints', 1000, 'maximum number of keypoints per frame',
                  16, 20000),
    ParameterSpec('ncc.cell_size_px', 32, 'grid cell size for spreading keypoints (pixels)',
                  4, 512),
    ParameterSpec('ncc.patch_size', 9, 'side of the correlated patch (pixels, odd)', 3, 31,
                  step=2),
    ParameterSpec('ncc.search_radius_px', 4,
                  'search radius at the coarsest pyramid level (pixels of that level)', 1, 64),
    ParameterSpec('ncc.refine_radius_px', 2,
                  'search radius at every finer pyramid level (pixels of that level)', 1, 64),
    ParameterSpec('ncc.pyramid_levels', 4, 'number of pyramid levels (1 = full resolution only)',
                  1, 8),
    ParameterSpec('ncc.min_score', 0.8, 'minimum zero-mean NCC score of a match', -1.0, 1.0),
    ParameterSpec('ncc.max_forward_backward_px', 1.0,
                  'maximum forward-backward error of a match (pixels)', 0.0, 100.0),
    ParameterSpec('ncc.min_corner_quality', 0.001,
                  'Shi-Tomasi quality level relative to the strongest corner', 0.0, 1.0),
    ParameterSpec('ncc.min_patch_std', 2.0,
                  'patches with a smaller grey-level standard deviation are rejected', 0.0, 128.0),
    # --- LoFTR-style matcher (relperception.matching.loftr) -------------------------------
    ParameterSpec('loftr.preset', 'loftr_lite',
                  'model size: loftr (the paper sizes, for official/kornia weights) or '
                  'loftr_lite (smaller, for CPU and Jetson real time)',
                  choices=('loftr', 'loftr_lite')),
    ParameterSpec('loftr.weights', '',
                  'weights file (safetensors, or a kornia/official LoFTR state dict or '
                  'checkpoint); empty = the weights shipped with the package for the preset'),
    ParameterSpec('loftr.backend', 'torch', 'inference backend',
                  choices=('torch', 'onnxruntime', 'tensorrt')),
    *_exported_model_specs('loftr'),
    *_engine_specs('loftr'),
    ParameterSpec('loftr.device', 'cpu', 'torch device for backend torch (cpu, cuda, cuda:N)',
                  pattern=DEVICE_PATTERN),
    ParameterSpec('loftr.threshold', 0.2,
                  'coarse matching confidence threshold (kornia default 0.2)', 0.0, 1.0),
    ParameterSpec('loftr.input_width', 0,
                  'images are resized to this width before matching (multiple of 8); '
                  '0 = the preset default', 0, 4096),
    ParameterSpec('loftr.input_height', 0,
                  'images are resized to this height before matching (multiple of 8); '
                  '0 = the preset default', 0, 4096),
    ParameterSpec('loftr.max_matches', 0,
                  'at most this many matches per pair: the number of coarse cells refined at '
                  'fine level (the most confident ones); 0 = the preset default (loftr 1024, '
                  'loftr_lite 512); with an exported model, the most confident of its '
                  'matches', 0, 3840),
    ParameterSpec('loftr.compute_dtype', 'float32',
                  'precision of the backbone and coarse transformer with backend torch: '
                  'bfloat16 is faster on CPUs with AVX512-BF16/AMX and changes results at '
                  'bfloat16 rounding', choices=('float32', 'bfloat16')),
    # --- dense perception (relperception.models.dense, relperception.pipeline.dense) --------
    ParameterSpec('dense.backbone', 'conv',
                  'backbone family of the default dense model: conv (convolution, preset '
                  'fast_seg) or vit (attention: the hybrid ViT vit_hybrid); ignored when '
                  'dense.model is set',
                  choices=('conv', 'vit')),
    ParameterSpec('dense.model', '',
                  'model preset name or model YAML file; empty = the shipped default of '
                  'dense.backbone'),
    ParameterSpec('dense.weights', '',
                  'weights file (safetensors or a plain state dict); empty = the weights '
                  'shipped with the package for the preset'),
    ParameterSpec('dense.backend', 'torch', 'inference backend',
                  choices=('torch', 'onnxruntime', 'tensorrt')),
    *_exported_model_specs('dense'),
    *_engine_specs('dense'),
    ParameterSpec('dense.device', 'cpu', 'torch device for backend torch (cpu, cuda, cuda:N)',
                  pattern=DEVICE_PATTERN),
    ParameterSpec('dense.input_width', 0,
                  'network input width (multiple of the backbone stride); 0 = preset default',
                  0, 4096),
    ParameterSpec('dense.input_height', 0,
                  'network input height (multiple of the backbone stride); 0 = preset default',
                  0, 4096),
    ParameterSpec('dense.depth_scale', 1.0,
                  'relative-depth models only: metres = depth_scale / predicted inverse depth '
                  '(metric models ignore it)', 1e-6, 1e6),
    ParameterSpec('dense.min_depth_m', 0.1, 'published depth below this is NaN (m)',
                  0.0, 1000.0),
    ParameterSpec('dense.max_depth_m', 80.0, 'published depth above this is NaN (m)',
                  0.0, 10000.0),
    ParameterSpec('dense.publish_color', True,
                  'also publish the colourised depth and the labels overlay'),
    # --- baselines (relperception.matching.baselines) ---------------------------------------
    ParameterSpec('klt.max_keypoints', 1000, 'maximum number of tracked corners', 16, 20000),
    ParameterSpec('klt.cell_size_px', 32, 'grid cell size for spreading corners (pixels)',
                  4, 512),
    ParameterSpec('klt.min_corner_quality', 0.001, 'Shi-Tomasi quality level', 0.0, 1.0),
    ParameterSpec('klt.window_size', 21, 'Lucas-Kanade window side (pixels)', 5, 101),
    ParameterSpec('klt.pyramid_levels', 4, 'Lucas-Kanade pyramid levels', 1, 8),
    ParameterSpec('klt.max_forward_backward_px', 1.0,
                  'maximum forward-backward error of a track (pixels)', 0.0, 100.0),
    ParameterSpec('orb.max_keypoints', 2000, 'maximum number of ORB features', 16, 50000),
    ParameterSpec('orb.ratio_test', 0.8, "Lowe's ratio test threshold", 0.1, 1.0),
    ParameterSpec('orb.fast_threshold', 10, 'FAST threshold of the ORB detector', 1, 255),
    # --- visual odometry (relperception.odometry.vo.VisualOdometry.default_conf) ------------
    ParameterSpec('odometry.mode', 'auto',
                  'auto: RGB-D (PnP) when depth arrives, monocular otherwise',
                  choices=('auto', 'rgbd', 'mono')),
    ParameterSpec('odometry.min_matches', 30, 'fewer inlier matches than this = tracking lost',
                  5, 100000),
    ParameterSpec('odometry.ransac_threshold_px', 1.0, 'RANSAC inlier threshold (pixels)',
                  0.05, 50.0),
    ParameterSpec('odometry.ransac_confidence', 0.999, 'RANSAC confidence', 0.5, 0.999999),
    ParameterSpec('odometry.keyframe_min_parallax_px', 1.0,
                  'median flow below which the keyframe is kept (camera static; pixels)',
                  0.0, 1000.0),
    ParameterSpec('odometry.min_depth_m', 0.1, 'depth readings below this are invalid (m)',
                  0.0, 1000.0),
    ParameterSpec('odometry.max_depth_m', 40.0, 'depth readings above this are invalid (m)',
                  0.0, 10000.0),
    ParameterSpec('odometry.use_motion_prior', True,
                  'centre the search on a constant-velocity prediction'),
    ParameterSpec('odometry.mono_map', True,
                  'monocular VO tracks a local map of triangulated points (PnP), which '
                  'carries the scale; false: two-view steps scaled by constant speed'),
    ParameterSpec('odometry.rgbd_keyframe_tracking', False,
                  'RGB-D frames are tracked against the keyframe until a new one is due (flow, '
                  'tracked share); false: every moving frame becomes the keyframe'),
    ParameterSpec('odometry.rgbd_map', False,
                  'RGB-D VO tracks a local map of depth points (PnP) refined by bundle '
                  'adjustment with depth residuals (experimental); false: PnP on the '
                  "keyframe's depth"),
    ParameterSpec('odometry.hint_map', False,
                  'with a translation hint (wheel odometry), monocular VO keeps its local map '
                  'and adds the hinted distances between keyframes to the bundle adjustment '
                  '(a metric map); false: two-view steps scaled by the hint'),
    ParameterSpec('odometry.hint_sigma_rel', 0.05,
                  'standard deviation of a hinted distance between keyframes in the bundle '
                  'adjustment, as a share of the distance', 1e-4, 10.0),
    ParameterSpec('odometry.depth_sigma_rel', 0.02,
                  'standard deviation of a depth reading in the bundle adjustment, as a share '
                  'of the depth', 1e-4, 10.0),
    ParameterSpec('odometry.map_init_min_angle_deg', 1.0,
                  'a map starts when at least min_matches points have this parallax (deg)',
                  0.0, 90.0),
    ParameterSpec('odometry.map_init_max_homography_ratio', 0.95,
                  'no map start while a homography explains this share of the essential-matrix '
                  'inliers (rotation, distant plane)', 0.0, 1.0),
    ParameterSpec('odometry.map_min_angle_deg', 0.5,
                  'smallest parallax of a new map point (deg)', 0.0, 90.0),
    ParameterSpec('odometry.keyframe_min_angle_deg', 1.0,
                  'median parallax (deg) a monocular keyframe waits for when it builds up over '
                  'three or more frames (slow motion at a high frame rate; a frame that brings '
                  'map_min_angle_deg within two is taken); map_min_angle_deg: never wait',
                  0.0, 90.0),
    ParameterSpec('odometry.keyframe_min_tracked_ratio', 0.6,
                  'new keyframe when fewer of its map points are tracked than this share',
                  0.0, 1.0),
    ParameterSpec('odometry.keyframe_max_flow_ratio', 0.05,
                  'new keyframe when the median flow exceeds this share of the image diagonal',
                  0.0, 1.0),
    ParameterSpec('odometry.ba_window_keyframes', 6,
                  'keyframes in the windowed bundle adjustment (< 3: none)', 0, 100),
    ParameterSpec('odometry.ba_max_iterations', 3,
                  'Levenberg-Marquardt iterations per bundle adjustment', 1, 1000),
    ParameterSpec('odometry.ba_max_points', 350,
                  'map points per bundle adjustment (the most observed ones)', 1, 1000000),
    # --- bag topics (offline evaluation and replay) -----------------------------------------
    ParameterSpec('topics.image', '/camera/image_raw', 'image topic (Image or CompressedImage)'),
    ParameterSpec('topics.camera_info', '/camera/camera_info', 'CameraInfo topic'),
    ParameterSpec('topics.depth', '/camera/depth/image_raw',
                  'depth image topic (16UC1 mm or 32FC1 m); empty to ignore depth'),
    ParameterSpec('topics.ground_truth_pose', '/ground_truth/pose',
                  'ground-truth camera pose topic (PoseStamped, T_world_cam)'),
    ParameterSpec('topics.wheel_odometry', '',
                  'wheel odometry topic (nav_msgs/Odometry) whose distances between frames are '
                  "the monocular VO's translation hints, as visual_odometry_node's wheel_odom "
                  'input; empty: none'),
    ParameterSpec('topics.ground_truth_labels', '/ground_truth/labels',
                  'ground-truth class-label image topic (mono8); empty to ignore'),
    ParameterSpec('topics.ground_truth_depth', '',
                  'ground-truth depth topic for dense evaluation (16UC1 mm or 32FC1 m); '
                  'empty = use topics.depth'),
)

SPECS: Dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETERS}

#: Camera optical frame in the base frame, ``x y z (m) qx qy qz qw``: z forward (optical) =
#: x forward (REP 103 body), the default mount of the odometry node.
DEFAULT_CAMERA_MOUNT_XYZ_QXYZW = (0.0, 0.0, 0.0, -0.5, 0.5, -0.5, 0.5)

#: The robot body frame of ``visual_odometry_node`` (``base_frame_id``, REP 105).
DEFAULT_BASE_FRAME_ID = 'base_link'

#: The odometry output of ``visual_odometry_node`` (``nav_msgs/Odometry``), relative: in the
#: node's namespace. Its ``wheel_odom`` input must be another topic (the node would read its own
#: output as wheel odometry).
ODOMETRY_TOPIC = 'odom'

#: A TF frame id (``odom_frame_id``, ``base_frame_id``): tf2 refuses an empty one and one with
#: a leading ``/`` (ROS 1 style) in lookups, and a space is a typo no frame on TF has.
FRAME_ID_PATTERN = (r'[^/\s]\S*', 'a TF frame id: not empty, no leading / (tf2 refuses it) and '
                    'no spaces')

#: Where ``visual_odometry_node`` takes its camera mount from (``camera_mount_source``): ``tf``
#: looks up ``base_frame_id <- image header.frame_id`` (falling back to the parameter),
#: ``parameter`` uses ``camera_mount_xyz_qxyzw``.
CAMERA_MOUNT_SOURCES = ('tf', 'parameter')

#: Node-local parameters: declared by one node (not in the shared schema), by node name. A
#: parameter file may set them in that node's block or in ``/**``.
_IMAGE_TRANSPORT = ParameterSpec(
    'image_transport', 'raw',
    'transport of the image input: raw subscribes to image (sensor_msgs/Image), compressed to '
    'image/compressed (sensor_msgs/CompressedImage)', choices=IMAGE_TRANSPORTS,
    read_only=True)
NODE_LOCAL_SPECS: Dict[str, Dict[str, ParameterSpec]] = {
    node: {spec.name: spec for spec in specs} for node, specs in {
        'visual_odometry_node': (
            _IMAGE_TRANSPORT,
            ParameterSpec('odom_frame_id', 'odom', 'frame of the odometry (header.frame_id)',
                          read_only=True, pattern=FRAME_ID_PATTERN),
            ParameterSpec('base_frame_id', DEFAULT_BASE_FRAME_ID, 'body frame (child_frame_id); '
                          'not odom_frame_id', read_only=True, pattern=FRAME_ID_PATTERN),
            ParameterSpec('camera_mount_xyz_qxyzw', list(DEFAULT_CAMERA_MOUNT_XYZ_QXYZW),
                          'camera optical frame in the base frame: x y z (m) qx qy qz qw; the '
                          'mount with camera_mount_source parameter, and the fallback of tf',
                          read_only=True),
            ParameterSpec('camera_mount_source', 'tf',
                          'where the camera mount comes from: tf = looked up on TF '
                          "(base_frame_id <- the first image's header.frame_id; needs tf2_ros, "
                          'else, or when the lookup fails, camera_mount_xyz_qxyzw), parameter = '
                          'camera_mount_xyz_qxyzw', choices=CAMERA_MOUNT_SOURCES, read_only=True),
            ParameterSpec('camera_mount_tf_timeout_s', 1.0,
                          'longest wait for the camera mount on TF at the first image (s)',
                          0.0, 30.0, read_only=True),
            ParameterSpec('path_max_length', 1000, 'number of poses kept in the published path',
                          1, 100000),
            ParameterSpec('depth_max_dt_s', 0.02, 'largest stamp difference between a frame '
                          'and the depth image used for it (s)', 0.0, 1.0),
            ParameterSpec('depth_wait_s', 0.1, 'once depth arrives, how long a frame waits for '
                          'its depth image (s); a frame without one runs monocular and is '
                          'counted', 0.0, 1.0),
            ParameterSpec('depth_max_miss_rate', 0.1,
                          'share of frames without a usable depth image (while depth arrives) '
                          'above which /diagnostics reports WARN, per report period', 0.0, 1.0),
            ParameterSpec('rectified_input', False,
                          'the images are already rectified (image_rect): use the camera '
                          'matrix of camera_info.p and ignore its distortion',
                          read_only=True),
            ParameterSpec('publish_tf', True,
                          'broadcast odom -> base_link on TF (needs tf2_ros); turn off when a '
                          'base controller or an EKF publishes it', read_only=True),
            ParameterSpec('depth_transport', 'raw',
                          'transport of depth_in: raw (sensor_msgs/Image) or compressedDepth '
                          '(sensor_msgs/CompressedImage on depth_in/compressedDepth, as '
                          'compressed_depth_image_transport writes it)',
                          choices=DEPTH_TRANSPORTS, read_only=True),
            ParameterSpec('depth_queue_size', 30,
                          'depth messages kept for the stamp lookup (the depth of a frame must '
                          'still be there when the frame is processed)', 1, 1000,
                          read_only=True),
            ParameterSpec('wheel_odom_max_gap_s', 0.2,
                          'wheel_odom (nav_msgs/Odometry) poses further apart than this (s) '
                          'around a frame give it no translation hint', 0.001, 10.0,
                          read_only=True),
            ParameterSpec('wheel_odom_max_speed_mps', 50.0,
                          'a wheel_odom pose further from the previous one than this speed '
                          '(m/s) allows is refused as a glitch (three such poses in a row '
                          'that agree with each other restart the hints from them)', 0.01,
                          1000.0, read_only=True),
        ),
        'matcher_node': (
            _IMAGE_TRANSPORT,
            ParameterSpec('relation_pixel', [-1, -1], 'pixel [x, y] of the older frame drawn on '
                          'relation_image ([-1, -1]: the image centre)'),
        ),
        'dense_node': (_IMAGE_TRANSPORT,),
    }.items()}

#: Standard ROS parameters a parameter file may hold for any node; they are handed to the
#: nodes as they are (``use_sim_time``, ``qos_overrides.<topic>.<entity>.<policy>``, ...).
ROS_PARAMETERS = ('use_sim_time', 'start_type_description_service')
ROS_PARAMETER_PREFIXES = ('qos_overrides.',)


def is_ros_parameter(name: str) -> bool:
    """Whether ``name`` is a standard ROS parameter (passed through, never validated here)."""
    return name in ROS_PARAMETERS or name.startswith(ROS_PARAMETER_PREFIXES)


def defaults() -> Dict[str, Any]:
    """Return a fresh flat dict of every parameter's default."""
    return {spec.name: spec.default for spec in PARAMETERS}


def flatten(tree: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
    """Flatten nested mappings into dotted keys: ``{'a': {'b': 1}} -> {'a.b': 1}``.

    Raises:
        ValueError: one key written twice, flat and nested (``a.b: 1`` and ``a: {b: 2}``):
            which one was meant cannot be told.
    """
    flat: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        items = flatten(value, name + '.').items() if isinstance(value, Mapping) \
            else [(name, value)]
        for dotted, leaf in items:
            if dotted in flat:
                raise ValueError(f'{dotted} is given twice (once flat, once nested): keep one')
            flat[dotted] = leaf
    return flat


def validate(overrides: Mapping[str, Any], base: Optional[Mapping[str, Any]] = None
             ) -> Dict[str, Any]:
    """Return ``base`` (default: defaults) updated with checked ``overrides``.

    Raises:
        ValueError: naming the first unknown key or invalid value.
    """
    config = dict(defaults() if base is None else base)
    for name, value in flatten(overrides).items():
        if name not in SPECS:
            raise ValueError(f'unknown parameter {name!r}; {known_keys_hint(name, SPECS)}')
        config[name] = SPECS[name].validate(value)
    check_distinct_topics({key: value for key, value in sorted(config.items())
                           if key.startswith('topics.') and isinstance(value, str)},
                          SHARED_TOPIC_KEYS)
    return config


#: Pairs of topics.* keys that may name the same topic: the depth input scored as its own ground
#: truth, and ground-truth poses used as the translation hints (an exact scale source).
SHARED_TOPIC_KEYS = (frozenset({'topics.depth', 'topics.ground_truth_depth'}),
                     frozenset({'topics.ground_truth_pose', 'topics.wheel_odometry'}))


def check_distinct_topics(topics: Mapping[str, str], shared: Sequence[frozenset] = ()) -> None:
    """Refuse two inputs naming one topic (they carry different messages).

    Args:
        topics: ``{input name: topic}`` (``topics.*`` keys, ``node_set``'s arguments), in
            the order the message names them; an empty topic (an input switched off) is
            ignored.
        shared: pairs of input names that may name one topic (e.g.
            :data:`SHARED_TOPIC_KEYS`).

    Raises:
        ValueError: naming the two inputs and the topic.
    """
    named = [(name, topic.strip()) for name, topic in topics.items() if topic.strip()]
    for index, (name0, topic0) in enumerate(named):
        for name1, topic1 in named[index + 1:]:
            if topic0 == topic1 and {name0, name1} not in shared:
                raise ValueError(f'{name0} and {name1} are both {topic0!r}; they carry '
                                 'different messages')


def known_keys_hint(name: str, known: Sequence[str]) -> str:
    """Return what to write instead of the unknown key ``name``: the nearest known keys.

    The keys of ``name``'s section when there is no near one (every key when its section is
    unknown too), so a typo gets a short answer, not the whole schema.
    """
    near = difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
    if near:
        return 'did you mean ' + ' or '.join(repr(k) for k in near) + '?'
    section = name.rpartition('.')[0]
    same = sorted(k for k in known if section and k.startswith(section + '.'))
    if same:
        return f'the {section} keys are: {", ".join(same)}'
    sections = sorted({k.partition('.')[0] for k in known})
    return f'known sections and keys: {", ".join(sections)} (every key: config/default.yaml)'


#: Largest configuration file read (bytes); parameter files are a few kilobytes.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of mappings/lists in a configuration file.
MAX_CONFIG_DEPTH = 16


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases or repeated keys, with a bounded nesting depth.

    ROS 2 parameter files use no aliases, and refusing them bounds the work
    (an alias "bomb" of a few hundred bytes expands to billions of entries). A key given twice
    in one mapping is refused: YAML would keep the last one without a word.
    """

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue   # the base class refuses it with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f'key {key!r} is given twice in one mapping', key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent, index):
        if isinstance(self.peek_event(), yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, 'YAML aliases (*name) are not allowed in configuration files',
                event.start_mark)
        self._depth = getattr(self, '_depth', 0) + 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f'nesting deeper than {MAX_CONFIG_DEPTH} levels',
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_config_file(path: Union[str, Path]) -> Mapping[str, Any]:
    """Read a YAML configuration file into a mapping, safely and with bounded work.

    Only regular files up to :data:`MAX_CONFIG_BYTES` are read (a FIFO or device would block or
    never end); YAML is parsed with the safe loader (no Python tags), without aliases and
    at most :data:`MAX_CONFIG_DEPTH` levels deep.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not a regular file, too large, not valid YAML (with the line), a refused
            construct, or not a mapping at the top level.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f'configuration file not found: {path}')
    if not path.is_file():
        raise ValueError(f'{path}: not a regular file (a configuration must be a YAML file)')
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f'{path}: {size} bytes, more than a configuration file can be '
                         f'({MAX_CONFIG_BYTES} bytes)')
    try:
        with open(path, encoding='utf-8') as stream:
            tree = yaml.load(stream, Loader=_ConfigLoader) or {}  # noqa: S506 (safe loader)
    except UnicodeDecodeError as error:
        raise ValueError(f'{path}: not a UTF-8 text file ({error.reason})') from None
    except yaml.YAMLError as error:
        mark = getattr(error, 'problem_mark', None)
        where = f' (line {mark.line + 1}, column {mark.column + 1})' if mark else ''
        problem = getattr(error, 'problem', None) or str(error)
        raise ValueError(f'{path}: not a valid configuration file: {problem}{where}') from None
    if not isinstance(tree, Mapping):
        raise ValueError(f'{path}: expected a mapping at the top level, got '
                         f'{type(tree).__name__}')
    return tree


#: Node-block name of a parameter file that applies to every node.
ALL_NODES = '**'


@dataclass
class ParameterFile:
    """A parameter file as every entry point reads it.

    Attributes:
        config: the shared schema's values over the defaults (flat, validated).
        node_parameters: node name (or :data:`ALL_NODES`) -> node-local values (validated
            against :data:`NODE_LOCAL_SPECS`).
        ros_parameters: node name (or :data:`ALL_NODES`) -> standard ROS parameters
            (:func:`is_ros_parameter`), passed through as they are.
    """

    config: Dict[str, Any]
    node_parameters: Dict[str, Dict[str, Any]]
    ros_parameters: Dict[str, Dict[str, Any]]

    def for_node(self, node_name: str) -> Dict[str, Any]:
        """Return the node-local and ROS parameter values a node of this name starts with.

        ``/**`` values apply to every node that declares them; the node's own block wins.
        """
        local = NODE_LOCAL_SPECS.get(node_name, {})
        values: Dict[str, Any] = {}
        for block in (ALL_NODES, node_name):
            values.update({name: value for name, value in
                           self.node_parameters.get(block, {}).items() if name in local})
            values.update(self.ros_parameters.get(block, {}))
        return values


def _node_blocks(tree: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Return ``{node name or '**': flat parameters}`` of a flat, nested or ROS file."""
    if not any(isinstance(v, Mapping) and 'ros__parameters' in v for v in tree.values()):
        return {ALL_NODES: flatten(tree)}
    blocks: Dict[str, Dict[str, Any]] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and 'ros__parameters' in value:
            node = str(key).rstrip('/').split('/')[-1] or ALL_NODES
            parameters = value['ros__parameters'] or {}
            if not isinstance(parameters, Mapping):
                raise ValueError(f'{key}: ros__parameters must be a mapping of parameter names '
                                 f'to values, got {type(parameters).__name__}')
            blocks.setdefault(node, {}).update(flatten(parameters))
    return blocks


def read_parameter_file(tree: Mapping[str, Any]) -> ParameterFile:
    """Sort the parameters of a configuration tree into schema, node-local and ROS values.

    A ROS 2 parameter file may hold blocks for several nodes (``/**`` for all). In a block of
    one of this package's nodes, or in ``/**``, every key must be a schema key, a node-local
    key of that node (of any node for ``/**``) or a standard ROS parameter; blocks of other
    nodes (a robot-wide file) are skipped. Schema keys apply to every node, as before.

    Raises:
        ValueError: an unknown key (the valid ones are listed) or an invalid value, named.
    """
    schema: Dict[str, Any] = {}
    node_parameters: Dict[str, Dict[str, Any]] = {}
    ros_parameters: Dict[str, Dict[str, Any]] = {}
    for node, values in _node_blocks(tree).items():
        if node != ALL_NODES and node not in NODE_LOCAL_SPECS:
            continue   # another node's block in a robot-wide file
        for name, value in values.items():
            if isinstance(value, list) and len({type(v) for v in value}) > 1:
                raise ValueError(f'{name}: the values of a list must all have one type (write '
                                 '0.0, not 0, among decimals), as ROS 2 parameter files '
                                 'require')
        local = ({name: spec for specs in NODE_LOCAL_SPECS.values()
                  for name, spec in specs.items()} if node == ALL_NODES
                 else NODE_LOCAL_SPECS[node])
        for name, value in values.items():
            if is_ros_parameter(name):
                if name == 'use_sim_time' and not isinstance(value, bool):
                    raise ValueError(f'use_sim_time must be true or false, got {value!r}')
                ros_parameters.setdefault(node, {})[name] = value
            elif name in SPECS:
                schema[name] = value
            elif name in local:
                node_parameters.setdefault(node, {})[name] = local[name].validate(value)
            else:
                where = 'any node (/**)' if node == ALL_NODES else node
                hint = known_keys_hint(name, [*SPECS, *local, *ROS_PARAMETERS])
                raise ValueError(
                    f'unknown parameter {name!r} for {where}; {hint} (node-local keys there: '
                    f'{", ".join(sorted(local)) or "none"}; ROS parameters: '
                    f'{", ".join(ROS_PARAMETERS)}, {", ".join(ROS_PARAMETER_PREFIXES)}*)')
    return ParameterFile(validate(schema), node_parameters, ros_parameters)


def load_parameter_file(path: Optional[Union[str, Path]] = None,
                        overrides: Optional[Mapping[str, Any]] = None) -> ParameterFile:
    """Load a configuration file for any entry point (see :func:`read_parameter_file`).

    Args:
        path: YAML file (read by :func:`read_config_file`), or None for the defaults.
        overrides: flat or nested schema values applied last (e.g. from the command line).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an unreadable file, an unknown key or an invalid value, named.
    """
    parameters = ParameterFile(defaults(), {}, {})
    if path is not None:
        tree = read_config_file(path)
        try:
            parameters = read_parameter_file(tree)
        except ValueError as error:
            raise ValueError(f'{path}: {error}') from None
    if overrides:
        parameters.config = validate(overrides, parameters.config)
    return parameters


def load_config(path: Optional[Union[str, Path]] = None,
                overrides: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Load a YAML configuration (flat, nested or ROS parameter file) over the defaults.

    Node-local and standard ROS parameters in the file are accepted and left out (see
    :func:`load_parameter_file` for them).

    Args:
        path: YAML file (read by :func:`read_config_file`), or None for the defaults.
        overrides: flat or nested values applied last (e.g. from the command line).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an unreadable file, an unknown key or an invalid value, named.
    """
    return load_parameter_file(path, overrides).config


def section(config: Mapping[str, Any], name: str) -> Dict[str, Any]:
    """Return the keys under ``name.`` with the prefix removed (a component's ``conf``)."""
    prefix = name + '.'
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
