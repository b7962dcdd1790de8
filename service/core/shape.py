"""The shape of a decoder-only transformer, and what follows from it alone: its parameters (total, active,
by part), the widths its layers compute with and its key/value cache.

Sources: Ainslie et al. 2023 (grouped-query attention), Shazeer 2020 (SwiGLU), Shazeer et al. 2017 and Fedus
et al. 2021 (mixture of experts), DeepSeek-AI 2024 (DeepSeek-V2's latent attention, DeepSeek-V3's
multi-token prediction). What training a shape takes is elsewhere: its FLOPs in `cluster`, its memory in
`memory`, its step time in `performance`.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core import validation as v

# Largest layer count, width, head count, context or micro-batch a shape may have: well beyond any published
# model (the longest contexts are ~1e7 tokens), and small enough that every product below stays finite.
MAX_SHAPE_DIMENSION = 100_000_000
# Multi-token prediction modules a shape may have (DeepSeek-V3 trains with 1).
MAX_MTP_DEPTH = 64

ACTIVATIONS = ("gelu", "swiglu")

# Bytes per weight a server reads: the bf16 (or fp16) weights as trained, not quantised. A shape's key/value
# cache is counted at the same 16 bits (`ModelShape.kv_cache_bytes_per_token`), hence its place here.
SERVING_BYTES_PER_PARAM = 2


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer, as far as FLOPs, memory and step time depend on it.

    `kv_heads` are grouped-query attention's key/value heads (Ainslie et al. 2023; default `heads`, plain
    multi-head attention), `head_dim` the width of a head (default d_model/heads), `ffn` the MLP's inner
    width (default 4·d_model, GPT), `activation` gelu (two MLP matrices) or swiglu (three, Shazeer 2020, as in
    Llama), `vocabulary` the token count of the embedding and output layers (default: not counted).
    `micro_batch` is the older name for the layout's micro-batch.

    Mixture of experts (Shazeer et al. 2017; Fedus et al. 2021; DeepSeek-V3, DeepSeek-AI 2024): with
    `experts` routed experts, each token goes to `experts_per_token` of them (top-k) and to every one of the
    `shared_experts`; an expert is an MLP of inner width `expert_ffn` (default `ffn`). The first
    `dense_layers` layers keep a dense MLP of width `ffn`, and of the rest every `moe_every`-th (the first of
    each group) is a mixture-of-experts layer. `capacity_factor` is the busiest expert-parallel rank's tokens
    over the mean (1: balanced; 1.25 is Switch Transformer's training capacity).

    Multi-head latent attention (DeepSeek-V2 §2.1) when `kv_lora_rank` is given: keys and values come from a
    `kv_lora_rank`-wide latent, queries from a `q_lora_rank`-wide one (or straight from the input), each head
    with `head_dim` channels plus `rope_head_dim` (default 64) rotary ones. `mtp_depth` modules of multi-token
    prediction (DeepSeek-V3 §2.2) each add one layer and a 2·d_model → d_model projection, sharing the
    embedding and output layer.
    """

    layers: int
    d_model: int
    heads: int
    sequence_length: int
    micro_batch: int = 1
    kv_heads: int | None = None
    ffn: int | None = None
    activation: str | None = None  # gelu unless given
    vocabulary: int | None = None
    head_dim: int | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int | None = None
    expert_ffn: int | None = None
    moe_every: int | None = None
    dense_layers: int | None = None
    capacity_factor: float | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    rope_head_dim: int | None = None
    mtp_depth: int | None = None
    # Whether training applies dropout (GPT-3 and Megatron's GPT defaults: 0.1) and keeps its 1-byte masks
    # for the backward pass; modern pretraining (Llama, Mistral, DeepSeek, MPT, BLOOM) runs without.
    dropout: bool = False

    def __post_init__(self) -> None:
        # One check per field, each naming it; in this order, which decides the error a shape with several
        # faults gets.
        self._check_sizes()
        if self.head_dim is None and self.d_model % self.heads:
            raise v.InvalidInput("heads", f"must divide d_model ({self.d_model}), got {self.heads}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise v.InvalidInput("kv_heads", f"must divide the heads ({self.heads}), got {self.kv_heads}")
        if self.activation is not None:
            v.choice("activation", self.activation, ACTIVATIONS)
        self._check_experts()
        self._check_latent_attention()

    def _check_sizes(self) -> None:
        for name in ("layers", "d_model", "heads", "sequence_length", "micro_batch"):
            v.whole_at_most(name, getattr(self, name), MAX_SHAPE_DIMENSION)
        for name in ("kv_heads", "ffn", "vocabulary", "head_dim", "experts", *_POSITIVE_MOE, *_MLA_WIDTHS):
            if getattr(self, name) is not None:
                v.whole_at_most(name, getattr(self, name), MAX_SHAPE_DIMENSION)
        for name in ("shared_experts", "dense_layers"):
            if getattr(self, name) is not None:
                v.whole_at_most(name, getattr(self, name), MAX_SHAPE_DIMENSION, minimum=0)
        if self.mtp_depth is not None:
            v.whole_at_most("mtp_depth", self.mtp_depth, MAX_MTP_DEPTH, minimum=0)
        if not isinstance(self.dropout, bool):
            raise v.InvalidInput("dropout", f"must be true or false, got {self.dropout!r}")

    def _check_experts(self) -> None:
        if self.experts is None:
            for name in MOE_FIELDS:
                if getattr(self, name) is not None:
                    raise v.InvalidInput(name, "needs experts (a mixture-of-experts shape)")
            return
        if self.experts_per_token is None:
            raise v.InvalidInput("experts_per_token", "is required with experts")
        if self.experts_per_token > self.experts:
            raise v.InvalidInput(
                "experts_per_token",
                f"cannot exceed the experts ({self.experts}), got {self.experts_per_token}",
            )
        if self.dense_layers is not None and self.dense_layers >= self.layers:
            raise v.InvalidInput(
                "dense_layers",
                f"must leave a mixture-of-experts layer of the {self.layers}, got {self.dense_layers}",
            )
        if self.capacity_factor is not None:
            v.in_range("capacity_factor", self.capacity_factor, 1.0, float(self.experts))

    def _check_latent_attention(self) -> None:
        if self.kv_lora_rank is None:
            for name in LATENT_ATTENTION_FIELDS:
                if getattr(self, name) is not None:
                    raise v.InvalidInput(name, "needs kv_lora_rank (multi-head latent attention)")
        elif self.kv_heads is not None:
            raise v.InvalidInput("kv_heads", "does not apply to multi-head latent attention (kv_lora_rank)")

    @property
    def key_value_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_width(self) -> int:
        return self.d_model // self.heads if self.head_dim is None else self.head_dim

    @property
    def latent_attention(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def rope_width(self) -> int:
        return (
            (DEFAULT_ROPE_HEAD_DIM if self.rope_head_dim is None else self.rope_head_dim)
            if self.latent_attention
            else 0
        )

    @property
    def query_key_width(self) -> int:
        """Channels of a head's query and key: its width, plus the rotary ones under latent attention."""
        return self.head_width + self.rope_width

    @property
    def ffn_width(self) -> int:
        return 4 * self.d_model if self.ffn is None else self.ffn

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.activation == "swiglu" else 2

    # --- attention ---------------------------------------------------------------------------------------

    @property
    def attention_params(self) -> float:
        """Weights of one layer's attention. Grouped-query: Q and the output projection (d·a·d_h each), K
        and V (d·kv·d_h each). Latent (DeepSeek-V2 §2.1): the query down- and up-projections (or one
        d → a·(d_h + d_r) projection), the key/value down-projection with the shared rotary key
        (d·(r_kv + d_r)), the key and value up-projections (r_kv·a·d_h each) and the output projection.
        Biases and norms, a few d per layer, are left out."""
        d, a, hd = float(self.d_model), float(self.heads), float(self.head_width)
        out = a * hd * d
        if not self.latent_attention:
            return 2 * out + 2 * d * self.key_value_heads * hd
        r_kv, qk = float(self.kv_lora_rank or 0), a * self.query_key_width
        query = d * qk if self.q_lora_rank is None else self.q_lora_rank * (d + qk)
        return query + d * (r_kv + self.rope_width) + 2 * r_kv * a * hd + out

    @property
    def output_projection_params(self) -> float:
        return float(self.heads) * self.head_width * self.d_model

    @property
    def kv_cache_bytes_per_token(self) -> float:
        """Bytes of the key/value cache per token at 16 bits, over the layers: 2·kv·d_h per layer, or the
        latent and the rotary key, r_kv + d_r, under latent attention (DeepSeek-V2 §2.1.2)."""
        per_layer = (
            (self.kv_lora_rank or 0) + self.rope_width
            if self.latent_attention
            else 2 * self.key_value_heads * self.head_width
        )
        return float(SERVING_BYTES_PER_PARAM * per_layer * self.layers)

    # --- MLP and experts ---------------------------------------------------------------------------------

    @property
    def mixture_of_experts(self) -> bool:
        return self.experts is not None

    @property
    def moe_layers(self) -> int:
        """Layers with a mixture-of-experts MLP: every `moe_every`-th after the dense ones (none if dense)."""
        if self.experts is None:
            return 0
        rest = self.layers - (self.dense_layers or 0)
        return -(-rest // (self.moe_every or 1))

    @property
    def moe_share(self) -> float:
        """The share of layers whose MLP is routed (0 for a dense model)."""
        return self.moe_layers / self.layers

    @property
    def expert_width(self) -> int:
        """Inner width of one expert's MLP: `expert_ffn`, or the dense MLP's."""
        return self.ffn_width if self.expert_ffn is None else self.expert_ffn

    @property
    def routed_rows(self) -> float:
        """Routed expert rows per token on the busiest expert-parallel rank: top-k by the capacity factor."""
        return float(self.experts_per_token or 0) * float(self.capacity_factor or 1.0)

    @property
    def dense_mlp_params(self) -> float:
        return float(self.mlp_matrices) * self.d_model * self.ffn_width

    @property
    def expert_params(self) -> float:
        """Weights of one expert: an MLP of width `expert_width`."""
        return float(self.mlp_matrices) * self.d_model * self.expert_width

    @property
    def router_params(self) -> float:
        return float(self.d_model) * (self.experts or 0)

    @property
    def experts_active(self) -> int:
        """Experts a token passes through in a mixture-of-experts layer: top-k routed plus shared."""
        return (self.experts_per_token or 0) + (self.shared_experts or 0)

    @property
    def moe_mlp_params(self) -> float:
        return ((self.experts or 0) + (self.shared_experts or 0)) * self.expert_params + self.router_params

    @property
    def moe_mlp_active_params(self) -> float:
        return self.experts_active * self.expert_params + self.router_params

    # --- totals ------------------------------------------------------------------------------------------

    @property
    def layer_params(self) -> float:
        """Weights of an average layer: attention and MLP (dense or mixture-of-experts, every expert)."""
        return self.non_embedding_params / self.layers

    @property
    def non_embedding_params(self) -> float:
        dense = self.layers - self.moe_layers
        return (
            self.layers * self.attention_params
            + dense * self.dense_mlp_params
            + self.moe_layers * self.moe_mlp_params
        )

    @property
    def non_embedding_active_params(self) -> float:
        dense = self.layers - self.moe_layers
        return (
            self.layers * self.attention_params
            + dense * self.dense_mlp_params
            + self.moe_layers * self.moe_mlp_active_params
        )

    @property
    def embedding_params(self) -> float:
        """The input embedding and the (untied) output layer: 2·vocabulary·d_model, or 0 without a
        vocabulary."""
        return 0.0 if self.vocabulary is None else 2.0 * self.vocabulary * self.d_model

    @property
    def params(self) -> float:
        """Parameters of the model: its layers and embedding_params; the multi-token prediction modules,
        used in training only, are `mtp_params` (DeepSeek-V3's 671B leaves out its 14B)."""
        return self.non_embedding_params + self.embedding_params

    @property
    def active_params(self) -> float:
        """Parameters a token passes through: all of a dense model; the top-k routed and shared experts
        only of a mixture-of-experts layer."""
        return self.non_embedding_active_params + self.embedding_params

    @property
    def mtp_params(self) -> float:
        """Weights of the multi-token prediction modules: each a layer of the last layer's kind and a
        2·d_model → d_model projection (they share the embedding and output layer)."""
        mlp = self.moe_mlp_params if self.mixture_of_experts else self.dense_mlp_params
        return (self.mtp_depth or 0) * (self.attention_params + mlp + 2.0 * self.d_model * self.d_model)

    @property
    def mtp_active_params(self) -> float:
        """What a token passes through in the prediction modules: the mtp_params' active part and, once per
        module, the shared output layer."""
        mlp = self.moe_mlp_active_params if self.mixture_of_experts else self.dense_mlp_params
        head = 0.0 if self.vocabulary is None else float(self.vocabulary) * self.d_model
        return (self.mtp_depth or 0) * (
            self.attention_params + mlp + 2.0 * self.d_model * self.d_model + head
        )

    @property
    def attention_width(self) -> float:
        """Mean of a layer's query/key and value widths, a·(d_qk + d_v)/2: d_model in a plain transformer,
        the width the attention-score FLOPs scale with."""
        return self.heads * (self.query_key_width + self.head_width) / 2.0


# The fields a shape may give only with `experts` (a mixture of experts), and only with `kv_lora_rank`
# (latent attention): the API's schema states the same rules from these.
MOE_FIELDS = (
    "experts_per_token",
    "shared_experts",
    "expert_ffn",
    "moe_every",
    "dense_layers",
    "capacity_factor",
)
LATENT_ATTENTION_FIELDS = ("q_lora_rank", "rope_head_dim")
_POSITIVE_MOE = ("experts_per_token", "expert_ffn", "moe_every")
_MLA_WIDTHS = ("kv_lora_rank", *LATENT_ATTENTION_FIELDS)
# Rotary channels per head under latent attention when the shape does not say (DeepSeek-V2 and V3: 64).
DEFAULT_ROPE_HEAD_DIM = 64


def check_shape(shape: object) -> None:
    """A public function's `shape` argument must be a ModelShape: its fields were checked when it was made."""
    if not isinstance(shape, ModelShape):
        raise v.InvalidInput("shape", f"must be a ModelShape, got {type(shape).__name__}")
