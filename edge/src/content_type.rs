//! Content types of static files by extension (`mime_guess`'s table, the one most Rust file servers use), and
//! which of them are worth compressing. An unknown extension is `application/octet-stream`, as nginx's default.

use http::HeaderValue;
use mime::Mime;

/// The `Content-Type` of the file at `path`, by its extension (case-insensitive). Text and scripts say
/// `charset=utf-8`: sites are written in it, and a browser left to guess may guess otherwise.
pub fn for_path(path: &str) -> HeaderValue {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mime = name
        .rsplit_once('.')
        .and_then(|(_, ext)| mime_guess::from_ext(ext).first())
        .unwrap_or(mime::APPLICATION_OCTET_STREAM);
    let value = if is_text(&mime) && mime.get_param(mime::CHARSET).is_none() {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

fn is_text(mime: &Mime) -> bool {
    mime.type_() == mime::TEXT || mime.subtype() == mime::JAVASCRIPT
}

/// Whether responses of this type shrink under gzip or brotli: text, the structured formats built on it, and the
/// binary formats that are not compressed already.
pub fn compressible(content_type: &HeaderValue) -> bool {
    let Some(mime) = content_type
        .to_str()
        .ok()
        .and_then(|v| v.parse::<Mime>().ok())
    else {
        return false;
    };
    let structured = mime
        .suffix()
        .is_some_and(|s| s == mime::JSON || s == mime::XML);
    is_text(&mime)
        || structured
        || matches!(
            mime.essence_str(),
            "application/json"
                | "application/xml"
                | "image/svg+xml"
                | "application/wasm"
                | "image/x-icon"
                | "font/ttf"
                | "font/otf"
                | "application/font-sfnt"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_of(path: &str) -> String {
        for_path(path).to_str().unwrap().to_owned()
    }

    #[test]
    fn types_follow_the_extension() {
        assert_eq!(type_of("index.html"), "text/html; charset=utf-8");
        assert_eq!(type_of("a/b/app.JS"), "text/javascript; charset=utf-8");
        assert_eq!(type_of("m.mjs"), "application/javascript; charset=utf-8");
        assert_eq!(type_of("logo.svg"), "image/svg+xml");
        assert_eq!(type_of("font.woff2"), "font/woff2");
        assert_eq!(type_of("app.webmanifest"), "application/manifest+json");
        assert_eq!(type_of("README"), "application/octet-stream");
        assert_eq!(
            type_of("dir.d/README"),
            "application/octet-stream",
            "a dot in a directory is no extension"
        );
        assert_eq!(type_of("archive.tar.unknown"), "application/octet-stream");
    }

    #[test]
    fn text_compresses_and_media_does_not() {
        let compresses = |path: &str| compressible(&for_path(path));
        for path in [
            "a.html",
            "a.css",
            "a.js",
            "a.json",
            "a.svg",
            "a.webmanifest",
            "a.xml",
            "a.wasm",
        ] {
            assert!(compresses(path), "{path}");
        }
        for path in ["a.png", "a.jpg", "a.woff2", "a.mp4", "a.zip", "README"] {
            assert!(!compresses(path), "{path}");
        }
    }
}
