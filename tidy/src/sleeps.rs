//! Counted sleeps: a `sleep(` in test code waits for time to pass, and a
//! test that waits for something to happen should say what, through
//! `instanceha_testkit::eventually`. A sleep that is the point (a fault
//! held for a while, paused time moved on) says why on its line or the line
//! before, in a comment holding `sleep:`; every other one is counted, and
//! the count may not rise above [`SLEEP_CEILING`], which is lowered as
//! sleeps go.

use crate::code::is_ident_byte;
use crate::{SourceFile, Violation};

pub const COUNTED_SLEEPS: &str = "counted sleeps";

/// The most sleeps without a reason allowed in test code. Lower it when
/// there are fewer: the test asks for it.
pub const SLEEP_CEILING: usize = 14;

/// The mark of a sleep's reason, in a comment on its line or the line
/// before.
pub const REASON: &str = "sleep:";

/// Whether `file` is test code as a whole: under a `tests/` directory, the
/// test kit, the conformance library, or a module declared
/// `#[cfg(test)] mod name;` by `declared_test_modules`.
pub fn is_test_file(file: &SourceFile, declared_test_modules: &[String]) -> bool {
    file.path.split('/').any(|c| c == "tests")
        || file.is_in("testkit/")
        || file.is_in("conformance/")
        || declared_test_modules.contains(&file.path)
}

/// The files that `file` declares as `#[cfg(test)] mod name;` (`name.rs`
/// or `name/mod.rs` beside it, as Rust looks them up).
pub fn test_module_files(file: &SourceFile) -> Vec<String> {
    let dir = module_dir(&file.path);
    cfg_test_modules(&file.code)
        .into_iter()
        .filter(|m| m.body.is_none())
        .flat_map(|m| {
            [
                format!("{dir}{}.rs", m.name),
                format!("{dir}{}/mod.rs", m.name),
            ]
        })
        .collect()
}

/// Every `sleep(` of test code in `file` without a reason: byte offsets.
pub fn counted_sleeps(file: &SourceFile, whole_file_is_test: bool) -> Vec<usize> {
    let spans: Vec<(usize, usize)> = if whole_file_is_test {
        vec![(0, file.code.len())]
    } else {
        cfg_test_modules(&file.code)
            .into_iter()
            .filter_map(|m| m.body)
            .collect()
    };
    sleep_calls(&file.code)
        .into_iter()
        .filter(|&at| spans.iter().any(|&(from, to)| from <= at && at < to))
        .filter(|&at| !has_reason(file, file.line_of(at)))
        .collect()
}

/// The counted sleeps of every file against [`SLEEP_CEILING`].
pub fn check(files: &[SourceFile], ceiling: usize) -> Vec<Violation> {
    let declared: Vec<String> = files.iter().flat_map(test_module_files).collect();
    let mut counted = Vec::new();
    for file in files {
        for at in counted_sleeps(file, is_test_file(file, &declared)) {
            counted.push(file.violation(
                COUNTED_SLEEPS,
                at,
                format!(
                    "a sleep without a reason in test code: wait for what you mean with \
                     `instanceha_testkit::eventually`, or say why on this line or the one \
                     before (`// {REASON} ...`)"
                ),
            ));
        }
    }
    let count = counted.len();
    if count > ceiling {
        let mut violations = counted;
        violations.push(Violation {
            rule: COUNTED_SLEEPS,
            path: "tidy/src/sleeps.rs".to_owned(),
            line: 0,
            text: String::new(),
            message: format!(
                "{count} sleeps without a reason in test code, more than the ceiling of {ceiling} \
                 (SLEEP_CEILING): the {} listed above (or others) must go",
                count - ceiling
            ),
        });
        violations
    } else if count < ceiling {
        vec![Violation {
            rule: COUNTED_SLEEPS,
            path: "tidy/src/sleeps.rs".to_owned(),
            line: 0,
            text: String::new(),
            message: format!(
                "{count} sleeps without a reason in test code, fewer than the ceiling of \
                 {ceiling}: lower SLEEP_CEILING to {count}"
            ),
        }]
    } else {
        Vec::new()
    }
}

/// A `#[cfg(test)] mod name` of a file: its name and, when inline, the span
/// of its body.
struct TestModule<'a> {
    name: &'a str,
    body: Option<(usize, usize)>,
}

fn cfg_test_modules(code: &str) -> Vec<TestModule<'_>> {
    let mut found = Vec::new();
    for (at, attribute) in code.match_indices("#[cfg(test)]") {
        let mut rest = at + attribute.len();
        // Other attributes may sit between it and the module.
        loop {
            let trimmed = code[rest..].trim_start();
            rest = code.len() - trimmed.len();
            if trimmed.starts_with("#[") {
                rest += trimmed.find(']').map_or(trimmed.len(), |end| end + 1);
            } else {
                break;
            }
        }
        let trimmed = code[rest..].trim_start();
        let trimmed = trimmed.strip_prefix("pub ").unwrap_or(trimmed).trim_start();
        let Some(after_mod) = trimmed.strip_prefix("mod ") else {
            continue;
        };
        let after_mod = after_mod.trim_start();
        let len = after_mod.bytes().take_while(|&b| is_ident_byte(b)).count();
        let name = &after_mod[..len];
        let after_name = after_mod[len..].trim_start();
        let body = after_name.starts_with('{').then(|| {
            let open = code.len() - after_name.len();
            (open, open + brace_group_len(&code[open..]))
        });
        found.push(TestModule { name, body });
    }
    found
}

/// The length of the `{...}` group `s` opens with.
fn brace_group_len(s: &str) -> usize {
    let mut depth = 0usize;
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// The directory holding the modules a file declares: `a/src/` for
/// `a/src/lib.rs` or `a/src/x/mod.rs`... and `a/src/x/` for `a/src/x.rs`.
fn module_dir(path: &str) -> String {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let dir = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    match name {
        "lib.rs" | "main.rs" | "mod.rs" => dir,
        _ => format!("{dir}{}/", name.trim_end_matches(".rs")),
    }
}

/// The offsets of `sleep(` (a call of a function or method named `sleep`).
fn sleep_calls(code: &str) -> Vec<usize> {
    let bytes = code.as_bytes();
    code.match_indices("sleep")
        .map(|(at, _)| at)
        .filter(|&at| {
            (at == 0 || !is_ident_byte(bytes[at - 1]))
                && code[at + "sleep".len()..].trim_start().starts_with('(')
        })
        .collect()
}

/// Whether line `line` (1-based) or the one before holds a comment with
/// [`REASON`].
fn has_reason(file: &SourceFile, line: usize) -> bool {
    let texts: Vec<&str> = file.text.split('\n').collect();
    let codes: Vec<&str> = file.code.split('\n').collect();
    [line.checked_sub(1), line.checked_sub(2)]
        .into_iter()
        .flatten()
        .any(|i| match (texts.get(i), codes.get(i)) {
            (Some(text), Some(code)) => {
                comment_start(text, code).is_some_and(|at| text[at..].contains(REASON))
            }
            _ => false,
        })
}

/// Where the line comment of a line starts: the first `//` blanked in the
/// code and outside a string (an even number of quotes before it; a block
/// comment's or a string's earlier lines are not looked at).
fn comment_start(text: &str, code: &str) -> Option<usize> {
    text.match_indices("//").map(|(at, _)| at).find(|&at| {
        code.as_bytes().get(at) == Some(&b' ')
            && code[..at.min(code.len())]
                .bytes()
                .filter(|&b| b == b'"')
                .count()
                % 2
                == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(path: &str, text: &str, declared: &[String]) -> Vec<usize> {
        let file = SourceFile::new(path, text);
        counted_sleeps(&file, is_test_file(&file, declared))
            .into_iter()
            .map(|at| file.line_of(at))
            .collect()
    }

    #[test]
    fn sleeps_in_test_code_count_unless_they_say_why() {
        let text = "//! a
async fn f() {
    tokio::time::sleep(d).await;
    // sleep: the fault lasts two seconds.
    tokio::time::sleep(d).await;
    std::thread::sleep(d); // sleep: the child starts
    // sleep(d) in a comment
    let s = \"sleep: not a comment\"; sleep(d);
    let asleep = 1; backoff.sleep_until(t);
}
";
        assert_eq!(counted("a/tests/it/x.rs", text, &[]), [3, 8]);
        assert_eq!(counted("testkit/src/cloud.rs", text, &[]), [3, 8]);
        assert_eq!(counted("conformance/src/stack.rs", text, &[]), [3, 8]);
        assert!(counted("a/src/x.rs", text, &[]).is_empty());
    }

    #[test]
    fn sleeps_in_cfg_test_modules_count() {
        let text = "//! a
fn run() { tokio::time::sleep(d); }
#[cfg(test)]
#[allow(clippy::x)]
mod tests {
    fn t() { tokio::time::sleep(d); }
}
fn after() { tokio::time::sleep(d); }
";
        assert_eq!(counted("a/src/x.rs", text, &[]), [6]);
    }

    #[test]
    fn modules_declared_cfg_test_are_test_files() {
        let parent = SourceFile::new("a/src/status.rs", "//! a\n#[cfg(test)]\nmod tests;\n");
        let declared = test_module_files(&parent);
        assert_eq!(
            declared,
            ["a/src/status/tests.rs", "a/src/status/tests/mod.rs"]
        );
        let text = "//! t\nfn t() { sleep(d); }\n";
        assert_eq!(counted("a/src/status/tests.rs", text, &declared), [2]);
        let lib = SourceFile::new("a/src/lib.rs", "//! a\n#[cfg(test)]\nmod tests;\n");
        assert_eq!(test_module_files(&lib)[0], "a/src/tests.rs");
    }

    #[test]
    fn the_ceiling_may_only_go_down() {
        let text = "//! a\nfn f() {\n    sleep(d);\n    sleep(d);\n}\n";
        let files = [SourceFile::new("a/tests/it/x.rs", text)];
        let over = check(&files, 1);
        let lines: Vec<usize> = over.iter().map(|v| v.line).collect();
        assert_eq!(lines, [3, 4, 0], "each counted sleep, then the total");
        assert!(over[2].message.contains("more than the ceiling of 1"));
        assert!(check(&files, 2).is_empty());
        let under = check(&files, 3);
        assert_eq!(under.len(), 1);
        assert!(under[0].message.contains("lower SLEEP_CEILING to 2"));
    }
}
