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
            + _power_term("params", self.A, self.alpha, N)
            + _power_term("tokens", self.B, self.beta, D)
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


# Krajewski et al. 2024 (arXiv:2402.07871), §6.1 Eq. 10 and App. E: training FLOPs per token and block are
# 12·d_model²·c_f + d_model·E·G·c_r, with c_f = 6 per active parameter (as Hoffmann et al. 2022) and c_r = 14
# for routing (its logits, and dispatching tokens to experts and back, forward and backward); their shapes
# keep d_model = 64·n_blocks. Embeddings and attention scores are left out, as in the paper.
FLOPS_PER_ACTIVE_PARAM = 6
ROUTER_FLOPS_PER_PARAM = 14
WIDTH_PER_BLOCK = 64


@dataclass(frozen=True)
class MoEDesign:
    """A fine-grained mixture-of-experts model as Krajewski et al. 2024 define it (§4, App. A).

    Each block's feed-forward layer (width d_ff = 4·d_model) becomes `expansion_rate`·`granularity` experts
    (Eq. 3) of width d_ff / `granularity`, and each token is routed to `granularity` of them: it uses the
    dense layer's 8·d_model² parameters whatever the granularity. Their router is Expert Choice (App. A), so
    a token gets `granularity` experts on average rather than exactly.

    Total over active non-embedding parameters, from the paper's accounting (§6.1): a block holds
    4·d_model² in attention (query, key, value, output) and 2·E·d_ff·d_model = 8·E·d_model² in its experts,
    of which a token uses G experts of 8·d_model²/G, so

        total / active = (8E + 4)·d_model² / (12·d_model²) = (2E + 1) / 3,

    43 at the paper's E = 64, whatever G; both leave out the embeddings and the router (d_model·E·G weights
    a block), as the paper does.
    """

    expansion_rate: int
    granularity: int

    def __post_init__(self) -> None:
        v.whole("expansion_rate", self.expansion_rate)
        v.whole("granularity", self.granularity)

    @property
    def experts(self) -> int:
        """N_expert = G·E (Eq. 3)."""
        return self.expansion_rate * self.granularity

    @property
    def experts_per_token(self) -> int:
        return self.granularity

    @property
    def total_to_active_params(self) -> float:
        return (2 * self.expansion_rate + 1) / 3

    def expert_ffn(self, dense_ffn: float) -> float:
        """Hidden width of one expert: the dense feed-forward width over the granularity (d_expert, §4)."""
        return v.positive("dense_ffn", dense_ffn) / self.granularity

    def total_params(self, active_params: float) -> float:
        return v.positive("active_params", active_params, maximum=MAX_PARAMS) * self.total_to_active_params

    def training_flops_per_token(self, active_params: float) -> float:
        """Eq. 10 over D: (12·d²·c_f + d·E·G·c_r)·n_blocks, with d = d_model = 64·n_blocks.

        With N_act = 12·d²·n_blocks = 12·d³/64, d = (16·N_act/3)^(1/3) and d·n_blocks = d²/64, so

            C/D = 6·N_act + 14·E·G·d²/64,

        6·N·D plus the router, whose share 14·E·G/(72·d) grows with granularity and shrinks with width.
        """
        N = v.positive("active_params", active_params, maximum=MAX_PARAMS)
        d_model = math.cbrt(WIDTH_PER_BLOCK * N / 12)
        router = ROUTER_FLOPS_PER_PARAM * self.experts * d_model * d_model / WIDTH_PER_BLOCK
        return FLOPS_PER_ACTIVE_PARAM * N + router


@dataclass(frozen=True)
class FineGrainedLaw:
    """Krajewski et al. 2024, Eq. 9: the loss of a fine-grained MoE of expansion rate `expansion_rate`,

        L(N, D, G) = c + (g / G^gamma + a) / N^alpha + b / D^beta,

    N its total non-embedding parameters (§5: "total number of non-embedding parameters"; §6.1:
    N = d_model²·(8E + 4)·n_blocks), D training tokens, G granularity; nats per token on C4 with the GPT-2
    tokenizer (App. A).
    """

    a: float
    alpha: float
    b: float
    beta: float
    g: float
    gamma: float
    c: float
    expansion_rate: int

    def design(self, granularity: int) -> MoEDesign:
        return MoEDesign(self.expansion_rate, granularity)

    def loss(self, params: float, tokens: float, granularity: float) -> float:
        """Eq. 9 at `params` total non-embedding parameters."""
        N = v.positive("params", params, maximum=MAX_PARAMS)
        D = v.positive("tokens", tokens, maximum=MAX_TOKENS)
        G = v.positive("granularity", granularity, minimum=1)
        return (
            self.c
            + (self.g * math.exp(-self.gamma * math.log(G)) + self.a) * math.exp(-self.alpha * math.log(N))
            + self.b * math.exp(-self.beta * math.log(D))
        )

    def at(self, granularity: int) -> ScalingLaw:
        """The law at one granularity in Chinchilla's form over active parameters, the ones that cost
        compute: with N = r·N_act (r = total/active, MoEDesign),

            (g/G^gamma + a) / N^alpha = (g/G^gamma + a)·r^(-alpha) / N_act^alpha,

        so E = c, A = (g/G^gamma + a)·r^(-alpha), B = b, and L(N_act, D) is Eq. 9 exactly."""
        design = self.design(granularity)
        r = design.total_to_active_params
        return ScalingLaw(
            E=self.c,
            A=(self.g * math.pow(design.granularity, -self.gamma) + self.a) * math.pow(r, -self.alpha),
            B=self.b,
            alpha=self.alpha,
            beta=self.beta,
        )


# Krajewski et al. 2024, Table 1 (MoE row), as printed. The authors' repository holds the same values as the
# fixed coefficients of its "Granular Scaling" law (llm-random/llm-random, scaling_laws/scaling_config.yaml
# at 35b4c1e6: n_params a 2.1, b -0.58, c 18.1, p -0.115; n_steps c 30.8, p -0.147; L0 0.472).
KRAJEWSKI_2024 = FineGrainedLaw(
    a=18.1, alpha=0.115, b=30.8, beta=0.147, g=2.1, gamma=0.58, c=0.47, expansion_rate=64
)


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
    moe: MoEDesign | None = None  # the mixture-of-experts design of an MoE law; None for dense laws


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

# Krajewski et al. 2024 §5: "models with sizes ranging from 129M to 3.7B parameters" (total non-embedding
# ones, as an MoE allocation's params) "from 16B to 130B tokens", granularities 1 to 16, E = 64. FLOPs: the
# least and most of their runs (App. A, Table 3) by Eq. 10, 64x3M on 16B tokens at G = 1 (3.2e17) and 64x49M
# on 66B at G = 4 (2.1e19). The range does not check granularity: 32 and 64, where Table 2 goes, are
# extrapolations too.
_KRAJEWSKI_RANGE = FittedRange(1.29e8, 3.7e9, 1.6e10, 1.3e11, 3.2e17, 2.1e19)
# §5: "total number of non-embedding parameters N"; §6.1: "We exclude embedding and unembedding from the
# FLOPs calculations, following Hoffmann et al. (2022)".
_KRAJEWSKI_COUNTS_EMBEDDINGS = False
_KRAJEWSKI_SOURCE = (
    "Krajewski et al. 2024, 'Scaling Laws for Fine-Grained Mixture of Experts', arXiv:2402.07871, Eq. 9 "
    "and Table 1; the same coefficients fixed in llm-random/llm-random, scaling_laws/scaling_config.yaml"
)
_KRAJEWSKI_TERMS = (
    "Its N is active non-embedding parameters, the law being the paper's Eq. 9 at one granularity: the "
    "paper's N counts all of them, 43 times as many at expansion rate 64. Compute counts the router as well "
    "as 6·N·D (Eq. 10). Fitted on 129M to 3.7B parameters in all, 16B to 130B tokens and granularities 1 to "
    "16; larger plans are extrapolations, as the paper's own Table 2 is."
)


def _krajewski(granularity: int, name: str, note: str) -> PublishedLaw:
    return PublishedLaw(
        slug=f"krajewski-2024-g{granularity}",
        name=f"Fine-grained MoE, {name} (Krajewski et al. 2024)",
        law=KRAJEWSKI_2024.at(granularity),
        source=_KRAJEWSKI_SOURCE,
        fitted_range=_KRAJEWSKI_RANGE,
        counts_embeddings=_KRAJEWSKI_COUNTS_EMBEDDINGS,
        note=f"{note} {_KRAJEWSKI_TERMS}",
        moe=KRAJEWSKI_2024.design(granularity),
    )


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
        _krajewski(
            1,
            "granularity 1",
            "Krajewski et al.'s mixture-of-experts law with experts as wide as the dense feed-forward layer: "
            "64 of them, one per token (what the paper calls vanilla MoE). At 1.93e20 FLOPs it allocates "
            "1.33B active parameters (57.2B in all) on 24.0B tokens, to a loss 0.086 above granularity 16's: "
            "the paper finds such experts almost never optimal.",
        ),
        _krajewski(
            8,
            "granularity 8",
            "Krajewski et al.'s mixture-of-experts law at granularity 8: 512 experts an eighth as wide as "
            "the dense feed-forward layer, 8 per token. At 2.95e18 FLOPs it allocates 103M active parameters "
            "(4.41B in all) on 4.28B tokens, where the paper's Table 2 gives 64x100M on 4.37B.",
        ),
        _krajewski(
            16,
            "granularity 16",
            "Krajewski et al.'s mixture-of-experts law at granularity 16, the finest they fitted: 1024 "
            "experts a sixteenth as wide as the dense feed-forward layer, 16 per token. At 1.93e20 FLOPs it "
            "allocates 1.02B active parameters (43.9B in all) on 28.3B tokens, where the paper's Table 2 "
            "gives 64x1B on 28.94B.",
        ),
    )
}
DEFAULT_LAW = "chinchilla-2022"
DATA_CONSTRAINED_LAW = "muennighoff-2023-c4"


# The largest natural logarithm of a loss term a float holds with room to add the others (exp(709.78) is the
# largest float).
_LARGEST_LOG_TERM = 700.0


def _power_term(argument: str, coefficient: float, exponent: float, count: float) -> float:
    """coefficient / count^exponent, taken in log space: a count far below 1 under a steep exponent (1e-195
    parameters at alpha 2.1) makes a term no float holds, refused naming the count."""
    log_term = math.log(coefficient) - exponent * math.log(count)
    if log_term > _LARGEST_LOG_TERM:
        raise v.InvalidInput(
            argument, f"too small for this law: it predicts a loss beyond any number, got {count!r}"
        )
    return math.exp(log_term)
