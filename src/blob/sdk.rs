//! The AWS SDK client the gateway's operations reach the backend with: the platform's client
//! ([`object_store::client`]) with the backend's answers made readable to the SDK where a backend answers otherwise
//! than S3. versitygw dates GetObjectAttributes' `Last-Modified` in C's `asctime` form (`Wed Dec  2 04:07:41
//! 2026`), which HTTP allows readers to take but the SDK does not: it failed the whole answer, so the gateway
//! answered 500. The header is rewritten to HTTP's own form before the SDK reads it.

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use chrono::NaiveDateTime;
use slipway_backends::object_store::{self, S3Endpoint};

/// The gateway's SDK client of `endpoint`.
pub fn client(endpoint: &S3Endpoint) -> aws_sdk_s3::Client {
    let platform = object_store::client(endpoint, None);
    let config = platform
        .config()
        .to_builder()
        .interceptor(HttpDates)
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
}
