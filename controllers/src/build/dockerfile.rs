//! What a deploy builds, decided from the commit's root files before any pod runs: the Dockerfile the `app`
//! template generates, the checks that refuse a build at once (no `launch.sh`, no `Dockerfile`), and the notes on
//! stages whose base is not warm. Pure functions, so every rule is tested without a cluster.
//!
//! The `app` runtime rule: a `package.json` at the repository root selects `node:22-slim`, otherwise the image is
//! built on `python:3.13-slim`. The files are copied to `/app` (owned by uid 10001), `install.sh` (optional) runs
//! there at build time as root, and the image starts `launch.sh` as uid 10001 with `HOME=/home/app`.

use slipway_crds::Template;

use super::sources::Sources;

/// The warm bases: every node has them, so a stage on one starts without a network pull, and the final stage's
/// layers of one are not charged against the plan's cap.
pub const WARM_BASES: [&str; 8] = [
    "node:22-slim",
    "node:24-slim",
    "node:26-slim",
    "python:3.11-slim",
    "python:3.12-slim",
    "python:3.13-slim",
    "python:3.14-slim",
    "debian:trixie-slim",
];

/// The `app` template's base when the repository has a `package.json` at its root.
pub const NODE_RUNTIME: &str = "node:22-slim";
/// The `app` template's base otherwise.
pub const PYTHON_RUNTIME: &str = "python:3.13-slim";
/// The user the `app` template's process runs as.
pub const APP_UID: u32 = 10001;

/// A build the operator can start.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildPlan {
    /// The Dockerfile to build with, when slipway generates it (`app`); `None` builds the repository's own.
    pub generated_dockerfile: Option<String>,
    /// `[build] note: ...` lines for the deploy log.
    pub notes: Vec<String>,
}

/// Decides the build of a commit whose root files are `sources`, or refuses it with the `[build]` line that says
/// why (also the deploy's one-line failure message).
pub fn plan(template: Template, sources: &Sources) -> Result<BuildPlan, String> {
    match template {
        Template::App => {
            if !sources.has_launch_sh {
                return Err("[build] launch.sh is missing at the repository root: the app template starts your process with it".into());
            }
            let dockerfile = app_dockerfile(sources);
            Ok(BuildPlan {
                notes: cold_base_notes(&dockerfile),
                generated_dockerfile: Some(dockerfile),
            })
        }
        Template::Docker => {
            let Some(dockerfile) = &sources.dockerfile else {
                return Err("[build] Dockerfile is missing at the repository root: the docker template builds it".into());
            };
            if sources.dockerfile_truncated {
                return Err(
                    "[build] the Dockerfile is larger than 1 MiB, more than the platform reads"
                        .into(),
                );
            }
            if let Some(refusal) = shared_state_refusal(dockerfile) {
                return Err(refusal);
            }
            Ok(BuildPlan {
                notes: cold_base_notes(dockerfile),
                generated_dockerfile: None,
            })
        }
        Template::Static => Err("[build] the static template builds no image".into()),
    }
}

/// Why a tenant's Dockerfile cannot be built on the shared BuildKit, if it cannot. BuildKit keeps a cache mount
/// (`RUN --mount=type=cache`) under its id for every build on the daemon, whoever runs it: a build could read and
/// poison another tenant's cache by naming the same id (or the same target, the default id). A `# syntax=` parser
/// directive runs a frontend image of the tenant's choosing, which can make any mount it likes. So neither is
/// built, and a `--mount` whose options are not written out (a variable BuildKit would expand) is refused too. Every
/// word of the file is looked at, not only the `RUN` lines as this module reads them, so that no spelling of a
/// continuation or an escape character hides a flag.
pub fn shared_state_refusal(dockerfile: &str) -> Option<String> {
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        // Parser directives are comments before the first instruction.
        let Some(comment) = trimmed.strip_prefix('#') else {
            break;
        };
        if let Some((key, _)) = comment.split_once('=')
            && key.trim().eq_ignore_ascii_case("syntax")
        {
            return Some("[build] the Dockerfile's `# syntax=` directive is not available here: the build uses BuildKit's own Dockerfile frontend".into());
        }
    }
    let mount_values = dockerfile
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter_map(|word| word.trim_matches(['"', '\'', '`']).strip_prefix("--mount="));
    for value in mount_values {
        if value.contains('$') {
            return Some(format!(
                "[build] RUN --mount={value}: a mount's options must be written out, not taken from a variable"
            ));
        }
        let cache = value.split(',').any(|field| {
            let (key, val) = field.split_once('=').unwrap_or((field, ""));
            let unquote = |s: &str| s.trim().trim_matches(['"', '\'']).to_ascii_lowercase();
            unquote(key) == "type" && unquote(val) == "cache"
        });
        if cache {
            return Some(format!(
                "[build] RUN --mount={value}: cache mounts are not available here, since BuildKit shares them between every build on its daemon; install dependencies in a layer of their own instead"
            ));
        }
    }
    None
}

/// The runtime base of an `app` build (see the module doc).
pub fn app_runtime(sources: &Sources) -> &'static str {
    if sources.has_package_json {
        NODE_RUNTIME
    } else {
        PYTHON_RUNTIME
    }
}

/// The Dockerfile of an `app` build.
pub fn app_dockerfile(sources: &Sources) -> String {
    let uid = APP_UID;
    let base = app_runtime(sources);
    // A script without a shebang cannot be executed directly; sh runs it.
    let run = |script: &str, shebang: bool| {
        if shebang {
            format!("chmod 0755 /app/{script} && /app/{script}")
        } else {
            format!("sh /app/{script}")
        }
    };
    let copy_all = format!("COPY --chown={uid}:{uid} . /app\n");
    let install_step = |command: String| {
        format!(
            "RUN {command} \\\n && find /app /home/app ! -user {uid} -exec chown -h {uid}:{uid} {{}} +\n"
        )
    };
    // install.sh runs with itself and the dependency manifests only, and the rest of the commit comes after it: a
    // commit that changes neither reuses the installed layer, however much else it changes (an install.sh that
    // is a symlink into the rest of the commit gets the whole commit first). Whatever install.sh leaves in /app or
    // $HOME as root is handed to the app's user in the same layer.
    let (before_install, install, after_install) = match sources.install_sh_shebang {
        Some(shebang) if sources.install_sh_linked => (
            copy_all,
            install_step(run("install.sh", shebang)),
            String::new(),
        ),
        Some(shebang) => (
            format!(
                "COPY --chown={uid}:{uid} {} /app/\n",
                std::iter::once("install.sh")
                    .chain(sources.manifests.iter().copied())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            install_step(run("install.sh", shebang)),
            copy_all,
        ),
        None => (String::new(), String::new(), copy_all),
    };
    let (launch_prep, cmd) = if sources.launch_sh_shebang {
        ("RUN chmod 0755 /app/launch.sh\n", "[\"/app/launch.sh\"]")
    } else {
        ("", "[\"/bin/sh\", \"/app/launch.sh\"]")
    };
    format!(
        "# Generated by slipway for the app template: {base} (Node 22 when package.json is at the root, else Python 3.13).\n\
         FROM {base}\n\
         ENV HOME=/home/app\n\
         WORKDIR /app\n\
         RUN mkdir -p /home/app && chown {uid}:{uid} /app /home/app\n\
         {before_install}\
         {install}\
         {after_install}\
         {launch_prep}\
         USER {uid}:{uid}\n\
         ENTRYPOINT []\n\
         CMD {cmd}\n"
    )
}

/// One `FROM` of a Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The image (after global `ARG` defaults are substituted), or an earlier stage's name.
    pub base: String,
    /// The stage's own name (`AS name`), lowercased.
    pub name: Option<String>,
}

/// The stages of a Dockerfile, in order. Comments, line continuations, `FROM` flags (`--platform=...`) and global
/// `ARG` defaults used in `FROM` are understood; anything else is left to BuildKit.
pub fn stages(dockerfile: &str) -> Vec<Stage> {
    let mut args: Vec<(String, String)> = Vec::new();
    let mut stages = Vec::new();
    for instruction in instructions(dockerfile) {
        let mut words = instruction.split_whitespace();
        let Some(keyword) = words.next() else {
            continue;
        };
        if keyword.eq_ignore_ascii_case("ARG") && stages.is_empty() {
            for word in words {
                let (key, value) = word.split_once('=').unwrap_or((word, ""));
                args.push((key.to_owned(), value.trim_matches('"').to_owned()));
            }
        } else if keyword.eq_ignore_ascii_case("FROM") {
            let rest: Vec<&str> = words.skip_while(|w| w.starts_with("--")).collect();
            let Some(image) = rest.first() else {
                continue;
            };
            let name = match rest.get(1..) {
                Some([as_, name, ..]) if as_.eq_ignore_ascii_case("AS") => {
                    Some(name.to_ascii_lowercase())
                }
                _ => None,
            };
            stages.push(Stage {
                base: substitute(image, &args),
                name,
            });
        }
    }
    stages
}

/// The logical lines of a Dockerfile: comments dropped, `\` continuations joined.
fn instructions(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `$NAME` and `${NAME}` replaced by the global `ARG` defaults (unknown names are left as written).
fn substitute(image: &str, args: &[(String, String)]) -> String {
    let mut out = image.to_owned();
    for (key, value) in args {
        out = out
            .replace(&format!("${{{key}}}"), value)
            .replace(&format!("${key}"), value);
    }
    out
}

/// The warm base `image` names (`node:22-slim`, `docker.io/library/node:22-slim`, ...), if it is one.
pub fn warm_base(image: &str) -> Option<&'static str> {
    let short = image
        .strip_prefix("docker.io/")
        .or_else(|| image.strip_prefix("index.docker.io/"))
        .unwrap_or(image);
    let short = short.strip_prefix("library/").unwrap_or(short);
    WARM_BASES.iter().copied().find(|base| *base == short)
}

/// A `[build] note: ...` line for each stage on a cold base (neither warm, nor `scratch`, nor an earlier stage).
pub fn cold_base_notes(dockerfile: &str) -> Vec<String> {
    let stages = stages(dockerfile);
    let mut notes = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let earlier_stage = stages[..i]
            .iter()
            .any(|s| s.name.as_deref() == Some(stage.base.to_ascii_lowercase().as_str()));
        if earlier_stage || stage.base == "scratch" || warm_base(&stage.base).is_some() {
            continue;
        }
        notes.push(format!(
            "[build] note: stage {} (FROM {}) is not on a warm base; it needs a network pull, which may be slow or fail. Warm bases: {}",
            i + 1,
            stage.base,
            WARM_BASES.join(", ")
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(package_json: bool, install: Option<bool>, launch: Option<bool>) -> Sources {
        Sources {
            dockerfile: None,
            dockerfile_truncated: false,
            has_package_json: package_json,
            install_sh_shebang: install,
            install_sh_linked: false,
            has_launch_sh: launch.is_some(),
            launch_sh_shebang: launch.unwrap_or(false),
            manifests: if package_json {
                vec!["package.json", "package-lock.json"]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn a_package_json_selects_node_and_anything_else_python() {
        let node = app_dockerfile(&sources(true, None, Some(true)));
        assert!(node.contains("\nFROM node:22-slim\n"), "{node}");
        let python = app_dockerfile(&sources(false, None, Some(true)));
        assert!(python.contains("\nFROM python:3.13-slim\n"), "{python}");
        assert_eq!(
            warm_base(app_runtime(&sources(true, None, None))),
            Some("node:22-slim")
        );
    }

    #[test]
    fn the_app_image_runs_launch_sh_as_uid_10001_with_app_and_home_its_own() {
        let file = app_dockerfile(&sources(false, None, Some(true)));
        let user = file.find("USER 10001:10001").unwrap();
        assert!(file.contains("ENV HOME=/home/app\n"));
        assert!(file.contains("WORKDIR /app\n"));
        assert!(file.contains("COPY --chown=10001:10001 . /app\n"));
        assert!(file.contains("chown 10001:10001 /app /home/app"));
        assert!(
            file.ends_with("ENTRYPOINT []\nCMD [\"/app/launch.sh\"]\n"),
            "{file}"
        );
        assert!(
            file.find("chmod 0755 /app/launch.sh").unwrap() < user,
            "made executable as root"
        );
        assert!(
            !file.contains("install.sh"),
            "no install step without install.sh"
        );
        // Without a shebang the script cannot be executed directly.
        let plain = app_dockerfile(&sources(false, None, Some(false)));
        assert!(
            plain.ends_with("CMD [\"/bin/sh\", \"/app/launch.sh\"]\n"),
            "{plain}"
        );
    }

    #[test]
    fn install_sh_runs_as_root_before_the_user_switch_and_hands_its_files_over() {
        let file = app_dockerfile(&sources(true, Some(true), Some(true)));
        let install = file.find("/app/install.sh").unwrap();
        assert!(install < file.find("USER 10001").unwrap());
        assert!(file.contains("chmod 0755 /app/install.sh && /app/install.sh"));
        assert!(file.contains("find /app /home/app ! -user 10001 -exec chown -h 10001:10001 {} +"));
        let plain = app_dockerfile(&sources(true, Some(false), Some(true)));
        assert!(plain.contains("RUN sh /app/install.sh"), "{plain}");
    }

    #[test]
    fn install_sh_runs_before_the_rest_of_the_commit_arrives_so_its_layer_outlives_code_changes() {
        let file = app_dockerfile(&sources(true, Some(true), Some(true)));
        let manifests = file
            .find("COPY --chown=10001:10001 install.sh package.json package-lock.json /app/\n")
            .unwrap();
        let install = file.find("&& /app/install.sh").unwrap();
        let rest = file.find("COPY --chown=10001:10001 . /app\n").unwrap();
        assert!(manifests < install && install < rest, "{file}");
        let python = app_dockerfile(&sources(false, Some(true), Some(true)));
        assert!(
            python.contains("COPY --chown=10001:10001 install.sh /app/\n"),
            "{python}"
        );
        // A symlinked install.sh may point anywhere in the commit: it gets the whole commit first, once.
        let mut linked = sources(true, Some(false), Some(true));
        linked.install_sh_linked = true;
        let file = app_dockerfile(&linked);
        let all = file.find("COPY --chown=10001:10001 . /app\n").unwrap();
        assert!(all < file.find("RUN sh /app/install.sh").unwrap(), "{file}");
        assert_eq!(file.matches("COPY").count(), 1, "{file}");
    }

    #[test]
    fn a_docker_build_may_not_share_cache_mounts_or_bring_its_own_frontend() {
        let refused = |file: &str| shared_state_refusal(file).unwrap_or_default();
        for file in [
            "FROM debian:trixie-slim\nRUN --mount=type=cache,target=/root/.cache pip install x\n",
            "FROM debian:trixie-slim\nRUN --mount=target=/root/.npm,type=cache npm ci\n",
            "FROM debian:trixie-slim\nRUN --mount=\"type=cache,id=shared\" true\n",
            "FROM debian:trixie-slim\nRUN --network=none \\\n  --mount=TYPE=Cache,target=/x true\n",
            "# escape=`\nFROM debian:trixie-slim\nRUN `\n --mount=type=cache,target=/x true\n",
        ] {
            assert!(
                refused(file).contains("cache mounts are not available"),
                "{file}"
            );
        }
        let variable =
            refused("FROM debian:trixie-slim\nARG M=type=cache,target=/x\nRUN --mount=$M true\n");
        assert!(variable.contains("written out"), "{variable}");
        for file in [
            "# syntax=docker/dockerfile:1\nFROM debian:trixie-slim\n",
            "#SYNTAX = example.com/evil/frontend\nFROM debian:trixie-slim\n",
            "# escape=`\n# syntax=docker/dockerfile:1\nFROM debian:trixie-slim\n",
        ] {
            assert!(refused(file).contains("`# syntax=` directive"), "{file}");
        }
        for fine in [
            "FROM debian:trixie-slim\nRUN --mount=type=bind,target=/src true\nRUN --mount=type=tmpfs,target=/t true\n",
            "FROM debian:trixie-slim\n# syntax=later is only a comment\nRUN echo --mount is a word here\n",
            "FROM debian:trixie-slim\n# RUN --mount=type=cache in a comment\n",
        ] {
            assert_eq!(shared_state_refusal(fine), None, "{fine}");
        }
        let mut sources = sources(false, None, None);
        sources.dockerfile = Some("FROM debian:trixie-slim\n".into());
        sources.dockerfile_truncated = true;
        assert!(
            plan(Template::Docker, &sources)
                .unwrap_err()
                .contains("larger than 1 MiB")
        );
    }

    #[test]
    fn the_app_template_refuses_a_commit_without_launch_sh() {
        let refused = plan(Template::App, &sources(true, Some(true), None)).unwrap_err();
        assert_eq!(
            refused,
            "[build] launch.sh is missing at the repository root: the app template starts your process with it"
        );
        let planned = plan(Template::App, &sources(false, None, Some(true))).unwrap();
        assert!(
            planned.notes.is_empty(),
            "the generated file is on a warm base"
        );
        assert!(planned.generated_dockerfile.is_some());
    }

    #[test]
    fn the_docker_template_builds_the_repository_dockerfile_or_refuses() {
        let mut s = sources(false, None, None);
        let refused = plan(Template::Docker, &s).unwrap_err();
        assert!(refused.starts_with("[build] Dockerfile is missing at the repository root"));
        s.dockerfile = Some("FROM golang:1.22 AS build\nFROM debian:trixie-slim\n".into());
        let planned = plan(Template::Docker, &s).unwrap();
        assert_eq!(planned.generated_dockerfile, None);
        assert_eq!(planned.notes.len(), 1);
        assert!(
            planned.notes[0]
                .starts_with("[build] note: stage 1 (FROM golang:1.22) is not on a warm base"),
            "{:?}",
            planned.notes
        );
    }

    #[test]
    fn stages_understand_flags_names_comments_continuations_and_global_args() {
        let file = "# syntax comment\n\
                    ARG NODE=22\n\
                    ARG UNUSED\n\
                    FROM --platform=$BUILDPLATFORM node:${NODE}-slim AS Build\n\
                    RUN echo \\\n  FROM not-a-stage\n\
                    from \\\n  python:3.13-slim\n\
                    FROM build\n";
        assert_eq!(
            stages(file),
            vec![
                Stage {
                    base: "node:22-slim".into(),
                    name: Some("build".into())
                },
                Stage {
                    base: "python:3.13-slim".into(),
                    name: None
                },
                Stage {
                    base: "build".into(),
                    name: None
                },
            ]
        );
    }

    #[test]
    fn warm_bases_are_recognised_under_their_docker_hub_spellings_only() {
        for image in [
            "node:24-slim",
            "docker.io/library/python:3.11-slim",
            "library/debian:trixie-slim",
        ] {
            assert!(warm_base(image).is_some(), "{image}");
        }
        for image in [
            "node:22",
            "node",
            "python:3.10-slim",
            "ghcr.io/library/node:22-slim",
            "debian:bookworm-slim",
        ] {
            assert_eq!(warm_base(image), None, "{image}");
        }
    }

    #[test]
    fn only_cold_stages_get_a_note_and_earlier_stages_scratch_and_warm_bases_do_not() {
        let file = "FROM node:22-slim AS deps\nFROM alpine:3 AS tools\nFROM scratch AS empty\nFROM deps\nFROM ${UNKNOWN}\n";
        let notes = cold_base_notes(file);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("stage 2 (FROM alpine:3)"));
        assert!(notes[1].contains("stage 5 (FROM ${UNKNOWN})"));
        assert!(notes[0].contains("Warm bases: node:22-slim, node:24-slim"));
    }
}
