//! Who may call which internal route.
//!
//! A caller is a Kubernetes identity (for the platform's own components, a ServiceAccount), proven by its token
//! ([`crate::review`]). The API server is told which identity plays which [`Role`] (`--internal-caller
//! ROLE=NAMESPACE/SERVICEACCOUNT`), and each role may call some [`RouteGroup`]s: the operator every one, the edge
//! only the archives of static sites (the files it serves) and its bandwidth reports. Any other identity, however
//! valid its token, may call nothing.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Prefix of the user names Kubernetes gives ServiceAccounts.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// A part of the platform that calls the internal routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The operator: resolves commits, reads sources, records env snapshots and deploy logs, asks for signed
    /// source URLs, records channels' object stores and databases and reads their credentials.
    Operator,
    /// The edge: reads the files of static sites it serves, reports the bytes it sent.
    Edge,
}

impl Role {
    /// The role's name in flags and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Edge => "edge",
        }
    }

    /// Whether this role may call the routes of `group`.
    pub fn permits(self, group: RouteGroup) -> bool {
        match self {
            Role::Operator => true,
            Role::Edge => matches!(group, RouteGroup::SiteArchives | RouteGroup::Bandwidth),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "operator" => Ok(Role::Operator),
            "edge" => Ok(Role::Edge),
            other => Err(format!("unknown role {other:?} (operator, edge)")),
        }
    }
}

/// The internal routes, grouped by what they give access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteGroup {
    /// `GET .../apps/{id}/commits/{rev}`: resolving a revision.
    Commits,
    /// `GET .../apps/{id}/archive/{sha}` of a static app: the files of a site.
    SiteArchives,
    /// `GET .../apps/{id}/archive/{sha}` of an app or docker app: source code.
    SourceArchives,
    /// `PUT .../deploys/{id}/env`: env values.
    Env,
    /// `POST .../deploys/{id}/log`: deploy logs.
    Logs,
    /// `POST .../apps/{id}/source-urls`: signed URLs for build pods.
    SourceUrls,
    /// `PUT`/`DELETE .../channels/{id}/blob`, `GET .../channels/{id}/blob/credentials`: channels' object stores
    /// and their key pairs.
    BlobStores,
    /// `PUT`/`GET`/`DELETE .../channels/{id}/postgres`: channels' databases and their roles' passwords;
    /// `PUT .../deploys/{id}/postgres-snapshot`: a deploy's pre-deploy snapshot.
    Databases,
    /// `POST .../usage/bandwidth`: the bytes an edge sent, per account.
    Bandwidth,
    /// `PUT .../runtime/containers/{id}`, `POST .../runtime/containers/{id}/log`: apps' container generations and
    /// their output.
    RuntimeLogs,
}

impl RouteGroup {
    /// The group's name in logs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteGroup::Commits => "commits",
            RouteGroup::SiteArchives => "site archives",
            RouteGroup::SourceArchives => "source archives",
            RouteGroup::Env => "env values",
            RouteGroup::Logs => "deploy logs",
            RouteGroup::SourceUrls => "source URLs",
            RouteGroup::BlobStores => "object stores",
            RouteGroup::Databases => "channel databases",
            RouteGroup::Bandwidth => "bandwidth reports",
            RouteGroup::RuntimeLogs => "runtime logs",
        }
    }
}

impl fmt::Display for RouteGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated caller: its Kubernetes user name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    username: String,
}

impl Identity {
    /// The identity of Kubernetes user `username` (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub fn from_username(username: impl Into<String>) -> Self {
        Self {
            username: username.into(),
        }
    }

    /// The identity of ServiceAccount `name` in `namespace`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self::from_username(format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"))
    }

    /// The Kubernetes user name.
    pub fn username(&self) -> &str {
        &self.username
    }
}

impl fmt::Display for Identity {
    /// `namespace/name` for a ServiceAccount, the user name otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self
            .username
            .strip_prefix(SERVICE_ACCOUNT_PREFIX)
            .and_then(|rest| rest.split_once(':'))
        {
            Some((namespace, name)) => write!(f, "{namespace}/{name}"),
            None => f.write_str(&self.username),
        }
    }
}

/// One `ROLE=NAMESPACE/SERVICEACCOUNT` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerSpec {
    /// The role.
    pub role: Role,
    /// The ServiceAccount that plays it.
    pub identity: Identity,
}

/// Whether `s` can be a namespace or ServiceAccount name (a DNS subdomain: lowercase letters, digits, `-`, `.`).
fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl FromStr for CallerSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("{s:?} is not ROLE=NAMESPACE/SERVICEACCOUNT");
        let (role, account) = s.trim().split_once('=').ok_or_else(usage)?;
        let (namespace, name) = account.split_once('/').ok_or_else(usage)?;
        if !is_object_name(namespace) || !is_object_name(name) {
            return Err(usage());
        }
        Ok(Self {
            role: role.parse()?,
            identity: Identity::service_account(namespace, name),
        })
    }
}

/// What the policy says about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The caller's role permits the route.
    Allowed(Role),
    /// The caller plays no role.
    NoRole,
    /// The caller's role does not permit the route.
    Denied(Role),
}

/// The identities that play a role.
#[derive(Debug, Clone, Default)]
pub struct Callers {
    roles: HashMap<Identity, Role>,
}

impl Callers {
    /// The callers of `specs`; refuses an identity given two different roles.
    pub fn new(specs: impl IntoIterator<Item = CallerSpec>) -> Result<Self, String> {
        let mut roles = HashMap::new();
        for spec in specs {
            match roles.insert(spec.identity.clone(), spec.role) {
                Some(other) if other != spec.role => {
                    return Err(format!(
                        "{} is given two roles: {other} and {}",
                        spec.identity, spec.role
                    ));
                }
                _ => {}
            }
        }
        Ok(Self { roles })
    }

    /// The role `identity` plays, if any.
    pub fn role_of(&self, identity: &Identity) -> Option<Role> {
        self.roles.get(identity).copied()
    }

    /// Whether `identity` may call the routes of `group`.
    pub fn decide(&self, identity: &Identity, group: RouteGroup) -> Decision {
        match self.role_of(identity) {
            None => Decision::NoRole,
            Some(role) if role.permits(group) => Decision::Allowed(role),
            Some(role) => Decision::Denied(role),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [RouteGroup; 10] = [
        RouteGroup::Commits,
        RouteGroup::SiteArchives,
        RouteGroup::SourceArchives,
        RouteGroup::Env,
        RouteGroup::Logs,
        RouteGroup::SourceUrls,
        RouteGroup::BlobStores,
        RouteGroup::Databases,
        RouteGroup::Bandwidth,
        RouteGroup::RuntimeLogs,
    ];

    fn callers() -> Callers {
        Callers::new([
            "operator=slipway-system/slipway-operator".parse().unwrap(),
            "edge=slipway-system/slipway-edge".parse().unwrap(),
        ])
        .unwrap()
    }

    #[test]
    fn the_operator_calls_everything_and_the_edge_reads_sites_and_reports_bandwidth_only() {
        let callers = callers();
        let operator = Identity::service_account("slipway-system", "slipway-operator");
        let edge = Identity::from_username("system:serviceaccount:slipway-system:slipway-edge");
        for group in ALL {
            assert_eq!(
                callers.decide(&operator, group),
                Decision::Allowed(Role::Operator)
            );
            let expected = if matches!(group, RouteGroup::SiteArchives | RouteGroup::Bandwidth) {
                Decision::Allowed(Role::Edge)
            } else {
                Decision::Denied(Role::Edge)
            };
            assert_eq!(callers.decide(&edge, group), expected, "{group}");
        }
    }

    #[test]
    fn anyone_else_gets_nothing() {
        let callers = callers();
        for who in [
            Identity::service_account("tenant", "slipway-operator"),
            Identity::service_account("slipway-system", "default"),
            Identity::from_username("slipway-operator"),
            Identity::from_username("system:admin"),
        ] {
            for group in ALL {
                assert_eq!(callers.decide(&who, group), Decision::NoRole, "{who}");
            }
        }
        assert_eq!(
            Callers::default().decide(
                &Identity::service_account("slipway-system", "slipway-operator"),
                RouteGroup::SiteArchives
            ),
            Decision::NoRole
        );
    }

    #[test]
    fn caller_settings_parse_strictly() {
        let spec: CallerSpec = " edge=ns/sa ".parse().unwrap();
        assert_eq!(spec.role, Role::Edge);
        assert_eq!(spec.identity.username(), "system:serviceaccount:ns:sa");
        assert_eq!(spec.identity.to_string(), "ns/sa");
        for bad in [
            "",
            "edge",
            "edge=ns",
            "edge=/sa",
            "edge=ns/",
            "admin=ns/sa",
            "edge=ns/sa/x",
            "edge=NS/sa",
            "edge=ns:x/sa",
        ] {
            assert!(bad.parse::<CallerSpec>().is_err(), "{bad:?}");
        }
        let twice = Callers::new([
            "edge=ns/sa".parse().unwrap(),
            "operator=ns/sa".parse().unwrap(),
        ]);
        assert!(twice.unwrap_err().contains("two roles"));
        assert!(
            Callers::new(["edge=ns/sa".parse().unwrap(), "edge=ns/sa".parse().unwrap()]).is_ok()
        );
    }
}
