"""A schemathesis check for tests/cluster/openapi.rs: a request its schema allows is not refused as invalid input.

A 400 or 422 answer to a request schemathesis generated from the document fails the check, unless the refusal is
about state rather than input: a name, branch or hostname another object already holds (the spec answers a name
that is taken with 400, and no schema can know which names are taken).
"""

import schemathesis

# What a refusal about state says; every such message of the API says "already".
STATE = ("already",)


@schemathesis.check
def conforming_requests_are_taken(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    if response.status_code not in (400, 422):
        return None
    try:
        message = response.json()["error"]["message"]
    except Exception:
        message = response.text
    if any(word in message for word in STATE):
        return None
    raise AssertionError(
        f"a request the schema allows was refused as invalid input: {response.status_code} {message}"
    )
