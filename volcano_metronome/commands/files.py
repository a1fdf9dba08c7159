"""Reading the files commands are given (the shell side of scenario parsing).

A scenario argument is a path to a YAML file or the name of a built-in scenario (see
``volcano-metronome scenarios``); a file of that name wins over the built-in. A catalog file adds
model entries: a mapping of model name to ``{period_ms, windows: [{start_ms, len_ms, fraction}],
jitter_ms, derivation}`` (optionally under a top-level ``catalog:`` key).
"""

from __future__ import annotations

import io
import pathlib
from importlib import resources
from typing import Any, Mapping

import yaml

from volcano_metronome.catalog import Catalog, builtin, entry_from_mapping
from volcano_metronome.core.errors import InvalidInput, MetronomeError
from volcano_metronome.scenario import Scenario
from volcano_metronome.sim.workload import SimScenario, parse_sim


#: Largest file a command reads (the largest built-in scenario is under 2 KiB): ``/dev/zero`` is no settings file.
MAX_FILE_BYTES = 16 * 1024 * 1024


def read_yaml(path: str | pathlib.Path) -> Any:
    """Load one YAML document, with an error that names the file."""
    if not str(path):
        raise MetronomeError("cannot read '': an empty path names no file")
    p = pathlib.Path(path)
    try:
        with p.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise MetronomeError(f"cannot read {p}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        text = raw.decode("utf-8")
    except OSError as exc:
        raise MetronomeError(f"cannot read {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MetronomeError(f"cannot read {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return _parse_yaml(text, str(p))


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario name -> its YAML text."""
    folder = resources.files("volcano_metronome") / "scenarios"
    return {entry.name[: -len(".yaml")]: entry.read_text(encoding="utf-8")
            for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".yaml")}


def scenario_data(name_or_path: str) -> Any:
    """The YAML document of a scenario file, or of the built-in scenario of that name."""
    if not name_or_path:
        raise MetronomeError("cannot read '': an empty path names no file")
    path = pathlib.Path(name_or_path)
    if path.exists() or path.suffix in (".yaml", ".yml") and path.parent != pathlib.Path("."):
        return read_yaml(path)
    known = builtin_scenarios()
    name = name_or_path[:-5] if name_or_path.endswith(".yaml") else name_or_path
    if name in known:
        return _parse_yaml(known[name], f"built-in scenario {name}")
    raise MetronomeError(f"cannot read {name_or_path}: no such file, and no built-in scenario of that name "
                         f"(built-in: {', '.join(known)})")


def load_catalog(path: str | None) -> Catalog:
    """The built-in catalog plus the entries of ``path`` (if given)."""
    catalog = builtin()
    if path is None:
        return catalog
    data = read_yaml(path)
    if isinstance(data, Mapping) and set(data) == {"catalog"}:
        data = data["catalog"]
    try:
        if not isinstance(data, Mapping) or not data:
            raise InvalidInput("catalog", data, "a mapping of model name to {period_ms, windows, jitter_ms}")
        return catalog.with_entries(entry_from_mapping(str(k), v, f"catalog.{k}") for k, v in data.items())
    except InvalidInput as exc:
        raise MetronomeError(f"{path}: {exc}") from None


def load_sim_scenario(name_or_path: str, catalog_path: str | None = None) -> SimScenario:
    """A simulator scenario from a file or a built-in name; errors name the file and the field."""
    catalog = load_catalog(catalog_path)
    data = scenario_data(name_or_path)
    try:
        return parse_sim(data, catalog)
    except InvalidInput as exc:
        raise MetronomeError(f"{name_or_path}: {exc}") from None


def load_scenario(path: str, catalog_path: str | None = None) -> Scenario:
    """The scenario ``plan`` places: a file or built-in name, ``generate:`` drawn for its own seed."""
    sim = load_sim_scenario(path, catalog_path)
    try:
        return sim.materialised(0)
    except InvalidInput as exc:
        raise MetronomeError(f"{path}: {exc}") from None


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (it would keep the last silently)."""


def _unique_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<' merges; keys written beside it override on purpose
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: construct_mapping says so
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                    f"found the key {key!r} twice", key_node.start_mark)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)


def _parse_yaml(text: str, where: str) -> Any:
    stream = io.StringIO(text)
    stream.name = where  # PyYAML's marks name the stream: the file, not "<unicode string>"
    try:
        return yaml.load(stream, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise MetronomeError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:  # PyYAML builds nested collections recursively
        raise MetronomeError(f"{where}: nested deeper than this reader follows") from None
