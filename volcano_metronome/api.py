"""Stable API names shared by the webhook, the controller, the CRDs and the chart (README.md, "API surface").

Change a value here only with a migration note in the README.
"""

from __future__ import annotations

GROUP = "metronome.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"{GROUP}/"

# Custom resources (plural names as the API server knows them).
CLAIMS = "stbandwidthclaims"  # namespaced STBandwidthClaim
CAPACITIES = "stbandwidthcapacities"  # cluster-scoped STBandwidthCapacity
QUEUE_POLICIES = "queuepolicies"  # cluster-scoped QueuePolicy

# Profile annotations a user may set on a Volcano Job, PodGroup, batch Job, pod template or Workload.
MODEL = PREFIX + "model"  # catalog name
PERIOD_MS = PREFIX + "period-ms"
WINDOWS = PREFIX + "windows"  # JSON list of {"start_ms", "len_ms", "gbps"}
DUTY_CYCLE = PREFIX + "duty-cycle"  # shorthand, with GBPS: one window at the end of the period
GBPS = PREFIX + "gbps"
JITTER_MS = PREFIX + "jitter-ms"
COLLECTIVE = PREFIX + "collective"  # with period-ms: "ring" (the default) or "all-to-all"
CLAIM = PREFIX + "claim"  # name of an STBandwidthClaim in the object's namespace
USER_PROFILE_KEYS = (MODEL, PERIOD_MS, WINDOWS, DUTY_CYCLE, GBPS, JITTER_MS, COLLECTIVE, CLAIM)

# What the webhook writes on the objects it admits.
PROFILE = PREFIX + "profile"  # resolved profile, compact JSON of core.profile.Profile.to_dict()
PROFILE_SOURCE = PREFIX + "profile-source"  # one of PROFILE_SOURCES
PROFILE_SOURCES = ("annotation", "claim", "catalog", "default")
GANG_SIZE = PREFIX + "gang-size"
PROFILE_ERROR = PREFIX + "profile-error"  # why a controller-created object's profile was not usable
# On a Volcano Job (and so on the PodGroup Volcano copies its annotations to): the node constraints of its
# task templates (JSON list of pod-spec fragments: nodeSelector, required node affinity, tolerations), so
# the controller can decide the gang before its pods exist.
POD_CONSTRAINTS = PREFIX + "pod-constraints"

# Gang membership of a pod, written by the webhook on the pods it gates.
MANAGED_LABEL = PREFIX + "managed"  # label "true" on gated pods and on managed pod templates: selects them
GANG_KIND = PREFIX + "gang-kind"  # annotation: "PodGroup" (Volcano), "Job" (Kueue batch Job), "Workload",
# or one of OWNER_GANG_KINDS: a training job submitted to Kueue (its pods belong to the job's Workload)
GANG_NAME = PREFIX + "gang-name"  # annotation: name of that object, in the pod's namespace

# What the controller writes on pods before removing the gate.
OFFSET_MS = PREFIX + "offset-ms"  # offset of the gang's windows after the epoch, ms
EPOCH = PREFIX + "epoch"  # cluster-wide time origin, Unix time in integer milliseconds
# PERIOD_MS is written on pods too: the snapped period the offset refers to.
# Where the QueuePolicy lists the fabric's traffic classes (spec.trafficClasses), before removing the gate:
TRAFFIC_CLASS = PREFIX + "traffic-class"  # the gang's class, an index into that list (0: served first)
TRAFFIC_CLASS_ENV = PREFIX + "traffic-class-env"  # compact JSON object: the environment that selects it (NCCL_IB_SL...)
# Every annotation the controller keeps equal to its gang's claim on a placed pod.
SLOT_ANNOTATIONS = (PERIOD_MS, OFFSET_MS, EPOCH, TRAFFIC_CLASS, TRAFFIC_CLASS_ENV)
# The STBandwidthClaim holding a Kueue pod set's placement, passed through the AdmissionCheck's
# podSetUpdates so that the webhook can admit the pods placed (their gang's claim is named after the
# Workload, which the pods do not name).
PLACEMENT_CLAIM = PREFIX + "placement-claim"

SCHEDULING_GATE = PREFIX + "placement"
ADMISSION_CHECK_CONTROLLER = PREFIX + "placement"  # Kueue AdmissionCheck spec.controllerName

# The downwardAPI volume the webhook adds to gated pods: files period-ms, offset-ms, epoch kept equal
# to the annotations by the kubelet, so running processes see locks and moves (env vars are fixed at start).
SLOT_VOLUME = "metronome-slot"
SLOT_DIR = "/etc/metronome"
# (file, annotation): one file per timing annotation, named like it without the prefix.
SLOT_FILES = tuple((annotation[len(PREFIX):], annotation) for annotation in (PERIOD_MS, OFFSET_MS, EPOCH))

# Environment variables the webhook adds to every container of a gated pod (downward API).
ENV_PERIOD_MS = "METRONOME_PERIOD_MS"
ENV_OFFSET_MS = "METRONOME_OFFSET_MS"
ENV_EPOCH = "METRONOME_EPOCH"
ENV_TRAFFIC_CLASS = "METRONOME_TRAFFIC_CLASS"  # TRAFFIC_CLASS; fixed for the gang's life, so an env var is enough
ENV_TRAFFIC_CLASS_ENV = "METRONOME_TRAFFIC_CLASS_ENV"  # TRAFFIC_CLASS_ENV, applied by runtime.apply_traffic_class

# Upstream keys we read (never write our data under them).
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"  # pod annotation naming its Volcano PodGroup
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # label on jobs submitted to Kueue
KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"  # label on pods of a Kueue plain-pod group
KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"  # annotation: pods in that group
KUEUE_TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # label on the child Jobs and pods of a JobSet
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"  # label on pods of a Kubeflow training job
KUBEFLOW_OPERATOR_LABEL = "training.kubeflow.org/operator-name"  # "mpi-operator", "pytorchjob-controller", ...

# Training jobs whose pods belong to the Kueue Workload the job owns (gang kind on their pods, and the
# ownerReference kind of that Workload).
JOBSET, PYTORCH_JOB, MPI_JOB = "JobSet", "PyTorchJob", "MPIJob"
OWNER_GANG_KINDS = (JOBSET, PYTORCH_JOB, MPI_JOB)
