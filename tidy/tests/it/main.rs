//! The tidy test: every rule of `instanceha_tidy` over the repository's
//! Rust sources; fails listing every violation, with its file and line.

use std::path::Path;

#[test]
fn the_repository_is_tidy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tidy/ is in the repository");
    let files = instanceha_tidy::sources(root).expect("the sources can be read");
    assert!(
        files.iter().any(|f| f.path == "api-service/src/status.rs"),
        "the walk found the API's sources under {}",
        root.display()
    );
    let violations = instanceha_tidy::check(&files);
    if !violations.is_empty() {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        panic!(
            "{} tidy violation(s) in {} files (see ARCHITECTURE.md):\n\n{}\n",
            violations.len(),
            files.len(),
            list.join("\n")
        );
    }
}
