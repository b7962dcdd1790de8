"""Cluster arithmetic (FLOPs, wall-clock, accelerator-hours, cost, memory) against published figures."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import units
from service.core.cluster import (
    decoding_runtime,
    recomputation_flops_factor,
    training_cost,
    training_flops,
    training_runtime,
)
from service.core.memory import OPTIMIZER_STATE_BYTES, training_memory
from service.core.shape import ModelShape
from service.core.validation import InvalidInput

A100_BF16_FLOPS_PER_SECOND = 312e12  # dense peak, NVIDIA A100 datasheet (hardware.md)
A100_40GB_BYTES = 40e9
H100_BYTES_PER_SECOND = 3.35e12  # memory bandwidth, NVIDIA H100 SXM datasheet (hardware.md)
H100_BF16_FLOPS_PER_SECOND = 989.4e12
GB = 1e9  # the ZeRO paper's GB


def shape(**overrides) -> ModelShape:
    """MPT-7B's shape (MosaicML model card): 32 layers, d_model 4096, 32 heads, context 2048."""
    fields = {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 2048, "micro_batch": 1}
    return ModelShape(**{**fields, **overrides})


def memory(**overrides):
    arguments = {"params": 7.5e9, "memory_bytes": 80e9, **overrides}
    return training_memory(**arguments)


def runtime(**overrides):
    arguments = {
        "flops": 1e23,
        "accelerators": 1024,
        "peak_flops_per_second": 989.4e12,
        "mfu": 0.4,
        **overrides,
    }
    return training_runtime(**arguments)


# --- ModelShape -------------------------------------------------------------------------------------------


def test_a_shape_needs_heads_that_divide_d_model():
    with pytest.raises(InvalidInput, match=r"^heads:"):
        ModelShape(layers=2, d_model=100, heads=3, sequence_length=128)


@pytest.mark.parametrize("field", ["layers", "d_model", "heads", "sequence_length", "micro_batch"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True, 10**9])
def test_a_shape_needs_positive_whole_dimensions_within_bounds(field, value):
    with pytest.raises(InvalidInput, match=rf"^{field}:"):
        shape(**{field: value})


# --- training_flops ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "pf_days"),
    [
        (174_600e6, 3.64e3),  # GPT-3 175B
        (12_850e6, 2.68e2),  # GPT-3 13B
        (1_320e6, 2.75e1),  # GPT-3 XL
    ],
)
def test_six_n_d_reproduces_gpt3_table_d1(params, pf_days):
    # Brown et al. 2020, Table D.1, all on 300B tokens; printed to 3 significant figures, so the
    # tolerance is half a unit in the last printed digit.
    flops = training_flops(params, 300e9)

    assert units.flops_to_pf_days(flops) == pytest.approx(pf_days, abs=pf_days * 0.005)


def test_gpt3_175b_takes_3_14e23_flops():
    flops = training_flops(174_600e6, 300e9)

    assert flops == pytest.approx(3.14e23, abs=0.005e23)


def test_training_flops_without_a_shape_is_six_times_params_times_tokens():
    assert training_flops(7e9, 2e12) == pytest.approx(6 * 7e9 * 2e12, rel=1e-15)


def test_the_attention_term_follows_kaplan_eq_2_2():
    model = shape(layers=32, d_model=4096, sequence_length=2048)

    flops = training_flops(6.7e9, 1e12, model)

    assert flops == pytest.approx(1e12 * (6 * 6.7e9 + 6 * 32 * 2048 * 4096), rel=1e-12)


def test_longer_context_costs_more_at_equal_params_and_tokens():
    short = training_flops(6.7e9, 1e12, shape(sequence_length=2048))
    long = training_flops(6.7e9, 1e12, shape(sequence_length=32768))

    assert training_flops(6.7e9, 1e12) < short < long


@pytest.mark.parametrize("argument", ["params", "tokens"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, 1e40, "many"])
def test_training_flops_rejects_counts_that_are_not_positive_finite_numbers(argument, value):
    arguments = {"params": 7e9, "tokens": 1e12, argument: value}

    with pytest.raises(InvalidInput, match=rf"^{argument}:"):
        training_flops(**arguments)


def test_training_flops_rejects_a_shape_that_is_not_a_model_shape():
    with pytest.raises(InvalidInput, match=r"^shape:"):
        training_flops(7e9, 1e12, {"layers": 32})


def test_training_flops_rejects_a_shape_whose_attention_term_exceeds_the_flops_bound():
    huge = ModelShape(layers=10**8, d_model=10**8, heads=1, sequence_length=10**8)

    with pytest.raises(InvalidInput, match=r"^shape:"):
        training_flops(1e16, 1e18, huge)


# --- training_runtime -------------------------------------------------------------------------------------


def test_runtime_seconds_times_cluster_throughput_gives_back_the_flops():
    result = runtime(flops=3.14e23, accelerators=1024, peak_flops_per_second=989.4e12, mfu=0.4)

    assert result.seconds * 1024 * 989.4e12 * 0.4 == pytest.approx(3.14e23, rel=1e-12)


def test_runtime_reports_days_pf_days_and_accelerator_hours_consistently():
    result = runtime(flops=8.64e22, accelerators=512)

    assert result.flops == 8.64e22
    assert result.pf_days == pytest.approx(1000.0, rel=1e-12)
    assert result.days == pytest.approx(result.seconds / 86_400, rel=1e-12)
    assert result.accelerator_hours == pytest.approx(512 * result.seconds / 3_600, rel=1e-12)


def test_doubling_the_accelerators_halves_the_wall_clock_but_not_the_accelerator_hours():
    one = runtime(accelerators=256)
    two = runtime(accelerators=512)

    assert two.seconds == pytest.approx(one.seconds / 2, rel=1e-12)
    assert two.accelerator_hours == pytest.approx(one.accelerator_hours, rel=1e-12)


def test_mpt_7b_reported_time_implies_a_plausible_mfu():
    # MosaicML MPT-7B (hardware.md, "Published training runs"): 6.7e9 params, 1.0e12 tokens, 440 A100 40GB,
    # ~9.5 days. The MFU it implies (ideal days at MFU 1 / reported days, about 0.36) must fall in the band
    # large runs report (hardware.md "Utilisation": 0.3-0.6); a sanity check of 6ND and the runtime, not an
    # exact reproduction, since reported days include restarts and evaluation.
    flops = training_flops(6.7e9, 1.0e12)
    ideal = training_runtime(flops, 440, A100_BF16_FLOPS_PER_SECOND, 1.0)

    implied_mfu = ideal.days / 9.5

    assert 0.3 <= implied_mfu <= 0.6


def test_mpt_7b_at_its_implied_mfu_costs_about_200k_dollars():
    # Reported: ~$200k at ~$2 per GPU-hour, i.e. 440 GPUs for 9.5 days.
    flops = training_flops(6.7e9, 1.0e12)
    implied_mfu = training_runtime(flops, 440, A100_BF16_FLOPS_PER_SECOND, 1.0).days / 9.5
    result = training_runtime(flops, 440, A100_BF16_FLOPS_PER_SECOND, implied_mfu)

    cost = training_cost(result.accelerator_hours, Decimal("2"))

    assert result.days == pytest.approx(9.5, rel=1e-9)
    assert result.accelerator_hours == pytest.approx(440 * 9.5 * 24, rel=1e-9)
    assert float(cost) == pytest.approx(200_000, rel=0.01)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("flops", 0.0),
        ("flops", -1e20),
        ("flops", math.nan),
        ("flops", math.inf),
        ("flops", 1e36),
        ("accelerators", 0),
        ("accelerators", 1.5),
        ("accelerators", True),
        ("accelerators", units.MAX_ACCELERATORS + 1),
        ("peak_flops_per_second", 0.0),
        ("peak_flops_per_second", math.nan),
        ("peak_flops_per_second", -math.inf),
        ("peak_flops_per_second", 1e300),
        ("mfu", 0.0),
        ("mfu", 1.01),
        ("mfu", math.nan),
    ],
)
def test_training_runtime_rejects_invalid_arguments_by_name(argument, value):
    with pytest.raises(InvalidInput, match=rf"^{argument}:"):
        runtime(**{argument: value})


def test_training_runtime_rejects_a_peak_so_small_the_time_overflows():
    with pytest.raises(InvalidInput, match=r"^peak_flops_per_second:"):
        runtime(flops=1e35, accelerators=1, peak_flops_per_second=1e-300, mfu=1e-10)


@given(
    flops=st.floats(allow_nan=True, allow_infinity=True),
    accelerators=st.integers(min_value=-2, max_value=units.MAX_ACCELERATORS + 2),
    peak=st.floats(allow_nan=True, allow_infinity=True),
    mfu=st.floats(allow_nan=True, allow_infinity=True),
)
def test_training_runtime_returns_finite_numbers_or_rejects_the_input(flops, accelerators, peak, mfu):
    try:
        result = training_runtime(flops, accelerators, peak, mfu)
    except InvalidInput:
        return

    figures = [result.flops, result.pf_days, result.seconds, result.days, result.accelerator_hours]
    assert all(math.isfinite(figure) and figure >= 0 for figure in figures)


# --- training_cost ----------------------------------------------------------------------------------------


def test_training_cost_is_hours_times_price_to_the_cent():
    assert training_cost(440 * 9.5 * 24, Decimal("2")) == Decimal("200640.00")


def test_training_cost_rounds_half_up_to_the_cent():
    assert training_cost(1.0, Decimal("2.745")) == Decimal("2.75")


@pytest.mark.parametrize(
    ("argument", "hours", "price"),
    [
        ("accelerator_hours", -1.0, Decimal("2")),
        ("accelerator_hours", math.nan, Decimal("2")),
        ("accelerator_hours", math.inf, Decimal("2")),
        ("price_per_hour", 10.0, 2.0),
        ("price_per_hour", 10.0, Decimal("-1")),
        ("price_per_hour", 10.0, Decimal("NaN")),
    ],
)
def test_training_cost_rejects_invalid_arguments_by_name(argument, hours, price):
    with pytest.raises(InvalidInput, match=rf"^{argument}:"):
        training_cost(hours, price)


# --- recomputation_flops_factor ---------------------------------------------------------------------------


def test_full_recomputation_costs_a_third_more_flops():
    assert recomputation_flops_factor("full") == pytest.approx(8 / 6, rel=1e-15)


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_no_or_selective_recomputation_costs_no_extra_flops(mode):
    assert recomputation_flops_factor(mode) == 1.0


@pytest.mark.parametrize("mode", ["partial", "", None, "FULL"])
def test_recomputation_flops_factor_rejects_unknown_modes(mode):
    with pytest.raises(InvalidInput, match=r"^recomputation:"):
        recomputation_flops_factor(mode)


# --- training_memory: model states (ZeRO) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "printed_gb"),
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_paper_example_is_reproduced(stage, printed_gb):
    # Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, N_d = 64, K = 12 (mixed-precision Adam). The figures are
    # printed to one decimal (120 to the unit), so the tolerance is half a unit in the last printed digit.
    half_unit = 0.5 if stage == 0 else 0.05

    result = memory(params=7.5e9, data_parallel=64, zero_stage=stage, optimizer="adam", precision="bf16")

    assert result.model_states_bytes / GB == pytest.approx(printed_gb, abs=half_unit)


@pytest.mark.parametrize(
    ("stage", "exact_bytes"),
    [(0, 120e9), (1, 30e9 + 12 * 7.5e9 / 64), (2, 15e9 + 14 * 7.5e9 / 64), (3, 1.875e9)],
)
def test_zero_model_states_follow_the_papers_formulas(stage, exact_bytes):
    result = memory(params=7.5e9, data_parallel=64, zero_stage=stage)

    assert result.model_states_bytes == pytest.approx(exact_bytes, rel=1e-12)
    assert result.activations_bytes == 0.0
    assert result.total_bytes == result.model_states_bytes


@pytest.mark.parametrize(
    ("optimizer", "precision", "bytes_per_param"),
    [
        ("adam", "bf16", 16),  # 2 + 2 + 12, ZeRO §3.1
        ("adamw", "fp16", 16),
        ("adam", "fp8", 16),  # fp8 storage counted as bf16 mixed precision
        ("adam", "fp32", 16),  # 4 + 4 + 8: no separate fp32 master copy
        ("adam", "tf32", 16),
        ("sgd-momentum", "bf16", 12),  # 2 + 2 + 8
        ("sgd-momentum", "fp32", 12),  # 4 + 4 + 4
    ],
)
def test_bytes_per_param_add_weights_gradients_and_optimizer_state(optimizer, precision, bytes_per_param):
    result = memory(optimizer=optimizer, precision=precision)

    assert result.bytes_per_param == bytes_per_param


def test_optimizer_state_bytes_are_the_zero_papers_k():
    assert OPTIMIZER_STATE_BYTES["adam"] == 12
    assert OPTIMIZER_STATE_BYTES["sgd-momentum"] == 8


def test_fp32_training_keeps_more_replicated_and_fewer_sharded_bytes_under_zero_1():
    # ZeRO-1 shards only the optimizer state: 4 + 4 replicated + 8/N_d in fp32, 2 + 2 + 12/N_d in bf16.
    fp32 = memory(params=1e9, data_parallel=8, zero_stage=1, precision="fp32")
    bf16 = memory(params=1e9, data_parallel=8, zero_stage=1, precision="bf16")

    assert fp32.model_states_bytes == pytest.approx(1e9 * (8 + 8 / 8), rel=1e-12)
    assert bf16.model_states_bytes == pytest.approx(1e9 * (4 + 12 / 8), rel=1e-12)


@pytest.mark.parametrize("data_parallel", [1, 2, 8, 64, 1000])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_memory_never_grows_with_the_zero_stage(data_parallel, precision):
    totals = [
        memory(data_parallel=data_parallel, zero_stage=stage, precision=precision, shape=shape()).total_bytes
        for stage in range(4)
    ]

    assert totals[3] <= totals[2] <= totals[1] <= totals[0]


def test_plain_data_parallelism_does_not_shard_anything():
    one = memory(data_parallel=1, zero_stage=0)
    many = memory(data_parallel=1024, zero_stage=0)

    assert one.model_states_bytes == many.model_states_bytes == 16 * 7.5e9


def test_tensor_parallelism_splits_the_model_states():
    alone = memory(params=70e9, zero_stage=0)
    split = memory(params=70e9, zero_stage=0, tensor_parallel=8)

    assert split.model_states_bytes == pytest.approx(alone.model_states_bytes / 8, rel=1e-12)


# --- training_memory: activations (Korthikanti et al. 2022, Table 2) ----------------------------------------


def test_activations_without_recomputation_or_flash_attention_follow_table_2():
    s, b, h, a, layers = 2048, 2, 4096, 32, 32
    model = ModelShape(layers=layers, d_model=h, heads=a, sequence_length=s, micro_batch=b, dropout=True)

    result = memory(shape=model, recomputation="none", flash_attention=False)

    assert result.activations_bytes == pytest.approx(layers * s * b * h * (34 + 5 * a * s / h), rel=1e-12)


def test_selective_recomputation_drops_exactly_the_attention_score_term():
    model = shape(dropout=True)

    none = memory(shape=model, recomputation="none", flash_attention=False).activations_bytes
    selective = memory(shape=model, recomputation="selective", flash_attention=False).activations_bytes

    attention_scores = 32 * 5 * 32 * 2048 * 2048 * 1
    assert none - selective == pytest.approx(attention_scores, rel=1e-12)


def test_flash_attention_stores_no_attention_scores_so_selective_recomputation_saves_nothing_more():
    none = memory(shape=shape(dropout=True), recomputation="none").activations_bytes
    selective = memory(shape=shape(dropout=True), recomputation="selective").activations_bytes

    assert none == selective == pytest.approx(32 * 2048 * 4096 * 34, rel=1e-12)


def test_without_dropout_no_mask_is_kept():
    # Table 2's 34·s·b·h less the two 1-byte masks, and the scores' 5·a·s²·b less the probabilities' mask.
    s, b, h, a = 2048, 1, 4096, 32
    masked = memory(shape=shape(dropout=True), recomputation="none", flash_attention=False).activations_bytes
    unmasked = memory(shape=shape(), recomputation="none", flash_attention=False).activations_bytes
    assert unmasked == pytest.approx(32 * s * b * h * (32 + 4 * a * s / h), rel=1e-12)
    assert masked - unmasked == pytest.approx(32 * s * b * (2 * h + a * s), rel=1e-12)


def test_full_recomputation_keeps_each_layers_input_and_one_layers_working_set():
    result = memory(shape=shape(micro_batch=4, dropout=True), recomputation="full", tensor_parallel=4)

    # s·b·h = 2048 · 4 · 4096: each of the 32 layers keeps its input, 2·s·b·h split 4 ways by sequence
    # parallelism, and the layer being recomputed holds s·b·h·34/4 (Table 2 with t = 4).
    sbh = 2048 * 4 * 4096
    assert result.activations_bytes == pytest.approx(32 * 2 * sbh / 4 + 34 * sbh / 4, rel=1e-12)


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_tensor_and_sequence_parallelism_divide_activations_by_t(mode):
    alone = memory(shape=shape(), recomputation=mode).activations_bytes
    split = memory(shape=shape(), recomputation=mode, tensor_parallel=8).activations_bytes

    assert split == pytest.approx(alone / 8, rel=1e-12)


# LLaMA-65B's dimensions (Touvron et al. 2023, Table 2): 80 layers, d_model 8192, 64 heads, context 2048; one
# sequence per micro-batch; trained, as the GPT of Korthikanti et al.'s Table 2 was, with dropout.
LLAMA_65B = ModelShape(layers=80, d_model=8192, heads=64, sequence_length=2048, micro_batch=1, dropout=True)


@pytest.mark.parametrize(("sequence_parallel", "gigabytes"), [(False, 17.45), (True, 5.70)])
def test_llama_65b_at_t_8_selective_needs_17_45_gb_of_activations_without_sequence_parallelism_5_70_with(
    sequence_parallel, gigabytes
):
    # Korthikanti et al. 2022, Table 2, per layer: s·b·h·(10 + 24/t) with tensor parallelism alone, s·b·h·34/t
    # with sequence parallelism too: 2048 · 8192 · 13 · 80 = 17.45e9 and 2048 · 8192 · 4.25 · 80 = 5.70e9.
    result = memory(
        shape=LLAMA_65B, recomputation="selective", tensor_parallel=8, sequence_parallel=sequence_parallel
    )

    assert result.activations_bytes / GB == pytest.approx(gigabytes, abs=0.005)
    assert result.sequence_parallel is sequence_parallel


def test_tensor_parallelism_alone_does_not_split_the_layer_norm_and_dropout_activations():
    s, b, h, a, t = 2048, 1, 8192, 64, 8

    result = memory(
        shape=LLAMA_65B,
        recomputation="none",
        tensor_parallel=t,
        sequence_parallel=False,
        flash_attention=False,
    )

    assert result.activations_bytes == pytest.approx(80 * s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_sequence_parallelism_changes_nothing_without_tensor_parallelism(mode):
    def activations(**options):
        return memory(shape=shape(), recomputation=mode, **options).activations_bytes

    assert activations(sequence_parallel=False) == activations(sequence_parallel=True)


@pytest.mark.parametrize(("sequence_parallel", "per_sbh"), [(False, 32 * 2 + 13), (True, 32 * 2 / 8 + 4.25)])
def test_under_full_recomputation_sequence_parallelism_splits_the_stored_layer_inputs(
    sequence_parallel, per_sbh
):
    # t = 8: each layer's 2·s·b·h input, split 8 ways with sequence parallelism, and one layer's working
    # set, s·b·h·(10 + 24/8) or s·b·h·34/8 (Table 2).
    result = memory(
        shape=shape(dropout=True),
        recomputation="full",
        tensor_parallel=8,
        sequence_parallel=sequence_parallel,
    )

    assert result.activations_bytes == pytest.approx(2048 * 4096 * per_sbh, rel=1e-12)


def test_sequence_parallelism_is_assumed_unless_turned_off():
    assumed = memory(shape=LLAMA_65B, recomputation="selective", tensor_parallel=8)

    assert assumed.sequence_parallel is True
    assert (
        assumed.activations_bytes
        == memory(
            shape=LLAMA_65B, recomputation="selective", tensor_parallel=8, sequence_parallel=True
        ).activations_bytes
    )


def test_recomputation_saves_memory_in_order_none_selective_full():
    by_mode = {
        mode: memory(shape=shape(), recomputation=mode, flash_attention=False).activations_bytes
        for mode in ("none", "selective", "full")
    }

    assert by_mode["full"] < by_mode["selective"] < by_mode["none"]


def test_total_memory_is_model_states_plus_activations():
    result = memory(shape=shape(), zero_stage=2, data_parallel=16)

    assert result.total_bytes == pytest.approx(
        result.model_states_bytes + result.activations_bytes, rel=1e-15
    )
    assert result.fits == (result.total_bytes <= result.capacity_bytes)


# --- training_memory: fitting and the smallest data-parallel degree ----------------------------------------


def test_mpt_7b_fits_an_a100_40gb_only_with_sharded_states():
    # MPT-7B (6.7e9 params) trained on 440 A100 40GB with FSDP, i.e. ZeRO-3 sharding. Unsharded its
    # mixed-precision Adam states alone take 16 · 6.7e9 = 107 GB; sharded 440 ways they are ~0.24 GB and
    # the ~31 GB of activations at micro-batch 1 (Table 2, no recomputation) fit.
    plain = training_memory(6.7e9, A100_40GB_BYTES, data_parallel=440, zero_stage=0, shape=shape())
    sharded = training_memory(6.7e9, A100_40GB_BYTES, data_parallel=440, zero_stage=3, shape=shape())

    assert not plain.fits
    assert plain.min_accelerators is None
    assert sharded.fits
    assert sharded.model_states_bytes == pytest.approx(16 * 6.7e9 / 440, rel=1e-12)


def test_the_zero_example_needs_the_closed_form_degree_on_a_32gb_v100():
    # ZeRO-3 with 16 bytes per parameter: 7.5e9 · 16 / N_d ≤ 32e9 → N_d ≥ 3.75 → 4.
    result = memory(params=7.5e9, memory_bytes=32e9, zero_stage=3)

    assert not result.fits
    assert result.min_accelerators == 4


def test_plain_data_parallelism_needs_one_accelerator_when_it_fits():
    result = memory(params=1e9, memory_bytes=80e9, zero_stage=0)

    assert result.fits
    assert result.min_accelerators == 1


def test_no_degree_helps_when_activations_alone_exceed_memory():
    result = memory(params=1e9, memory_bytes=10e9, zero_stage=3, shape=shape(micro_batch=16))

    assert result.activations_bytes > 10e9
    assert result.min_accelerators is None


def test_no_degree_helps_when_the_replicated_states_exceed_memory():
    # ZeRO-1 keeps 4 bytes of weights and gradients per parameter on every accelerator: 4 · 30e9 > 80e9.
    result = memory(params=30e9, memory_bytes=80e9, zero_stage=1)

    assert result.min_accelerators is None


def test_min_accelerators_counts_tensor_parallel_ranks_too():
    result = memory(params=70e9, memory_bytes=80e9, zero_stage=3, tensor_parallel=8)

    assert result.min_accelerators == result.min_data_parallel * 8


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("params", [1e9, 7.5e9, 70e9, 405e9])
@pytest.mark.parametrize("memory_bytes", [24e9, 80e9, 192e9])
def test_min_accelerators_is_the_smallest_degree_that_fits(stage, params, memory_bytes):
    found = memory(params=params, memory_bytes=memory_bytes, zero_stage=stage).min_accelerators

    if found is None:
        assert not memory(
            params=params, memory_bytes=memory_bytes, zero_stage=stage, data_parallel=units.MAX_ACCELERATORS
        ).fits
    else:
        assert memory(params=params, memory_bytes=memory_bytes, zero_stage=stage, data_parallel=found).fits
        assert (
            found == 1
            or not memory(
                params=params, memory_bytes=memory_bytes, zero_stage=stage, data_parallel=found - 1
            ).fits
        )


@given(
    params=st.floats(min_value=1.0, max_value=units.MAX_PARAMS),
    memory_bytes=st.floats(min_value=1.0, max_value=1e15),
    stage=st.integers(min_value=0, max_value=3),
    layers=st.integers(min_value=1, max_value=128),
)
def test_min_accelerators_is_minimal_for_any_size(params, memory_bytes, stage, layers):
    model = shape(layers=layers)
    arguments = {"params": params, "memory_bytes": memory_bytes, "zero_stage": stage, "shape": model}

    found = memory(**arguments).min_accelerators

    if found is None:
        assert not memory(**arguments, data_parallel=units.MAX_ACCELERATORS).fits
    else:
        assert memory(**arguments, data_parallel=found).fits
        assert found == 1 or not memory(**arguments, data_parallel=found - 1).fits


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("params", 0.0),
        ("params", -7e9),
        ("params", math.nan),
        ("params", math.inf),
        ("memory_bytes", 0.0),
        ("memory_bytes", math.nan),
        ("memory_bytes", math.inf),
        ("memory_bytes", 1e20),
        ("data_parallel", 0),
        ("data_parallel", 2.0),
        ("zero_stage", -1),
        ("zero_stage", 4),
        ("zero_stage", 1.0),
        ("zero_stage", True),
        ("optimizer", "adafactor"),
        ("optimizer", "Adam"),
        ("precision", "int8"),
        ("precision", None),
        ("recomputation", "partial"),
        ("tensor_parallel", 0),
        ("tensor_parallel", 3),  # does not divide MPT-7B's 32 heads
        ("sequence_parallel", "yes"),
        ("sequence_parallel", 1),
        ("flash_attention", "no"),
        ("shape", "32 layers"),
    ],
)
def test_training_memory_rejects_invalid_arguments_by_name(argument, value):
    arguments = {"shape": shape(), argument: value}

    with pytest.raises(InvalidInput, match=rf"^{argument}:"):
        memory(**arguments)


@given(
    params=st.floats(allow_nan=True, allow_infinity=True),
    memory_bytes=st.floats(allow_nan=True, allow_infinity=True),
    data_parallel=st.integers(min_value=-1, max_value=units.MAX_ACCELERATORS + 1),
    zero_stage=st.integers(min_value=-1, max_value=4),
    with_shape=st.booleans(),
)
def test_training_memory_returns_finite_numbers_or_rejects_the_input(
    params, memory_bytes, data_parallel, zero_stage, with_shape
):
    try:
        result = training_memory(
            params,
            memory_bytes,
            data_parallel=data_parallel,
            zero_stage=zero_stage,
            shape=shape() if with_shape else None,
        )
    except InvalidInput:
        return

    figures = [
        result.bytes_per_param,
        result.model_states_bytes,
        result.activations_bytes,
        result.total_bytes,
        result.capacity_bytes,
    ]
    assert all(math.isfinite(figure) and figure >= 0 for figure in figures)
    assert result.min_accelerators is None or 1 <= result.min_accelerators <= units.MAX_ACCELERATORS


# --- Serving ---------------------------------------------------------------------------------------------


def test_decoding_one_sequence_reads_every_weight_for_each_token():
    # hardware.md: batch-1 decoding is memory-bound, tokens/s ≲ bandwidth / (bytes per parameter · N).
    decoding = decoding_runtime(
        7e9, 1e9, H100_BYTES_PER_SECOND, peak_flops_per_second=H100_BF16_FLOPS_PER_SECOND
    )
    assert decoding.tokens_per_second == pytest.approx(3.35e12 / (2 * 7e9), rel=1e-12)
    assert decoding.bound == "memory_bandwidth"
    assert decoding.accelerator_hours == pytest.approx(1e9 / decoding.tokens_per_second / 3600, rel=1e-12)


def test_a_batch_shares_each_read_of_the_weights_until_compute_binds():
    def rate(batch):
        return decoding_runtime(7e9, 1e9, H100_BYTES_PER_SECOND, batch, H100_BF16_FLOPS_PER_SECOND)

    assert rate(8).tokens_per_second == pytest.approx(8 * rate(1).tokens_per_second, rel=1e-12)
    # Past batch = peak · 2 bytes / (2 FLOPs · bandwidth) ≈ 295, a token's 2·N FLOPs take longer than its
    # share of the read.
    assert (rate(295).bound, rate(296).bound) == ("memory_bandwidth", "compute")
    assert rate(4096).tokens_per_second == pytest.approx(989.4e12 / (2 * 7e9), rel=1e-12)


def test_without_a_16_bit_peak_only_the_memory_bandwidth_bounds_decoding():
    decoding = decoding_runtime(7e9, 1e9, H100_BYTES_PER_SECOND, batch=4096)
    assert decoding.tokens_per_second == pytest.approx(4096 * 3.35e12 / (2 * 7e9), rel=1e-12)
    assert decoding.bound == "memory_bandwidth"


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"params": 0}, "params"),
        ({"tokens": math.nan}, "tokens"),
        ({"memory_bandwidth_bytes_per_second": 0}, "memory_bandwidth_bytes_per_second"),
        ({"batch": 0}, "batch"),
        ({"batch": 1.5}, "batch"),
        ({"peak_flops_per_second": -1}, "peak_flops_per_second"),
        ({"memory_bandwidth_bytes_per_second": 5e-324}, "memory_bandwidth_bytes_per_second"),
        ({"batch": 10**7}, "batch"),
    ],
)
def test_decoding_runtime_rejects_invalid_arguments_by_name(overrides, argument):
    arguments = {"params": 7e9, "tokens": 1e9, "memory_bandwidth_bytes_per_second": 3.35e12, **overrides}
    with pytest.raises(InvalidInput, match=f"^{argument}:"):
        decoding_runtime(**arguments)


def test_a_run_too_small_for_its_flops_to_be_counted_is_refused_at_tokens():
    """6 · 2.47e-322 · 5e-324 underflows to 0 FLOPs (found by fuzzing): refused naming tokens."""
    with pytest.raises(InvalidInput) as refused:
        training_flops(2.47e-322, 5e-324)
    assert refused.value.argument == "tokens"
