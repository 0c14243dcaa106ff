//! The rules, one function each, from a source file to the places that
//! break it. Each matches the file's code ([`SourceFile::code`]), never its
//! comments or strings.

use crate::code::is_ident_byte;
use crate::{SourceFile, Violation};

pub const SEA_ORM_OUTSIDE_STORE: &str = "sea-orm outside store";
pub const GENERATED_TYPES_OUTSIDE_EDGES: &str = "generated types outside the edges";
pub const STATUS_OUTSIDE_STATUS_RULES: &str = "status chosen outside the status rules";
pub const MODULE_DOC: &str = "module doc";
pub const CATCH_ALL_NAME: &str = "catch-all name";
pub const DISPATCH_REACHES_STORE: &str = "dispatch reaches the store";
pub const WALL_CLOCK_OUTSIDE_CLOCK: &str = "wall clock read outside the clock";

/// A rule: the violations in one file.
pub type Rule = fn(&SourceFile) -> Vec<Violation>;

pub const ALL: &[Rule] = &[
    sea_orm_outside_store,
    generated_types_outside_edges,
    status_outside_status_rules,
    module_doc,
    catch_all_name,
    dispatch_reaches_store,
    wall_clock_outside_clock,
];

/// The services whose time of day comes from their `Clock` only (leases,
/// retry windows, verdict deadlines and event times are tested on Tokio's
/// paused clock, which a direct read of the system's would escape).
pub const CLOCKED_SERVICES: &[&str] = &["api-service/src/", "engine-service/src/"];

/// Where the generated protobuf types may be used: the contract itself and
/// the edges that translate them, exhaustively, to and from domain types.
pub const PROTOBUF_EDGES: &[&str] = &[
    "proto/",
    // The API's gRPC server: handlers, conversions, reflection.
    "api-service/src/grpc/",
    // The API's side of the engine stream.
    "api-service/src/dispatch/link.rs",
    // The engine's side of the stream, and its server start-up, which
    // mounts `EngineServer`.
    "engine-service/src/link/",
    "engine-service/src/server.rs",
    // The CLI's gRPC client and its conversions.
    "cli/src/client.rs",
    "cli/src/convert.rs",
    // The benchmark drives the public API as a client.
    "bench/src/cloud.rs",
    "bench/src/intake.rs",
    "bench/src/recovery.rs",
    "bench/src/recovery/",
    "bench/src/real.rs",
    "bench/src/soak.rs",
    // The test kit (simulator + engine + API for the demo, the benchmark
    // and the system tests) drives the services over gRPC as tests do.
    "testkit/",
    // The conformance library drives them the same way against a real
    // OpenStack.
    "conformance/",
    // The agent's client of the public API.
    "agent/src/client.rs",
];

/// Where the status variants may be written: the status rules, and the
/// gRPC conversions' exhaustive `match`es between the domain's and the
/// generated status enums. (The REST conversions name statuses through
/// `as_str`/`parse` and need no variant.)
pub const STATUS_RULES: &[&str] = &[
    "api-service/src/status.rs",
    "api-service/src/status/",
    "api-service/src/lifecycle/",
    "api-service/src/grpc/convert.rs",
];

/// Names that say nothing about what a module holds.
pub const CATCH_ALL_NAMES: &[&str] = &["utils", "util", "helpers", "helper", "manager", "common"];

/// `sea_orm` in the API outside `store/`: only the store uses sea-orm.
pub fn sea_orm_outside_store(file: &SourceFile) -> Vec<Violation> {
    if !file.is_in("api-service/src/") || file.is_in("api-service/src/store/") {
        return Vec::new();
    }
    at_lines(
        file,
        SEA_ORM_OUTSIDE_STORE,
        sea_orm_uses(&file.code),
        || "sea-orm is used only in api-service/src/store/".to_owned(),
    )
}

fn sea_orm_uses(code: &str) -> Vec<usize> {
    words(code, "sea_orm").collect()
}

/// Generated protobuf types (`instanceha_proto::v1`,
/// `instanceha_proto::engine`, and `pb::` paths) in a crate's `src/`
/// outside [`PROTOBUF_EDGES`]. Tests, benches and fuzz targets are not
/// under `src/`, and are free to use them.
pub fn generated_types_outside_edges(file: &SourceFile) -> Vec<Violation> {
    if !in_src(file) || PROTOBUF_EDGES.iter().any(|edge| file.is_in(edge)) {
        return Vec::new();
    }
    at_lines(
        file,
        GENERATED_TYPES_OUTSIDE_EDGES,
        generated_type_uses(&file.code),
        || {
            "generated protobuf types are used only at the edges (tidy's PROTOBUF_EDGES); \
         convert to domain types there"
                .to_owned()
        },
    )
}

fn generated_type_uses(code: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for at in words(code, "instanceha_proto") {
        let Some(next) = after_path_separator(code, at + "instanceha_proto".len()) else {
            continue;
        };
        let rest = &code[next..];
        let names_generated =
            |s: &str| words(s, "v1").next().is_some() || words(s, "engine").next().is_some();
        let generated = if rest.starts_with('{') {
            names_generated(&rest[..group_end(rest)])
        } else {
            starts_with_word(rest, "v1") || starts_with_word(rest, "engine")
        };
        if generated {
            found.push(at);
        }
    }
    for at in words(code, "pb") {
        if after_path_separator(code, at + 2).is_none() {
            continue;
        }
        // `pb::` alone, or through `crate::`, `self::` or `super::`, is ours;
        // `tonic_health::pb::` and the like belong to other crates.
        match path_root(code, at) {
            None => found.push(at),
            Some(root) if ["crate", "self", "super"].contains(&root) => found.push(at),
            Some(_) => {}
        }
    }
    found.sort_unstable();
    found
}

/// A status variant (`NotificationStatus::New`, `VMoveStatus::Pending`...)
/// written in the API outside [`STATUS_RULES`]: only the status rules pick
/// a status. Comparing with one (`==`, `!=`, `.eq(`/`.ne(` in a query, a
/// `match` or `matches!` pattern) reads a status and is allowed.
pub fn status_outside_status_rules(file: &SourceFile) -> Vec<Violation> {
    if !file.is_in("api-service/src/") || STATUS_RULES.iter().any(|allowed| file.is_in(allowed)) {
        return Vec::new();
    }
    at_lines(
        file,
        STATUS_OUTSIDE_STATUS_RULES,
        status_constructions(&file.code),
        || {
            "a status is chosen only by the status rules (api-service/src/status.rs); \
         ask them, or compare with `==`"
                .to_owned()
        },
    )
}

const STATUS_VARIANTS: &[(&str, &[&str])] = &[
    (
        "NotificationStatus",
        &["New", "Running", "Error", "Failed", "Ignored", "Finished"],
    ),
    (
        "VMoveStatus",
        &["Pending", "Ongoing", "Succeeded", "Failed", "Ignored"],
    ),
];

fn status_constructions(code: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for (ty, variants) in STATUS_VARIANTS {
        for at in words(code, ty) {
            let Some(next) = after_path_separator(code, at + ty.len()) else {
                continue;
            };
            let variant = ident_at(code, next);
            if !variants.contains(&variant) || path_root(code, at) == Some("pb") {
                continue;
            }
            if !is_comparison(code, at, next + variant.len()) {
                found.push(at);
            }
        }
    }
    found.sort_unstable();
    found
}

/// Whether the expression `code[start..end]` is compared with, or is a
/// pattern, rather than a value being built.
fn is_comparison(code: &str, start: usize, end: usize) -> bool {
    let before = code[..skip_back(code, start)].trim_end();
    let after = code[end..].trim_start();
    let single_bar = |s: &str, bar_at_end: bool| {
        if bar_at_end {
            s.ends_with('|') && !s.ends_with("||")
        } else {
            s.starts_with('|') && !s.starts_with("||")
        }
    };
    if ["==", "!=", ".eq(", ".ne("]
        .iter()
        .any(|op| before.ends_with(op))
        || single_bar(before, true)
        || ["==", "!=", "=>"].iter().any(|op| after.starts_with(op))
        || single_bar(after, false)
    {
        return true;
    }
    // An argument of a comparing macro.
    let mut depth = 0usize;
    for (i, b) in code[..start].bytes().enumerate().rev() {
        match b {
            b')' | b']' | b'}' => depth += 1,
            b'(' | b'[' | b'{' if depth > 0 => depth -= 1,
            b'(' => {
                let callee = code[..i].trim_end();
                return [
                    "matches!",
                    "assert_eq!",
                    "assert_ne!",
                    "debug_assert_eq!",
                    "debug_assert_ne!",
                    ".is_in",
                    ".is_not_in",
                ]
                .iter()
                .any(|m| callee.ends_with(m))
                    || is_tuple_pattern(code, i);
            }
            // A list of values a query column is compared with:
            // `.is_in([..])`, `.is_not_in([..])`.
            b'[' => {
                let before = code[..i].trim_end();
                return before.strip_suffix('(').is_some_and(|callee| {
                    let callee = callee.trim_end();
                    callee.ends_with(".is_in") || callee.ends_with(".is_not_in")
                });
            }
            b'{' | b';' => return false,
            _ => {}
        }
    }
    false
}

/// Whether the parenthesis opening at `open` starts a tuple pattern of a
/// `match` arm: its group is followed by `=>`, `|` or a guard.
fn is_tuple_pattern(code: &str, open: usize) -> bool {
    let mut depth = 0usize;
    for (i, b) in code[open..].bytes().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    let after = code[open + i + 1..].trim_start();
                    return after.starts_with("=>")
                        || (after.starts_with('|') && !after.starts_with("||"))
                        || after.starts_with("if ");
                }
            }
            b';' | b'{' => return false,
            _ => {}
        }
    }
    false
}

/// A `.rs` file whose first line is not a `//!` comment saying what it is
/// for.
pub fn module_doc(file: &SourceFile) -> Vec<Violation> {
    if has_module_doc(&file.text) {
        return Vec::new();
    }
    vec![file.violation(
        MODULE_DOC,
        0,
        "the first line is not a `//!` comment saying what the file is for".to_owned(),
    )]
}

fn has_module_doc(text: &str) -> bool {
    text.lines()
        .next()
        .is_some_and(|first| first.starts_with("//!"))
}

/// A module, file or directory under a `src/` named `utils`, `helpers`,
/// `manager`... ([`CATCH_ALL_NAMES`]): name what it holds instead. The
/// test-support `tests/it/helpers.rs` files are outside `src/`, and left
/// alone while the test harnesses move to a testkit crate.
pub fn catch_all_name(file: &SourceFile) -> Vec<Violation> {
    if !in_src(file) {
        return Vec::new();
    }
    let mut violations = Vec::new();
    if let Some(name) = catch_all_in_path(&file.path) {
        violations.push(file.violation(
            CATCH_ALL_NAME,
            0,
            format!("`{name}` in the path says nothing about what it holds"),
        ));
    }
    violations.extend(at_lines(
        file,
        CATCH_ALL_NAME,
        catch_all_modules(&file.code),
        || {
            "a module named `utils`, `helpers`, `manager`... says nothing about what it holds"
                .to_owned()
        },
    ));
    violations
}

fn catch_all_in_path(path: &str) -> Option<&str> {
    path.split('/')
        .skip_while(|c| *c != "src")
        .skip(1)
        .map(|c| c.strip_suffix(".rs").unwrap_or(c))
        .find(|c| CATCH_ALL_NAMES.contains(c))
}

fn catch_all_modules(code: &str) -> Vec<usize> {
    words(code, "mod")
        .filter(|&at| {
            let name_at = at + 3 + (code[at + 3..].len() - code[at + 3..].trim_start().len());
            name_at > at + 3 && CATCH_ALL_NAMES.contains(&ident_at(code, name_at))
        })
        .collect()
}

/// `.store()` in the API's dispatcher: it goes through the service layer
/// (`Api`), never around it to the store.
pub fn dispatch_reaches_store(file: &SourceFile) -> Vec<Violation> {
    if !file.is_in("api-service/src/dispatch/") {
        return Vec::new();
    }
    at_lines(
        file,
        DISPATCH_REACHES_STORE,
        store_calls(&file.code),
        || {
            "the dispatcher goes through the service layer (`Api`): no `.store()`, nothing from `store`"
                .to_owned()
        },
    )
}

/// `.store()` calls, and paths into `store` (`store::`, `crate::store`).
fn store_calls(code: &str) -> Vec<usize> {
    words(code, "store")
        .filter(|&at| {
            let before = code[..at].trim_end();
            let rest = code[at + "store".len()..].trim_start();
            let call = before.ends_with('.')
                && rest
                    .strip_prefix('(')
                    .is_some_and(|r| r.trim_start().starts_with(')'));
            call || rest.starts_with("::")
        })
        .collect()
}

/// `Utc::now` or `SystemTime::now` in the services' code (before their
/// test modules): their time comes from `instanceha_runtime::clock::Clock`.
pub fn wall_clock_outside_clock(file: &SourceFile) -> Vec<Violation> {
    if !CLOCKED_SERVICES.iter().any(|dir| file.is_in(dir)) || !in_src(file) {
        return Vec::new();
    }
    let code = match file.code.find("#[cfg(test)]") {
        Some(tests) => &file.code[..tests],
        None => file.code.as_str(),
    };
    let reads = ["Utc", "SystemTime"]
        .iter()
        .flat_map(|clock| words(code, clock))
        .filter(|&at| {
            after_path_separator(code, at + ident_at(code, at).len())
                .is_some_and(|next| starts_with_word(&code[next..], "now"))
        })
        .collect::<std::collections::BTreeSet<_>>();
    at_lines(
        file,
        WALL_CLOCK_OUTSIDE_CLOCK,
        reads.into_iter().collect(),
        || {
            "the time of day comes from the service's `Clock` (`self.now()`, `clock.now()`), not the system's".to_owned()
        },
    )
}

// Matching.

/// One violation per line holding an offset.
fn at_lines(
    file: &SourceFile,
    rule: &'static str,
    offsets: Vec<usize>,
    message: impl Fn() -> String,
) -> Vec<Violation> {
    let mut violations: Vec<Violation> = Vec::new();
    for at in offsets {
        if violations
            .last()
            .is_some_and(|v| v.line == file.line_of(at))
        {
            continue;
        }
        violations.push(file.violation(rule, at, message()));
    }
    violations
}

/// Whether the file is in a crate's sources (some directory `src` on its
/// path), not its tests, benches or build script.
fn in_src(file: &SourceFile) -> bool {
    file.path.split('/').any(|c| c == "src")
}

/// The offsets of `word` as a whole identifier.
fn words<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let bytes = code.as_bytes();
    code.match_indices(word)
        .map(|(at, _)| at)
        .filter(move |&at| {
            let end = at + word.len();
            (at == 0 || !is_ident_byte(bytes[at - 1]))
                && (end == bytes.len() || !is_ident_byte(bytes[end]))
        })
}

fn starts_with_word(s: &str, word: &str) -> bool {
    s.starts_with(word)
        && !s
            .as_bytes()
            .get(word.len())
            .is_some_and(|&b| is_ident_byte(b))
}

/// The identifier starting at `at` (empty if none).
fn ident_at(code: &str, at: usize) -> &str {
    let len = code[at..].bytes().take_while(|&b| is_ident_byte(b)).count();
    &code[at..at + len]
}

/// After `code[..at]`, `::` (whitespace allowed around it): the offset of
/// what follows.
fn after_path_separator(code: &str, at: usize) -> Option<usize> {
    let rest = code[at..].trim_start();
    let rest = rest.strip_prefix("::")?;
    let trimmed = rest.trim_start();
    Some(code.len() - trimmed.len())
}

/// The offset just past the last non-whitespace byte before `at`.
fn skip_back(code: &str, at: usize) -> usize {
    code[..at].trim_end().len()
}

/// The first segment of the path whose segment starts at `at`, or `None`
/// if that segment is the first (`a::b::c` at `c` gives `a`).
fn path_root(code: &str, at: usize) -> Option<&str> {
    let mut root = None;
    let mut at = at;
    loop {
        let before = &code[..skip_back(code, at)];
        let Some(before) = before.strip_suffix("::") else {
            return root;
        };
        let end = skip_back(before, before.len());
        let start = before[..end]
            .bytes()
            .rev()
            .take_while(|&b| is_ident_byte(b))
            .count();
        if start == 0 {
            return root;
        }
        at = end - start;
        root = Some(&code[at..end]);
    }
}

/// The length of the `{...}` group `s` starts with, braces included.
fn group_end(s: &str) -> usize {
    let mut depth = 0;
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

#[cfg(test)]
mod tests;
