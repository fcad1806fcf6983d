//! `/apps/{id}/channels/{cid}/runtime-log`: what a channel's app printed, read through the runtime-log route. The
//! page has controls, not a shell prompt: the last so many lines, only those containing a text, and whether to
//! follow. It builds the route's command from them ([`command`]), quoting the text so that it is only ever
//! searched for. Followed, the output is a live part of the page (console.js reads the page again every 5
//! seconds), so new lines appear without a reload; each read runs the command again in the route's throwaway
//! container, which is why following is a choice.

use axum::extract::{Path, Query};
use axum::http::Method;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use super::person_page;
use crate::ConsoleRouter;
use crate::html::{self, Markup, html, seg};
use crate::session::Person;
use slipway_data::runtime_logs::RuntimeLog;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new().route(
        "/apps/{app_id}/channels/{channel_id}/runtime-log",
        get(runtime_log),
    )
}

/// Lines shown when the page names none, and the most it shows.
const DEFAULT_LINES: u32 = 200;
const MAX_LINES: u32 = 5000;
/// The longest text the filter takes.
const MAX_FILTER: usize = 200;

/// The page's controls, as its form sends them.
#[derive(Debug, Default, Deserialize)]
pub struct Controls {
    /// How many of the last lines (kept between 1 and [`MAX_LINES`]; anything else is the default).
    lines: Option<String>,
    /// Only lines containing this text, in any case.
    filter: Option<String>,
    /// `on` to follow.
    follow: Option<String>,
}

impl Controls {
    fn lines(&self) -> u32 {
        self.lines
            .as_deref()
            .and_then(|l| l.trim().parse::<u32>().ok())
            .map_or(DEFAULT_LINES, |l| l.clamp(1, MAX_LINES))
    }

    fn filter(&self) -> &str {
        let filter = self.filter.as_deref().unwrap_or_default();
        // At most MAX_FILTER bytes, cut at a character's boundary.
        let mut end = filter.len().min(MAX_FILTER);
        while !filter.is_char_boundary(end) {
            end -= 1;
        }
        &filter[..end]
    }

    fn follows(&self) -> bool {
        self.follow.as_deref() == Some("on")
    }
}

/// `text` as one word of a POSIX shell command, taken literally.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell pipeline the runtime-log route runs on `app.log`: its last `lines` lines, or the last `lines` of those
/// that contain `filter` (a fixed string, in any case).
fn command(lines: u32, filter: &str) -> String {
    if filter.is_empty() {
        format!("tail -n {lines} app.log")
    } else {
        format!("grep -F -i -e {} app.log | tail -n {lines}", quoted(filter))
    }
}

/// The controls, for the channel page and this one, filled with `controls`.
pub fn form(here: &str, controls: &Controls) -> Markup {
    html! {
        form.inline #runtime-log method="get" action={ (here) "/runtime-log" } {
            label {
                "Last "
                input type="number" name="lines" value=(controls.lines()) min="1" max=(MAX_LINES) size="5";
                " lines"
            }
            label {
                "Containing "
                input name="filter" value=(controls.filter()) maxlength=(MAX_FILTER) placeholder="any text";
            }
            label {
                input type="checkbox" name="follow" value="on" checked[controls.follows() || controls.lines.is_none()];
                " Follow"
            }
            button type="submit" { "Show" }
        }
    }
}

async fn runtime_log(
    person: Person,
    Path((app_id, channel_id)): Path<(String, String)>,
    Query(controls): Query<Controls>,
) -> Response {
    let here = format!("/apps/{}/channels/{}", seg(&app_id), seg(&channel_id));
    let (lines, filter) = (controls.lines(), controls.filter());
    let request = json!({"command": command(lines, filter)});
    let log: RuntimeLog = match person
        .api
        .write_as(Method::POST, &format!("{here}/runtime/log"), &request)
        .await
    {
        Ok(log) => log,
        Err(f) => return person.refused(&f, &here),
    };
    let facts = html::table(
        &[
            "generation",
            "state",
            "exit code",
            "restarts",
            "started",
            "finished",
        ],
        &[vec![
            html! { (log.container_index) },
            html! {
                (html::status(&log.status))
                @if log.oom_killed { " (out of memory)" }
            },
            html! {
                @match log.exit_code {
                    Some(code) => (code),
                    None => "—",
                }
            },
            html! { (log.restart_count) },
            html::time(log.started_at.as_deref().unwrap_or_default()),
            html::time(log.finished_at.as_deref().unwrap_or_default()),
        ]],
        "",
    );
    let output = &log.output;
    let mut said = Vec::new();
    if output.is_empty() {
        said.push(if filter.is_empty() {
            "The app has printed nothing yet.".to_owned()
        } else {
            format!("No line contains “{filter}”.")
        });
    }
    if log.truncated {
        said.push("The output was cut at 256 KiB: ask for fewer lines.".to_owned());
    }
    if log.timed_out {
        said.push("Reading the log took over 30 seconds: this is what it read by then.".to_owned());
    }
    let shown = html! {
        (facts)
        @for s in &said { p.hint { (s) } }
        pre.log #runtime-output role="log" aria-live="polite" { (output) }
    };
    let body = html! {
        p { a href=(here) { "Back to the channel" } }
        (form(&here, &controls))
        @if controls.follows() { (html::live("runtime-log-output", shown)) } @else { (shown) }
    };
    person_page(&person, "Runtime log", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `command` with `sh` in a directory whose `app.log` holds `log`, as the route's container does.
    fn run(command: &str, log: &str) -> String {
        let dir = std::env::temp_dir().join(format!("runtime-log-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("app.log"), log).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", command])
            .current_dir(&dir)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn the_controls_become_a_pipeline_that_only_searches_for_the_text() {
        let log = "1 GET /\n2 it's DONE\n3 $(touch pwned) `id`\n4 done; rm -rf /\n5 -e flag\n6 GET /health\n";
        assert_eq!(run(&command(2, ""), log), "5 -e flag\n6 GET /health\n");
        assert_eq!(
            run(&command(200, "done"), log),
            "2 it's DONE\n4 done; rm -rf /\n"
        );
        assert_eq!(run(&command(1, "done"), log), "4 done; rm -rf /\n");
        assert_eq!(run(&command(10, "it's"), log), "2 it's DONE\n");
        assert_eq!(
            run(&command(10, "$(touch pwned)"), log),
            "3 $(touch pwned) `id`\n"
        );
        assert_eq!(run(&command(10, "`id`"), log), "3 $(touch pwned) `id`\n");
        assert_eq!(run(&command(10, "-e"), log), "5 -e flag\n");
        assert_eq!(
            run(&command(10, "."), log),
            "",
            "a fixed string, not a pattern"
        );
    }

    #[test]
    fn lines_are_kept_in_range_and_the_filter_is_bounded() {
        let controls = |lines: &str, filter: &str| Controls {
            lines: Some(lines.into()),
            filter: Some(filter.into()),
            follow: None,
        };
        assert_eq!(controls("50", "").lines(), 50);
        assert_eq!(controls("0", "").lines(), 1);
        assert_eq!(controls("99999", "").lines(), MAX_LINES);
        assert_eq!(controls("many", "").lines(), DEFAULT_LINES);
        assert_eq!(Controls::default().lines(), DEFAULT_LINES);
        let long = "é".repeat(MAX_FILTER);
        let cut = controls("1", &long);
        assert_eq!(cut.filter().len(), MAX_FILTER);
        assert!(cut.filter().chars().all(|c| c == 'é'));
        // The form follows by default, and keeps what was asked.
        let form = |controls: &Controls| form("/x", controls).into_string();
        assert!(form(&Controls::default()).contains(" checked>"));
        let asked = form(&controls("20", "<b>"));
        assert!(
            asked.contains(r#"value="20""#) && asked.contains(r#"value="&lt;b&gt;""#),
            "{asked}"
        );
        assert!(!asked.contains(" checked>"), "{asked}");
    }
}
