//! Graphs drawn on the server as inline SVG: a channel's deploy times, an account's bandwidth by day, and how much
//! of a plan's storage is used.
//! No script or library draws them, so they show without JavaScript, scale with the page (a phone's width
//! included) and take their colours from the stylesheet. Each has a text alternative for screen readers.

use chrono::{DateTime, Utc};
use slipway_rest::deploys::DeployEntry;
use slipway_rest::plans::BandwidthDay;

use crate::html::{Markup, html};

/// Deploys the deploy-time graph shows at most, the newest.
const DEPLOYS_SHOWN: usize = 20;
/// The graph's drawing box: each bar's slot is `SLOT` wide; bars stand on a baseline `HEIGHT` down.
const SLOT: u32 = 24;
const HEIGHT: u32 = 80;

/// One finished deploy as the graph draws it.
#[derive(Debug, PartialEq)]
struct Bar {
    /// Milliseconds from its request to its end.
    millis: i64,
    /// `success` or `failed` (its colour).
    outcome: String,
    /// Its commit, shortened.
    sha: String,
    /// When it was requested, as shown in its tooltip.
    requested: String,
}

/// The finished deploys of `history` (the deploy list, newest first), oldest first, at most [`DEPLOYS_SHOWN`].
fn bars(history: &[DeployEntry]) -> Vec<Bar> {
    let at = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let mut bars: Vec<Bar> = history
        .iter()
        .filter_map(|d| {
            let (requested, finished) = (at(&d.created_at)?, at(&d.finished_at)?);
            if !matches!(d.status.as_str(), "success" | "failed") {
                return None;
            }
            Some(Bar {
                millis: (finished - requested).num_milliseconds().max(0),
                outcome: d.status.clone(),
                sha: crate::html::short_sha(&d.git_sha).to_owned(),
                requested: requested.format("%Y-%m-%d %H:%M UTC").to_string(),
            })
        })
        .take(DEPLOYS_SHOWN)
        .collect();
    bars.reverse();
    bars
}

/// A duration of `millis` in words: `0.4 s`, `48 s`, `3 min 5 s`.
fn duration(millis: i64) -> String {
    let seconds = millis / 1000;
    if millis < 10_000 {
        format!("{:.1} s", millis as f64 / 1000.0)
    } else if seconds < 60 {
        format!("{seconds} s")
    } else {
        format!("{} min {} s", seconds / 60, seconds % 60)
    }
}

/// The middle value of `values` (sorted here), the upper of the two middle ones for an even count.
fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// How long the channel's recent deploys took, as bars from oldest to newest coloured by outcome, with the
/// median and the slowest named beside it; nothing when none has finished.
pub fn deploy_times(history: &[DeployEntry]) -> Markup {
    let bars = bars(history);
    if bars.is_empty() {
        return Markup::default();
    }
    let slowest = bars.iter().map(|b| b.millis).max().unwrap_or(0);
    let middle = median(bars.iter().map(|b| b.millis).collect());
    let drawn: Vec<Drawn> = bars
        .iter()
        .map(|bar| Drawn {
            value: bar.millis as f64,
            class: format!("bar-{}", bar.outcome),
            title: format!(
                "{} · {} · {} · requested {}",
                bar.sha,
                bar.outcome,
                duration(bar.millis),
                bar.requested
            ),
        })
        .collect();
    let summary = format!(
        "The last {} finished deploys took {} at the median and {} at the slowest.",
        bars.len(),
        duration(middle),
        duration(slowest),
    );
    // Every deploy at least 2 units high, so an instant one still shows.
    bar_graph(
        "deploy-times",
        &drawn,
        2,
        &summary,
        "Oldest on the left; failed deploys in red.",
    )
}

/// What the edge sent for the account on each day of `days` (`GET /me/usage`'s `bandwidth_days`, oldest first), as
/// bars with the total and the busiest day in words; nothing when the API gave no days.
pub fn bandwidth_days(days: &[BandwidthDay]) -> Markup {
    let days: Vec<(String, u64)> = days
        .iter()
        .map(|d| (d.day.to_string(), crate::html::unsigned(d.bytes)))
        .collect();
    let (Some((first, _)), Some((last, _))) = (days.first(), days.last()) else {
        return Markup::default();
    };
    let total: u64 = days.iter().map(|(_, b)| b).sum();
    let busiest = days.iter().max_by_key(|(_, b)| *b).filter(|(_, b)| *b > 0);
    let drawn: Vec<Drawn> = days
        .iter()
        .map(|(day, bytes)| Drawn {
            value: *bytes as f64,
            class: "bar-sent".into(),
            title: format!("{day} · {}", crate::html::bytes(*bytes)),
        })
        .collect();
    let summary = match busiest {
        Some((day, bytes)) => format!(
            "{} sent from {first} to {last}; the busiest day, {day}, sent {}.",
            crate::html::bytes(total),
            crate::html::bytes(*bytes),
        ),
        None => format!("Nothing sent from {first} to {last}."),
    };
    bar_graph(
        "bandwidth-days",
        &drawn,
        0,
        &summary,
        "One bar a day (UTC), today on the right.",
    )
}

/// One bar of a bar graph.
struct Drawn {
    /// Its size; the largest bar of the graph is full height.
    value: f64,
    /// Its CSS class (its colour).
    class: String,
    /// Its tooltip.
    title: String,
}

/// `bars` side by side, left to right, as the figure `id` with `summary` for screen readers and the caption. Every
/// bar is at least `floor` units high.
fn bar_graph(id: &str, bars: &[Drawn], floor: u32, summary: &str, caption: &str) -> Markup {
    let largest = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    // A graph of zeros is all baseline.
    let scale = if largest > 0.0 { largest } else { 1.0 };
    let width = SLOT * bars.len() as u32;
    // SVG elements are closed explicitly (`{}`): inside HTML, an SVG element is not void.
    html! {
        figure.graph id=(id) {
            svg viewBox={ "0 0 " (width) " " (HEIGHT) } preserveAspectRatio="none" role="img" aria-label=(summary) {
                @for (i, bar) in bars.iter().enumerate() {
                    @let high = (((bar.value / scale) * f64::from(HEIGHT)).round() as u32).clamp(floor, HEIGHT);
                    rect class={ "bar " (bar.class) } x=(i as u32 * SLOT + 3) y=(HEIGHT - high) width=(SLOT - 6)
                        height=(high) { title { (bar.title) } }
                }
            }
            figcaption { (summary) " " (caption) }
        }
    }
}

/// A bar of how much of `limit` bytes `used` fills, with its share in words; nothing without a limit.
pub fn meter(id: &str, used: u64, limit: Option<u64>) -> Markup {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return Markup::default();
    };
    let share = used as f64 / limit as f64;
    let percent = (share * 100.0).round() as u64;
    let filled = (share.min(1.0) * 100.0).round() as u64;
    let class = if share > 1.0 {
        "over"
    } else if share >= 0.8 {
        "near"
    } else {
        "under"
    };
    html! {
        svg.meter id=(id) viewBox="0 0 100 6" preserveAspectRatio="none" role="img" aria-label={ (percent) "% used" } {
            rect.meter-track width="100" height="6" {}
            rect class={ "meter-" (class) } width=(filled) height="6" {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The graphs as the text a browser gets.
    fn deploy_times(history: &[DeployEntry]) -> String {
        super::deploy_times(history).into_string()
    }
    fn bandwidth_days(days: &[BandwidthDay]) -> String {
        super::bandwidth_days(days).into_string()
    }
    fn meter(id: &str, used: u64, limit: Option<u64>) -> String {
        super::meter(id, used, limit).into_string()
    }

    fn deploy(status: &str, created: &str, finished: Option<&str>) -> DeployEntry {
        DeployEntry {
            deploy_id: String::new(),
            git_sha: "0123456789abcdef0123456789abcdef01234567".into(),
            status: status.into(),
            stage: status.into(),
            rewound_from: None,
            created_at: Some(created.into()),
            started_at: None,
            finished_at: finished.map(str::to_owned),
            message: None,
        }
    }

    fn day(day: &str, bytes: i64) -> BandwidthDay {
        BandwidthDay {
            day: day.parse().expect("a date"),
            bytes,
        }
    }

    #[test]
    fn finished_deploys_are_drawn_oldest_first_and_those_in_flight_left_out() {
        let history = [
            deploy("running", "2026-12-01T10:05:00Z", None),
            deploy(
                "failed",
                "2026-12-01T10:02:00Z",
                Some("2026-12-01T10:02:30Z"),
            ),
            deploy(
                "success",
                "2026-12-01T10:00:00Z",
                Some("2026-12-01T10:01:30Z"),
            ),
        ];
        let drawn = bars(&history);
        assert_eq!(
            drawn
                .iter()
                .map(|b| (b.millis, b.outcome.as_str()))
                .collect::<Vec<_>>(),
            [(90_000, "success"), (30_000, "failed")]
        );
        assert_eq!(drawn[0].sha, "0123456789ab");
        let svg = deploy_times(&history);
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(
            svg.contains(r#"class="bar bar-success" x="3" y="0" width="18" height="80""#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"class="bar bar-failed" x="27" y="53" width="18" height="27""#),
            "{svg}"
        );
        assert!(
            svg.contains("took 1 min 30 s at the median and 1 min 30 s at the slowest"),
            "{svg}"
        );
    }

    #[test]
    fn no_finished_deploy_draws_nothing_and_only_the_newest_twenty_are_drawn() {
        assert_eq!(
            deploy_times(&[deploy("queued", "2026-12-01T10:00:00Z", None)]),
            ""
        );
        let many: Vec<DeployEntry> = (0..30)
            .map(|i| {
                deploy(
                    "success",
                    "2026-12-01T10:00:00Z",
                    Some(&format!("2026-12-01T10:00:{i:02}Z")),
                )
            })
            .collect();
        let drawn = bars(&many);
        assert_eq!(drawn.len(), DEPLOYS_SHOWN);
        // The list is newest first: the twenty kept are its first twenty, drawn in reverse.
        assert_eq!(drawn.first().map(|b| b.millis), Some(19_000));
        assert_eq!(drawn.last().map(|b| b.millis), Some(0));
    }

    #[test]
    fn quick_deploys_are_timed_to_a_tenth_of_a_second() {
        let history = [
            deploy(
                "success",
                "2026-12-01T10:00:00.100Z",
                Some("2026-12-01T10:00:00.500Z"),
            ),
            deploy(
                "success",
                "2026-12-01T10:00:00Z",
                Some("2026-12-01T10:00:00.200Z"),
            ),
        ];
        let svg = deploy_times(&history);
        assert!(
            svg.contains("took 0.4 s at the median and 0.4 s at the slowest"),
            "{svg}"
        );
        assert!(
            svg.contains(r#"height="40"><title>0123456789ab · success · 0.2 s"#),
            "{svg}"
        );
        assert_eq!(duration(12_500), "12 s");
        assert_eq!(duration(185_000), "3 min 5 s");
    }

    #[test]
    fn bandwidth_is_a_bar_a_day_scaled_to_the_busiest_and_zero_days_lie_flat() {
        assert_eq!(bandwidth_days(&[]), "");
        let days = [
            day("2026-12-04", 0),
            day("2026-12-05", 2048),
            day("2026-12-06", 512),
        ];
        let svg = bandwidth_days(&days);
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(
            svg.contains(
                r#"class="bar bar-sent" x="3" y="80" width="18" height="0"><title>2026-12-04 · 0 B"#
            ),
            "{svg}"
        );
        assert!(
            svg.contains(r#"x="27" y="0" width="18" height="80"><title>2026-12-05 · 2.0 KiB"#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"x="51" y="60" width="18" height="20""#),
            "{svg}"
        );
        assert!(
            svg.contains("2.5 KiB sent from 2026-12-04 to 2026-12-06; the busiest day, 2026-12-05, sent 2.0 KiB."),
            "{svg}"
        );
        let quiet = bandwidth_days(&[day("2026-12-06", 0)]);
        assert!(
            quiet.contains("Nothing sent from 2026-12-06 to 2026-12-06."),
            "{quiet}"
        );
    }

    #[test]
    fn a_meter_fills_to_its_share_and_says_when_it_is_over() {
        assert_eq!(meter("m", 10, None), "");
        assert_eq!(meter("m", 10, Some(0)), "");
        let half = meter("m", 50, Some(100));
        assert!(half.contains(r#"class="meter-under" width="50""#), "{half}");
        assert!(half.contains(r#"aria-label="50% used""#));
        let over = meter("m", 150, Some(100));
        assert!(over.contains(r#"class="meter-over" width="100""#), "{over}");
        assert!(over.contains(r#"aria-label="150% used""#));
        assert!(meter("m", 85, Some(100)).contains("meter-near"));
    }
}
