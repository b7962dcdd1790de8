"""Each term of the cluster model's step on its own, against a calculation by hand.

The rates are round numbers so the arithmetic can be followed: a peak of 1e15 FLOP/s at efficiency 0.5
(5e14 achieved) with 1 µs per GEMM kernel, 1e12 bytes/s of HBM, nodes of 8 with 1e11 bytes/s inside and
1e10 between them (latencies 3 µs and 10 µs, parallel_terms'). The shapes are small: 1024 wide, 8 heads of
128, a context of 1024, so one sequence puts T = 1024 rows through every GEMM.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from service.core import parallel_terms as parallel
from service.core import step_terms as terms
from service.core.shape import ModelShape

RATES = terms.Rates(
    peak_flops_per_second=1e15,
    attention_flops_per_second=1e15,
    matmul_efficiency=0.5,
    kernel_seconds=1e-6,
    memory_bytes_per_second=1e12,
    accelerators_per_node=8.0,
    scale_up_bytes_per_second=1e11,
    scale_out_bytes_per_second=1e10,
    overlap=1.0,
)
# GPT-like: GELU, MLP 4h = 4096; a layer holds 4h² + 8h² = 12 582 912 weights.
DENSE = ModelShape(layers=4, d_model=1024, heads=8, sequence_length=1024)
WITH_VOCABULARY = dataclasses.replace(DENSE, vocabulary=1000)
# Llama-like: 2 K/V heads (K and V 256 wide each), SwiGLU MLP of 2048.
GROUPED = ModelShape(
    layers=2, d_model=1024, heads=8, kv_heads=2, sequence_length=1024, activation="swiglu", ffn=2048
)
# Every layer routed: 16 SwiGLU experts of 512 (3·1024·512 = 1 572 864 weights each), 2 a token.
EXPERTS = dataclasses.replace(GROUPED, kv_heads=None, experts=16, experts_per_token=2, expert_ffn=512)


def layouts(shape: ModelShape = DENSE, **overrides) -> terms.Layouts:
    fields = {
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "data_parallel": 1,
        "context_parallel": 1,
        "micro_batch": 1,
        "global_batch": 1,
        "interleave": 1,
        "sequence_parallel": True,
        "recomputation": 0,
        "zero_stage": 1,
        "flash_attention": True,
        "expert_parallel": 1,
        "expert_overlap": -1,
        "tensor_parallel_overlap": False,
    }
    return terms.Layouts.of(
        shape, {name: np.array([value]) for name, value in {**fields, **overrides}.items()}
    )


def one(values) -> float:
    return float(np.asarray(values).item())


# --- GEMMs --------------------------------------------------------------------------------------------------


def test_a_gemm_takes_its_flops_at_the_efficient_peak_plus_a_fixed_cost():
    # 1e9 / (1e15 · 0.5) + 1e-6 = 2e-6 + 1e-6; at a peak of 5e14: 1e9 / 2.5e14 + 1e-6 = 5e-6.
    assert one(terms.gemm_seconds(np.array([1e9]), RATES)) == pytest.approx(3e-6, rel=1e-12)
    assert one(terms.gemm_seconds(np.array([1e9]), RATES, 5e14)) == pytest.approx(5e-6, rel=1e-12)


def test_a_dense_layers_gemms_are_megatrons_24bsh2_plus_4bs2h_split_t_ways():
    gemms = terms.layer_gemms(DENSE, layouts(tensor_parallel=2), RATES)

    # 2·T = 2048 FLOPs per weight, each GEMM split 2 ways: QKV 2048 · 3h² / 2 = 3 221 225 472, the output
    # projection 2048 · h² / 2 = 1 073 741 824, each MLP matrix 2048 · 4h² / 2 = 4 294 967 296, the scores
    # and the values 2·T·s·a·128 / 2 = 1 073 741 824 each.
    assert one(gemms.qkv_flops) == pytest.approx(3_221_225_472, rel=1e-12)
    assert one(gemms.projection_flops) == pytest.approx(1_073_741_824, rel=1e-12)
    assert one(gemms.mlp_flops) == pytest.approx(8_589_934_592, rel=1e-12)
    assert one(gemms.scores_flops) == one(gemms.values_flops) == pytest.approx(1_073_741_824, rel=1e-12)
    # Sum 15 032 385 536 = (24·T·h² + 4·T²·h)/2; six GEMMs: 15 032 385 536 / 5e14 + 6e-6.
    assert one(gemms.forward_seconds) == pytest.approx(3.6064771072e-5, rel=1e-12)
    # Scores and values: 2 · (1 073 741 824 / 5e14 + 1e-6).
    assert one(gemms.attention_seconds) == pytest.approx(6.294967296e-6, rel=1e-12)


def test_a_mixture_of_experts_mlp_pays_its_router_its_routed_rows_and_a_kernel_per_local_expert():
    gemms = terms.layer_gemms(EXPERTS, layouts(EXPERTS, expert_parallel=4, data_parallel=4), RATES)

    # Router 2·T·h·16 = 33 554 432; an expert row 2·T·h·512·3 = 3 221 225 472, two routed rows.
    assert one(gemms.mlp_flops) == pytest.approx(2 * 3_221_225_472 + 33_554_432, rel=1e-12)
    # MLP: router 33 554 432 / 5e14 + 1e-6, rows 2 · 3 221 225 472 / 5e14, 16/4 = 4 local experts of two
    # kernels each, 8e-6: 2.1952010752e-5. Attention: QKV 2048 · 3h² / 5e14 + 1e-6 = 1.3884901888e-5,
    # projection 5.294967296e-6, scores and values 1.0589934592e-5. Sum 5.1721814528e-5.
    assert one(gemms.forward_seconds) == pytest.approx(5.1721814528e-5, rel=1e-12)


def dense_gemms() -> terms.LayerGemms:
    """DENSE's layer at t = 2, as worked out above."""
    return terms.LayerGemms(
        qkv_flops=np.array([3_221_225_472.0]),
        projection_flops=np.array([1_073_741_824.0]),
        scores_flops=np.array([1_073_741_824.0]),
        values_flops=np.array([1_073_741_824.0]),
        mlp_flops=np.array([8_589_934_592.0]),
        attention_seconds=np.array([6.294967296e-6]),
        forward_seconds=np.array([3.6064771072e-5]),
    )


@pytest.mark.parametrize(
    ("recomputation", "seconds"),
    [
        (0, 3 * 3.6064771072e-5),  # forward + backward (twice the forward)
        (1, 3 * 3.6064771072e-5 + 6.294967296e-6),  # and the scores and values again
        (2, 4 * 3.6064771072e-5),  # and the whole forward again
    ],
)
def test_a_layers_compute_is_forward_and_backward_plus_what_recomputation_repeats(recomputation, seconds):
    x = layouts(tensor_parallel=2, recomputation=recomputation)
    assert one(terms.layer_compute_seconds(dense_gemms(), x)) == pytest.approx(seconds, rel=1e-12)


# --- memory-bound work --------------------------------------------------------------------------------------


def test_element_wise_work_moves_its_passes_over_the_width_and_the_mlp_at_hbm_bandwidth():
    seconds = terms.layer_memory_bound_seconds(DENSE, layouts(tensor_parallel=2), RATES)

    # Width: T·h / 2 (sequence parallel) = 524 288 elements, 15 passes; MLP: T·4h / 2 = 2 097 152, 2 passes
    # (GELU). 2 bytes · (7 864 320 + 4 194 304) = 24 117 248 bytes forward, 2.4117248e-5 s; 3 times
    # that with the backward pass.
    assert one(seconds) == pytest.approx(7.2351744e-5, rel=1e-12)


def test_without_flash_attention_the_scores_are_moved_too_and_selective_recomputation_moves_them_again():
    x = layouts(tensor_parallel=2, flash_attention=False, recomputation=1)
    seconds = terms.layer_memory_bound_seconds(DENSE, x, RATES)

    # Scores b·(a/t)·s·s = 4 194 304 elements, 4.5 passes: 2 · 18 874 368 more bytes, 61 865 984 forward;
    # 3 times that, 1.85597952e-4 s, and selective recomputation's 2 · 4.5 · 4 194 304 bytes = 3.7748736e-5 s.
    assert one(seconds) == pytest.approx(2.23346688e-4, rel=1e-12)


# --- tensor, context and expert parallelism -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "seconds"),
    [
        # 2·T·h = 2 097 152 bytes over 4 ranks in a node. Ring: 2·3/4 · 2 097 152 / 1e11 + 2·3 · 3e-6 =
        # 4.945728e-5; tree: 2 · 2 097 152 / 1e11 + 2·2 · 3e-6 = 5.394304e-5. The ring, 5 times with
        # sequence parallelism (4 all-reduces and the backward's extra gather).
        ({"tensor_parallel": 4}, 5 * 4.945728e-5),
        ({"tensor_parallel": 4, "sequence_parallel": False}, 4 * 4.945728e-5),
        ({"tensor_parallel": 4, "recomputation": 2}, 7 * 4.945728e-5),
        # 16 ranks span two nodes: the network. Ring 2·15/16 · 2 097 152 / 1e10 + 30 · 1e-5 = 6.93216e-4;
        # tree 2 · 2 097 152 / 1e10 + 2·4 · 1e-5 = 4.994304e-4, the cheaper.
        ({"tensor_parallel": 16}, 5 * 4.994304e-4),
        ({"tensor_parallel": 1}, 0.0),
    ],
)
def test_tensor_parallel_collectives_are_ring_or_tree_all_reduces_of_a_layers_activations(overrides, seconds):
    assert one(parallel.tensor_parallel_layer_seconds(DENSE, layouts(**overrides), RATES)) == pytest.approx(
        seconds, rel=1e-12
    )


@pytest.mark.parametrize(
    ("context_parallel", "seconds"),
    [
        (1, 0.0),
        # T = 512 rows; K and V 256 wide each: 2 bytes · 2 · 512 · 256 = 524 288 bytes, from 1 other rank,
        # gathered and their gradients scattered: 2 · 524 288 / 1e11.
        (2, 1.048576e-5),
        # 16 ranks span nodes: T = 64, 65 536 bytes from 15 others, 2 · 15 · 65 536 / 1e10.
        (16, 1.96608e-4),
    ],
)
def test_context_parallelism_exchanges_the_other_chunks_keys_and_values(context_parallel, seconds):
    x = layouts(GROUPED, context_parallel=context_parallel)
    assert one(parallel.context_parallel_layer_seconds(GROUPED, x, RATES)) == pytest.approx(
        seconds, rel=1e-12
    )


@pytest.mark.parametrize(
    ("overrides", "precision", "seconds"),
    [
        # 16 ranks, 8 a node, 2 nodes: a token's 2 experts are on the other node 2·(1 - 1/2²)·1/2 = 0.75
        # times; copied to 2·7/16 = 0.875 ranks of its own. X = T·h · (2 + 2) = 4 194 304 bytes:
        # max(X · 0.75 / 1e10, X · 1.625 / 1e11) = 3.145728e-4, plus 2 · 1e-5; a dispatch and a combine
        # forward and backward: twice.
        ({"expert_parallel": 16, "data_parallel": 16}, "bf16", 6.691456e-4),
        # Dispatched in fp8: X = T·h · 3: 2.359296e-4 + 2e-5, twice.
        ({"expert_parallel": 16, "data_parallel": 16}, "fp8", 5.118592e-4),
        # Full recomputation repeats the forward's two: 3 times.
        ({"expert_parallel": 16, "data_parallel": 16, "recomputation": 2}, "bf16", 1.0037184e-3),
        # 4 ranks in one node: X · 2·3/4 / 1e11 = 6.291456e-5, plus 2 · 3e-6, twice.
        ({"expert_parallel": 4, "data_parallel": 4}, "bf16", 1.3782912e-4),
        ({"expert_parallel": 1}, "bf16", 0.0),
    ],
)
def test_the_expert_all_to_all_sends_each_token_once_to_each_node_its_experts_are_on(
    overrides, precision, seconds
):
    x = layouts(EXPERTS, **overrides)
    assert one(parallel.expert_all_to_all_layer_seconds(EXPERTS, x, RATES, precision)) == pytest.approx(
        seconds, rel=1e-12
    )


def test_a_dense_model_has_no_all_to_all():
    assert parallel.expert_all_to_all_layer_seconds(DENSE, layouts(), RATES, "bf16") == 0.0


@pytest.mark.parametrize(
    ("code", "all_to_all", "expected"),
    [
        # Overlapped, the compute loses 20 of 132 SMs: 1e-3 · 132/112 = 1.1785714e-3, hiding 3e-4 of
        # all-to-all; faster than 1e-3 + 3e-4, so chosen when the layout leaves it open (-1).
        (-1, 3e-4, (1e-3 * 132 / 112, 0.0, True)),
        (0, 3e-4, (1e-3, 3e-4, False)),
        # 1e-5 of all-to-all is cheaper exposed than the SMs' share: not overlapped unless the layout says.
        (-1, 1e-5, (1e-3, 1e-5, False)),
        (1, 1e-5, (1e-3 * 132 / 112, 0.0, True)),
    ],
)
def test_an_overlapped_all_to_all_hides_under_compute_that_runs_on_fewer_sms(code, all_to_all, expected):
    x = layouts(EXPERTS, expert_parallel=4, data_parallel=4, expert_overlap=code)
    compute, exposed, overlapped = parallel.expert_overlap(
        EXPERTS, x, np.array([1e-3]), np.array([all_to_all])
    )
    assert (one(compute), one(exposed), bool(overlapped[0])) == pytest.approx(expected, rel=1e-12)


# --- the output layer and the pipeline ----------------------------------------------------------------------


def test_the_output_layer_runs_the_logits_gemm_and_the_losss_fp32_passes():
    output = terms.output_layer(WITH_VOCABULARY, layouts(WITH_VOCABULARY), RATES)

    # 2·T·h·V = 2 097 152 000 FLOPs, forward and backward: 3 · (2 097 152 000 / 5e14 + 1e-6); three passes of
    # fp32 logits: 3 · 4 · T·V / 1e12.
    assert one(output.forward_flops) == pytest.approx(2_097_152_000, rel=1e-12)
    assert one(output.compute_seconds) == pytest.approx(1.5582912e-5, rel=1e-12)
    assert one(output.memory_bound_seconds) == pytest.approx(1.2288e-5, rel=1e-12)


def test_a_prediction_module_runs_the_output_layer_again_and_its_projection():
    shape = dataclasses.replace(WITH_VOCABULARY, mtp_depth=1)
    output = terms.output_layer(shape, layouts(shape), RATES)

    # Projection 2·T·2h·h = 4 294 967 296 FLOPs: 2 · 1.5582912e-5 + 3 · (4 294 967 296 / 5e14 + 1e-6).
    assert one(output.forward_flops) == pytest.approx(2 * 2_097_152_000 + 4_294_967_296, rel=1e-12)
    assert one(output.compute_seconds) == pytest.approx(5.9935627776e-5, rel=1e-12)
    assert one(output.memory_bound_seconds) == pytest.approx(2 * 1.2288e-5, rel=1e-12)


def layer(compute: float = 1.0) -> parallel.LayerSeconds:
    return parallel.LayerSeconds(
        compute=np.array([compute]),
        memory_bound=np.array([0.25]),
        tensor_parallel=np.array([0.25]),
        context_parallel=np.array([0.0]),
        expert_parallel=0.0,
    )


def output(compute: float) -> terms.OutputLayer:
    return terms.OutputLayer(
        forward_flops=np.array([0.0]),
        compute_seconds=np.array([compute]),
        memory_bound_seconds=np.array([0.0]),
    )


@pytest.mark.parametrize(
    ("output_seconds", "busiest", "stage"),
    [
        # 126 layers on 16 stages: 8 a stage, the 2 spare slots off the first and last (7 each), as Llama 3.
        # A layer takes 1 + 0.25 + 0.25 = 1.5 s: the last stage 7 · 1.5 + 2 = 12.5 s beats a middle 12 s.
        (2.0, 7, (9.0, 1.75, 12.5)),
        # With 0.5 s of output layer it is 11 s: a middle stage's 8 layers set the pace.
        (0.5, 8, (8.0, 2.0, 12.0)),
    ],
)
def test_the_busiest_stage_sets_the_pipelines_pace(output_seconds, busiest, stage):
    shape = dataclasses.replace(DENSE, layers=126)
    stages = parallel.pipeline_stages(
        shape, layouts(shape, pipeline_parallel=16), layer(), output(output_seconds)
    )

    assert (one(stages.layers_per_stage), one(stages.first_stage_layers), one(stages.busiest_layers)) == (
        8,
        7,
        busiest,
    )
    assert (one(stages.compute_seconds), one(stages.memory_bound_seconds), one(stages.seconds)) == (
        pytest.approx(stage, rel=1e-12)
    )


def test_stages_keep_a_layer_each_when_the_spare_slots_outnumber_what_the_ends_can_give_up():
    # 75 layers on 34 stages: 3 a stage, 27 spare; the first keeps max(1, 3 - 14) = 1.
    shape = dataclasses.replace(DENSE, layers=75)
    stages = parallel.pipeline_stages(shape, layouts(shape, pipeline_parallel=34), layer(), output(0.0))
    assert (one(stages.layers_per_stage), one(stages.first_stage_layers)) == (3, 1)


@pytest.mark.parametrize(
    ("overrides", "seconds"),
    [
        # A boundary carries 2·T·h / t = 1 048 576 bytes; t·p = 8 fits a node: 2·v · (1 048 576 / 1e11 + 3e-6)
        # with v = 2.
        ({"tensor_parallel": 2, "pipeline_parallel": 4, "interleave": 2}, 4 * (1.048576e-5 + 3e-6)),
        # t·p = 16 spans nodes: 2 · (1 048 576 / 1e10 + 1e-5).
        ({"tensor_parallel": 2, "pipeline_parallel": 8}, 2 * (1.048576e-4 + 1e-5)),
        ({"tensor_parallel": 2}, 0.0),
    ],
)
def test_pipeline_transfers_send_a_micro_batchs_activations_across_each_boundary_both_ways(
    overrides, seconds
):
    assert one(parallel.pipeline_transfer_seconds(DENSE, layouts(**overrides), RATES)) == pytest.approx(
        seconds, rel=1e-12
    )


def test_the_bubble_is_p_minus_1_over_v_stage_times():
    # (p - 1)/(v·m) of the ideal m · 10 s: 3/2 · 10 s.
    x = layouts(pipeline_parallel=4, interleave=2, global_batch=8)
    assert one(parallel.pipeline_bubble_seconds(x, np.array([10.0]))) == 15.0
    assert one(parallel.pipeline_bubble_seconds(layouts(), np.array([10.0]))) == 0.0


# --- parameters, data parallelism, optimizer ----------------------------------------------------------------


def test_a_device_holds_its_stages_layers_and_its_share_of_the_embeddings_split_t_ways():
    # 4 layers of 12 582 912 and embeddings of 2 · 1000 · 1024 = 2 048 000. On 2 stages, t = 2:
    # (2 · 12 582 912 + 2 048 000 / 2) / 2; on one stage (4 · 12 582 912 + 2 048 000) / 2.
    staged = terms.held_params(
        WITH_VOCABULARY, layouts(tensor_parallel=2, pipeline_parallel=2), np.array([2.0])
    )
    alone = terms.held_params(WITH_VOCABULARY, layouts(tensor_parallel=2), np.array([4.0]))

    assert (one(staged.dense), staged.experts) == (13_094_912, None)
    assert one(alone.dense) == 26_189_824


def test_a_device_holds_its_share_of_the_routed_experts_apart():
    # A layer: attention 4h² = 4 194 304, 16 experts of 1 572 864 = 25 165 824, router h·16 = 16 384. Dense:
    # 2 · (4 194 304 + 16 384); experts 2 · 25 165 824 / 4.
    held = terms.held_params(EXPERTS, layouts(EXPERTS, expert_parallel=4, data_parallel=4), np.array([2.0]))

    assert (one(held.dense), one(held.experts)) == (8_421_376, 12_582_912)


def dense_held() -> terms.HeldParams:
    return terms.HeldParams(dense=np.array([13_094_912.0]), experts=None)


@pytest.mark.parametrize(
    ("zero_stage", "overlap", "seconds"),
    [
        # 2 · 13 094 912 bytes over d = 4; t·p·d = 16 spans nodes, and 8/(t·c) = 4 ranks of the group share a
        # node, whose rings cross the node boundary 4 at once: min(1e11, 4 · 1e10) = 4e10 bytes/s a rank.
        # Ring: 2·3/4 · 26 189 824 / 4e10 + 6 · 1e-5 = 1.0421184e-3 (tree: 1.3494912e-3). The backward pass,
        # 2/3 of the 5e-4 s stage, hides 3.3e-4.
        (1, 1.0, 1.0421184e-3 - 5e-4 * 2 / 3),
        (1, 0.0, 1.0421184e-3),
        # ZeRO-3 gathers 1.5 times that for each of the m = 16/4 = 4 micro-batches, each under 5e-4 s.
        (3, 1.0, 4 * (1.5 * 1.0421184e-3 - 5e-4)),
    ],
)
def test_data_parallel_gradient_traffic_hides_under_the_backward_pass(zero_stage, overlap, seconds):
    x = layouts(
        tensor_parallel=2, pipeline_parallel=2, data_parallel=4, global_batch=16, zero_stage=zero_stage
    )
    rates = dataclasses.replace(RATES, overlap=overlap)
    exposed = parallel.data_parallel_seconds(x, rates, dense_held(), np.array([5e-4]))
    assert one(exposed) == pytest.approx(seconds, rel=1e-12)


def test_a_data_parallel_group_with_one_rank_a_node_runs_at_one_nic():
    # t = 8 fills each node: one rank of the group a node, its ring crossing each boundary once at 1e10.
    # Ring: 2·3/4 · 2 · 13 094 912 / 1e10 + 6 · 1e-5 = 3.9884736e-3.
    x = layouts(tensor_parallel=8, data_parallel=4, global_batch=16, sequence_parallel=True)
    rates = dataclasses.replace(RATES, overlap=0.0)
    exposed = parallel.data_parallel_seconds(x, rates, dense_held(), np.array([5e-4]))
    assert one(exposed) == pytest.approx(3.9884736e-3, rel=1e-12)


def test_experts_gradients_are_reduced_over_the_ranks_that_hold_the_same_experts():
    x = layouts(EXPERTS, data_parallel=8, expert_parallel=4, global_batch=8)
    held = terms.HeldParams(dense=np.array([8_421_376.0]), experts=np.array([12_582_912.0]))
    rates = dataclasses.replace(RATES, overlap=0.0)

    # Inside a node. Dense: 16 842 752 bytes over 8, ring 2·7/8 · 16 842 752 / 1e11 + 14 · 3e-6 =
    # 3.3674816e-4.
    # Experts: 25 165 824 bytes over 8/4 = 2, ring 25 165 824 / 1e11 + 2 · 3e-6 = 2.5765824e-4.
    exposed = parallel.data_parallel_seconds(x, rates, held, np.array([3e-3]))
    assert one(exposed) == pytest.approx(3.3674816e-4 + 2.5765824e-4, rel=1e-12)


@pytest.mark.parametrize(
    ("zero_stage", "seconds"),
    [
        (0, 16 * 13_094_912 / 1e12),  # every rank updates all it holds
        (1, 16 * 13_094_912 / 4 / 1e12),  # its quarter
    ],
)
def test_the_optimizer_reads_and_writes_16_bytes_per_parameter_it_updates(zero_stage, seconds):
    x = layouts(data_parallel=4, zero_stage=zero_stage)
    assert one(terms.optimizer_seconds(x, RATES, dense_held())) == pytest.approx(seconds, rel=1e-12)


def test_the_optimizer_updates_a_shard_of_the_experts_over_their_own_ranks():
    # 8 421 376 / 8 + 12 582 912 / (8/4) = 7 344 128 parameters, 16 bytes each.
    x = layouts(EXPERTS, data_parallel=8, expert_parallel=4)
    held = terms.HeldParams(dense=np.array([8_421_376.0]), experts=np.array([12_582_912.0]))
    assert one(terms.optimizer_seconds(x, RATES, held)) == pytest.approx(1.17506048e-4, rel=1e-12)


# --- FLOPs and memory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recomputation", "hardware_flops"),
    [
        # A layer's forward on both ranks: 2 · 15 032 385 536 = 30 064 771 072; 3 times, 4 layers.
        (0, 3.60777252864e11),
        (1, 3.60777252864e11 + 4 * 2 * 2 * 1_073_741_824),  # the scores and values again
        (2, 4 / 3 * 3.60777252864e11),
    ],
)
def test_model_flops_are_palms_and_hardware_flops_count_what_ran(recomputation, hardware_flops):
    x = layouts(tensor_parallel=2, recomputation=recomputation)
    no_output = terms.OutputLayer(
        forward_flops=np.array([0.0]), compute_seconds=0.0, memory_bound_seconds=np.array([0.0])
    )
    model, ran = terms.step_flops(DENSE, x, dense_gemms(), no_output)

    # PaLM: 6N + 12·L·h·s per token, N = 4 · 12 582 912: (301 989 888 + 50 331 648) · 1024 tokens, which is
    # what ran without recomputation.
    assert one(model) == pytest.approx(3.60777252864e11, rel=1e-12)
    assert one(ran) == pytest.approx(hardware_flops, rel=1e-12)


@pytest.mark.parametrize(
    ("zero_stage", "states"),
    [
        (0, 16 * 13_094_912),
        (1, 4 * 13_094_912 + 12 * 13_094_912 / 4),  # weights and gradients kept, Adam's 12 bytes sharded
        (3, 16 * 13_094_912 / 4),
    ],
)
def test_model_states_are_zeros_split_of_16_bytes_per_parameter(zero_stage, states):
    x = layouts(data_parallel=4, zero_stage=zero_stage)
    assert one(terms.model_states_bytes(x, dense_held(), "bf16", "adam")) == pytest.approx(states, rel=1e-12)


def test_expert_states_are_sharded_over_the_ranks_that_hold_the_same_experts():
    # Held 8 421 376 + 12 582 912; sharded 7 344 128 (as the optimizer's): 4 · 21 004 288 + 12 · 7 344 128.
    x = layouts(EXPERTS, data_parallel=8, expert_parallel=4)
    held = terms.HeldParams(dense=np.array([8_421_376.0]), experts=np.array([12_582_912.0]))
    assert one(terms.model_states_bytes(x, held, "bf16", "adam")) == pytest.approx(172_146_688, rel=1e-12)


@pytest.mark.parametrize(
    ("overrides", "precision", "activations"),
    [
        # s·b·h = 1 048 576. Q, K, V and the projection's input: 1024 + 256 + 256 + 1024 channels at 2
        # bytes, 5 s·b·h inside the blocks; the SwiGLU MLP 6 · 2048 bytes a row; the norms' and blocks'
        # inputs 8 s·b·h (no dropout, so no masks), split by sequence parallelism: 1 048 576 · (8/2 + 5/2) +
        # 1024 · 12 288 / 2 = 13 107 200 a layer, 2 layers.
        ({"tensor_parallel": 2}, "bf16", 2 * 13_107_200),
        # In fp8 the projection's and the down-projection's inputs take a byte: 1 048 576 · (4 + 4/2) +
        # 1024 · 2048 · 5 / 2 = 11 534 336 a layer.
        ({"tensor_parallel": 2}, "fp8", 2 * 11_534_336),
        # Full recomputation keeps each layer's input, 2 · 1 048 576 / 2, and one layer's working set.
        ({"tensor_parallel": 2, "recomputation": 2}, "bf16", 2 * 1_048_576 + 13_107_200),
    ],
)
def test_activations_generalise_korthikantis_table_2_to_grouped_heads_and_swiglu(
    overrides, precision, activations
):
    x = layouts(GROUPED, **overrides)
    assert one(terms.activation_bytes(GROUPED, x, np.array([2.0]), precision)) == pytest.approx(
        activations, rel=1e-12
    )


def test_the_first_stage_holds_the_micro_batches_in_flight_and_a_lone_stage_the_logits():
    # 4 stages, 8 micro-batches, 2 interleaved: 4 · (1 + 3/8) = 5.5 in flight of the 1 layer given.
    piped = layouts(GROUPED, tensor_parallel=2, pipeline_parallel=4, interleave=2, global_batch=8)
    assert one(terms.activation_bytes(GROUPED, piped, np.array([1.0]), "bf16")) == pytest.approx(
        5.5 * 13_107_200, rel=1e-12
    )
    # One stage also holds fp32 logits: 4 · T · 1000 / 2.
    shape = dataclasses.replace(GROUPED, vocabulary=1000)
    alone = layouts(shape, tensor_parallel=2)
    assert one(terms.activation_bytes(shape, alone, np.array([2.0]), "bf16")) == pytest.approx(
        2 * 13_107_200 + 2_048_000, rel=1e-12
    )


def test_more_tensor_parallel_ranks_than_kv_heads_replicate_one_kv_head_on_each():
    # 2 K/V heads of 128 over t = 8: each rank holds one head (1/2 of W_kv), not 1/8 of them.
    gqa = ModelShape(layers=4, d_model=1024, heads=8, kv_heads=2, sequence_length=1024)
    w_kv = 2 * 1024 * 2 * 128
    extra = terms.replicated_kv_weights(gqa, np.array([8.0, 2.0, 1.0]))
    assert list(extra) == pytest.approx([w_kv * (1 / 2 - 1 / 8), 0.0, 0.0])
    x = layouts(gqa, tensor_parallel=8)
    held = terms.held_params(gqa, x, np.array([4.0]))
    assert one(held.dense) == pytest.approx(4 * (gqa.layer_params / 8 + w_kv * (1 / 2 - 1 / 8)))
    gemms = terms.layer_gemms(gqa, x, RATES)
    output = gqa.output_projection_params
    assert one(gemms.qkv_flops) == pytest.approx(
        2 * 1024 * ((gqa.attention_params - output) / 8 + w_kv * (1 / 2 - 1 / 8))
    )
