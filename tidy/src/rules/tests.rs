//! Each rule on small sources: what it catches and what it lets be.

use super::*;

/// The lines of `text` that break `rule` when the file is at `path`.
fn lines(rule: Rule, path: &str, text: &str) -> Vec<usize> {
    rule(&SourceFile::new(path, text))
        .into_iter()
        .map(|v| v.line)
        .collect()
}

#[test]
fn sea_orm_only_in_store() {
    let text = "//! a\n// sea_orm in a comment\nuse sea_orm::DbErr;\nlet x = my_sea_orm;\n";
    let at = |path| lines(sea_orm_outside_store, path, text);
    assert_eq!(at("api-service/src/service/error.rs"), [3]);
    assert!(at("api-service/src/store/mod.rs").is_empty());
    assert!(at("migrations/src/lib.rs").is_empty());
}

#[test]
fn generated_types_only_at_the_edges() {
    let text = "//! a
use instanceha_proto::v1 as pb;
use instanceha_proto::{time, ConversionError};
use instanceha_proto::{
engine::v1 as wire,
time,
};
let s = pb::Segment::default();
let h = tonic_health::pb::FILE_DESCRIPTOR_SET;
let t = crate::grpc::pb::Host::default();
let d = instanceha_proto::PUBLIC_DESCRIPTOR_SET;
let p = \"pb::Segment\"; // pb::Host
";
    let at = |path| lines(generated_types_outside_edges, path, text);
    assert_eq!(at("api-service/src/rest/hosts.rs"), [2, 4, 8, 10]);
    assert_eq!(at("cli/src/watch/mod.rs"), [2, 4, 8, 10]);
    assert!(at("api-service/src/grpc/hosts.rs").is_empty());
    assert!(at("api-service/src/dispatch/link.rs").is_empty());
    assert!(at("cli/src/client.rs").is_empty());
    assert!(at("api-service/tests/it/hosts.rs").is_empty());
    assert!(at("fuzz/fuzz_targets/decode_request.rs").is_empty());
}

#[test]
fn statuses_are_chosen_by_the_status_rules_and_compared_anywhere() {
    let text = "//! a
let due = Due { status: NotificationStatus::Error };
if n.status() == NotificationStatus::New {}
if NotificationStatus::Running != s {}
.filter(Column::Status.eq(NotificationStatus::Running.as_str()))
match s { NotificationStatus::Failed | NotificationStatus::Ignored => {} }
assert!(matches!(s, VMoveStatus::Pending));
record.status = VMoveStatus::Succeeded;
let wire = pb::NotificationStatus::New;
let other = NotificationStatus::parse(\"new\");
.filter(Column::Status.is_in([VMoveStatus::Pending.as_str(), VMoveStatus::Failed.as_str()]))
match (s, run) { (NotificationStatus::Running, Some(id)) => {} _ => {} }
let pair = (NotificationStatus::Running, 1);
let list = [VMoveStatus::Failed];
";
    let at = |path| lines(status_outside_status_rules, path, text);
    assert_eq!(at("api-service/src/store/dispatch.rs"), [2, 8, 13, 14]);
    assert_eq!(at("api-service/src/rest/convert.rs"), [2, 8, 13, 14]);
    assert!(at("api-service/src/status.rs").is_empty());
    assert!(at("api-service/src/status/ledger.rs").is_empty());
    assert!(at("api-service/src/grpc/convert.rs").is_empty());
    assert!(at("engine-service/src/link/mod.rs").is_empty());
}

#[test]
fn every_file_opens_with_its_module_doc() {
    assert!(lines(module_doc, "a/src/lib.rs", "//! what it is\nfn f() {}\n").is_empty());
    assert_eq!(
        lines(module_doc, "a/src/lib.rs", "// not a doc\n//! late\n"),
        [1]
    );
    assert_eq!(lines(module_doc, "a/build.rs", "use std::env;\n"), [1]);
    assert_eq!(lines(module_doc, "a/src/empty.rs", ""), [1]);
}

#[test]
fn no_catch_all_names_under_src() {
    let at = |path, text| lines(catch_all_name, path, text);
    assert_eq!(at("a/src/utils.rs", "//! a\n"), [1]);
    assert_eq!(at("a/src/common/mod.rs", "//! a\n"), [1]);
    assert_eq!(
        at(
            "a/src/lib.rs",
            "//! a\nmod parse;\npub(crate) mod helpers;\n// mod util\n"
        ),
        [3]
    );
    assert!(at("a/tests/it/helpers.rs", "//! a\nmod util;\n").is_empty());
    assert!(at("a/src/commonplace.rs", "//! a\nmod managers;\n").is_empty());
}

#[test]
fn the_dispatcher_does_not_reach_the_store() {
    let text = "//! a
let s = self.api.store();
self.unreachable.store(0, Ordering::Relaxed);
let e = store::Error::Stale;
x.store ( )
use crate::store::{Due, RunPolicy};
let restore = 1;
";
    let at = |path| lines(dispatch_reaches_store, path, text);
    assert_eq!(at("api-service/src/dispatch/mod.rs"), [2, 4, 5, 6]);
    assert!(at("api-service/src/service/runs.rs").is_empty());
}

#[test]
fn path_roots() {
    let code = "tonic_health::pb::X; crate :: grpc::pb::Y; pb::Z";
    let roots: Vec<_> = words(code, "pb").map(|at| path_root(code, at)).collect();
    assert_eq!(roots, [Some("tonic_health"), Some("crate"), None]);
}

#[test]
fn the_services_read_the_time_of_day_from_their_clock() {
    let text = "//! a
let a = Utc::now();
let b = chrono::Utc :: now();
let c = std::time::SystemTime::now();
let d = self.clock.now(); // Utc::now() in a comment
let e = Utc::now_or_never();
#[cfg(test)]
mod tests { fn t() { let _ = Utc::now(); } }
";
    let at = |path| lines(wall_clock_outside_clock, path, text);
    assert_eq!(at("api-service/src/service/hosts.rs"), [2, 3, 4]);
    assert_eq!(at("engine-service/src/recovery/report.rs"), [2, 3, 4]);
    assert!(at("runtime/src/clock.rs").is_empty());
    assert!(at("agent/src/spool.rs").is_empty());
    assert!(at("engine-service/tests/it/main.rs").is_empty());
}
