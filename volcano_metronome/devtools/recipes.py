"""The recipes of the programs ``volcano-metronome tools build`` knows: module group, package, version stamps,
run-time files (:mod:`~volcano_metronome.devtools.binaries` builds and caches them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    """How to build one program: which Go module group, which package, which version stamp."""

    name: str
    group: str  # directory under tools/ holding the go.mod that pins it
    package: str  # Go package path of the main package
    module: str  # module whose selected version names the binary
    # "integration" (built on every CI run), "e2e" (only with METRONOME_E2E=1) or "extra" (by name or --all,
    # never by CI: a test needing one is marked ``programs(name)`` and runs only where it is cached)
    tier: str
    # -X assignments; {version}, {major} and {minor} are filled from the module version, {k8s_major}
    # and {k8s_minor} from the group's k8s.io/client-go (v0.36.x: Kubernetes 1.36).
    version_flags: tuple[str, ...] = ()
    # Files of ``module`` the program needs at run time, copied beside the binary under share/.
    module_files: tuple[str, ...] = ()
    # True: ``module`` is built as the main module, in its own source tree (``package`` relative to
    # it), pinned by the group's source.json (:mod:`~volcano_metronome.devtools.gosource`).
    main_module: bool = False
    # Go build tags (``go build -tags``).
    tags: tuple[str, ...] = ()


_K8S_VERSION = "k8s.io/component-base/version"
# Without these a Kubernetes program reports v0.0.0-master, which clients that gate features on the
# server version (Kueue, kubectl) misread.
_K8S_VERSION_FLAGS = (
    f"{_K8S_VERSION}.gitVersion={{version}}",
    f"{_K8S_VERSION}.gitMajor={{major}}",
    f"{_K8S_VERSION}.gitMinor={{minor}}",
    f"{_K8S_VERSION}.gitTreeState=clean",
)
# Kueue's own CRDs and webhook registrations at the pinned version: the manager must run against the
# CRDs it was built with, and out of cluster its webhooks are registered from these manifests.
_KUEUE_CRDS = tuple(
    f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
    for plural in (
        "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
        "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads",
    )
)
_KUEUE_WEBHOOKS = ("config/components/webhook/manifests.yaml", "config/components/webhook/kustomization.yaml")
_VOLCANO_CHART = "installer/helm/chart/volcano"
_VOLCANO_FLAGS = ("volcano.sh/volcano/pkg/version.Version={version}",)
# The CRDs of this exact Volcano, the jobflow ones included: vc-controller-manager's informers never
# sync without them.
VOLCANO_CRDS = tuple(
    f"config/crd/volcano/bases/{name}.yaml"
    for name in (
        "batch.volcano.sh_cronjobs", "batch.volcano.sh_jobs", "bus.volcano.sh_commands",
        "config.volcano.sh_colocationconfigurations", "nodeinfo.volcano.sh_numatopologies",
        "scheduling.volcano.sh_podgroups", "scheduling.volcano.sh_queues", "shard.volcano.sh_nodeshards",
        "topology.volcano.sh_hypernodes",
    )
) + ("config/crd/jobflow/bases/flow.volcano.sh_jobflows.yaml", "config/crd/jobflow/bases/flow.volcano.sh_jobtemplates.yaml")
VOLCANO_SCHEDULER_CONF = f"{_VOLCANO_CHART}/config/volcano-scheduler.conf"
VOLCANO_WEBHOOKS = f"{_VOLCANO_CHART}/templates/webhooks.yaml"
# The training operators Kueue's integrations expect, at the versions tools/kueue/go.mod selects, each built
# as its own main module (tools/<group>/source.json) so that its own go.mod picks its dependencies. Run-time
# files: the CRDs of that exact version (and their webhook registrations, to run them out of cluster).
JOBSET_CRD = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
JOBSET_WEBHOOKS = "config/components/webhook/manifests.yaml"
JOBSET_WEBHOOK_PATCHES = tuple(f"config/components/webhook/patches/{kind}-patch.yaml" for kind in ("mutating", "validating"))
TRAINING_OPERATOR_CRDS = tuple(f"manifests/base/crds/kubeflow.org_{plural}.yaml" for plural in (
    "pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs"))  # its own v1 MPIJob is left out: see MPI_CRD
TRAINING_OPERATOR_WEBHOOKS = "manifests/base/webhook/manifests.yaml"
PYTORCH_CRD = TRAINING_OPERATOR_CRDS[0]
# mpi-operator's kubeflow.org/v2beta1 MPIJob, the one Kueue integrates (same CRD name as training-operator's v1).
MPI_CRD = "manifests/base/kubeflow.org_mpijobs.yaml"
TRAINER_CRDS = tuple(f"manifests/base/crds/trainer.kubeflow.org_{plural}.yaml" for plural in (
    "trainjobs", "trainingruntimes", "clustertrainingruntimes"))
TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="kube-apiserver",
            group="controlplane",
            package="k8s.io/kubernetes/cmd/kube-apiserver",
            module="k8s.io/kubernetes",
            tier="integration",
            version_flags=_K8S_VERSION_FLAGS,
        ),
        Tool(
            name="etcd",
            group="controlplane",
            package="go.etcd.io/etcd/server/v3",
            module="go.etcd.io/etcd/server/v3",
            tier="integration",
        ),
        Tool(
            name="helm",
            group="controlplane",
            package="helm.sh/helm/v3/cmd/helm",
            module="helm.sh/helm/v3",
            tier="integration",
            # As helm's release build (its Makefile): without the Kubernetes version of its client-go,
            # `helm template` assumes Kubernetes v1.20 and refuses charts that need a newer one.
            version_flags=(
                "helm.sh/helm/v3/internal/version.version={version}",
                "helm.sh/helm/v3/internal/version.gitTreeState=clean",
                "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor={k8s_major}",
                "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={k8s_minor}",
                "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor={k8s_major}",
                "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={k8s_minor}",
            ),
        ),
        Tool(  # the clusters `dev-cluster` starts print kubectl commands: the same module provides it
            name="kubectl",
            group="controlplane",
            package="k8s.io/kubernetes/cmd/kubectl",
            module="k8s.io/kubernetes",
            tier="integration",
            version_flags=_K8S_VERSION_FLAGS,
        ),
        Tool(
            name="kube-scheduler",
            group="controlplane",
            package="k8s.io/kubernetes/cmd/kube-scheduler",
            module="k8s.io/kubernetes",
            tier="e2e",
            version_flags=_K8S_VERSION_FLAGS,
        ),
        Tool(
            name="kube-controller-manager",
            group="controlplane",
            package="k8s.io/kubernetes/cmd/kube-controller-manager",
            module="k8s.io/kubernetes",
            tier="e2e",
            version_flags=_K8S_VERSION_FLAGS,
        ),
        Tool(
            name="kwok",
            group="kwok",
            package="sigs.k8s.io/kwok/cmd/kwok",
            module="sigs.k8s.io/kwok",
            tier="e2e",
            # kwok already carries its version as a constant ("0.8.0", no "v"), used for image tags.
            # Run on its own (without kwokctl), kwok needs its Stage objects: the "fast" node and
            # pod lifecycles plus lease heartbeats, as kwokctl configures them by default.
            module_files=(
                "kustomize/stage/node/fast/node-initialize.yaml",
                "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml",
                "kustomize/stage/pod/fast/pod-complete.yaml",
                "kustomize/stage/pod/fast/pod-delete.yaml",
            ),
        ),
        Tool(
            name="kueue",
            group="kueue",
            package="sigs.k8s.io/kueue/cmd/kueue",
            module="sigs.k8s.io/kueue",
            tier="e2e",
            version_flags=("sigs.k8s.io/kueue/pkg/version.GitVersion={version}",),
            module_files=_KUEUE_CRDS + _KUEUE_WEBHOOKS,
        ),
        # Volcano's three programs, configured at run time as its Helm chart does: the scheduler with
        # the chart's default configuration, the webhook manager with the chart's registrations.
        Tool(
            name="volcano-scheduler",
            group="volcano",
            package="./cmd/scheduler",
            module="volcano.sh/volcano",
            tier="e2e",
            version_flags=_VOLCANO_FLAGS,
            module_files=(VOLCANO_SCHEDULER_CONF,),
            main_module=True,
        ),
        Tool(
            name="volcano-controller-manager",
            group="volcano",
            package="./cmd/controller-manager",
            module="volcano.sh/volcano",
            tier="e2e",
            version_flags=_VOLCANO_FLAGS,
            module_files=VOLCANO_CRDS,
            main_module=True,
        ),
        Tool(
            name="volcano-webhook-manager",
            group="volcano",
            package="./cmd/webhook-manager",
            module="volcano.sh/volcano",
            tier="e2e",
            version_flags=_VOLCANO_FLAGS,
            module_files=(VOLCANO_WEBHOOKS,),
            main_module=True,
        ),
        Tool(
            name="jobset",
            group="jobset",
            package=".",
            module="sigs.k8s.io/jobset",
            tier="e2e",
            version_flags=("sigs.k8s.io/jobset/pkg/version.GitVersion={version}",),
            module_files=(JOBSET_CRD, JOBSET_WEBHOOKS, *JOBSET_WEBHOOK_PATCHES),
            main_module=True,
        ),
        Tool(
            name="training-operator",
            group="training-operator",
            package="./cmd/training-operator.v1",
            module="github.com/kubeflow/training-operator",
            tier="e2e",
            module_files=(*TRAINING_OPERATOR_CRDS, TRAINING_OPERATOR_WEBHOOKS),
            main_module=True,
        ),
        Tool(
            name="mpi-operator",
            group="mpi-operator",
            package="./cmd/mpi-operator",
            module="github.com/kubeflow/mpi-operator",
            tier="extra",
            version_flags=("github.com/kubeflow/mpi-operator/pkg/version.Version={version}",),
            module_files=(MPI_CRD,),
            main_module=True,
        ),
        Tool(
            name="trainer-controller-manager",
            group="trainer",
            package="./cmd/trainer-controller-manager",
            module="github.com/kubeflow/trainer/v2",
            tier="extra",
            module_files=TRAINER_CRDS,
            main_module=True,
        ),
        # The Prometheus server, to scrape the node agent's and the controller's metrics in a test
        # (module versions v0.3xx.y are Prometheus 3.xx.y). Built as its own main module, like the operators:
        # its go.mod selects the dependencies its release was tested with. remove_all_sd leaves out the cloud
        # service discoveries and their SDKs (static targets are all a test needs); without builtinassets the
        # web UI is absent, the HTTP API is not.
        Tool(
            name="prometheus",
            group="prometheus",
            package="./cmd/prometheus",
            module="github.com/prometheus/prometheus",
            tier="extra",
            version_flags=("github.com/prometheus/common/version.Version={version}",),
            main_module=True,
            tags=("netgo", "remove_all_sd"),
        ),
    )
}
