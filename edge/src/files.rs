//! HTTP answers for the files of a static site: `index.html` for the root and for directories, a redirect for a
//! directory asked for without its slash, content types, entity tags and `If-None-Match`, single byte ranges
//! (`Range`, `If-Range`), and gzip or brotli for text when the client accepts them. A site and a request head in, a
//! response out: for a file in memory, a reference to bytes computed once per content (never compressed or copied
//! per request); for a file of the disk tier, the file streamed from disk, as committed (no compressed forms), with
//! the same entity tags and ranges.
//!
//! The conditional headers are read with the `headers` crate. `Range` is read here: the crates at hand either do
//! not check a range against the length or refuse a suffix longer than the file, which RFC 9110 serves whole, and
//! neither tells a malformed header (ignored) from an unsatisfiable one (416).

use bytes::Bytes;
use headers::{ETag, HeaderMapExt, IfNoneMatch, IfRange};
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, IF_NONE_MATCH, IF_RANGE, LOCATION, RANGE, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};

use super::file_body::FileBody;
use super::site::{Blob, Content, FileEntry, Lookup, Site, etag};
use super::{EdgeBody, pages};

/// Browsers revalidate every time (a deploy can change any file); the entity tag makes that a cheap 304.
const CACHE_CONTROL_VALUE: &str = "public, max-age=0, must-revalidate";
/// The page a site may ship for missing paths.
const NOT_FOUND_PAGE: &str = "404.html";

/// Answers a request for `path` (as sent, percent-encoded, with its leading `/`) with `query` from `site`.
pub async fn respond(
    site: &Site,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response<EdgeBody> {
    if method != Method::GET && method != Method::HEAD {
        let mut res = pages::page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method not allowed",
            "A static site answers GET and HEAD only.",
        );
        res.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return res;
    }
    let Some(relative) = site_path(path) else {
        return not_found(site, method, headers).await;
    };
    match site.lookup(&relative) {
        Lookup::File(file) => file_response(file, StatusCode::OK, method, headers).await,
        Lookup::Directory => {
            let location = match query {
                Some(q) => format!("{path}/?{q}"),
                None => format!("{path}/"),
            };
            let mut res = pages::page(
                StatusCode::MOVED_PERMANENTLY,
                "Moved",
                "This is a directory; its address ends with a slash.",
            );
            if let Ok(value) = HeaderValue::from_str(&location) {
                res.headers_mut().insert(LOCATION, value);
            }
            res
        }
        Lookup::Missing => not_found(site, method, headers).await,
    }
}

async fn not_found(site: &Site, method: &Method, headers: &HeaderMap) -> Response<EdgeBody> {
    match site.file(NOT_FOUND_PAGE) {
        Some(page) => {
            // Conditional and range headers aim at the missing resource, not at the error page.
            let mut plain = headers.clone();
            for name in [IF_NONE_MATCH, RANGE, IF_RANGE] {
                plain.remove(name);
            }
            file_response(page, StatusCode::NOT_FOUND, method, &plain).await
        }
        None => pages::page(
            StatusCode::NOT_FOUND,
            "Not found",
            "This site has no file at this address.",
        ),
    }
}

/// The site-relative path a request path names: percent-decoded, `.` and empty segments dropped, `..` applied
/// (never above the root), a trailing slash kept. `None` for paths that do not decode or leave the root.
pub fn site_path(path: &str) -> Option<String> {
    let decoded = percent_decode(path)?;
    let mut parts: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    let mut relative = parts.join("/");
    if decoded.ends_with('/') && !relative.is_empty() {
        relative.push('/');
    }
    Some(relative)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let value = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(value);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(out).ok()?;
    (!decoded.contains('\0')).then_some(decoded)
}

/// The encodings a client takes, from `Accept-Encoding`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

fn accepts(headers: &HeaderMap, wanted: &str) -> bool {
    headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let mut parts = item.split(';');
            let coding = parts.next()?.trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (coding.eq_ignore_ascii_case(wanted) || coding == "*").then_some(q > 0.0)
        })
        .next()
        .unwrap_or(false)
}

fn choose_encoding(blob: Option<&Blob>, headers: &HeaderMap) -> Encoding {
    let Some(blob) = blob else {
        return Encoding::Identity;
    };
    if blob.brotli.is_some() && accepts(headers, "br") {
        Encoding::Brotli
    } else if blob.gzip.is_some() && accepts(headers, "gzip") {
        Encoding::Gzip
    } else {
        Encoding::Identity
    }
}

/// Whether an `If-None-Match` list names this content (any encoding of it: weak comparison, as RFC 9110 asks).
fn none_match_hits(headers: &HeaderMap, file: &FileEntry) -> bool {
    let Some(if_none_match) = headers.typed_get::<IfNoneMatch>() else {
        return false;
    };
    let base = file.etag.to_str().unwrap_or("").trim_matches('"');
    ["", "-gz", "-br"]
        .iter()
        .filter_map(|suffix| format!("\"{base}{suffix}\"").parse::<ETag>().ok())
        .any(|tag| !if_none_match.precondition_passes(&tag))
}

/// Whether a range may be served: no `If-Range`, or one naming this content exactly (strong comparison; a date
/// never holds, since files carry no `Last-Modified`).
fn if_range_holds(headers: &HeaderMap, file: &FileEntry) -> bool {
    let Some(if_range) = headers.typed_get::<IfRange>() else {
        return headers.get(IF_RANGE).is_none();
    };
    let tag = file.etag.to_str().ok().and_then(|t| t.parse::<ETag>().ok());
    !if_range.is_modified(tag.as_ref(), None)
}

/// One byte range of a representation of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
enum ByteRange {
    /// Serve these bytes (start, end inclusive).
    Part(u64, u64),
    /// Serve the whole representation (no range, several ranges, or a header we do not read).
    Whole,
    /// The range lies beyond the end.
    Unsatisfiable,
}

fn byte_range(header: Option<&HeaderValue>, len: u64) -> ByteRange {
    let Some(spec) = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes="))
    else {
        return ByteRange::Whole;
    };
    if spec.contains(',') {
        return ByteRange::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return ByteRange::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    let parse = |s: &str| s.parse::<u64>().ok();
    match (first.is_empty(), last.is_empty()) {
        (true, false) => match parse(last) {
            Some(0) => ByteRange::Unsatisfiable,
            Some(suffix) if len > 0 => ByteRange::Part(len.saturating_sub(suffix), len - 1),
            Some(_) => ByteRange::Unsatisfiable,
            None => ByteRange::Whole,
        },
        (false, _) => {
            let Some(start) = parse(first) else {
                return ByteRange::Whole;
            };
            let end = if last.is_empty() {
                Some(len.saturating_sub(1))
            } else {
                parse(last).map(|e| e.min(len.saturating_sub(1)))
            };
            match end {
                None => ByteRange::Whole,
                Some(_) if start >= len => ByteRange::Unsatisfiable,
                Some(end) if end < start => ByteRange::Whole,
                Some(end) => ByteRange::Part(start, end),
            }
        }
        (true, true) => ByteRange::Whole,
    }
}

/// What a response's body is made of.
enum Payload {
    /// A compressed form, whole.
    Encoded(Bytes),
    /// `len` bytes of the content as committed, from `start`.
    Identity { start: u64, len: u64 },
    /// Nothing.
    Empty,
}

async fn file_response(
    file: &FileEntry,
    status: StatusCode,
    method: &Method,
    headers: &HeaderMap,
) -> Response<EdgeBody> {
    let blob = match &file.content {
        Content::Memory(blob) => Some(blob.as_ref()),
        Content::Disk(_) => None,
    };
    let compressible = blob.is_some_and(|b| b.gzip.is_some() || b.brotli.is_some());
    let mut builder = Response::builder()
        .header(CACHE_CONTROL, CACHE_CONTROL_VALUE)
        .header(ACCEPT_RANGES, "bytes");
    if compressible {
        builder = builder.header(VARY, "Accept-Encoding");
    }
    if status == StatusCode::OK && none_match_hits(headers, file) {
        return finish(
            builder
                .status(StatusCode::NOT_MODIFIED)
                .header(ETAG, file.etag.clone()),
            super::empty(),
        );
    }
    let if_range_holds = if_range_holds(headers, file);
    let len = file.content.len();
    let range = if status == StatusCode::OK && if_range_holds && method == Method::GET {
        byte_range(headers.get(RANGE), len)
    } else {
        ByteRange::Whole
    };
    builder = builder.header(CONTENT_TYPE, file.content_type.clone());
    let (builder, payload) = match range {
        ByteRange::Part(start, end) => (
            builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(ETAG, file.etag.clone())
                .header(CONTENT_RANGE, format!("bytes {start}-{end}/{len}")),
            Payload::Identity {
                start,
                len: end + 1 - start,
            },
        ),
        ByteRange::Unsatisfiable => (
            builder
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(ETAG, file.etag.clone())
                .header(CONTENT_RANGE, format!("bytes */{len}")),
            Payload::Empty,
        ),
        ByteRange::Whole => {
            let encoded = match (choose_encoding(blob, headers), blob) {
                (Encoding::Brotli, Some(b)) => b.brotli.clone().map(|e| (e, "-br", "br")),
                (Encoding::Gzip, Some(b)) => b.gzip.clone().map(|e| (e, "-gz", "gzip")),
                _ => None,
            };
            let builder = builder.status(status);
            match encoded {
                Some((bytes, suffix, coding)) => (
                    builder
                        .header(CONTENT_ENCODING, coding)
                        .header(ETAG, etag(file.content.hash(), suffix)),
                    Payload::Encoded(bytes),
                ),
                None => (
                    builder.header(ETAG, file.etag.clone()),
                    Payload::Identity { start: 0, len },
                ),
            }
        }
    };
    if method == Method::HEAD {
        let len = match &payload {
            Payload::Encoded(bytes) => bytes.len() as u64,
            Payload::Identity { len, .. } => *len,
            Payload::Empty => 0,
        };
        return finish(builder.header(CONTENT_LENGTH, len), super::empty());
    }
    let body = match (payload, &file.content) {
        (Payload::Encoded(bytes), _) => super::full(bytes),
        (Payload::Empty, _) => super::empty(),
        (Payload::Identity { start, len }, Content::Memory(blob)) => {
            // In range: `byte_range` keeps within the content.
            let (start, end) = (start as usize, (start + len) as usize);
            super::full(blob.identity.slice(start..end))
        }
        (Payload::Identity { start, len }, Content::Disk(disk)) => {
            match open_range(&disk.path, start, len).await {
                Ok(body) => super::file(body),
                Err(e) => {
                    tracing::warn!(path = %disk.path.display(), error = %e, "a static file on disk could not be read");
                    return pages::internal_error();
                }
            }
        }
    };
    finish(builder, body)
}

async fn open_range(path: &std::path::Path, start: u64, len: u64) -> std::io::Result<FileBody> {
    FileBody::open(tokio::fs::File::open(path).await?, start, len).await
}

fn finish(builder: http::response::Builder, body: EdgeBody) -> Response<EdgeBody> {
    builder
        .body(body)
        .unwrap_or_else(|_| pages::internal_error())
}

#[cfg(test)]
mod tests {
    use super::super::site::BlobStore;
    use super::super::site_load::from_tar;
    use super::*;
    use http_body_util::BodyExt;

    fn site(entries: &[(&str, &str)]) -> Site {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut header = tar::Header::new_ustar();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, content.as_bytes())
                .unwrap();
        }
        from_tar(
            &builder.into_inner().unwrap(),
            &BlobStore::default(),
            1 << 20,
        )
        .unwrap()
    }

    fn get(site: &Site, path: &str, headers: &[(&str, &str)]) -> (Response<EdgeBody>, Vec<u8>) {
        request(site, Method::GET, path, headers)
    }

    fn request(
        site: &Site,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (Response<EdgeBody>, Vec<u8>) {
        futures::executor::block_on(send(site, method, path, headers))
    }

    async fn send(
        site: &Site,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (Response<EdgeBody>, Vec<u8>) {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let mut res = respond(site, &method, path, query, &map).await;
        let body = res.body_mut().collect().await.unwrap().to_bytes().to_vec();
        (res, body)
    }

    fn header<'a>(res: &'a Response<EdgeBody>, name: &str) -> &'a str {
        res.headers().get(name).map_or("", |v| v.to_str().unwrap())
    }

    #[test]
    fn index_html_answers_the_root_and_directories() {
        let s = site(&[("index.html", "home"), ("docs/index.html", "docs")]);
        let (res, body) = get(&s, "/", &[]);
        assert_eq!((res.status(), &body[..]), (StatusCode::OK, &b"home"[..]));
        assert_eq!(header(&res, "content-type"), "text/html; charset=utf-8");
        assert_eq!(get(&s, "/docs/", &[]).1, b"docs");
        let (res, _) = get(&s, "/docs?x=1", &[]);
        assert_eq!(res.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(header(&res, "location"), "/docs/?x=1");
        assert_eq!(get(&s, "/docs/../index.html", &[]).1, b"home");
        assert_eq!(
            get(&s, "/%64ocs/index.html", &[]).1,
            b"docs",
            "percent-decoded"
        );
    }

    #[test]
    fn missing_files_are_404_with_the_sites_own_page_when_it_has_one() {
        let plain = site(&[("index.html", "home")]);
        assert_eq!(get(&plain, "/nope", &[]).0.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            get(&plain, "/../../etc/passwd", &[]).0.status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(get(&plain, "/%zz", &[]).0.status(), StatusCode::NOT_FOUND);
        let own = site(&[("index.html", "home"), ("404.html", "lost")]);
        let (res, body) = get(&own, "/nope", &[("if-none-match", "*")]);
        assert_eq!(
            (res.status(), &body[..]),
            (StatusCode::NOT_FOUND, &b"lost"[..])
        );
    }

    #[test]
    fn entity_tags_make_revalidation_a_304() {
        let s = site(&[("a.txt", "alpha")]);
        let (res, _) = get(&s, "/a.txt", &[]);
        let tag = header(&res, "etag").to_owned();
        assert!(tag.starts_with('"'));
        let (res, body) = get(&s, "/a.txt", &[("if-none-match", &format!("\"x\", {tag}"))]);
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
        assert!(body.is_empty());
        assert_eq!(header(&res, "etag"), tag);
        let (res, _) = get(&s, "/a.txt", &[("if-none-match", &format!("W/{tag}"))]);
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "weak comparison");
        let (res, _) = get(&s, "/a.txt", &[("if-none-match", "*")]);
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "any tag");
        assert_eq!(
            get(&s, "/a.txt", &[("if-none-match", "\"other\"")])
                .0
                .status(),
            StatusCode::OK
        );
    }

    #[test]
    fn byte_ranges() {
        let s = site(&[("d.bin", "0123456789")]);
        let (res, body) = get(&s, "/d.bin", &[("range", "bytes=2-4")]);
        assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(
            (header(&res, "content-range"), &body[..]),
            ("bytes 2-4/10", &b"234"[..])
        );
        assert_eq!(get(&s, "/d.bin", &[("range", "bytes=7-")]).1, b"789");
        assert_eq!(get(&s, "/d.bin", &[("range", "bytes=-3")]).1, b"789");
        assert_eq!(get(&s, "/d.bin", &[("range", "bytes=8-100")]).1, b"89");
        let (res, _) = get(&s, "/d.bin", &[("range", "bytes=10-")]);
        assert_eq!(res.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(header(&res, "content-range"), "bytes */10");
        let (res, body) = get(&s, "/d.bin", &[("range", "bytes=0-1,4-5")]);
        assert_eq!(
            (res.status(), body.len()),
            (StatusCode::OK, 10),
            "several ranges: the whole file"
        );
        let (res, _) = get(
            &s,
            "/d.bin",
            &[("range", "bytes=0-1"), ("if-range", "\"stale\"")],
        );
        assert_eq!(
            res.status(),
            StatusCode::OK,
            "a stale If-Range gets the whole file"
        );
        let tag = header(&get(&s, "/d.bin", &[]).0, "etag").to_owned();
        let (res, _) = get(&s, "/d.bin", &[("range", "bytes=0-1"), ("if-range", &tag)]);
        assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
        for stale in [
            format!("W/{tag}"),
            "Wed, 21 Oct 2015 07:28:00 GMT".to_owned(),
        ] {
            let (res, _) = get(
                &s,
                "/d.bin",
                &[("range", "bytes=0-1"), ("if-range", &stale)],
            );
            assert_eq!(res.status(), StatusCode::OK, "If-Range {stale} never holds");
        }
    }

    #[test]
    fn text_goes_out_compressed_to_clients_that_take_it() {
        let text = "<p>compress me please</p>".repeat(50);
        let s = site(&[("index.html", &text)]);
        let (res, body) = get(&s, "/", &[("accept-encoding", "gzip, deflate, br")]);
        assert_eq!(header(&res, "content-encoding"), "br");
        assert_eq!(header(&res, "vary"), "Accept-Encoding");
        assert!(body.len() < text.len());
        let br_tag = header(&res, "etag").to_owned();
        let (res, body) = get(&s, "/", &[("accept-encoding", "gzip;q=1, br;q=0")]);
        assert_eq!(header(&res, "content-encoding"), "gzip");
        assert_ne!(
            header(&res, "etag"),
            br_tag,
            "each encoding has its own tag"
        );
        let mut decoded = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut decoded)
            .unwrap();
        assert_eq!(decoded, text);
        let (res, body) = get(&s, "/", &[]);
        assert_eq!(
            (header(&res, "content-encoding"), body.len()),
            ("", text.len())
        );
        let (res, _) = get(
            &s,
            "/",
            &[("accept-encoding", "br"), ("if-none-match", &br_tag)],
        );
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    }

    #[test]
    fn head_has_the_headers_and_no_body_and_other_methods_are_refused() {
        let s = site(&[("a.txt", "alpha")]);
        let (res, body) = request(&s, Method::HEAD, "/a.txt", &[]);
        assert_eq!(
            (res.status(), header(&res, "content-length")),
            (StatusCode::OK, "5")
        );
        assert!(body.is_empty());
        let (res, _) = request(&s, Method::POST, "/a.txt", &[]);
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(header(&res, "allow"), "GET, HEAD");
    }

    #[test]
    fn site_paths_never_leave_the_root() {
        assert_eq!(site_path("/").as_deref(), Some(""));
        assert_eq!(site_path("//a//b/").as_deref(), Some("a/b/"));
        assert_eq!(site_path("/a/./b/../c").as_deref(), Some("a/c"));
        assert_eq!(site_path("/a%20b").as_deref(), Some("a b"));
        assert_eq!(site_path("/../x"), None);
        assert_eq!(site_path("/%00"), None);
    }

    #[tokio::test]
    async fn files_on_disk_stream_with_the_same_tags_and_ranges_and_no_compression() {
        use super::super::site_disk::DiskRoot;
        use super::super::site_load::{Limits, read_site, tar_of};
        let base = std::env::temp_dir().join(format!(
            "slipway-files-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let root = DiskRoot::open(&base).unwrap();
        let text = "<p>served from disk</p>".repeat(100);
        let tar = tar_of(&[("index.html", text.as_bytes()), ("d.bin", b"0123456789")]).unwrap();
        // Nothing fits the memory share: the whole site is on disk.
        let limits = Limits {
            max_site_bytes: 1 << 20,
            memory_site_bytes: 0,
        };
        let s = read_site(&tar[..], limits, &BlobStore::default(), Some(&root)).unwrap();
        assert!(s.on_disk());
        let in_memory = from_tar(&tar, &BlobStore::default(), 1 << 20).unwrap();

        let (res, body) = send(&s, Method::GET, "/", &[("accept-encoding", "br, gzip")]).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            body,
            text.as_bytes(),
            "as committed, whatever the client takes"
        );
        assert_eq!(
            (header(&res, "content-encoding"), header(&res, "vary")),
            ("", "")
        );
        let tag = header(&res, "etag").to_owned();
        let (memory_res, _) = send(&in_memory, Method::GET, "/", &[]).await;
        assert_eq!(
            tag,
            header(&memory_res, "etag"),
            "the same tag as from memory"
        );
        let (res, body) = send(&s, Method::GET, "/", &[("if-none-match", &tag)]).await;
        assert_eq!((res.status(), body.len()), (StatusCode::NOT_MODIFIED, 0));

        let (res, body) = send(&s, Method::GET, "/d.bin", &[("range", "bytes=2-4")]).await;
        assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(
            (header(&res, "content-range"), &body[..]),
            ("bytes 2-4/10", &b"234"[..])
        );
        assert_eq!(
            send(&s, Method::GET, "/d.bin", &[("range", "bytes=-3")])
                .await
                .1,
            b"789"
        );
        let (res, _) = send(&s, Method::GET, "/d.bin", &[("range", "bytes=10-")]).await;
        assert_eq!(res.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        let (res, body) = send(&s, Method::HEAD, "/d.bin", &[]).await;
        assert_eq!((header(&res, "content-length"), body.len()), ("10", 0));
        let res = respond(&s, &Method::GET, "/d.bin", None, &HeaderMap::new()).await;
        let length = hyper::body::Body::size_hint(res.body()).exact();
        assert_eq!(length, Some(10), "a known length, before a byte is read");
        drop(s);
        let _ = std::fs::remove_dir_all(base);
    }
}
