//! An id for every request a server answers: it goes back in the `x-request-id` header (and, from the API, in
//! the error body), and every log line of the request carries it, so the id a client reports finds the request's
//! logs. The id is always the server's own: one a client sends is not trusted (a tenant could make its requests'
//! lines look like another's).
//!
//! The id lives in a task-local for the request's handling ([`assign`]), so code far from the request (an error
//! turned into its answer, a span opened by a layer, the inner calls an MCP tool makes) reads it with [`current`]
//! without it being passed down.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;

/// The header the id is answered in.
pub const HEADER: &str = "x-request-id";

tokio::task_local! {
    static REQUEST_ID: String;
}

/// A new id: 16 uppercase hex digits (the form S3 gives its request ids).
pub fn new_id() -> String {
    format!("{:016X}", rand::random::<u64>())
}

/// The id of the request being handled, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Middleware: handles the request under a new id, and answers it in [`HEADER`].
pub async fn assign(mut req: Request, next: Next) -> Response {
    let id = new_id();
    req.headers_mut().remove(HEADER);
    let mut res = REQUEST_ID.scope(id.clone(), next.run(req)).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(HEADER, value);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt as _;

    #[tokio::test]
    async fn every_request_gets_an_id_of_the_servers_own_that_handlers_read() {
        let app = Router::new()
            .route("/", get(|| async { current().unwrap_or_default() }))
            .layer(axum::middleware::from_fn(assign));
        let mut answered = Vec::new();
        for _ in 0..2 {
            let req = Request::get("/")
                .header(HEADER, "forged")
                .body(axum::body::Body::empty())
                .unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            let header = res.headers()[HEADER].to_str().unwrap().to_owned();
            let body = axum::body::to_bytes(res.into_body(), 64).await.unwrap();
            assert_eq!(
                header.as_bytes(),
                &body[..],
                "the handler saw the answered id"
            );
            assert_eq!(header.len(), 16);
            assert_ne!(header, "forged");
            answered.push(header);
        }
        assert_ne!(answered[0], answered[1]);
        assert_eq!(current(), None, "outside a request there is none");
    }
}
