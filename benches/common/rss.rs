//! This process's peak resident memory, for benchmarks that show their memory stays flat whatever the data's size
//! (`postgres`, `bucket_checkpoint`, `git_transport`). Included with `#[path]`.

/// This process's peak resident memory so far, in MiB (`VmHWM`).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
