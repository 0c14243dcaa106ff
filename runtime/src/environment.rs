//! How both services read their settings: defaults, then a TOML file,
//! then environment variables (`PREFIX` + `section__key` sets
//! `section.key`, only for the settings' top-level sections), then flags.
//! The variables of the prefix that name no setting are listed so that a
//! typo is reported, not silently lost; a bad value is reported naming its
//! key and where it came from.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format as _, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Settings that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("configuration file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// One line per problem, each naming the key and its source.
    #[error("configuration: {0}")]
    Invalid(String),
}

/// Reads settings shaped like `S`: its defaults, `file` (if given), the
/// variables of `environment`, then `flags` (`("section.key", value)`,
/// which win over everything).
pub fn load<S: Serialize + DeserializeOwned + Default>(
    environment: &SettingsEnvironment,
    file: Option<&Path>,
    flags: &[(&str, String)],
) -> Result<S, LoadError> {
    let mut figment = Figment::from(Serialized::defaults(S::default()));
    if let Some(path) = file {
        if !path.is_file() {
            return Err(LoadError::File {
                path: path.to_owned(),
                reason: "no such file".to_owned(),
            });
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    figment = figment.merge(environment.provider());
    for (key, value) in flags {
        figment = figment.merge((*key, value));
    }
    figment
        .extract()
        .map_err(|e| LoadError::Invalid(describe(e)))
}

/// figment's error, one line per problem, each naming the key.
fn describe(err: figment::Error) -> String {
    err.into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let source = e
                .metadata
                .as_ref()
                .map(|m| format!(" (from {})", m.name))
                .unwrap_or_default();
            if key.is_empty() {
                format!("{}{source}", e.kind)
            } else {
                format!("{key}: {}{source}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The environment variables of one service's settings.
#[derive(Clone, Debug)]
pub struct SettingsEnvironment {
    prefix: &'static str,
    /// The settings' top-level keys (`listen`, `log`, ...).
    sections: Vec<String>,
    /// Keys under the prefix that belong to something else and are not
    /// reported as ignored (the engine's `INSTANCEHA_ENGINE_*` variables
    /// share the API's `INSTANCEHA_` prefix).
    foreign: &'static [&'static str],
}

impl SettingsEnvironment {
    /// The variables `prefix*` for settings shaped like `defaults`.
    pub fn new<S: Serialize>(
        prefix: &'static str,
        defaults: &S,
        foreign: &'static [&'static str],
    ) -> Self {
        let sections = match figment::value::Value::serialize(defaults) {
            Ok(figment::value::Value::Dict(_, dict)) => dict.into_keys().collect(),
            _ => Vec::new(),
        };
        Self {
            prefix,
            sections,
            foreign,
        }
    }

    /// The settings' top-level keys.
    pub fn sections(&self) -> &[String] {
        &self.sections
    }

    /// Whether `key` (`section.key`, any case) is in a settings section.
    pub fn is_setting(&self, key: &str) -> bool {
        let section = key.split('.').next().unwrap_or(key);
        self.sections
            .iter()
            .any(|known| known.eq_ignore_ascii_case(section))
    }

    /// The figment provider of the variables that set a setting.
    pub fn provider(&self) -> Env {
        let this = self.clone();
        Env::prefixed(self.prefix)
            .split("__")
            .filter(move |key| this.is_setting(key.as_str()))
    }

    /// The variables of the prefix that are set but name no setting, so
    /// are ignored (a typo such as `INSTANCEHA_LOGG__FORMAT`), sorted. The
    /// configuration file's own `PREFIX` + `CONFIG` is not listed.
    pub fn ignored_variables(&self) -> Vec<String> {
        self.ignored_among(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()))
    }

    /// [`Self::ignored_variables`] among `names`.
    pub fn ignored_among(&self, names: impl Iterator<Item = String>) -> Vec<String> {
        let mut ignored: Vec<String> = names
            .filter(|name| {
                name.strip_prefix(self.prefix).is_some_and(|key| {
                    !self.foreign.iter().any(|f| key.starts_with(f))
                        && !key.eq_ignore_ascii_case("config")
                        && !self.is_setting(&key.replace("__", "."))
                })
            })
            .collect();
        ignored.sort();
        ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Settings {
        listen: String,
        log: Log,
    }

    #[derive(Serialize)]
    struct Log {
        format: String,
    }

    fn environment() -> SettingsEnvironment {
        let defaults = Settings {
            listen: "127.0.0.1:0".to_owned(),
            log: Log {
                format: "text".to_owned(),
            },
        };
        SettingsEnvironment::new("APP_", &defaults, &["OTHER_"])
    }

    #[test]
    fn only_keys_of_a_section_are_settings() {
        let env = environment();
        assert_eq!(env.sections(), ["listen", "log"]);
        assert!(env.is_setting("log.format"));
        assert!(env.is_setting("LISTEN"));
        assert!(!env.is_setting("logg.format"));
        assert!(!env.is_setting("config"));
    }

    #[test]
    fn typos_are_reported_and_foreign_or_config_variables_are_not() {
        let names = [
            "APP_LOG__FORMAT",
            "APP_LOGG__FORMAT",
            "APP_CONFIG",
            "APP_OTHER_LISTEN",
            "APP_TEST_URL",
            "PATH",
        ]
        .map(str::to_owned);
        assert_eq!(
            environment().ignored_among(names.into_iter()),
            ["APP_LOGG__FORMAT", "APP_TEST_URL"]
        );
    }
}
