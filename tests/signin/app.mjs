// An app that signs its users in with the platform's identity cookie, verified exactly as the platform tells app
// authors to: the JWKS fetched from {auth_url} and cached (jose's remote key set), RS256 pinned, the key chosen by
// `kid`, `iss` equal to {auth_url}, `aud` equal to this host, `exp` in the future. `sub` is the user's key.
//
// GET /      JSON: {host, user (the verified claims or null), error (why the cookie failed, or null), x_svc_user}
// GET /page  HTML: "Signed in as <email> (<sub>)" or "Not signed in", for a browser.
import http from "node:http";
import { createRemoteJWKSet, jwtVerify } from "jose";

const AUTH_URL = process.env.AUTH_URL;
const jwks = createRemoteJWKSet(new URL(`${AUTH_URL}/svc-auth/jwks`));

function cookie(header, name) {
  for (const part of (header || "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return null;
}

async function whoIs(req) {
  const host = (req.headers.host || "").replace(/:\d+$/, "");
  const token = cookie(req.headers.cookie, "__Host-svc_id");
  if (!token) return { host, user: null, error: null };
  try {
    const { payload } = await jwtVerify(token, jwks, {
      algorithms: ["RS256"],
      issuer: AUTH_URL,
      audience: host,
      requiredClaims: ["exp", "sub"],
    });
    return { host, user: payload, error: null };
  } catch (e) {
    return { host, user: null, error: e.code || String(e) };
  }
}

http
  .createServer(async (req, res) => {
    const who = await whoIs(req);
    if (req.url === "/page") {
      const text = who.user ? `Signed in as ${who.user.email} (${who.user.sub})` : "Not signed in";
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(`<!doctype html><title>sign-in</title><p id="who">${text.replace(/[<>&]/g, "")}</p>`);
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ...who, x_svc_user: req.headers["x-svc-user"] ?? null }));
  })
  .listen(Number(process.env.SVC_HTTP_PORT), "0.0.0.0");
