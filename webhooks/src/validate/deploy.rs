//! Deploy admission: the channel it deploys to exists when it is created. A Deploy's spec cannot change.

use slipway_crds::Deploy;

use super::{Refusal, Review, require_channel};
use crate::lookup::Lookup;

/// Checks a new Deploy.
pub async fn validate<L: Lookup>(lookup: &L, review: &Review<Deploy>) -> Result<(), Refusal> {
    if review.is_create() {
        require_channel(lookup, &review.namespace, &review.object.spec.channel).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::validate::fixtures::*;
    use slipway_crds::rules::DenialKind;

    #[tokio::test]
    async fn a_deploy_to_an_existing_channel_is_admitted() {
        let s = cluster("ns", &[]);
        assert!(
            validate(&s, &create(deploy("ns", "blog.prod")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_channel_must_exist_and_not_be_going_away() {
        let mut s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(deploy("ns", "blog.next"))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "channel blog.next does not exist in namespace ns");
        s.channels = vec![Arc::new(deleting(channel("ns", "blog", "prod", "master")))];
        let msg = denied(
            validate(&s, &create(deploy("ns", "blog.prod"))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "channel blog.prod does not exist in namespace ns");
        let d = deploy("ns", "blog.prod");
        assert!(validate(&s, &update(d.clone(), d)).await.is_ok());
    }
}
