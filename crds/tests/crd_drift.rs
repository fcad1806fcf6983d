//! The committed CRD YAML (under `crds/yaml/` and in the chart) must be exactly what the Rust types render.
//! Run `make crds` after changing a resource type.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    // At run time, not the path compiled in: a build reused from another checkout would read that one's files.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("..")
}

#[test]
fn committed_crds_match_the_rust_types() {
    for dir in ["crds/yaml", "charts/slipway/crds"] {
        let dir = repo_root().join(dir);
        let mut expected_files = Vec::new();
        for crd in slipway_crds::crds() {
            let file = slipway_crds::crd_file_name(&crd);
            let want = slipway_crds::crd_yaml(&crd).expect("render CRD");
            let have = std::fs::read_to_string(dir.join(&file)).unwrap_or_else(|e| {
                panic!("{}/{file} is missing ({e}); run `make crds`", dir.display())
            });
            assert!(
                have == want,
                "{}/{file} drifted from the Rust types; run `make crds`",
                dir.display()
            );
            expected_files.push(file);
        }
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .expect("read CRD directory")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|f| f.ends_with(".yaml"))
            .collect();
        present.sort();
        expected_files.sort();
        assert_eq!(
            present,
            expected_files,
            "{} holds CRDs the Rust types no longer define",
            dir.display()
        );
    }
}

#[test]
fn every_kind_is_namespaced_in_the_slipway_category() {
    for crd in slipway_crds::crds() {
        assert_eq!(crd.spec.group, "slipway.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["slipway".to_owned()][..])
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty())
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource"
        );
    }
}
