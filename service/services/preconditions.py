"""Optimistic concurrency: ETags are a resource's version; updates and deletes name the one they read.

An immutable resource's version is its id: a resource deleted and made again under the same name is another.
"""

from __future__ import annotations

import re

from service.services.errors import InvalidHeaderError, PreconditionFailedError, PreconditionRequiredError

# If-Match as RFC 9110 §13.1.1 writes it: `*`, or a list of entity tags (optionally weak, `W/`), each quoted
# (etagc: visible ASCII but `"`, or obs-text, the bytes 0x80-0xFF, which a header carries as Latin-1). The
# OpenAPI description states the same pattern for the header.
_ENTITY_TAG = r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"'
IF_MATCH_PATTERN = rf"^[ \t]*(\*|{_ENTITY_TAG}([ \t]*,[ \t]*{_ENTITY_TAG})*)[ \t]*$"


def etag(version: int | str) -> str:
    return f'"{version}"'


def require_if_match(if_match: str | None) -> str:
    """The If-Match header, which updates and deletes must send (428 without it)."""
    if if_match is None:
        raise PreconditionRequiredError(
            "Send If-Match with the ETag of your last read of this resource; updates without it are refused."
        )
    return if_match


def require_version(if_match: str | None, version: int | str) -> None:
    """Check an If-Match header (RFC 9110 §13.1.1, strong comparison) against the current version."""
    if_match = require_if_match(if_match)
    if not re.fullmatch(IF_MATCH_PATTERN, if_match):
        # Neither `*` nor entity tags (an empty value among them): a condition that cannot be evaluated.
        raise InvalidHeaderError("If-Match", 'Not `*` or a list of ETags such as "3" (RFC 9110).')
    # A weak tag never matches (If-Match compares strongly), and a tag may hold a comma: found, not split.
    if if_match.strip() == "*" or etag(version) in re.findall(_ENTITY_TAG, if_match):
        return
    raise PreconditionFailedError(
        f"The resource changed since you read it: its ETag is now {etag(version)}. Read it again and retry.",
        current_etag=etag(version),
    )
