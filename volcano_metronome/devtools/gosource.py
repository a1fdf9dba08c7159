"""The source tree of a Go module built as its own main module (Volcano, the JobSet and Kubeflow operators):
from the Go module proxy, else from a pinned source archive checked against its sha256.

Volcano's ``go.mod`` has ``replace`` directives that only hold when it is the main module, so its
programs are built inside its source tree rather than required from a ``tools/`` module. A group's
``source.json`` pins the module version and, optionally, the archive (file name, sha256, top directory, and
where it lies beside the checkout). The tree is unpacked once into ``~/.cache/volcano-metronome/src/``.
The operators pin no archive: their own ``go.mod`` selects the dependency versions their releases were
tested with, which a ``require`` from a module of ours could move, and the proxy serves them.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Callable

from volcano_metronome.core.errors import MetronomeError

PIN_FILE = "source.json"
ARCHIVE_VARIABLE = "METRONOME_VOLCANO_SRC"
_COMPLETE = ".metronome-complete-2"  # -2: module trees completed with their nested modules
_ARCHIVE_KEYS = ("archive", "archive_sha256", "archive_top", "archive_dir")


class SourceUnavailable(MetronomeError):
    """No source of the pinned module could be had; the message names every source tried."""


@dataclass(frozen=True)
class Pin:
    """A module version and the archive that stands in for it where the proxy does not serve it ("": none)."""

    module: str
    version: str
    archive: str = ""
    archive_sha256: str = ""
    archive_top: str = ""
    archive_dir: str = ""  # relative to the parent of the checkout, e.g. shared/upstream/volcano-src

    @classmethod
    def read(cls, path: pathlib.Path) -> Pin:
        """The pin in ``path`` (a ``source.json``): ``module`` and ``version``, optionally the archive's four keys."""
        try:
            data = json.loads(path.read_text())
            values = {name: str(data[name]) for name in cls.__dataclass_fields__ if name in data}
            archive = [name for name in _ARCHIVE_KEYS if name in values]
            if archive and len(archive) != len(_ARCHIVE_KEYS):
                raise KeyError(f"an archive needs all of {', '.join(_ARCHIVE_KEYS)}")
            return cls(**values)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SourceUnavailable(f"{path}: not a valid source pin ({exc}); expected keys module, version "
                                    f"(and optionally {', '.join(_ARCHIVE_KEYS)})") from exc

    @property
    def directory_name(self) -> str:
        """The cache directory of this pin: ``volcano-v1.15.1``, ``trainer-v2.2.1`` (a ``/vN`` suffix is skipped)."""
        parts = self.module.split("/")
        base = parts[-2] if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]) else parts[-1]
        return f"{base}-{self.version}"


def local_origin(checkout: pathlib.Path) -> pathlib.Path | None:
    """The checkout ``origin`` names, when it is a directory on this machine (a clone of a local path)."""
    try:
        url = subprocess.run(["git", "-C", str(checkout), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = pathlib.Path(url.removeprefix("file://")).expanduser() if url else None
    return path.resolve() if path is not None and path.is_absolute() and path.is_dir() else None


def beside_checkout(checkout: pathlib.Path, relative: str) -> list[pathlib.Path]:
    """``relative`` beside the checkout, then beside the local checkout it was cloned from (if any)."""
    bases = [checkout, local_origin(checkout)]
    found: list[pathlib.Path] = []
    for base in bases:
        if base is not None and base.parent / relative not in found:
            found.append(base.parent / relative)
    return found


def source_dir(
    pin: Pin,
    *,
    checkout: pathlib.Path,
    cache: pathlib.Path,
    environ: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> pathlib.Path:
    """The unpacked source tree of ``pin`` (its ``go.mod`` at the top), fetched or unpacked on first use."""
    env = dict(os.environ if environ is None else environ)
    target = cache / pin.directory_name
    if (target / _COMPLETE).is_file():
        return target / "src"
    tried: list[str] = []
    module_dir = _from_proxy(pin, env, tried)
    nested = _nested_modules(module_dir, env, tried) if module_dir is not None else None
    if module_dir is not None and nested is not None:
        if progress:
            progress(f"copying {pin.module}@{pin.version} from the module cache into {target} ...")

        def fill(destination: pathlib.Path) -> None:
            shutil.copytree(module_dir, destination)
            for relative, directory in nested.items():
                shutil.copytree(directory, destination / relative)

        return _install(target, fill, f"module {pin.module}@{pin.version}")
    archive = _find_archive(pin, env, checkout, tried)
    if archive is None:
        hint = (f". Set {ARCHIVE_VARIABLE} to the archive {pin.archive} (sha256 {pin.archive_sha256})" if pin.archive
                else "; no source archive is pinned for it: the Go module proxy must serve it")
        raise SourceUnavailable(f"no source of {pin.module} {pin.version}; tried: " + "; ".join(tried) + hint)
    if progress:
        progress(f"unpacking {archive} into {target} ...")
    return _install(target, lambda destination: _unpack(archive, pin.archive_top, destination), str(archive))


def archive_tree(
    pin: Pin, *, checkout: pathlib.Path, cache: pathlib.Path, environ: dict[str, str] | None = None
) -> tuple[pathlib.Path | None, list[str]]:
    """The unpacked archive of ``pin`` (unpacked once), or None and the places looked in."""
    env = dict(os.environ if environ is None else environ)
    target = cache / f"{pin.directory_name}-archive"
    if (target / _COMPLETE).is_file():
        return target / "src", []
    tried: list[str] = []
    archive = _find_archive(pin, env, checkout, tried)
    if archive is None:
        return None, tried
    return _install(target, lambda destination: _unpack(archive, pin.archive_top, destination), str(archive)), tried


def module_tree(module: str, version: str, environ: dict[str, str] | None = None) -> tuple[pathlib.Path | None, str]:
    """The read-only tree of ``module@version`` in the Go module cache (downloaded through the proxy if
    needed, checked against the checksum database), or None and why not."""
    tried: list[str] = []
    found = _from_proxy(Pin(module, version, "", "", "", ""), dict(os.environ if environ is None else environ), tried)
    return found, "; ".join(tried)


def _nested_modules(module_dir: pathlib.Path, env: dict[str, str], tried: list[str]) -> dict[str, pathlib.Path] | None:
    """The trees of the modules ``module_dir``'s go.mod replaces by a directory of its own that its module zip
    leaves out (Volcano: ``volcano.sh/apis => ./staging/src/volcano.sh/apis``), each at the version it
    requires; None (and why, in ``tried``) when one cannot be had."""
    go_mod = (module_dir / "go.mod").read_text()
    found: dict[str, pathlib.Path] = {}
    for path, relative in local_replacements(go_mod).items():
        if (module_dir / relative).is_dir():
            continue
        version = required_version(go_mod, path)
        tree = _from_proxy(Pin(path, version or "", "", "", "", ""), env, tried) if version else None
        if tree is None:
            tried.append(f"{path}@{version}, which {module_dir.name} replaces by ./{relative} (not in its module zip), "
                         f"is not available either")
            return None
        found[relative] = tree
    return found


def local_replacements(go_mod: str) -> dict[str, str]:
    """``module path -> relative directory`` of every ``replace X => ./dir`` in ``go_mod``."""
    found: dict[str, str] = {}
    in_block = False
    for raw in go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if line.startswith("replace ("):
            in_block = True
            continue
        if in_block and line == ")":
            in_block = False
            continue
        if not (in_block or line.startswith("replace ")):
            continue
        left, _, right = line.removeprefix("replace ").partition("=>")
        target = right.split()
        if target and target[0].startswith(("./", "../")) and left.split():
            found[left.split()[0]] = target[0].removeprefix("./")
    return found


def required_version(go_mod: str, module: str) -> str | None:
    """The version ``go_mod`` requires of ``module`` (None when it does not)."""
    for raw in go_mod.splitlines():
        fields = raw.split("//", 1)[0].split()
        if fields[:1] == ["require"]:
            fields = fields[1:]
        if len(fields) == 2 and fields[0] == module and fields[1].startswith("v"):
            return fields[1]
    return None


def _from_proxy(pin: Pin, env: dict[str, str], tried: list[str]) -> pathlib.Path | None:
    go = shutil.which("go", path=env.get("PATH"))
    where = f"Go module proxy (GOPROXY={env.get('GOPROXY') or 'go env default'})"
    if go is None:
        tried.append(f"{where}: no `go` on PATH")
        return None
    with tempfile.TemporaryDirectory(prefix="metronome-gomod-") as outside_any_module:
        completed = subprocess.run([go, "mod", "download", "-json", f"{pin.module}@{pin.version}"],
                                   cwd=outside_any_module, env=env,
                                   capture_output=True, text=True, timeout=900, check=False)
    try:
        answer = json.loads(completed.stdout or "{}")
    except ValueError:
        answer = {}
    directory = answer.get("Dir")
    if completed.returncode == 0 and directory and pathlib.Path(directory, "go.mod").is_file():
        return pathlib.Path(directory)
    reason = answer.get("Error") or completed.stderr.strip() or f"exit {completed.returncode}"
    tried.append(f"{where}: {reason.strip().splitlines()[0]}")
    return None


def _find_archive(pin: Pin, env: dict[str, str], checkout: pathlib.Path, tried: list[str]) -> pathlib.Path | None:
    if not pin.archive:
        return None
    override = env.get(ARCHIVE_VARIABLE)
    if override:  # the archive itself, or the directory holding it
        given = pathlib.Path(override).expanduser()
        candidates = [given / pin.archive if given.is_dir() else given]
    else:
        tried.append(f"${ARCHIVE_VARIABLE}: not set")
        candidates = [directory / pin.archive for directory in beside_checkout(checkout, pin.archive_dir)]
    for path in candidates:
        if not path.is_file():
            tried.append(f"{path}: not found")
            continue
        digest = _sha256(path)
        if digest != pin.archive_sha256:
            tried.append(f"{path}: sha256 {digest}, expected {pin.archive_sha256}")
            continue
        return path
    return None


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unpack(archive: pathlib.Path, top: str, destination: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory(prefix=".unpack-", dir=destination.parent) as scratch:
        with tarfile.open(archive, "r:gz") as tar:
            root = pathlib.Path(scratch).resolve()
            for member in tar.getmembers():
                inside = (root / member.name).resolve()
                link = (inside.parent / member.linkname).resolve() if member.issym() else inside
                if not (member.isfile() or member.isdir() or member.issym()) or root not in (*inside.parents, inside) \
                        or root not in link.parents:
                    raise SourceUnavailable(f"{archive}: unexpected member {member.name!r} (only files, directories "
                                            f"and symbolic links inside the tree)")
            tar.extractall(scratch)  # noqa: S202 - members checked just above
        unpacked = pathlib.Path(scratch) / top
        if not (unpacked / "go.mod").is_file():
            raise SourceUnavailable(f"{archive}: no {top}/go.mod inside")
        os.replace(unpacked, destination)


def _install(target: pathlib.Path, fill: Callable[[pathlib.Path], object], origin: str) -> pathlib.Path:
    """Fill ``target/src`` through ``fill``, make it writable, and mark it complete (after a crash: redone)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    destination = target / "src"
    fill(destination)
    for directory, _, files in os.walk(destination):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IWUSR)
    (target / _COMPLETE).write_text(origin + "\n")
    return destination
