# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Write a synthetic sequence with full ground truth as a rosbag2 recording."""

from __future__ import annotations

from relperception.data import topics
from relperception.data.bag import BagWriter
from relperception.data.synthetic import DEFAULT_SEQUENCE_FRAMES, iter_sequence


def write_synthetic_bag(output, frames: int | None = None, seed: int = 0, width: int = 640,
                        height: int = 480, fps: float = 10.0, noise: float = 0.0,
                        storage: str = 'mcap', overwrite: bool = False,
                        speed_ratio: float = 1.0, poses=None) -> dict:
    """Write a synthetic sequence to a bag (see ``relperception.data.topics`` for the names).

    Topics: ``IMAGE`` (rgb8), ``CAMERA_INFO``, ``DEPTH`` (32FC1 metres, exact), ``GT_LABELS``
    (mono8 class ids of ``synthetic.CLASS_NAMES``) and ``GT_POSE`` (PoseStamped ``T_world_cam``),
    all stamped with the frame's time.

    Args:
        output: bag directory to create.
        frames: number of frames (>= 1; default ``DEFAULT_SEQUENCE_FRAMES``, or ``len(poses)``,
            which it must equal when both are given).
        seed: scene, trajectory and noise seed.
        width: image width in pixels.
        height: image height in pixels.
        fps: frame rate in Hz.
        noise: standard deviation of Gaussian image noise in grey levels (RGB only).
        storage: ``'mcap'`` or ``'sqlite3'``.
        overwrite: replace an existing bag instead of raising ``FileExistsError``.
        speed_ratio: fastest / slowest cruise speed along the path (>= 1).
        poses: optional (N, 4, 4) ``T_world_cam`` (metres) to render instead of the scene's own
            path (e.g. a camera that stops or turns in place); checked before the bag is
            created (see ``synthetic.iter_sequence``).

    Returns:
        The :meth:`BagWriter.summary` dict plus ``frames``.

    Raises:
        ValueError: a bad argument (nothing is written).
    """
    if poses is None and frames is None:
        frames = DEFAULT_SEQUENCE_FRAMES
    if frames is not None and frames < 1:
        raise ValueError(f'frames must be >= 1, got {frames}')
    camera, sequence = iter_sequence(num_frames=frames, seed=seed, width=width, height=height,
                                     fps=fps, image_noise_std=noise, speed_ratio=speed_ratio,
                                     poses=poses)
    count = 0
    with BagWriter(output, storage=storage, overwrite=overwrite) as writer:
        for frame in sequence:
            stamp = frame.stamp_ns
            writer.write_image(topics.IMAGE, stamp, frame.rgb, 'rgb8', topics.CAMERA_FRAME)
            writer.write_camera_info(topics.CAMERA_INFO, stamp, camera, topics.CAMERA_FRAME)
            writer.write_image(topics.DEPTH, stamp, frame.depth, '32FC1', topics.CAMERA_FRAME)
            writer.write_image(topics.GT_LABELS, stamp, frame.labels, 'mono8',
                               topics.CAMERA_FRAME)
            writer.write_pose(topics.GT_POSE, stamp, frame.T_world_cam, topics.WORLD_FRAME)
            count += 1
    summary = writer.summary()
    summary['frames'] = count
    return summary
