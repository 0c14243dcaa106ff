//! `instanceha completion SHELL` and `instanceha man --out DIR`: what a
//! packager runs, checked by the shell and the man-page formatter that will
//! read them.

use std::process::Command;

use crate::helpers::{Home, run};

/// The visible subcommands, each of which gets a man page and completions.
const SUBCOMMANDS: &[&str] = &[
    "segment",
    "host",
    "notification",
    "vmove",
    "demo",
    "completion",
];

#[tokio::test]
async fn the_bash_completion_script_parses_and_completes_every_subcommand() {
    let home = Home::new();
    // No settings are read: a configuration file that does not exist is
    // no obstacle.
    let bash =
        run(home.instanceha(["--config", "/nonexistent/cli.toml", "completion", "bash"])).await;
    bash.expect_exit(0);
    for name in SUBCOMMANDS {
        bash.expect_stdout(name);
    }
    let script = home.dir.path().join("instanceha.bash");
    std::fs::write(&script, &bash.stdout).unwrap();
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );

    for shell in ["zsh", "fish"] {
        let script = run(home.instanceha(["completion", shell])).await;
        script.expect_exit(0).expect_stdout("notification");
    }
    run(home.instanceha(["completion", "tcsh"]))
        .await
        .expect_exit(2)
        .expect_stderr("tcsh");
}

#[tokio::test]
async fn man_writes_one_page_per_subcommand_that_groff_reads() {
    let home = Home::new();
    let out = home.dir.path().join("man1");
    let written = run(home.instanceha(["man", "--out", out.to_str().unwrap()])).await;
    written.expect_exit(0);

    let main = std::fs::read_to_string(out.join("instanceha.1")).expect("instanceha.1");
    assert!(main.contains(".TH instanceha 1"), "{main}");
    for name in SUBCOMMANDS {
        assert!(
            main.contains(&format!("instanceha\\-{name}(1)")),
            "instanceha.1 names {name}:\n{main}"
        );
        let page = out.join(format!("instanceha-{name}.1"));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
        assert!(text.contains(&format!(".TH instanceha-{name} 1")), "{text}");
        written.expect_stdout(page.to_str().unwrap());
    }
    for nested in [
        "segment-list",
        "host-restore",
        "notification-watch",
        "vmove-show",
    ] {
        assert!(
            out.join(format!("instanceha-{nested}.1")).is_file(),
            "{nested}"
        );
    }
    assert!(
        !out.join("instanceha-man.1").exists(),
        "the hidden subcommand"
    );
    assert!(!out.join("instanceha-help.1").exists());
    let demo = std::fs::read_to_string(out.join("instanceha-demo.1")).unwrap();
    assert!(
        !demo.contains("\\-\\-endpoint") && !demo.contains("\\-\\-token"),
        "{demo}"
    );
    #[cfg(feature = "demo")]
    assert!(demo.contains("\\-\\-instances"), "{demo}");

    // The formatter reads every page without a warning.
    let pages: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(pages.len() > 20, "{pages:?}");
    match Command::new("groff")
        .args(["-man", "-z", "-ww"])
        .args(&pages)
        .output()
    {
        Ok(groff) => assert!(
            groff.status.success() && groff.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&groff.stderr)
        ),
        Err(e) => eprintln!("skipped: groff did not run ({e}); the pages' headers were checked"),
    }
}
