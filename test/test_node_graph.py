# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The node-set description, ``relperception run``, the launch file and the Fast DDS profile."""

import argparse
import ast
import importlib.util
import os
from pathlib import Path
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree

from lint_targets import REPO_ROOT
import numpy as np
import pytest

from relperception.cli import run as run_verb
from relperception.config import load_config, SPECS
from relperception.nodes import graph

LAUNCH_FILE = REPO_ROOT / 'launch' / 'perception.launch.py'
PROFILE_FILE = REPO_ROOT / 'config' / 'fastdds_profile.xml'
PRESET_FILE = REPO_ROOT / 'config' / 'ncc_realtime.yaml'
FASTDDS_NS = '{http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles}'


def _by_name(descriptions):
    return {d.name: d for d in descriptions}


class TestNodeSet:

    def test_smoke_default_graph(self):
        nodes = graph.node_set()
        assert [d.name for d in nodes] == ['visual_odometry_node']
        assert all(d.package == 'relperception' and d.executable == d.name for d in nodes)
        assert nodes[0].plugin == 'relperception.nodes.vo_node:VisualOdometryNode'

    def test_correspondences_only_graph(self):
        nodes = graph.node_set(correspondences_only=True, image_topic='/cam/rgb')
        assert [d.name for d in nodes] == ['matcher_node']
        assert nodes[0].plugin == 'relperception.nodes.matcher_node:MatcherNode'
        assert nodes[0].remappings['image'] == '/cam/rgb'
        assert 'depth_transport' not in nodes[0].parameters
        with pytest.raises(ValueError):
            graph.node_set(correspondences_only=True, depth_topic='/cam/depth')

    def test_remappings(self):
        nodes = _by_name(graph.node_set(image_topic='/cam/rgb', camera_info_topic='/cam/info',
                                        depth_topic='/cam/depth'))
        assert nodes['visual_odometry_node'].remappings == {
            'image': '/cam/rgb', 'camera_info': '/cam/info', 'depth_in': '/cam/depth',
            'diagnostics': '/diagnostics'}
        # the outputs stay relative, so they follow the namespace
        assert all('correspondences' not in d.remappings and 'odom' not in d.remappings
                   for d in nodes.values())

    def test_wheel_odometry_input(self):
        odometry = _by_name(graph.node_set(wheel_odom_topic='/base/odom'))[
            'visual_odometry_node']
        assert odometry.remappings['wheel_odom'] == '/base/odom'
        assert 'wheel_odom' not in _by_name(graph.node_set())['visual_odometry_node'].remappings
        with pytest.raises(ValueError, match='wheel_odom_topic'):
            graph.node_set(correspondences_only=True, wheel_odom_topic='/base/odom')
        # the node's own output (odom in its namespace) is not wheel odometry
        for topic, namespace in (('/odom', ''), ('odom', ''), ('/vo/odom', 'vo'), ('odom', 'vo')):
            with pytest.raises(ValueError, match='publishes its own odometry'):
                graph.node_set(wheel_odom_topic=topic, namespace=namespace)
        odometry = _by_name(graph.node_set(wheel_odom_topic='/odom', namespace='vo'))[
            'visual_odometry_node']
        assert odometry.remappings['wheel_odom'] == '/odom'

    def test_without_depth_there_is_no_depth_input(self):
        odometry = _by_name(graph.node_set())['visual_odometry_node']
        assert 'depth_in' not in odometry.remappings

    def test_compressed_transport_and_matcher_parameters(self):
        node = _by_name(graph.node_set(matcher='orb', image_transport='compressed',
                                       image_topic='/cam/rgb'))['visual_odometry_node']
        assert node.parameters == {'image_transport': 'compressed', 'matcher': 'orb',
                                   'depth_transport': 'raw'}
        assert node.remappings['image/compressed'] == '/cam/rgb/compressed'

    def test_compressed_depth_transport(self):
        odometry = _by_name(graph.node_set(depth_topic='/cam/depth',
                                           depth_transport='compressedDepth'))[
            'visual_odometry_node']
        assert odometry.parameters['depth_transport'] == 'compressedDepth'
        assert odometry.remappings['depth_in/compressedDepth'] == '/cam/depth/compressedDepth'
        with pytest.raises(ValueError):
            graph.node_set(depth_transport='theora')

    def test_empty_matcher_keeps_the_configuration_value(self):
        matcher = _by_name(graph.node_set(matcher=''))['visual_odometry_node']
        assert 'matcher' not in matcher.parameters
        values = matcher.parameter_values(load_config(overrides={'matcher': 'klt'}))
        assert values['matcher'] == 'klt'

    def test_namespace_is_normalised(self):
        assert {d.namespace for d in graph.node_set(namespace='robot1/')} == {'/robot1'}
        assert {d.namespace for d in graph.node_set()} == {''}

    def test_ros_arguments_and_pairs_follow_the_remappings(self):
        matcher = graph.node_set(image_topic='/a/b')[0]
        arguments = matcher.ros_arguments()
        assert arguments[0] == '--ros-args'
        pairs = [tuple(arguments[i + 1].split(':=')) for i in range(1, len(arguments), 2)]
        assert pairs == matcher.remapping_pairs()
        assert all(arguments[i] == '-r' for i in range(1, len(arguments), 2))

    def test_parameter_values_order(self):
        config = load_config(overrides={'matcher': 'ncc', 'ncc.patch_size': 11})
        node, = graph.node_set(matcher='klt')
        values = node.parameter_values(config, use_sim_time=True)
        assert values['matcher'] == 'klt'          # node-local wins over the file
        assert values['ncc.patch_size'] == 11
        assert values['use_sim_time'] is True
        assert set(config) <= set(values)

    @pytest.mark.parametrize('kwargs', [
        {'matcher': 'sift'}, {'image_transport': 'theora'}, {'image_topic': ''},
        {'camera_info_topic': 'has space'}, {'depth_topic': '/trailing/'}])
    def test_degenerate_arguments_raise(self, kwargs):
        with pytest.raises(ValueError):
            graph.node_set(**kwargs)

    def test_bad_plugin_string(self):
        description = graph.NodeDescription(name='x', executable='x', plugin='no_colon')
        with pytest.raises(ValueError, match='module:Class'):
            description.load_class()


class TestFastddsProfile:

    def test_xml_has_the_required_transports(self):
        root = ElementTree.parse(PROFILE_FILE).getroot()
        assert root.tag == FASTDDS_NS + 'dds'
        descriptors = {d.findtext(FASTDDS_NS + 'transport_id'): d
                       for d in root.iter(FASTDDS_NS + 'transport_descriptor')}
        kinds = {d.findtext(FASTDDS_NS + 'type'): d for d in descriptors.values()}
        assert set(kinds) == {'SHM', 'UDPv4'}
        assert int(kinds['SHM'].findtext(FASTDDS_NS + 'segment_size')) == 16 * 1024 * 1024
        assert int(kinds['SHM'].findtext(FASTDDS_NS + 'maxMessageSize')) == 4 * 1024 * 1024
        for name in ('sendBufferSize', 'receiveBufferSize'):
            assert int(kinds['UDPv4'].findtext(FASTDDS_NS + name)) == 4 * 1024 * 1024
        participants = list(root.iter(FASTDDS_NS + 'participant'))
        assert len(participants) == 1
        participant = participants[0]
        assert participant.get('is_default_profile') == 'true'
        rtps = participant.find(FASTDDS_NS + 'rtps')
        assert rtps.findtext(FASTDDS_NS + 'useBuiltinTransports').strip() == 'false'
        used = [e.text for e in rtps.find(FASTDDS_NS + 'userTransports')]
        assert sorted(used) == sorted(descriptors)

    def test_profile_path_is_found(self):
        assert graph.fastdds_profile_path().read_bytes() == PROFILE_FILE.read_bytes()

    def test_apply_sets_the_variable(self):
        environ = {}
        path = graph.apply_fastdds_profile(environ)
        assert environ == {graph.FASTDDS_PROFILE_ENV: path, graph.FASTDDS_QOS_FROM_XML_ENV: '1'}
        # The source tree's file, or its installed copy under colcon.
        assert Path(path).read_bytes() == PROFILE_FILE.read_bytes()

    def test_profile_frees_sample_buffers(self):
        # The reader memory policy that returns an oversized sample's buffer; rmw_fastrtps
        # applies it only with the variable that fastdds_environment sets for this profile.
        root = ElementTree.parse(PROFILE_FILE).getroot()
        readers = root.findall(f'.//{FASTDDS_NS}data_reader')
        default = [r for r in readers if r.get('is_default_profile') == 'true']
        assert len(default) == 1
        assert default[0].find(FASTDDS_NS + 'historyMemoryPolicy').text == 'DYNAMIC'
        builtin = root.find(f'.//{FASTDDS_NS}participant/{FASTDDS_NS}rtps/{FASTDDS_NS}builtin')
        assert builtin.find(FASTDDS_NS + 'readerHistoryMemoryPolicy').text == \
            'PREALLOCATED_WITH_REALLOC'   # discovery data larger than 5000 bytes
        assert graph.fastdds_environment('/x/fastdds_profile.xml') == {
            graph.FASTDDS_PROFILE_ENV: '/x/fastdds_profile.xml',
            graph.FASTDDS_QOS_FROM_XML_ENV: '1'}
        assert graph.fastdds_environment('/x/mine.xml') == {
            graph.FASTDDS_PROFILE_ENV: '/x/mine.xml'}

    def test_user_choice_wins_and_opt_out(self):
        environ = {graph.FASTDDS_PROFILE_ENV: '/mine.xml'}
        assert graph.apply_fastdds_profile(environ) == '/mine.xml'
        assert environ == {graph.FASTDDS_PROFILE_ENV: '/mine.xml'}
        environ = {}
        assert graph.apply_fastdds_profile(environ, enabled=False) is None
        assert environ == {}


class TestPreset:

    def test_ncc_realtime_preset_loads(self):
        if not PRESET_FILE.is_file():
            pytest.skip('config/ncc_realtime.yaml not written yet')
        config = load_config(PRESET_FILE)
        assert config['matcher'] == 'ncc'
        assert set(config) == set(SPECS)
        assert config != load_config()


class TestLaunchFile:

    def test_launch_file_builds_from_node_set(self):
        tree = ast.parse(LAUNCH_FILE.read_text(encoding='utf-8'))
        called = {n.func.id for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert 'node_set' in called and 'OpaqueFunction' in called
        imports = {(n.module, a.name) for n in ast.walk(tree)
                   if isinstance(n, ast.ImportFrom) for a in n.names}
        assert ('relperception.nodes.graph', 'node_set') in imports
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert 'generate_launch_description' in functions

    def test_launch_arguments_match_run_options(self):
        tree = ast.parse(LAUNCH_FILE.read_text(encoding='utf-8'))
        declared = {n.args[0].value for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and getattr(n.func, 'id', '') ==
                    'DeclareLaunchArgument' and isinstance(n.args[0], ast.Constant)}
        # the odometry node's frames, TF and mount: one argument per name of the list
        loops = [n for n in ast.walk(tree) if isinstance(n, ast.comprehension)
                 and getattr(n.iter, 'id', '') == 'LAUNCH_ODOMETRY_PARAMETERS']
        assert loops, 'the launch file declares no argument per LAUNCH_ODOMETRY_PARAMETERS'
        assert {'log_level', 'respawn'} <= declared
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        options = {a.dest for a in parser._actions}
        shared = {'image_topic', 'camera_info_topic', 'depth_topic', 'image_transport',
                  'depth_transport', 'matcher', 'namespace', 'use_sim_time'}
        assert shared <= declared and shared <= options
        assert {'config_file', 'fastdds_profile', 'one_process', 'use_composition'} <= declared

    def test_launch_odometry_parameters(self):
        values = graph.launch_odometry_parameters({
            'odom_frame_id': 'odom_vo', 'base_frame_id': '', 'publish_tf': 'False',
            'camera_mount_xyz_qxyzw': '0.1, 0 0.2 -0.5 0.5 -0.5 0.5', 'rectified_input': '',
            'camera_mount_source': 'parameter'})
        assert values == {'odom_frame_id': 'odom_vo', 'publish_tf': False,
                          'camera_mount_xyz_qxyzw': [0.1, 0.0, 0.2, -0.5, 0.5, -0.5, 0.5],
                          'camera_mount_source': 'parameter'}
        for arguments, word in (({'publish_tf': 'ture'}, 'true or false'),
                                ({'camera_mount_source': 'urdf'}, 'one of'),
                                ({'camera_mount_xyz_qxyzw': '1 2 3'}, '7 numbers'),
                                ({'camera_mount_xyz_qxyzw': 'a b'}, 'numbers'),
                                ({'path_max_length': '5'}, 'not a launch argument')):
            with pytest.raises(ValueError, match=word):
                graph.launch_odometry_parameters(arguments)

    def test_boolean_arguments_refuse_other_words(self):
        for word in ('true', 'True', '1', 'yes', 'on'):
            assert graph.launch_flag('dense', word) is True
        for word in ('false', 'FALSE', '0', 'no', 'off', ' false '):
            assert graph.launch_flag('dense', word) is False
        for word in ('ture', 'maybe', '', '2'):
            with pytest.raises(ValueError, match='dense must be true or false'):
                graph.launch_flag('dense', word)
        assert graph.launch_odometry_parameters({'publish_tf': 'no'}) == {'publish_tf': False}

    def test_launch_file_reads_every_boolean_argument_strictly(self):
        # dense:=ture used to start without dense_node, silently: every argument whose
        # default is 'false' must go through launch_flag (FLAGS), which refuses a typo
        tree = ast.parse(LAUNCH_FILE.read_text(encoding='utf-8'))
        flags = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], 'id', '') == 'FLAGS')
        booleans = {n.args[0].value for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and getattr(n.func, 'id', '') ==
                    'DeclareLaunchArgument' and any(
                        k.arg == 'default_value' and getattr(k.value, 'value', None) == 'false'
                        for k in n.keywords)}
        assert booleans and booleans == set(flags)
        called = {n.func.id for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert 'launch_flag' in called

    def test_launch_choices_and_defaults_come_from_the_schema(self):
        # the matcher and transport names and the topic defaults live in relperception.config;
        # the launch file spells none of them
        tree = ast.parse(LAUNCH_FILE.read_text(encoding='utf-8'))
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        names = set(graph.MATCHERS + graph.IMAGE_TRANSPORTS + graph.DEPTH_TRANSPORTS) - {'raw'}
        assert not names & literals
        assert SPECS['topics.image'].default not in literals
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        choices = {a.dest: tuple(a.choices) for a in parser._actions if a.choices}
        assert choices['matcher'] == graph.MATCHERS == SPECS['matcher'].choices
        assert choices['image_transport'] == graph.IMAGE_TRANSPORTS
        assert choices['depth_transport'] == graph.DEPTH_TRANSPORTS

    def test_launch_description_when_launch_is_installed(self):
        pytest.importorskip('launch_ros')
        packages = pytest.importorskip('ament_index_python.packages')
        try:
            packages.get_package_share_directory('relperception')
        except (packages.PackageNotFoundError, ValueError, LookupError):
            pytest.skip('relperception is not in an ament index (pip-only install): the '
                        'launch file resolves its config from the package share')
        spec = importlib.util.spec_from_file_location('perception_launch', LAUNCH_FILE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        description = module.generate_launch_description()
        names = {a.name for a in description.get_launch_arguments()}
        assert {'image_topic', 'matcher', 'fastdds_profile'} <= names


class TestRunVerb:

    def test_odometry_params_option(self):
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        args = parser.parse_args(['--odometry-param', 'publish_tf=false',
                                  '--odometry-param', 'odom_frame_id=odom_vo'])
        pairs = dict(run_verb._name_value(text) for text in args.odometry_param)
        expected = {'publish_tf': False, 'odom_frame_id': 'odom_vo'}
        assert graph.launch_odometry_parameters(pairs) == expected
        with pytest.raises(ValueError, match='NAME=VALUE'):
            run_verb._name_value('publish_tf')

    def test_empty_wheel_odom_topic_overrides_the_parameter_file(self, tmp_path):
        # one_process:=true passes --wheel-odom-topic '' (no wheel odometry, as the separate
        # processes have): the parameter file's topics.wheel_odometry used to win over it
        params = tmp_path / 'robot.yaml'
        params.write_text('/**:\n  ros__parameters:\n    topics:\n'
                          '      wheel_odometry: /base/odom\n      depth: /cam/depth\n')
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        from_file, _ = run_verb.node_descriptions(parser.parse_args(['--config', str(params)]))
        assert from_file[0].remappings['wheel_odom'] == '/base/odom'
        assert from_file[0].remappings['depth_in'] == '/cam/depth'
        off, _ = run_verb.node_descriptions(parser.parse_args(
            ['--config', str(params), '--wheel-odom-topic', '', '--depth-topic', '']))
        assert 'wheel_odom' not in off[0].remappings and 'depth_in' not in off[0].remappings

    def test_parser_defaults(self):
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        args = parser.parse_args([])
        assert args.matcher is None and args.image_transport == 'raw'
        assert args.duration is None and not args.no_fastdds_profile
        with pytest.raises(SystemExit):
            parser.parse_args(['--matcher', 'sift'])

    def test_bad_duration_and_config_are_rejected(self, tmp_path):
        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        with pytest.raises(SystemExit):   # a usage error, at parsing
            parser.parse_args(['--duration', '0'])
        bad = tmp_path / 'bad.yaml'
        bad.write_text('/**:\n  ros__parameters:\n    ncc:\n      patch_size: 1000\n')
        with pytest.raises(ValueError, match='patch_size'):
            run_verb.run(parser.parse_args(['--config', str(bad), '--duration', '1']))


# --- real rclpy ------------------------------------------------------------------------------

class EchoNode:
    """Placeholder replaced by a real rclpy node class when rclpy is importable."""


def _define_echo_node():
    from rclpy.node import Node

    class _EchoNode(Node):
        """A node with one parameter, to check what create_node gives a node class."""

        def __init__(self, **kwargs):
            super().__init__('echo_node', **kwargs)
            self.declare_parameter('ncc.patch_size', 9)

    globals()['EchoNode'] = _EchoNode


@pytest.fixture
def ros_context():
    rclpy = pytest.importorskip('rclpy')
    os.environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    context.try_shutdown()


class TestCreateNode:

    def test_remappings_namespace_and_parameters_reach_the_node(self, ros_context):
        _define_echo_node()
        description = graph.NodeDescription(
            name='echo_node', executable='echo_node', plugin='test_node_graph:EchoNode',
            remappings={'image': '/cam/rgb'}, namespace='/test_echo')
        config = load_config(overrides={'ncc.patch_size': 13})
        node = graph.create_node(description, ros_context, config, use_sim_time=True)
        try:
            assert node.get_fully_qualified_name() == '/test_echo/echo_node'
            assert node.resolve_topic_name('image') == '/cam/rgb'
            assert node.resolve_topic_name('odom') == '/test_echo/odom'
            assert node.get_parameter('ncc.patch_size').value == 13
            assert node.get_parameter('use_sim_time').value is True
        finally:
            node.destroy_node()

    def test_parameter_file_values_reach_the_odometry_node(self, ros_context, tmp_path):
        import yaml
        from relperception.config import load_parameter_file

        path = tmp_path / 'robot.yaml'
        path.write_text(yaml.safe_dump({
            '/**': {'ros__parameters': {'use_sim_time': True}},
            'visual_odometry_node': {'ros__parameters': {
                'publish_tf': False, 'odom_frame_id': 'odom_vo', 'base_frame_id': 'body',
                'camera_mount_xyz_qxyzw': [0.1, 0.0, 0.2, -0.5, 0.5, -0.5, 0.5],
                'qos_overrides': {'/cam/rgb': {'subscription': {'depth': 2}}}}}}))
        parameters = load_parameter_file(path)
        description = graph.node_set(image_topic='/cam/rgb', namespace='/test_pf')[0]
        description = description.with_parameter_file(parameters)
        node = graph.create_node(description, ros_context, parameters.config)
        try:
            assert node.get_parameter('publish_tf').value is False
            assert node.odom_frame_id == 'odom_vo' and node.base_frame_id == 'body'
            assert node.get_parameter('use_sim_time').value is True
            np.testing.assert_allclose(node.T_base_cam[:3, 3], [0.1, 0.0, 0.2])
            assert node.get_parameter(
                'qos_overrides./cam/rgb.subscription.depth').value == 2
            assert node._tf_broadcaster is None
        finally:
            node.destroy_node()

    def test_run_node_set_stops_on_event(self):
        pytest.importorskip('rclpy')
        _define_echo_node()
        description = graph.NodeDescription(
            name='echo_node', executable='echo_node', plugin='test_node_graph:EchoNode',
            namespace=f'/test_{uuid.uuid4().hex[:8]}')
        stop = threading.Event()
        result = {}
        thread = threading.Thread(target=lambda: result.update(
            rc=graph.run_node_set([description], stop_event=stop)))
        start = time.monotonic()
        thread.start()
        time.sleep(0.5)
        stop.set()
        thread.join(timeout=15)
        assert not thread.is_alive() and result == {'rc': 0}
        assert time.monotonic() - start < 15


_UNRESOLVED_NODE_NAME = '_NODE_NAME_UNKNOWN_'


def _nodes_available():
    return importlib.util.find_spec('relperception.nodes.vo_node') is not None


class TestRunProcess:

    @pytest.mark.slow
    @pytest.mark.parametrize('topics_from', ['options', 'parameter file'])
    def test_run_starts_the_node_set(self, ros_context, topics_from, tmp_path):
        if not _nodes_available():
            pytest.skip('visual_odometry_node not written yet')
        import rclpy

        namespace = f'/test_{uuid.uuid4().hex[:8]}'
        environ = dict(os.environ)
        for name in (graph.FASTDDS_PROFILE_ENV, graph.FASTDDS_PROFILE_ENV_NEW):
            environ.pop(name, None)
        duration_s = 6.0
        if topics_from == 'options':
            topics = ['--image-topic', namespace + '/image',
                      '--camera-info-topic', namespace + '/camera_info']
        else:   # the topics.* keys eval and replay read
            params = tmp_path / 'topics.yaml'
            params.write_text(f'topics:\n  image: {namespace}/image\n'
                              f'  camera_info: {namespace}/camera_info\n')
            topics = ['--config', str(params)]
        process = subprocess.Popen(
            [sys.executable, '-m', 'relperception.cli.main', 'run', '--duration',
             str(duration_s), '--namespace', namespace, *topics],
            cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        node = rclpy.create_node('run_observer', context=ros_context)
        seen = set()
        subscribers = {topic: set() for topic in ('/image', '/camera_info', '/correspondences')}
        try:
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and process.poll() is None:
                seen |= {(ns, name) for name, ns in node.get_node_names_and_namespaces()
                         if ns == namespace}
                # DDS can announce an endpoint before the participant data that names its
                # node; such an endpoint reads _NODE_NAME_UNKNOWN_ until discovery catches up
                for topic in subscribers:
                    subscribers[topic] |= {
                        info.node_name
                        for info in node.get_subscriptions_info_by_topic(namespace + topic)
                    } - {_UNRESOLVED_NODE_NAME}
                if len(seen) == 1 and subscribers['/image'] and subscribers['/camera_info']:
                    break
                time.sleep(0.1)
            out, err = process.communicate(timeout=60)
        finally:
            node.destroy_node()
            if process.poll() is None:
                process.kill()
        assert seen == {(namespace, 'visual_odometry_node')}, err[-3000:]
        # the remappings reached the node: it subscribes the given topics
        assert subscribers == {'/image': {'visual_odometry_node'},
                               '/camera_info': {'visual_odometry_node'},
                               '/correspondences': set()}
        assert process.returncode == 0, err[-3000:]
        assert f'Fast DDS profile: {graph.fastdds_profile_path()}' in err

    @pytest.mark.slow
    def test_sigterm_stops_cleanly(self):
        pytest.importorskip('rclpy')
        if not _nodes_available():
            pytest.skip('visual_odometry_node not written yet')
        environ = dict(os.environ, AMENT_PREFIX_PATH=os.environ.get('AMENT_PREFIX_PATH',
                                                                    sys.prefix))
        for name in (graph.FASTDDS_PROFILE_ENV, graph.FASTDDS_PROFILE_ENV_NEW):
            environ.pop(name, None)
        process = subprocess.Popen(
            [sys.executable, '-m', 'relperception.cli.main', 'run', '--no-fastdds-profile',
             '--namespace', f'/test_{uuid.uuid4().hex[:8]}'],
            cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 30.0
            started = False
            while time.monotonic() < deadline and process.poll() is None and not started:
                started = any('started /' in line
                              and line.rstrip().endswith('/visual_odometry_node')
                              for line in list(lines))
                time.sleep(0.1)
            process.terminate()
            process.wait(timeout=30)
            reader.join(timeout=5)
        finally:
            if process.poll() is None:
                process.kill()
        err = ''.join(lines)
        assert started, err[-3000:]
        assert process.returncode == 0, err[-3000:]
        assert 'received SIGTERM, shutting down' in err
        assert 'Fast DDS profile: none' in err
