//! From the bytes of an `AdmissionReview` to the review that answers it.
//!
//! Request data never makes this panic: a body that is not a review is answered as invalid (with the request's uid
//! when one can be read, so the apiserver reports the reason), and everything else is typed and dispatched by kind
//! to a validator of [`crate::validate`], whose refusal becomes the denial message the person sees.

use axum::http::StatusCode;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status};
use serde::de::DeserializeOwned;

use crate::lookup::{Lookup, Readiness};
use crate::validate::{self, Refusal, Review};
use slipway_crds::rules::{Denial, DenialKind};

/// The kinds this webhook validates, all in group `slipway.dev`.
pub const KINDS: [&str; 5] = ["App", "Channel", "Deploy", "Domain", "Forward"];

/// Time the checks of one review may take; the apiserver gives a webhook 10 seconds by default and a denial that
/// says why beats a timeout.
const DECIDE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);

/// The answer to one review: the HTTP status and the review to send back.
#[derive(Debug)]
pub struct Answer {
    /// 200 for every review that carries a uid (the decision is inside), 400 for a body that is not a review.
    pub status: StatusCode,
    /// The review with its response.
    pub review: AdmissionReview<DynamicObject>,
}

impl Answer {
    /// Whether the object was admitted.
    pub fn allowed(&self) -> bool {
        self.review.response.as_ref().is_some_and(|r| r.allowed)
    }

    /// The HTTP code of the decision's status, when it has one (a denial's).
    pub fn code(&self) -> Option<u16> {
        self.review
            .response
            .as_ref()
            .map(|r| r.result.code)
            .filter(|code| *code != 0)
    }

    /// The denial message, empty when admitted.
    pub fn message(&self) -> &str {
        self.review
            .response
            .as_ref()
            .map_or("", |r| r.result.message.as_str())
    }
}

/// What the request was about, for logs.
#[derive(Debug, Default, Clone)]
pub struct Subject {
    /// The request uid.
    pub uid: String,
    /// The kind under review.
    pub kind: String,
    /// The operation.
    pub operation: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

/// Reads a review and decides it. Returns the answer and what it was about.
pub async fn review<L: Lookup>(lookup: &L, body: &[u8]) -> (Answer, Subject) {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return (
                malformed(format!("the body is not JSON: {e}")),
                Subject::default(),
            );
        }
    };
    let Some(uid) = value
        .pointer("/request/uid")
        .and_then(|u| u.as_str())
        .map(str::to_owned)
    else {
        return (
            malformed("the body is not an AdmissionReview with a request.uid".into()),
            Subject::default(),
        );
    };
    let mut subject = Subject {
        uid: uid.clone(),
        ..Subject::default()
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => {
            let mut response =
                AdmissionResponse::invalid(format!("the AdmissionReview could not be read: {e}"));
            response.uid = uid;
            return (
                Answer {
                    status: StatusCode::OK,
                    review: response.into_review(),
                },
                subject,
            );
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        // Unreachable after the uid check above, but answered all the same.
        Err(e) => return (malformed(e.to_string()), subject),
    };
    subject.kind = request.kind.kind.clone();
    subject.operation = format!("{:?}", request.operation).to_uppercase();
    subject.namespace = request.namespace.clone().unwrap_or_default();
    subject.name = request.name.clone();

    let response = AdmissionResponse::from(&request);
    let decided = match lookup.readiness() {
        Readiness::Ready => tokio::time::timeout(DECIDE_TIMEOUT, decide(lookup, &request))
            .await
            .unwrap_or_else(|_| {
                Err(Refusal::Unavailable(
                    "the checks did not finish in time".into(),
                ))
            }),
        Readiness::Starting => Err(Refusal::Unavailable(
            "the webhook is still loading its caches".into(),
        )),
        Readiness::Failed(why) => Err(Refusal::Unavailable(format!(
            "the webhook's caches stopped ({why})"
        ))),
    };
    let response = match decided {
        Ok(()) => response,
        Err(refusal) => deny(response, refusal),
    };
    (
        Answer {
            status: StatusCode::OK,
            review: response.into_review(),
        },
        subject,
    )
}

/// The answer to a body that is not a review at all: `400` with an invalid response and no uid.
fn malformed(message: String) -> Answer {
    Answer {
        status: StatusCode::BAD_REQUEST,
        review: AdmissionResponse::invalid(message).into_review(),
    }
}

/// Fills in a denial. The code and reason follow the hosting API's status for the same refusal, so a Kubernetes
/// client sees 404 for a missing reference, 403 for a plan limit and 409 for a name another object holds.
fn deny(response: AdmissionResponse, refusal: Refusal) -> AdmissionResponse {
    let (code, reason) = match &refusal {
        Refusal::Denied(d) => match d.kind {
            DenialKind::Invalid | DenialKind::LimitReached => (400, "BadRequest"),
            DenialKind::PlanLimit => (403, "Forbidden"),
            DenialKind::Missing => (404, "NotFound"),
            DenialKind::Taken => (409, "Conflict"),
        },
        Refusal::Unavailable(_) => (503, "ServiceUnavailable"),
    };
    let mut response = response;
    response.allowed = false;
    response.result = Status::failure(&refusal.to_string(), reason).with_code(code);
    response
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::Denied(Denial {
        kind: DenialKind::Invalid,
        message: message.into(),
    })
}

/// Dispatches a request by kind. Operations other than CREATE and UPDATE, and objects being deleted, are admitted.
async fn decide<L: Lookup>(
    lookup: &L,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<(), Refusal> {
    let gvk = &request.kind;
    if gvk.group != slipway_crds::GROUP || !KINDS.contains(&gvk.kind.as_str()) {
        let kind = if gvk.group.is_empty() {
            gvk.kind.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.kind)
        };
        return Err(invalid(format!(
            "this webhook validates the kinds {} of {}, not {kind}",
            KINDS.join(", "),
            slipway_crds::GROUP
        )));
    }
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return Ok(());
    }
    let Some(object) = &request.object else {
        return Err(invalid(format!(
            "the review of {} {} carries no object",
            gvk.kind, request.name
        )));
    };
    if object.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    match gvk.kind.as_str() {
        "App" => validate::app::validate(lookup, &typed(request)?).await,
        "Channel" => validate::channel::validate(lookup, &typed(request)?).await,
        "Deploy" => validate::deploy::validate(lookup, &typed(request)?).await,
        "Domain" => validate::domain::validate(lookup, &typed(request)?).await,
        "Forward" => validate::forward::validate(lookup, &typed(request)?).await,
        other => Err(invalid(format!("this webhook does not validate {other}"))),
    }
}

/// The request's objects as their Rust type.
fn typed<K: DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Review<K>, Refusal> {
    let kind = &request.kind.kind;
    let parse = |obj: &DynamicObject| -> Result<K, Refusal> {
        serde_json::to_value(obj)
            .and_then(serde_json::from_value)
            .map_err(|e| invalid(format!("the {kind} could not be read: {e}")))
    };
    let object = request
        .object
        .as_ref()
        .ok_or_else(|| invalid(format!("the review of a {kind} carries no object")))?;
    let name = object
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| request.name.clone());
    let Some(namespace) = request
        .namespace
        .clone()
        .or_else(|| object.metadata.namespace.clone())
    else {
        return Err(invalid(format!("the {kind} {name} has no namespace")));
    };
    Ok(Review {
        operation: request.operation.clone(),
        namespace,
        name,
        object: parse(object)?,
        old_object: request.old_object.as_ref().map(parse).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use slipway_crds::labels;

    use super::*;
    use crate::validate::fixtures::*;

    fn request(kind: &str, operation: &str, object: Value, old: Value) -> Value {
        let name = object["metadata"]["name"]
            .as_str()
            .or(old["metadata"]["name"].as_str())
            .unwrap_or("x")
            .to_owned();
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "slipway.dev", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "slipway.dev", "version": "v1alpha1", "resource": format!("{}s", kind.to_lowercase())},
                "name": name, "namespace": "ns", "operation": operation,
                "userInfo": {"username": "admin"}, "object": object, "oldObject": old, "dryRun": false
            }
        })
    }

    async fn answer(body: &[u8]) -> Answer {
        review(&cluster("ns", &[(labels::OWNER, "alice")]), body)
            .await
            .0
    }

    async fn answer_json(body: Value) -> Answer {
        answer(&serde_json::to_vec(&body).unwrap()).await
    }

    #[tokio::test]
    async fn an_admitted_object_echoes_the_uid() {
        let app = serde_json::to_value(app("ns", "shop", "alice")).unwrap();
        let a = answer_json(request("App", "CREATE", app, Value::Null)).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.allowed(), "{}", a.message());
        let review = serde_json::to_value(&a.review).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(
            review["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(review["response"]["allowed"], true);
    }

    #[tokio::test]
    async fn a_refusal_carries_the_rule_message_and_the_api_status() {
        let app = serde_json::to_value(app("ns", "shop", "mallory")).unwrap();
        let a = answer_json(request("App", "CREATE", app, Value::Null)).await;
        assert!(!a.allowed());
        assert_eq!(
            a.message(),
            "the owner of an app in namespace ns must be alice, not mallory"
        );
        let response = a.review.response.unwrap();
        assert_eq!(
            (response.result.code, response.result.reason.as_str()),
            (400, "BadRequest")
        );

        let ch = serde_json::to_value(channel("ns", "shop", "prod", "master")).unwrap();
        let response = answer_json(request("Channel", "CREATE", ch, Value::Null))
            .await
            .review
            .response
            .unwrap();
        assert_eq!(
            response.result.message,
            "app shop does not exist in namespace ns"
        );
        assert_eq!(
            (response.result.code, response.result.reason.as_str()),
            (404, "NotFound")
        );
    }

    #[tokio::test]
    async fn every_kind_is_dispatched() {
        let cases = [
            (
                "Channel",
                serde_json::to_value(channel("ns", "blog", "next", "next")).unwrap(),
            ),
            (
                "Deploy",
                serde_json::to_value(deploy("ns", "blog.prod")).unwrap(),
            ),
            (
                "Domain",
                serde_json::to_value(domain("ns", "blog.prod", "www.example.com")).unwrap(),
            ),
            (
                "Forward",
                serde_json::to_value(forward("ns", "blog.prod", &["10.0.0.0/8"])).unwrap(),
            ),
        ];
        for (kind, obj) in cases {
            let a = answer_json(request(kind, "CREATE", obj.clone(), Value::Null)).await;
            assert!(a.allowed(), "{kind}: {}", a.message());
            let mut missing = obj;
            missing["spec"]["channel"] = json!("gone.prod");
            missing["spec"]["app"] = json!("gone");
            missing["metadata"]["name"] = json!("gone.prod");
            let a = answer_json(request(kind, "CREATE", missing, Value::Null)).await;
            assert!(!a.allowed(), "{kind} of a missing parent");
            assert!(
                a.message().contains("does not exist in namespace ns"),
                "{kind}: {}",
                a.message()
            );
        }
    }

    #[tokio::test]
    async fn deletes_and_objects_being_deleted_are_admitted() {
        let gone = serde_json::to_value(deleting(deploy("ns", "gone.prod"))).unwrap();
        assert!(
            answer_json(request("Deploy", "UPDATE", gone.clone(), gone.clone()))
                .await
                .allowed()
        );
        assert!(
            answer_json(request("Deploy", "CREATE", gone.clone(), Value::Null))
                .await
                .allowed()
        );
        let d = serde_json::to_value(deploy("ns", "gone.prod")).unwrap();
        assert!(
            answer_json(request("Deploy", "DELETE", Value::Null, d))
                .await
                .allowed()
        );
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_review_is_answered_400() {
        for body in [
            &b"garbage"[..],
            b"",
            b"{}",
            b"[1,2]",
            b"{\"request\": {\"uid\": 7}}",
            &[0xff, 0xfe, 0x00],
        ] {
            let a = answer(body).await;
            assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body:?}");
            assert!(!a.allowed());
            let response = a.review.response.as_ref().unwrap();
            assert_eq!(response.uid, "");
            assert_eq!(response.result.reason, "InvalidRequest");
            assert!(!response.result.message.is_empty());
        }
    }

    #[tokio::test]
    async fn a_review_with_a_uid_but_a_bad_shape_is_answered_invalid_with_the_uid() {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u-1", "kind": "App"}});
        let a = answer_json(body).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(!a.allowed());
        assert_eq!(a.review.response.as_ref().unwrap().uid, "u-1");
        assert!(
            a.message()
                .starts_with("the AdmissionReview could not be read"),
            "{}",
            a.message()
        );
    }

    #[tokio::test]
    async fn an_object_that_does_not_fit_its_kind_is_denied() {
        let not_an_app = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
                                "metadata": {"name": "shop", "namespace": "ns"}, "spec": {"owner": 42}});
        let a = answer_json(request("App", "CREATE", not_an_app, Value::Null)).await;
        assert!(!a.allowed());
        assert!(
            a.message().starts_with("the App could not be read"),
            "{}",
            a.message()
        );
        let no_object = request("App", "CREATE", Value::Null, Value::Null);
        assert!(
            answer_json(no_object)
                .await
                .message()
                .contains("carries no object")
        );
    }

    #[tokio::test]
    async fn unknown_kinds_are_denied() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
        let mut body = request("Pod", "CREATE", pod, Value::Null);
        body["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
        let a = answer_json(body.clone()).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(!a.allowed());
        assert_eq!(
            a.message(),
            "this webhook validates the kinds App, Channel, Deploy, Domain, Forward of slipway.dev, not Pod"
        );
        body["request"]["kind"] =
            json!({"group": "slipway.dev", "version": "v1alpha1", "kind": "Widget"});
        assert!(
            answer_json(body)
                .await
                .message()
                .ends_with("not slipway.dev/Widget")
        );
    }
}
