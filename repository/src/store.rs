//! Reading an app's repository in-process with gix: resolving a ref (branch or sha) to a commit, listing a
//! commit's files with their sizes, and reading one file. These back the tree and blob routes and the changeset,
//! and never start a process.

use std::path::Path;

use anyhow::Context;
use gix::ObjectId;
use slipway_crds::names::BranchName;

/// What a file in a tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file (mode 100644).
    File,
    /// An executable file (mode 100755).
    Executable,
    /// A symbolic link; its content is the target path.
    Symlink,
    /// A submodule commit (no content here; size 0).
    Submodule,
}

/// One entry of a commit's flat file list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// Repository-relative path.
    pub path: String,
    /// Kind of entry.
    pub kind: FileKind,
    /// Size in bytes (0 for submodules).
    pub size: u64,
    /// The blob (or submodule commit).
    pub id: ObjectId,
}

/// Opens the bare repository at `path`, ignoring the machine's global and system git configuration.
pub fn open(path: &Path) -> anyhow::Result<gix::Repository> {
    gix::open_opts(path, gix::open::Options::isolated())
        .with_context(|| format!("open repository {}", path.display()))
}

/// The full ref name of a branch.
pub fn branch_ref(branch: &BranchName) -> String {
    format!("refs/heads/{branch}")
}

/// The commit `reference` names: a 40-hex commit id, `HEAD`, a branch name (bare or `refs/heads/...`) or another
/// full ref. `None` when there is no such commit (an empty repository has none).
pub fn resolve(repo: &gix::Repository, reference: &str) -> anyhow::Result<Option<ObjectId>> {
    let id = if reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
        ObjectId::from_hex(reference.to_ascii_lowercase().as_bytes()).context("parse sha")?
    } else {
        let name = if reference == "HEAD" || reference.starts_with("refs/") {
            reference.to_owned()
        } else {
            match BranchName::from_ref(reference) {
                Ok(branch) => branch_ref(&branch),
                Err(_) => return Ok(None),
            }
        };
        if gix::refs::FullName::try_from(name.as_str()).is_err() {
            return Ok(None);
        }
        let Some(mut found) = repo.try_find_reference(name.as_str())? else {
            return Ok(None);
        };
        match found.peel_to_id() {
            Ok(id) => id.detach(),
            // A symbolic ref to an unborn branch (HEAD of an empty repository).
            Err(_) => return Ok(None),
        }
    };
    commit_id(repo, id)
}

/// `id` if it names a commit in the repository (an annotated tag is peeled to its commit).
pub fn commit_id(repo: &gix::Repository, id: ObjectId) -> anyhow::Result<Option<ObjectId>> {
    let Some(object) = repo.try_find_object(id)? else {
        return Ok(None);
    };
    let object = match object.kind {
        gix::object::Kind::Tag => object.peel_tags_to_end()?,
        _ => object,
    };
    Ok((object.kind == gix::object::Kind::Commit).then_some(object.id))
}

/// The current head of `branch`, `None` for a branch that does not exist yet.
pub fn branch_head(
    repo: &gix::Repository,
    branch: &BranchName,
) -> anyhow::Result<Option<ObjectId>> {
    match repo.try_find_reference(branch_ref(branch).as_str())? {
        Some(mut r) => Ok(Some(r.peel_to_id()?.detach())),
        None => Ok(None),
    }
}

/// Every file of `commit`, sorted by path.
pub fn list_files(repo: &gix::Repository, commit: ObjectId) -> anyhow::Result<Vec<TreeFile>> {
    let tree = repo.find_commit(commit)?.tree()?;
    let mut files = Vec::new();
    for entry in tree.traverse().breadthfirst.files()? {
        let kind = match entry.mode.kind() {
            gix::object::tree::EntryKind::Blob => FileKind::File,
            gix::object::tree::EntryKind::BlobExecutable => FileKind::Executable,
            gix::object::tree::EntryKind::Link => FileKind::Symlink,
            gix::object::tree::EntryKind::Commit => FileKind::Submodule,
            gix::object::tree::EntryKind::Tree => continue,
        };
        let size = if kind == FileKind::Submodule {
            0
        } else {
            repo.find_header(entry.oid)?.size()
        };
        files.push(TreeFile {
            path: entry.filepath.to_string(),
            kind,
            size,
            id: entry.oid,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// The bytes of the file at `path` in `commit`; `None` when there is no file (a directory is not a file).
pub fn read_file(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let tree = repo.find_commit(commit)?.tree()?;
    let Some(entry) = tree.lookup_entry_by_path(path)? else {
        return Ok(None);
    };
    if !entry.mode().is_blob() && !entry.mode().is_link() {
        return Ok(None);
    }
    let mut blob = repo.find_blob(entry.object_id())?;
    Ok(Some(blob.take_data()))
}
