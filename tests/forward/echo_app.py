# An app for the raw TCP forwarding test: an echo server on $SVC_FORWARD_PORT (bytes back unchanged) and its
# version over HTTP on $SVC_HTTP_PORT (what readiness and the test look at).
import http.server
import os
import socket
import threading


def echo(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def forward():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", int(os.environ["SVC_FORWARD_PORT"])))
    server.listen(64)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


class Version(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = open("/app/VERSION", "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


threading.Thread(target=forward, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Version).serve_forever()
