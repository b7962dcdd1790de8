"""The built-in hardware catalog: what it holds, and loading it into the database again and again."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from service.data import catalog
from service.data.catalog import builtin_hardware
from service.data.models import HardwarePrice, HardwareProfile
from service.services.catalog import load_builtin_hardware
from tests.builders import hardware_profile

# ../shared/reference/hardware.md, "Accelerators (per device)", transcribed independently of hardware.json:
# slug: (FP32, TF32, BF16, FP16, FP8 dense TFLOP/s; memory GB; memory TB/s; scale-up GB/s bidir.; TDP W)
SOURCE_TABLE = {
    "v100-sxm2-32gb": (15.7, None, None, 125, None, 32, 0.9, 300, 300),
    "a100-40gb": (19.5, 156, 312, 312, None, 40, 1.555, 600, 400),
    "a100-80gb": (19.5, 156, 312, 312, None, 80, 2.039, 600, 400),
    "h100-sxm": (67, 494.7, 989.4, 989.4, 1978.9, 80, 3.35, 900, 700),
    "h100-pcie": (51, 378, 756, 756, 1513, 80, 2.0, 600, 350),
    "h200": (67, 494.7, 989.4, 989.4, 1978.9, 141, 4.8, 900, 700),
    "b200": (75, 1100, 2250, 2250, 4500, 180, 7.7, 1800, 1000),
    "gb200": (80, 1250, 2500, 2500, 5000, 186, 8.0, 1800, 1200),
    "l4": (30.3, 60, 121, 121, 242.5, 24, 0.30, None, 72),
    "l40s": (91.6, 183, 362, 362, 733, 48, 0.864, None, 350),
    "mi250x": (95.7, None, 383, 383, None, 128, 3.2, 800, 500),
    "mi300x": (163.4, 653.7, 1307.4, 1307.4, 2614.9, 192, 5.3, 896, 750),
    "mi325x": (163.4, 653.7, 1307.4, 1307.4, 2614.9, 256, 6.0, 896, 1000),
    "tpu-v4": (None, None, 275, None, None, 32, 1.2, None, None),
    "tpu-v5e": (None, None, 197, None, None, 16, 0.819, 400, None),
    "tpu-v5p": (None, None, 459, None, None, 95, 2.765, 600, None),
    "tpu-v6e": (None, None, 918, None, None, 32, 1.638, 800, None),
    "gaudi3": (None, None, 1835, None, 1835, 128, 3.67, 1200, 900),
}
CLUSTER_FIGURES = (
    "accelerators_per_node",
    "scale_up_bandwidth_bytes_per_second",
    "scale_out_bandwidth_bytes_per_second",
    "failures_per_accelerator_hour",
)
# "On-demand prices per accelerator-hour", the offers the catalog quotes (USD).
SOURCE_PRICES = {
    "a100-40gb": "2.74",
    "a100-80gb": "2.79",
    "h100-sxm": "6.88",
    "h200": "7.91",
    "b200": "14.24",
    "gb200": "16.00",  # Oracle OCI BM.GPU.GB200.4, per GPU-hour (2026-09)
    "mi300x": "6.00",  # Oracle OCI BM.GPU.MI300X.8, per GPU-hour; Azure ND MI300X v5 48.00 / 8 (2026-09)
    "tpu-v5e": "1.20",
    "tpu-v5p": "4.20",
    "tpu-v6e": "2.70",
}

# ../shared/reference/distributed-training.md, "Clusters", and the datasheets each entry names: accelerators
# per scale-up domain, scale-up and scale-out bytes/s per accelerator in one direction, failures per hour.
CLUSTER_TABLE = {
    "v100-sxm2-32gb": (8, 150e9, 6.25e9, None),  # DGX-1: 4x 100 Gb/s EDR for 8 GPUs
    "a100-80gb": (8, 300e9, 25e9, None),  # DGX A100: NVLink 3, one 200 Gb/s HDR NIC per GPU
    "h100-sxm": (8, 450e9, 50e9, 1.97e-5),  # DGX H100: NVLink 4, one 400 Gb/s NDR NIC per GPU; Llama 3
    "h100-pcie": (8, 64e9, None, None),  # PCIe Gen5 x16
    "b200": (8, 900e9, 50e9, None),  # DGX B200: NVLink 5, one 400 Gb/s ConnectX-7 per GPU
    "mi300x": (8, 448e9, 50e9, None),  # 896 GB/s aggregate over 7 links, bidirectional
    "tpu-v5p": (6144, 600e9, 6.25e9, None),  # 1200 GB/s bidirectional ICI, 50 Gb/s DCN per chip
    "gaudi3": (8, 525e9, 75e9, None),  # 21 and 3 of 24 200 GbE ports
}


def as_table_row(spec) -> tuple:
    def tflops(precision):
        value = spec.peak_flops.get(precision)
        return None if value is None else value / 1e12

    link = spec.interconnect_bandwidth_bytes_per_second
    return (
        *(tflops(p) for p in ("fp32", "tf32", "bf16", "fp16", "fp8")),
        spec.memory_bytes / 1e9,
        spec.memory_bandwidth_bytes_per_second / 1e12,
        None if link is None else link / 1e9,
        spec.tdp_watts,
    )


def test_the_catalog_matches_its_source_table_figure_for_figure():
    specs = {spec.slug: spec for spec in builtin_hardware()}
    assert set(specs) == set(SOURCE_TABLE)
    for slug, expected in SOURCE_TABLE.items():
        actual = as_table_row(specs[slug])
        assert [value is None for value in actual] == [value is None for value in expected], slug
        present = [(a, e) for a, e in zip(actual, expected, strict=True) if e is not None]
        assert [a for a, _ in present] == pytest.approx([e for _, e in present], rel=1e-12), slug


def test_every_profile_and_price_names_its_source_and_prices_are_dated():
    for spec in builtin_hardware():
        assert spec.source.strip(), spec.slug
        if spec.price is not None:
            assert spec.price.source.strip(), spec.slug
            assert spec.price.currency == "USD"
            assert spec.price.as_of[:4] in ("2025", "2026"), spec.slug
    prices = {spec.slug: str(spec.price.price_per_hour) for spec in builtin_hardware() if spec.price}
    assert prices == SOURCE_PRICES


def test_unit_conversion_is_exact():
    h100 = next(spec for spec in builtin_hardware() if spec.slug == "h100-sxm")
    assert h100.peak_flops["bf16"] == 989_400_000_000_000.0
    assert h100.peak_flops["tf32"] == 494_700_000_000_000.0
    assert h100.memory_bandwidth_bytes_per_second == 3_350_000_000_000


def test_the_cluster_figures_of_reference_systems_are_converted_to_bytes_per_second_per_direction():
    specs = {spec.slug: spec for spec in builtin_hardware()}
    for slug, expected in CLUSTER_TABLE.items():
        spec = specs[slug]
        assert (
            spec.accelerators_per_node,
            spec.scale_up_bandwidth_bytes_per_second,
            spec.scale_out_bandwidth_bytes_per_second,
            spec.failures_per_accelerator_hour,
        ) == expected, slug


def test_llama_3s_failure_rate_is_its_unexpected_interruptions_per_gpu_hour():
    h100 = next(spec for spec in builtin_hardware() if spec.slug == "h100-sxm")
    assert h100.failures_per_accelerator_hour == pytest.approx(419 / (54 * 24 * 16_384), rel=2e-3)


def test_every_cluster_figure_is_plausible_and_explained_in_the_note():
    for spec in builtin_hardware():
        up, out = spec.scale_up_bandwidth_bytes_per_second, spec.scale_out_bandwidth_bytes_per_second
        assert spec.accelerators_per_node is not None, spec.slug
        assert up is not None, spec.slug
        assert "Cluster:" in (spec.note or ""), spec.slug
        assert 1 <= spec.accelerators_per_node <= 10_000, spec.slug
        # One direction of a link is at most the bidirectional total that vendors quote.
        bidirectional = spec.interconnect_bandwidth_bytes_per_second
        assert bidirectional is None or up <= bidirectional, spec.slug
        assert out is None or out < up, spec.slug


def count(session, model) -> int:
    return session.scalar(select(func.count()).select_from(model))


def test_loading_creates_every_builtin_profile_with_its_current_price(session):
    load = load_builtin_hardware(session)

    assert sorted(load.created) == sorted(SOURCE_TABLE)
    h100 = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == "h100-sxm")).one()
    assert h100.built_in
    assert h100.peak_flops == {
        "fp32": 67e12,
        "tf32": 494.7e12,
        "bf16": 989.4e12,
        "fp16": 989.4e12,
        "fp8": 1978.9e12,
    }
    assert [(p.price_per_hour, p.currency, p.as_of) for p in h100.prices] == [
        (Decimal("6.88"), "USD", "2026")
    ]
    assert count(session, HardwarePrice) == len(SOURCE_PRICES)


def test_loading_again_changes_nothing(session):
    load_builtin_hardware(session)
    versions = dict(session.execute(select(HardwareProfile.slug, HardwareProfile.version)).all())

    again = load_builtin_hardware(session)

    assert again.created == again.updated == again.repriced == []
    assert sorted(again.unchanged) == sorted(SOURCE_TABLE)
    assert count(session, HardwareProfile) == len(SOURCE_TABLE)
    assert count(session, HardwarePrice) == len(SOURCE_PRICES)
    assert dict(session.execute(select(HardwareProfile.slug, HardwareProfile.version)).all()) == versions


def with_changed_h100(monkeypatch, **changes):
    specs = tuple(
        dataclasses.replace(spec, **changes) if spec.slug == "h100-sxm" else spec
        for spec in builtin_hardware()
    )
    monkeypatch.setattr("service.services.catalog.builtin_hardware", lambda: specs)


def test_a_new_builtin_price_is_added_to_the_history_and_the_old_one_kept(session, monkeypatch):
    load_builtin_hardware(session)
    old = next(spec for spec in catalog.builtin_hardware() if spec.slug == "h100-sxm").price
    with_changed_h100(
        monkeypatch, price=dataclasses.replace(old, price_per_hour=Decimal("5.50"), as_of="2026-12")
    )

    load = load_builtin_hardware(session)

    assert load.repriced == ["h100-sxm"]
    h100 = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == "h100-sxm")).one()
    assert [p.price_per_hour for p in h100.prices] == [Decimal("6.88"), Decimal("5.50")]


def test_a_changed_builtin_figure_updates_the_profile_and_its_version(session, monkeypatch):
    load_builtin_hardware(session)
    with_changed_h100(monkeypatch, tdp_watts=650)

    load = load_builtin_hardware(session)

    assert load.updated == ["h100-sxm"]
    h100 = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == "h100-sxm")).one()
    assert (h100.tdp_watts, h100.version) == (650, 2)


def test_built_in_profiles_stored_before_the_cluster_figures_get_them_at_the_next_load(session):
    """Migration 0008 leaves them NULL; `flask setup` loads the catalog right after migrating."""
    load_builtin_hardware(session)
    h100 = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == "h100-sxm")).one()
    for name in CLUSTER_FIGURES:
        setattr(h100, name, None)
    session.commit()

    load = load_builtin_hardware(session)

    assert load.updated == ["h100-sxm"]
    assert tuple(getattr(h100, name) for name in CLUSTER_FIGURES) == CLUSTER_TABLE["h100-sxm"]


def test_a_custom_profile_that_took_a_builtin_slug_is_left_alone(session):
    session.add(hardware_profile(slug="l4", name="Our L4"))
    session.commit()

    load = load_builtin_hardware(session)

    assert load.skipped == ["l4"]
    assert session.scalars(select(HardwareProfile.name).where(HardwareProfile.slug == "l4")).one() == "Our L4"


def test_the_setup_command_migrates_and_loads_and_can_be_run_again(make_app, empty_database_url):
    runner = make_app(empty_database_url).test_cli_runner()

    first = runner.invoke(args=["setup"])
    second = runner.invoke(args=["setup"])

    assert first.exit_code == 0, first.output
    assert "18 created" in first.output
    assert second.exit_code == 0, second.output
    assert "0 created, 0 updated, 0 repriced, 18 unchanged" in second.output
