//! Figures from rounds: a benchmark whose sides take turns for several rounds reports each side's median, so one
//! round disturbed by the machine's other work moves nothing. Shared by `blob` and `forward`. Included with
//! `#[path]`.

/// The median of `figures` (the upper one of an even count).
pub fn median(mut figures: Vec<f64>) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}
