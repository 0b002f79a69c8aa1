# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Bad bags: special files refused, damage named and read past, ``complete`` always true."""

import os
from pathlib import Path

from bad_input_support import one_clear_line, run_cli, write_bag
import numpy as np
import pytest
from relperception.cli.main import EXIT_BAD_INPUT
from relperception.data.synthetic_bag import write_synthetic_bag


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    return write_bag(tmp_path_factory)


class TestBags:
    def test_fifo_bag_is_refused(self, tmp_path, caplog):
        for path in (tmp_path / 'fifo.mcap', tmp_path / 'bagdir' / 'bagdir_0.mcap'):
            path.parent.mkdir(exist_ok=True)
            os.mkfifo(path)
            target = path if path.name == 'fifo.mcap' else path.parent
            code, errors = run_cli(['eval', str(target), '-o', str(tmp_path / 'out')], caplog)
            assert code == EXIT_BAD_INPUT
            one_clear_line(errors, 'not a regular file')

    def test_missing_bag_and_debug_traceback(self, tmp_path, caplog):
        code, errors = run_cli(['eval', str(tmp_path / 'nope'), '-o', str(tmp_path)], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, 'does not exist')
        code, errors = run_cli(['--debug', 'eval', str(tmp_path / 'nope'), '-o',
                                str(tmp_path)], caplog)
        assert code == EXIT_BAD_INPUT and errors[0].exc_info

    @staticmethod
    def _damaged_sqlite_bag(folder, start_fraction, pages):
        """Write a 30-frame SQLite 3 bag; overwrite ``pages`` 4 KiB pages from a fraction on."""
        bag = folder / 'bag'
        write_synthetic_bag(bag, frames=30, seed=3, width=160, height=120, storage='sqlite3')
        db_file = next(bag.glob('*.db3'))
        data = bytearray(db_file.read_bytes())
        first = int(len(data) // 4096 * start_fraction) * 4096
        data[first:first + pages * 4096] = b'\xa5' * (pages * 4096)
        db_file.write_bytes(bytes(data))
        return bag

    @pytest.mark.parametrize('start_fraction, pages', [(0.5, 3), (0.5, 8)],
                             ids=['read_fails_midway', 'open_fails'])
    def test_damaged_sqlite_bag_is_read_past_the_damage(self, start_fraction, pages, tmp_path):
        from relperception.data.bag import BagReader
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = self._damaged_sqlite_bag(tmp_path, start_fraction, pages)
        with BagReader(bag) as reader:
            images = [m for m in reader.messages() if m.topic == '/camera/image_raw']
            assert reader.storage_damaged
            assert all('()' not in e for e in reader.errors), reader.errors
        stamps = [m.log_time_ns for m in images]
        assert len(images) >= 28 and stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
        summary = evaluate_bag(bag, tmp_path / 'eval', None, progress=False, plots=False)
        assert summary['frames_read'] >= 28
        # complete is false exactly when the topics eval reads met the damage
        damaged = any('SQLite' in e or 'storage damaged' in e for e in summary['errors'])
        assert summary['complete'] is not damaged
        assert damaged or start_fraction == 0.5 and pages == 3   # the labels' pages only

    def test_damaged_record_inside_an_mcap_chunk_is_reported(self, tmp_path):
        import struct

        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=30, seed=3, width=160, height=120)
        mcap = next(bag.glob('*.mcap'))
        data = bytearray(mcap.read_bytes())
        chunks, offset = [], 8
        while offset < len(data) - 9:   # walk the records: opcode (1 byte), length (8 bytes)
            opcode, = struct.unpack_from('<B', data, offset)
            length, = struct.unpack_from('<Q', data, offset + 1)
            if opcode == 0x06:
                chunks.append(offset)
            if opcode == 0x0F or length > len(data):   # data end
                break
            offset += 9 + length
        assert len(chunks) > 2
        # the first records of a middle chunk (after its 40-byte uncompressed chunk header)
        start = chunks[len(chunks) // 2] + 9 + 40
        data[start:start + 80] = bytes(80)
        mcap.write_bytes(bytes(data))
        summary = evaluate_bag(bag, tmp_path / 'out', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        assert summary['complete'] is False
        assert 0 < summary['frames_read'] < 30
        assert any('could not be read (damaged storage)' in e for e in summary['errors'])

    def test_repeated_image_stamps_are_named_not_tracked(self, tmp_path):
        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.data.synthetic import iter_sequence
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, frames = iter_sequence(num_frames=6, seed=3, width=160, height=120)
        with BagWriter(tmp_path / 'bag') as writer:
            for frame in frames:   # every frame carries the first frame's stamp
                writer.write_camera_info(topics.CAMERA_INFO, 1_000_000_000, camera,
                                         topics.CAMERA_FRAME)
                writer.write_image(topics.IMAGE, 1_000_000_000, frame.rgb, 'rgb8',
                                   topics.CAMERA_FRAME)
        summary = evaluate_bag(tmp_path / 'bag', tmp_path / 'eval', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        assert summary['frames_read'] == 6 and summary['frames_processed'] == 1
        assert summary['frames_skipped'] == 5
        assert sum('stamps repeated or out of order' in e for e in summary['errors']) == 5

    def test_low_range_16bit_images_are_named_and_counted(self, tmp_path):
        import cv2

        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.data.synthetic import iter_sequence
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, frames = iter_sequence(num_frames=4, seed=3, width=160, height=120)
        with BagWriter(tmp_path / 'bag') as writer:
            for frame in frames:   # a 12-bit camera's data in the low bits of mono16
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera,
                                         topics.CAMERA_FRAME)
                grey = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2GRAY).astype(np.uint16) << 4
                writer.write_image(topics.IMAGE, frame.stamp_ns, grey, 'mono16',
                                   topics.CAMERA_FRAME)
        summary = evaluate_bag(tmp_path / 'bag', tmp_path / 'eval', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        assert summary['frames_16bit_low_range'] == 4
        named = [e for e in summary['errors'] if 'values stay below 4096' in e]
        assert len(named) == 1 and 'frames_16bit_low_range' in named[0], summary['errors']

    def test_a_broken_metadata_yaml_does_not_make_an_intact_bag_damaged(self, small_bag,
                                                                        tmp_path):
        import shutil

        from relperception.data.bag import BagReader
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        shutil.copytree(small_bag, bag)
        (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: [\n')
        with BagReader(small_bag) as reader:
            expected = reader.message_counts
        with BagReader(bag) as reader:
            assert reader.message_counts == expected and not reader.storage_damaged
            assert any('through its metadata.yaml' in e and '\n' not in e
                       for e in reader.errors)
        summary = evaluate_bag(bag, tmp_path / 'out', progress=False, plots=False)
        assert summary['complete'] is True and summary['frames_processed'] == 12

    def test_a_camera_that_changes_mid_bag_is_reported(self, tmp_path):
        import dataclasses

        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.data.synthetic import iter_sequence
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, frames = iter_sequence(num_frames=6, seed=3, width=160, height=120)
        zoomed = dataclasses.replace(camera, K=camera.K * [[2], [2], [1]])
        with BagWriter(tmp_path / 'bag') as writer:
            for k, frame in enumerate(frames):
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns,
                                         camera if k < 3 else zoomed, topics.CAMERA_FRAME)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8',
                                   topics.CAMERA_FRAME)
        summary = evaluate_bag(tmp_path / 'bag', tmp_path / 'eval', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        changes = [e for e in summary['errors'] if 'the camera changed' in e]
        assert len(changes) == 1 and f'-> {2 * camera.K[0, 0]:.6g}' in changes[0]

    def test_repeated_ground_truth_stamps_keep_the_first_pose(self, tmp_path):
        from relperception.data import topics
        from relperception.data.bag import BagReader, BagWriter
        from relperception.data.bag_frames import read_ground_truth
        from relperception.data.error_log import ErrorLog
        from relperception.transforms import make_transform

        with BagWriter(tmp_path / 'bag') as writer:
            for k in range(4):   # each pose again, 5 m away, at the same stamp
                stamp = (k + 1) * 100_000_000
                for x in (0.1 * k, 0.1 * k + 5.0):
                    writer.write_pose(topics.GT_POSE, stamp, make_transform(np.eye(3), [x, 0, 0]),
                                      'world')
        errors = ErrorLog()
        with BagReader(tmp_path / 'bag') as reader:
            stamps, poses = read_ground_truth(reader, topics.GT_POSE, errors)
        assert stamps.tolist() == [(k + 1) * 100_000_000 for k in range(4)]
        np.testing.assert_allclose(poses[:, 0, 3], [0.0, 0.1, 0.2, 0.3])
        assert errors.count == 1 and '4 poses repeat the stamp' in errors.kept[0]
        assert '4 at another position, up to 5 m away' in errors.kept[0]

    def test_replay_reads_a_truncated_mcap_as_eval_does(self, small_bag, tmp_path):
        from relperception.data.bag import BagReader
        from relperception.pipeline.live_eval import iter_raw_messages

        truncated = tmp_path / 'truncated.mcap'
        original = next(Path(small_bag).glob('*.mcap')).read_bytes()
        truncated.write_bytes(original[:len(original) * 6 // 10])
        with BagReader(truncated) as reader:
            expected = [(m.topic, m.log_time_ns) for m in reader.messages()]
        damage = []
        played = [(m.topic, m.log_time_ns) for m in iter_raw_messages(truncated, damage=damage)]
        assert played == expected and len(expected) > 10
        assert damage and any('damaged MCAP' in d for d in damage)
