# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Bad configuration files and command lines through the CLI: one clear line, an exit code."""

import argparse
import logging
import os
from pathlib import Path

from bad_input_support import one_clear_line, run_cli, write_bag
import pytest
from relperception.cli.common import warn_of_empty_config_files
from relperception.cli.main import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED,
                                    main as cli_main)
from relperception.config import load_config, MAX_CONFIG_DEPTH


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    return write_bag(tmp_path_factory)


class TestConfigurationFiles:
    CASES = {
        'syntax': ('matcher: [ncc\n', 'not a valid configuration file'),
        'python_tag': ('matcher: !!python/object/apply:os.system ["touch pwned"]\n',
                       'could not determine a constructor'),
        'nan': ('klt:\n  max_forward_backward_px: .nan\n', 'finite'),
        'infinity': ('odometry:\n  ransac_threshold_px: .inf\n', 'finite'),
        'top_level_list': ('- matcher\n', 'expected a mapping'),
        'unknown_key': ('odometry:\n  no_such_key: 1\n', 'unknown parameter'),
        'even_patch': ('ncc:\n  patch_size: 8\n', 'ncc.patch_size must be odd, got 8'),
        'misspelt_key': ('odometry:\n  ransac_treshold_px: 1.0\n',
                         "did you mean 'odometry.ransac_threshold_px'?"),
        'repeated_key': ('matcher: ncc\nmatcher: loftr\n',
                         "key 'matcher' is given twice in one mapping (line 2"),
        'flat_and_nested': ('ncc.min_score: 0.5\nncc:\n  min_score: 0.9\n',
                            'ncc.min_score is given twice (once flat, once nested)'),
        'number_read_as_text': ('ncc:\n  min_score: 5e-1\n',
                                "reads '5e-1' as text: write 0.5"),
        'ros_parameters_list': ('/**:\n  ros__parameters: [1]\n',
                                'ros__parameters must be a mapping'),
    }

    @pytest.mark.parametrize('case', sorted(CASES))
    def test_refused_with_one_line(self, case, small_bag, tmp_path, caplog):
        text, words = self.CASES[case]
        config = tmp_path / f'{case}.yaml'
        config.write_text(text)
        code, errors = run_cli(['eval', str(small_bag), '-o', str(tmp_path / 'out'),
                                '--config', str(config), '--no-progress'], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, config.name, words)
        assert not (tmp_path / 'pwned').exists() and not Path('pwned').exists()

    def test_alias_bomb_is_refused_before_it_expands(self, tmp_path):
        lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        for previous, name in zip('abcdefgh', 'bcdefghi'):
            lines.append(f'{name}: &{name} [' + ', '.join([f'*{previous}'] * 9) + ']')
        bomb = tmp_path / 'bomb.yaml'
        bomb.write_text('\n'.join(lines) + '\n')
        assert bomb.stat().st_size < 1000   # 9**9 strings once expanded
        with pytest.raises(ValueError, match='aliases'):
            load_config(bomb)

    def test_depth_size_and_encoding_are_bounded(self, tmp_path):
        deep = tmp_path / 'deep.yaml'
        levels = MAX_CONFIG_DEPTH + 2
        deep.write_text('a: ' + '{a: ' * levels + '1' + '}' * levels + '\n')
        with pytest.raises(ValueError, match='nesting deeper'):
            load_config(deep)
        big = tmp_path / 'big.yaml'
        big.write_text('# padding\n' * 200_000)
        with pytest.raises(ValueError, match='more than a configuration file'):
            load_config(big)
        binary = tmp_path / 'binary.yaml'
        binary.write_bytes(b'matcher: \xff\xfe\n')
        with pytest.raises(ValueError, match='UTF-8'):
            load_config(binary)

    def test_a_fifo_is_refused_not_waited_on(self, tmp_path):
        fifo = tmp_path / 'config.yaml'
        os.mkfifo(fifo)
        with pytest.raises(ValueError, match='not a regular file'):
            load_config(fifo)   # opening it would block forever

    def test_valid_file_still_loads(self, tmp_path):
        good = tmp_path / 'good.yaml'
        good.write_text('/**:\n  ros__parameters:\n    odometry:\n      min_matches: 12\n')
        assert load_config(good)['odometry.min_matches'] == 12

    @pytest.mark.parametrize('text', ['', '# tuned for the robot\n\n# (to do)\n', '{}\n'])
    def test_a_file_that_sets_nothing_is_warned_about_once(self, text, small_bag, tmp_path,
                                                           caplog):
        # before, an empty file (not saved, the wrong one) ran with the defaults silently
        config = tmp_path / 'robot.yaml'
        config.write_text(text)
        code, errors = run_cli(['eval', str(small_bag), '-o', str(tmp_path / 'out'),
                                '--config', str(config), '--no-progress'], caplog)
        assert code == 0 and not errors
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                    and 'sets nothing' in r.getMessage()]
        assert warnings == [f'{config} sets nothing (it is empty, or holds only comments): '
                            'running with the defaults']

    def test_a_file_that_sets_something_is_not_warned_about(self, tmp_path, caplog):
        config = tmp_path / 'robot.yaml'
        config.write_text('# tuned\nmatcher: ncc\n')
        with caplog.at_level(logging.WARNING):
            warn_of_empty_config_files(argparse.Namespace(config=str(config)))
            warn_of_empty_config_files(argparse.Namespace(config='fast_seg', params=None))
        assert not caplog.records

    def test_exit_codes_are_documented(self, capsys):
        with pytest.raises(SystemExit):
            cli_main(['--help'])
        text = capsys.readouterr().out
        assert f'{EXIT_INTERRUPTED} interrupted' in text
        assert f'{EXIT_TERMINATED} terminated' in text


class TestConflictingOptions:
    @pytest.mark.parametrize('extra, words', [
        (['--dense-stride', '3'], ('--dense-stride applies with --dense',)),
        (['--gt-scale', '--mode', 'rgbd'], ('--gt-scale', '--mode mono')),
    ])
    def test_eval_refuses_options_it_would_ignore(self, extra, words, small_bag, tmp_path,
                                                  caplog):
        code, errors = run_cli(['eval', str(small_bag), '-o', str(tmp_path / 'out'),
                                '--no-progress', *extra], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, *words)
        assert not (tmp_path / 'out').exists()

    @pytest.mark.parametrize('argv, words', [
        (['export', '--config', 'conv_small', '--random-weights', '--weights', 'w.safetensors',
          '-o', 'x.onnx'], ('--weights', '--random-weights')),
        (['train', 'seg', '--data', 'nowhere', '--ship-half', '-o', 'run'],
         ('--ship-half applies with --ship',)),
        (['compare', '--bags', 'nowhere', '--configs', 'default', '--cpus-per-cell', '4',
          '-o', 'study'], ('--cpus-per-cell applies with --ray',)),
    ])
    def test_options_that_need_another_are_refused(self, argv, words, tmp_path, caplog,
                                                   monkeypatch):
        monkeypatch.chdir(tmp_path)
        code, errors = run_cli(argv, caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, *words)
        assert not any(tmp_path.iterdir())

    @pytest.mark.parametrize('verb', [['eval', 'bag'], ['infer', 'image.png'],
                                      ['train', 'seg', '--data', 'data'],
                                      ['replay', 'bag'], ['demo']])
    def test_an_output_folder_that_is_a_file_is_refused_first(self, verb, tmp_path, caplog,
                                                              monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / 'taken').write_text('mine')
        code, errors = run_cli([*verb, '-o', 'taken'], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, '-o taken exists and is not a folder')
        assert (tmp_path / 'taken').read_text() == 'mine'

    @pytest.mark.parametrize('verb', [['eval', 'bag'], ['infer', 'image.png'], ['demo'],
                                      ['synth', '--frames', '2'], ['convert', 'images', '.'],
                                      ['export', '--config', 'conv_small']])
    def test_an_output_under_a_file_is_refused_first(self, verb, tmp_path, caplog,
                                                     monkeypatch):
        # before, eval ran the whole bag and failed only when it wrote ([Errno 20])
        monkeypatch.chdir(tmp_path)
        (tmp_path / 'notes').write_text('mine')
        name = 'x.onnx' if verb[0] == 'export' else 'x'
        code, errors = run_cli([*verb, '-o', f'notes/{name}'], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, f'-o notes/{name}: notes is a file, not a folder')
        assert (tmp_path / 'notes').read_text() == 'mine'

    def test_each_verb_with_an_output_declares_what_it_writes(self):
        # main checks -o in one place, for the verbs that say whether it is a file or a folder
        import argparse
        import importlib

        from relperception.cli.main import available_verbs
        for verb in available_verbs():
            module = importlib.import_module(f'relperception.cli.{verb.replace("-", "_")}')
            parser = argparse.ArgumentParser()
            module.add_arguments(parser)
            parsers, takes_output = [parser], False
            while parsers:   # train has sub-commands, each with its -o
                actions = parsers.pop()._actions
                takes_output |= any(a.dest == 'output' for a in actions)
                parsers += [p for a in actions if isinstance(a, argparse._SubParsersAction)
                            for p in a.choices.values()]
            declared = sum(getattr(module, flag, False)
                           for flag in ('WRITES_FOLDER', 'WRITES_FILE'))
            assert declared == takes_output, verb

    @pytest.mark.parametrize('argv, message', [
        (['infer', 'x.png', '-o', 'o', '--input-size', '0', '0'],
         'argument --input-size: must be >= 1, got 0'),
        (['eval-pairs', '--synthetic', '1', '-o', 'o', '--epipolar-threshold', '0'],
         'argument --epipolar-threshold: must be > 0, got 0'),
        (['viz', 'match', '--image0', 'a.png', '--image1', 'b.png', '-o', 'o', '--pixel', 'nan',
          '10'],
         'argument --pixel: must be a finite number, got nan'),
        # 1e-300 and inf ended as internal errors (OverflowError); nan ran for a second
        (['replay', 'bag', '-o', 'o', '--rate', '1e-300'],
         'argument --rate: must be in [0.01, 100], got 1e-300'),
        (['run', '--duration', 'nan'], 'argument --duration: must be a finite number, got nan'),
        (['demo', '-o', 'o', '--dense-stride', '0'],   # was a ZeroDivisionError
         'argument --dense-stride: must be >= 1, got 0'),
        (['run', '--duration', '1e300'], 'argument --duration: must be in [0.001, 1e+07]'),
    ])
    def test_bad_numbers_are_usage_errors(self, argv, message, capsys):
        with pytest.raises(SystemExit) as exit_info:
            cli_main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err

    def test_export_size_bounds_in_order(self, tmp_path, caplog):
        code, errors = run_cli(['export', '--config', 'fast_seg', '-o', str(tmp_path / 'm.onnx'),
                                '--min-size', '512x512', '--max-size', '64x64'], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, '--min-size 512x512 is larger than --max-size 64x64')


class TestRunGraphNames:
    @pytest.mark.parametrize('argv, words', [
        (['run', '--namespace', '1abc'], ("--namespace '/1abc' is not a valid ROS namespace",
                                          'starts with a number')),
        (['run', '--namespace', '/a//b'], ('repeated',)),
        # rcl refused these only when the node started, in its own words ("Couldn't parse
        # remap rule ... error not set")
        (['run', '--image-topic', '1abc'], ("image_topic is not a valid ROS topic name: '1abc'",
                                            'must not start with a number')),
        (['run', '--depth-topic', '/camera//depth'], ('depth_topic', 'repeated')),
        (['run', '--image-topic', '/x', '--camera-info-topic', '/x'],
         ("image_topic and camera_info_topic are both '/x'",)),
        # the odometry node used to read the colour images as depth and warn on every frame
        (['run', '--depth-topic', '/camera/image_raw'],
         ("image_topic and depth_topic are both '/camera/image_raw'",)),
        (['run', '--depth-topic', '/d', '--wheel-odom-topic', '/d'],
         ("depth_topic and wheel_odom_topic are both '/d'",)),
    ])
    def test_refused_before_any_node_starts(self, argv, words, caplog):
        code, errors = run_cli([*argv, '--duration', '1'], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, *words)
