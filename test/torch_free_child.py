# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Child process of ``test_torch_free_runtime.py``: the onnxruntime paths with torch blocked.

Run as ``python torch_free_child.py ARGS.json``. Before anything else is imported, a
``sys.meta_path`` finder makes ``import torch`` (and ``torchvision``, ``kornia``) raise
``ModuleNotFoundError``, as on an installation without them. Then, with the ONNX files the
parent exported (``ARGS.json``: ``dense_model``, ``dense_onnx``, ``loftr_onnx``,
``loftr_two_stage``, ``width``, ``height``, ``frames``, ``seed``), it runs the dense pipeline,
the LoFTR matcher (single graph and two-stage), ``VOPipeline`` with ``matcher: loftr`` and the
three nodes once each with rclpy, and prints one JSON object on stdout: their outputs, the
blocked import attempts and whether torch ended up in ``sys.modules``. Only standard-library
modules are imported before the finder is in place.
"""

import json
import logging
from pathlib import Path
import sys
import traceback

BLOCKED = ('torch', 'torchvision', 'kornia')


class BlockTorch:
    """Meta path finder that refuses torch, torchvision and kornia (records the attempts)."""

    def __init__(self):
        """Start with no attempt recorded."""
        self.attempts = []

    def find_spec(self, name, path=None, target=None):
        """Raise ModuleNotFoundError for a blocked top-level package, else defer (None)."""
        if name.partition('.')[0] in BLOCKED:
            self.attempts.append(name)
            raise ModuleNotFoundError(f'No module named {name!r} (blocked by the torch-free '
                                      f'runtime test)', name=name)
        return None


BLOCKER = BlockTorch()
sys.meta_path.insert(0, BLOCKER)

from conftest import wait_for  # noqa: E402, I100
from node_harness import camera_info_msg, image_msg, NodeHarness  # noqa: E402
import rclpy  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from relperception.config import load_config, section  # noqa: E402
from relperception.core_types import Frame  # noqa: E402
from relperception.data.correspondences import matches_from_cloud  # noqa: E402
from relperception.data.messages import transform_from_pose_msg  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import image_to_numpy, to_mono8  # noqa: E402
from relperception.matching.base import build_matcher  # noqa: E402
from relperception.nodes.dense_node import DenseNode  # noqa: E402
from relperception.nodes.matcher_node import MatcherNode  # noqa: E402
from relperception.nodes.ros_messages import header_msg, image_msg_from_array  # noqa: E402
from relperception.nodes.vo_node import VisualOdometryNode  # noqa: E402
from relperception.pipeline.dense_pipeline import DensePipeline  # noqa: E402
from relperception.pipeline.vo_pipeline import VOPipeline  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, PointCloud2  # noqa: E402


def dense_config(args):
    """Return the flat ``dense.*`` configuration of the exported tiny dense model."""
    return {'dense.model': args['dense_model'], 'dense.weights': '',
            'dense.backend': 'onnxruntime', 'dense.onnx_path': args['dense_onnx']}


def loftr_config(args, onnx_path):
    """Return the flat configuration of ``matcher: loftr`` on an exported file."""
    return load_config(overrides={
        'matcher': 'loftr', 'loftr.preset': 'loftr_lite', 'loftr.backend': 'onnxruntime',
        'loftr.onnx_path': onnx_path, 'loftr.input_width': args['width'],
        'loftr.input_height': args['height']})


def matches_json(matches):
    """Return a Matches object as lists."""
    return {'keypoints0': matches.keypoints0.tolist(), 'keypoints1': matches.keypoints1.tolist(),
            'confidence': matches.confidence.tolist()}


def run_pipelines(args, camera, frames):
    """Return the outputs of the dense pipeline, the matcher and the VO pipeline."""
    dense = DensePipeline(dense_config(args)).run(frames[0].rgb)
    out = {'dense': {'depth': dense.depth.tolist(), 'raw_depth': dense.raw_depth.tolist(),
                     'labels': dense.labels.tolist()}}
    grey = [to_mono8(frame.rgb, 'rgb8') for frame in frames[:2]]
    for name in ('loftr_onnx', 'loftr_two_stage'):
        config = loftr_config(args, args[name])
        matcher = build_matcher('loftr', section(config, 'loftr'))
        out[name] = matches_json(matcher.match(*grey))
    pipeline = VOPipeline(loftr_config(args, args['loftr_onnx']))
    results = [pipeline.process(Frame(f.rgb, f.stamp_ns, camera, f.depth)) for f in frames]
    pipeline.odometry.close()
    out['vo'] = {'status': [r.status for r in results],
                 'poses': [r.T_world_cam.tolist() for r in results]}
    return out


def run_dense_node(context, args, frames):
    """Spin dense_node on one image; return its depth and labels."""
    config = dense_config(args)
    run = NodeHarness(context, DenseNode, [Parameter(k, value=v) for k, v in config.items()])
    received = {'depth': [], 'labels': []}
    try:
        for name, messages in received.items():
            run.probe.create_subscription(Image, name, messages.append, 10)
        publisher = run.probe.create_publisher(Image, 'image', 10)
        run.start(lambda: publisher.get_subscription_count() > 0
                  and run.node._depth.get_subscription_count() > 0)
        run.publish_and_wait(publisher, image_msg(frames[0].rgb, frames[0].stamp_ns),
                             timeout=30.0)
        assert wait_for(lambda: all(received.values())), 'dense_node published nothing'
        return {name: image_to_numpy(messages[0]).tolist()
                for name, messages in received.items()}
    finally:
        run.close()


def run_matcher_node(context, args, frames):
    """Spin matcher_node (LoFTR two-stage) on two images; return its correspondences.

    Someone listens to ``relation_image``: the node then asks for LoFTR attention, which the
    onnxruntime backend refuses (a logged error) without trying to import torch.
    """
    config = loftr_config(args, args['loftr_two_stage'])
    names = ('matcher',) + tuple(f'loftr.{k}' for k in section(config, 'loftr'))
    run = NodeHarness(context, MatcherNode, [Parameter(n, value=config[n]) for n in names])
    clouds = []
    try:
        run.probe.create_subscription(PointCloud2, 'correspondences', clouds.append, 10)
        # a relation_image subscriber makes the node try LoFTR attention (torch backend only)
        run.probe.create_subscription(Image, 'relation_image', lambda msg: None, 10)
        publisher = run.probe.create_publisher(Image, 'image', 10)
        run.start(lambda: publisher.get_subscription_count() > 0
                  and run.node._correspondences.get_subscription_count() > 0
                  and run.node._relation_image.get_subscription_count() > 0)
        for frame in frames[:2]:
            run.publish_and_wait(publisher, image_msg(frame.rgb, frame.stamp_ns), timeout=30.0)
        assert wait_for(lambda: len(clouds) == 1), 'matcher_node published no correspondences'
        matches, stamp0_ns = matches_from_cloud(clouds[0])
        return {**matches_json(matches), 'stamp0_ns': stamp0_ns}
    finally:
        run.close()


def run_vo_node(context, args, camera, frames):
    """Spin visual_odometry_node (LoFTR, RGB-D) on the frames; return the odometry poses."""
    config = loftr_config(args, args['loftr_onnx'])
    names = ('matcher',) + tuple(f'loftr.{k}' for k in section(config, 'loftr'))
    run = NodeHarness(context, VisualOdometryNode,
                      [Parameter(n, value=config[n]) for n in names])
    odom = []
    try:
        from nav_msgs.msg import Odometry

        run.probe.create_subscription(Odometry, 'odom', odom.append, 50)
        publishers = {'image': run.probe.create_publisher(Image, 'image', 10),
                      'camera_info': run.probe.create_publisher(CameraInfo, 'camera_info', 10),
                      'depth_in': run.probe.create_publisher(Image, 'depth_in', 10)}
        run.start(lambda: all(p.get_subscription_count() > 0 for p in publishers.values())
                  and run.node._odom.get_subscription_count() > 0)
        publishers['camera_info'].publish(camera_info_msg(camera))
        assert wait_for(lambda: run.node.camera is not None), 'no camera_info'
        for count, frame in enumerate(frames, start=1):
            publishers['depth_in'].publish(image_msg_from_array(
                frame.depth, '32FC1', header_msg(frame.stamp_ns, 'camera')))
            assert wait_for(lambda n=count: run.node.depth.received >= n), 'depth lost'
        for frame in frames:
            run.publish_and_wait(publishers['image'], image_msg(frame.rgb, frame.stamp_ns),
                                 timeout=30.0)
        assert wait_for(lambda: len(odom) == len(frames)), f'{len(odom)} odom messages'
        return {'poses': [transform_from_pose_msg(m.pose.pose).tolist() for m in odom]}
    finally:
        run.close()


def main(argv):
    """Run everything; print the JSON results; return the exit status."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = json.loads(Path(argv[1]).read_text(encoding='utf-8'))
    result = {'preloaded': sorted(m for m in sys.modules if m.partition('.')[0] in BLOCKED)}
    camera, frames = iter_sequence(args['frames'], seed=args['seed'], width=args['width'],
                                   height=args['height'])
    frames = list(frames)
    try:
        result.update(run_pipelines(args, camera, frames))
        context = rclpy.Context()
        rclpy.init(context=context)
        try:
            result['dense_node'] = run_dense_node(context, args, frames)
            result['matcher_node'] = run_matcher_node(context, args, frames)
            result['vo_node'] = run_vo_node(context, args, camera, frames)
        finally:
            context.try_shutdown()
    except Exception:  # noqa: BLE001 - reported to the parent test, which fails with it
        result['error'] = traceback.format_exc()
    result['blocked_attempts'] = BLOCKER.attempts
    result['torch_modules'] = sorted(m for m in sys.modules if m.partition('.')[0] in BLOCKED)
    sys.stdout.write(json.dumps(result) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
