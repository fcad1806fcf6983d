# An app whose output the runtime-log tests read: three boot lines on stdout and one on stderr, then an HTTP server
# (no access log) that crashes with exit code 3 on /crash and eats memory past its limit on /oom.
import http.server
import os
import sys

for n in (1, 2, 3):
    print(f"boot line {n}", flush=True)
print("warming up on stderr", file=sys.stderr, flush=True)

held = []


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/crash":
            self.reply(b"crashing\n")
            print("about to crash", flush=True)
            os._exit(3)
        if self.path == "/oom":
            self.reply(b"eating\n")
            print("eating memory", flush=True)
            while True:
                held.append(b"\x01" * (64 << 20))
        self.reply(b"up\n")


http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
