"""Build the Kubernetes programs the tests need from the pinned Go modules under ``tools/``, once.

Each program lives in a cache outside the repository, in a directory keyed by its version and by a
digest of the recipe that built it (the group's go.mod and go.sum, the package, the linker flags), so
changing a pin builds a new binary beside the old one and nothing is ever rebuilt needlessly:

    ~/.cache/volcano-metronome/bin/kube-apiserver-v1.36.4-1a2b3c4d5e6f/kube-apiserver

``METRONOME_BIN_DIR`` replaces ``~/.cache/volcano-metronome/bin``. Binaries are built with the Go
toolchain on ``PATH`` and its usual module and build caches, so a second build of a program whose
dependencies another program already compiled is mostly linking.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.devtools import gosource
from volcano_metronome.devtools.recipes import TOOLS as TOOLS
from volcano_metronome.devtools.recipes import Tool as Tool

# Bump when the way binaries are built changes in a way go.mod/go.sum do not show.
_RECIPE_VERSION = "1"
_TIERS = ("integration", "e2e")


class MissingBinary(MetronomeError):
    """A program the caller needs has not been built into the cache yet."""


class BuildFailed(MetronomeError):
    """``go build`` failed, or the Go toolchain or the ``tools/`` modules cannot be found."""


class UnknownTool(MetronomeError):
    """A name that is not one of :data:`TOOLS`."""


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build` did for one program."""

    name: str
    version: str
    seconds: float
    cached: bool
    path: pathlib.Path

    def to_json(self) -> dict[str, object]:
        """The JSON object ``tools build --json`` prints for this result."""
        return {
            "name": self.name,
            "version": self.version,
            "seconds": round(self.seconds, 2),
            "cached": self.cached,
            "path": str(self.path),
        }


def default_names(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The programs a CI run builds: the integration tier, plus the e2e tier when METRONOME_E2E=1."""
    env = os.environ if environ is None else environ
    tiers = _TIERS if env.get("METRONOME_E2E") == "1" else ("integration",)
    return tuple(name for name, tool in TOOLS.items() if tool.tier in tiers)


def cache_root(environ: dict[str, str] | None = None) -> pathlib.Path:
    """Where built programs live: ``$METRONOME_BIN_DIR`` or ``~/.cache/volcano-metronome/bin``."""
    return user_cache_dir("bin", "METRONOME_BIN_DIR", environ)


def user_cache_dir(name: str, override_variable: str, environ: dict[str, str] | None = None) -> pathlib.Path:
    """``$override_variable`` if set, else ``volcano-metronome/name`` in the user's cache (XDG_CACHE_HOME or ~/.cache)."""
    env = os.environ if environ is None else environ
    override = env.get(override_variable)
    if override:
        return pathlib.Path(override).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "volcano-metronome" / name


def tools_dir(environ: dict[str, str] | None = None) -> pathlib.Path:
    """The ``tools/`` directory of the source checkout (``$METRONOME_TOOLS_DIR`` overrides)."""
    env = os.environ if environ is None else environ
    override = env.get("METRONOME_TOOLS_DIR")
    candidates = [pathlib.Path(override)] if override else []
    # An editable install finds tools/ beside the package; a regular install (tox) finds it from
    # the working directory, which is the checkout when tests run.
    candidates.append(pathlib.Path(__file__).resolve().parents[2] / "tools")
    cwd = pathlib.Path.cwd().resolve()
    candidates.extend(parent / "tools" for parent in (cwd, *cwd.parents))
    for candidate in candidates:
        if (candidate / "controlplane" / "go.mod").is_file():
            return candidate
    raise BuildFailed(
        "cannot find the tools/ Go modules of the volcano-metronome checkout; run from the checkout "
        "or set METRONOME_TOOLS_DIR"
    )


def tool(name: str) -> Tool:
    """The recipe of ``name``; raises :class:`UnknownTool` naming the known programs."""
    try:
        return TOOLS[name]
    except KeyError:
        raise UnknownTool(f"unknown tool {name!r}; known: {', '.join(TOOLS)}") from None


def module_version(go_mod: str, module: str) -> str:
    """The version ``go.mod`` text requires of ``module`` (single-line or block ``require``)."""
    in_block = False
    for raw in go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
                continue
            fields = line.split()
        elif line.startswith("require ("):
            in_block = True
            continue
        elif line.startswith("require "):
            fields = line.split()[1:]
        else:
            continue
        if len(fields) == 2 and fields[0] == module:
            return fields[1]
    raise BuildFailed(f"go.mod does not require {module}")


def version_key(name: str, tools: pathlib.Path | None = None) -> tuple[str, str]:
    """``(version, key)`` of ``name``: the key names its cache directory."""
    recipe = tool(name)
    group = (tools or tools_dir()) / recipe.group
    pin_files = (gosource.PIN_FILE,) if recipe.main_module else ("go.mod", "go.sum")
    try:
        pins = [(group / file).read_bytes() for file in pin_files]
    except OSError as exc:
        raise BuildFailed(f"cannot read the pins of {name} in {group}: {exc}") from exc
    if recipe.main_module:
        version = gosource.Pin.read(group / gosource.PIN_FILE).version
    else:
        version = module_version(pins[0].decode(), recipe.module)
    digest = hashlib.sha256()
    parts = [
        _RECIPE_VERSION.encode(),
        *pins,
        recipe.package.encode(),
        "\0".join(recipe.version_flags).encode(),
    ]
    if recipe.module_files:  # only when present, so adding the field moved no existing key
        parts.append("\0".join(recipe.module_files).encode())
    if recipe.tags:  # likewise
        parts.append(("tags:" + ",".join(recipe.tags)).encode())
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return version, f"{name}-{version}-{digest.hexdigest()[:12]}"


def expected_path(name: str, *, root: pathlib.Path | None = None, tools: pathlib.Path | None = None) -> pathlib.Path:
    """Where the cached binary of ``name`` is (or will be) for the current pins."""
    _, key = version_key(name, tools)
    return (root or cache_root()) / key / name


def binary_path(name: str, *, root: pathlib.Path | None = None, tools: pathlib.Path | None = None) -> pathlib.Path:
    """The built program ``name``; raises :class:`MissingBinary` naming the command that builds it."""
    path = expected_path(name, root=root, tools=tools)
    if not _complete(tool(name), path):
        raise MissingBinary(
            f"{name} is not built (looked for {path}); build it with `volcano-metronome tools build {name}`"
        )
    return path


def build(
    names: Iterable[str] | None = None,
    *,
    force: bool = False,
    root: pathlib.Path | None = None,
    tools: pathlib.Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BuildResult]:
    """Build ``names`` (default: :func:`default_names`) unless already cached; one result each.

    Programs are built one after the other: ``go build`` already uses every core, and later programs
    reuse packages compiled for earlier ones through the Go build cache.
    """
    wanted = list(default_names() if names is None else names)
    for name in wanted:
        tool(name)  # fail on a typo before spending minutes on the others
    tools = tools or tools_dir()
    root = root or cache_root()
    results: list[BuildResult] = []
    for name in dict.fromkeys(wanted):
        results.append(_build_one(name, force=force, root=root, tools=tools, progress=progress))
    return results


def _build_one(
    name: str,
    *,
    force: bool,
    root: pathlib.Path,
    tools: pathlib.Path,
    progress: Callable[[str], None] | None,
) -> BuildResult:
    recipe = tool(name)
    version, key = version_key(name, tools)
    target_dir = root / key
    target = target_dir / name
    if not force and _complete(recipe, target):
        return BuildResult(name=name, version=version, seconds=0.0, cached=True, path=target)
    go = shutil.which("go")
    if go is None:
        raise BuildFailed(f"building {name} needs the Go toolchain (`go`) on PATH")
    workdir = main_module_dir(recipe, tools, progress) if recipe.main_module else tools / recipe.group
    if progress:
        progress(f"building {name} {version} into {target_dir} ...")
    target_dir.mkdir(parents=True, exist_ok=True)
    # Build to a private name, then rename: an interrupted build never looks like a cached one.
    partial = target_dir / f".{name}.partial-{os.getpid()}"
    client_go = "" if recipe.main_module else _client_go_version(tools / recipe.group)
    tags = ["-tags", ",".join(recipe.tags)] if recipe.tags else []
    command = [go, "build", "-trimpath", *tags, "-ldflags", _ldflags(recipe, version, client_go), "-o", str(partial),
               recipe.package]
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"  # static binaries; no C toolchain needed on CI
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly").strip()
    # A module zip may carry the project's go.work (Prometheus's names modules its zip leaves out): build
    # against the module's own go.mod, as its release does.
    env["GOWORK"] = "off"
    log_path = target_dir / "build.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        completed = subprocess.run(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if completed.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildFailed(
            f"`go build {recipe.package}` in {workdir} failed (exit {completed.returncode}); "
            f"last lines of {log_path}:\n{_tail(log_path)}"
        )
    _copy_module_files(recipe, go, env, workdir, target_dir)
    os.replace(partial, target)
    info = {"name": name, "version": version, "package": recipe.package, "seconds": round(seconds, 2)}
    (target_dir / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    return BuildResult(name=name, version=version, seconds=seconds, cached=False, path=target)


def module_file(name: str, relative: str, *, root: pathlib.Path | None = None, tools: pathlib.Path | None = None) -> pathlib.Path:
    """A run-time file of ``name`` (one of its ``module_files``), copied beside its binary."""
    recipe = tool(name)
    if relative not in recipe.module_files:
        raise UnknownTool(f"{name} has no module file {relative!r}; it has: {', '.join(recipe.module_files) or 'none'}")
    binary = binary_path(name, root=root, tools=tools)
    return binary.parent / "share" / relative


def _complete(recipe: Tool, target: pathlib.Path) -> bool:
    if not (target.is_file() and os.access(target, os.X_OK)):
        return False
    return all((target.parent / "share" / relative).is_file() for relative in recipe.module_files)


def _copy_module_files(recipe: Tool, go: str, env: dict[str, str], group: pathlib.Path, target_dir: pathlib.Path) -> None:
    if not recipe.module_files:
        return
    if recipe.main_module:
        _copy_files(recipe, group, target_dir)  # ``group`` is the module's own tree
        return
    listed = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", recipe.module],
        cwd=group,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    module_dir = pathlib.Path(listed.stdout.strip())
    if listed.returncode != 0 or not module_dir.is_dir():
        raise BuildFailed(f"cannot locate the source of {recipe.module} in the module cache: {listed.stderr.strip()}")
    _copy_files(recipe, module_dir, target_dir)


def _copy_files(recipe: Tool, module_dir: pathlib.Path, target_dir: pathlib.Path) -> None:
    for relative in recipe.module_files:
        source = module_dir / relative
        destination = target_dir / "share" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, destination)
        except OSError as exc:
            raise BuildFailed(f"{recipe.name} needs {relative} from {recipe.module}: {exc}") from exc


def main_module_dir(
    recipe: Tool, tools: pathlib.Path | None = None, progress: Callable[[str], None] | None = None
) -> pathlib.Path:
    """The source tree a ``main_module`` program is built in (module proxy, else the pinned archive)."""
    tools = tools or tools_dir()
    pin = gosource.Pin.read(tools / recipe.group / gosource.PIN_FILE)
    try:
        return gosource.source_dir(pin, checkout=tools.parent, cache=user_cache_dir("src", "METRONOME_SRC_DIR"),
                                   progress=progress)
    except gosource.SourceUnavailable as exc:
        raise BuildFailed(f"cannot build {recipe.name}: {exc}") from exc


def _client_go_version(group: pathlib.Path) -> str:
    try:
        return module_version((group / "go.mod").read_text(), "k8s.io/client-go")
    except (OSError, BuildFailed):
        return ""


def _ldflags(recipe: Tool, version: str, client_go: str = "") -> str:
    match = re.match(r"v(\d+)\.(\d+)", version)
    major, minor = (match.group(1), match.group(2)) if match else ("", "")
    k8s = re.match(r"v0\.(\d+)", client_go)  # client-go v0.N is Kubernetes 1.N
    fields = {"version": version, "major": major, "minor": minor, "k8s_major": "1" if k8s else "",
              "k8s_minor": k8s.group(1) if k8s else ""}
    flags = ["-s", "-w"]  # no symbol table or DWARF: a third smaller, and faster to link
    for assignment in recipe.version_flags:
        if "{k8s_" in assignment and not k8s:
            raise BuildFailed(f"{recipe.name}: {assignment} needs k8s.io/client-go in the go.mod of its group")
        flags.extend(["-X", assignment.format(**fields)])
    return " ".join(flags)


def _tail(path: pathlib.Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no build log)"
    return "\n".join(text.splitlines()[-lines:])


def describe(names: Sequence[str] | None = None) -> list[dict[str, object]]:
    """Name, tier, version, cache path and whether it is built, for ``tools list``."""
    rows: list[dict[str, object]] = []
    for name in names or list(TOOLS):
        recipe = tool(name)
        version, _ = version_key(name)
        path = expected_path(name)
        rows.append(
            {
                "name": name,
                "tier": recipe.tier,
                "version": version,
                "package": recipe.package,
                "built": path.is_file(),
                "path": str(path),
            }
        )
    return rows
