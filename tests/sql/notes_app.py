"""A notes app that keeps its data in its channel's database, with nothing but Python's standard library (the warm
python base has no Postgres driver): a small client of the Postgres wire protocol (v3, SCRAM-SHA-256 sign-in,
simple queries), as a tenant without a driver would write.

  python3 app.py migrate   applies migrations/*.sql not yet recorded in `schema_migrations`, in name order, each
                           in one transaction with its record (the runtime contract: migrations run at start, from
                           launch.sh, never at build time)
  python3 app.py serve     answers GET / with the version, the applied migrations and every note (its text and
                           place), and what the read-only role may do: read the notes, and not write them

Deployed by tests/e2e_platform.rs with a VERSION file and a migrations directory beside it.
"""

import base64, hashlib, hmac, http.server, os, socket, struct, sys, urllib.parse


class PgError(Exception):
    def __init__(self, fields):
        self.code = fields.get("C", "")
        super().__init__("{}: {}".format(self.code, fields.get("M", "")))


class Pg:
    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port or 5432), timeout=30)
        self.buf = b""
        params = "user\0{}\0database\0{}\0\0".format(urllib.parse.unquote(parts.username), parts.path[1:]).encode()
        self.sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        self.sign_in(urllib.parse.unquote(parts.password or ""))
        self.until_ready()

    def close(self):
        self.send(b"X", b"")
        self.sock.close()

    def send(self, kind, payload):
        self.sock.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)

    def recv(self):
        while True:
            if len(self.buf) >= 5:
                (length,) = struct.unpack("!i", self.buf[1:5])
                if len(self.buf) >= 1 + length:
                    kind, body, self.buf = self.buf[:1], self.buf[5 : 1 + length], self.buf[1 + length :]
                    if kind == b"E":
                        raise PgError({f[:1]: f[1:] for f in body.decode().split("\0") if f})
                    return kind, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk

    def auth(self):
        kind, body = self.recv()
        assert kind == b"R", kind
        return struct.unpack("!i", body[:4])[0], body[4:]

    def sign_in(self, password):
        code, data = self.auth()
        if code == 0:
            return
        assert code == 10 and b"SCRAM-SHA-256" in data.split(b"\0"), "unsupported sign-in {}".format(code)
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = "n=,r=" + nonce
        first = ("n,," + first_bare).encode()
        self.send(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first)
        code, data = self.auth()
        assert code == 11, code
        server_first = data.decode()
        attrs = dict(a.split("=", 1) for a in server_first.split(","))
        assert attrs["r"].startswith(nonce)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        without_proof = "c=biws,r=" + attrs["r"]
        message = ",".join([first_bare, server_first, without_proof]).encode()
        signature = hmac.new(hashlib.sha256(client_key).digest(), message, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        self.send(b"p", (without_proof + ",p=" + proof).encode())
        code, data = self.auth()
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        expected = base64.b64encode(hmac.new(server_key, message, "sha256").digest()).decode()
        assert code == 12 and data.decode() == "v=" + expected, "the server did not prove it knows the password"
        assert self.auth()[0] == 0

    def until_ready(self):
        while self.recv()[0] != b"Z":
            pass

    def query(self, sql):
        """Runs SQL (one or more statements) as one simple query; returns the rows of its last result as strings."""
        self.send(b"Q", sql.encode() + b"\0")
        rows = []
        while True:
            kind, body = self.recv()
            if kind == b"T":
                rows = []
            elif kind == b"D":
                (count,) = struct.unpack("!h", body[:2])
                pos, row = 2, []
                for _ in range(count):
                    (size,) = struct.unpack("!i", body[pos : pos + 4])
                    pos += 4
                    row.append(None if size < 0 else body[pos : pos + size].decode())
                    pos += max(size, 0)
                rows.append(row)
            elif kind == b"Z":
                return rows


def run(url, sql):
    db = Pg(url)
    try:
        return db.query(sql)
    finally:
        db.close()


def quote(text):
    return "'" + text.replace("'", "''") + "'"


def migrate():
    here = os.path.dirname(os.path.abspath(__file__))
    url = os.environ["DATABASE_URL"]
    run(url, "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY)")
    done = {row[0] for row in run(url, "SELECT name FROM schema_migrations")}
    for name in sorted(os.listdir(os.path.join(here, "migrations"))):
        if name in done:
            continue
        sql = open(os.path.join(here, "migrations", name)).read()
        run(url, "BEGIN;\n{}\n;INSERT INTO schema_migrations VALUES ({});COMMIT;".format(sql, quote(name)))
        print("migrated", name, flush=True)


def page():
    url = os.environ["DATABASE_URL"]
    lines = ["version=" + open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "VERSION")).read().strip()]
    lines.append("migrations=" + ",".join(r[0] for r in run(url, "SELECT name FROM schema_migrations ORDER BY name")))
    for body, place in run(url, "SELECT body, ST_AsText(place) FROM notes ORDER BY id"):
        lines.append("note={} at {}".format(body, place))
    readonly = os.environ["DATABASE_URL_READONLY"]
    lines.append("readonly reads {} notes".format(run(readonly, "SELECT count(*) FROM notes")[0][0]))
    try:
        run(readonly, "INSERT INTO notes (body) VALUES ('by the read-only role')")
        lines.append("readonly wrote a note")
    except PgError as e:
        lines.append("readonly write refused: " + e.code)
    return "\n".join(lines) + "\n"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            status, body = 200, page()
        except Exception as e:  # the test reads the reason on the page
            status, body = 500, "error: {}\n".format(e)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    if sys.argv[1] == "migrate":
        migrate()
    else:
        http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
