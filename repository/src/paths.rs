//! Repository-relative paths as the changeset, blob and tree routes accept them. A path names a file inside the
//! repository and nothing else: it can never climb out (`..`), start at the root, or reach into git's own
//! `.git` directory, so a commit made by the API is one any git client checks out safely.

use std::fmt;

/// Longest path accepted, in bytes (git itself has no limit; file systems stop at 4096).
pub const PATH_MAX_LEN: usize = 4096;

/// [`RepoPath::parse`]'s rules but the length as a JSON Schema pattern (ECMA-262), stated in the OpenAPI document;
/// a test holds it to the parser.
pub const PATTERN: &str = r"^(?!/)(?!.*/$)(?!.*//)(?!(?:.*/)?\.{1,2}(?:/|$))(?!(?:.*/)?\.[Gg][Ii][Tt](?:/|$))[^\u0000-\u001F\u007F\\]+$";

/// A validated repository-relative path: `/`-separated, non-empty components, none of them `.`, `..` or `.git`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoPath(String);

/// Why a path was refused; the message names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid path {path:?}: {reason}")]
pub struct InvalidPath {
    /// The path as sent.
    pub path: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl RepoPath {
    /// Validates `path`.
    pub fn parse(path: &str) -> Result<Self, InvalidPath> {
        let fail = |reason| {
            Err(InvalidPath {
                path: path.to_owned(),
                reason,
            })
        };
        if path.is_empty() {
            return fail("a path must not be empty");
        }
        if path.len() > PATH_MAX_LEN {
            return fail("a path must be at most 4096 bytes");
        }
        if path.starts_with('/') {
            return fail("a path must be relative to the repository root (no leading '/')");
        }
        if path.ends_with('/') {
            return fail("a path must name a file (no trailing '/')");
        }
        if path
            .bytes()
            .any(|b| b == 0 || b == b'\\' || b.is_ascii_control())
        {
            return fail("a path must not contain NUL, control characters or '\\'");
        }
        for component in path.split('/') {
            match component {
                "" => return fail("a path must not contain empty components ('//')"),
                "." | ".." => return fail("a path must not contain '.' or '..' components"),
                c if c.eq_ignore_ascii_case(".git") => {
                    return fail("a path must not reach into .git");
                }
                _ => {}
            }
        }
        Ok(Self(path.to_owned()))
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The directories leading to the file, shortest first (`a`, `a/b` for `a/b/c`).
    pub fn parents(&self) -> impl Iterator<Item = &str> {
        self.0.match_indices('/').map(|(i, _)| &self.0[..i])
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_pattern_says_what_the_parser_accepts(
            parts in proptest::collection::vec(
                proptest::sample::select(vec!["a", ".", "..", ".git", ".GiT", "", "b.c", "x\\y", "t\u{1}", "é"]),
                1..5,
            ),
            lead in any::<bool>(),
            trail in any::<bool>(),
        ) {
            let path = format!("{}{}{}", if lead { "/" } else { "" }, parts.join("/"), if trail { "/" } else { "" });
            let matches = fancy_regex::Regex::new(PATTERN).unwrap().is_match(&path).unwrap();
            prop_assert_eq!(matches, RepoPath::parse(&path).is_ok(), "{:?}", path);
        }
    }

    #[test]
    fn ordinary_paths_are_accepted() {
        for p in [
            "README.md",
            "src/main.rs",
            "a/b/c.d",
            ".github/workflows/ci.yml",
            ".gitignore",
            "x..y",
            "..a",
        ] {
            assert_eq!(RepoPath::parse(p).unwrap().as_str(), p);
        }
    }

    #[test]
    fn escaping_and_git_paths_are_refused_with_the_path_named() {
        for p in [
            "",
            "/etc/passwd",
            "a/../b",
            "..",
            ".",
            "./a",
            "a/./b",
            "a//b",
            "a/",
            ".git/config",
            ".git",
            "sub/.git/hooks/pre-commit",
            ".GIT/config",
            "a\\b",
            "a\0b",
            "a\nb",
        ] {
            let err = RepoPath::parse(p).unwrap_err();
            assert_eq!(err.path, p);
            assert!(err.to_string().contains(&format!("{p:?}")), "{err}");
        }
    }

    #[test]
    fn parents_are_listed_shortest_first() {
        let p = RepoPath::parse("a/b/c").unwrap();
        assert_eq!(p.parents().collect::<Vec<_>>(), ["a", "a/b"]);
        assert_eq!(RepoPath::parse("c").unwrap().parents().count(), 0);
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics_and_accepted_paths_are_safe(s in "\\PC{0,40}|[a./\\\\g-]{0,12}") {
            if let Ok(p) = RepoPath::parse(&s) {
                prop_assert!(!p.as_str().starts_with('/'));
                for c in p.as_str().split('/') {
                    prop_assert!(!c.is_empty() && c != "." && c != ".." && !c.eq_ignore_ascii_case(".git"));
                }
            }
        }

        #[test]
        fn joined_safe_components_are_accepted(parts in proptest::collection::vec("[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,8}", 1..5)) {
            let path = parts.join("/");
            prop_assume!(parts.iter().all(|c| !c.eq_ignore_ascii_case(".git")));
            prop_assert!(RepoPath::parse(&path).is_ok(), "{}", path);
        }
    }
}
