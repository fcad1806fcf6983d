//! Names derived from app, channel and user names: hostnames, Channel resource names and workload names.

use super::*;

/// Longest DNS label, and so the longest first label of a channel hostname.
pub const HOST_LABEL_MAX_LEN: usize = 63;

/// The first DNS label of a channel's hostname: `<app>-<owner>` for prod, `<channel>-<app>-<owner>` otherwise.
/// Refused when it would be longer than a DNS label may be.
pub fn channel_host_label(
    app: &AppName,
    channel: &ChannelName,
    owner: &Username,
) -> Result<String, InvalidName> {
    let label = if channel.is_prod() {
        format!("{app}-{owner}")
    } else {
        format!("{channel}-{app}-{owner}")
    };
    if label.len() > HOST_LABEL_MAX_LEN {
        return Err(InvalidName(messages::HOST_LABEL_TOO_LONG));
    }
    Ok(label)
}

/// A channel's hostname under `app_domain`.
pub fn channel_hostname(
    app: &AppName,
    channel: &ChannelName,
    owner: &Username,
    app_domain: &str,
) -> Result<String, InvalidName> {
    Ok(format!(
        "{}.{app_domain}",
        channel_host_label(app, channel, owner)?
    ))
}

/// Name of a Channel resource: `<app>.<channel>`, unique per namespace because app names are.
pub fn channel_resource_name(app: &AppName, channel: &ChannelName) -> String {
    format!("{app}.{channel}")
}

/// Base name of what a channel runs on the cluster (its Service, and its Deployments with a deploy suffix): the
/// Channel resource name with `-` for `.`, so a valid DNS-1035 label of at most 62 characters. The hostname rule
/// keeps `<channel>-<app>` under 62 characters, and a leading digit gets an `s` in front, as Services need a letter.
pub fn workload_name(channel_resource_name: &str) -> String {
    let name = channel_resource_name.replace('.', "-");
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("s{name}")
    } else {
        name
    }
}

/// Splits a Channel resource name into its app and channel names.
pub fn parse_channel_resource_name(name: &str) -> Result<(AppName, ChannelName), InvalidName> {
    let (app, channel) = name
        .split_once('.')
        .ok_or(InvalidName(messages::CHANNEL_NAME))?;
    // The app part of an existing resource was validated when the App was created; a reserved prefix here only
    // matters for new apps, so it is checked as a DNS label, not as a new app name.
    if !is_dns_label(app, NAME_MAX_LEN) {
        return Err(InvalidName(messages::APP_NAME));
    }
    Ok((AppName(app.to_owned()), channel.parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_names_are_dns_1035_labels() {
        assert_eq!(workload_name("blog.prod"), "blog-prod");
        assert_eq!(workload_name("9lives.next"), "s9lives-next");
        let longest = format!("{}.{}", "a".repeat(40), "b".repeat(20));
        assert!(workload_name(&longest).len() <= 63);
    }

    #[test]
    fn no_two_accounts_form_the_same_hostname() {
        // With hyphens in usernames, app "a-b" of "c" and app "a" of "b-c" both wanted a-b-c. The owner is now the
        // last part of every label, so labels of different owners differ whatever the app and channel names.
        let apps = ["a", "a-b", "b", "x-y-z"];
        let channels = ["prod", "a", "b-c", "y"];
        let owners = ["c", "bc", "b", "z"];
        let mut seen = std::collections::HashMap::new();
        for app in apps {
            for channel in channels {
                for owner in owners {
                    let label = channel_host_label(
                        &app.parse().unwrap(),
                        &channel.parse().unwrap(),
                        &owner.parse().unwrap(),
                    )
                    .unwrap();
                    if let Some(other) = seen.insert(label.clone(), owner) {
                        assert_eq!(other, owner, "{label} is formed by {other} and {owner}");
                    }
                }
            }
        }
    }

    #[test]
    fn hostnames_follow_the_spec_forms() {
        let (app, owner): (AppName, Username) = ("blog".parse().unwrap(), "alice".parse().unwrap());
        let prod = ChannelName::prod();
        let next: ChannelName = "next".parse().unwrap();
        assert_eq!(
            channel_hostname(&app, &prod, &owner, "apps.test").unwrap(),
            "blog-alice.apps.test"
        );
        assert_eq!(
            channel_hostname(&app, &next, &owner, "apps.test").unwrap(),
            "next-blog-alice.apps.test"
        );
        let long: AppName = "a".repeat(40).parse().unwrap();
        let longer: ChannelName = "c".repeat(30).parse().unwrap();
        assert_eq!(
            channel_host_label(&long, &longer, &owner),
            Err(InvalidName(messages::HOST_LABEL_TOO_LONG))
        );
        assert_eq!(channel_host_label(&long, &prod, &owner).unwrap().len(), 46);
    }

    #[test]
    fn channel_resource_names_round_trip() {
        let app: AppName = "blog".parse().unwrap();
        let ch: ChannelName = "staging".parse().unwrap();
        let name = channel_resource_name(&app, &ch);
        assert_eq!(name, "blog.staging");
        assert_eq!(parse_channel_resource_name(&name).unwrap(), (app, ch));
        assert!(parse_channel_resource_name("blog").is_err());
    }
}
