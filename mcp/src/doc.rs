//! The MCP endpoint in the OpenAPI document: one JSON-RPC route rather than a REST resource, described so that
//! the document still names every public route. The tools themselves are listed by `tools/list`.

use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItemBuilder};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{Content, ObjectBuilder, ResponseBuilder, Type};

use slipway_rest::svc_auth_doc::error;

/// Adds `POST /mcp` to `doc`.
pub fn document(doc: &mut utoipa::openapi::OpenApi) {
    let object = || Content::new(Some(ObjectBuilder::new().schema_type(Type::Object)));
    let operation = OperationBuilder::new()
        .tag("mcp")
        .summary(Some("The MCP server (streamable HTTP, stateless)"))
        .description(Some(
            "A JSON-RPC message of the Model Context Protocol: initialize, tools/list, tools/call. Each tool calls \
             the REST route it wraps with the caller's bearer, so it answers as that route does; a route's refusal, \
             or an argument the tool does not take, is a tool result with isError and the error envelope as \
             structured content.",
        ))
        .security(SecurityRequirement::new("bearer", Vec::<String>::new()))
        .request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", object())
                .build(),
        ))
        .response(
            "200",
            ResponseBuilder::new()
                .description("the JSON-RPC answer")
                .content("application/json", object())
                .build(),
        )
        .response("202", ResponseBuilder::new().description("a notification, taken").build())
        .response(
            "400",
            ResponseBuilder::new()
                .description(
                    "a JSON-RPC error: the body is not JSON (-32700) or not a JSON-RPC message (-32600)",
                )
                .content("application/json", object())
                .build(),
        )
        .response(
            "401",
            error("auth_required, token_invalid or token_revoked, with WWW-Authenticate: Bearer"),
        )
        .response(
            "403",
            ResponseBuilder::new()
                .description(
                    "a JSON-RPC error: the Origin header names none of the API's origins (its public URL, its \
                     console, loopback)",
                )
                .content("application/json", object())
                .build(),
        )
        .response(
            "413",
            ResponseBuilder::new()
                .description(format!(
                    "a JSON-RPC error: the body is over {} bytes",
                    super::transport::BODY_LIMIT
                ))
                .content("application/json", object())
                .build(),
        )
        .build();
    let item = PathItemBuilder::new()
        .operation(HttpMethod::Post, operation)
        .build();
    doc.paths.paths.insert(super::PATH.to_owned(), item);
}
