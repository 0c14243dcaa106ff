//! The request property's value strategies: junk, names and ids (known
//! or not), enum values, paging, timestamps and payloads.

use super::*;

/// Text of every kind a client might send by mistake, up to far longer
/// than any field allows (a refusal quoting it must stay small).
pub(super) fn junk() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just(String::new()),
        1 => " {1,3}",
        3 => "\\PC{1,24}",
        2 => "[\\x00-\\x1f\\x7f]{1,4}",
        1 => "[a-z]{1,8}\u{0}[a-z]{1,8}",
        2 => (254usize..=258).prop_map(|n| "x".repeat(n)),
        1 => (254usize..=258).prop_map(|n| "é".repeat(n)),
        1 => Just("'; DROP TABLE segments; --".to_owned()),
        1 => Just("h".repeat(70_000)),
    ]
    .boxed()
}

/// A plausible name: a known one (a duplicate), a fresh valid one, or junk.
pub(super) fn name(known: &[String]) -> BoxedStrategy<String> {
    prop_oneof![
        2 => select(known.to_vec()),
        4 => "[a-z][a-z0-9._-]{0,15}",
        3 => junk(),
    ]
    .boxed()
}

/// A UUID field: an existing id in every spelling `uuid` parses, an
/// unknown one, a near miss, or junk.
pub(super) fn id(known: &[String]) -> BoxedStrategy<String> {
    let k = known.to_vec();
    prop_oneof![
        6 => select(k.clone()),
        1 => select(k.clone()).prop_map(|id| id.replace('-', "")),
        1 => select(k.clone()).prop_map(|id| id.to_uppercase()),
        1 => select(k.clone()).prop_map(|id| format!("{{{id}}}")),
        1 => select(k.clone()).prop_map(|id| format!("urn:uuid:{id}")),
        1 => select(k).prop_map(|id| format!(" {id}")),
        3 => any::<u128>().prop_map(|n| uuid::Uuid::from_u128(n).to_string()),
        1 => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{11,13}",
        3 => junk(),
    ]
    .boxed()
}

/// An optional UUID field: empty (absent) is legal here.
pub(super) fn optional_id(known: &[String]) -> BoxedStrategy<String> {
    prop_oneof![2 => Just(String::new()), 3 => id(known)].boxed()
}

/// An enum field with `known` values 1..=known.
pub(super) fn enum_value(known: i32) -> BoxedStrategy<i32> {
    prop_oneof![
        8 => 1..=known,
        2 => Just(0),
        1 => Just(known + 1),
        1 => Just(-1),
        1 => Just(i32::MAX),
        1 => Just(i32::MIN),
        1 => any::<i32>(),
    ]
    .boxed()
}

pub(super) fn page_size() -> BoxedStrategy<i32> {
    prop_oneof![
        10 => Just(0),
        6 => 1..=3i32,
        1 => Just(1000),
        1 => Just(1001),
        1 => Just(-1),
        1 => Just(i32::MIN),
        1 => Just(i32::MAX),
        1 => any::<i32>(),
    ]
    .boxed()
}

pub(super) fn page_token() -> BoxedStrategy<String> {
    let kinds = vec!["segments", "hosts", "notifications", "vmoves", "", "x"];
    prop_oneof![
        20 => Just(String::new()),
        3 => (select(kinds), prop_oneof![0..5i64, Just(-1), Just(i64::MAX), Just(i64::MIN)])
            .prop_map(|(kind, after)| URL_SAFE_NO_PAD.encode(format!("{kind}:{after}"))),
        1 => prop::collection::vec(any::<u8>(), 0..24).prop_map(|b| URL_SAFE_NO_PAD.encode(b)),
        1 => Just(URL_SAFE_NO_PAD.encode("segments:1:2")),
        1 => Just(URL_SAFE_NO_PAD.encode("segments: 1")),
        2 => junk(),
    ]
    .boxed()
}

/// A timestamp: mostly now, or missing, malformed (nanos), out of chrono's
/// range, or at the edges of what each backend stores.
pub(super) fn timestamp() -> BoxedStrategy<Option<prost_types::Timestamp>> {
    let ts = |seconds, nanos| Some(prost_types::Timestamp { seconds, nanos });
    // chrono's range: years -262143 to 262142.
    let min = chrono::DateTime::<chrono::Utc>::MIN_UTC.timestamp();
    let max = chrono::DateTime::<chrono::Utc>::MAX_UTC.timestamp();
    prop_oneof![
        8 => Just(Some(now())),
        2 => Just(None),
        2 => (0..4_102_444_800i64, 0..1_000_000_000i32).prop_map(move |(s, n)| ts(s, n)),
        1 => Just(ts(0, -1)),
        1 => Just(ts(0, 1_000_000_000)),
        1 => Just(ts(i64::MAX, 0)),
        1 => Just(ts(i64::MIN, 0)),
        1 => Just(ts(min, 0)),
        1 => Just(ts(min + 86_400, 0)),
        1 => Just(ts(max, 999_999_999)),
        1 => Just(ts(2_147_483_648, 0)),     // 2038-01-19T03:14:08
        1 => Just(ts(-1, 0)),                // 1969-12-31T23:59:59
        1 => Just(ts(253_402_300_800, 0)),   // 10000-01-01
        1 => Just(ts(-62_167_219_200, 0)),   // 0000-01-01
        1 => Just(ts(-210_898_425_600, 0)),  // 4714 BC, before PostgreSQL's range
        1 => (any::<i64>(), any::<i32>()).prop_map(move |(s, n)| ts(s, n)),
    ]
    .boxed()
}

/// A payload for a notification of type `kind` (1: COMPUTE_HOST, 2:
/// PROCESS, 3: VM), mostly valid; anything for other values.
pub(super) fn payload(kind: i32) -> BoxedStrategy<HashMap<String, String>> {
    fn map(pairs: Vec<(&str, String)>) -> HashMap<String, String> {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
    let event = || {
        prop_oneof![
            6 => Just("STOPPED".to_owned()),
            2 => Just("STARTED".to_owned()),
            1 => junk(),
        ]
    };
    let valid = match kind {
        1 => (
            event(),
            proptest::option::of(select(vec!["NORMAL", "NORMAL", "UNKNOWN", "ERROR"])),
            proptest::option::of(select(vec!["ONLINE", "OFFLINE", "OFFLINE", "online"])),
        )
            .prop_map(|(event, host, cluster)| {
                let mut pairs = vec![("event", event)];
                pairs.extend(host.map(|h| ("host_status", h.to_owned())));
                pairs.extend(cluster.map(|c| ("cluster_status", c.to_owned())));
                map(pairs)
            })
            .boxed(),
        2 => (
            prop_oneof![4 => Just("nova-compute".to_owned()), 1 => junk()],
            event(),
        )
            .prop_map(|(process, event)| map(vec![("process_name", process), ("event", event)]))
            .boxed(),
        3 => (
            prop_oneof![
                4 => select(vec![1u128, 2, 3]).prop_map(|n| uuid::Uuid::from_u128(n).to_string()),
                1 => junk(),
            ],
            prop_oneof![4 => Just("STOPPED_FAILED".to_owned()), 1 => junk()],
        )
            .prop_map(|(instance, vir)| {
                map(vec![
                    ("instance_uuid", instance),
                    ("vir_domain_event", vir),
                    ("event", "LIFECYCLE".to_owned()),
                ])
            })
            .boxed(),
        _ => Just(map(vec![("event", "STOPPED".to_owned())])).boxed(),
    };
    prop_oneof![
        8 => valid,
        2 => prop::collection::hash_map(
            prop_oneof![
                select(vec!["event", "host_status", "process_name", "instance_uuid"])
                    .prop_map(str::to_owned),
                junk(),
            ],
            junk(),
            0..6,
        ),
        1 => (15usize..=18).prop_map(|n| (0..n).map(|i| (format!("k{i}"), "v".to_owned())).collect()),
        1 => Just(HashMap::from([
            ("event".to_owned(), "STOPPED".to_owned()),
            ("x".repeat(256), "v".to_owned()),
        ])),
    ]
    .boxed()
}
