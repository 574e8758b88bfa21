"""Reading a configuration's YAML: line numbers kept for messages, and bounded against hostile files.

A :class:`LineDict` remembers the line of each key, so every error names the file and line to fix; keys a
``-p`` override set are marked as the command line's. Aliases that expand past :data:`MAX_ALIAS_VALUES`
values, an alias inside what it names, and nesting too deep for PyYAML's recursion are refused in one line
before anything is built. :mod:`.config` validates what this reads.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from .errors import ConfigError

#: where an error about a value given with ``-p`` (or ``-E``) points, instead of a file
COMMAND_LINE = "<command line>"
#: values a configuration may hold once every YAML alias (``*name``) is replaced by what its anchor (``&name``)
#: names. The shipped configurations share a few field lists this way (hundreds of values); an "alias bomb" —
#: lists of aliases of lists of aliases — turns a kilobyte file into billions of values, which exhaust memory
#: as soon as the configuration is copied. Values written out are not counted: only what aliases add.
MAX_ALIAS_VALUES = 100_000
#: PyYAML reads nested lists and mappings by recursion, so a few hundred levels exhaust Python's stack
NESTED_TOO_DEEPLY = "YAML lists or mappings nested too deeply to read (hundreds of levels)"


class LineDict(dict):
    """A dict that remembers the YAML line of each key, for error messages.

    Keys set by a ``-p`` override are in ``overridden`` (and a mapping given whole on the command line
    has ``from_command_line``), so an error about them blames the command line, not the YAML line the
    value replaced.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lines: dict[Any, int] = {}
        self.overridden: set[Any] = set()
        self.from_command_line = False


def origin(mapping: Any, key: Any, file: str | None) -> dict[str, Any]:
    """``file``/``line`` keywords of a :class:`ConfigError` about ``mapping[key]``: where the value came from."""
    if isinstance(mapping, LineDict) and (mapping.from_command_line or key in mapping.overridden):
        return {"file": COMMAND_LINE, "line": None}
    return {"file": file, "line": line_of(mapping, key)}


def mark_command_line(value: Any) -> Any:
    """A value parsed from a ``-p`` override, its mappings marked as coming from the command line."""
    if isinstance(value, dict):
        marked = LineDict((k, mark_command_line(v)) for k, v in value.items())
        marked.from_command_line = True
        return marked
    if isinstance(value, list):
        return [mark_command_line(v) for v in value]
    return value


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    mapping = LineDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise ConfigError(f"duplicate key {key!r} (first on line {mapping.lines[key]})",
                              file=loader.name, line=key_node.start_mark.line + 1)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: str | os.PathLike) -> LineDict:
    """Parses a YAML file, keeping line numbers; a syntax error names the file, line and column."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as stream:
            loader = _Loader(stream)
            loader.name = path
            try:
                node = loader.get_single_node()
                _refuse_alias_bombs(node, path)
                data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
    except FileNotFoundError:
        raise ConfigError("configuration file not found", file=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a YAML configuration file", file=path) from None
    except PermissionError:
        raise ConfigError("configuration file cannot be read: permission denied", file=path) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"not a YAML configuration: byte {err.start} is not UTF-8 text (a ROOT file?)",
                          file=path) from None
    except OSError as err:
        raise ConfigError(f"configuration file cannot be read: {err.strerror or err}", file=path) from None
    except RecursionError:  # PyYAML composes nested lists and mappings by recursion
        raise ConfigError(NESTED_TOO_DEEPLY, file=path) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"YAML syntax error: {problem}" + (f" (column {mark.column + 1})" if mark else ""),
                          file=path, line=line) from None
    if data is None:
        data = LineDict()
    if not isinstance(data, dict):
        raise ConfigError(f"the top level must be a mapping, not {type(data).__name__}", file=path, line=1)
    return data


def _refuse_alias_bombs(root: yaml.Node | None, file: str) -> None:
    """Refuses a YAML document whose aliases add more than :data:`MAX_ALIAS_VALUES` values, or that holds itself.

    Counted on the composed nodes, before anything is built: an alias is the very node its anchor names, so
    each node's expanded size is computed once and every later visit of it (an alias) adds that size.
    """
    sizes: dict[int, int] = {}
    holding: set[int] = set()  # nodes being counted: meeting one again is an alias to a node that holds it
    added = 0

    def size(node: yaml.Node) -> int:
        nonlocal added
        key, line = id(node), node.start_mark.line + 1
        if key in holding:
            raise ConfigError("a YAML alias refers to a mapping or list that holds it (it would never end)",
                              file=file, line=line)
        if key in sizes:
            added += sizes[key]
            if added > MAX_ALIAS_VALUES:
                raise ConfigError(f"YAML aliases expand the configuration by more than {MAX_ALIAS_VALUES:,} values "
                                  f"(an alias bomb?); write the values out or use fewer aliases", file=file, line=line)
            return sizes[key]
        holding.add(key)
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key_node) + size(value_node) for key_node, value_node in node.value)
        else:
            total = 1
        holding.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root)


def line_of(mapping: Any, key: Any) -> int | None:
    return mapping.lines.get(key) if isinstance(mapping, LineDict) else None


def parse_value(text: str) -> Any:
    """A value given on the command line (``-p key=VALUE``, ``-E key=VALUE``) read as YAML, bounded as a file is.

    Raises:
        ConfigError: the text is not YAML, nests too deeply, or its aliases expand too far (no file or key:
            the caller knows which option it was).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        _refuse_alias_bombs(node, COMMAND_LINE)
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot parse value {text!r}: {err}") from None
    except RecursionError:
        raise ConfigError(NESTED_TOO_DEEPLY) from None
    finally:
        loader.dispose()
