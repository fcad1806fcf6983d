//! What the object storage tests share without the rest of the support module (the gateway's own tests need no
//! API): the backend's root endpoint, and a failed S3 call read as its status and error code.

use aws_sdk_s3::error::ProvideErrorMetadata;
use slipway_backends::object_store::S3Endpoint;
use slipway_testkit::s3::TestS3;

/// `backend`'s endpoint with its root key pair, as the gateway and the operator are given it.
pub fn root(backend: &TestS3) -> S3Endpoint {
    S3Endpoint {
        url: backend.url.clone(),
        access_key_id: backend.access_key_id.clone(),
        secret_access_key: backend.secret_access_key.clone(),
    }
}

/// The HTTP status and S3 error code of a failed call.
pub fn failure<E: ProvideErrorMetadata>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> (u16, String) {
    (
        e.raw_response().map_or(0, |r| r.status().as_u16()),
        e.code().unwrap_or_default().to_owned(),
    )
}
