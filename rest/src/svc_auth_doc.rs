//! End-user sign-in's routes in the OpenAPI document. The edge serves them (`slipway_edge::svc_auth`), not this
//! server: on every channel host and verified custom domain, and on the auth host `{auth_url}`; each path names
//! its servers, so the document covers every public route of the platform in one place.

use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItemBuilder,
};
use utoipa::openapi::server::{ServerBuilder, ServerVariableBuilder};
use utoipa::openapi::{Content, ObjectBuilder, Ref, Required, ResponseBuilder, Server, Type};

/// A channel host or verified custom domain.
fn channel_host() -> Server {
    ServerBuilder::new()
        .url("https://{host}")
        .description(Some(
            "any channel hostname or verified custom domain, served by the edge",
        ))
        .parameter(
            "host",
            ServerVariableBuilder::new().default_value("blog-admin.apps.example.com"),
        )
        .build()
}

/// `{auth_url}`.
fn auth_host() -> Server {
    ServerBuilder::new()
        .url("{auth_url}")
        .description(Some(
            "the issuer of identity cookies (the chart's signIn.authUrl), served by the edge",
        ))
        .parameter(
            "auth_url",
            ServerVariableBuilder::new().default_value("https://auth.apps.example.com"),
        )
        .build()
}

fn query(name: &str, required: bool, description: &str) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// A response in the error envelope, described.
pub fn error(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(Ref::from_schema_name("ErrorEnvelope"))),
        )
        .build()
}

fn plain(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new().description(description).build()
}

fn json(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(ObjectBuilder::new().schema_type(Type::Object))),
        )
        .build()
}

const RETURN_TO: &str =
    "a path on this host (one leading /, no backslash, control character or space); default /";

/// Adds the sign-in routes to `doc`.
pub fn document(doc: &mut utoipa::openapi::OpenApi) {
    let get = |summary: &str, operation: OperationBuilder| {
        operation.tag("sign-in").summary(Some(summary)).build()
    };
    let routes = [
        (
            "/svc-auth/login",
            channel_host(),
            get(
                "Start signing in; come back to return_to with the identity cookie set",
                OperationBuilder::new()
                    .parameter(query("return_to", false, RETURN_TO))
                    .response("302", plain("to the auth host's authorize step, with the state cookie set"))
                    .response("400", error("bad_request: return_to leaves the host, or plain HTTP"))
                    .response("503", error("sign_in_unavailable: no upstream identity provider")),
            ),
        ),
        (
            "/svc-auth/logout",
            channel_host(),
            get(
                "Clear the identity cookie",
                OperationBuilder::new()
                    .parameter(query("return_to", false, RETURN_TO))
                    .response("302", plain("to return_to, the identity cookie cleared"))
                    .response("400", error("bad_request: return_to leaves the host")),
            ),
        ),
        (
            "/svc-auth/whoami",
            channel_host(),
            get(
                "Who the identity cookie names",
                OperationBuilder::new().response(
                    "200",
                    json("{logged_in: true, email, name, sub}, or {logged_in: false, login_url}"),
                ),
            ),
        ),
        (
            "/svc-auth/callback",
            channel_host(),
            get(
                "The sign-in's return: on the auth host from the upstream provider (code, state); on the channel \
                 host from the auth host (code), which sets the identity cookie",
                OperationBuilder::new()
                    .parameter(query("code", true, "the provider's code, or the auth host's handoff"))
                    .parameter(query("state", false, "on the auth host: the provider's state"))
                    .response("302", plain("on to the channel host, or to return_to with the cookie set"))
                    .response(
                        "400",
                        error("bad_request: expired, started in another browser, for another host, or refused"),
                    )
                    .response("502", error("sign_in_failed: the provider's answer does not verify")),
            ),
        ),
        (
            "/svc-auth/authorize",
            auth_host(),
            get(
                "Send the person to the upstream provider for a channel host",
                OperationBuilder::new()
                    .parameter(query("host", true, "the channel host or verified custom domain signing in"))
                    .parameter(query("state", true, "the channel host's state for this browser"))
                    .parameter(query("return_to", false, RETURN_TO))
                    .response("302", plain("to the upstream provider, with the flow cookie set"))
                    .response("400", error("bad_request: a host the platform does not serve, or bad input"))
                    .response("503", error("sign_in_unavailable: the provider cannot be reached")),
            ),
        ),
        (
            "/svc-auth/jwks",
            auth_host(),
            get(
                "The RS256 public keys of identity cookies (JWK set, kid = RFC 7638 thumbprint)",
                OperationBuilder::new().response("200", json("{keys: [JWK]}; Cache-Control: public, max-age=300")),
            ),
        ),
        (
            "/.well-known/openid-configuration",
            auth_host(),
            get(
                "OpenID Connect discovery",
                OperationBuilder::new()
                    .response("200", json("issuer, authorization_endpoint, jwks_uri and the supported values")),
            ),
        ),
    ];
    for (path, server, operation) in routes {
        let mut servers = vec![server];
        if path == "/svc-auth/callback" {
            servers.push(auth_host());
        }
        let item = PathItemBuilder::new()
            .operation(HttpMethod::Get, operation)
            .servers(Some(servers))
            .build();
        doc.paths.paths.insert(path.to_owned(), item);
    }
}
