# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Default topic names and frame ids of the bags that relperception writes and reads.

Every converter and the ``synth`` verb write these topics; evaluation and replay read them.

========================  ===============================  ===================================
topic                     type                             content
========================  ===============================  ===================================
``IMAGE``                 sensor_msgs/msg/Image            rgb8 (or mono8 for grey datasets)
``CAMERA_INFO``           sensor_msgs/msg/CameraInfo       intrinsics of ``IMAGE``
``DEPTH``                 sensor_msgs/msg/Image            32FC1 metres, NaN invalid; depth GT
``GT_POSE``               geometry_msgs/msg/PoseStamped    T_world_cam of the optical frame
``GT_LABELS``             sensor_msgs/msg/Image            mono8 class ids
========================  ===============================  ===================================
"""

IMAGE = '/camera/image_raw'
CAMERA_INFO = '/camera/camera_info'
DEPTH = '/camera/depth/image_raw'
GT_POSE = '/ground_truth/pose'
GT_LABELS = '/ground_truth/labels'

CAMERA_FRAME = 'camera_optical_frame'
WORLD_FRAME = 'world'

IMAGE_MSGTYPE = 'sensor_msgs/msg/Image'
COMPRESSED_IMAGE_MSGTYPE = 'sensor_msgs/msg/CompressedImage'
CAMERA_INFO_MSGTYPE = 'sensor_msgs/msg/CameraInfo'
POSE_STAMPED_MSGTYPE = 'geometry_msgs/msg/PoseStamped'


def compressed_topic(topic: str) -> str:
    """Return the ``image_transport`` name of the compressed variant of ``topic``."""
    return topic.rstrip('/') + '/compressed'


#: Suffix of the ``compressed_depth_image_transport`` topic of a depth topic.
COMPRESSED_DEPTH_SUFFIX = '/compressedDepth'


def compressed_depth_topic(topic: str) -> str:
    """Return the ``image_transport`` name of the compressedDepth variant of ``topic``."""
    return topic.rstrip('/') + COMPRESSED_DEPTH_SUFFIX


#: ``metadata.yaml`` ``custom_data`` key where a converter states the ground truth it found
#: (the poses file, or ``none``).
GROUND_TRUTH_KEY = 'relperception.ground_truth'
