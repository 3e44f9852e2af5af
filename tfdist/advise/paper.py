"""The Horovod paper's scaling figures, as ``tfdist advise`` command lines anyone can rerun.

Sergeev and Del Balso, "Horovod: fast and easy distributed deep learning in TensorFlow", 2018,
arXiv:1802.05799: on up to 128 Pascal P100 GPUs (4 per server, 25 GbE with RDMA), about 88 %
scaling efficiency for Inception V3 and ResNet-101 and 68 % for VGG-16.

Inputs (docs/advise.md cites each): published parameter counts; single-P100 throughput at batch 64
from TensorFlow's published tf_cnn_benchmarks figures (DGX-1, synthetic data, May 2017): Inception
V3 142 images/s, VGG16 154 images/s; ResNet-101 is not in that table: 129 images/s, interpolated
linearly in per-image time between ResNet-50 (219) and ResNet-152 (91.8) by depth (101 is half way).

    for row in ROWS: print(" ".join(["tfdist", *row.args()]))
"""
from __future__ import annotations

import dataclasses

BATCH_SIZE = 64
GPUS_PER_HOST = 4
#: 25 GbE RDMA: NCCL's per-message latency over RoCE is a few microseconds; 10 µs per ring step.
LATENCY_MS = 0.01
#: The one fitted input: half of the allreduce traffic hidden behind the backward pass (Horovod
#: reduces fused gradients as backprop produces them). 0 gives 87/80/53 %, 1 about 100 % at 128
#: GPUs; 0.5 puts all three models within 5 points of the paper.
OVERLAP = 0.5
#: The paper's figures are read from its plots: within ±10 points is the agreement asked for.
TOLERANCE = 0.10


@dataclasses.dataclass(frozen=True)
class PaperModel:
    name: str
    params: str  # as given to --params
    images_per_second: float  # one P100, batch 64
    paper_efficiency: float  # at 128 GPUs over 25 GbE RDMA

    @property
    def step_ms(self) -> float:
        return round(BATCH_SIZE / self.images_per_second * 1000, 1)


MODELS = (
    PaperModel("Inception V3", "23.8M", 142.0, 0.88),
    PaperModel("ResNet-101", "44.5M", 129.0, 0.88),
    PaperModel("VGG-16", "138M", 154.0, 0.68),
)


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: a model on ``gpus`` GPUs over ``bandwidth`` links; ``paper`` is the
    paper's efficiency where it reports one (128 GPUs, 25 Gbit/s), else None (an extension)."""

    model: PaperModel
    gpus: int
    bandwidth: str
    paper: float | None

    def args(self, json: bool = False) -> list[str]:
        """The ``tfdist`` arguments that print this row's prediction."""
        args = ["advise", "--workers", str(self.gpus), "--gpus-per-host", str(GPUS_PER_HOST), "--ps", "0",
                "--params", self.model.params, "--batch-size", str(BATCH_SIZE), "--step-ms",
                f"{self.model.step_ms:g}", "--bandwidth", self.bandwidth, "--latency-ms", f"{LATENCY_MS:g}",
                "--overlap", f"{OVERLAP:g}"]
        return [*args, "--json"] if json else args


#: Where the paper reports a figure (128 GPUs, 25 Gbit/s), then the extensions.
SETTINGS = ((128, "25gbit"), (512, "25gbit"), (128, "10gbit"), (512, "10gbit"), (128, "1gbit"),
            (512, "1gbit"))
ROWS = tuple(Row(model, gpus, bandwidth, model.paper_efficiency if (gpus, bandwidth) == SETTINGS[0] else None)
             for model in MODELS for gpus, bandwidth in SETTINGS)
