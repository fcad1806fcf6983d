"""A real MCP client (the official Python SDK, `mcp` from PyPI) for the tests, driven over stdin and stdout.

Usage: client.py URL [TOKEN]. It initializes a session at URL over the streamable HTTP transport (with
`Authorization: Bearer TOKEN` when given), prints `{"initialized": {...}}`, then answers one JSON line per request
line: `{"op": "list"}` prints `{"tools": [...]}` (each tool as the SDK parsed it); `{"op": "call", "name": N,
"arguments": {...}}` prints `{"is_error", "text", "structured"}`. A failure prints `{"failure": "..."}` and the
client exits non-zero.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def emit(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def serve(session):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        request = json.loads(line)
        if request["op"] == "list":
            listed = await session.list_tools()
            emit({"tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed.tools]})
        elif request["op"] == "call":
            result = await session.call_tool(request["name"], request.get("arguments") or {})
            text = "".join(block.text for block in result.content if block.type == "text")
            emit({"is_error": bool(result.is_error), "text": text, "structured": result.structured_content})
        else:
            raise ValueError(f"unknown op {request['op']}")


async def main():
    url = sys.argv[1]
    token = sys.argv[2] if len(sys.argv) > 2 else None
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                initialized = await session.initialize()
                emit({"initialized": {"server": initialized.server_info.name,
                                      "protocol": initialized.protocol_version,
                                      "tools": initialized.capabilities.tools is not None}})
                await serve(session)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BaseException as failure:  # noqa: BLE001 - reported to the test, which fails with it
        emit({"failure": f"{type(failure).__name__}: {failure!r}"})
        sys.exit(1)
