"""A real MCP client (the official Python SDK, `mcp` from PyPI) for the tests, driven over stdin and stdout.

Usage: client.py URL [TOKEN]. It initializes a session at URL over the streamable HTTP transport (with
`Authorization: Bearer TOKEN` when given), prints `{"initialized": {...}}`, then answers one JSON line per request
line: `{"op": "list"}` prints `{"tools": [...]}` (each tool as the SDK parsed it); `{"op": "call", "name": N,
"arguments": {...}}` prints `{"is_error", "text", "structured"}`, or `{"rpc_error": {"code", "message"}}` when the
server answers the call with a JSON-RPC error (the session goes on, as an agent's would). A failure prints
`{"failure": "..."}` and the client exits non-zero.

Usage: client.py --fork-server SOCKET. Importing the SDK takes seconds of CPU, and the tests open dozens of sessions:
this imports it once, binds a datagram socket at SOCKET.fork, says `ready` to SOCKET, and then forks a client per
datagram it receives, `{"url": URL, "token": TOKEN, "session": PATH}`: the client connects to the Unix socket at
PATH, which becomes its stdin and stdout (a fork server, as Python's multiprocessing has). It exits when its stdin
closes, that is when the test process that started it is gone.
"""

import asyncio
import json
import os
import select
import signal
import socket
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError


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
            try:
                result = await session.call_tool(request["name"], request.get("arguments") or {})
            except MCPError as refused:
                emit({"rpc_error": {"code": refused.error.code, "message": refused.error.message}})
                continue
            text = "".join(block.text for block in result.content if block.type == "text")
            emit({"is_error": bool(result.is_error), "text": text, "structured": result.structured_content})
        else:
            raise ValueError(f"unknown op {request['op']}")


async def main(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                initialized = await session.initialize()
                emit({"initialized": {"server": initialized.server_info.name,
                                      "protocol": initialized.protocol_version,
                                      "tools": initialized.capabilities.tools is not None}})
                await serve(session)


def run(url, token):
    try:
        asyncio.run(main(url, token))
    except BaseException as failure:  # noqa: BLE001 - reported to the test, which fails with it
        emit({"failure": f"{type(failure).__name__}: {failure!r}"})
        return 1
    return 0


def fork_server(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path + ".fork")
    server.sendto(b"ready", path)
    # Sessions end on their own; nobody waits for them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        while True:
            readable, _, _ = select.select([server, sys.stdin], [], [])
            if sys.stdin in readable and not sys.stdin.buffer.read1(1):
                return
            if server in readable:
                request = json.loads(server.recv(65536))
                if os.fork() == 0:
                    server.close()
                    os._exit(session(request))
    finally:
        for leftover in (path, path + ".fork"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def session(request):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(request["session"])
    os.dup2(connection.fileno(), 0)
    os.dup2(connection.fileno(), 1)
    connection.close()
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    return run(request["url"], request.get("token"))


if __name__ == "__main__":
    if sys.argv[1] == "--fork-server":
        fork_server(sys.argv[2])
    else:
        sys.exit(run(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
