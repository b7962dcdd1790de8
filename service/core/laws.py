"""Parametric scaling laws L(N, D) = E + A/N^alpha + B/D^beta and the published coefficient sets.

Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", the Chinchilla paper), §3.3 and
Eq. 4, give the closed-form compute-optimal allocation under C = 6·N·D. Everything here is a closed form;
the allocations that need a search live in `allocate.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core import validation as v
from service.core.units import MAX_FLOPS, MAX_PARAMS, MAX_TOKENS, MIN_FLOPS, budget_flops


@dataclass(frozen=True)
class ScalingLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta, loss in nats per token (Hoffmann et al. 2022, Eq. 2)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        v.positive("E", self.E, maximum=100)
        v.positive("A", self.A, maximum=1e12)
        v.positive("B", self.B, maximum=1e12)
        v.in_range("alpha", self.alpha, 0.0, 3.0, low_inclusive=False)
        v.in_range("beta", self.beta, 0.0, 3.0, low_inclusive=False)

    # Allocation constants, Hoffmann et al. 2022 Eq. 4: G = (alpha·A / (beta·B))^(1/(alpha+beta)),
    # a = beta/(alpha+beta), b = alpha/(alpha+beta); N_opt = G·(C/6)^a, D_opt = G^-1·(C/6)^b.
    @property
    def G(self) -> float:
        return math.exp(
            (math.log(self.alpha * self.A) - math.log(self.beta * self.B)) / (self.alpha + self.beta)
        )

    @property
    def a(self) -> float:
        """Exponent of compute in the optimal parameter count: N_opt ∝ C^a."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """Exponent of compute in the optimal token count: D_opt ∝ C^b."""
        return self.alpha / (self.alpha + self.beta)

    def loss(self, params: float, tokens: float) -> float:
        """Predicted loss of a model with `params` parameters trained on `tokens` tokens."""
        N = v.positive("params", params, maximum=MAX_PARAMS)
        D = v.positive("tokens", tokens, maximum=MAX_TOKENS)
        return (
            self.E
            + self.A * math.exp(-self.alpha * math.log(N))
            + self.B * math.exp(-self.beta * math.log(D))
        )

    def optimal_params(self, flops: float) -> float:
        """N_opt(C) = G·(C/6)^a."""
        return self.G * math.exp(self.a * math.log(_flops(flops) / 6))

    def optimal_tokens(self, flops: float) -> float:
        """D_opt(C) = G^-1·(C/6)^b."""
        return math.exp(self.b * math.log(_flops(flops) / 6)) / self.G

    def _frontier_coefficient(self) -> float:
        # L_opt(C) - E = (A·G^-alpha + B·G^beta) · (C/6)^(-alpha·beta/(alpha+beta))
        return self.A * math.pow(self.G, -self.alpha) + self.B * math.pow(self.G, self.beta)

    @property
    def _frontier_exponent(self) -> float:
        return self.alpha * self.beta / (self.alpha + self.beta)

    def frontier_loss(self, flops: float) -> float:
        """The lowest loss `flops` of training compute can reach: the loss on the compute-optimal frontier."""
        scaled = _flops(flops) / 6
        return self.E + self._frontier_coefficient() * math.exp(-self._frontier_exponent * math.log(scaled))

    def flops_for_loss(self, target_loss: float) -> float:
        """Compute needed to reach `target_loss`:

        C(l) = 6·[(l - E) / (A·G^-alpha + B·G^beta)]^(-(alpha+beta)/(alpha·beta))
        """
        loss = v.positive("target_loss", target_loss, maximum=100)
        if loss <= self.E:
            raise v.InvalidInput(
                "target_loss", f"must be above the law's irreducible loss E = {self.E:g}, got {target_loss!r}"
            )
        log_flops = (
            math.log(6) - math.log((loss - self.E) / self._frontier_coefficient()) / self._frontier_exponent
        )
        if log_flops > math.log(MAX_FLOPS):
            raise v.InvalidInput(
                "target_loss", f"needs more than {MAX_FLOPS:g} FLOPs under this law; choose a higher target"
            )
        if log_flops < math.log(MIN_FLOPS):
            raise v.InvalidInput(
                "target_loss",
                f"is reached with under {MIN_FLOPS:g} FLOPs under this law; choose a lower target",
            )
        return math.exp(log_flops)

    def flops_where_optimal(self, params: float) -> float:
        """The budget at which `params` is the compute-optimal size: C = 6·(N/G)^(1/a)."""
        N = v.positive("params", params, maximum=MAX_PARAMS)
        return 6 * math.exp(math.log(N / self.G) / self.a)


def _flops(flops: float) -> float:
    return budget_flops("flops", flops)


@dataclass(frozen=True)
class FittedRange:
    """The region of (N, D, C) a law was fitted on; plans far outside it are extrapolations.

    A bound the source does not state is None, and nothing is checked against it.
    """

    min_params: float | None
    max_params: float | None
    min_tokens: float | None
    max_tokens: float | None
    min_flops: float | None
    max_flops: float | None


@dataclass(frozen=True)
class PublishedLaw:
    """A published coefficient set. `counts_embeddings`: whether the law's N counts the embedding and output
    layers (Hoffmann et al. 2022 count all parameters, Kaplan et al. 2020 only non-embedding ones); a model
    sized under one convention is a different model under the other."""

    slug: str
    name: str
    law: ScalingLaw
    source: str
    fitted_range: FittedRange
    counts_embeddings: bool
    note: str = ""


# Hoffmann et al. 2022, abstract: "over 400 language models ranging from 70 million to over 16 billion
# parameters on 5 to 500 billion tokens"; IsoFLOP budgets from 6e18 (Fig. 3) and fits up to about 5e23 FLOPs.
_CHINCHILLA_RANGE = FittedRange(7e7, 1.6e10, 5e9, 5e11, 6e18, 5e23)
# Besiroglu et al. 2024 fitted the 245 points they extracted from Chinchilla's Fig. 4: 5.7e7 to 1.62e10
# parameters, 2.45e8 to 3.18e11 tokens, 1.4e18 to 1.3e22 FLOPs (min/max of that data set).
_EPOCH_RANGE = FittedRange(5.7e7, 1.62e10, 2.45e8, 3.18e11, 1.4e18, 1.3e22)
# Muennighoff et al. 2023, abstract: "up to 900 billion training tokens and 9 billion parameter models";
# the paper states no lower bounds we could cite, so none are checked.
_DATABLATIONS_RANGE = FittedRange(None, 9e9, None, 9e11, None, None)

# Whose parameters N counts. Hoffmann et al. 2022, App. F: "we also count embeddings matrices in the total
# parameter count"; Besiroglu et al. 2024 refit Hoffmann's own runs, so theirs are Hoffmann's sizes.
# Muennighoff et al. 2023 count them too: huggingface/datablations utils/flops-params_py.py `params` adds
# vocab_size·hidden_size, and its models are Hoffmann's sizes (utils/model_params.sh). Sardana et al. 2024
# (§2, Eq. 1) call N "parameter count" and take Hoffmann's A, B and E, so their N is Hoffmann's.
_HOFFMANN_COUNTS_EMBEDDINGS = True

PUBLISHED_LAWS: dict[str, PublishedLaw] = {
    law.slug: law
    for law in (
        PublishedLaw(
            slug="chinchilla-2022",
            name="Chinchilla (Hoffmann et al. 2022), unrounded",
            law=ScalingLaw(E=1.6933737, A=406.40102, B=410.72283, alpha=0.33917084, beta=0.2849083),
            source="Hoffmann et al. 2022, arXiv:2203.15556, Approach 3; unrounded values as used in "
            "Besiroglu et al. 2024's notebook and kyo-takano/chinchilla",
            fitted_range=_CHINCHILLA_RANGE,
            counts_embeddings=_HOFFMANN_COUNTS_EMBEDDINGS,
            note="Hoffmann et al.'s Approach 3: the parametric loss fitted to their runs. At Chinchilla's "
            "own budget (5.76e23 FLOPs) it allocates 40B parameters on 2.4T tokens (59 tokens per "
            "parameter), where the paper's recommendation, from its Approaches 1 and 2, is Chinchilla "
            "itself: 70B on 1.4T, about 20 tokens per parameter (the default rule here). Besiroglu et al. "
            "2024 found this fit inconsistent with the other two approaches and refitted it: epoch-2024.",
        ),
        PublishedLaw(
            slug="chinchilla-2022-rounded",
            name="Chinchilla (Hoffmann et al. 2022), as printed",
            law=ScalingLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28),
            source="Hoffmann et al. 2022, arXiv:2203.15556, §3.3",
            fitted_range=_CHINCHILLA_RANGE,
            counts_embeddings=_HOFFMANN_COUNTS_EMBEDDINGS,
            note="Approach 3 with the coefficients as printed in the paper. The rounded exponents move the "
            "allocation: 32B parameters on 3.0T tokens (93 tokens per parameter) at Chinchilla's budget "
            "(5.76e23 FLOPs), against 40B for the unrounded chinchilla-2022 and the paper's recommendation "
            "of 70B on 1.4T (about 20 tokens per parameter). For Approach 3 prefer chinchilla-2022; for "
            "its corrected refit, epoch-2024.",
        ),
        PublishedLaw(
            slug="epoch-2024",
            name="Chinchilla replication (Besiroglu et al. 2024)",
            law=ScalingLaw(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658),
            source="Besiroglu et al. 2024, 'Chinchilla Scaling: A replication attempt', arXiv:2404.10102",
            fitted_range=_EPOCH_RANGE,
            counts_embeddings=_HOFFMANN_COUNTS_EMBEDDINGS,
            note="Besiroglu et al.'s refit of Hoffmann et al.'s Approach 3 to the data of Chinchilla's "
            "Figure 4, with the original fit's flaws corrected. It agrees with the paper's recommendation: "
            "72B parameters on 1.3T tokens (18 tokens per parameter) at Chinchilla's budget (5.76e23 FLOPs), "
            "where Chinchilla is 70B on 1.4T (about 20).",
        ),
        PublishedLaw(
            slug="muennighoff-2023-c4",
            name="Data-constrained scaling, C4 base fit (Muennighoff et al. 2023)",
            # The reference code fits log-coefficients (e, a, b); exponentiating them here, rather than using
            # the rounded E = 1.869144, A = 520.825, B = 1487.716, reproduces its published losses exactly.
            law=ScalingLaw(
                E=math.exp(0.6254804),
                A=math.exp(6.255414),
                B=math.exp(7.3049974),
                alpha=0.3526596,
                beta=0.3526596,
            ),
            source="Muennighoff et al. 2023, 'Scaling Data-Constrained Language Models', arXiv:2305.16264; "
            "coefficients from huggingface/datablations",
            fitted_range=_DATABLATIONS_RANGE,
            counts_embeddings=_HOFFMANN_COUNTS_EMBEDDINGS,
            note="The base law Muennighoff et al. fitted on C4 together with the repetition constants of "
            "data-constrained scaling, which is why data-constrained plans default to it. Its two exponents "
            "are equal, so it allocates the same tokens per parameter at every budget: 70B parameters on "
            "1.4T tokens (20 tokens per parameter) at Chinchilla's budget (5.76e23 FLOPs), as the paper's "
            "recommendation, 70B on 1.4T.",
        ),
        PublishedLaw(
            slug="sardana-2024",
            name="Inference-aware scaling (Sardana et al. 2024)",
            law=ScalingLaw(E=1.69, A=406.4, B=410.7, alpha=0.336, beta=0.283),
            source="Sardana et al. 2024, 'Beyond Chinchilla-Optimal', arXiv:2401.00448",
            fitted_range=_CHINCHILLA_RANGE,
            counts_embeddings=_HOFFMANN_COUNTS_EMBEDDINGS,
            note="The law Sardana et al. size inference-aware models with: Hoffmann et al.'s printed E, A "
            "and B with exponents 0.336 and 0.283. Like Approach 3 it favours smaller models on more data: "
            "42B parameters on 2.3T tokens (55 tokens per parameter) at Chinchilla's budget (5.76e23 FLOPs), "
            "against the paper's recommendation of 70B on 1.4T (about 20).",
        ),
    )
}
DEFAULT_LAW = "chinchilla-2022"
DATA_CONSTRAINED_LAW = "muennighoff-2023-c4"
