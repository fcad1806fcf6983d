//! Content types of static files by extension, and which of them are worth compressing. A short table of what
//! websites actually ship; anything else is `application/octet-stream`, as nginx's default.

/// Type of files whose extension is not in the table.
pub const DEFAULT: &str = "application/octet-stream";

const TYPES: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("webmanifest", "application/manifest+json"),
    ("xml", "application/xml"),
    ("rss", "application/rss+xml"),
    ("atom", "application/atom+xml"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/x-icon"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
];

/// The content type of the file at `path`, by its extension (case-insensitive).
pub fn for_path(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((_, ext)) = name.rsplit_once('.') else {
        return DEFAULT;
    };
    TYPES
        .iter()
        .find(|(e, _)| e.eq_ignore_ascii_case(ext))
        .map_or(DEFAULT, |(_, t)| t)
}

/// Whether responses of this type shrink under gzip or brotli (text, and the structured formats built on it).
pub fn compressible(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json"
                | "application/manifest+json"
                | "application/xml"
                | "application/rss+xml"
                | "application/atom+xml"
                | "image/svg+xml"
                | "application/wasm"
                | "image/x-icon"
                | "font/ttf"
                | "font/otf"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_the_extension() {
        assert_eq!(for_path("index.html"), "text/html; charset=utf-8");
        assert_eq!(for_path("a/b/app.JS"), "text/javascript; charset=utf-8");
        assert_eq!(for_path("logo.svg"), "image/svg+xml");
        assert_eq!(for_path("font.woff2"), "font/woff2");
        assert_eq!(for_path("README"), DEFAULT);
        assert_eq!(
            for_path("dir.d/README"),
            DEFAULT,
            "a dot in a directory is no extension"
        );
        assert_eq!(for_path("archive.tar.unknown"), DEFAULT);
    }

    #[test]
    fn text_compresses_and_media_does_not() {
        assert!(compressible("text/html; charset=utf-8"));
        assert!(compressible("application/json"));
        assert!(compressible("image/svg+xml"));
        assert!(!compressible("image/png"));
        assert!(!compressible("font/woff2"));
        assert!(!compressible(DEFAULT));
    }
}
