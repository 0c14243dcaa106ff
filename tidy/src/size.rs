//! The size limits: a file at most [`FILE_LIMIT`] lines, a function at most
//! [`FUNCTION_LIMIT`], over every `.rs` file of the checkout (tests and
//! `#[cfg(test)]` modules too). Today's longer ones are listed in
//! [`oversized`](crate::oversized) with their length; an entry
//! may not grow, and one no longer needed fails until it is removed, so the
//! list only shrinks as code is split.

use crate::code::is_ident_byte;
use crate::{SourceFile, Violation};

pub const FILE_TOO_LONG: &str = "file too long";
pub const FUNCTION_TOO_LONG: &str = "function too long";
pub const SIZE_EXCEPTION: &str = "size exception";

/// The most lines a file may have.
pub const FILE_LIMIT: usize = 600;
/// The most lines a function may have, from its `fn` to its closing brace.
pub const FUNCTION_LIMIT: usize = 80;

/// A file or function tolerated over its limit, at most `lines` long.
pub struct SizeException {
    /// `path` for a file, `path::name` for a function (every function of
    /// that name in the file: methods of several impls, nested fns).
    pub item: String,
    /// Its length when it was listed: it may shrink, not grow.
    pub lines: usize,
    pub reason: String,
}

/// One function of a file: its name and where it lies.
#[derive(Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    /// Byte offset of its `fn`.
    pub at: usize,
    /// 1-based lines of its `fn` and of its closing brace.
    pub first_line: usize,
    pub last_line: usize,
}

impl Function {
    pub fn lines(&self) -> usize {
        self.last_line - self.first_line + 1
    }
}

/// The lines of a file, as `wc -l` counts them.
pub fn file_lines(file: &SourceFile) -> usize {
    file.text.lines().count()
}

/// Every function with a body in `file`, nested ones and methods included,
/// in source order. Matched on the code ([`SourceFile::code`]) so that a
/// brace in a comment or string does not count.
pub fn functions(file: &SourceFile) -> Vec<Function> {
    let code = file.code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = find_word(code, i, b"fn") {
        i = at + 2;
        let name_at = skip_space(code, at + 2);
        let name_len = code[name_at..]
            .iter()
            .take_while(|&&b| is_ident_byte(b))
            .count();
        // `fn(u8) -> u8` is a type, `fn $name` a macro's template.
        if name_at == at + 2 || name_len == 0 {
            continue;
        }
        let Some(open) = body_start(code, name_at + name_len) else {
            continue; // a declaration without a body
        };
        let close = matching_brace(code, open);
        found.push(Function {
            name: file.code[name_at..name_at + name_len].to_owned(),
            at,
            first_line: file.line_of(at),
            last_line: file.line_of(close),
        });
    }
    found
}

/// Every file and function over its limit, less the exceptions, plus a
/// violation for each exception that grew or is no longer needed.
pub fn check(files: &[SourceFile], exceptions: &[SizeException]) -> Vec<Violation> {
    // The longest length seen per excepted item; `None` while unseen.
    let mut seen: Vec<Option<usize>> = vec![None; exceptions.len()];
    let mut violations = Vec::new();
    let mut judge = |item: &str, lines: usize, limit: usize, violation: &dyn Fn() -> Violation| {
        match exceptions.iter().position(|e| e.item == item) {
            Some(i) => seen[i] = Some(seen[i].map_or(lines, |s| s.max(lines))),
            None if lines > limit => violations.push(violation()),
            None => {}
        }
    };
    for file in files {
        let lines = file_lines(file);
        judge(&file.path, lines, FILE_LIMIT, &|| Violation {
            rule: FILE_TOO_LONG,
            path: file.path.clone(),
            line: FILE_LIMIT + 1,
            text: String::new(),
            message: format!(
                "{lines} lines, more than {FILE_LIMIT}: split it into modules named after what they hold"
            ),
        });
        for f in functions(file) {
            let item = format!("{}::{}", file.path, f.name);
            let lines = f.lines();
            judge(&item, lines, FUNCTION_LIMIT, &|| Violation {
                rule: FUNCTION_TOO_LONG,
                path: file.path.clone(),
                line: f.first_line,
                text: file.line_text(f.first_line).to_owned(),
                message: format!(
                    "`{}` has {lines} lines, more than {FUNCTION_LIMIT}: split it into named steps",
                    f.name
                ),
            });
        }
    }
    for (e, seen) in exceptions.iter().zip(seen) {
        let limit = if e.item.ends_with(".rs") {
            FILE_LIMIT
        } else {
            FUNCTION_LIMIT
        };
        let path = e.item.split("::").next().unwrap_or(&e.item).to_owned();
        let message = match seen {
            None => format!(
                "`{}` is gone: remove its entry from tidy's size exceptions",
                e.item
            ),
            Some(lines) if lines <= limit => format!(
                "`{}` has {lines} lines, within the limit of {limit}: remove its entry from tidy's size exceptions",
                e.item
            ),
            Some(lines) if lines > e.lines => format!(
                "`{}` has {lines} lines, more than the {} its size exception allows: split it rather than grow it",
                e.item, e.lines
            ),
            Some(_) => continue,
        };
        violations.push(Violation {
            rule: SIZE_EXCEPTION,
            path,
            line: 0,
            text: String::new(),
            message,
        });
    }
    violations
}

/// The offset of the next `word`, as a whole identifier, from `from`.
fn find_word(code: &[u8], from: usize, word: &[u8]) -> Option<usize> {
    let mut i = from;
    while i + word.len() <= code.len() {
        let at = i + code[i..].windows(word.len()).position(|w| w == word)?;
        let end = at + word.len();
        if (at == 0 || !is_ident_byte(code[at - 1]))
            && (end == code.len() || !is_ident_byte(code[end]))
        {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

fn skip_space(code: &[u8], from: usize) -> usize {
    from + code[from..]
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count()
}

/// After a function's name: the offset of the brace opening its body, or
/// `None` when a `;` ends it first. Parentheses and brackets are skipped
/// whole, so `[u8; 4]` in a parameter does not end it.
fn body_start(code: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in code.iter().enumerate().skip(from) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'{' if depth == 0 => return Some(i),
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The offset of the brace closing the one at `open` (the end of the code if
/// it never closes).
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(text: &str) -> Vec<(String, usize, usize)> {
        functions(&SourceFile::new("a/src/x.rs", text))
            .into_iter()
            .map(|f| (f.name, f.first_line, f.last_line))
            .collect()
    }

    #[test]
    fn functions_from_fn_to_closing_brace() {
        let text = "//! x
pub async fn outer(a: [u8; 4], f: fn(u8) -> u8) -> impl Fn() {
    // a brace in a comment: {
    let s = \"}\";
    let c = '{';
    fn inner() {}
    move || {}
}
trait T {
    fn declared(&self);
    fn provided(&self) where Self: Sized {
    }
}
macro_rules! m { ($n:ident) => { fn $n() {} } }
";
        assert_eq!(
            spans(text),
            [
                ("outer".to_owned(), 2, 8),
                ("inner".to_owned(), 6, 6),
                ("provided".to_owned(), 11, 12),
            ]
        );
    }

    fn body(lines: usize) -> String {
        format!("fn long() {{\n{}}}\n", "    x();\n".repeat(lines - 2))
    }

    fn listed() -> Vec<SizeException> {
        [("a/src/big.rs", 700), ("a/src/x.rs::long", 90)]
            .map(|(item, lines)| SizeException {
                item: item.to_owned(),
                lines,
                reason: "test".to_owned(),
            })
            .into()
    }

    fn messages(files: &[SourceFile], exceptions: &[SizeException]) -> Vec<String> {
        check(files, exceptions)
            .into_iter()
            .map(|v| format!("{}:{}: {}", v.path, v.line, v.message))
            .collect()
    }

    #[test]
    fn over_the_limit_without_an_exception() {
        let big = format!("//! big\n{}", "\n".repeat(600));
        let files = [
            SourceFile::new("a/src/big.rs", big),
            SourceFile::new("a/src/x.rs", format!("//! x\n{}", body(81))),
            SourceFile::new("a/src/y.rs", format!("//! y\n{}", body(80))),
        ];
        let found = messages(&files, &[]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("a/src/big.rs:601: 601 lines"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("a/src/x.rs:2: `long` has 81 lines"),
            "{found:?}"
        );
    }

    #[test]
    fn an_exception_may_shrink_not_grow() {
        let big = |lines: usize| format!("//! big\n{}", "\n".repeat(lines - 1));
        let within = [
            SourceFile::new("a/src/big.rs", big(650)),
            SourceFile::new("a/src/x.rs", format!("//! x\n{}", body(90))),
        ];
        assert!(messages(&within, &listed()).is_empty());
        let grown = [
            SourceFile::new("a/src/big.rs", big(701)),
            SourceFile::new("a/src/x.rs", format!("//! x\n{}", body(91))),
        ];
        let found = messages(&grown, &listed());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found
                .iter()
                .all(|m| m.contains("split it rather than grow it"))
        );
    }

    #[test]
    fn an_exception_no_longer_needed_fails_naming_it() {
        let files = [SourceFile::new(
            "a/src/x.rs",
            format!("//! x\n{}", body(80)),
        )];
        let found = messages(&files, &listed());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("`a/src/big.rs` is gone"), "{found:?}");
        assert!(
            found[1].contains("`a/src/x.rs::long` has 80 lines, within the limit"),
            "{found:?}"
        );
    }
}
