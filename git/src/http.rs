//! Git's smart HTTP protocol at `/<owner>/<app>.git/...`, served by the real `git upload-pack` and
//! `git receive-pack` in stateless-rpc mode. Request bodies stream into the program's stdin (gzip-compressed ones
//! are inflated on the way) and its stdout streams back as the response body, so no pack is ever held in memory
//! and none is compressed again. Protocol v2 works by passing the `Git-Protocol` header on as `GIT_PROTOCOL`.
//!
//! Authentication is HTTP Basic with any username and an access token as the password (a Bearer header works
//! too). A missing or wrong token answers 401 with a `WWW-Authenticate` challenge, as git clients expect; a token
//! without `repo:*` 403; a repository that does not exist or belongs to someone else 404. These routes sit outside
//! the REST API's body limit and timeout: a push is as large and as long as it needs to be.

use std::io;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncBufRead, BufReader};
use tokio_util::io::{ReaderStream, StreamReader};

use super::service::{self, Granted, Refusal, Service};
use slipway_auth::scopes;
use slipway_core::caller::{self, Caller};
use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// Chunk size of the response streams.
const CHUNK: usize = 64 * 1024;

/// The realm of the Basic challenge.
pub const REALM: &str = "slipway";

/// The smart HTTP routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/{owner}/{repo}/info/refs", get(info_refs))
        .route("/{owner}/{repo}/git-upload-pack", post(upload_pack))
        .route("/{owner}/{repo}/git-receive-pack", post(receive_pack))
}

/// A refusal in the shape git clients understand: plain text, with the Basic challenge on 401.
#[derive(Debug)]
enum GitError {
    Unauthorized(&'static str),
    Forbidden(String),
    NotFound,
    BadRequest(&'static str),
    TooManyRequests(std::time::Duration),
    Internal(anyhow::Error),
}

impl IntoResponse for GitError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            GitError::Unauthorized(m) => {
                let mut res = (StatusCode::UNAUTHORIZED, format!("{m}\n")).into_response();
                res.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"slipway\""),
                );
                return res;
            }
            GitError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            GitError::NotFound => (StatusCode::NOT_FOUND, "repository not found".to_owned()),
            GitError::BadRequest(m) => (StatusCode::BAD_REQUEST, m.to_owned()),
            GitError::TooManyRequests(wait) => {
                let secs = slipway_core::error::retry_after_secs(wait);
                let message = format!("too many requests with this token; retry in {secs} s\n");
                let mut res = (StatusCode::TOO_MANY_REQUESTS, message).into_response();
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return res;
            }
            GitError::Internal(e) => {
                if let Some(t) = slipway_core::error::transient(&e) {
                    let message = format!("{}\n", t.message);
                    let mut res = (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
                    res.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(t.retry_after_secs));
                    return res;
                }
                tracing::error!(error = format!("{e:#}"), "git request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error".to_owned(),
                )
            }
        };
        (status, format!("{message}\n")).into_response()
    }
}

impl From<Refusal> for GitError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NotFound => GitError::NotFound,
            Refusal::Forbidden(m) => GitError::Forbidden(m),
            Refusal::Internal(e) => GitError::Internal(e),
        }
    }
}

/// The token of a git request: the password of Basic auth (any username), or a Bearer token.
fn token_of(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    if let Some((scheme, rest)) = value.split_once(' ')
        && scheme.eq_ignore_ascii_case("bearer")
    {
        return Some(rest.trim().to_owned());
    }
    slipway_core::caller::basic_credentials(headers).map(|(_, password)| password)
}

/// Authenticates and authorizes a request for `service` on `<owner>/<repo>`.
async fn grant(
    state: &AppState,
    headers: &HeaderMap,
    owner: &str,
    repo: &str,
    service: Service,
) -> Result<(Caller, Granted), GitError> {
    let token = token_of(headers).ok_or(GitError::Unauthorized(
        "authentication required: use an access token as the password",
    ))?;
    let caller = match caller::authenticate(state, &token).await {
        Ok(caller) => caller,
        Err(ApiError::Internal(e)) => return Err(GitError::Internal(e)),
        Err(ApiError::TokenRevoked) => {
            return Err(GitError::Unauthorized("the token has been revoked"));
        }
        Err(ApiError::TooManyRequests(wait)) => return Err(GitError::TooManyRequests(wait)),
        Err(_) => {
            return Err(GitError::Unauthorized(
                "the token is not valid or has expired",
            ));
        }
    };
    caller
        .require_scope(scopes::REPO)
        .map_err(|e| GitError::Forbidden(e.to_string()))?;
    let granted = service::authorize(
        state,
        caller.user_id,
        &caller.username,
        owner,
        repo,
        service,
    )
    .await?;
    Ok((caller, granted))
}

/// `Cache-Control` and friends as `git http-backend` sends them: protocol answers are never cached.
fn no_cache(res: &mut Response) {
    let h = res.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, max-age=0, must-revalidate"),
    );
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    h.insert(
        header::EXPIRES,
        HeaderValue::from_static("Fri, 01 Jan 1980 00:00:00 GMT"),
    );
}

fn git_protocol(headers: &HeaderMap) -> Option<String> {
    headers
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[derive(Debug, serde::Deserialize)]
struct InfoRefsQuery {
    service: Option<String>,
}

/// `GET info/refs?service=...`: the ref advertisement that starts every fetch and push.
async fn info_refs(
    State(state): State<AppState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(query): Query<InfoRefsQuery>,
    headers: HeaderMap,
) -> Result<Response, GitError> {
    let service = query
        .service
        .as_deref()
        .and_then(Service::parse)
        .ok_or(GitError::BadRequest(
            "only git's smart protocol is served: ?service=git-upload-pack or git-receive-pack",
        ))?;
    let (_, granted) = grant(&state, &headers, &owner, &repo, service).await?;
    let protocol = git_protocol(&headers);
    // Only upload-pack speaks v2; receive-pack always answers in v0/v1 with the preamble.
    let v2 = service == Service::UploadPack
        && protocol
            .as_deref()
            .is_some_and(|p| p.split(':').any(|kv| kv == "version=2"));
    let mut child = service::command(service, &granted, true, true, protocol.as_deref())
        .spawn()
        .map_err(|e| GitError::Internal(anyhow::anyhow!("start git {}: {e}", service.name())))?;
    drop(child.stdin.take());
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| GitError::Internal(anyhow::anyhow!("git has no stdout")))?;
    tokio::spawn(service::reap(child, service, granted));
    // Protocol v0/v1 responses start with a `# service=` packet and a flush; v2's capability advertisement does not.
    let prefix = if v2 {
        Vec::new()
    } else {
        let line = format!("# service={}\n", service.name());
        format!("{:04x}{line}0000", line.len() + 4).into_bytes()
    };
    let body =
        futures::stream::once(async move { Ok::<_, io::Error>(axum::body::Bytes::from(prefix)) })
            .chain(ReaderStream::with_capacity(stdout, CHUNK));
    let mut res = Response::new(Body::from_stream(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&format!("application/x-{}-advertisement", service.name()))
            .map_err(|e| GitError::Internal(e.into()))?,
    );
    no_cache(&mut res);
    Ok(res)
}

async fn upload_pack(
    State(state): State<AppState>,
    Path((owner, repo)): Path<(String, String)>,
    req: Request,
) -> Result<Response, GitError> {
    rpc(state, owner, repo, Service::UploadPack, req).await
}

async fn receive_pack(
    State(state): State<AppState>,
    Path((owner, repo)): Path<(String, String)>,
    req: Request,
) -> Result<Response, GitError> {
    rpc(state, owner, repo, Service::ReceivePack, req).await
}

/// `POST git-upload-pack` / `git-receive-pack`: one round of the protocol, streamed through the git program.
async fn rpc(
    state: AppState,
    owner: String,
    repo: String,
    service: Service,
    req: Request,
) -> Result<Response, GitError> {
    let (parts, body) = req.into_parts();
    let (_, granted) = grant(&state, &parts.headers, &owner, &repo, service).await?;
    let expected = format!("application/x-{}-request", service.name());
    if parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes() != expected.as_bytes())
    {
        return Err(GitError::BadRequest(
            "wrong Content-Type for this git service",
        ));
    }
    let gzip = match parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(HeaderValue::as_bytes)
    {
        None | Some(b"identity") => false,
        Some(b"gzip" | b"x-gzip") => true,
        Some(_) => {
            return Err(GitError::BadRequest(
                "only gzip request bodies are understood",
            ));
        }
    };
    let protocol = git_protocol(&parts.headers);
    let mut child = service::command(service, &granted, true, false, protocol.as_deref())
        .spawn()
        .map_err(|e| GitError::Internal(anyhow::anyhow!("start git {}: {e}", service.name())))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(GitError::Internal(anyhow::anyhow!(
            "git has no stdin or stdout"
        )));
    };
    tokio::spawn(service::reap(child, service, granted));

    // Request body -> stdin, concurrently with stdout -> response body.
    let reader = StreamReader::new(body.into_data_stream().map_err(io::Error::other));
    let mut reader: std::pin::Pin<Box<dyn AsyncBufRead + Send>> = if gzip {
        Box::pin(BufReader::with_capacity(
            CHUNK,
            async_compression::tokio::bufread::GzipDecoder::new(reader),
        ))
    } else {
        Box::pin(reader)
    };
    tokio::spawn(async move {
        match tokio::io::copy_buf(&mut reader, &mut stdin).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                // git stopped reading before the end (a push over the size limit, refused with a message in its
                // answer). The client is still sending and reads that answer only once it has sent everything, so
                // the rest is read and thrown away; nothing of it is stored.
                drop(stdin);
                let _ = tokio::io::copy_buf(&mut reader, &mut tokio::io::sink()).await;
            }
            Err(e) => {
                tracing::debug!(service = service.name(), error = %e, "request body ended early")
            }
        }
        // Dropping stdin closes it: git sees the end of the request.
    });
    let mut res = Response::new(Body::from_stream(ReaderStream::with_capacity(
        stdout, CHUNK,
    )));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&format!("application/x-{}-result", service.name()))
            .map_err(|e| GitError::Internal(e.into()))?,
    );
    no_cache(&mut res);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[tokio::test]
    async fn git_paths_of_a_user_named_like_a_rest_route_still_reach_git() {
        use tower::ServiceExt;
        let app: Router = Router::new()
            .route(
                "/apps/{app_id}/channels/{channel_id}",
                get(|| async { "rest" }),
            )
            .route("/apps/{app_id}", get(|| async { "rest" }))
            .merge(
                Router::new()
                    .route("/{owner}/{repo}/info/refs", get(|| async { "git" }))
                    .route("/{owner}/{repo}/git-upload-pack", post(|| async { "git" })),
            );
        for (method, uri, want) in [
            ("GET", "/apps/site.git/info/refs", "git"),
            ("POST", "/apps/site.git/git-upload-pack", "git"),
            ("GET", "/apps/x/channels/y", "rest"),
            ("GET", "/apps/x", "rest"),
        ] {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
            assert_eq!(&body[..], want.as_bytes(), "{method} {uri}");
        }
    }

    #[test]
    fn the_token_is_the_basic_password_whatever_the_username() {
        let mut h = HeaderMap::new();
        let basic = base64::engine::general_purpose::STANDARD.encode("anyone:svc_abc:def");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {basic}")).unwrap(),
        );
        assert_eq!(token_of(&h).as_deref(), Some("svc_abc:def"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer svc_x"),
        );
        assert_eq!(token_of(&h).as_deref(), Some("svc_x"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!!"));
        assert_eq!(token_of(&h), None);
        assert_eq!(token_of(&HeaderMap::new()), None);
    }
}
