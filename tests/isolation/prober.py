# An app for the hostile-tenant suite: it tries, from inside its own pod, what an attacker's code would try, and
# answers over HTTP on $SVC_HTTP_PORT with what happened. Every answer is 200 with the outcome as text:
#   GET /                          "prober" (readiness)
#   GET /connect?to=HOST:PORT      "open", "refused", "timeout" or "error <reason>" for a TCP connection
#   GET /get?url=URL               "<status> <first 4000 bytes of the body>" or the connection's outcome as above
#   GET /resolve?name=NAME         the first address NAME resolves to, or "error <reason>"
#   GET /env?name=NAME             the value of an environment variable of the pod ("" when unset)
# Run with arguments instead (a build step does), it tries each `connect:HOST:PORT` or `get:URL` and prints one line
# `probe ARGUMENT => OUTCOME` for each.
import concurrent.futures
import http.server
import os
import socket
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 3


def outcome(err):
    if isinstance(err, ConnectionRefusedError):
        return "refused"
    if isinstance(err, (socket.timeout, TimeoutError)):
        return "timeout"
    reason = getattr(err, "reason", None)
    if isinstance(reason, BaseException):
        return outcome(reason)
    return "error {}".format(err)


def connect(to):
    host, port = to.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=TIMEOUT).close()
        return "open"
    except Exception as err:
        return outcome(err)


def get(url):
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT, context=insecure) as r:
            return "{} {}".format(r.status, r.read(4000).decode("utf-8", "replace"))
    except urllib.error.HTTPError as err:
        return "{} {}".format(err.code, err.read(4000).decode("utf-8", "replace"))
    except Exception as err:
        return outcome(err)


def resolve(name):
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    except Exception as err:
        return "error {}".format(err)


class Prober(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/connect":
            body = connect(q["to"])
        elif url.path == "/get":
            body = get(q["url"])
        elif url.path == "/resolve":
            body = resolve(q["name"])
        elif url.path == "/env":
            body = os.environ.get(q["name"], "")
        else:
            body = "prober"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def attempt(arg):
    kind, target = arg.split(":", 1)
    return connect(target) if kind == "connect" else get(target)


if len(sys.argv) > 1:
    # All at once: a dropped connection takes the whole timeout, and a build step tries a dozen of them.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(sys.argv) - 1) as pool:
        results = list(pool.map(attempt, sys.argv[1:]))
    for arg, result in zip(sys.argv[1:], results):
        print("probe {} => {}".format(arg, result.replace("\n", " ")[:200]), flush=True)
else:
    http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Prober).serve_forever()
