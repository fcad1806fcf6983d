//! The AWS SDK client the gateway's operations reach the backend with: the platform's client
//! ([`object_store::client`]) with the backend's answers made readable to the SDK where a backend answers otherwise
//! than S3. versitygw dates GetObjectAttributes' `Last-Modified` in C's `asctime` form (`Wed Dec  2 04:07:41
//! 2026`), which HTTP allows readers to take but the SDK does not: it failed the whole answer, so the gateway
//! answered 500. The header is rewritten to HTTP's own form before the SDK reads it.
//!
//! A listing entry whose ETag is not one (versitygw lists an object whose metadata it lost with an empty
//! `<ETag></ETag>`) is listed without one: s3s refuses to read such a value, and one damaged object would fail
//! the whole listing with a 500, so the tenant could not even find it to delete it.

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, FinalizerInterceptorContextMut,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use aws_sdk_s3::operation::list_object_versions::ListObjectVersionsOutput;
use aws_sdk_s3::operation::list_objects::ListObjectsOutput;
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
use chrono::NaiveDateTime;
use slipway_backends::object_store::{self, S3Endpoint};

/// The gateway's SDK client of `endpoint`.
pub fn client(endpoint: &S3Endpoint) -> aws_sdk_s3::Client {
    let platform = object_store::client(endpoint, None);
    let config = platform
        .config()
        .to_builder()
        .interceptor(HttpDates)
        .interceptor(ListedETags)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// Rewrites an `asctime` `Last-Modified` to HTTP's form.
#[derive(Debug)]
struct HttpDates;

impl Intercept for HttpDates {
    fn name(&self) -> &'static str {
        "HttpDates"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let headers = context.response_mut().headers_mut();
        if let Some(date) = headers.get("last-modified").and_then(http_date) {
            headers.insert("last-modified", date);
        }
        Ok(())
    }
}

/// Drops the ETags of listing entries that s3s could not read.
#[derive(Debug)]
struct ListedETags;

impl Intercept for ListedETags {
    fn name(&self) -> &'static str {
        "ListedETags"
    }

    fn modify_before_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Ok(output)) = context.output_or_error_mut() else {
            return Ok(());
        };
        let etags: Vec<&mut Option<String>> =
            if let Some(listed) = output.downcast_mut::<ListObjectVersionsOutput>() {
                listed
                    .versions
                    .iter_mut()
                    .flatten()
                    .map(|v| &mut v.e_tag)
                    .collect()
            } else {
                let objects = match output.downcast_mut::<ListObjectsV2Output>() {
                    Some(listed) => listed.contents.as_mut(),
                    None => output
                        .downcast_mut::<ListObjectsOutput>()
                        .and_then(|listed| listed.contents.as_mut()),
                };
                objects
                    .into_iter()
                    .flatten()
                    .map(|o| &mut o.e_tag)
                    .collect()
            };
        for etag in etags {
            drop_unreadable(etag);
        }
        Ok(())
    }
}

/// Empties `etag` when it is no ETag s3s reads.
fn drop_unreadable(etag: &mut Option<String>) {
    if etag
        .as_deref()
        .is_some_and(|e| s3s::dto::ETag::parse_http_header(e.as_bytes()).is_err())
    {
        *etag = None;
    }
}

/// `value` in HTTP's date form (`Wed, 02 Dec 2026 04:07:41 GMT`) if it is an `asctime` date; `None` otherwise
/// (a date already in HTTP's form among them).
fn http_date(value: &str) -> Option<String> {
    let normalized = value.split_whitespace().collect::<Vec<_>>().join(" ");
    let date = NaiveDateTime::parse_from_str(&normalized, "%a %b %d %H:%M:%S %Y").ok()?;
    Some(date.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asctime_dates_become_http_dates() {
        assert_eq!(
            http_date("Wed Dec  2 04:07:41 2026").as_deref(),
            Some("Wed, 02 Dec 2026 04:07:41 GMT")
        );
        assert_eq!(
            http_date("Sat Nov 14 23:59:00 2026").as_deref(),
            Some("Sat, 14 Nov 2026 23:59:00 GMT")
        );
        assert_eq!(http_date("Wed, 02 Dec 2026 04:07:41 GMT"), None);
        assert_eq!(http_date("yesterday"), None);
    }

    #[test]
    fn only_unreadable_etags_are_dropped() {
        let kept = |etag: &str| {
            let mut etag = Some(etag.to_owned());
            drop_unreadable(&mut etag);
            etag
        };
        assert_eq!(kept(""), None);
        assert_eq!(kept("\"unclosed"), None);
        assert_eq!(
            kept("\"9dd4e461268c8034f5c8564e155c67a6\"").as_deref(),
            Some("\"9dd4e461268c8034f5c8564e155c67a6\"")
        );
        assert_eq!(kept("\"\"").as_deref(), Some("\"\""));
        assert_eq!(kept("abc-2").as_deref(), Some("abc-2"));
        let mut none = None;
        drop_unreadable(&mut none);
        assert_eq!(none, None);
    }
}
