//! A write the API refused, brought back to the page whose form sent it. The page answers with the refusal's
//! status, says what was wrong in words above that form, and fills the form with what was typed, so a typo in one
//! field costs one correction, not the whole form again. Only a sign-in that stopped working leaves the page (for
//! the sign-in page); a page that cannot be read any more answers as its read does.
//!
//! A secret's value is the one field never sent back: the page that answers a refusal is not the place for it.

use axum::http::StatusCode;
use axum::response::Response;
use slipway_rest::in_process::Failure;

use crate::html::{self, Markup, html};
use crate::session::{Fields, Write};

/// A refused write: which form sent it, the route's status and message, and the fields as typed.
pub struct Retry<'a> {
    form: &'static str,
    status: StatusCode,
    message: String,
    fields: &'a Fields,
}

impl<'a> Retry<'a> {
    /// The refusal `failure` of what form `form` (its `id`) sent with `fields`.
    pub fn new(form: &'static str, failure: &Failure, fields: &'a Fields) -> Self {
        Self {
            form,
            status: StatusCode::from_u16(failure.status).unwrap_or(StatusCode::BAD_GATEWAY),
            message: html::sentence(&failure.message),
            fields,
        }
    }

    /// The status the page answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

/// What a page's form `id` shows: the refusal and the typed fields when it was this form's, else nothing.
#[derive(Clone, Copy)]
pub struct Form<'a>(Option<&'a Retry<'a>>);

impl<'a> Form<'a> {
    /// The form `id` of a page answering `retry` (or a plain view of the page, `None`).
    pub fn of(retry: Option<&'a Retry<'a>>, id: &str) -> Self {
        Self(retry.filter(|r| r.form == id))
    }

    /// What was typed into `name`, as it was typed (a value may start or end with spaces); `None` when the form was
    /// not sent.
    pub fn typed(&self, name: &str) -> Option<&'a str> {
        self.0.map(|r| r.fields.raw(name))
    }

    /// The value of an input `name`: what was typed, else `default`; `None` when both are empty (for maud's
    /// optional attribute, `value=[form.value(..)]`).
    pub fn value<'v>(&self, name: &str, default: &'v str) -> Option<&'v str>
    where
        'a: 'v,
    {
        Some(self.typed(name).unwrap_or(default)).filter(|v| !v.is_empty())
    }

    /// `<option>`s of a select `name`, each `(value, label)`; the typed one selected (else the first).
    pub fn options(&self, name: &str, options: &[(&str, &str)]) -> Markup {
        let chosen = self.typed(name).map(str::trim);
        html! {
            @for (value, label) in options {
                option value=(value) selected[chosen == Some(value)] { (label) }
            }
        }
    }

    /// The refusal's message as an alert, for above the form; nothing when the form was not refused.
    pub fn alert(&self) -> Markup {
        html! {
            @if let Some(r) = self.0 {
                p.banner.error role="alert" data-refused=(r.form) { (r.message) }
            }
        }
    }
}

/// What a write whose form `form` the API refused answers: the sign-in page, by way of `back`, when the session
/// stopped working (401, [`crate::session::Person::refused`]); else the page `page` renders with the refusal over
/// that form and the fields as typed.
pub async fn refused(
    write: &Write,
    form: &'static str,
    failure: &Failure,
    back: &str,
    page: impl AsyncFnOnce(&Retry<'_>) -> Response,
) -> Response {
    if failure.status == 401 {
        return write.person.refused(failure, back);
    }
    page(&Retry::new(form, failure, &write.fields)).await
}

/// The status a page answers with: the refusal's when it answers one, else 200.
pub fn status(retry: Option<&Retry<'_>>) -> StatusCode {
    retry.map_or(StatusCode::OK, Retry::status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure::new(
            StatusCode::CONFLICT,
            "conflict",
            "an app named \"web\" already exists",
        )
    }

    #[test]
    fn the_refused_form_gets_its_fields_back_escaped() {
        let fields = Fields::parse(b"name=%3Cweb%3E+&template=docker");
        let failure = failure();
        let retry = Retry::new("create-app", &failure, &fields);
        let form = Form::of(Some(&retry), "create-app");
        let input = html! { input name="name" value=[form.value("name", "")]; };
        assert_eq!(
            input.into_string(),
            r#"<input name="name" value="&lt;web&gt; ">"#
        );
        assert_eq!(
            form.options("template", &[("static", "static"), ("docker", "docker")])
                .into_string(),
            r#"<option value="static">static</option><option value="docker" selected>docker</option>"#
        );
        let alert = form.alert().into_string();
        assert!(alert.contains(r#"role="alert""#), "{alert}");
        assert!(alert.contains("already exists"), "{alert}");
        assert!(!alert.contains("(conflict)"), "{alert}");
        assert_eq!(status(Some(&retry)), StatusCode::CONFLICT);
    }

    #[test]
    fn another_form_on_the_page_and_a_plain_view_show_no_refusal() {
        let fields = Fields::parse(b"username=bob");
        let failure = failure();
        let retry = Retry::new("add-member", &failure, &fields);
        for form in [
            Form::of(Some(&retry), "transfer"),
            Form::of(None, "add-member"),
        ] {
            assert_eq!(form.alert().into_string(), "");
            assert_eq!(form.value("username", "prefilled"), Some("prefilled"));
            assert_eq!(form.value("username", ""), None);
            assert_eq!(form.typed("username"), None);
        }
        assert_eq!(status(None), StatusCode::OK);
    }
}
