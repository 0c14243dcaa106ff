//! The tidy test's checks: ARCHITECTURE.md's boundaries and the house rules,
//! matched over the repository's Rust sources (as rust-analyzer's
//! `tidy.rs` does). `tests/it/main.rs` runs them on the checkout and fails
//! with every violation, naming file and line.
//!
//! Each rule is one function from a source file to its violations
//! ([`rules`]); [`EXCEPTIONS`] lists the few known violations still
//! tolerated, each with its reason, and an exception that no longer matches
//! is itself a violation, so the list only shrinks.
//!
//! Two rules count rather than match lines: the size limits ([`size`]:
//! files at most 600 lines, functions at most 80; the longer ones listed in
//! [`oversized`], which may only shrink) and the sleeps of test code without
//! a reason ([`sleeps`], under a ceiling that may only go down).

pub mod code;
pub mod oversized;
pub mod rules;
pub mod size;
pub mod sleeps;

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

/// One Rust source of the repository.
pub struct SourceFile {
    /// Relative to the repository's root, `/`-separated.
    pub path: String,
    pub text: String,
    /// `text` without comments and literal contents ([`code::blank_non_code`]).
    pub code: String,
}

impl SourceFile {
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let code = code::blank_non_code(&text);
        Self {
            path: path.into(),
            text,
            code,
        }
    }

    /// The 1-based line holding byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.text.as_bytes()[..offset.min(self.text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// The source text of 1-based `line`, trimmed.
    pub fn line_text(&self, line: usize) -> &str {
        self.text.lines().nth(line - 1).unwrap_or("").trim()
    }

    /// Whether the file lies under the directory `dir` (`a/b/`) or is the
    /// file `dir` itself.
    pub fn is_in(&self, dir: &str) -> bool {
        if dir.ends_with('/') {
            self.path.starts_with(dir)
        } else {
            self.path == dir
        }
    }

    fn violation(&self, rule: &'static str, offset: usize, message: String) -> Violation {
        let line = self.line_of(offset);
        Violation {
            rule,
            path: self.path.clone(),
            line,
            text: self.line_text(line).to_owned(),
            message,
        }
    }
}

/// A rule broken at one place.
#[derive(Debug)]
pub struct Violation {
    pub rule: &'static str,
    pub path: String,
    pub line: usize,
    /// The offending source line, trimmed.
    pub text: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: [{}] {}",
            self.path, self.line, self.rule, self.message
        )?;
        if !self.text.is_empty() {
            write!(f, "\n    {}", self.text)?;
        }
        Ok(())
    }
}

/// A known violation tolerated for now: the rule, the file, and a piece of
/// the offending line (so that it survives lines moving).
pub struct Exception {
    pub rule: &'static str,
    pub path: &'static str,
    pub line_contains: &'static str,
    pub reason: &'static str,
}

/// The violations tolerated today. Remove an entry when its code is fixed;
/// a stale entry fails the test.
pub const EXCEPTIONS: &[Exception] = &[];

/// Every `.rs` file under `root`, sorted by path, without build output
/// (`target*`, which holds the generated code), hidden directories (`.git`,
/// `.venv`...) and `node_modules`.
pub fn sources(root: &Path) -> io::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    walk(root, root, &mut files)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<SourceFile>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if name.starts_with('.') || name.starts_with("target") || name == "node_modules" {
                continue;
            }
            walk(root, &entry.path(), files)?;
        } else if kind.is_file() && name.ends_with(".rs") {
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let relative = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            files.push(SourceFile::new(relative, fs::read_to_string(&path)?));
        }
    }
    Ok(())
}

/// Every rule over every file, less the [`EXCEPTIONS`], plus a violation for
/// each exception nothing matched; then the size limits and the counted
/// sleeps.
pub fn check(files: &[SourceFile]) -> Vec<Violation> {
    let mut used = vec![false; EXCEPTIONS.len()];
    let mut violations = Vec::new();
    for file in files {
        for rule in rules::ALL {
            for v in rule(file) {
                let excused = EXCEPTIONS.iter().position(|e| {
                    e.rule == v.rule && e.path == v.path && v.text.contains(e.line_contains)
                });
                match excused {
                    Some(i) => used[i] = true,
                    None => violations.push(v),
                }
            }
        }
    }
    for (e, used) in EXCEPTIONS.iter().zip(used) {
        if !used {
            violations.push(Violation {
                rule: e.rule,
                path: e.path.to_owned(),
                line: 0,
                text: String::new(),
                message: format!(
                    "the exception for `{}` matches nothing any more: remove it from tidy's EXCEPTIONS",
                    e.line_contains
                ),
            });
        }
    }
    violations.extend(size::check(files, &oversized::oversized()));
    violations.extend(sleeps::check(files, sleeps::SLEEP_CEILING));
    violations.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_places() {
        let file = SourceFile::new("a/src/x.rs", "//! x\nfn f() {}\n  let y = 1;\n");
        assert_eq!(file.line_of(0), 1);
        assert_eq!(file.line_of(7), 2);
        assert_eq!(file.line_text(3), "let y = 1;");
        assert!(file.is_in("a/src/"));
        assert!(file.is_in("a/src/x.rs"));
        assert!(!file.is_in("a/src/x"));
    }

    #[test]
    fn a_stale_exception_is_a_violation() {
        let violations = check(&[SourceFile::new("tidy/src/empty.rs", "//! nothing\n")]);
        let stale = violations
            .iter()
            .filter(|v| v.message.contains("matches nothing"))
            .count();
        assert_eq!(stale, EXCEPTIONS.len());
    }
}
