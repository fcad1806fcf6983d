//! The changeset engine: one real commit on top of a branch's head from whole-file changes, string edits and
//! hunks, written with gix and published with a compare-and-swap of the branch ref. The ref moves only from the
//! head the commit was built on to the new commit, under git's own ref lock, so a concurrent push or changeset is
//! never overwritten: the loser rebuilds its commit on the new head (its edits resolved again) and either lands on
//! top or answers a conflict. Nothing is validated after an object is written, and the ref is the only thing a
//! failure could have changed, so a failed changeset leaves the branch exactly where it was (unreferenced objects
//! are swept by `git gc`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gix::ObjectId;
use gix::object::tree::EntryKind;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use slipway_crds::names::BranchName;

use super::patch::{self, Edit, Unresolved};
use super::paths::RepoPath;
use super::store;

/// How many times a changeset is rebuilt on a moved head before it answers a conflict.
pub const ATTEMPTS: usize = 4;

/// A validated changeset.
#[derive(Debug, Clone)]
pub struct Changeset {
    /// The branch to commit on.
    pub branch: BranchName,
    /// The commit message (non-empty).
    pub message: String,
    /// Whole-file upserts (`Some`) and deletions (`None`).
    pub changes: BTreeMap<RepoPath, Option<String>>,
    /// String edits per existing file.
    pub edits: BTreeMap<RepoPath, Vec<Edit>>,
    /// Hunk text per existing file.
    pub patches: BTreeMap<RepoPath, String>,
}

/// Who the commit is by.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Author and committer name.
    pub name: String,
    /// Author and committer email.
    pub email: String,
}

/// Why a changeset did not land.
#[derive(Debug, thiserror::Error)]
pub enum ChangesetError {
    /// The request cannot apply to the branch as it is (400).
    #[error("{0}")]
    Invalid(String),
    /// The branch kept moving, or moved so that the changeset no longer applies (409).
    #[error("{0}")]
    Conflict(String),
    /// Anything else (500).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<gix::Error> for ChangesetError {
    fn from(e: gix::Error) -> Self {
        ChangesetError::Internal(e.into())
    }
}

/// What a path is in a tree being edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Blob(EntryKind, ObjectId),
    Other,
}

/// How the new commit moves the branch.
pub enum RefWrite<'a> {
    /// In this process with gix, under git's lock file (a repository on a volume).
    InProcess,
    /// With `git update-ref`, started with these `-c` options and environment, so that git's
    /// `reference-transaction` hook publishes the update (a repository in object storage). After a refusal,
    /// `resync` brings the repository up to date before the changeset is built again.
    Git {
        /// `-c` options before the subcommand.
        config: &'a [String],
        /// Environment variables.
        env: &'a [(&'static str, String)],
        /// Brings the repository up to date.
        resync: &'a dyn Fn() -> anyhow::Result<()>,
    },
}

/// Commits `changeset` to the repository at `repo_path`, moving the branch as `write` says, and returns the new
/// commit. Blocking: run it off the async runtime.
pub fn commit(
    repo_path: &Path,
    changeset: &Changeset,
    who: &Identity,
    write: &RefWrite<'_>,
) -> Result<ObjectId, ChangesetError> {
    let repo = store::open(repo_path)?;
    let name = gix::refs::FullName::try_from(store::branch_ref(&changeset.branch).as_str())
        .map_err(|e| {
            ChangesetError::Invalid(format!("invalid branch name {}: {e}", changeset.branch))
        })?;
    for attempt in 0..ATTEMPTS {
        let head = store::branch_head(&repo, &changeset.branch)?;
        let tree = match build_tree(&repo, head, changeset) {
            Ok(tree) => tree,
            Err(ChangesetError::Invalid(message)) if attempt > 0 => {
                return Err(ChangesetError::Conflict(format!(
                    "{} moved while this changeset was being committed and it no longer applies: {message}",
                    changeset.branch
                )));
            }
            Err(e) => return Err(e),
        };
        let now = gix::date::Time::now_utc();
        let signature = gix::actor::Signature {
            name: who.name.as_str().into(),
            email: who.email.as_str().into(),
            time: now,
        };
        let mut message = changeset.message.clone();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        let commit = gix::objs::Commit {
            tree,
            parents: head.into_iter().collect(),
            author: signature.clone(),
            committer: signature.clone(),
            encoding: None,
            message: message.as_str().into(),
            extra_headers: Vec::new(),
        };
        let id = repo.write_object(&commit)?.detach();
        if let RefWrite::Git {
            config,
            env,
            resync,
        } = write
        {
            let reflog = format!("changeset: {}", first_line(&changeset.message));
            match update_ref_with_git(repo_path, config, env, &name, head, id, &reflog) {
                Ok(()) => return Ok(id),
                Err(e) => {
                    tracing::debug!(error = %e, attempt, "changeset ref update was refused");
                    resync()?;
                    continue;
                }
            }
        }
        let edit = RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: format!("changeset: {}", first_line(&changeset.message)).into(),
                },
                expected: match head {
                    Some(h) => PreviousValue::MustExistAndMatch(gix::refs::Target::Object(h)),
                    None => PreviousValue::MustNotExist,
                },
                new: gix::refs::Target::Object(id),
            },
            name: name.clone(),
            deref: false,
        };
        let mut time_buf = gix::date::parse::TimeBuf::default();
        let committer = gix::actor::SignatureRef {
            name: signature.name.as_ref(),
            email: signature.email.as_ref(),
            time: signature.time.to_str(&mut time_buf),
        };
        match repo.edit_references_as([edit], Some(committer)) {
            Ok(_) => return Ok(id),
            Err(e) => {
                // The head moved, or a push holds the ref's lock: try again on whatever the head is now.
                tracing::debug!(error = %e, attempt, "changeset ref update lost a race");
                std::thread::sleep(Duration::from_millis(20 * (attempt as u64 + 1)));
            }
        }
    }
    Err(ChangesetError::Conflict(format!(
        "{} kept moving while this changeset was being committed; nothing was written, send it again",
        changeset.branch
    )))
}

/// `git update-ref` of `name` from `old` (`None`: must not exist) to `new`.
fn update_ref_with_git(
    repo_path: &Path,
    config: &[String],
    env: &[(&'static str, String)],
    name: &gix::refs::FullName,
    old: Option<ObjectId>,
    new: ObjectId,
    reflog: &str,
) -> anyhow::Result<()> {
    let old = old.unwrap_or_else(|| ObjectId::null(gix::hash::Kind::Sha1));
    let out = std::process::Command::new("git")
        .args(config)
        .arg("--git-dir")
        .arg(repo_path)
        .args(["update-ref", "-m", reflog])
        .arg(name.as_bstr().to_string())
        .arg(new.to_string())
        .arg(old.to_string())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git update-ref: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// Every path of `head`'s tree with what it is.
fn flat_tree(
    repo: &gix::Repository,
    head: Option<ObjectId>,
) -> Result<BTreeMap<String, Node>, ChangesetError> {
    let Some(head) = head else {
        return Ok(BTreeMap::new());
    };
    let tree = repo.find_commit(head)?.tree()?;
    let mut nodes = BTreeMap::new();
    for entry in tree.traverse().breadthfirst.files()? {
        let kind = entry.mode.kind();
        let node = match kind {
            EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link => {
                Node::Blob(kind, entry.oid)
            }
            EntryKind::Tree => continue,
            EntryKind::Commit => Node::Other,
        };
        nodes.insert(entry.filepath.to_string(), node);
    }
    Ok(nodes)
}

/// Whether any path lies below `dir`.
fn has_children(nodes: &BTreeMap<String, Node>, dir: &str) -> bool {
    let prefix = format!("{dir}/");
    nodes
        .range(prefix.clone()..)
        .next()
        .is_some_and(|(p, _)| p.starts_with(&prefix))
}

/// Builds the new root tree and returns its id.
fn build_tree(
    repo: &gix::Repository,
    head: Option<ObjectId>,
    changeset: &Changeset,
) -> Result<ObjectId, ChangesetError> {
    let mut nodes = flat_tree(repo, head)?;
    let invalid = |e: Unresolved| ChangesetError::Invalid(e.to_string());
    let existing_blob = |nodes: &BTreeMap<String, Node>, path: &RepoPath, what: &str| match nodes
        .get(path.as_str())
    {
        Some(Node::Blob(kind, id)) => Ok((*kind, *id)),
        Some(Node::Other) => Err(ChangesetError::Invalid(format!(
            "{path}: {what} needs a file, and {path} is a submodule"
        ))),
        None if has_children(nodes, path.as_str()) => Err(ChangesetError::Invalid(format!(
            "{path}: {what} needs a file, and {path} is a directory"
        ))),
        None => Err(ChangesetError::Invalid(format!(
            "{path}: {what} needs an existing file, and {path} does not exist on {}",
            changeset.branch
        ))),
    };

    // New contents first, computed against the head as it is: every edit and hunk must resolve.
    let mut writes: Vec<(&RepoPath, EntryKind, Vec<u8>)> = Vec::new();
    let mut deletes: Vec<&RepoPath> = Vec::new();
    for (path, change) in &changeset.changes {
        match change {
            Some(content) => {
                let kind = match nodes.get(path.as_str()) {
                    Some(Node::Blob(kind, _)) => *kind,
                    _ => EntryKind::Blob,
                };
                writes.push((path, kind, content.as_bytes().to_vec()));
            }
            None => deletes.push(path),
        }
    }
    for (path, edits) in &changeset.edits {
        let (kind, id) = existing_blob(&nodes, path, "an edit")?;
        let data = repo.find_blob(id)?.take_data();
        writes.push((
            path,
            kind,
            patch::apply_edits(path.as_str(), &data, edits).map_err(invalid)?,
        ));
    }
    for (path, hunks) in &changeset.patches {
        let (kind, id) = existing_blob(&nodes, path, "a patch")?;
        let data = repo.find_blob(id)?.take_data();
        writes.push((
            path,
            kind,
            patch::apply_patch(path.as_str(), &data, hunks).map_err(invalid)?,
        ));
    }

    // Then the shape of the new tree: deletions, and files that would collide with a directory or a file.
    for path in &deletes {
        match nodes.get(path.as_str()) {
            Some(Node::Blob(..) | Node::Other) => {
                nodes.remove(path.as_str());
            }
            None if has_children(&nodes, path.as_str()) => {
                return Err(ChangesetError::Invalid(format!(
                    "{path}: cannot delete a directory; delete its files one by one"
                )));
            }
            None => {} // Already absent: the result is the same.
        }
    }
    for (path, kind, _) in &writes {
        if let Some(parent) = path.parents().find(|p| nodes.contains_key(*p)) {
            return Err(ChangesetError::Invalid(format!(
                "{path}: cannot create a file below {parent}, which is a file"
            )));
        }
        if has_children(&nodes, path.as_str()) {
            return Err(ChangesetError::Invalid(format!(
                "{path}: is a directory, not a file"
            )));
        }
        nodes.insert(
            path.as_str().to_owned(),
            Node::Blob(*kind, ObjectId::null(gix::hash::Kind::Sha1)),
        );
    }

    let base = match head {
        Some(head) => repo.find_commit(head)?.tree_id()?.detach(),
        None => ObjectId::empty_tree(gix::hash::Kind::Sha1),
    };
    let mut editor = repo.edit_tree(base)?;
    for path in deletes {
        editor.remove(path.as_str())?;
    }
    for (path, kind, data) in writes {
        let id = repo.write_blob(&data)?.detach();
        editor.upsert(path.as_str(), kind, id)?;
    }
    Ok(editor.write()?.detach())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bare_repo() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "slipway-changeset-{}.git",
            uuid::Uuid::new_v4().simple()
        ));
        let out = std::process::Command::new("git")
            .args(["init", "--quiet", "--bare", "--initial-branch=master"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        dir
    }

    fn who() -> Identity {
        Identity {
            name: "alice".into(),
            email: "alice@git.test".into(),
        }
    }

    fn changeset(changes: &[(&str, Option<&str>)]) -> Changeset {
        Changeset {
            branch: "master".parse().unwrap(),
            message: "test".into(),
            changes: changes
                .iter()
                .map(|(p, c)| (RepoPath::parse(p).unwrap(), c.map(str::to_owned)))
                .collect(),
            edits: BTreeMap::new(),
            patches: BTreeMap::new(),
        }
    }

    fn git(repo: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(repo)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn head(repo: &Path) -> Option<ObjectId> {
        store::branch_head(&store::open(repo).unwrap(), &"master".parse().unwrap()).unwrap()
    }

    #[test]
    fn commits_stack_and_git_reads_them() {
        let repo = bare_repo();
        let first = commit(
            &repo,
            &changeset(&[
                ("README.md", Some("hello\n")),
                ("src/a.rs", Some("fn a() {}\n")),
            ]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        assert_eq!(git(&repo, &["rev-list", "--count", "master"]).trim(), "1");
        let mut next = changeset(&[("README.md", None)]);
        next.edits.insert(
            RepoPath::parse("src/a.rs").unwrap(),
            vec![Edit {
                old_string: "a()".into(),
                new_string: "b()".into(),
                replace_all: false,
            }],
        );
        let second = commit(&repo, &next, &who(), &RefWrite::InProcess).unwrap();
        assert_eq!(
            git(&repo, &["rev-parse", "master^"]).trim(),
            first.to_string()
        );
        assert_eq!(
            git(&repo, &["rev-parse", "master"]).trim(),
            second.to_string()
        );
        assert_eq!(git(&repo, &["show", "master:src/a.rs"]), "fn b() {}\n");
        assert_eq!(
            git(&repo, &["ls-tree", "-r", "--name-only", "master"]),
            "src/a.rs\n"
        );
        assert_eq!(
            git(&repo, &["log", "-1", "--format=%an <%ae>%n%s", "master"]),
            "alice <alice@git.test>\ntest\n"
        );
        // Deleting the last file of a directory leaves no empty tree behind.
        commit(
            &repo,
            &changeset(&[("src/a.rs", None), ("b.txt", Some("b"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        assert_eq!(
            git(&repo, &["ls-tree", "-r", "-t", "--name-only", "master"]),
            "b.txt\n"
        );
        git(&repo, &["fsck", "--strict"]);
        std::fs::remove_dir_all(repo).unwrap();
    }

    #[test]
    fn files_and_directories_do_not_collide() {
        let repo = bare_repo();
        commit(
            &repo,
            &changeset(&[("a/b.txt", Some("1")), ("c", Some("2"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        let before = head(&repo);
        for (bad, says) in [
            (vec![("a", Some("x"))], "is a directory"),
            (vec![("c/d", Some("x"))], "which is a file"),
            (vec![("a", None)], "cannot delete a directory"),
        ] {
            let err = commit(&repo, &changeset(&bad), &who(), &RefWrite::InProcess).unwrap_err();
            assert!(
                matches!(&err, ChangesetError::Invalid(m) if m.contains(says)),
                "{err}"
            );
            assert_eq!(head(&repo), before);
        }
        // Replacing a file by a directory in one changeset is fine.
        commit(
            &repo,
            &changeset(&[("c", None), ("c/d", Some("x"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        assert_eq!(git(&repo, &["show", "master:c/d"]), "x");
        std::fs::remove_dir_all(repo).unwrap();
    }

    #[test]
    fn a_branch_that_moved_is_built_on_again() {
        let repo = bare_repo();
        commit(
            &repo,
            &changeset(&[("f", Some("one\n"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        // Simulate a push between reading the head and publishing: another commit lands first.
        let mut edit = changeset(&[]);
        edit.edits.insert(
            RepoPath::parse("f").unwrap(),
            vec![Edit {
                old_string: "one".into(),
                new_string: "two".into(),
                replace_all: false,
            }],
        );
        let pushed = commit(
            &repo,
            &changeset(&[("g", Some("g\n"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        let ours = commit(&repo, &edit, &who(), &RefWrite::InProcess).unwrap();
        assert_eq!(
            git(&repo, &["rev-parse", "master^"]).trim(),
            pushed.to_string()
        );
        assert_eq!(
            git(&repo, &["rev-parse", "master"]).trim(),
            ours.to_string()
        );
        std::fs::remove_dir_all(repo).unwrap();
    }

    #[test]
    fn concurrent_commits_without_any_queue_never_lose_one() {
        let repo = bare_repo();
        commit(
            &repo,
            &changeset(&[("base", Some("0"))]),
            &who(),
            &RefWrite::InProcess,
        )
        .unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let repo = repo.clone();
                std::thread::spawn(move || {
                    let name = format!("t{i}");
                    commit(
                        &repo,
                        &changeset(&[(name.as_str(), Some("x"))]),
                        &who(),
                        &RefWrite::InProcess,
                    )
                    .map(|_| name)
                })
            })
            .collect();
        let mut landed = Vec::new();
        for t in threads {
            match t.join().unwrap() {
                Ok(name) => landed.push(name),
                Err(ChangesetError::Conflict(_)) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(!landed.is_empty());
        let count = git(&repo, &["rev-list", "--count", "master"]);
        assert_eq!(count.trim(), (1 + landed.len()).to_string());
        let files = git(&repo, &["ls-tree", "--name-only", "master"]);
        for name in &landed {
            assert!(files.lines().any(|l| l == name), "{name} was lost: {files}");
        }
        std::fs::remove_dir_all(repo).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn a_failed_changeset_never_moves_the_ref(
            files in proptest::collection::btree_map("[a-c]{1,2}(/[a-c]{1,2})?", proptest::option::of("[a-c\n]{0,8}"), 1..5),
            edit_path in "[a-c]{1,2}", old in "[a-c\n]{0,3}", replace_all in any::<bool>(),
            patch_path in "[a-c]{1,2}", hunk in "(@@[ a-c]{0,2}\n)?([ +\\-][a-c]{0,2}\n){0,4}",
        ) {
            let repo = bare_repo();
            commit(&repo, &changeset(&[("a", Some("abc\nab\n")), ("b/c", Some("c\n"))]), &who(), &RefWrite::InProcess).unwrap();
            let before = head(&repo);
            let mut cs = changeset(&[]);
            for (p, c) in &files {
                cs.changes.insert(RepoPath::parse(p).unwrap(), c.clone());
            }
            let edit_path = RepoPath::parse(&edit_path).unwrap();
            if !cs.changes.contains_key(&edit_path) {
                cs.edits.insert(edit_path, vec![Edit { old_string: old, new_string: "z".into(), replace_all }]);
            }
            let patch_path = RepoPath::parse(&patch_path).unwrap();
            if !cs.changes.contains_key(&patch_path) && !cs.edits.contains_key(&patch_path) {
                cs.patches.insert(patch_path, hunk);
            }
            match commit(&repo, &cs, &who(), &RefWrite::InProcess) {
                Ok(id) => {
                    prop_assert_eq!(head(&repo), Some(id));
                    git(&repo, &["fsck", "--strict"]);
                }
                Err(ChangesetError::Invalid(_)) => prop_assert_eq!(head(&repo), before),
                Err(other) => prop_assert!(false, "unexpected {}", other),
            }
            std::fs::remove_dir_all(repo).unwrap();
        }
    }
}
