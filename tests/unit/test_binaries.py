"""The binary cache: keys follow the pins, cached programs are reused, missing ones say how to build."""

from __future__ import annotations

import json
import os
import pathlib
import stat

import pytest

from volcano_metronome.core.errors import MetronomeError
from volcano_metronome.devtools import binaries, recipes

GO_MOD = """\
// a comment
module example/tools/controlplane

go 1.26.0

require k8s.io/kubernetes v1.36.4 // indirect

require (
	go.etcd.io/etcd/server/v3 v3.6.8
	helm.sh/helm/v3 v3.21.4 // indirect
)
"""


@pytest.fixture()
def tools(tmp_path: pathlib.Path) -> pathlib.Path:
    group = tmp_path / "tools" / "controlplane"
    group.mkdir(parents=True)
    (group / "go.mod").write_text(GO_MOD)
    (group / "go.sum").write_text("k8s.io/kubernetes v1.36.4 h1:abc=\n")
    return tmp_path / "tools"


@pytest.fixture()
def fake_go(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A `go` on PATH that records its arguments and writes the -o file, or fails on request."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    script = bin_dir / "go"
    script.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$FAKE_GO_CALLS"\n'
        'if [ "$1" = "list" ]; then echo "$FAKE_MODULE_DIR"; exit 0; fi\n'
        'if [ "$1" = "mod" ]; then echo "{\\"Error\\": \\"$FAKE_MOD_DOWNLOAD_FAIL\\"}"; exit 1; fi\n'
        'if [ -n "$FAKE_GO_FAIL" ]; then echo "compile error: boom" >&2; exit 1; fi\n'
        'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then printf "#!/bin/sh\\n" > "$2"; chmod +x "$2"; fi; shift; done\n'
    )
    script.chmod(0o755)
    calls = tmp_path / "go-calls.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    monkeypatch.delenv("FAKE_GO_FAIL", raising=False)
    return calls


def test_module_version_reads_single_line_and_block_requires() -> None:
    assert binaries.module_version(GO_MOD, "k8s.io/kubernetes") == "v1.36.4"
    assert binaries.module_version(GO_MOD, "go.etcd.io/etcd/server/v3") == "v3.6.8"
    assert binaries.module_version(GO_MOD, "helm.sh/helm/v3") == "v3.21.4"
    with pytest.raises(binaries.BuildFailed, match="does not require sigs.k8s.io/kueue"):
        binaries.module_version(GO_MOD, "sigs.k8s.io/kueue")


def test_key_names_version_and_follows_the_pins(tools: pathlib.Path) -> None:
    version, key = binaries.version_key("kube-apiserver", tools)
    assert version == "v1.36.4"
    assert key.startswith("kube-apiserver-v1.36.4-")
    assert binaries.version_key("kube-apiserver", tools) == (version, key)
    # The same go.mod builds another program: another key.
    assert binaries.version_key("etcd", tools)[1].startswith("etcd-v3.6.8-")
    # A changed go.sum (a dependency moved) means a new binary beside the old one.
    (tools / "controlplane" / "go.sum").write_text("k8s.io/kubernetes v1.36.4 h1:def=\n")
    assert binaries.version_key("kube-apiserver", tools)[1] != key


def test_cache_root_default_and_override(tmp_path: pathlib.Path) -> None:
    assert binaries.cache_root({"METRONOME_BIN_DIR": str(tmp_path)}) == tmp_path
    assert binaries.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "volcano-metronome" / "bin"
    assert binaries.cache_root({}) == pathlib.Path.home() / ".cache" / "volcano-metronome" / "bin"
    # The cache must never live inside the repository.
    repo = pathlib.Path(__file__).resolve().parents[2]
    assert repo not in binaries.cache_root({}).parents


def test_missing_binary_names_the_build_command(tools: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with pytest.raises(binaries.MissingBinary) as info:
        binaries.binary_path("etcd", root=tmp_path / "cache", tools=tools)
    assert isinstance(info.value, MetronomeError)
    assert "volcano-metronome tools build etcd" in str(info.value)
    assert str(tmp_path / "cache") in str(info.value)


def test_unknown_tool_lists_the_known_ones(tools: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with pytest.raises(binaries.UnknownTool, match="known: kube-apiserver, etcd"):
        binaries.binary_path("kubeadm", root=tmp_path, tools=tools)
    with pytest.raises(binaries.UnknownTool):
        binaries.build(["etcd", "nope"], root=tmp_path, tools=tools)


def test_build_then_reuse(tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path) -> None:
    root = tmp_path / "cache"
    (first,) = binaries.build(["kube-apiserver"], root=root, tools=tools)
    assert not first.cached and first.version == "v1.36.4"
    assert first.path == binaries.binary_path("kube-apiserver", root=root, tools=tools)
    assert first.path.parent.parent == root
    assert os.access(first.path, os.X_OK)
    call = fake_go.read_text().split()
    assert call[:2] == ["build", "-trimpath"]
    assert call[-1] == "k8s.io/kubernetes/cmd/kube-apiserver"
    # The server must report its real version, not v0.0.0-master.
    assert "k8s.io/component-base/version.gitVersion=v1.36.4" in call
    assert "k8s.io/component-base/version.gitMinor=36" in call
    assert json.loads((first.path.parent / "build.json").read_text())["version"] == "v1.36.4"
    assert not list(first.path.parent.glob(".*partial*"))

    (again,) = binaries.build(["kube-apiserver"], root=root, tools=tools)
    assert again.cached and again.seconds == 0.0 and again.path == first.path
    assert len(fake_go.read_text().splitlines()) == 1  # go was not run again

    (forced,) = binaries.build(["kube-apiserver"], root=root, tools=tools, force=True)
    assert not forced.cached
    assert forced.to_json()["cached"] is False
    assert set(forced.to_json()) == {"name", "version", "seconds", "cached", "path"}


def test_failed_build_leaves_nothing_cached(
    tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    root = tmp_path / "cache"
    with pytest.raises(binaries.BuildFailed, match="compile error: boom"):
        binaries.build(["etcd"], root=root, tools=tools)
    with pytest.raises(binaries.MissingBinary):
        binaries.binary_path("etcd", root=root, tools=tools)


def test_non_executable_file_is_not_a_binary(tools: pathlib.Path, tmp_path: pathlib.Path) -> None:
    path = binaries.expected_path("etcd", root=tmp_path, tools=tools)
    path.parent.mkdir(parents=True)
    path.write_text("")
    with pytest.raises(binaries.MissingBinary):
        binaries.binary_path("etcd", root=tmp_path, tools=tools)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    assert binaries.binary_path("etcd", root=tmp_path, tools=tools) == path


def test_default_names_by_tier() -> None:
    integration = binaries.default_names({})
    assert {"kube-apiserver", "etcd"} <= set(integration)
    assert "kueue" not in integration and "kwok" not in integration
    extra = {name for name, recipe in binaries.TOOLS.items() if recipe.tier == "extra"}
    # Never built by CI: mpi-operator and trainer are pinned for later integrations, prometheus serves the
    # tests marked programs("prometheus"), which run only where it is cached.
    assert extra == {"mpi-operator", "trainer-controller-manager", "prometheus"}
    assert set(binaries.default_names({"METRONOME_E2E": "1"})) == set(binaries.TOOLS) - extra


def test_build_tags_reach_go_build_and_the_key(
    tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recipe's tags are passed to `go build -tags` and name another binary; GOWORK is off (a module zip's
    go.work, as Prometheus ships, names modules the zip leaves out); a recipe without tags keeps its key."""
    plain = recipes.Tool(name="tagged", group="controlplane", package="go.etcd.io/etcd/server/v3",
                         module="go.etcd.io/etcd/server/v3", tier="extra")
    monkeypatch.setitem(binaries.TOOLS, "tagged", plain)
    untagged_key = binaries.version_key("tagged", tools)[1]
    assert untagged_key.removeprefix("tagged") == binaries.version_key("etcd", tools)[1].removeprefix("etcd")
    monkeypatch.setitem(binaries.TOOLS, "tagged", recipes.Tool(**{**plain.__dict__, "tags": ("netgo", "remove_all_sd")}))
    assert binaries.version_key("tagged", tools)[1] != untagged_key
    monkeypatch.setenv("GOWORK", "/somewhere/go.work")
    script = fake_go.parent / "fakebin" / "go"
    script.write_text(script.read_text().replace('echo "$@" >> "$FAKE_GO_CALLS"', 'echo "GOWORK=$GOWORK $@" >> "$FAKE_GO_CALLS"'))
    (result,) = binaries.build(["tagged"], root=tmp_path / "cache", tools=tools)
    assert not result.cached
    (call,) = fake_go.read_text().splitlines()
    assert call.startswith("GOWORK=off build ") and " -tags netgo,remove_all_sd " in call


def test_every_recipe_matches_the_real_tools_modules() -> None:
    """Each program's group go.mod requires the module it is named after, and tools.go imports it."""
    tools = binaries.tools_dir()
    for name, recipe in binaries.TOOLS.items():
        version, key = binaries.version_key(name, tools)
        assert version.startswith("v"), name
        assert key.startswith(f"{name}-{version}-")
        if recipe.main_module:  # built in its own source tree, pinned by source.json
            assert recipe.package == "." or recipe.package.startswith("./cmd/"), name  # JobSet's main is its root
            continue
        tools_go = (tools / recipe.group / "tools.go").read_text()
        assert "//go:build tools" in tools_go
        assert f'_ "{recipe.package}"' in tools_go, f"{recipe.group}/tools.go does not import {recipe.package}"


def test_run_time_files_travel_with_the_binary(
    tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kwok needs its Stage files at run time: they are copied from its module beside the binary."""
    group = tools / "kwok"
    group.mkdir()
    (group / "go.mod").write_text("module x/tools/kwok\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok v0.8.0\n")
    (group / "go.sum").write_text("")
    module_dir = tmp_path / "kwok@v0.8.0"
    for relative in binaries.tool("kwok").module_files:
        (module_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (module_dir / relative).write_text(f"kind: Stage # {relative}\n")
    monkeypatch.setenv("FAKE_MODULE_DIR", str(module_dir))
    root = tmp_path / "cache"

    (result,) = binaries.build(["kwok"], root=root, tools=tools)
    assert not result.cached
    first = binaries.tool("kwok").module_files[0]
    copied = binaries.module_file("kwok", first, root=root, tools=tools)
    assert copied.read_text() == f"kind: Stage # {first}\n"
    assert copied.is_relative_to(result.path.parent)
    with pytest.raises(binaries.UnknownTool, match="no module file"):
        binaries.module_file("kwok", "nope.yaml", root=root, tools=tools)

    # A binary without its files is incomplete: not cached, and rebuilt.
    copied.unlink()
    with pytest.raises(binaries.MissingBinary):
        binaries.binary_path("kwok", root=root, tools=tools)
    (again,) = binaries.build(["kwok"], root=root, tools=tools)
    assert not again.cached and copied.exists()


def test_scheduler_and_controller_manager_are_e2e_programs_at_the_api_servers_pins() -> None:
    """Same module group and module as kube-apiserver (so the same k8s.io pins), built only for e2e."""
    apiserver = binaries.tool("kube-apiserver")
    for name in ("kube-scheduler", "kube-controller-manager"):
        recipe = binaries.tool(name)
        assert (recipe.group, recipe.module, recipe.tier) == (apiserver.group, apiserver.module, "e2e")
        assert recipe.version_flags == apiserver.version_flags
        assert binaries.version_key(name)[0] == binaries.version_key("kube-apiserver")[0]
    # The normal CI run builds exactly the integration tier.
    assert binaries.default_names({}) == ("kube-apiserver", "etcd", "helm", "kubectl")


def test_kueue_carries_its_own_crds_and_webhook_manifests() -> None:
    files = binaries.tool("kueue").module_files
    assert "config/components/webhook/manifests.yaml" in files
    assert "config/components/webhook/kustomization.yaml" in files
    crds = [f for f in files if "/crd/bases/" in f]
    assert any(f.endswith("kueue.x-k8s.io_workloads.yaml") for f in crds)
    assert any(f.endswith("kueue.x-k8s.io_multikueueclusters.yaml") for f in crds)  # not in shared/upstream


def _volcano_group(tools: pathlib.Path, archive: pathlib.Path, sha256: str) -> None:
    group = tools / "volcano"
    group.mkdir(parents=True, exist_ok=True)
    (group / "source.json").write_text(json.dumps({
        "module": "volcano.sh/volcano", "version": "v1.15.1", "archive": archive.name, "archive_sha256": sha256,
        "archive_top": "volcano-1.15.1", "archive_dir": "shared/upstream/volcano-src"}))


def _volcano_archive(directory: pathlib.Path) -> tuple[pathlib.Path, str]:
    import hashlib
    import io
    import tarfile

    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / "volcano-v1.15.1-src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for relative in ("go.mod", *(f for t in ("volcano-scheduler",) for f in binaries.tool(t).module_files)):
            data = f"# {relative}\n".encode()
            info = tarfile.TarInfo(f"volcano-1.15.1/{relative}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def _no_proxy(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """A `go` whose `mod download` fails as the proxy does for a module it refuses."""
    monkeypatch.setenv("FAKE_MOD_DOWNLOAD_FAIL", "volcano.sh/volcano@v1.15.1: reading https://proxy.golang.org/...: 403 Forbidden")
    monkeypatch.setenv("METRONOME_SRC_DIR", str(tmp_path / "src-cache"))


def test_volcano_builds_in_the_archive_checked_against_its_sha256(
    tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No module from the proxy: the archive beside the checkout is unpacked and ./cmd/scheduler built in it."""
    tools = tmp_path / "work" / "checkout" / "tools"
    archive, sha256 = _volcano_archive(tmp_path / "work" / "shared" / "upstream" / "volcano-src")
    _volcano_group(tools, archive, sha256)
    _no_proxy(monkeypatch, tmp_path)
    monkeypatch.delenv("METRONOME_VOLCANO_SRC", raising=False)
    (result,) = binaries.build(["volcano-scheduler"], root=tmp_path / "cache", tools=tools)
    assert result.version == "v1.15.1" and not result.cached
    calls = fake_go.read_text()
    assert "mod download -json volcano.sh/volcano@v1.15.1" in calls
    assert "./cmd/scheduler" in calls and "volcano.sh/volcano/pkg/version.Version=v1.15.1" in calls
    conf = binaries.module_file("volcano-scheduler", recipes.VOLCANO_SCHEDULER_CONF, root=tmp_path / "cache", tools=tools)
    assert conf.read_text() == f"# {recipes.VOLCANO_SCHEDULER_CONF}\n"


def test_volcano_source_error_names_every_source_tried(
    tools: pathlib.Path, tmp_path: pathlib.Path, fake_go: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, sha256 = _volcano_archive(tmp_path / "elsewhere")
    _volcano_group(tools, archive, "0" * 64)  # the archive found does not match the pin
    _no_proxy(monkeypatch, tmp_path)
    monkeypatch.setenv("METRONOME_VOLCANO_SRC", str(archive))
    with pytest.raises(binaries.BuildFailed) as failure:
        binaries.build(["volcano-webhook-manager"], root=tmp_path / "cache", tools=tools)
    message = str(failure.value)
    assert "Go module proxy" in message and "403 Forbidden" in message
    assert f"{archive}: sha256 {sha256}, expected {'0' * 64}" in message
    assert "METRONOME_VOLCANO_SRC" in message
    monkeypatch.delenv("METRONOME_VOLCANO_SRC")
    with pytest.raises(binaries.BuildFailed, match=r"METRONOME_VOLCANO_SRC: not set; .*volcano-src/volcano-v1.15.1-src.tar.gz: not found"):
        binaries.build(["volcano-webhook-manager"], root=tmp_path / "cache", tools=tools)


def test_volcano_key_follows_its_source_pin(tools: pathlib.Path, tmp_path: pathlib.Path) -> None:
    _volcano_group(tools, tmp_path / "a.tar.gz", "1" * 64)
    version, key = binaries.version_key("volcano-scheduler", tools)
    assert version == "v1.15.1" and key.startswith("volcano-scheduler-v1.15.1-")
    _volcano_group(tools, tmp_path / "a.tar.gz", "2" * 64)
    assert binaries.version_key("volcano-scheduler", tools)[1] != key


def test_helm_is_stamped_with_the_kubernetes_version_of_its_client_go() -> None:
    flags = binaries._ldflags(binaries.tool("helm"), "v3.21.4", "v0.36.4")
    assert "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36" in flags
    assert "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1" in flags
    with pytest.raises(binaries.BuildFailed, match="k8s.io/client-go"):
        binaries._ldflags(binaries.tool("helm"), "v3.21.4", "")
