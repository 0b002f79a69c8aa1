# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Read and write rosbag2 bags (MCAP or SQLite 3) with ``rosbags``, without a ROS installation.

Messages are built and parsed with the ``rosbags`` ROS 2 Jazzy typestore. Header stamps and bag
log times of everything :class:`BagWriter` writes are the same integer nanoseconds.

:class:`BagReader` reads rosbag2 directories and bare ``.mcap`` / ``.db3`` files. A message that
fails to deserialise is skipped and recorded in ``reader.errors``. A truncated MCAP file (a
recording that was killed) has no summary and no footer; rosbags refuses it, so the reader falls
back to a sequential scan of the intact records (``salvage=True``) and yields every message
before the damage, recording the damage in ``reader.errors``. A SQLite 3 bag whose database is
damaged is read by rosbags up to the damage (or not at all, when rosbags cannot open it), then
row by row with Python's ``sqlite3``: every row that can still be read is yielded, in time
order, and the unreadable ones are counted. A split bag (``ros2 bag record --max-bag-size``)
whose ``metadata.yaml`` lists a storage file that is missing is read from the file that is
left, and the missing file is named in ``reader.errors``. ``reader.storage_damaged`` is True
whenever any of this happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from logging import getLogger
from pathlib import Path
from shutil import rmtree
import sqlite3
from struct import error as StructError
from struct import unpack

import numpy as np
from rosbags import typesys
from rosbags.interfaces import MessageDefinitionFormat
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.rosbag2.errors import ReaderError, WriterError
from rosbags.rosbag2.storage_mcap import McapReader, Statistics
import yaml

from ..core_types import Camera
from ..data import topics
from ..data.messages import camera_info_fields, ns_to_sec_nanosec, pose_fields

logger = getLogger(__name__)

PathLike = str | Path
_STORAGES = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
_BAG_FILE_SUFFIXES = ('.mcap', '.db3')


def default_typestore():
    """Return the ``rosbags`` typestore of ROS 2 Jazzy used to build and parse messages."""
    return typesys.get_typestore(typesys.Stores.ROS2_JAZZY)


@dataclass(frozen=True)
class BagMessage:
    """One deserialised bag message.

    Attributes:
        topic: topic name.
        msgtype: message type, e.g. ``sensor_msgs/msg/Image``.
        log_time_ns: bag (receive) time in integer nanoseconds.
        msg: the deserialised ``rosbags`` message object.
    """

    topic: str
    msgtype: str
    log_time_ns: int
    msg: object


@dataclass(frozen=True)
class RawBagMessage:
    """One serialised bag message.

    Attributes:
        topic: topic name.
        msgtype: message type, e.g. ``sensor_msgs/msg/Image``.
        log_time_ns: bag log time, integer nanoseconds.
        data: the CDR bytes as stored (4-byte encapsulation header first), ready for
            ``Publisher.publish(bytes)``.
    """

    topic: str
    msgtype: str
    log_time_ns: int
    data: bytes


class BagWriter:
    """Write a rosbag2 bag; use as a context manager.

    Args:
        path: bag directory to create (rosbag2 layout: ``metadata.yaml`` + one storage file).
        storage: ``'mcap'`` or ``'sqlite3'``.
        overwrite: replace an existing bag at ``path``; a non-empty directory that is not a bag
            (no ``metadata.yaml``) is never deleted.

    Raises:
        FileExistsError: if ``path`` exists and ``overwrite`` is false.
        ValueError: for an unknown storage.
    """

    def __init__(self, path: PathLike, storage: str = 'mcap', overwrite: bool = False):
        """Prepare the writer; nothing is created before :meth:`open`."""
        if storage not in _STORAGES:
            raise ValueError(f'storage must be one of {sorted(_STORAGES)}, got {storage!r}')
        self.path = Path(path)
        self.storage = storage
        self.overwrite = bool(overwrite)
        self.typestore = default_typestore()
        self._writer: Writer | None = None
        self._connections: dict[tuple, object] = {}
        self._counts: Counter = Counter()
        self._start_ns: int | None = None
        self._end_ns: int | None = None

    # -- life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> BagWriter:
        """Create the bag (see the class docstring for the errors)."""
        if self._writer is not None:
            raise RuntimeError(f'bag {self.path} is already open')
        if self.path.exists() or self.path.is_symlink():
            if not self.overwrite:
                raise FileExistsError(f'bag {self.path} exists already; pass overwrite=True '
                                      '(--overwrite) to replace it')
            self._remove_existing()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer = Writer(self.path, version=Writer.VERSION_LATEST,
                        storage_plugin=_STORAGES[self.storage])
        try:
            writer.open()
        except WriterError as exc:
            raise FileExistsError(str(exc)) from None
        self._writer = writer
        return self

    def _remove_existing(self) -> None:
        path = self.path
        if path.is_dir() and not path.is_symlink():
            if any(path.iterdir()) and not (path / 'metadata.yaml').exists():
                raise FileExistsError(f'{path} is a non-empty directory but not a rosbag2 bag '
                                      '(no metadata.yaml); refusing to delete it')
            rmtree(path)
        else:
            path.unlink()
        logger.info('replacing existing bag %s', path)

    def close(self) -> None:
        """Finish the bag (index, metadata.yaml); called by ``__exit__``."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            logger.debug('closed bag %s: %s', self.path, dict(self._counts))

    def abort(self) -> None:
        """Stop writing after an error and delete the partial bag this writer created."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()
            rmtree(self.path, ignore_errors=True)
            logger.warning('removed the incomplete bag %s', self.path)

    def __exit__(self, exc_type, exc, tb) -> bool:
        """Close the bag, or abort it after an exception."""
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def set_custom_data(self, key: str, value: str) -> None:
        """Record ``key: value`` in ``metadata.yaml``'s ``custom_data`` (rosbag2's free map).

        Converters record there what ground truth they found (:data:`GROUND_TRUTH_KEY`).

        Raises:
            RuntimeError: the writer is not open.
            ValueError: ``key`` or ``value`` is not a string, or ``key`` is empty.
        """
        if self._writer is None:
            raise RuntimeError('BagWriter is not open; use it as a context manager')
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(f'custom data must be str -> str, got {key!r}: {value!r}')
        self._writer.set_custom_data(key, value)

    # -- summary --------------------------------------------------------------------------------
    @property
    def message_counts(self) -> dict[str, int]:
        """Messages written so far per topic."""
        return dict(self._counts)

    def summary(self) -> dict[str, object]:
        """Return ``{'path', 'storage', 'messages': {topic: count}, 'start_ns', 'end_ns'}``."""
        return {'path': str(self.path), 'storage': self.storage,
                'messages': self.message_counts,
                'start_ns': self._start_ns, 'end_ns': self._end_ns}

    # -- writing --------------------------------------------------------------------------------
    def header(self, stamp_ns: int, frame_id: str):
        """Return a ``std_msgs/Header`` with the stamp ``stamp_ns`` (int ns) and ``frame_id``."""
        types = self.typestore.types
        sec, nanosec = ns_to_sec_nanosec(stamp_ns)
        return types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec),
            frame_id=str(frame_id))

    def _connection(self, topic: str, msgtype: str):
        key = (topic, msgtype)
        if key not in self._connections:
            if self._writer is None:
                raise RuntimeError('BagWriter is not open; use it as a context manager')
            if not topic.startswith('/'):
                raise ValueError(f'topic names in a bag must be absolute, got {topic!r}')
            if any(t == topic for t, _ in self._connections):
                raise ValueError(f'topic {topic} already carries another message type')
            if msgtype not in self.typestore.types:
                raise ValueError(f'unknown message type {msgtype!r} (not in the Jazzy typestore)')
            self._connections[key] = self._writer.add_connection(
                topic, msgtype, typestore=self.typestore)
        return self._connections[key]

    def write_message(self, topic: str, msgtype: str, stamp_ns: int, msg) -> None:
        """Serialise ``msg`` (a typestore message of ``msgtype``) to ``topic`` at ``stamp_ns``.

        ``stamp_ns`` (integer nanoseconds) is the bag log time.

        Raises:
            ValueError: for a negative time, a relative topic name or an unknown message type.
        """
        stamp_ns = int(stamp_ns)
        if stamp_ns < 0:
            raise ValueError(f'stamp_ns must be >= 0, got {stamp_ns}')
        connection = self._connection(topic, msgtype)
        data = self.typestore.serialize_cdr(msg, msgtype)
        self._writer.write(connection, stamp_ns, data)
        self._counts[topic] += 1
        self._start_ns = stamp_ns if self._start_ns is None else min(self._start_ns, stamp_ns)
        self._end_ns = stamp_ns if self._end_ns is None else max(self._end_ns, stamp_ns)

    def write_image(self, topic: str, stamp_ns: int, array: np.ndarray, encoding: str,
                    frame_id: str = topics.CAMERA_FRAME) -> None:
        """Write a ``sensor_msgs/Image``.

        Args:
            topic: topic name.
            stamp_ns: header stamp and log time, integer nanoseconds.
            array: (H, W) or (H, W, C) array whose dtype and channels fit ``encoding``
                (``rgb8``/``bgr8`` uint8 (H, W, 3), ``mono8`` uint8, ``mono16``/``16UC1`` uint16,
                ``32FC1`` float32 metres, ...).
            encoding: ``sensor_msgs/image_encodings`` name.
            frame_id: header frame id.
        """
        from relperception.imaging.image_encodings import numpy_to_image_fields
        fields = numpy_to_image_fields(np.asarray(array), encoding)
        fields['data'] = np.ascontiguousarray(fields['data'], dtype=np.uint8).reshape(-1)
        msg = self.typestore.types[topics.IMAGE_MSGTYPE](
            header=self.header(stamp_ns, frame_id), **fields)
        self.write_message(topic, topics.IMAGE_MSGTYPE, stamp_ns, msg)

    def write_compressed_image(self, topic: str, stamp_ns: int, array: np.ndarray, encoding: str,
                               fmt: str = 'jpeg', frame_id: str = topics.CAMERA_FRAME,
                               quality: int = 90) -> None:
        """Write a ``sensor_msgs/CompressedImage`` (``fmt`` ``'jpeg'`` or ``'png'``).

        ``array`` and ``encoding`` as in :meth:`write_image`; ``quality`` is the JPEG quality.
        By convention ``topic`` ends in ``/compressed`` (see ``topics.compressed_topic``).
        """
        from relperception.imaging.compressed import numpy_to_compressed_fields
        fields = numpy_to_compressed_fields(np.asarray(array), encoding, fmt=fmt, quality=quality)
        msg = self.typestore.types[topics.COMPRESSED_IMAGE_MSGTYPE](
            header=self.header(stamp_ns, frame_id), format=str(fields['format']),
            data=np.frombuffer(bytes(fields['data']), dtype=np.uint8))
        self.write_message(topic, topics.COMPRESSED_IMAGE_MSGTYPE, stamp_ns, msg)

    def write_camera_info(self, topic: str, stamp_ns: int, camera: Camera,
                          frame_id: str = topics.CAMERA_FRAME) -> None:
        """Write the ``sensor_msgs/CameraInfo`` of ``camera`` (full-image roi, no binning)."""
        types = self.typestore.types
        roi = types['sensor_msgs/msg/RegionOfInterest'](
            x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
        msg = types[topics.CAMERA_INFO_MSGTYPE](
            header=self.header(stamp_ns, frame_id), roi=roi, **camera_info_fields(camera))
        self.write_message(topic, topics.CAMERA_INFO_MSGTYPE, stamp_ns, msg)

    def write_pose(self, topic: str, stamp_ns: int, T_world_cam,
                   frame_id: str = topics.WORLD_FRAME) -> None:
        """Write a ``geometry_msgs/PoseStamped`` of the (4, 4) transform ``T_world_cam`` (metres).

        ``frame_id`` is the frame the pose is expressed in (the world frame).
        """
        position, q_xyzw = pose_fields(T_world_cam)
        types = self.typestore.types
        pose = types['geometry_msgs/msg/Pose'](
            position=types['geometry_msgs/msg/Point'](
                x=float(position[0]), y=float(position[1]), z=float(position[2])),
            orientation=types['geometry_msgs/msg/Quaternion'](
                x=float(q_xyzw[0]), y=float(q_xyzw[1]), z=float(q_xyzw[2]), w=float(q_xyzw[3])))
        msg = types[topics.POSE_STAMPED_MSGTYPE](header=self.header(stamp_ns, frame_id), pose=pose)
        self.write_message(topic, topics.POSE_STAMPED_MSGTYPE, stamp_ns, msg)


def _describe(exc: BaseException) -> str:
    """Return ``'Type: message'`` on one line (or the type alone when the message is empty)."""
    text = ' '.join(str(exc).split())
    return f'{type(exc).__name__}: {text}' if text else type(exc).__name__


class _SalvageMcapReader(McapReader):
    """MCAP storage reader for files without summary/footer, e.g. truncated recordings.

    Scans the data section from the start up to the first damaged record; later messages are
    lost. Built on the rosbags scanner (``meta_scan`` / ``messages_scan``).
    """

    damage: str | None = None

    def _open(self) -> None:
        bio = self.bio
        if bio.read(8) != b'\x89MCAP0\r\n':
            raise ReaderError('File magic is invalid.')
        try:
            if bio.read(1) != b'\x01':
                raise ReaderError('Unexpected first record.')
            (size,) = unpack('<Q', bio.read(8))
            bio.seek(size, 1)
        except StructError:
            raise ReaderError('MCAP header is truncated.') from None
        self.data_start = bio.tell()
        self.data_end = bio.seek(0, 2)
        try:
            self.meta_scan()
        except (ReaderError, StructError, TypeError, ValueError) as exc:
            self.damage = _describe(exc)
        if self.statistics is None:
            self.statistics = Statistics(0, len(self.schemas), len(self.channels), 0, 0, 0,
                                         0, 0, {})
        if not self.connections:
            raise ReaderError(f'no intact channel records ({self.damage or "empty file"})')


class _SqliteRowReader:
    """Read a damaged rosbag2 SQLite 3 storage row by row (Python's ``sqlite3``).

    Every row is probed by id, so a damaged page costs only the rows stored in it. Rows are
    yielded in log-time order. Used when rosbags fails in the middle of a SQLite bag, and to
    open one that rosbags cannot open at all.
    """

    def __init__(self, files: list[Path], errors: list[str]):
        self.files = list(files)
        self.errors = errors
        self.connections: list = []
        self._probed: dict[Path, tuple[list, int]] = {}

    @staticmethod
    def _connect(db_file: Path) -> sqlite3.Connection:
        return sqlite3.connect(f'{db_file.resolve().as_uri()}?mode=ro', uri=True)

    def read_topics(self) -> None:
        """Read the topics of every file; raise ValueError when none can be read."""
        from rosbags.interfaces import (Connection, ConnectionExtRosbag2, MessageDefinition)

        by_topic: dict = {}
        for db_file in self.files:
            try:
                with closing(self._connect(db_file)) as db:
                    rows = list(db.execute('SELECT name, type FROM topics'))
            except sqlite3.DatabaseError as exc:
                self.errors.append(f'{db_file}: topics unreadable ({_describe(exc)})')
                continue
            for name, msgtype in rows:
                by_topic.setdefault(name, msgtype)
        if not by_topic:
            raise ValueError('no readable topics table')
        self.connections = [
            Connection(id=i + 1, topic=name, msgtype=msgtype,
                       msgdef=MessageDefinition(MessageDefinitionFormat.NONE, ''), digest='',
                       msgcount=0, ext=ConnectionExtRosbag2('cdr', []), owner=self)
            for i, (name, msgtype) in enumerate(sorted(by_topic.items()))]

    def _rows(self, db_file: Path) -> tuple[list, int]:
        """Return the readable ``(log time, row id, topic)`` rows and the unreadable count.

        Probed once per file (the rows of every topic) and kept for the later reads.
        """
        if db_file in self._probed:
            return self._probed[db_file]
        rows, unreadable = [], 0
        with closing(self._connect(db_file)) as db:
            try:
                topic_ids = {int(i): name for i, name in db.execute('SELECT id, name FROM topics')}
                last = db.execute('SELECT max(id) FROM messages').fetchone()[0] or 0
            except sqlite3.DatabaseError as exc:
                self.errors.append(f'{db_file}: message table unreadable ({_describe(exc)})')
                last = 0
            for row_id in range(1, int(last) + 1):
                try:
                    row = db.execute('SELECT topic_id, timestamp FROM messages WHERE id = ?',
                                     (row_id,)).fetchone()
                except sqlite3.DatabaseError:
                    unreadable += 1
                    continue
                if row is not None and int(row[0]) in topic_ids:
                    rows.append((int(row[1]), row_id, topic_ids[int(row[0])]))
        rows.sort()
        self._probed[db_file] = (rows, unreadable)
        return rows, unreadable

    def count(self, connections) -> Counter:
        """Return topic -> number of readable rows of ``connections`` (no data is read)."""
        wanted = {conn.topic for conn in connections}
        counts: Counter = Counter()
        for db_file in self.files:
            counts.update(topic for _, _, topic in self._rows(db_file)[0] if topic in wanted)
        return counts

    def messages(self, connections, skip: set | None = None) -> Iterator:
        """Yield ``(connection, log time ns, bytes)`` of the readable rows of ``connections``.

        ``skip``: ``(topic, log time)`` pairs already read (not yielded again).
        """
        wanted = {conn.topic: conn for conn in connections}
        for db_file in self.files:
            rows, unreadable = self._rows(db_file)
            rows = [r for r in rows if r[2] in wanted and (r[2], r[0]) not in (skip or ())]
            message = (f'{db_file}: read row by row past the damage: {len(rows)} messages '
                       f'readable, {unreadable} rows unreadable')
            self.errors.append(message)
            logger.warning('%s', message)
            with closing(self._connect(db_file)) as db:
                for log_time_ns, row_id, topic in rows:
                    try:
                        data = db.execute('SELECT data FROM messages WHERE id = ?',
                                          (row_id,)).fetchone()[0]
                    except (sqlite3.DatabaseError, TypeError):
                        continue
                    yield wanted[topic], log_time_ns, bytes(data)

    def close(self) -> None:
        """Close nothing: every read opens its own connection."""


def _register_bag_types(typestore, connections) -> None:
    """Add message types that the bag defines but the typestore lacks."""
    missing = {}
    for conn in connections:
        if conn.msgtype in typestore.types or conn.msgdef.format == MessageDefinitionFormat.NONE:
            continue
        try:
            if conn.msgdef.format == MessageDefinitionFormat.MSG:
                missing.update(typesys.get_types_from_msg(conn.msgdef.data, conn.msgtype))
            else:
                sep = '=' * 80 + '\n'
                for part in conn.msgdef.data.split(sep):
                    if part.startswith('IDL: '):
                        part = part.split('\n', 1)[1]
                    if part.strip():
                        missing.update(typesys.get_types_from_idl(part))
        except Exception as exc:  # noqa: BLE001 - a bad definition only loses that topic
            logger.warning('cannot parse the definition of %s: %s', conn.msgtype, exc)
    if missing:
        typestore.register({k: v for k, v in missing.items() if k not in typestore.types})


def _metadata_files(path: Path) -> tuple[list[str], int | None]:
    """Return the storage files a bag folder's ``metadata.yaml`` lists and its message count.

    ``([], None)`` when the file is missing or unreadable (nothing can be compared then).
    """
    try:
        info = yaml.safe_load((path / 'metadata.yaml').read_text(encoding='utf-8'))
        info = info['rosbag2_bagfile_information']
        names = [str(name) for name in info.get('relative_file_paths') or []]
        count = info.get('message_count')
        return names, int(count) if count is not None else None
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return [], None


def _refuse_special_files(path: Path) -> None:
    """Raise ValueError when the bag, or a file of a bag directory, is not a regular file.

    A FIFO, socket or device would block the reader or never end.
    """
    if path.is_dir():
        entries = [p for p in path.iterdir()
                   if p.name == 'metadata.yaml' or p.suffix in _BAG_FILE_SUFFIXES]
    else:
        entries = [path]
    for entry in entries:
        if not entry.is_file():
            raise ValueError(f'{entry} is not a regular file (a FIFO, socket or device?): '
                             'a bag is a directory of regular files or a .mcap/.db3 file')


class BagReader:
    """Read a rosbag2 bag; use as a context manager.

    Args:
        path: a rosbag2 directory (with ``metadata.yaml``) or a bare ``.mcap`` / ``.db3`` file.
        salvage: for an MCAP file that rosbags cannot open (truncated, no footer), read the
            intact records before the damage instead of failing.

    Attributes:
        errors: human-readable descriptions of everything that was skipped (undecodable
            messages, damaged storage).
        salvaged: True when the bag was opened by the salvage scanner.
        storage_damaged: True once any read met damaged storage (the bag is then not
            completely read, whatever was salvaged).

    Raises (on open):
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if ``path`` is not a bag or is damaged beyond salvage.
    """

    def __init__(self, path: PathLike, salvage: bool = True):
        """Prepare the reader; the bag is opened by :meth:`open`."""
        self.path = Path(path)
        self.salvage = bool(salvage)
        self.typestore = default_typestore()
        self.errors: list[str] = []
        self.salvaged = False
        self.storage_damaged = False
        self._reader = None
        self._storage = None
        self._connections: list = []
        self._counts: dict[str, int] = {}

    # -- life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> BagReader:
        """Open the bag (see the class docstring for the errors)."""
        path = self.path
        if not path.exists():
            raise FileNotFoundError(f'bag {path} does not exist')
        _refuse_special_files(path)
        if path.is_dir() and not (path / 'metadata.yaml').exists():
            files = sorted(p for p in path.iterdir() if p.suffix in _BAG_FILE_SUFFIXES)
            if len(files) != 1:
                raise ValueError(f'{path} is not a rosbag2 bag: no metadata.yaml and '
                                 f'{len(files)} storage files')
            logger.warning('%s has no metadata.yaml; reading %s directly', path, files[0].name)
            path = files[0]
        elif path.is_file() and path.suffix not in _BAG_FILE_SUFFIXES:
            raise ValueError(f'{path} is neither a rosbag2 directory nor a .mcap/.db3 file')
        cause = None
        try:
            reader = Reader(path)
            reader.open()
        except Exception as exc:
            cause = exc
            reader = self._open_without_metadata(path, exc)
        if reader is None:
            mcap = self._mcap_file(path)
            db3_files = self._db3_files(path)
            if self.salvage and mcap is not None:
                self._open_salvage(mcap, cause)
            elif self.salvage and db3_files:
                self._open_sqlite_salvage(db3_files, cause)
            else:
                raise ValueError(f'cannot open bag {self.path}: {cause}') from cause
        else:
            self._reader = reader
            self._connections = list(reader.connections)
            counts: Counter = Counter()
            for conn in self._connections:
                counts[conn.topic] += int(conn.msgcount)
            self._counts = dict(counts)
        _register_bag_types(self.typestore, self._connections)
        return self

    def _open_without_metadata(self, path: Path, cause: Exception):
        """Return rosbags' reader of a bag folder's one storage file, or None.

        For a folder whose ``metadata.yaml`` is what rosbags could not read: the storage file
        itself may be intact.
        """
        if not path.is_dir():
            return None
        files = sorted(p for p in path.iterdir() if p.suffix in _BAG_FILE_SUFFIXES)
        if len(files) != 1:
            return None
        try:
            reader = Reader(files[0])
            reader.open()
        except Exception:  # noqa: BLE001 - the storage itself is damaged: salvage decides
            return None
        listed, expected = _metadata_files(path)
        missing = [name for name in listed if not (path / name).is_file()]
        if missing:
            # a split recording (--max-bag-size) with a file not copied: what is left is read,
            # and the bag is incomplete
            self.storage_damaged = True
            held = sum(int(conn.msgcount) for conn in reader.connections)
            counted = f'{expected} messages' if expected is not None else 'more messages'
            note = (f'{path}: storage file {", ".join(missing)} listed in metadata.yaml is '
                    f'missing: the bag is incomplete; read {files[0].name} alone ({held} '
                    f'messages; metadata.yaml counts {counted})')
            logger.error('%s', note)
        else:
            note = (f'{path}: cannot open the bag through its metadata.yaml '
                    f'({_describe(cause)}); read {files[0].name} directly')
            logger.warning('%s', note)
        self.errors.append(note)
        return reader

    @staticmethod
    def _mcap_file(path: Path) -> Path | None:
        if path.is_file():
            return path if path.suffix == '.mcap' else None
        files = sorted(path.glob('*.mcap'))
        return files[0] if len(files) == 1 else None

    def _use_salvage_storage(self, storage, open_storage, cause: Exception, note: str) -> None:
        """Open a salvage ``storage`` (``open_storage()``) in place of rosbags' reader."""
        try:
            open_storage()
        except Exception as exc:  # noqa: BLE001 - whatever the scanner met
            raise ValueError(f'cannot open bag {self.path}: {cause}; salvage failed: {exc}') \
                from exc
        self._storage = storage
        self._connections = list(storage.connections)
        self.salvaged = self.storage_damaged = True
        self.errors.append(note)

    def _open_salvage(self, mcap: Path, cause: Exception) -> None:
        storage = _SalvageMcapReader(mcap)
        self._use_salvage_storage(storage, storage.open, cause,
                                  f'{mcap}: damaged MCAP ({cause}); salvaging the intact records')
        # Count what can actually be read (bytes only, no deserialisation).
        counts: Counter = Counter()
        try:
            for conn, _, _ in storage.messages(self._connections):
                counts[conn.topic] += 1
        except (ReaderError, StructError, TypeError, ValueError) as exc:
            self.errors.append(f'{mcap}: data damaged after {sum(counts.values())} messages '
                               f'({_describe(exc)})')
        self._counts = {conn.topic: counts.get(conn.topic, 0) for conn in self._connections}
        logger.warning('bag %s is damaged (%s); %d messages before the damage are readable',
                       self.path, cause, sum(counts.values()))

    def _open_sqlite_salvage(self, files: list[Path], cause: Exception) -> None:
        storage = _SqliteRowReader(files, self.errors)
        self._use_salvage_storage(storage, storage.read_topics, cause,
                                  f'{self.path}: damaged SQLite 3 storage ({_describe(cause)}); '
                                  'reading the readable rows')
        counts = storage.count(self._connections)
        self._counts = {conn.topic: counts.get(conn.topic, 0) for conn in self._connections}
        logger.warning('bag %s is damaged (%s); %d messages are readable', self.path, cause,
                       sum(counts.values()))

    def close(self) -> None:
        """Close the bag; called by ``__exit__``."""
        reader, self._reader = self._reader, None
        storage, self._storage = self._storage, None
        if reader is not None:
            reader.close()
        if storage is not None:
            storage.close()

    def __exit__(self, exc_type, exc, tb) -> bool:
        """Close the bag."""
        self.close()
        return False

    # -- metadata -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._reader is None and self._storage is None:
            raise RuntimeError('BagReader is not open; use it as a context manager')

    @property
    def topics(self) -> dict[str, str]:
        """Topic name -> message type."""
        self._check_open()
        return {conn.topic: conn.msgtype for conn in self._connections}

    @property
    def topic_types(self) -> dict[str, list[str]]:
        """Topic name -> every message type its connections carry (sorted; usually one)."""
        self._check_open()
        types: dict[str, set] = {}
        for conn in self._connections:
            types.setdefault(conn.topic, set()).add(conn.msgtype)
        return {topic: sorted(names) for topic, names in types.items()}

    @property
    def custom_data(self) -> dict[str, str]:
        """The ``custom_data`` map of ``metadata.yaml`` (empty without one)."""
        metadata = self.path / 'metadata.yaml' if self.path.is_dir() else None
        if metadata is None or not metadata.is_file():
            return {}
        try:
            info = yaml.safe_load(metadata.read_text(encoding='utf-8')) or {}
        except (OSError, yaml.YAMLError) as exc:
            self.errors.append(f'metadata.yaml unreadable: {_describe(exc)}')
            return {}
        data = (info.get('rosbag2_bagfile_information') or {}).get('custom_data') or {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    @property
    def message_counts(self) -> dict[str, int]:
        """Topic name -> number of messages (readable messages for a salvaged bag)."""
        self._check_open()
        return dict(self._counts)

    def _db3_files(self, path: Path | None = None) -> list[Path]:
        path = self.path if path is None else path
        if path.is_file():
            return [path] if path.suffix == '.db3' else []
        return sorted(path.glob('*.db3'))

    def _resume_sqlite(self, connections: list, read: set) -> Iterator | None:
        """Return an iterator over the rows not read yet of a damaged SQLite bag, or None."""
        files = self._db3_files()
        if not files:
            return None
        storage = _SqliteRowReader(files, self.errors)
        return storage.messages(connections, skip=read)

    # -- messages -------------------------------------------------------------------------------
    def messages(self, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
        """Yield the deserialised messages of ``topics`` (all when None) in log-time order.

        Undecodable messages are skipped and recorded in ``errors``; the rest is as in
        :meth:`raw_messages`.
        """
        for raw in self.raw_messages(topics):
            try:
                msg = self.typestore.deserialize_cdr(raw.data, raw.msgtype)
            except Exception as exc:  # noqa: BLE001 - any serde failure skips one message
                message = (f'{raw.topic} at {raw.log_time_ns} ns: cannot deserialise '
                           f'{raw.msgtype} ({_describe(exc)})')
                self.errors.append(message)
                logger.warning('%s', message)
                continue
            yield BagMessage(raw.topic, raw.msgtype, raw.log_time_ns, msg)

    def raw_messages(self, topics: Iterable[str] | None = None) -> Iterator[RawBagMessage]:
        """Yield the serialised messages of ``topics`` (all when None) in log-time order.

        Requested topics that the bag does not have are logged and ignored. Damaged storage
        sets ``storage_damaged`` and adds an entry to ``errors``; a SQLite 3 bag then goes on
        row by row with the rows that are still readable (see the module docstring), other
        storage ends the iteration.
        """
        self._check_open()
        if topics is None:
            connections = list(self._connections)
        else:
            wanted = {topics} if isinstance(topics, str) else set(topics)
            missing = wanted - {conn.topic for conn in self._connections}
            if missing:
                logger.warning('bag %s has no topic(s) %s', self.path, sorted(missing))
            connections = [conn for conn in self._connections if conn.topic in wanted]
            if not connections:
                return
        source = (self._reader.messages(connections=connections) if self._reader is not None
                  else self._storage.messages(connections))
        count = 0
        read: set = set()   # (topic, log time) of what was yielded, for a row-by-row resume
        per_topic: Counter = Counter()
        resuming = False
        while True:
            try:
                conn, log_time_ns, rawdata = next(source)
            except StopIteration:
                self._check_all_read(connections, per_topic)
                break
            except Exception as exc:  # noqa: BLE001 - rosbags, struct, apsw/sqlite3 errors
                self.storage_damaged = True
                message = (f'{self.path}: storage damaged after {count} messages '
                           f'({_describe(exc)})')
                if message not in self.errors and not self.salvaged:
                    self.errors.append(message)
                logger.error('%s', message)
                resumed = self._resume_sqlite(connections, read) \
                    if self._reader is not None and not resuming else None
                if resumed is None:
                    break
                source, resuming = resumed, True
                continue
            count += 1
            per_topic[conn.topic] += 1
            read.add((conn.topic, int(log_time_ns)))
            yield RawBagMessage(conn.topic, conn.msgtype, int(log_time_ns), bytes(rawdata))

    def _check_all_read(self, connections: list, per_topic: Mapping[str, int]) -> None:
        """Mark the storage damaged when a full read gave fewer messages than the bag counts.

        E.g. a damaged record inside an MCAP chunk that the reader skips without an error.
        """
        if self.storage_damaged:
            return   # already reported, with what was lost
        for topic in sorted({conn.topic for conn in connections}):
            expected, got = self._counts.get(topic, 0), per_topic.get(topic, 0)
            if got < expected:
                self.storage_damaged = True
                message = (f'{self.path}: {expected - got} of {expected} messages on {topic} '
                           'could not be read (damaged storage)')
                if message not in self.errors:
                    self.errors.append(message)
                logger.error('%s', message)
