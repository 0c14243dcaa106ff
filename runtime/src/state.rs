//! Where a service keeps what it makes for itself (the engine link's
//! token): the `state_dir` setting, else a default both the API and the
//! engine of one machine and user find alike: systemd's
//! `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/instanceha`, else
//! `~/.local/state/instanceha`, else `/var/lib/instanceha`.

use std::path::{Path, PathBuf};

/// The file of the engine link's token in a state directory.
pub const LINK_TOKEN_FILE: &str = "link-token";

/// The default state directory, from the variables `var` reads.
pub fn default_dir(var: impl Fn(&str) -> Option<String>) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dirs) = set("STATE_DIRECTORY") {
        // systemd may list several, separated by colons: the first.
        let first = dirs.split(':').next().unwrap_or_default();
        return PathBuf::from(first);
    }
    if let Some(state) = set("XDG_STATE_HOME") {
        return Path::new(&state).join("instanceha");
    }
    if let Some(home) = set("HOME") {
        return Path::new(&home).join(".local/state/instanceha");
    }
    PathBuf::from("/var/lib/instanceha")
}

/// `configured`, else the default state directory of this process's
/// environment.
pub fn dir(configured: Option<&Path>) -> PathBuf {
    configured
        .map(Path::to_owned)
        .unwrap_or_else(|| default_dir(|name| std::env::var(name).ok()))
}

/// The link token's file in the state directory `configured` (or the
/// default one).
pub fn link_token_file(configured: Option<&Path>) -> PathBuf {
    dir(configured).join(LINK_TOKEN_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_default_follows_systemd_then_xdg_then_home() {
        assert_eq!(
            default_dir(env(&[
                ("STATE_DIRECTORY", "/var/lib/instanceha-engine:/x"),
                ("HOME", "/root")
            ])),
            PathBuf::from("/var/lib/instanceha-engine")
        );
        assert_eq!(
            default_dir(env(&[("XDG_STATE_HOME", "/s"), ("HOME", "/home/u")])),
            PathBuf::from("/s/instanceha")
        );
        assert_eq!(
            default_dir(env(&[("HOME", "/home/u")])),
            PathBuf::from("/home/u/.local/state/instanceha")
        );
        assert_eq!(default_dir(env(&[])), PathBuf::from("/var/lib/instanceha"));
        assert_eq!(
            link_token_file(Some(Path::new("/etc/x"))),
            PathBuf::from("/etc/x/link-token")
        );
    }
}
