//! The text operations of a changeset, as pure functions over a file's bytes: `edits` (replace an exact string)
//! and `patches` (hunks without line numbers). Both match byte-exactly — whitespace, indentation and line endings
//! included — and a failure says which path and what did not match, so a caller can fix its request without
//! reading the file again.
//!
//! Hunk text: one or more hunks, each a header line `@@` or `@@ <anchor>` followed by body lines that begin with
//! a space (context), `-` (removed) or `+` (added). An empty body line is an empty context line and a `\ No newline
//! at end of file` marker is ignored. Hunks apply in file order. With an anchor, the first line at or after the end
//! of the previous hunk that contains the anchor is found, and the hunk matches the first place whose lines reach
//! that line or start just below it (the anchor sits on a line the hunk covers, or just above it). Without one,
//! the first place at or after the previous hunk matches. A hunk of only `+` lines inserts just below its anchor,
//! or at the end of the previous hunk (the top of the file for the first).

use memchr::memmem;

/// One `edits` entry: replace `old_string` with `new_string`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
pub struct Edit {
    /// Exact text to find; must occur exactly once unless `replace_all`.
    pub old_string: String,
    /// Replacement text.
    pub new_string: String,
    /// Replace every occurrence (at least one) instead of exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

/// An edit or hunk that did not resolve; the message names the path and what did not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct Unresolved {
    /// The file.
    pub path: String,
    /// What did not match.
    pub message: String,
}

fn unresolved(path: &str, message: String) -> Unresolved {
    Unresolved {
        path: path.to_owned(),
        message,
    }
}

/// Applies `edits` in order to `content`.
pub fn apply_edits(path: &str, content: &[u8], edits: &[Edit]) -> Result<Vec<u8>, Unresolved> {
    let mut current = content.to_vec();
    for (i, edit) in edits.iter().enumerate() {
        let which = format!("edit {} of {}", i + 1, edits.len());
        let old = edit.old_string.as_bytes();
        if old.is_empty() {
            return Err(unresolved(
                path,
                format!("{which}: old_string must not be empty"),
            ));
        }
        let found: Vec<usize> = memmem::find_iter(&current, old).collect();
        if found.is_empty() {
            return Err(unresolved(
                path,
                format!(
                    "{which}: old_string {:?} was not found",
                    shorten(&edit.old_string)
                ),
            ));
        }
        if found.len() > 1 && !edit.replace_all {
            return Err(unresolved(
                path,
                format!(
                    "{which}: old_string {:?} occurs {} times; add surrounding text to make it unique or set replace_all",
                    shorten(&edit.old_string),
                    found.len()
                ),
            ));
        }
        // Non-overlapping occurrences, left to right, as str::replace does.
        let mut out = Vec::with_capacity(current.len());
        let mut last = 0;
        for at in found {
            if at < last {
                continue;
            }
            out.extend_from_slice(&current[last..at]);
            out.extend_from_slice(edit.new_string.as_bytes());
            last = at + old.len();
        }
        out.extend_from_slice(&current[last..]);
        current = out;
    }
    Ok(current)
}

/// A line of a file: its bytes without the `\n`, and whether a `\n` ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    text: Vec<u8>,
    newline: bool,
}

fn split_lines(content: &[u8]) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        match memchr::memchr(b'\n', rest) {
            Some(i) => {
                lines.push(Line {
                    text: rest[..i].to_vec(),
                    newline: true,
                });
                rest = &rest[i + 1..];
            }
            None => {
                lines.push(Line {
                    text: rest.to_vec(),
                    newline: false,
                });
                rest = &[];
            }
        }
    }
    lines
}

fn join_lines(lines: &[Line]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.iter().map(|l| l.text.len() + 1).sum());
    for line in lines {
        out.extend_from_slice(&line.text);
        if line.newline {
            out.push(b'\n');
        }
    }
    out
}

/// One parsed hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk<'a> {
    anchor: Option<&'a str>,
    /// Context and removed lines, in order: what must match.
    old: Vec<&'a str>,
    /// Context and added lines, in order: what replaces it.
    new: Vec<&'a str>,
}

fn parse_hunks<'a>(path: &str, text: &'a str) -> Result<Vec<Hunk<'a>>, Unresolved> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    let mut hunks: Vec<Hunk<'a>> = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let n = n + 1;
        if let Some(header) = line.strip_prefix("@@") {
            let anchor = header.strip_prefix(' ').unwrap_or(header);
            if looks_numbered(anchor) {
                return Err(unresolved(
                    path,
                    format!(
                        "line {n} of the patch: hunk headers carry no line numbers; write '@@' or '@@ <anchor>', not {line:?}"
                    ),
                ));
            }
            hunks.push(Hunk {
                anchor: (!anchor.is_empty()).then_some(anchor),
                old: Vec::new(),
                new: Vec::new(),
            });
            continue;
        }
        let Some(hunk) = hunks.last_mut() else {
            if line.starts_with("--- ") || line.starts_with("+++ ") {
                continue; // a unified diff's file header
            }
            return Err(unresolved(
                path,
                format!(
                    "line {n} of the patch: a patch starts with a hunk header ('@@' or '@@ <anchor>'), found {line:?}"
                ),
            ));
        };
        match line.as_bytes().first() {
            None => {
                hunk.old.push("");
                hunk.new.push("");
            }
            Some(b' ') => {
                hunk.old.push(&line[1..]);
                hunk.new.push(&line[1..]);
            }
            Some(b'-') => hunk.old.push(&line[1..]),
            Some(b'+') => hunk.new.push(&line[1..]),
            Some(b'\\') => {}
            Some(_) => {
                return Err(unresolved(
                    path,
                    format!(
                        "line {n} of the patch: a hunk line starts with ' ', '-' or '+', found {:?}",
                        shorten(line)
                    ),
                ));
            }
        }
    }
    if hunks.is_empty() {
        return Err(unresolved(
            path,
            "the patch holds no hunk ('@@' header)".into(),
        ));
    }
    for (i, hunk) in hunks.iter().enumerate() {
        if hunk.old.is_empty() && hunk.new.is_empty() {
            return Err(unresolved(
                path,
                format!("hunk {} of the patch is empty", i + 1),
            ));
        }
    }
    Ok(hunks)
}

/// `-12,3 +12,4 @@ ...`: a unified diff header that slipway's format leaves out.
fn looks_numbered(anchor: &str) -> bool {
    let mut parts = anchor.splitn(3, ' ');
    let is_range = |s: Option<&str>, sign: char| {
        s.and_then(|s| s.strip_prefix(sign)).is_some_and(|r| {
            !r.is_empty()
                && r.split(',')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    is_range(parts.next(), '-') && is_range(parts.next(), '+')
}

/// Applies the hunks of `patch` to `content`.
pub fn apply_patch(path: &str, content: &[u8], patch: &str) -> Result<Vec<u8>, Unresolved> {
    let hunks = parse_hunks(path, patch)?;
    let mut lines = split_lines(content);
    let mut cursor = 0;
    let count = hunks.len();
    for (i, hunk) in hunks.iter().enumerate() {
        let which = if count == 1 {
            "the hunk".to_owned()
        } else {
            format!("hunk {} of {count}", i + 1)
        };
        let anchor_line = match hunk.anchor {
            Some(anchor) => Some(
                (cursor..lines.len())
                    .find(|&l| memmem::find(&lines[l].text, anchor.as_bytes()).is_some())
                    .ok_or_else(|| {
                        unresolved(
                            path,
                            format!(
                                "{which}: no line{} contains the anchor {:?}",
                                after(cursor),
                                shorten(anchor)
                            ),
                        )
                    })?,
            ),
            None => None,
        };
        let at = if hunk.old.is_empty() {
            anchor_line.map_or(cursor, |a| a + 1)
        } else {
            let first = match anchor_line {
                Some(a) => (a + 1).saturating_sub(hunk.old.len()).max(cursor),
                None => cursor,
            };
            find_block(&lines, first, &hunk.old).map_err(|closest| {
                unresolved(path, describe_miss(&which, hunk, &lines, first, closest))
            })?
        };
        let end = at + hunk.old.len();
        // The file's last line keeps its lack of a final newline when the hunk replaces or extends it.
        let ends_file = end == lines.len();
        let missing_final_newline = ends_file && lines.last().is_some_and(|l| !l.newline);
        let mut replacement: Vec<Line> = hunk
            .new
            .iter()
            .map(|t| Line {
                text: t.as_bytes().to_vec(),
                newline: true,
            })
            .collect();
        if missing_final_newline {
            if let Some(last) = replacement.last_mut() {
                last.newline = false;
                if hunk.old.is_empty()
                    && let Some(prev) = lines.last_mut()
                {
                    prev.newline = true;
                }
            } else if at > 0 {
                lines[at - 1].newline = false;
            }
        }
        let added = replacement.len();
        lines.splice(at..end, replacement);
        cursor = at + added;
    }
    Ok(join_lines(&lines))
}

fn after(cursor: usize) -> String {
    if cursor == 0 {
        String::new()
    } else {
        format!(" after line {cursor}")
    }
}

/// The first index at or after `from` where `block` matches; on a miss, the closest attempt as (index, lines
/// that matched).
fn find_block(
    lines: &[Line],
    from: usize,
    block: &[&str],
) -> Result<usize, Option<(usize, usize)>> {
    let mut closest: Option<(usize, usize)> = None;
    let mut at = from;
    while at + block.len() <= lines.len() {
        let matched = block
            .iter()
            .zip(&lines[at..])
            .take_while(|(want, have)| want.as_bytes() == have.text.as_slice())
            .count();
        if matched == block.len() {
            return Ok(at);
        }
        if matched > 0 && closest.is_none_or(|(_, best)| matched > best) {
            closest = Some((at, matched));
        }
        at += 1;
    }
    Err(closest)
}

fn describe_miss(
    which: &str,
    hunk: &Hunk<'_>,
    lines: &[Line],
    from: usize,
    closest: Option<(usize, usize)>,
) -> String {
    let place = match hunk.anchor {
        Some(anchor) => format!(" from the anchor {:?} on", shorten(anchor)),
        None => after(from),
    };
    match closest {
        Some((at, matched)) => {
            let have = lines
                .get(at + matched)
                .map(|l| format!("{:?}", shorten(&String::from_utf8_lossy(&l.text))))
                .unwrap_or_else(|| "the end of the file".into());
            format!(
                "{which}: its context and removed lines were not found{place}; the closest place (line {}) matches {matched} of {} lines, then line {} is {have} where the hunk expects {:?}",
                at + 1,
                hunk.old.len(),
                at + matched + 1,
                shorten(hunk.old[matched]),
            )
        }
        None => format!(
            "{which}: its context and removed lines were not found{place}; no line matches its first line {:?}",
            shorten(hunk.old[0])
        ),
    }
}

/// Keeps messages short: at most 80 characters of quoted text.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edit(old: &str, new: &str, all: bool) -> Edit {
        Edit {
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        }
    }

    #[test]
    fn edits_replace_exactly_once_unless_replace_all() {
        let text = b"let a = 1;\nlet b = 1;\n";
        assert_eq!(
            apply_edits("f", text, &[edit("a = 1", "a = 2", false)]).unwrap(),
            b"let a = 2;\nlet b = 1;\n"
        );
        let err = apply_edits("src/f.rs", text, &[edit("= 1", "= 3", false)]).unwrap_err();
        assert!(
            err.to_string().contains("src/f.rs") && err.message.contains("occurs 2 times"),
            "{err}"
        );
        assert_eq!(
            apply_edits("f", text, &[edit("= 1", "= 3", true)]).unwrap(),
            b"let a = 3;\nlet b = 3;\n"
        );
        let err = apply_edits("f", text, &[edit("= 9", "", true)]).unwrap_err();
        assert!(err.message.contains("was not found"), "{err}");
        assert!(apply_edits("f", text, &[edit("", "x", true)]).is_err());
        // Edits apply in order, each on the result of the one before.
        let two = [edit("a = 1", "a = 2", false), edit("a = 2", "a = 5", false)];
        assert_eq!(
            apply_edits("f", text, &two).unwrap(),
            b"let a = 5;\nlet b = 1;\n"
        );
        // Byte-exact: a CRLF file is not matched by a LF old_string spanning the line end.
        assert!(apply_edits("f", b"a\r\nb\r\n", &[edit("a\nb", "x", false)]).is_err());
    }

    #[test]
    fn a_hunk_without_anchor_matches_the_first_place() {
        let file = b"one\ntwo\nthree\n";
        let out = apply_patch("f", file, "@@\n one\n-two\n+2\n three\n").unwrap();
        assert_eq!(out, b"one\n2\nthree\n");
    }

    #[test]
    fn an_anchor_starts_the_search() {
        let file = b"fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n";
        let out = apply_patch("f", file, "@@ fn b() {\n-    x();\n+    y();\n").unwrap();
        assert_eq!(out, b"fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n");
        // The anchor may also be a line the hunk covers.
        let out = apply_patch("f", file, "@@ fn b\n }\n fn b() {\n-    x();\n+    z();\n").unwrap();
        assert_eq!(out, b"fn a() {\n    x();\n}\nfn b() {\n    z();\n}\n");
        let err = apply_patch("f", file, "@@ fn c\n-x\n").unwrap_err();
        assert!(err.message.contains("anchor \"fn c\""), "{err}");
    }

    #[test]
    fn hunks_apply_in_order_and_inserts_go_below_the_anchor() {
        let file = b"a\nb\nc\nd\n";
        let out = apply_patch("f", file, "@@\n-a\n+A\n@@ c\n+c2\n@@\n-d\n").unwrap();
        assert_eq!(out, b"A\nb\nc\nc2\n");
        // The first hunk's place is not searched again.
        assert!(apply_patch("f", file, "@@\n-b\n@@\n-a\n").is_err());
        // Pure insertion without anchor goes to the top.
        assert_eq!(apply_patch("f", b"x\n", "@@\n+top\n").unwrap(), b"top\nx\n");
    }

    #[test]
    fn a_missing_final_newline_is_kept() {
        assert_eq!(
            apply_patch("f", b"a\nb", "@@\n a\n-b\n+c\n").unwrap(),
            b"a\nc"
        );
        assert_eq!(apply_patch("f", b"a\nb", "@@ b\n+c\n").unwrap(), b"a\nb\nc");
        assert_eq!(apply_patch("f", b"a\nb", "@@\n a\n-b\n").unwrap(), b"a");
    }

    #[test]
    fn a_miss_says_what_did_not_match() {
        let file = b"alpha\nbeta\ngamma\n";
        let err = apply_patch("web/app.js", file, "@@\n alpha\n beta\n-delta\n+x\n").unwrap_err();
        assert_eq!(err.path, "web/app.js");
        assert!(err.message.contains("matches 2 of 3 lines"), "{err}");
        assert!(
            err.message.contains("\"gamma\"") && err.message.contains("\"delta\""),
            "{err}"
        );
        // Whitespace counts.
        assert!(apply_patch("f", file, "@@\n-alpha \n").is_err());
        assert!(apply_patch("f", b"a\r\nb\r\n", "@@\n-a\n").is_err());
        assert_eq!(
            apply_patch("f", b"a\r\nb\r\n", "@@\n-a\r\n").unwrap(),
            b"b\r\n"
        );
    }

    #[test]
    fn malformed_patches_are_refused() {
        for bad in [
            "",
            "no header\n",
            "@@\n",
            "@@\n*x\n",
            "@@ -1,2 +1,3 @@\n a\n",
        ] {
            assert!(apply_patch("f", b"a\n", bad).is_err(), "{bad:?}");
        }
        assert!(apply_patch("f", b"a\n", "--- a/f\n+++ b/f\n@@\n-a\n+b\n").is_ok());
    }

    proptest! {
        #[test]
        fn arbitrary_patches_never_panic(content in proptest::collection::vec(any::<u8>(), 0..200), patch in "(@@[ a-z]{0,3}\n|[ +\\-\\\\]?[a-c\r]{0,3}\n){0,12}") {
            let _ = apply_patch("f", &content, &patch);
            let _ = apply_edits("f", &content, &[Edit { old_string: patch.clone(), new_string: "x".into(), replace_all: false }]);
        }

        #[test]
        fn a_hunk_cut_from_the_file_applies_where_it_was_cut(
            n in 1usize..30, start in 0usize..30, len in 1usize..6, remove in proptest::collection::vec(any::<bool>(), 6), add in "[a-z]{1,5}"
        ) {
            let lines: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
            let start = start % n;
            let end = (start + len).min(n);
            let content = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
            let mut patch = String::from("@@\n");
            let mut expected: Vec<String> = lines[..start].to_vec();
            for (k, line) in lines[start..end].iter().enumerate() {
                if remove[k] {
                    patch.push_str(&format!("-{line}\n"));
                } else {
                    patch.push_str(&format!(" {line}\n"));
                    expected.push(line.clone());
                }
            }
            patch.push_str(&format!("+{add}\n"));
            expected.push(add.clone());
            expected.extend(lines[end..].iter().cloned());
            let out = apply_patch("f", content.as_bytes(), &patch).unwrap();
            let want = expected.iter().map(|l| format!("{l}\n")).collect::<String>();
            prop_assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
