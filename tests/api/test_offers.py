"""/v1/offers over HTTP: the four pricings, their terms, the price history, and the SkyPilot import."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import func, select

from service.data.catalog import sample_offers
from service.data.models import Offer, OfferPrice
from service.schemas.offers import OfferSchema
from service.services.catalog import load_builtin_hardware, load_sample_offers
from tests.problems import assert_problem

OMIT = object()
# Rows of SkyPilot's catalogs/v8/aws/vms.csv (@00148f2, docs/research/energy-and-offers.md 4.2), with a CPU
# row, an accelerator no profile has, and a row whose spot price is the on-demand one (no spot capacity).
AWS_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
    "AvailabilityZone,Arch"
)
AWS_ROWS = [
    "p5.48xlarge,H100,8.0,192.0,2048.0,\"{'Gpus': [{'Name': 'H100'}]}\",55.04,11.2543,us-east-2,use2-az1,x86",
    "p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,25.7522,us-east-1,use1-az5,x86_64",
    "p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,55.04,us-east-1,use1-az6,x86_64",
    "p5.4xlarge,H100,1.0,16.0,256.0,,6.88,,us-east-1,use1-az5,x86_64",
    "m7i.large,,,2.0,8.0,,0.1008,0.0389,us-east-1,use1-az1,x86_64",
    "g6.xlarge,L4,1.0,4.0,16.0,,0.8048,0.3155,us-east-1,use1-az1,x86_64",
    "p5e.48xlarge,H200,8.0,192.0,2048.0,,,18.7359,us-east-2,use2-az3,x86_64",
    "dl1.24xlarge,Gaudi HL-205,8.0,96.0,768.0,,13.10904,3.9327,us-east-1,use1-az2,x86_64",
]
# GCP's column order differs; a TPU slice is priced whole, a GPU apart from its host VM (section 4.1).
GCP_CATALOG = "\n".join(
    [
        "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice",
        ",,,tpu-v6e-8,1,tpu-v6e-8,us-central1,us-central1-a,21.6,4.35368",
        ",,,tpu-v5p-12288,1,tpu-v5p-12288,us-central1,us-central1-a,25804.8,",
        ",,,H100,1,,us-central1,us-central1-a,9.79,2.25",
        ",,,tpu-v5p-8,1,tpu-v5p-8,europe-west4,europe-west4-b,700.0,700.0",
    ]
)


@pytest.fixture(autouse=True)
def catalog(session):
    load_builtin_hardware(session)


def offer(**overrides) -> dict:
    body = {
        "slug": "lambda-h100",
        "hardware": "h100-sxm",
        "pricing": "on_demand",
        "provider": "lambda",
        "region": "us-south-1",
        "instance_type": "gpu_8x_h100_sxm5",
        "accelerators_per_instance": 8,
        "source": "lambda.ai pricing page",
        "price_per_hour": "3.99",
        "currency": "USD",
        "price_as_of": "2026-09",
        **overrides,
    }
    return {name: value for name, value in body.items() if value is not OMIT}


def create(client, **overrides):
    response = client.post("/v1/offers", json=offer(**overrides))
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def aws_catalog(*rows: str) -> str:
    return "\n".join([AWS_HEADER, *(rows or AWS_ROWS)]) + "\n"


def import_aws(client, **fields):
    body = {
        "catalog": aws_catalog(),
        "provider": "aws",
        "source": "skypilot-catalog v8 aws @00148f2",
        **fields,
    }
    response = client.post("/v1/offers/import", json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_an_on_demand_offer_is_stored_with_its_price_and_read_back(client):
    created = create(client)
    assert created["hardware"] == "h100-sxm"
    assert created["price_per_hour"] == "3.99"
    assert created["price_effective_at"] is not None
    response = client.get("/v1/offers/lambda-h100")
    assert response.status_code == 200
    assert response.get_json() == created
    assert response.headers["ETag"]


@pytest.mark.parametrize(
    ("pricing", "field", "value"),
    [
        ("reserved", "term_days", 365),
        ("spot", "preemptions_per_instance_hour", 1.07e-4),
        ("owned", "price_per_kwh", "0.08"),
    ],
)
def test_each_pricing_requires_its_own_term_and_refuses_the_others(client, pricing, field, value):
    terms = {
        "reserved": {"term_days": 365},
        "spot": {"preemptions_per_instance_hour": 1e-4, "preemptions_source": "x"},
        "owned": {"price_per_kwh": "0.08"},
    }
    body = assert_problem(client.post("/v1/offers", json=offer(pricing=pricing)), 422)
    assert field in str(body["errors"])
    assert_problem(client.post("/v1/offers", json=offer(**{field: value})), 422)  # on demand has none
    created = create(client, slug=f"ours-{pricing.replace('_', '-')}", pricing=pricing, **terms[pricing])
    assert created["pricing"] == pricing


def test_a_spot_rate_needs_its_source(client):
    body = assert_problem(
        client.post("/v1/offers", json=offer(pricing="spot", preemptions_per_instance_hour=1e-4)), 422
    )
    assert "preemptions_source" in str(body["errors"])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hardware", "no-such-gpu"),
        ("price_per_hour", "-1"),
        ("currency", "usd"),
        ("pue", 0.9),
        ("provider", "AWS Cloud"),
        ("accelerators_per_instance", 0),
    ],
)
def test_bad_fields_are_422_naming_the_field_and_store_nothing(client, session, field, value):
    body = assert_problem(client.post("/v1/offers", json=offer(**{field: value})), 422)
    assert field in str(body["errors"]) or field in body.get("detail", "")
    assert session.scalar(select(func.count()).select_from(Offer)) == 0


def test_a_taken_slug_is_409(client):
    create(client)
    assert_problem(client.post("/v1/offers", json=offer()), 409)


def test_a_new_price_joins_the_history_and_the_old_one_stays(client):
    created = create(client)
    response = client.patch(
        "/v1/offers/lambda-h100",
        json={"price_per_hour": "2.99", "currency": "USD"},
        headers={"If-Match": client.get("/v1/offers/lambda-h100").headers["ETag"]},
    )
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["price_per_hour"] == "2.99"
    history = client.get("/v1/offers/lambda-h100/prices").get_json()["items"]
    assert [item["price_per_hour"] for item in history] == ["2.99", "3.99"]
    assert created["price_per_hour"] == "3.99"


def test_a_patch_cannot_give_another_pricings_terms(client):
    create(client)
    etag = client.get("/v1/offers/lambda-h100").headers["ETag"]
    body = assert_problem(
        client.patch("/v1/offers/lambda-h100", json={"term_days": 30}, headers={"If-Match": etag}), 422
    )
    assert "term_days" in str(body)


def test_a_patch_without_if_match_is_428_and_a_stale_one_412(client):
    create(client)
    assert_problem(client.patch("/v1/offers/lambda-h100", json={"note": "x"}), 428)
    assert_problem(
        client.patch("/v1/offers/lambda-h100", json={"note": "x"}, headers={"If-Match": '"99"'}), 412
    )


def test_offers_are_filtered_by_hardware_provider_region_and_pricing(client):
    create(client)
    create(
        client,
        slug="ours-b200",
        hardware="b200",
        provider="ours",
        region=OMIT,
        pricing="owned",
        price_per_kwh="0.08",
    )
    by = lambda query: [item["slug"] for item in client.get(f"/v1/offers?{query}").get_json()["items"]]  # noqa: E731
    assert by("hardware=b200") == ["ours-b200"]
    assert by("provider=lambda") == ["lambda-h100"]
    assert by("pricing=owned,on_demand") == ["ours-b200", "lambda-h100"]
    assert by("region=us-south-1") == ["lambda-h100"]


def test_a_deleted_offer_is_gone_with_its_prices(client, session):
    create(client)
    etag = client.get("/v1/offers/lambda-h100").headers["ETag"]
    assert client.delete("/v1/offers/lambda-h100", headers={"If-Match": etag}).status_code == 204
    assert client.get("/v1/offers/lambda-h100").status_code == 404
    assert session.scalar(select(func.count()).select_from(OfferPrice)) == 0


def test_only_admins_write_offers(client, app, issue_key):
    planner = app.test_client()
    planner.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {issue_key('planner', 'acme')}"
    assert_problem(planner.post("/v1/offers", json=offer()), 403)
    create(client)
    assert planner.get("/v1/offers/lambda-h100").status_code == 200


# --- The catalog import -------------------------------------------------------------------------------------


def test_a_skypilot_aws_catalog_imports_on_demand_per_region_and_spot_per_zone(client):
    report = import_aws(
        client,
        spot_preemptions_per_instance_hour=1.07e-4,
        spot_preemptions_source="AWS Spot Instance Advisor, 5-10% bucket",
    )
    assert set(report["created"]) == {
        "aws-p5-48xlarge-us-east-1",
        "aws-p5-48xlarge-us-east-2",
        "aws-p5-48xlarge-use1-az5-spot",
        "aws-p5-48xlarge-use2-az1-spot",
        "aws-p5-4xlarge-us-east-1",
        "aws-p5e-48xlarge-use2-az3-spot",
        "aws-g6-xlarge-us-east-1",
        "aws-g6-xlarge-use1-az1-spot",
    }
    assert report["rows"] == len(AWS_ROWS)
    assert report["without_accelerator"] == 1
    reasons = {row["accelerator"]: row["reason"] for row in report["refused"]}
    assert "no hardware profile for accelerator 'Gaudi HL-205'" in reasons["Gaudi HL-205"]
    assert reasons["H200"] == "no on-demand price"
    assert report["refused_count"] == len(report["refused"]) == 2
    spot = client.get("/v1/offers/aws-p5-48xlarge-use2-az1-spot").get_json()
    assert spot["price_per_hour"] == "1.406788"  # 11.2543 / 8
    assert spot["pricing"] == "spot"
    assert spot["availability_zone"] == "use2-az1"
    assert spot["preemptions_per_instance_hour"] == 1.07e-4
    on_demand = client.get("/v1/offers/aws-p5-48xlarge-us-east-1").get_json()
    assert on_demand["price_per_hour"] == "6.88"
    assert on_demand["price_source"] == "skypilot-catalog v8 aws @00148f2"
    assert on_demand["accelerators_per_instance"] == 8


def test_the_import_creates_exactly_the_offers_it_reports(client):
    report = import_aws(client, spot_preemptions_per_instance_hour=1e-4, spot_preemptions_source="x")
    stored = {item["slug"] for item in client.get("/v1/offers?limit=100").get_json()["items"]}
    assert stored == set(report["created"])
    assert "aws-p5-48xlarge-use1-az6-spot" not in stored  # its spot price is the on-demand one


def test_spot_rows_without_a_preemption_rate_are_refused_with_the_reason(client):
    report = import_aws(client)
    assert not any(slug.endswith("-spot") for slug in report["created"])
    reasons = [row["reason"] for row in report["refused"]]
    assert (
        reasons.count("a spot price without a preemption rate: give spot_preemptions_per_instance_hour") == 4
    )


def test_importing_again_changes_only_the_prices_that_moved(client):
    import_aws(client)
    again = import_aws(client)
    assert again["created"] == []
    assert again["updated"] == []
    assert again["unchanged"] == 4
    cheaper = aws_catalog(AWS_ROWS[0].replace("55.04", "44.00", 1), *AWS_ROWS[1:])
    moved = import_aws(client, catalog=cheaper)
    assert moved["updated"] == ["aws-p5-48xlarge-us-east-2"]
    history = client.get("/v1/offers/aws-p5-48xlarge-us-east-2/prices").get_json()["items"]
    assert [item["price_per_hour"] for item in history] == ["5.50", "6.88"]


def test_a_dry_run_reports_and_stores_nothing(client, session):
    report = import_aws(client, dry_run=True)
    assert report["dry_run"] is True
    assert len(report["created"]) == 4
    assert session.scalar(select(func.count()).select_from(Offer)) == 0


def test_the_request_maps_names_the_built_in_mapping_lacks(client):
    report = import_aws(client, accelerators={"Gaudi HL-205": "gaudi3"})
    assert "aws-dl1-24xlarge-us-east-1" in report["created"]


def test_gcp_tpu_slices_are_priced_per_chip_and_gpus_without_their_host_are_refused(client):
    body = {"catalog": GCP_CATALOG, "provider": "gcp", "source": "skypilot-catalog v8 gcp @006059e"}
    report = client.post("/v1/offers/import", json=body).get_json()
    assert sorted(report["created"]) == ["gcp-tpu-v5p-12288-us-central1", "gcp-tpu-v6e-8-us-central1"]
    v5p = client.get("/v1/offers/gcp-tpu-v5p-12288-us-central1").get_json()
    assert Decimal(v5p["price_per_hour"]) == Decimal("4.2")  # 25 804.8 for 6 144 chips
    assert v5p["accelerators_per_instance"] == 6144
    assert client.get("/v1/offers/gcp-tpu-v6e-8-us-central1").get_json()["price_per_hour"] == "2.70"
    reasons = {row["accelerator"]: row["reason"] for row in report["refused"]}
    assert "priced apart from its host VM" in reasons["H100"]
    assert "placeholder" in reasons["tpu-v5p-8"]


def test_a_file_without_the_catalogs_columns_is_422_naming_the_catalog(client):
    body = {"catalog": "name,price\nx,1\n", "provider": "aws", "source": "x"}
    problem = assert_problem(client.post("/v1/offers/import", json=body), 422)
    assert "catalog" in str(problem["errors"])


def test_the_catalog_may_come_as_a_multipart_file(client):
    data = {
        "catalog": (__import__("io").BytesIO(aws_catalog().encode()), "vms.csv"),
        "provider": "aws",
        "source": "x",
    }
    response = client.post("/v1/offers/import", data=data, content_type="multipart/form-data")
    assert response.status_code == 200, response.get_json()
    assert len(response.get_json()["created"]) == 4


def test_the_sample_offers_are_valid_requests_with_their_sources(client):
    for entry in sample_offers():
        assert OfferSchema().validate(entry) == {}, entry["slug"]
        assert entry["source"]
        assert entry["price_as_of"]


def test_setup_loads_the_sample_into_a_service_without_offers_only(client, session):
    created = load_sample_offers(session)
    assert sorted(created) == sorted(entry["slug"] for entry in sample_offers())
    assert {entry["pricing"] for entry in sample_offers()} == {"on_demand", "reserved", "spot", "owned"}
    assert load_sample_offers(session) == []
    listed = client.get("/v1/offers?limit=100").get_json()["items"]
    assert len(listed) == len(created)
    assert all(offer["price_as_of"] and offer["price_source"] for offer in listed)
