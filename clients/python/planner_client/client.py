"""A Python client for the Compute Planner API, on `requests`.

    from planner_client import PlannerClient

    planner = PlannerClient("http://127.0.0.1:8000", api_key="cpk_...")  # or PLANNER_URL, PLANNER_API_KEY
    allocation = planner.allocate(pf_days=6000)
    plan = planner.create_plan(organization="acme", pf_days=6000, hardware="h100-sxm", accelerators=1024)
    for plan in planner.plans(organization="acme", status="committed"):
        ...

* Every method returns the response body as the API documents it (a dict); lists are iterators that follow
  `next_cursor` page by page.
* An error answer raises ProblemError, carrying the RFC 9457 problem details (status, title, detail, errors,
  request_id).
* Writes that change state on the server (creating plans, their transitions, fits) carry an Idempotency-Key,
  made up when the caller gives none, so that a retry can never do them twice. A request is retried, with
  exponential backoff honouring Retry-After, when the server answers 503 (database trouble) or 429 (rate
  limit), and after a connection error when it is safe to resend: reads, and writes with an Idempotency-Key
  (`connect_retries` of them; a server that does not take the connection within `connect_timeout` seconds
  is not waited for longer).
* Updates and deletes need the resource's ETag (If-Match): give it, or the client reads it first.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import requests

DEFAULT_URL = "http://127.0.0.1:8000"
RETRIED_STATUSES = frozenset({429, 503})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Json = dict[str, Any]


class ProblemError(Exception):
    """The API refused or failed a request; `problem` is its RFC 9457 document."""

    def __init__(self, status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None):
        self.status = status
        self.problem = dict(problem)
        self.headers = dict(headers or {})
        super().__init__(f"{status} {self.title}: {self.detail}")

    @property
    def title(self) -> str:
        return self.problem.get("title", "")

    @property
    def detail(self) -> str:
        return self.problem.get("detail", "")

    @property
    def errors(self) -> list[dict[str, Any]]:
        """For a 422: one entry per invalid field, naming it by `pointer`, `parameter` or `header`."""
        return self.problem.get("errors", [])

    @property
    def request_id(self) -> str | None:
        return self.problem.get("request_id")


class PlannerClient:
    """One API key against one server. Thread-safe as far as `requests.Session` is: one per thread."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        connect_timeout: float = 3.05,
        connect_retries: int | None = None,
    ):
        self.base_url = (base_url or os.environ.get("PLANNER_URL") or DEFAULT_URL).rstrip("/")
        api_key = api_key or os.environ.get("PLANNER_API_KEY")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.connect_retries = retries if connect_retries is None else connect_retries
        self.backoff = backoff
        self.session = session or requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.session.headers["Accept"] = "application/json"

    # --- Transport -----------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        files: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> requests.Response:
        """Send a request, retrying what may be retried; the response, or ProblemError for a 4xx/5xx."""
        headers = dict(headers or {})
        resendable = method in SAFE_METHODS or "Idempotency-Key" in headers
        params = {name: _query_value(value) for name, value in (params or {}).items() if value is not None}
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    params=params,
                    json=json,
                    headers=headers,
                    files=files,
                    data=data,
                    timeout=(self.connect_timeout, self.timeout),
                )
            except (requests.ConnectionError, requests.Timeout):
                if last or not resendable or attempt >= self.connect_retries:
                    raise
                time.sleep(self._delay(attempt, None))
                continue
            if response.status_code in RETRIED_STATUSES and not last:
                time.sleep(self._delay(attempt, response.headers.get("Retry-After")))
                continue
            if response.status_code >= 400:
                raise _problem(response)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """Retry-After when the server gives it (in seconds), else exponential backoff with jitter."""
        if retry_after is not None and retry_after.isdigit():
            return float(retry_after)
        return self.backoff * 2**attempt * (0.5 + random.random())

    def _json(self, method: str, path: str, **kwargs) -> Json:
        return self.request(method, path, **kwargs).json()

    def _pages(self, path: str, params: Mapping[str, Any]) -> Iterator[Json]:
        """Every item of a list, fetching the next page only when the caller gets to it."""
        params = dict(params)
        while True:
            page = self._json("GET", path, params=params)
            yield from page["items"]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def _etag(self, path: str, if_match: str | None) -> dict[str, str]:
        if if_match is None:
            if_match = self.request("GET", path).headers["ETag"]
        return {"If-Match": if_match}

    @staticmethod
    def _idempotent(key: str | None) -> dict[str, str]:
        return {"Idempotency-Key": key or str(uuid.uuid4())}

    # --- Probes --------------------------------------------------------------------------------------------

    def health(self) -> Json:
        return self._json("GET", "/healthz")

    def readiness(self) -> Json:
        return self._json("GET", "/readyz")

    def metrics(self) -> str:
        """The server's metrics in Prometheus' text format (what its scraper reads; no key needed)."""
        return self.request("GET", "/metrics", headers={"Accept": "text/plain"}).text

    # --- Planning ------------------------------------------------------------------------------------------

    def allocate(self, **request: Any) -> Json:
        """N and D for a budget: one of flops, pf_days, cost, accelerator_hours or deadline, with hardware
        where the budget needs it, and a law or tokens_per_param."""
        return self._json("POST", "/v1/allocations", json=request)

    def estimate(self, **request: Any) -> Json:
        """Time, accelerator-hours, cost and memory of training `params` on `tokens`."""
        return self._json("POST", "/v1/estimates", json=request)

    # --- Organizations -------------------------------------------------------------------------------------

    def organizations(self, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages("/v1/organizations", {"limit": limit})

    def get_organization(self, slug: str) -> Json:
        return self._json("GET", f"/v1/organizations/{slug}")

    def create_organization(self, slug: str, name: str, **fields: Any) -> Json:
        return self._json("POST", "/v1/organizations", json={"slug": slug, "name": name, **fields})

    # --- Hardware ------------------------------------------------------------------------------------------

    def hardware(
        self, *, vendor: str | None = None, precision: str | None = None, limit: int | None = None
    ) -> Iterator[Json]:
        """Hardware profiles; `precision` keeps those with a peak for it (e.g. bf16)."""
        return self._pages("/v1/hardware", {"vendor": vendor, "precision": precision, "limit": limit})

    def get_hardware(self, slug: str) -> Json:
        return self._json("GET", f"/v1/hardware/{slug}")

    def hardware_prices(self, slug: str, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages(f"/v1/hardware/{slug}/prices", {"limit": limit})

    def create_hardware(self, **profile: Any) -> Json:
        return self._json("POST", "/v1/hardware", json=profile)

    def update_hardware(self, slug: str, changes: Mapping[str, Any], *, if_match: str | None = None) -> Json:
        path = f"/v1/hardware/{slug}"
        return self._json("PATCH", path, json=dict(changes), headers=self._etag(path, if_match))

    def replace_hardware(self, slug: str, profile: Mapping[str, Any], *, if_match: str | None = None) -> Json:
        path = f"/v1/hardware/{slug}"
        return self._json("PUT", path, json=dict(profile), headers=self._etag(path, if_match))

    def delete_hardware(self, slug: str, *, if_match: str | None = None) -> None:
        path = f"/v1/hardware/{slug}"
        self.request("DELETE", path, headers=self._etag(path, if_match))

    # --- Offers and comparisons ----------------------------------------------------------------------------

    def offers(
        self,
        *,
        hardware: Sequence[str] = (),
        provider: Sequence[str] = (),
        region: Sequence[str] = (),
        pricing: Sequence[str] = (),
        limit: int | None = None,
    ) -> Iterator[Json]:
        """Offers: hardware on a provider, in a region, under a pricing (on_demand, reserved, spot, owned)."""
        filters = {"hardware": hardware, "provider": provider, "region": region, "pricing": pricing}
        given = {name: list(values) for name, values in filters.items() if values}  # comma-separated
        return self._pages("/v1/offers", {**given, "limit": limit})

    def get_offer(self, slug: str) -> Json:
        return self._json("GET", f"/v1/offers/{slug}")

    def offer_prices(self, slug: str, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages(f"/v1/offers/{slug}/prices", {"limit": limit})

    def create_offer(self, **offer: Any) -> Json:
        return self._json("POST", "/v1/offers", json=offer)

    def update_offer(self, slug: str, changes: Mapping[str, Any], *, if_match: str | None = None) -> Json:
        path = f"/v1/offers/{slug}"
        return self._json("PATCH", path, json=dict(changes), headers=self._etag(path, if_match))

    def delete_offer(self, slug: str, *, if_match: str | None = None) -> None:
        path = f"/v1/offers/{slug}"
        self.request("DELETE", path, headers=self._etag(path, if_match))

    def import_offers(self, catalog: str, *, provider: str, source: str, **fields: Any) -> Json:
        """Offers from a catalog file in SkyPilot's vms.csv format (its text); the report of what changed."""
        body = {"catalog": catalog, "provider": provider, "source": source, **fields}
        return self._json("POST", "/v1/offers/import", json=body)

    def compare(self, **request: Any) -> Json:
        """One run priced on every offer (or those the filters name): ranked, with the frontier."""
        return self._json("POST", "/v1/comparisons", json=request)

    def grid_intensities(self) -> Iterator[Json]:
        """Every region with a carbon intensity (gCO2e/kWh), its source and year, and its fleet's PUE where
        the provider publishes one: the names `site.region` and an offer's region are looked up by."""
        return iter(self._json("GET", "/v1/grid-intensities")["items"])  # one page: the whole list

    # --- Budgets -------------------------------------------------------------------------------------------

    def budgets(self, *, organization: str | None = None, limit: int | None = None) -> Iterator[Json]:
        return self._pages("/v1/budgets", {"organization": organization, "limit": limit})

    def get_budget(self, budget_id: str) -> Json:
        return self._json("GET", f"/v1/budgets/{budget_id}")

    def create_budget(self, **budget: Any) -> Json:
        return self._json("POST", "/v1/budgets", json=budget)

    def update_budget(
        self, budget_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Json:
        path = f"/v1/budgets/{budget_id}"
        return self._json("PATCH", path, json=dict(changes), headers=self._etag(path, if_match))

    def replace_budget(
        self, budget_id: str, budget: Mapping[str, Any], *, if_match: str | None = None
    ) -> Json:
        path = f"/v1/budgets/{budget_id}"
        return self._json("PUT", path, json=dict(budget), headers=self._etag(path, if_match))

    def delete_budget(self, budget_id: str, *, if_match: str | None = None) -> None:
        path = f"/v1/budgets/{budget_id}"
        self.request("DELETE", path, headers=self._etag(path, if_match))

    def budget_ledger(self, budget_id: str, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages(f"/v1/budgets/{budget_id}/ledger", {"limit": limit})

    def budget_utilization(self, budget_id: str) -> Json:
        return self._json("GET", f"/v1/budgets/{budget_id}/utilization")

    def budget_forecast(self, budget_id: str) -> Json:
        """Committed, spent, remaining, and the estimate at completion of the budget and its running plans
        (every one: the pages of `running` the server gives, joined)."""
        path = f"/v1/budgets/{budget_id}/forecast"
        forecast = self._json("GET", path, params={"limit": 100})
        while forecast.get("next_cursor"):
            page = self._json("GET", path, params={"limit": 100, "cursor": forecast["next_cursor"]})
            forecast = {**page, "running": [*forecast["running"], *page["running"]]}
        forecast.pop("next_cursor", None)  # every page joined: nothing follows
        return forecast

    # --- Plans ---------------------------------------------------------------------------------------------

    def create_plan(self, *, idempotency_key: str | None = None, **request: Any) -> Json:
        """A draft plan from an allocation request (or given params and tokens); safe to retry."""
        return self._json("POST", "/v1/plans", json=request, headers=self._idempotent(idempotency_key))

    def plans(
        self,
        *,
        organization: str | None = None,
        budget_id: str | None = None,
        hardware: str | None = None,
        status: str | None = None,
        label: str | None = None,
        created_from: str | None = None,
        created_to: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Json]:
        """Plan summaries, newest first; `label` is key:value."""
        filters = {
            "organization": organization,
            "budget_id": budget_id,
            "hardware": hardware,
            "status": status,
            "label": label,
            "created_from": created_from,
            "created_to": created_to,
            "limit": limit,
        }
        return self._pages("/v1/plans", filters)

    def get_plan(self, plan_id: str) -> Json:
        return self._json("GET", f"/v1/plans/{plan_id}")

    def commit_plan(self, plan_id: str, *, idempotency_key: str | None = None) -> Json:
        return self._json("POST", f"/v1/plans/{plan_id}/commit", headers=self._idempotent(idempotency_key))

    def approve_plan(
        self, plan_id: str, *, note: str | None = None, idempotency_key: str | None = None
    ) -> Json:
        """pending_approval -> committed (finance or admin): reserved on its budget as it is now."""
        body = {} if note is None else {"note": note}
        path = f"/v1/plans/{plan_id}/approve"
        return self._json("POST", path, json=body, headers=self._idempotent(idempotency_key))

    def reject_plan(self, plan_id: str, *, note: str, idempotency_key: str | None = None) -> Json:
        """pending_approval -> rejected (finance or admin), saying why: nothing is reserved."""
        path = f"/v1/plans/{plan_id}/reject"
        return self._json("POST", path, json={"note": note}, headers=self._idempotent(idempotency_key))

    def cancel_plan(self, plan_id: str, *, idempotency_key: str | None = None) -> Json:
        return self._json("POST", f"/v1/plans/{plan_id}/cancel", headers=self._idempotent(idempotency_key))

    def revise_plan(
        self, plan_id: str, changes: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> Json:
        """A new draft from the plan's request merged with `changes` (RFC 7396: null removes a field)."""
        return self._json(
            "POST",
            f"/v1/plans/{plan_id}/revise",
            json=dict(changes),
            headers=self._idempotent(idempotency_key),
        )

    def compare_plans(self, plan_ids: list[str]) -> Json:
        return self._json("GET", "/v1/plans/compare", params={"ids": ",".join(plan_ids)})

    # --- A plan's run: started, its usage reported, completed or failed ------------------------------------

    def start_plan(
        self, plan_id: str, *, started_at: str | None = None, idempotency_key: str | None = None
    ) -> Json:
        """committed -> running (the first usage record does it too, at its period_start)."""
        body = {} if started_at is None else {"started_at": started_at}
        return self._json(
            "POST", f"/v1/plans/{plan_id}/start", json=body, headers=self._idempotent(idempotency_key)
        )

    def report_usage(self, plan_id: str, *, idempotency_key: str | None = None, **usage: Any) -> Json:
        """Append a usage record: reporter, period_start, period_end, accelerator_hours, and optionally tokens
        (trained so far), tokens_per_second, cost, currency, note. Safe to retry: a retry is never counted
        twice."""
        return self._json(
            "POST", f"/v1/plans/{plan_id}/usage", json=usage, headers=self._idempotent(idempotency_key)
        )

    def usage(self, plan_id: str, *, limit: int | None = None) -> Iterator[Json]:
        """The plan's usage records and reversals, newest first."""
        return self._pages(f"/v1/plans/{plan_id}/usage", {"limit": limit})

    def get_usage_record(self, plan_id: str, usage_id: str) -> Json:
        """One usage record (or reversal) of the plan."""
        return self._json("GET", f"/v1/plans/{plan_id}/usage/{usage_id}")

    def reverse_usage(
        self, plan_id: str, usage_id: str, *, note: str | None = None, idempotency_key: str | None = None
    ) -> Json:
        """Take a wrong usage record back (one of the opposite sign); its period may be reported again."""
        body = {} if note is None else {"note": note}
        return self._json(
            "POST",
            f"/v1/plans/{plan_id}/usage/{usage_id}/reverse",
            json=body,
            headers=self._idempotent(idempotency_key),
        )

    def complete_plan(self, plan_id: str, *, idempotency_key: str | None = None) -> Json:
        return self._json("POST", f"/v1/plans/{plan_id}/complete", headers=self._idempotent(idempotency_key))

    def fail_plan(self, plan_id: str, *, idempotency_key: str | None = None) -> Json:
        return self._json("POST", f"/v1/plans/{plan_id}/fail", headers=self._idempotent(idempotency_key))

    # --- Scaling laws --------------------------------------------------------------------------------------

    def scaling_laws(
        self, *, kind: str | None = None, organization: str | None = None, limit: int | None = None
    ) -> Iterator[Json]:
        return self._pages("/v1/scaling-laws", {"kind": kind, "organization": organization, "limit": limit})

    def get_scaling_law(self, slug: str) -> Json:
        return self._json("GET", f"/v1/scaling-laws/{slug}")

    def fit_scaling_law(
        self,
        *,
        wait: bool = True,
        poll_seconds: float = 1.0,
        idempotency_key: str | None = None,
        **request: Any,
    ) -> Json:
        """Fit a law to `runs` (organization, name, runs, and optionally slug and bootstrap). Large fits run
        in the background: with `wait`, poll the job and return the law; otherwise return the job."""
        response = self.request(
            "POST", "/v1/scaling-laws", json=request, headers=self._idempotent(idempotency_key)
        )
        body = response.json()
        if response.status_code != 202 or not wait:
            return body
        job_path = response.headers["Location"]
        while body["status"] in ("queued", "running"):
            time.sleep(float(response.headers.get("Retry-After", poll_seconds)))
            response = self.request("GET", job_path)
            body = response.json()
        if body["status"] == "failed":
            raise ProblemError(body["error"].get("status", 500), body["error"])
        return self._json("GET", body["law"])

    def get_fit_job(self, job_id: str) -> Json:
        return self._json("GET", f"/v1/fit-jobs/{job_id}")

    def delete_scaling_law(self, slug: str, *, if_match: str | None = None) -> None:
        path = f"/v1/scaling-laws/{slug}"
        self.request("DELETE", path, headers=self._etag(path, if_match))

    def isoflop(self, slug: str, **params: Any) -> Json:
        """Loss against model size at a fixed budget (flops, and optionally points and span)."""
        return self._json("GET", f"/v1/scaling-laws/{slug}/isoflop", params=params)

    def frontier(self, slug: str, **params: Any) -> Json:
        """N, D and loss along the compute-optimal frontier (min_flops, max_flops, points)."""
        return self._json("GET", f"/v1/scaling-laws/{slug}/frontier", params=params)

    # --- Reports -------------------------------------------------------------------------------------------

    def cost_report(self, start: str, end: str, **params: Any) -> Json:
        """Plans scheduled in [start, end) (each spread over its schedule), grouped: granularity, group_by (a
        list or comma-separated), organization, budget_id, hardware, status (comma-separated; default every
        plan whose money is committed); measure="both" sets what runs spent (by day of use) beside what plans
        planned, with the variance ("actual": the spend alone; "planned", the default: plans)."""
        return self._json("GET", "/v1/reports/costs", params={"from": start, "to": end, **params})

    def cost_report_csv(self, start: str, end: str, **params: Any) -> str:
        """The same report as a finance CSV (the rows alone; part="totals": the totals per currency)."""
        query = {"from": start, "to": end, **params, "format": "csv"}
        return self.request("GET", "/v1/reports/costs", params=query).text

    def focus_export(self, start: str, end: str, **params: Any) -> str:
        """What runs spent on the UTC days beginning in [start, end) as FOCUS usage charges (CSV text), one
        per plan per day (granularity="month": per month); organization, budget_id, hardware, status and
        focus_version (1.2, the default, or 1.3)."""
        query = {"from": start, "to": end, **params}
        return self.request("GET", "/v1/reports/focus", params=query).text

    def model_accuracy(self, **params: Any) -> Json:
        """Measured throughput of runs against the cluster model's prediction, per hardware profile
        (organization, hardware, from, to; detail=True for each plan)."""
        return self._json("GET", "/v1/reports/model-accuracy", params=params)

    # --- Calibrations --------------------------------------------------------------------------------------

    def calibrate(
        self,
        organization: str,
        hardware: str,
        *,
        plans: list[str] | None = None,
        idempotency_key: str | None = None,
    ) -> Json:
        """Fit the organisation's own cluster-model constant for `hardware` to its measured runs (all of them
        with measurements, or `plans`); its later plans on that hardware use it."""
        body: Json = {"organization": organization, "hardware": hardware}
        if plans is not None:
            body["plans"] = plans
        return self._json("POST", "/v1/calibrations", json=body, headers=self._idempotent(idempotency_key))

    def calibrations(
        self, *, organization: str | None = None, hardware: str | None = None, limit: int | None = None
    ) -> Iterator[Json]:
        return self._pages(
            "/v1/calibrations", {"organization": organization, "hardware": hardware, "limit": limit}
        )

    def get_calibration(self, calibration_id: str) -> Json:
        return self._json("GET", f"/v1/calibrations/{calibration_id}")

    # --- Events and webhooks -------------------------------------------------------------------------------

    def events(
        self, *, cursor: str | None = None, type: str | None = None, limit: int | None = None, **params: Any
    ) -> Json:
        """One page of the events feed, oldest first, after `cursor` (None: from the first event): its
        `items`, and the `next_cursor` to send next time (never null) with `has_more`."""
        query = {"cursor": cursor, "type": type, "limit": limit, **params}
        return self._json("GET", "/v1/events", params={k: v for k, v in query.items() if v is not None})

    def get_event(self, event_id: int) -> Json:
        """One event of the feed, by its (integer) id; events never change."""
        return self._json("GET", f"/v1/events/{event_id}")

    def create_webhook(self, **webhook: Any) -> Json:
        """A webhook (organization, url, event_types, description); its `secret` is in this response only."""
        return self._json("POST", "/v1/webhooks", json=webhook)

    def webhooks(self, *, organization: str | None = None, limit: int | None = None) -> Iterator[Json]:
        """Webhooks, newest first (never their secrets)."""
        return self._pages("/v1/webhooks", {"organization": organization, "limit": limit})

    def get_webhook(self, webhook_id: str) -> Json:
        """One webhook (never its secret)."""
        return self._json("GET", f"/v1/webhooks/{webhook_id}")

    def update_webhook(
        self, webhook_id: str, changes: Mapping[str, Any], *, if_match: str | None = None
    ) -> Json:
        """Change its url, event_types, active or description (None clears the description)."""
        path = f"/v1/webhooks/{webhook_id}"
        return self._json("PATCH", path, json=dict(changes), headers=self._etag(path, if_match))

    def delete_webhook(self, webhook_id: str, *, if_match: str | None = None) -> None:
        """Delete it and its deliveries: nothing more is sent to it."""
        path = f"/v1/webhooks/{webhook_id}"
        self.request("DELETE", path, headers=self._etag(path, if_match))

    def rotate_webhook_secret(self, webhook_id: str, *, if_match: str | None = None) -> Json:
        """A new secret, in this response only and in force at once; the one it replaces still signs beside
        it until `previous_secret_until`. If-Match is optional here: given, a 412 when the webhook has
        changed since."""
        headers = {} if if_match is None else {"If-Match": if_match}
        return self._json("POST", f"/v1/webhooks/{webhook_id}/rotate-secret", headers=headers)

    def webhook_deliveries(
        self, webhook_id: str, *, status: str | None = None, limit: int | None = None
    ) -> Iterator[Json]:
        """The webhook's deliveries, newest first; `status` is pending, delivered or failed."""
        return self._pages(f"/v1/webhooks/{webhook_id}/deliveries", {"status": status, "limit": limit})

    def retry_webhook_delivery(self, webhook_id: str, delivery_id: str) -> Json:
        """Queue a failed delivery again (a 409 unless it failed), for a fresh round of attempts under the
        same `webhook-id`."""
        return self._json("POST", f"/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry")

    # --- Keys and audit ------------------------------------------------------------------------------------

    def keys(self, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages("/v1/keys", {"limit": limit})

    def create_key(self, **fields: Any) -> Json:
        """A new key (role, name, organization, expires_at); its full `key` is in this response only."""
        return self._json("POST", "/v1/keys", json=fields)

    def revoke_key(self, key_uuid: str) -> None:
        self.request("DELETE", f"/v1/keys/{key_uuid}")

    def audit(self, *, limit: int | None = None) -> Iterator[Json]:
        return self._pages("/v1/audit", {"limit": limit})


# Every operation of the API (its operationId in openapi.yaml) and the method of PlannerClient that calls it;
# tests/client/test_client_operations.py holds the two lists equal, and each method to its request.
# A method may add a variant of one (cost_report_csv: getCostReport as CSV) or follow one with another
# (fit_scaling_law polls getFitJob).
OPERATIONS: dict[str, str] = {
    # Probes
    "getHealth": "health",
    "getReadiness": "readiness",
    "getMetrics": "metrics",
    # Planning
    "createAllocation": "allocate",
    "createEstimate": "estimate",
    # Organizations
    "listOrganizations": "organizations",
    "getOrganization": "get_organization",
    "createOrganization": "create_organization",
    # Hardware
    "listHardware": "hardware",
    "getHardware": "get_hardware",
    "listHardwarePrices": "hardware_prices",
    "createHardware": "create_hardware",
    "updateHardware": "update_hardware",
    "replaceHardware": "replace_hardware",
    "deleteHardware": "delete_hardware",
    # Offers, comparisons and grid intensities
    "listOffers": "offers",
    "getOffer": "get_offer",
    "listOfferPrices": "offer_prices",
    "createOffer": "create_offer",
    "updateOffer": "update_offer",
    "deleteOffer": "delete_offer",
    "importOffers": "import_offers",
    "createComparison": "compare",
    "listGridIntensities": "grid_intensities",
    # Budgets
    "listBudgets": "budgets",
    "getBudget": "get_budget",
    "createBudget": "create_budget",
    "updateBudget": "update_budget",
    "replaceBudget": "replace_budget",
    "deleteBudget": "delete_budget",
    "listBudgetLedger": "budget_ledger",
    "getBudgetUtilization": "budget_utilization",
    "getBudgetForecast": "budget_forecast",
    # Plans and their runs
    "createPlan": "create_plan",
    "listPlans": "plans",
    "getPlan": "get_plan",
    "commitPlan": "commit_plan",
    "approvePlan": "approve_plan",
    "rejectPlan": "reject_plan",
    "cancelPlan": "cancel_plan",
    "revisePlan": "revise_plan",
    "comparePlans": "compare_plans",
    "startPlan": "start_plan",
    "reportUsage": "report_usage",
    "listUsageRecords": "usage",
    "getUsageRecord": "get_usage_record",
    "reverseUsageRecord": "reverse_usage",
    "completePlan": "complete_plan",
    "failPlan": "fail_plan",
    # Scaling laws
    "listScalingLaws": "scaling_laws",
    "getScalingLaw": "get_scaling_law",
    "fitScalingLaw": "fit_scaling_law",
    "getFitJob": "get_fit_job",
    "deleteScalingLaw": "delete_scaling_law",
    "getIsoflopCurve": "isoflop",
    "getComputeFrontier": "frontier",
    # Reports
    "getCostReport": "cost_report",
    "getFocusExport": "focus_export",
    "getModelAccuracyReport": "model_accuracy",
    # Calibrations
    "createCalibration": "calibrate",
    "listCalibrations": "calibrations",
    "getCalibration": "get_calibration",
    # Events and webhooks
    "listEvents": "events",
    "getEvent": "get_event",
    "listWebhooks": "webhooks",
    "getWebhook": "get_webhook",
    "createWebhook": "create_webhook",
    "updateWebhook": "update_webhook",
    "deleteWebhook": "delete_webhook",
    "rotateWebhookSecret": "rotate_webhook_secret",
    "listWebhookDeliveries": "webhook_deliveries",
    "retryWebhookDelivery": "retry_webhook_delivery",
    # Keys and audit
    "listKeys": "keys",
    "createKey": "create_key",
    "revokeKey": "revoke_key",
    "listAuditEntries": "audit",
}


def _query_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, bool):
        return str(value).lower()
    return value


def _problem(response: requests.Response) -> ProblemError:
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):  # not from the API itself: a proxy's page, say
        problem = {"status": response.status_code, "title": response.reason, "detail": response.text[:500]}
    return ProblemError(response.status_code, problem, response.headers)
