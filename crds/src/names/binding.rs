//! A channel's git ref binding, `branch:<name>`.

use super::*;

/// A channel's git ref binding, `branch:<name>`; the legacy `branch:*` is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct GitRefBinding {
    branch: BranchName,
}

impl GitRefBinding {
    /// The binding of a channel that follows `branch`.
    pub fn branch(branch: BranchName) -> Self {
        Self { branch }
    }

    /// The binding of the `prod` channel.
    pub fn prod() -> Self {
        Self {
            branch: BranchName(PROD_BRANCH.to_owned()),
        }
    }

    /// The branch this binding follows.
    pub fn branch_name(&self) -> &BranchName {
        &self.branch
    }
}

impl FromStr for GitRefBinding {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let branch = s
            .strip_prefix(BINDING_PREFIX)
            .ok_or(InvalidName(messages::BINDING))?;
        if branch == "*" {
            return Err(InvalidName(messages::BINDING_WILDCARD));
        }
        let branch = branch.parse().map_err(|_| InvalidName(messages::BINDING))?;
        Ok(Self { branch })
    }
}

impl fmt::Display for GitRefBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{BINDING_PREFIX}{}", self.branch)
    }
}

impl From<GitRefBinding> for String {
    fn from(b: GitRefBinding) -> Self {
        b.to_string()
    }
}

impl<'de> Deserialize<'de> for GitRefBinding {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_name_one_branch() {
        let b: GitRefBinding = "branch:feature/login".parse().unwrap();
        assert_eq!(b.branch_name().as_str(), "feature/login");
        assert_eq!(b.to_string(), "branch:feature/login");
        assert_eq!(
            "branch:*".parse::<GitRefBinding>(),
            Err(InvalidName(messages::BINDING_WILDCARD))
        );
        for bad in [
            "master",
            "branch:",
            "tag:v1",
            "branch:a..b",
            "branch:-x",
            "branch:x.lock",
            "branch:a b",
        ] {
            assert_eq!(
                bad.parse::<GitRefBinding>(),
                Err(InvalidName(messages::BINDING)),
                "{bad}"
            );
        }
        assert_eq!(GitRefBinding::prod().to_string(), "branch:master");
    }
}
