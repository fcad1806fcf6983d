//! Route messages as an agent reads them through tools. A tool answers with its route's envelope, and a few route
//! messages tell an HTTP client what to do next by route (`request one with POST /me/email-verifications`) or by
//! the route's field names (`changes`): an agent cannot call a route, so those phrases become the tools and
//! arguments it can use. Only the message changes; the status and code stay the route's.

use slipway_rest::in_process::Failure;

/// Route phrases and what an agent is told instead, longest first where one contains another.
const PHRASES: [(&str, &str); 5] = [
    (
        "request one with POST /me/email-verifications",
        "request one with request_email_verification",
    ),
    (
        "turn it on with PATCH /apps/{app_id} {\"port_forwarding_enabled\": true}",
        "a person with the owner or admin role turns it on in the app's settings (no tool does)",
    ),
    (
        "GET /apps/{app_id}/forwards shows it once it has",
        "list_exposed_ports shows it once it has",
    ),
    (
        "at least one path in changes, edits or patches",
        "at least one path in files, edits or patches",
    ),
    ("is in both changes and", "is in both files and"),
];

/// `failure` with its message in the words of tools.
pub fn for_agents(mut failure: Failure) -> Failure {
    for (route, tools) in PHRASES {
        if failure.message.contains(route) {
            failure.message = failure.message.replace(route, tools);
        }
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipway_core::error::ApiError;

    /// What an agent reads of a route's refusal.
    fn read(error: ApiError) -> String {
        for_agents(Failure::of_error(&error)).message
    }

    /// A route message names no REST route.
    fn names_no_route(message: &str) {
        for method in ["GET /", "POST /", "PUT /", "PATCH /", "DELETE /"] {
            assert!(!message.contains(method), "{message}");
        }
    }

    #[test]
    fn route_messages_name_tools_instead_of_routes() {
        let forwards = ApiError::Conflict(
            "port forwarding is off for app notes; turn it on with PATCH /apps/{app_id} {\"port_forwarding_enabled\": true} (channel prod)"
                .into(),
        );
        let message = read(forwards);
        names_no_route(&message);
        assert!(message.contains("no tool does"), "{message}");
        assert!(message.ends_with("(channel prod)"), "{message}");
        let pending = ApiError::Unavailable(
            "the forward was recorded but has no address yet; GET /apps/{app_id}/forwards shows it once it has"
                .into(),
        );
        assert!(read(pending).ends_with("; list_exposed_ports shows it once it has"));
        let gone = ApiError::Gone(
            "no verification code is pending; request one with POST /me/email-verifications".into(),
        );
        assert_eq!(
            read(gone),
            "no verification code is pending; request one with request_email_verification"
        );
    }

    #[test]
    fn changeset_messages_name_the_tools_arguments() {
        let request = |changes: &[(&str, &str)], edits: &[(&str, &str)]| {
            slipway_rest::repo::ChangesetRequest {
                message: "m".into(),
                reference: None,
                changes: Some(
                    changes
                        .iter()
                        .map(|(p, c)| ((*p).to_owned(), Some((*c).to_owned())))
                        .collect(),
                ),
                edits: Some(
                    edits
                        .iter()
                        .map(|(p, _)| ((*p).to_owned(), Vec::new()))
                        .collect(),
                ),
                patches: None,
            }
        };
        let empty = slipway_rest::repo::validate(request(&[], &[])).unwrap_err();
        assert_eq!(
            read(empty),
            "a changeset needs at least one path in files, edits or patches"
        );
        let both = slipway_rest::repo::validate(request(&[("a", "x")], &[("a", "")])).unwrap_err();
        assert_eq!(
            read(both),
            "path \"a\" is in both files and edits; a path belongs to exactly one of them"
        );
    }
}
