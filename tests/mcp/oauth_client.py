"""An MCP client that signs a person in with OAuth (the official Python SDK's `OAuthClientProvider`), headless.

Usage: oauth_client.py URL SUB. It connects to the MCP server at URL with no token; the SDK meets the 401, reads
the protected-resource and authorization-server metadata, registers itself, and sends the person to the
authorization endpoint. The redirect handler plays the person's browser: it follows the redirects to the upstream
provider (hack/oidc.sh), submits its form as SUB, follows the provider back to the platform, allows the client on
the consent page, and hands the code from the last redirect to the SDK, which redeems it. Then it prints one JSON
line: `{"token": ..., "scope": ..., "client_id": ..., "tools": N, "apps": [...], "created": {...}}` after
`tools/list`, `list_apps` and `create_app` (name `oauth-made`) through the session. A failure prints
`{"failure": "..."}` and the client exits non-zero.
"""

import asyncio
import json
import re
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

REDIRECT_URI = "http://127.0.0.1:9/callback"


class Memory:
    """Token storage in memory."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


class Person:
    """The person's browser: cookies kept, redirects followed one at a time."""

    def __init__(self, sub):
        self.sub = sub
        self.result = None

    async def authorize(self, url):
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as browser:
            page = await self.follow(browser, url)
            # The provider's form: submitted as the person.
            assert page.status_code == 200, f"the provider's form: {page.status_code} {page.text}"
            answer = await browser.post(str(page.url), data={"sub": self.sub})
            assert answer.status_code in (302, 303), f"the provider's answer: {answer.status_code} {answer.text}"
            consent = await self.follow(browser, urljoin(str(answer.url), answer.headers["location"]))
            assert consent.status_code == 200, f"the consent page: {consent.status_code} {consent.text}"
            action = re.search(r'<form method="post" action="([^"]+)"', consent.text).group(1)
            request = re.search(r'name="request" value="([^"]+)"', consent.text).group(1)
            allowed = await browser.post(urljoin(str(consent.url), action),
                                         data={"request": request, "decision": "allow"})
            assert allowed.status_code in (302, 303), f"the consent's answer: {allowed.status_code} {allowed.text}"
            back = urlparse(allowed.headers["location"])
            assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT_URI, back
            query = parse_qs(back.query)
            assert "code" in query, f"no code: {query}"
            self.result = AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0])

    async def follow(self, browser, url):
        for _ in range(10):
            page = await browser.get(url)
            if page.status_code not in (301, 302, 303, 307, 308):
                return page
            url = urljoin(str(page.url), page.headers["location"])
        raise RuntimeError(f"too many redirects from {url}")

    async def callback(self):
        return self.result


def emit(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def main():
    url, sub = sys.argv[1], sys.argv[2]
    person = Person(sub)
    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(client_name="slipway tests", redirect_uris=[REDIRECT_URI]),
        storage=storage,
        redirect_handler=person.authorize,
        callback_handler=person.callback,
    )
    async with create_mcp_http_client(auth=auth) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                tools = await session.list_tools()
                listed = await session.call_tool("list_apps", {})
                created = await session.call_tool("create_app", {"name": "oauth-made"})
                emit({
                    "token": storage.tokens.access_token,
                    "scope": storage.tokens.scope,
                    "client_id": storage.client.client_id,
                    "tools": len(tools.tools),
                    "apps": listed.structured_content,
                    "created": created.structured_content,
                    "created_error": bool(created.is_error),
                })


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BaseException as failure:  # noqa: BLE001 - reported to the test, which fails with it
        emit({"failure": f"{type(failure).__name__}: {failure!r}"})
        sys.exit(1)
