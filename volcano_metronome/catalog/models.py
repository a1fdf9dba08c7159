"""Built-in catalog entries. MODELLED, NOT MEASURED: every number is derived below from public facts.

Common assumptions (unless an entry says otherwise): data-parallel training with ring all-reduce of
fp32 gradients (4 B per parameter); the all-reduce moves ``2 (n-1)/n`` times the gradient bytes
through every worker's NIC, taken at n = 8 (factor 1.75); the reference NIC is 100 Gbps and NCCL
reaches 80% of it, so a window lasts ``volume / 80 Gbps``. For P million parameters that is
P x 4 B x 8 b x 1.75 = 0.056 P Gb, i.e. **0.7 ms per million parameters** at 80 Gbps. Compute is
forward + backward FLOPs (3x the forward for CNNs, 6 x parameters x tokens for transformers) at a
stated sustained rate of an A100-class GPU: 10 TFLOPS for fp32 CNNs, 25 TFLOPS for mixed-precision
transformers. The period is compute + communication rounded up to the next period of the default
slot grid (5 ms slots, 25.2 s hyperperiod cap; the runtime pads the difference), and the all-reduce
closes the iteration (gradients are reduced after the backward pass). Jitter is about 1% of the
period.

Every number above and in the derivations is for the 100 Gbps reference NIC
(``CatalogEntry.reference_gbps``). Rates are fractions of line rate, and on another NIC
(``CatalogEntry.profile``) each window moves the same volume at the same fraction of that NIC's
line rate, so it lasts ``100 / line rate`` times as long; compute does not change, so the windows
after it and the period move by the time saved. On 200 Gbps NICs an all-reduce of P million
parameters takes 0.35 ms per million and the period shrinks by as much; it is then generally off
the grid again, and the core snaps it up (the runtime pads the difference; the snapping error is
reported by the simulator).
"""

from __future__ import annotations

import dataclasses

from volcano_metronome.catalog import CatalogEntry, ModelWindow

#: Fraction of line rate a ring all-reduce reaches; all-to-all and pipeline sends reach less.
ALLREDUCE = 0.8
ALLTOALL = 0.6
P2P = 0.5


#: Sustained TFLOPS the compute times below were derived at (fp32 CNNs; mixed-precision transformers).
CNN_TFLOPS = 10.0
TRANSFORMER_TFLOPS = 25.0

#: With overlap on (``execution.overlap``), a data-parallel all-reduce may run under this share of
#: the compute before it. Modelled: backward is about 2/3 of forward + backward, and bucketed
#: all-reduce (PyTorch DDP, Horovod tensor fusion) starts with the first full bucket, about a
#: quarter into backward, so about 3/4 x 2/3 = 0.5 of the compute gap can carry gradients.
DP_OVERLAP = 0.5


def _allreduce_last(name: str, period_ms: float, len_ms: float, jitter_ms: float, derivation: str,
                    tflops: float = TRANSFORMER_TFLOPS) -> CatalogEntry:
    return CatalogEntry(name, period_ms, (ModelWindow(period_ms - len_ms, len_ms, ALLREDUCE, DP_OVERLAP),), jitter_ms,
                        derivation, reference_tflops=tflops)


VGG11 = _allreduce_last("vgg11", 240.0, 94.0, 2.0, (
    "132.9 M parameters -> 0.7 ms/M x 132.9 = 93 ms, rounded up to 94 ms of all-reduce at 80 Gbps. "
    "Compute: 7.6 GFLOP forward x 3 = 22.8 GFLOP per image, batch 64 per GPU = 1.46 TFLOP at 10 TFLOPS "
    "= 146 ms. Period 146 + 94 = 240 ms (on the grid)."), tflops=CNN_TFLOPS)

VGG16 = _allreduce_last("vgg16", 400.0, 97.0, 4.0, (
    "138.4 M parameters -> 97 ms of all-reduce at 80 Gbps. Compute: 15.5 GFLOP forward x 3 = 46.5 GFLOP "
    "per image, batch 64 = 2.98 TFLOP at 10 TFLOPS = 298 ms. 298 + 97 = 395 ms, rounded up to 400 ms."), tflops=CNN_TFLOPS)

VGG19 = _allreduce_last("vgg19", 400.0, 101.0, 4.0, (
    "143.7 M parameters -> 101 ms of all-reduce at 80 Gbps. Compute: 19.6 GFLOP forward x 3 = 58.8 GFLOP "
    "per image, batch 48 = 2.82 TFLOP at 10 TFLOPS = 282 ms. 282 + 101 = 383 ms, rounded up to 400 ms."), tflops=CNN_TFLOPS)

RESNET50 = CatalogEntry(
    name="resnet50",
    period_ms=200.0,
    windows=(ModelWindow(start_ms=176.0, len_ms=24.0, fraction=ALLREDUCE, overlap=DP_OVERLAP),),
    jitter_ms=2.0,
    derivation=(
        "25.6 M parameters x 4 B = 102 MB of gradients; ring all-reduce at n = 8 moves 1.75 x 102 MB = "
        "179 MB = 1.43 Gb per worker; at 80% of a 100 Gbps line (80 Gbps) that takes 18 ms, rounded up to "
        "24 ms for protocol overhead. Compute (forward + backward, batch 256 per GPU) ~176 ms, so one "
        "iteration is ~200 ms with the all-reduce at its end."
    ),
    reference_tflops=CNN_TFLOPS,
)

WIDERESNET101 = _allreduce_last("wideresnet101", 315.0, 89.0, 3.0, (
    "Wide ResNet-101-2: 126.9 M parameters -> 89 ms of all-reduce at 80 Gbps. Compute: 22.8 GFLOP forward "
    "x 3 = 68.4 GFLOP per image, batch 32 = 2.19 TFLOP at 10 TFLOPS = 219 ms. 219 + 89 = 308 ms, rounded "
    "up to 315 ms."), tflops=CNN_TFLOPS)

BERT_BASE = _allreduce_last("bert-base", 200.0, 77.0, 2.0, (
    "110 M parameters -> 77 ms of all-reduce at 80 Gbps. Compute: 6 x 110 M x (32 sequences x 128 tokens) "
    "= 2.70 TFLOP at 25 TFLOPS = 108 ms. 108 + 77 = 185 ms, rounded up to 200 ms."))

ROBERTA_BASE = _allreduce_last("roberta-base", 350.0, 88.0, 4.0, (
    "125 M parameters -> 87.5 ms, rounded up to 88 ms of all-reduce at 80 Gbps. Compute: 6 x 125 M x "
    "(16 sequences x 512 tokens) = 6.14 TFLOP at 25 TFLOPS = 246 ms. 246 + 88 = 334 ms, rounded up to 350 ms."))

XLM = _allreduce_last("xlm", 1200.0, 466.0, 12.0, (
    "XLM (MLM, English, 2048 hidden, 12 layers): 12 layers x 12 x 2048^2 = 604 M + 61 M embeddings "
    "(30 k x 2048) = 665 M parameters -> 466 ms of all-reduce at 80 Gbps. Compute: 6 x 665 M x "
    "(16 sequences x 256 tokens) = 16.3 TFLOP at 25 TFLOPS = 654 ms. 654 + 466 = 1120 ms, rounded up to "
    "1200 ms."))

CAMEMBERT = _allreduce_last("camembert", 300.0, 77.0, 3.0, (
    "CamemBERT-base: 110 M parameters -> 77 ms of all-reduce at 80 Gbps. Compute: 6 x 110 M x "
    "(16 sequences x 512 tokens) = 5.41 TFLOP at 25 TFLOPS = 216 ms. 216 + 77 = 293 ms, rounded up to 300 ms."))

GPT1 = _allreduce_last("gpt1", 315.0, 82.0, 3.0, (
    "117 M parameters -> 82 ms of all-reduce at 80 Gbps. Compute: 6 x 117 M x (16 sequences x 512 tokens) "
    "= 5.75 TFLOP at 25 TFLOPS = 230 ms. 230 + 82 = 312 ms, rounded up to 315 ms."))

GPT2 = _allreduce_last("gpt2", 1050.0, 249.0, 10.0, (
    "GPT-2 medium: 355 M parameters -> 249 ms of all-reduce at 80 Gbps. Compute: 6 x 355 M x "
    "(8 sequences x 1024 tokens) = 17.4 TFLOP at 25 TFLOPS = 698 ms. 698 + 249 = 947 ms, rounded up to "
    "1050 ms."))

GPT3 = CatalogEntry(
    name="gpt3",
    period_ms=280.0,
    windows=(
        ModelWindow(start_ms=60.0, len_ms=14.0, fraction=P2P),
        ModelWindow(start_ms=150.0, len_ms=14.0, fraction=P2P),
        ModelWindow(start_ms=220.0, len_ms=60.0, fraction=ALLREDUCE, overlap=DP_OVERLAP),
    ),
    jitter_ms=3.0,
    derivation=(
        "GPT-3 2.7B in hybrid parallelism: tensor parallel 8 inside a node (NVLink, no NIC traffic), "
        "pipeline parallel 2 across nodes, data parallel across replicas, bf16 gradients, 8 micro-batches of "
        "one 2048-token sequence. Pipeline sends: activations of 2048 x 2560 x 2 B = 10.5 MB per micro-batch, "
        "x 8 = 84 MB = 671 Mb forward and as much backward, at 50% of line rate (50 Gbps) = 14 ms each. "
        "Data-parallel all-reduce of a stage's shard: 2.7 B / 16 GPUs = 169 M parameters x 2 B x 1.75 = "
        "591 MB = 4.73 Gb at 80 Gbps = 59 ms, rounded up to 60 ms. Compute: 6 x 2.7 B x 16 k tokens = "
        "265 TFLOP over 16 GPUs at 125 TFLOPS (40% of bf16 peak) = 133 ms, plus the pipeline bubble "
        "((2 - 1) / 8 = 12.5%) and the sends' compute gaps = 192 ms. Windows: forward sends at 60 ms, "
        "backward sends at 150 ms, all-reduce at 220 ms; period 280 ms."
    ),
    reference_tflops=125.0,
)

DLRM = CatalogEntry(
    name="dlrm",
    period_ms=100.0,
    windows=(
        ModelWindow(start_ms=10.0, len_ms=13.0, fraction=ALLTOALL),
        ModelWindow(start_ms=55.0, len_ms=13.0, fraction=ALLTOALL),
        ModelWindow(start_ms=90.0, len_ms=2.0, fraction=ALLREDUCE, overlap=DP_OVERLAP),
    ),
    jitter_ms=1.0,
    derivation=(
        "DLRM (MLPerf Criteo 1TB configuration: 26 sparse features, embedding dimension 128, model-parallel "
        "embeddings, data-parallel MLPs of about 2.6 M parameters), global batch 65,536 over 8 GPUs = 8,192 "
        "samples per GPU. Embedding all-to-all: 8,192 x 26 x 128 x 4 B = 109 MB per GPU, of which 7/8 leaves "
        "the GPU = 95 MB = 0.76 Gb, at 60% of line rate (60 Gbps) = 12.7 ms, rounded up to 13 ms; once "
        "forward (after a 10 ms embedding lookup) and once backward (after 32 ms of interaction and MLP "
        "forward + backward). MLP all-reduce: 2.6 M x 4 B x 1.75 = 18 MB = 0.15 Gb at 80 Gbps = 2 ms, then "
        "8 ms of optimizer step. Period 100 ms. On named hardware its compute is scaled like the "
        "transformers' (from 25 TFLOPS), an assumption: embedding lookups are memory-bound."
    ),
)

#: DLRM with its traffic spread as the all-to-all it is. ``dlrm`` keeps the ring model of the 13
#: models (so the built-in scenarios drawn from them, and their figures, stay as measured).
DLRM_A2A = CatalogEntry(
    name="dlrm-a2a",
    period_ms=DLRM.period_ms,
    windows=tuple(dataclasses.replace(w, per_gpu=w.fraction == ALLTOALL) for w in DLRM.windows),
    jitter_ms=DLRM.jitter_ms,
    derivation=(
        DLRM.derivation + " Traffic: all-to-all between the gang's workers (core.traffic), the embedding "
        "exchange it is; the 2 ms MLP all-reduce is spread the same way, a small overstatement on uplinks."
    ),
    collective="all-to-all",
)

MOE_GPT = CatalogEntry(
    name="moe-gpt",
    period_ms=4200.0,
    windows=(
        ModelWindow(start_ms=1114.0, len_ms=188.0, fraction=ALLTOALL, per_gpu=True),
        ModelWindow(start_ms=2416.0, len_ms=188.0, fraction=ALLTOALL, per_gpu=True),
        ModelWindow(start_ms=3718.0, len_ms=315.0, fraction=ALLREDUCE, overlap=DP_OVERLAP),
    ),
    jitter_ms=40.0,
    derivation=(
        "A GPT-style mixture of experts in the GShard / Switch / DeepSpeed-MoE layout: 24 layers, hidden 2048, "
        "FFN 8192, every other FFN an MoE layer (12) with top-2 gating, experts sharded over the whole gang "
        "(expert parallelism), bf16, 4 sequences of 2,048 tokens = 8,192 tokens per GPU. Each MoE layer runs "
        "four all-to-alls per iteration (dispatch and combine forward, their gradients backward), each moving "
        "8,192 x 2 x 2048 x 2 B = 67.1 MB per GPU, of which 7/8 leaves the node at an expert-parallel degree of "
        "64: per pass 12 x 2 x 67.1 MB x 7/8 = 1.41 GB = 11.3 Gb at 60% of line rate = 188 ms; the per-layer "
        "exchanges are merged into one forward window after the forward pass and one backward window in the middle of "
        "the backward pass (same volume and exposed time); each GPU exchanges its own tokens, so a worker of g GPUs "
        "moves g times this volume. They "
        "block (overlap 0): the experts need the dispatched tokens and the next layer the combined ones, so "
        "the all-to-all sits on the critical path (Tutel, FasterMoE, Luffy: all-to-all before and after every "
        "expert run). Compute: 1.7 B active parameters a token (0.9 B non-expert + 12 MoE layers x 2 experts x "
        "33.6 M), 6 x 1.7 B x 8,192 = 83.6 TFLOP at 25 TFLOPS = 3,342 ms, "
        "1,114 forward and 2,228 backward (two halves of 1,114 around the backward exchange). Data-parallel all-reduce of the 0.9 B non-expert parameters in bf16: "
        "0.9 B x 2 B x 8 b x 1.75 = 25.2 Gb at 80 Gbps = 315 ms, overlappable with backward like any DDP "
        "all-reduce; expert gradients are not replicated. 1,114 + 188 + 1,114 + 188 + 1,114 + 315 = 4,033 ms, rounded "
        "up to 4,200 ms (on the grid). Traffic: all-to-all (the all-reduce window too, an overstatement)."
    ),
    collective="all-to-all",
)

MODELS: tuple[CatalogEntry, ...] = (
    VGG11, VGG16, VGG19, RESNET50, WIDERESNET101, BERT_BASE, ROBERTA_BASE, XLM, CAMEMBERT, GPT1, GPT2, GPT3, DLRM,
)

#: Models whose traffic is all-to-all (``core.traffic``), beside the 13 of CASSINI and Metronome.
ALL_TO_ALL_MODELS: tuple[CatalogEntry, ...] = (DLRM_A2A, MOE_GPT)
