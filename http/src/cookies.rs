//! Reading a request's cookies, the one way every server does (the `cookie` crate parses each `Cookie` header). A
//! header that is not UTF-8 is read with its odd bytes replaced, and a cookie whose value is not ASCII is skipped,
//! so a cookie planted with odd bytes hides no other.

use cookie::Cookie;
use http::HeaderMap;
use http::header::COOKIE;

/// The value of the cookie `name` in `headers`' `Cookie` headers: the first with an ASCII value.
pub fn read(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(COOKIE).iter().find_map(|header| {
        let text = String::from_utf8_lossy(header.as_bytes());
        Cookie::split_parse(text.as_ref())
            .filter_map(Result::ok)
            .find(|c| c.name() == name && c.value().is_ascii())
            .map(|c| c.value().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn a_cookie_is_found_among_others_in_any_header() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("x=1; session=abc; y=2"));
        headers.append(COOKIE, HeaderValue::from_static("other=z"));
        assert_eq!(read(&headers, "session").as_deref(), Some("abc"));
        assert_eq!(read(&headers, "other").as_deref(), Some("z"));
        assert_eq!(read(&headers, "sess"), None);
        assert_eq!(read(&HeaderMap::new(), "session"), None);
    }

    #[test]
    fn a_planted_non_ascii_cookie_hides_no_other() {
        let mut headers = HeaderMap::new();
        headers.append(
            COOKIE,
            HeaderValue::from_bytes("junk=caf\u{e9}; id=a.b.c".as_bytes()).unwrap(),
        );
        headers.append(
            COOKIE,
            HeaderValue::from_bytes(b"bad=\xff\xfe; state=s1").unwrap(),
        );
        assert_eq!(read(&headers, "id").as_deref(), Some("a.b.c"));
        assert_eq!(read(&headers, "state").as_deref(), Some("s1"));
        assert_eq!(read(&headers, "junk"), None);
        assert_eq!(read(&headers, "bad"), None);
    }
}
