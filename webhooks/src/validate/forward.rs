//! Forward admission: the allowlist parses as CIDRs (on create and on every change of it) and the channel it
//! exposes exists when it is created.

use slipway_crds::Forward;
use slipway_crds::names;

use super::{Refusal, Review, require_channel};
use crate::lookup::Lookup;

/// Checks a new Forward, or a change of its allowlist.
pub async fn validate<L: Lookup>(lookup: &L, review: &Review<Forward>) -> Result<(), Refusal> {
    let spec = &review.object.spec;
    if review
        .old_object
        .as_ref()
        .is_some_and(|old| old.spec.allow_cidrs == spec.allow_cidrs)
    {
        return Ok(());
    }
    let cidrs: Vec<&str> = spec.allow_cidrs.iter().map(|c| c.0.as_str()).collect();
    names::parse_allow_cidrs(&cidrs)?;
    if review.is_create() {
        require_channel(lookup, &review.namespace, &spec.channel).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use slipway_crds::names::messages;

    use super::*;
    use crate::validate::fixtures::*;
    use slipway_crds::rules::DenialKind;

    #[tokio::test]
    async fn a_forward_of_an_existing_channel_is_admitted() {
        let s = cluster("ns", &[]);
        assert!(
            validate(
                &s,
                &create(forward(
                    "ns",
                    "blog.prod",
                    &["203.0.113.0/24", "2001:db8::/32"]
                ))
            )
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn the_channel_must_exist() {
        let s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(forward("ns", "blog.next", &[]))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "channel blog.next does not exist in namespace ns");
    }

    #[tokio::test]
    async fn cidrs_are_parsed_on_create_and_update() {
        let s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(forward("ns", "blog.prod", &["10.0.0.0/33"]))).await,
            DenialKind::Invalid,
        );
        assert_eq!(msg, messages::CIDR);
        let many: Vec<String> = (0..17).map(|i| format!("10.0.{i}.0/24")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let old = forward("ns", "blog.prod", &[]);
        let msg = denied(
            validate(&s, &update(old.clone(), forward("ns", "blog.prod", &many))).await,
            DenialKind::Invalid,
        );
        assert_eq!(msg, messages::TOO_MANY_CIDRS);
        // An update does not need the channel any more (it may be going away).
        let gone = forward("ns", "gone.prod", &[]);
        assert!(
            validate(
                &s,
                &update(gone.clone(), forward("ns", "gone.prod", &["10.0.0.0/8"]))
            )
            .await
            .is_ok()
        );
        assert!(validate(&s, &update(gone.clone(), gone)).await.is_ok());
    }
}
