# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The package's layers: a package imports only packages below it, and no private names.

Every module of ``relperception`` is parsed with ``ast``; every import counts, at module level
or inside a function (lazy), relative or absolute, and ``importlib.import_module`` of a
constant name. ``LAYERS`` lists the packages from the top (``cli``) down; a package may import
the packages of the layers below its own, never one of its own layer or above. The order
is the architecture plan's ("Layers": cli, nodes, pipeline, evaluation, training, then the
core packages), with two changes the code needs:

* ``training`` sits above ``evaluation``: training scores its validation sets with the
  evaluation metrics (``evaluation.depth``, ``evaluation.segmentation``), so that they are the
  numbers the reports give; nothing in evaluation trains.
* ``odometry`` sits above ``matching``: visual odometry is a user of the ``Matcher`` interface
  (and of ``matching.image_cache``), while no matcher knows about odometry.

The plan does not place ``visualization`` (relation maps drawn as images: beside ``imaging``)
or the small top-level modules (``config`` above ``core_types`` above the leaves
``atomic_files``, ``interruption``, ``transforms``, ``validation``); a new package fails
:func:`test_every_package_is_in_a_layer` until it is placed.

A module may use the public names of any module it can import, never the ``_private`` ones
of another module (``from m import _x``, or ``m._x`` on an imported module).
"""

import ast
from pathlib import Path

from lint_targets import REPO_ROOT
import pytest

PACKAGE = 'relperception'
#: Packages (sub-packages and top-level modules of relperception), top layer first.
LAYERS = (
    ('cli',),
    ('nodes',),
    ('pipeline',),
    ('training',),
    ('evaluation',),
    ('odometry',),
    ('matching',),
    ('models',),
    ('runtime',),
    ('data',),
    ('imaging', 'visualization'),
    ('config',),
    ('core_types',),
    ('atomic_files', 'interruption', 'transforms', 'validation'),
)


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """Return the dotted module name of a source file below ``root``."""
    return '.'.join(path.relative_to(root).with_suffix('').parts).removesuffix('.__init__')


def package_of(module: str):
    """Return the layer package of a ``relperception`` module name (None: the root, other)."""
    parts = module.split('.')
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    return parts[1]


def resolve(module, level: int, current: str, is_package: bool) -> str:
    """Return the absolute module name of an ``ImportFrom`` (relative when ``level`` > 0)."""
    if not level:
        return module
    base = current.split('.')
    base = base[:len(base) - level + (1 if is_package else 0)]
    return '.'.join(base + ([module] if module else []))


def imports(source: str, current: str, is_package: bool = False):
    """Yield ``(line, module, names)`` for every import of a source, nested ones included.

    Args:
        source: Python source text.
        current: its module name (to resolve relative imports).
        is_package: whether it is a package's ``__init__``.

    Yields:
        The imported module and, for ``from m import a, b``, the names ``('a', 'b')``
        (``()`` for ``import m`` and ``import_module('m')``).
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            yield (node.lineno, resolve(node.module, node.level, current, is_package),
                   tuple(alias.name for alias in node.names))
        elif isinstance(node, ast.Call) and getattr(node.func, 'attr', getattr(
                node.func, 'id', None)) == 'import_module':
            if node.args and isinstance(node.args[0], ast.Constant):
                yield node.lineno, str(node.args[0].value), ()


def imported_packages(module: str, names) -> set:
    """Return the layer packages an import of ``module`` (and ``names`` from it) reaches."""
    if module == PACKAGE:  # from relperception import data, config
        return {name for name in names if name != '*'}
    package = package_of(module)
    return {package} if package else set()


def layer_violations(source: str, current: str, is_package: bool = False,
                     layers=LAYERS):
    """Return ``'module:line imports x (layer)'`` lines for imports of a same or higher layer.

    Raises:
        KeyError: ``current`` or an imported package is in no layer.
    """
    rank = {package: index for index, layer in enumerate(layers) for package in layer}
    own = package_of(current)
    if own is None:  # the root package's __init__: imports nothing of the package
        own_rank = len(layers)
    else:
        own_rank = rank[own]
    found = []
    for line, module, names in imports(source, current, is_package):
        for package in imported_packages(module, names) - {own}:
            if package not in rank:
                raise KeyError(f'{current}:{line}: imports {PACKAGE}.{package}, which is in '
                               f'no layer of LAYERS')
            if rank[package] <= own_rank:
                found.append(f'{current}:{line} ({own}) imports {module} ({package})')
    return found


def is_private(name: str) -> bool:
    """Return whether ``name`` is private (``_x``, not a dunder)."""
    return name.startswith('_') and not name.endswith('__')


def private_name_uses(source: str, current: str, is_package: bool = False,
                      is_module=None):
    """Return ``'module:line uses m._x'`` lines for private names of other package modules.

    Args:
        source: Python source text.
        current: its module name.
        is_package: whether it is a package's ``__init__``.
        is_module: ``name -> bool``, whether a dotted name is a module (for ``from p import
            m`` then ``m._x``); default: a file or folder of that name exists.
    """
    if is_module is None:
        def is_module(name):
            path = REPO_ROOT.joinpath(*name.split('.'))
            return path.is_dir() or path.with_suffix('.py').is_file()

    tree = ast.parse(source)
    found = []
    aliases = {}  # local name -> module of this package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if package_of(alias.name) or alias.name == PACKAGE:  # import a.b binds a
                    aliases[alias.asname or PACKAGE] = alias.name if alias.asname else PACKAGE
        elif isinstance(node, ast.ImportFrom):
            module = resolve(node.module, node.level, current, is_package)
            if not module.startswith(PACKAGE) or module == current:
                continue
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f'{current}:{node.lineno} imports {module}.{alias.name}')
                elif is_module(f'{module}.{alias.name}'):
                    aliases[alias.asname or alias.name] = f'{module}.{alias.name}'
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition('.')
            if head in aliases:
                module = '.'.join(filter(None, (aliases[head], rest)))
                if module != current:
                    found.append(f'{current}:{node.lineno} uses {module}.{node.attr}')
    return found


def _dotted(node):
    """Return ``a.b.c`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return '.'.join([node.id] + parts[::-1])


def package_sources():
    """Yield ``(module name, is package, source)`` for every module of the package."""
    for path in sorted((REPO_ROOT / PACKAGE).rglob('*.py')):
        yield module_name(path), path.name == '__init__.py', path.read_text(encoding='utf-8')


class TestChecker:
    """The checkers find what they are meant to find (on small sources)."""

    LAYERS = (('top',), ('middle', 'peer'), ('bottom',))

    def check(self, source, current='relperception.middle.a', is_package=False):
        return layer_violations(source, current, is_package, self.LAYERS)

    def test_lower_layer_is_allowed(self):
        assert self.check('import relperception.bottom.x\n'
                          'from relperception.bottom import y\n'
                          'from relperception.middle.b import z\n') == []

    def test_higher_or_same_layer_is_found(self):
        found = self.check('from relperception.top.x import y\nimport relperception.peer\n')
        assert len(found) == 2 and '(top)' in found[0] and '(peer)' in found[1]

    def test_nested_relative_and_dynamic_imports_count(self):
        source = ('def f():\n    from ..top import x\n'
                  'class C:\n    def g(self):\n        import relperception.top.y\n'
                  'importlib.import_module("relperception.peer.z")\n'
                  'from relperception import top, bottom\n')
        found = self.check(source)
        assert sorted(int(f.split(':')[1].split()[0]) for f in found) == [2, 5, 6, 7], found

    def test_relative_import_resolution(self):
        assert resolve('x', 1, 'relperception.a.b', False) == 'relperception.a.x'
        assert resolve('x', 1, 'relperception.a', True) == 'relperception.a.x'
        assert resolve(None, 2, 'relperception.a.b', False) == 'relperception'
        assert self.check('from .. import top\n') != []

    def test_unknown_package_fails(self):
        with pytest.raises(KeyError, match='no layer'):
            self.check('from relperception.elsewhere import x\n')

    def test_private_names_are_found(self):
        modules = {'relperception.a.m', 'relperception.a'}
        source = ('from relperception.a.m import _hidden, public, __version__\n'
                  'from relperception.a import m as mm\n'
                  'import relperception.a.m\n'
                  'from . import m\n'
                  'def f():\n'
                  '    return mm._x, relperception.a.m._y, m._z, mm.public, mm.__doc__\n')
        found = private_name_uses(source, 'relperception.a.n', is_module=modules.__contains__)
        assert [f.split(' ', 1)[1] for f in found] == [
            'imports relperception.a.m._hidden', 'uses relperception.a.m._x',
            'uses relperception.a.m._y', 'uses relperception.a.m._z'], found

    def test_own_private_names_are_allowed(self):
        source = 'from relperception.a.m import _hidden\nimport relperception.a.m\nm = 1\n'
        assert private_name_uses(source, 'relperception.a.m', is_module=bool) == []


def test_every_package_is_in_a_layer():
    packages = {package_of(name) for name, _, _ in package_sources()} - {None}
    placed = {package for layer in LAYERS for package in layer}
    assert packages == placed, (f'not in LAYERS: {sorted(packages - placed)}; '
                                f'gone: {sorted(placed - packages)}')


def test_packages_import_only_lower_layers():
    found = [line for name, is_package, source in package_sources()
             for line in layer_violations(source, name, is_package)]
    assert not found, 'imports of a package of the same or a higher layer:\n' + '\n'.join(found)


def test_no_private_names_of_other_modules():
    found = [line for name, is_package, source in package_sources()
             for line in private_name_uses(source, name, is_package)]
    assert not found, "uses of other modules' private names:\n" + '\n'.join(found)
