# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Safe loading, checking and saving of model weights.

* ``load_state_dict_file(path)``: ``.safetensors`` files through ``safetensors``; every other
  file through ``torch.load(..., weights_only=True)``, which only rebuilds tensors and plain
  containers. A pickle that would run code (references an arbitrary callable) is refused with a
  ``ValueError``; it is never executed. Checkpoints holding the weights under ``'state_dict'``
  or ``'model'`` are unwrapped.
* ``load_weights(module, state_or_path, key_map=None, strict=True)``: renames keys, compares
  names and shapes against ``module.state_dict()`` and raises one ``ValueError`` listing every
  missing key, unexpected key and shape mismatch *before* anything is copied.
* ``save_weights`` writes safetensors with string metadata; ``file_sha256``.
* ``read_trained_heads(path)``: the dense heads a weights file records as trained
  (:data:`TRAINED_HEADS_KEY` metadata, written by ``relperception train`` into its weights and
  its checkpoints, ``last.pt``); files without that entry (the shipped ``conv_small`` /
  ``vit_small``, foreign files) count as fully trained.
* Shipped weights live in ``relperception/weights/<name>.safetensors`` and are listed in
  ``relperception/weights/manifest.json`` (``name -> {file, sha256, ...}``);
  ``shipped_weights(name)`` returns the verified path, ``add_to_manifest`` registers a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
import pickle
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from relperception.atomic_files import atomic_path, write_text_atomic
from relperception.models.trained_heads import parse_trained_heads, TRAINED_HEADS_KEY
from relperception.validation import check_not_folder
import safetensors.torch
import torch

_LOGGER = logging.getLogger(__name__)

#: Folder of the weights shipped with the package.
WEIGHTS_DIR = Path(__file__).resolve().parents[1] / 'weights'
#: Manifest of the shipped weights: ``name -> {file, sha256, ...}``.
MANIFEST_NAME = 'manifest.json'

#: Keys under which training checkpoints commonly hold the weights (tried in this order).
_WRAPPER_KEYS = ('state_dict', 'model', 'model_state_dict', 'module')
#: Number of keys listed per category in error messages.
_MAX_LISTED = 12
#: Key of a PyTorch file's metadata (a dict of strings): training checkpoints hold the
#: metadata of their weights there (``read_weights_metadata``).
METADATA_KEY = 'metadata'

StateDict = Dict[str, torch.Tensor]
KeyMap = Union[None, Callable[[str], Optional[str]], Mapping[str, str]]


def _unwrap(obj: Any, path: Path) -> StateDict:
    """Return the flat ``name -> tensor`` dict inside a loaded object, or raise ``ValueError``."""
    for _ in range(3):  # e.g. {'model': {'state_dict': ...}}
        if not isinstance(obj, Mapping):
            break
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            break
        inner = next((obj[k] for k in _WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise ValueError(
            f'{path}: expected a state dict (name -> tensor), got {type(obj).__name__}')
    state = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    skipped = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if not state:
        raise ValueError(f'{path}: no tensors found (top-level keys: {_short(list(obj))})')
    if skipped:
        _LOGGER.debug('%s: ignoring non-tensor entries %s', path, _short(skipped))
    return state


def load_state_dict_file(path: Union[str, Path]) -> StateDict:
    """Load a weights file into a ``name -> tensor`` dict on the CPU, without running code.

    Args:
        path: ``.safetensors`` file, or a PyTorch file (``.pth``/``.pt``/``.ckpt``/...) holding a
            state dict or a checkpoint dict with the weights under ``'state_dict'``/``'model'``.

    Returns:
        Dict of CPU tensors keyed by parameter/buffer name.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is not a weights file, or it is a pickle that would run code
            (refused; only tensors and plain containers are accepted).
    """
    path = Path(path)
    check_not_folder(path, 'weights file')
    if not path.is_file():
        raise FileNotFoundError(f'weights file {path} does not exist')
    if is_safetensors(path):
        try:
            return dict(safetensors.torch.load_file(str(path), device='cpu'))
        except Exception as err:  # safetensors raises its own error types
            raise ValueError(f'{path}: not a valid safetensors file ({err})') from err
    return _unwrap(_load_torch_file(path), path)


def is_safetensors(path: Path) -> bool:
    """Return whether ``path`` is a safetensors file: by its suffix (any case) or its header.

    A safetensors file starts with its JSON header's length (8 bytes, little endian) and the
    header's ``{``, so a file named ``.pth`` or ``.SAFETENSORS`` is recognised too.
    """
    if path.suffix.lower() == '.safetensors':
        return True
    with open(path, 'rb') as handle:
        head = handle.read(9)
    return len(head) == 9 and head[8:9] == b'{' and \
        0 < int.from_bytes(head[:8], 'little') < path.stat().st_size


def _load_torch_file(path: Path, lazy: bool = False) -> Any:
    """Return the object of a PyTorch file, read with ``weights_only=True`` (ValueError else).

    With ``lazy`` a zip-format file's tensors are memory-mapped, not read (for its metadata).
    """
    with open(path, 'rb') as handle:
        head = handle.read(2)
    # torch.save writes a zip archive (PK) or, before torch 1.6, a pickle (protocol byte 0x80)
    if head != b'PK' and head[:1] != b'\x80':
        raise ValueError(f'{path}: not a weights file (neither safetensors, by its .safetensors '
                         'name, nor a PyTorch file, which is a zip archive or a pickle)')
    try:
        return torch.load(str(path), map_location='cpu', weights_only=True,
                          mmap=lazy and head == b'PK')
    except pickle.UnpicklingError as err:
        raise ValueError(
            f'{path}: refused to load: the file is a pickle that references code or objects '
            'other than tensors and plain containers, and loading it would execute that code '
            '(only weights_only=True loading is allowed). Convert the trusted original to '
            f'safetensors or a plain state dict. Details: {_pickle_reason(err)}') from err
    except Exception as err:  # the unpickler raises KeyError, IndexError, ... on other bytes
        raise ValueError(f'{path}: not a readable PyTorch weights file '
                         f'({type(err).__name__}: {err})') from err


def _pickle_reason(err: Exception) -> str:
    """Return the line of a weights-only unpickling error that names the refused global."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if 'GLOBAL' in line or 'Unsupported' in line:
            return line
    return lines[0] if lines else type(err).__name__


def _short(names: List[str]) -> str:
    """Return the first ``_MAX_LISTED`` names and a count of the rest."""
    names = list(names)
    head = ', '.join(names[:_MAX_LISTED])
    if len(names) > _MAX_LISTED:
        head += f', ... ({len(names) - _MAX_LISTED} more)'
    return head


def rename_keys(state: Mapping[str, torch.Tensor], key_map: KeyMap) -> StateDict:
    """Return ``state`` with its keys renamed by ``key_map``.

    Args:
        state: ``name -> tensor`` dict.
        key_map: ``None`` (no renaming); a callable ``old -> new`` returning ``None`` to drop
            a key; or a dict of prefix replacements ``{'old.prefix.': 'new.prefix.'}`` (the
            longest matching prefix wins; keys matching none are kept unchanged; a replacement
            of ``None`` drops the keys with that prefix).

    Returns:
        The renamed dict.

    Raises:
        ValueError: two keys map to the same new name, or ``key_map`` has a wrong type.
    """
    if key_map is None:
        return dict(state)
    if isinstance(key_map, Mapping):
        prefixes = sorted(key_map, key=len, reverse=True)

        def mapper(key: str) -> Optional[str]:
            for prefix in prefixes:
                if key.startswith(prefix):
                    new = key_map[prefix]
                    return None if new is None else new + key[len(prefix):]
            return key
    elif callable(key_map):
        mapper = key_map
    else:
        raise ValueError(f'key_map must be None, a callable or a dict, got {type(key_map)}')
    out: StateDict = {}
    for key, value in state.items():
        new = mapper(key)
        if new is None:
            continue
        if new in out:
            raise ValueError(f'key_map maps two keys to {new!r} (one of them is {key!r})')
        out[new] = value
    return out


def check_state_dict(expected: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor],
                     strict: bool = True) -> List[str]:
    """Compare a state dict with the expected names, shapes and kinds (float or not).

    Args:
        expected: the module's ``state_dict()``.
        state: the weights to load (already renamed).
        strict: if ``False`` missing and unexpected keys are tolerated (shape mismatches never
            are).

    Returns:
        The list of problems (empty when ``state`` fits).
    """
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    mismatched = [f'{k}: file {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}'
                  for k in expected if k in state and state[k].shape != expected[k].shape]
    # a float parameter filled from integers (or booleans) is a file of something else:
    # the copy would cast it silently (int64 values 0/1 gave a LoFTR with no match)
    not_float = [f'{k}: {state[k].dtype}' for k in expected
                 if k in state and expected[k].is_floating_point()
                 and not state[k].is_floating_point()]
    problems = []
    if not_float:
        problems.append(f'{len(not_float)} floating-point weights stored as non-float tensors: '
                        f'{_short(not_float)}')
    if strict and missing:
        problems.append(f'{len(missing)} missing keys: {_short(missing)}')
    if strict and unexpected:
        problems.append(f'{len(unexpected)} unexpected keys: {_short(unexpected)}')
    if mismatched:
        problems.append(f'{len(mismatched)} shape mismatches: {_short(mismatched)}')
    return problems


def load_weights(module: torch.nn.Module,
                 state_or_path: Union[str, Path, Mapping[str, torch.Tensor]],
                 key_map: KeyMap = None, strict: bool = True) -> torch.nn.Module:
    """Load weights into ``module`` after checking every name and shape.

    Args:
        module: the model to fill (modified in place; tensors are copied to its device/dtype).
        state_or_path: a ``name -> tensor`` dict or a weights file (see ``load_state_dict_file``).
        key_map: renaming applied to the file's keys first (see ``rename_keys``).
        strict: require exactly the module's keys (default); with ``False`` missing and
            unexpected keys are logged and skipped, shape mismatches still raise.

    Returns:
        ``module``.

    Raises:
        ValueError: names or shapes do not fit (the message lists missing keys, unexpected keys
            and shape mismatches), or the file is refused by ``load_state_dict_file``.
        FileNotFoundError: the file does not exist.
    """
    if isinstance(state_or_path, (str, Path)):
        source = str(state_or_path)
        state = load_state_dict_file(state_or_path)
    elif isinstance(state_or_path, Mapping):
        source = 'state dict'
        state = dict(state_or_path)
    else:
        raise ValueError('state_or_path must be a path or a dict of tensors, got '
                         f'{type(state_or_path).__name__}')
    state = rename_keys(state, key_map)
    expected = module.state_dict()
    problems = check_state_dict(expected, state, strict)
    if problems:
        raise ValueError(f'weights from {source} do not fit {type(module).__name__}: '
                         + '; '.join(problems))
    if not strict:
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        if missing or unexpected:
            _LOGGER.warning('loading %s non-strictly: %d missing keys (%s), %d unexpected (%s)',
                            source, len(missing), _short(missing), len(unexpected),
                            _short(unexpected))
        state = {k: v for k, v in state.items() if k in expected}
    module.load_state_dict(state, strict=strict)
    return module


def save_weights(module_or_state: Union[torch.nn.Module, Mapping[str, torch.Tensor]],
                 path: Union[str, Path],
                 metadata: Optional[Mapping[str, Any]] = None,
                 dtype: Optional[torch.dtype] = None) -> Path:
    """Write weights to a ``.safetensors`` file.

    Args:
        module_or_state: a module (its ``state_dict()`` is saved) or a ``name -> tensor`` dict.
        path: output file; must end in ``.safetensors``. Parent folders are created.
        metadata: optional ``str -> value`` header entries; non-string values are stored as
            JSON strings (safetensors metadata is ``str -> str``).
        dtype: optional floating dtype for the floating-point tensors (e.g. ``torch.float16``
            halves shipped files; ``load_weights`` converts back to the module's dtype);
            integer buffers are kept.

    Returns:
        The written path.

    Raises:
        ValueError: wrong suffix or a state entry that is not a tensor.
    """
    path = Path(path)
    if path.suffix != '.safetensors':
        raise ValueError(f'save_weights writes .safetensors files, got {path}')
    state = (module_or_state.state_dict() if isinstance(module_or_state, torch.nn.Module)
             else dict(module_or_state))
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f'non-tensor entries cannot be saved: {_short(bad)}')
    # safetensors refuses shared/non-contiguous storage: store independent contiguous copies.
    state = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    if dtype is not None:
        if not dtype.is_floating_point:
            raise ValueError(f'dtype must be a floating dtype, got {dtype}')
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    meta = None
    if metadata:
        meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    with atomic_path(path) as temporary:
        safetensors.torch.save_file(state, str(temporary), metadata=meta)
    return path


def read_metadata(path: Union[str, Path]) -> Dict[str, str]:
    """Return the string metadata stored in a ``.safetensors`` header (empty dict if none)."""
    with safetensors.safe_open(str(path), framework='pt') as handle:
        return dict(handle.metadata() or {})


def read_weights_metadata(path: Union[str, Path]) -> Dict[str, str]:
    """Return the metadata of a weights file: its safetensors header, or a PyTorch file's.

    A PyTorch file's metadata is its top-level ``metadata`` dict of strings (what a training
    checkpoint, ``last.pt``, holds: the metadata its weights are exported with); {} when it
    has none.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a ``.safetensors`` file whose header cannot be read, or a PyTorch file
            that :func:`load_state_dict_file` refuses.
    """
    path = Path(path)
    check_not_folder(path, 'weights file')
    if not path.is_file():
        raise FileNotFoundError(f'weights file {path} does not exist')
    if not is_safetensors(path):
        obj = _load_torch_file(path, lazy=True)
        metadata = obj.get(METADATA_KEY) if isinstance(obj, Mapping) else None
        if not isinstance(metadata, Mapping):
            return {}
        return {str(k): str(v) for k, v in metadata.items()}
    try:
        return read_metadata(path)
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(f'{path}: not a valid safetensors file ({err})') from err


def read_trained_heads(path: Union[str, Path]) -> Optional[Tuple[str, ...]]:
    """Return the dense heads a weights file records as trained, or None when it does not say.

    Args:
        path: a weights file: ``.safetensors`` (its header) or a PyTorch file (a training
            checkpoint's ``metadata``, :func:`read_weights_metadata`).

    Returns:
        The sorted head names (a subset of ``models.trained_heads.HEAD_NAMES``) of the file's
        :data:`TRAINED_HEADS_KEY` entry; ``None`` when the file has no such entry: such files
        count as having every head trained.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an unreadable file, or an entry naming an unknown head.
    """
    return parse_trained_heads(read_weights_metadata(path).get(TRAINED_HEADS_KEY), path)


def file_sha256(path: Union[str, Path]) -> str:
    """Return the hex SHA-256 digest of a file (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(weights_dir: Union[str, Path, None] = None) -> Dict[str, Dict[str, Any]]:
    """Return the manifest of shipped weights (``{}`` when the file is absent)."""
    path = Path(weights_dir or WEIGHTS_DIR) / MANIFEST_NAME
    if not path.is_file():
        return {}
    with open(path, encoding='utf-8') as handle:
        manifest = json.load(handle)
    if not isinstance(manifest, dict):
        raise ValueError(f'{path} must hold a JSON object name -> entry')
    return manifest


def shipped_weights(name: str, weights_dir: Union[str, Path, None] = None,
                    advice: Optional[str] = None) -> Path:
    """Return the verified path of the weights shipped for preset ``name``.

    Args:
        name: weights name (normally the model preset, e.g. ``conv_small``).
        weights_dir: folder holding ``manifest.json``; default the package's ``weights/``.
        advice: what the caller's user can do when there are none (e.g. which parameter takes
            a weights file); None: train them or pass a weights file, no parameter named.

    Returns:
        Path of ``<weights_dir>/<file>`` whose SHA-256 equals the manifest entry.

    Raises:
        FileNotFoundError: no manifest entry or no file for ``name`` (the message says how to
            train the weights or pass a weights file instead).
        ValueError: the file's checksum differs from the manifest.
    """
    folder = Path(weights_dir or WEIGHTS_DIR)
    entry = read_manifest(folder).get(name)
    file_name = (entry or {}).get('file', f'{name}.safetensors')
    path = folder / file_name
    if entry is None or not path.is_file():
        why = 'not listed in' if entry is None else f'listed but {path} is missing from'
        if advice is None:
            advice = ('Train them with `relperception train ...` (which registers them with '
                      'add_to_manifest), or pass a weights file explicitly.')
        raise FileNotFoundError(
            f'no shipped weights {name!r} ({why} {folder / MANIFEST_NAME}). {advice}')
    expected = entry.get('sha256')
    actual = file_sha256(path)
    if expected != actual:
        raise ValueError(f'checksum mismatch for shipped weights {name!r}: {path} has sha256 '
                         f'{actual}, manifest says {expected}; the file is corrupt or was '
                         'replaced without updating the manifest (add_to_manifest)')
    return path


def add_to_manifest(name: str, path: Union[str, Path],
                    weights_dir: Union[str, Path, None] = None, **info: Any) -> Dict[str, Any]:
    """Register (or update) a weights file in the manifest.

    Args:
        name: weights name (the key of ``shipped_weights``).
        path: the weights file; it must lie directly in ``weights_dir``.
        weights_dir: manifest folder; default the package's ``weights/``.
        **info: extra JSON-serialisable entries (preset, dataset, metrics, ...).

    Returns:
        The new manifest entry ``{file, sha256, size_bytes, **info}``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is not inside ``weights_dir``.
    """
    folder = Path(weights_dir or WEIGHTS_DIR).resolve()
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f'weights file {path} does not exist')
    if path.parent != folder:
        raise ValueError(f'{path} must be inside {folder} to be shipped')
    manifest = read_manifest(folder)
    entry = {'file': path.name, 'sha256': file_sha256(path),
             'size_bytes': path.stat().st_size, **info}
    manifest[name] = entry
    write_text_atomic(folder / MANIFEST_NAME,
                      json.dumps(manifest, indent=2, sort_keys=True) + '\n')
    return entry
