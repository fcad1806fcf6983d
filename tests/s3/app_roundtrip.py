"""An app's process that writes `from-app.txt` into its channel's bucket, reads it back, and only then serves
`GET /` with what it read, so a deploy passes readiness only when the round trip worked. It uses nothing but the
injected S3_* variables and a hand-written SigV4 client on Python's standard library, as a tenant without an SDK
would write. Deployed by tests/e2e_blob.rs and tests/e2e_platform.rs (with a VERSION file beside it).
"""

import datetime, hashlib, hmac, http.server, os, sys, urllib.parse, urllib.request

ENDPOINT = os.environ["S3_ENDPOINT"].rstrip("/")
BUCKET = os.environ["S3_BUCKET"]
ACCESS = os.environ["S3_ACCESS_KEY_ID"]
SECRET = os.environ["S3_SECRET_ACCESS_KEY"]
REGION = os.environ["S3_REGION"]


def hmac256(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def s3(method, key, body=b""):
    path = "/" + BUCKET + "/" + urllib.parse.quote(key)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    digest = hashlib.sha256(body).hexdigest()
    headers = {"host": urllib.parse.urlsplit(ENDPOINT).netloc, "x-amz-content-sha256": digest, "x-amz-date": stamp}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, path, "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), names, digest])
    scope = f"{day}/{REGION}/s3/aws4_request"
    text = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key_ = hmac256(hmac256(hmac256(hmac256(("AWS4" + SECRET).encode(), day), REGION), "s3"), "aws4_request")
    signature = hmac.new(key_, text.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={names}, Signature={signature}"
    del headers["host"]
    request = urllib.request.Request(ENDPOINT + path, data=body if method == "PUT" else None, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as res:
        return res.read()


written = ("written by the app, version " + open("/app/VERSION").read().strip()).encode()
s3("PUT", "from-app.txt", written)
read = s3("GET", "from-app.txt")
if read != written:
    sys.exit(f"read back {read!r}, wrote {written!r}")
print("object round trip ok", flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(read)))
        self.end_headers()
        self.wfile.write(read)


http.server.HTTPServer(("0.0.0.0", int(os.environ["SVC_HTTP_PORT"])), Handler).serve_forever()
