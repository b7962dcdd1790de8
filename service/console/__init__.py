"""The web console: server-rendered pages for people, on the same use cases as the API.

Signing in keeps the API key in an HttpOnly, SameSite=Strict session cookie (gone when the browser closes);
every page authenticates it as the API authenticates a bearer key, so a revoked or expired key signs the
browser out. Forms that change something carry a token derived from the key (a forged cross-site form
cannot know it) and must come from this origin. No JavaScript, nothing from a CDN: pages and charts (SVG)
are drawn on the server, the style sheet is served from here.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

import flask
from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response as WerkzeugResponse

from service.services.keys import Principal
from service.web.auth import CONSOLE_BLUEPRINT, CONSOLE_COOKIE, CONSOLE_STATIC
from service.web.problems import PROBLEM_CONTENT_TYPE

blp = flask.Blueprint(
    CONSOLE_BLUEPRINT,
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/console/static",
)

# Pages a signed-out browser may see.
PUBLIC_ENDPOINTS = frozenset({f"{CONSOLE_BLUEPRINT}.sign_in", CONSOLE_STATIC})
CSRF_FIELD = "csrf_token"
SECURITY_HEADERS = {
    # Nothing but this origin's style sheet; no scripts at all; forms post only here; never framed.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def csrf_token() -> str:
    """A per-key token for the forms that change something: the key's HMAC of a fixed label."""
    key = flask.request.cookies.get(CONSOLE_COOKIE, "")
    return hmac.new(key.encode(), b"compute-planner console form", hashlib.sha256).hexdigest()


def same_origin() -> bool:
    """Whether a POST comes from a page of this origin (Origin, else Referer; browsers send one of them)."""
    source = flask.request.headers.get("Origin") or flask.request.headers.get("Referer")
    if not source:
        return False
    parts = urlsplit(source)
    return f"{parts.scheme}://{parts.netloc}" == flask.request.host_url.rstrip("/")


@blp.before_request
def _require_sign_in() -> WerkzeugResponse | None:
    if flask.request.endpoint in PUBLIC_ENDPOINTS:
        return None
    if flask.g.get("principal") is None:
        response = flask.redirect(flask.url_for(".sign_in", next=flask.request.full_path.rstrip("?")))
        if CONSOLE_COOKIE in flask.request.cookies:  # a key that stopped being valid: forget it
            response.delete_cookie(CONSOLE_COOKIE, path="/")
        return response
    if flask.request.method == "POST":
        sent = flask.request.form.get(CSRF_FIELD, "")
        if not same_origin() or not hmac.compare_digest(sent, csrf_token()):
            raise BadRequest("This form is out of date or did not come from this site; reload the page.")
    return None


@blp.after_request
def _as_page(response: flask.Response) -> flask.Response:
    """Pages keep the console's security headers, and never show a problem+json: the app's error handlers
    decide the status and wording (one mapping for the API and the console), the console renders them."""
    if response.mimetype == PROBLEM_CONTENT_TYPE:
        problem = response.get_json()
        page = flask.render_template("console/error.html", problem=problem)
        response.set_data(page)
        response.mimetype = "text/html"
    response.headers.update(SECURITY_HEADERS)
    if flask.request.endpoint != CONSOLE_STATIC:
        response.headers["Cache-Control"] = "no-store"  # pages show an organisation's plans and money
        response.headers["X-Frame-Options"] = "DENY"
    return response


@blp.app_template_global()
def signed_in_principal() -> Principal | None:
    principal: Principal | None = flask.g.get("principal")  # flask.g is untyped: auth.admit sets this
    return principal


blp.add_app_template_global(csrf_token)
blp.add_app_template_global(lambda: CSRF_FIELD, "csrf_field")

from service.console import views  # noqa: E402, F401 -- registers the routes on blp


def init_app(app: flask.Flask) -> None:
    app.register_blueprint(blp)
