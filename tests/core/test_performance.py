"""The cluster model: published step times as test vectors, and the physics each part must obey."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from bench.moe_runs import MIXTRAL_8X7B
from bench.published_runs import CALIBRATION_RUNS, HELD_OUT_RUNS, LLAMA3_405B, LLAMA3_CLUSTER, SELENE
from service.core import performance
from service.core.frameworks import FRAMEWORKS, GENERIC
from service.core.memory import training_memory
from service.core.performance import Layout, step
from service.core.shape import ModelShape
from service.core.validation import InvalidInput

GPT_175B = ModelShape(layers=96, d_model=12288, heads=96, sequence_length=2048, vocabulary=51_200)


def layout(**overrides) -> Layout:
    fields = {
        "tensor_parallel": 8,
        "pipeline_parallel": 8,
        "data_parallel": 4,
        "micro_batch": 1,
        "global_batch": 256,
        "sequence_parallel": True,
        "recomputation": "selective",
        "zero_stage": 1,
        "flash_attention": False,
    }
    return Layout(**{**fields, **overrides})


def error(run) -> float:
    return step(run.shape, run.machine, run.layout).seconds / run.seconds - 1


# --- published runs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", CALIBRATION_RUNS, ids=lambda run: run.name)
def test_each_calibration_run_is_predicted_within_10_percent(run):
    assert abs(error(run)) <= 0.10, f"{run.name}: {error(run):+.1%} against {run.source}"


def test_the_calibration_runs_are_predicted_within_5_percent_on_average():
    assert statistics.mean(abs(error(run)) for run in CALIBRATION_RUNS) <= 0.05


@pytest.mark.parametrize("run", HELD_OUT_RUNS[:3], ids=lambda run: run.name)
def test_the_first_held_out_runs_are_predicted_within_10_percent(run):
    # Megatron-LM 3.6B and 76.1B (Narayanan et al. 2021, Table 1) and Llama 3 on 16 384 GPUs (Table 4): held
    # out of the first calibration, in the corpus the constants are fitted on since model 1.3 (what is
    # judged held out now is each organisation's runs, bench/calibrate_cluster.py).
    assert abs(error(run)) <= 0.10, f"{run.name}: {error(run):+.1%}"


def test_llama3_at_128k_context_holds_with_attention_at_its_own_efficiency():
    # Held out: context parallelism 16 at 131 072 tokens, where attention is most of the work. Charged at
    # half a GEMM's efficiency (model 1.3) it came out 10% fast; at the H100's fitted fused-attention
    # fraction, 3% (model 1.4); at FlashAttention-2's, apart from Transformer Engine's (model 1.5: the corpus
    # runs it as torchtitan, Meta's public stack), 6% slow (bench/RESULTS.md). This test says when it moves.
    assert -0.02 <= error(HELD_OUT_RUNS[3]) <= 0.08


def test_fused_attention_at_half_the_gemm_fraction_costs_what_the_whole_matrix_did():
    # Model 1.4.0 charges a fused kernel the causal half of the scores at the attention fraction; before, the
    # whole matrix at the GEMM fraction. The two agree when the attention fraction is half the GEMM's, so
    # plans from before replay unchanged (their constants carry no attention fraction).
    machine = dataclasses.replace(SELENE, matmul_efficiency=0.7, attention_efficiency=None)
    fused = layout(flash_attention=True)
    constants_before = dataclasses.replace(performance.CALIBRATION, attention_efficiency=None)
    before = step(GPT_175B, machine, fused, calibration=constants_before)
    now = step(GPT_175B, dataclasses.replace(machine, attention_efficiency=0.35), fused)
    assert now.breakdown["compute"] == pytest.approx(before.breakdown["compute"], rel=1e-12)
    slower = step(GPT_175B, dataclasses.replace(machine, attention_efficiency=0.2), fused)
    assert slower.breakdown["compute"] > now.breakdown["compute"]
    # Without a fused kernel the whole matrix runs as GEMMs, whatever the attention fraction.
    low, high = (dataclasses.replace(machine, attention_efficiency=a) for a in (0.2, 0.4))
    assert step(GPT_175B, low, layout()).seconds == step(GPT_175B, high, layout()).seconds


def test_llama3_405b_shape_gives_its_published_parameter_count():
    assert LLAMA3_405B.params == pytest.approx(405.9e9, rel=0.001)


# --- the step's parts ---------------------------------------------------------------------------------------


def test_the_breakdown_adds_up_to_the_step():
    result = step(GPT_175B, SELENE, layout())
    assert sum(result.breakdown.values()) == pytest.approx(result.seconds)
    assert set(result.breakdown) == set(performance.BREAKDOWN)
    assert all(part >= 0 for part in result.breakdown.values())


def test_the_bubble_is_p_minus_1_over_v_m_of_the_ideal_time():
    plain = step(GPT_175B, SELENE, layout())
    m = plain.layout.micro_batches
    ideal = plain.breakdown["compute"] + plain.breakdown["memory_bound"] + plain.breakdown["tensor_parallel"]
    assert plain.breakdown["pipeline_bubble"] == pytest.approx(ideal * 7 / m)
    interleaved = step(GPT_175B, SELENE, layout(interleave=3, global_batch=8 * 4 * 3))
    ideal = sum(interleaved.breakdown[k] for k in ("compute", "memory_bound", "tensor_parallel"))
    assert interleaved.breakdown["pipeline_bubble"] == pytest.approx(ideal * 7 / (3 * 24))


def test_tensor_parallelism_across_nodes_collapses_onto_the_network():
    inside = step(GPT_175B, SELENE, layout(tensor_parallel=8, pipeline_parallel=4, data_parallel=2))
    spanning = step(GPT_175B, SELENE, layout(tensor_parallel=16, pipeline_parallel=2, data_parallel=2))
    per_layer_inside = inside.breakdown["tensor_parallel"] / (96 / 4)
    per_layer_spanning = spanning.breakdown["tensor_parallel"] / (96 / 2)
    # Each rank moves about as many bytes (2(t-1)/t of the message), at a twelfth of the bandwidth.
    assert per_layer_spanning > 5 * per_layer_inside


def test_data_parallel_traffic_is_hidden_under_the_backward_pass_up_to_its_length():
    small = step(GPT_175B, SELENE, layout(data_parallel=64, global_batch=64 * 32))
    assert small.breakdown["data_parallel"] >= 0
    slow_network = dataclasses.replace(SELENE, scale_out_bytes_per_second=1e9)
    slower = step(GPT_175B, slow_network, layout(data_parallel=64, global_batch=64 * 32))
    assert slower.breakdown["data_parallel"] > small.breakdown["data_parallel"]


def test_zero3_gathers_parameters_every_micro_batch():
    stage1 = step(
        GPT_175B, SELENE, layout(zero_stage=1, pipeline_parallel=1, data_parallel=32, tensor_parallel=8)
    )
    stage3 = step(
        GPT_175B, SELENE, layout(zero_stage=3, pipeline_parallel=1, data_parallel=32, tensor_parallel=8)
    )
    assert stage3.breakdown["data_parallel"] > stage1.breakdown["data_parallel"]
    assert stage3.model_states_bytes < stage1.model_states_bytes


def test_full_recomputation_costs_a_forward_pass_and_saves_activations():
    none = step(GPT_175B, SELENE, layout(recomputation="none"))
    full = step(GPT_175B, SELENE, layout(recomputation="full"))
    assert full.hardware_flops / none.hardware_flops == pytest.approx(4 / 3, rel=0.01)
    assert full.model_flops == none.model_flops
    assert full.activations_bytes < none.activations_bytes / 5
    assert full.seconds > none.seconds


def test_mfu_counts_palm_model_flops():
    result = step(GPT_175B, SELENE, layout())
    N = GPT_175B.layers * GPT_175B.layer_params + GPT_175B.embedding_params / 2
    per_token = 6 * N + 12 * 96 * 12288 * 2048
    assert result.model_flops == pytest.approx(per_token * 256 * 2048)
    assert result.mfu == pytest.approx(result.model_flops / (result.seconds * 256 * 312e12))


# --- memory -------------------------------------------------------------------------------------------------


def test_activations_follow_korthikanti_table_2_for_gpt_shapes():
    # One layer, no pipeline, t = 8 with sequence parallelism, no recomputation, the scores stored:
    # s·b·h·(34 + 5·a·s/h)/t bytes (Table 2, last row), plus the fp32 logits of the only stage.
    shape = ModelShape(layers=1, d_model=12288, heads=96, sequence_length=2048, dropout=True)
    result = step(
        shape,
        SELENE,
        layout(
            pipeline_parallel=1, data_parallel=1, global_batch=1, recomputation="none", flash_attention=False
        ),
    )
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    assert result.activations_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t)


def test_the_first_stage_holds_p_micro_batches_in_flight():
    one = step(GPT_175B, SELENE, layout(global_batch=4 * 8, micro_batch=1))
    assert one.layout.micro_batches == 8
    fewer = step(GPT_175B, SELENE, layout(global_batch=4 * 2, micro_batch=1))
    # With 2 micro-batches only 2 are ever in flight, not 8.
    assert fewer.activations_bytes == pytest.approx(one.activations_bytes * 2 / 8)


@pytest.mark.parametrize("shape", [GPT_175B, MIXTRAL_8X7B], ids=["dense", "mixture-of-experts"])
@pytest.mark.parametrize("recomputation", ["none", "selective", "full"])
@pytest.mark.parametrize("flash_attention", [True, False])
def test_a_plan_at_a_given_mfu_reports_the_memory_the_layout_search_checks(
    shape, recomputation, flash_attention
):
    # One activation model: memory.training_memory (plans given an MFU) and the step (the search's fit
    # check) agree on a layout both can describe: one stage, one micro-batch, no expert parallelism.
    options = {"recomputation": recomputation, "flash_attention": flash_attention, "zero_stage": 1}
    stepped = step(shape, SELENE, layout(pipeline_parallel=1, data_parallel=8, global_batch=8, **options))
    reported = training_memory(
        shape.params, SELENE.memory_bytes, data_parallel=8, tensor_parallel=8, shape=shape, **options
    )

    assert reported.activations_bytes == pytest.approx(stepped.activations_bytes, rel=1e-12)
    assert reported.model_states_bytes == pytest.approx(stepped.model_states_bytes, rel=1e-12)
    assert reported.fits == stepped.fits


def test_llama3_405b_fits_on_h100_as_meta_laid_it_out_without_interleaving():
    run = next(run for run in CALIBRATION_RUNS if run.name.startswith("Llama 3"))
    plain = step(run.shape, run.machine, dataclasses.replace(run.layout, interleave=1))
    assert plain.fits
    assert plain.memory_bytes > 70e9


# --- bad layouts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"tensor_parallel": 5, "data_parallel": 4}, "layout.tensor_parallel"),
        ({"pipeline_parallel": 97}, "layout.pipeline_parallel"),
        ({"micro_batch": 3}, "layout.micro_batch"),
        ({"global_batch": 250}, "layout.global_batch"),
        ({"interleave": 13}, "layout.interleave"),
        ({"recomputation": "some"}, "layout.recomputation"),
        ({"zero_stage": 4}, "layout.zero_stage"),
    ],
)
def test_a_layout_that_cannot_run_is_refused_naming_its_field(overrides, argument):
    with pytest.raises(InvalidInput) as refused:
        step(GPT_175B, SELENE, layout(**overrides))
    assert refused.value.argument == argument


def test_a_layout_for_another_cluster_size_is_refused():
    with pytest.raises(InvalidInput) as refused:
        performance.check_layout(GPT_175B, layout(), accelerators=512)
    assert refused.value.argument == "layout"
    assert "256" in refused.value.message
    assert "512" in refused.value.message


# --- layout search ------------------------------------------------------------------------------------------


def test_the_search_takes_metas_kind_of_layout_for_llama3_405b_on_16384_h100():
    # Meta's stack is PyTorch's: FSDP without resharding after the forward pass, accumulating whole
    # gradients over the micro-batches of an interleaved pipeline (ZeRO 1 in the model's terms), tensor
    # parallelism in a node (Dubey et al. 2024, §3.3.2), what torchtitan runs. Meta's own split, PP 16 x DP
    # 128, counts 1% over 80 GB in the model (which a run given whole may be: it published its step), so
    # the search takes the next pipeline, PP 32, whose step is within 10% of Meta's published 6.72 s.
    found = performance.search(
        LLAMA3_405B, LLAMA3_CLUSTER, 16_384, global_batch=2048, framework=FRAMEWORKS["torchtitan"]
    )
    best = found.best.layout
    assert (best.tensor_parallel, best.pipeline_parallel, best.data_parallel) == (8, 32, 64)
    assert (best.zero_stage, best.recomputation) == (1, "none")
    assert found.best.seconds == pytest.approx(6.72, rel=0.1)
    meta = dataclasses.replace(best, pipeline_parallel=16, data_parallel=128, interleave=8)
    counted = step(LLAMA3_405B, LLAMA3_CLUSTER, meta, framework=FRAMEWORKS["torchtitan"])
    assert 1.0 < counted.memory_bytes / LLAMA3_CLUSTER.memory_bytes < 1.02
    assert found.best.fits
    assert found.evaluated > 500  # ZeRO 1-3 only: fewer than the generic search's
    assert found.fitting < found.evaluated
    # Alternatives are slower, each another split of the model.
    splits = {(a.layout.tensor_parallel, a.layout.pipeline_parallel) for a in found.alternatives}
    assert len(splits) == len(found.alternatives)
    assert all(a.seconds >= found.best.seconds for a in found.alternatives)


def test_the_search_keeps_the_fields_it_is_given():
    found = performance.search(
        GPT_175B, SELENE, 64, global_batch=64, fixed={"tensor_parallel": 8, "recomputation": "full"}
    )
    assert found.best.layout.tensor_parallel == 8
    assert found.best.layout.recomputation == "full"
    assert found.best.layout.pipeline_parallel * found.best.layout.data_parallel == 8


def test_a_search_asked_again_is_remembered_and_the_same_as_searching_afresh():
    fixed = {"tensor_parallel": 8, "recomputation": "full"}
    first = performance.search(GPT_175B, SELENE, 64, global_batch=64, fixed=fixed)
    # Remembered: the fixed fields in another order are the same question.
    again = performance.search(GPT_175B, SELENE, 64, global_batch=64, fixed=dict(reversed(fixed.items())))
    assert again is first
    afresh = performance._search.__wrapped__(
        GPT_175B,
        SELENE,
        64,
        global_batch=64,
        fixed_fields=tuple(sorted(fixed.items())),
        precision="bf16",
        optimizer="adam",
        calibration=performance.CALIBRATION,
        framework=GENERIC,
    )
    assert afresh == first
    assert afresh is not first
    # Another question is another answer.
    assert performance.search(GPT_175B, SELENE, 64, global_batch=128, fixed=fixed) != first


def test_the_search_refuses_when_nothing_fits_and_says_what_would():
    with pytest.raises(InvalidInput) as refused:
        performance.search(GPT_175B, SELENE, 8, global_batch=8)
    assert refused.value.argument == "layout"
    assert "model states alone take" in refused.value.message


@pytest.mark.parametrize(
    ("fixed", "argument", "says"),
    [
        ({"tensor_parallel": 3}, "layout.tensor_parallel", "must divide the accelerators (64)"),
        ({"tensor_parallel": 5}, "layout.tensor_parallel", "1, 2, 3, 4, 6, 8"),
        ({"pipeline_parallel": 128}, "layout.pipeline_parallel", "cannot exceed the layers (96)"),
        ({"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 4}, "layout", "= 128 must divide"),
        (
            {"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 4, "context_parallel": 1},
            "layout",
            "= 128 must equal",
        ),
        ({"data_parallel": 8, "micro_batch": 3}, "layout.micro_batch", "1, 2, 4, 8"),
        ({"data_parallel": 8, "global_batch": 12}, "layout.global_batch", "multiple of data_parallel"),
        ({"pipeline_parallel": 8, "interleave": 13}, "layout.interleave", "layers per stage (12"),
        ({"context_parallel": 3}, "layout.context_parallel", "must divide the accelerators"),
    ],
)
def test_the_search_refuses_fixed_fields_no_layout_can_have(fixed, argument, says):
    with pytest.raises(InvalidInput) as refused:
        performance.search(GPT_175B, SELENE, 64, global_batch=64, fixed=fixed)
    assert refused.value.argument == argument
    assert says in refused.value.message


def test_fixed_fields_that_split_nothing_together_are_refused_saying_why():
    with pytest.raises(InvalidInput) as refused:
        performance.search(GPT_175B, SELENE, 64, global_batch=64, fixed={"micro_batch": 128})
    assert refused.value.argument == "layout"
    assert "micro-batch must divide" in refused.value.message


def test_a_pipeline_with_many_spare_layer_slots_still_holds_a_layer_on_its_first_stage():
    """75 layers on 34 stages leave 27 of the 102 slots spare: more than the first and last stages can give
    up, so they keep a layer each and the activations stay positive (they once went negative, and a layout
    that needs 730 GB of model states was taken to fit)."""
    shape = ModelShape(layers=75, d_model=1024, heads=8, sequence_length=512)
    layout = performance.Layout(
        tensor_parallel=1, pipeline_parallel=34, data_parallel=1, micro_batch=1, global_batch=34
    )
    machine = performance.Machine(
        peak_flops_per_second=312e12,
        memory_bytes=80e9,
        memory_bandwidth_bytes_per_second=2e12,
        accelerators_per_node=8,
        scale_up_bytes_per_second=300e9,
        scale_out_bytes_per_second=25e9,
    )
    step = performance.step(shape, machine, layout)
    assert step.activations_bytes > 0
    assert step.memory_bytes > step.model_states_bytes


def test_tensor_parallelism_past_the_kv_heads_replicates_them_and_other_degrees_are_refused():
    # A multi-query Llama 3 405B (one K/V head) runs at t = 8: Megatron replicates the head on every rank.
    multi_query = dataclasses.replace(LLAMA3_405B, kv_heads=1)
    found = performance.search(
        multi_query, LLAMA3_CLUSTER, 512, global_batch=512, fixed={"tensor_parallel": 8}
    )
    assert found.best.layout.tensor_parallel == 8
    with pytest.raises(InvalidInput, match="divide, or be a multiple of, the key/value heads"):
        performance.search(
            dataclasses.replace(LLAMA3_405B, heads=96, kv_heads=3, d_model=12288),
            LLAMA3_CLUSTER,
            512,
            global_batch=512,
            fixed={"tensor_parallel": 8},
        )


def test_torchtitan_keeps_half_a_layers_tensors_under_selective_recomputation_and_fp32_logits():
    # Its per-op policy keeps about half a block's tensors (the rest redone), and its loss holds about 10
    # bytes a logit where Megatron's fused cross-entropy holds 4 (frameworks.py).
    shape = ModelShape(layers=4, d_model=1024, heads=8, sequence_length=2048, vocabulary=32_000)
    one_stage = layout(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=1, recomputation="selective"
    )
    megatron = step(shape, SELENE, one_stage, framework=FRAMEWORKS["megatron-core"]).activations_bytes
    titan = step(shape, SELENE, one_stage, framework=FRAMEWORKS["torchtitan"]).activations_bytes
    logits = 2048 * 32_000
    assert titan == pytest.approx(0.5 * (megatron - 4 * logits) + 10 * logits, rel=1e-12)
