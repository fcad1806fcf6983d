//! Size accounting of a built image: the total (config and layers, as stored in the registry), the warm base its
//! leading layers are, and the charged size (the total without that base's layers) that the plan caps.

/// One layer (or config) blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// `sha256:...`.
    pub digest: String,
    /// Size in bytes as stored (compressed).
    pub size: u64,
}

/// An image's manifest, as far as sizes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The config blob.
    pub config: Blob,
    /// The layers, base first.
    pub layers: Vec<Blob>,
}

impl Image {
    /// Config and layers, in bytes.
    pub fn total_size(&self) -> u64 {
        self.config.size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }
}

/// A warm base present in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmBase {
    /// Its name, e.g. `node:22-slim`.
    pub name: &'static str,
    /// Its layers, base first.
    pub layers: Vec<Blob>,
}

/// The sizes of a built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    /// Config and layers.
    pub total: u64,
    /// The total without the matched base's layers.
    pub charged: u64,
    /// The warm base whose layers the image starts with (the longest such), if any.
    pub matched_base: Option<&'static str>,
}

/// Accounts `image` against the warm bases: the longest base whose layers are the image's leading layers is
/// matched, and its layers are not charged.
pub fn account(image: &Image, bases: &[WarmBase]) -> Sizes {
    let matched = bases
        .iter()
        .filter(|base| !base.layers.is_empty() && image.layers.starts_with(&base.layers))
        .max_by_key(|base| base.layers.len());
    let exempt: u64 = matched.map_or(0, |b| b.layers.iter().map(|l| l.size).sum());
    let total = image.total_size();
    Sizes {
        total,
        charged: total.saturating_sub(exempt),
        matched_base: matched.map(|b| b.name),
    }
}

/// `bytes` for people: `512 MiB`, `41.2 MiB`, `3 KiB`, `900 B`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    // Display only: the precision of f64 is plenty for one decimal.
    #[allow(clippy::cast_precision_loss)]
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let text = format!("{value:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[unit])
}

/// The deploy log's size line, e.g. `[build] image 41.2 MiB, charged 3.1 MiB of 512 MiB (base node:22-slim)`.
pub fn size_line(sizes: &Sizes, cap: u64) -> String {
    let base = match sizes.matched_base {
        Some(name) => format!("base {name}"),
        None => "no warm base matched: every layer is charged".to_owned(),
    };
    format!(
        "[build] image {}, charged {} of {} ({base})",
        human_size(sizes.total),
        human_size(sizes.charged),
        human_size(cap)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(digest: &str, size: u64) -> Blob {
        Blob {
            digest: format!("sha256:{digest}"),
            size,
        }
    }

    fn bases() -> Vec<WarmBase> {
        vec![
            WarmBase {
                name: "debian:trixie-slim",
                layers: vec![blob("deb", 30_000_000)],
            },
            WarmBase {
                name: "python:3.13-slim",
                layers: vec![blob("deb", 30_000_000), blob("py", 20_000_000)],
            },
            WarmBase {
                name: "node:22-slim",
                layers: vec![blob("deb", 30_000_000), blob("node", 40_000_000)],
            },
        ]
    }

    #[test]
    fn the_longest_matching_base_is_exempt_and_the_rest_is_charged() {
        let image = Image {
            config: blob("cfg", 2_000),
            layers: vec![
                blob("deb", 30_000_000),
                blob("py", 20_000_000),
                blob("app", 3_000_000),
            ],
        };
        let sizes = account(&image, &bases());
        assert_eq!(
            sizes,
            Sizes {
                total: 53_002_000,
                charged: 3_002_000,
                matched_base: Some("python:3.13-slim"),
            }
        );
    }

    #[test]
    fn a_base_counts_only_as_leading_layers() {
        // The node layer sits on another first layer: not node:22-slim.
        let image = Image {
            config: blob("cfg", 1_000),
            layers: vec![blob("other", 5_000), blob("node", 40_000_000)],
        };
        let sizes = account(&image, &bases());
        assert_eq!(sizes.matched_base, None);
        assert_eq!(sizes.charged, sizes.total);
        // The base alone, unchanged: only the config is charged.
        let image = Image {
            config: blob("cfg", 1_000),
            layers: vec![blob("deb", 30_000_000)],
        };
        let sizes = account(&image, &bases());
        assert_eq!(
            (sizes.matched_base, sizes.charged),
            (Some("debian:trixie-slim"), 1_000)
        );
        assert_eq!(account(&image, &[]).matched_base, None);
    }

    #[test]
    fn sizes_read_like_the_spec_caps() {
        assert_eq!(human_size(900), "900 B");
        assert_eq!(human_size(3 * 1024), "3 KiB");
        assert_eq!(human_size(43_200_000), "41.2 MiB");
        assert_eq!(human_size(536_870_912), "512 MiB");
        assert_eq!(human_size(2 << 30), "2 GiB");
        let sizes = Sizes {
            total: 43_200_000,
            charged: 3_250_586,
            matched_base: Some("node:22-slim"),
        };
        assert_eq!(
            size_line(&sizes, 536_870_912),
            "[build] image 41.2 MiB, charged 3.1 MiB of 512 MiB (base node:22-slim)"
        );
    }
}
