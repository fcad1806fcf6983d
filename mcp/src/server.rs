//! The MCP handler: `initialize`, `tools/list` from the catalogue and `tools/call` through it. A tool's refusal
//! (the route's 4xx, or arguments the tool does not take) is a tool result with `isError` and the envelope, so the
//! agent reads why; only an unknown tool and params that are not what a method takes are protocol errors.

use axum::Router;
use axum::http::header;
use rmcp::ErrorData;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, Implementation, InitializeRequestParams, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::tools::{self, Ctx, Output};
use super::wording;
use slipway_core::state::AppState;
use slipway_rest::in_process::{Failure, Rest};

/// What the server tells a client at `initialize`.
const INSTRUCTIONS: &str = "slipway hosts apps from git. Name an app by `app_name` (its name, or owner/name for \
an app shared with you) and a channel by `channel` (e.g. prod). A typical session: create_app, commit_files, \
deploy, get_deploy_log until its first line says success, then get_runtime_log. Refusals carry the REST API's \
error code (scope_denied, protected_action, not_found, ...).";

/// One MCP handler; the transport makes one per request (stateless), so it holds only the router and the state.
#[derive(Clone)]
pub struct Server {
    api: Router,
    state: AppState,
}

impl Server {
    /// A handler whose tools call `api`, forming links on the public URL of `state`.
    pub fn new(api: Router, state: AppState) -> Self {
        Server { api, state }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("slipway", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            tools::catalogue()
                .iter()
                .map(tools::ToolDef::describe)
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = tools::find(&request.name).ok_or_else(|| {
            ErrorData::invalid_params(format!("unknown tool {}", request.name), None)
        })?;
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let authorization = parts.and_then(|p| p.headers.get(header::AUTHORIZATION).cloned());
        let ctx = Ctx {
            rest: Rest::new(self.api.clone(), authorization),
            public_base: self.state.public_urls().api_base(),
        };
        let arguments = request.arguments.unwrap_or_default();
        let reply = tool.call(ctx, arguments).await.map_err(wording::for_agents);
        tracing::info!(tool = tool.name, ok = reply.is_ok(), "mcp tool call");
        Ok(result_of(reply).into())
    }

    /// A request the transport could not read as any method it knows: -32602 when the method is one this server
    /// answers (its params are not what it takes), -32601 otherwise.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let why = match method.as_str() {
            "tools/call" => params_error::<CallToolRequestParams>(params),
            "tools/list" => params_error::<PaginatedRequestParams>(params),
            "initialize" => params_error::<InitializeRequestParams>(params),
            _ => {
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                    method,
                    None,
                ));
            }
        };
        Err(ErrorData::invalid_params(
            format!("the params of {method} are not what it takes: {why}"),
            None,
        ))
    }
}

/// Why `params` do not read as `P`.
fn params_error<P: DeserializeOwned>(params: Option<serde_json::Value>) -> String {
    match serde_json::from_value::<P>(params.unwrap_or_default()) {
        Err(e) => e.to_string(),
        Ok(_) => "they do not fit its schema".to_owned(),
    }
}

/// The tool result of a reply: JSON as text (and as structured content when it is an object), plain text as is,
/// a failure as an error result carrying the status and the envelope.
pub fn result_of(reply: Result<Output, Failure>) -> CallToolResult {
    match reply {
        Ok(Output::Json(value)) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
            if value.is_object() {
                result.structured_content = Some(value);
            }
            result
        }
        Ok(Output::Text(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(failure) => {
            let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
                "{} {}: {}",
                failure.status, failure.code, failure.message
            ))]);
            result.structured_content = Some(json!({
                "status": failure.status,
                "error": {"code": failure.code, "message": failure.message},
            }));
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_an_error_result_carrying_the_envelope() {
        let result = result_of(Err(Failure::new(
            axum::http::StatusCode::FORBIDDEN,
            "protected_action",
            "an agent credential may not do this",
        )));
        assert_eq!(result.is_error, Some(true));
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["status"], 403);
        assert_eq!(structured["error"]["code"], "protected_action");
    }

    #[test]
    fn an_object_answer_is_also_structured_content() {
        let result = result_of(Ok(Output::Json(json!({"sha": "abc"}))));
        assert_ne!(result.is_error, Some(true));
        assert_eq!(result.structured_content, Some(json!({"sha": "abc"})));
        let text = result_of(Ok(Output::Text("status: success".into())));
        assert_eq!(text.structured_content, None);
    }
}
