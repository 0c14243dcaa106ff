//! One trace from the agent's request through the API and the engine to
//! each Nova call, and the metrics after a recovery, scraped the way
//! Prometheus does.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tonic::Request;

use instanceha_testkit::check::assert_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::fast;
use instanceha_testkit::cloud::now;
use instanceha_testkit::eventually;

fn of_trace(spans: &InMemorySpanExporter, trace: TraceId) -> Vec<SpanData> {
    spans
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// What the scrape after a recovery shows: the API's, the engine's and
/// the OpenStack client's metrics, the process's and the build's.
const SCRAPED: [&str; 17] = [
    "instanceha_notifications_total{status=\"finished\",type=\"COMPUTE_HOST\"}",
    "instanceha_vmoves_total{status=\"succeeded\",type=\"evacuation\"}",
    "instanceha_instance_recovery_duration_seconds_bucket",
    "instanceha_notification_recovery_duration_seconds_count",
    "instanceha_openstack_requests_total{operation=\"servers.action.evacuate\",service=\"nova\",status=\"ok\"}",
    "instanceha_openstack_request_duration_seconds_bucket",
    "instanceha_dispatch_runs_total{end=\"done\"}",
    "instanceha_dispatch_streams_open",
    "instanceha_dispatch_oldest_stream_seconds ",
    "instanceha_engine_instances_in_flight",
    "instanceha_engine_first_evacuation_seconds_bucket",
    "instanceha_engine_evacuation_spread_seconds_count",
    "instanceha_engine_recovery_tail_seconds_sum",
    "instanceha_reports_total{outcome=\"stored\",type=\"COMPUTE_HOST\"} ",
    "instanceha_build_info{service=\"tests\",version=",
    "process_cpu_seconds_total ",
    "process_resident_memory_bytes ",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_agent_to_nova_and_metrics_after_a_recovery() {
    let (spans, registry) = instanceha_testkit::telemetry::captured();
    let scenario = fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true)),
    );
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    cloud.sim.power_off("compute-01").unwrap();

    // What the simulator served before the report is not the recovery's.
    let before_report = cloud.sim.request_log(None).last().map(|r| r.seq);
    let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let agent_span = SpanId::from_hex("00f067aa0ba902b7").unwrap();
    let mut request = Request::new(pb::CreateNotificationRequest {
        r#type: pb::NotificationType::ComputeHost as i32,
        hostname: "compute-01".into(),
        generated_time: Some(now()),
        payload: instanceha_testkit::cloud::fenced_host_payload(),
        idempotency_key: String::new(),
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{agent_span}-01").parse().unwrap(),
    );
    request
        .metadata_mut()
        .insert("baggage", "tenant=ops".parse().unwrap());
    let n = cloud
        .notifications
        .create_notification(request)
        .await
        .unwrap()
        .into_inner();
    let n = cloud.terminal(&n.id, Duration::from_secs(30)).await;
    assert_status(&n, pb::NotificationStatus::Finished);

    // The engine's run span closes once the API has acknowledged Done.
    let (within, every) = (Duration::from_secs(10), Duration::from_millis(20));
    let collected = eventually("the run's spans", within, every, || async {
        let collected = of_trace(spans, trace);
        if !named(&collected, "recovery.run").is_empty()
            && !named(&collected, "dispatch.run").is_empty()
        {
            Ok(collected)
        } else {
            let names: Vec<_> = collected.iter().map(|s| &s.name).collect();
            Err(format!("spans: {names:?}"))
        }
    })
    .await;
    let one = |name: &str| -> &SpanData {
        let found = named(&collected, name);
        assert_eq!(
            found.len(),
            1,
            "one {name} span: {:?}",
            collected.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0]
    };
    let create = one("instanceha.v1.NotificationService/CreateNotification");
    let dispatch = one("dispatch.run");
    let run = one("recovery.run");
    let instance = one("recovery.instance");
    let evacuate = one("nova servers.action.evacuate");
    // Parent links in order: agent -> create -> dispatch -> run -> instance -> evacuate.
    assert_eq!(create.parent_span_id, agent_span);
    assert_eq!(dispatch.parent_span_id, create.span_context.span_id());
    assert_eq!(run.parent_span_id, dispatch.span_context.span_id());
    assert_eq!(instance.parent_span_id, run.span_context.span_id());
    assert_eq!(evacuate.parent_span_id, instance.span_context.span_id());
    let attribute = |span: &SpanData, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute(dispatch, "notification_id"), Some(n.id.clone()));
    assert_eq!(attribute(run, "host"), Some("compute-01".to_owned()));
    assert!(attribute(instance, "instance_id").is_some());
    assert!(
        attribute(evacuate, "openstack.request_id").is_some(),
        "{:?}",
        evacuate.attributes
    );
    // The simulator saw the trace on Nova's evacuate call.
    let evacuate_call = cloud
        .sim
        .request_log(None)
        .into_iter()
        .find(|r| r.action.as_deref() == Some("evacuate"))
        .unwrap();
    let traceparent = evacuate_call
        .traceparent
        .expect("a traceparent on the evacuate call");
    assert!(traceparent.contains(&trace.to_string()), "{traceparent}");
    assert!(traceparent.contains(&evacuate.span_context.span_id().to_string()));
    every_nova_request_carries(&cloud.sim.request_log(before_report), trace);

    // The metrics, as Prometheus scrapes them.
    let text = scrape(registry.clone()).await;
    for expected in SCRAPED {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
}

/// `registry`'s `/metrics` page, served and fetched as Prometheus scrapes it.
pub(crate) async fn scrape(registry: prometheus::Registry) -> String {
    let addr = instanceha_runtime::telemetry::serve_registry(
        registry,
        "127.0.0.1:0".parse().unwrap(),
        &instanceha_runtime::connections::ConnectionBudget::unlimited(),
    )
    .await
    .unwrap();
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Every Nova request of the recovery carries the report's trace: the
/// shared migration poller's `os-migrations` reads too, from their task.
fn every_nova_request_carries(requests: &[openstack_sim::RequestRecord], trace: TraceId) {
    let nova: Vec<_> = requests.iter().filter(|r| r.service == "compute").collect();
    let polls = nova
        .iter()
        .filter(|r| r.path.ends_with("/os-migrations"))
        .count();
    assert!(
        polls >= 2,
        "the baseline read and at least one poll: {nova:#?}"
    );
    let untraced: Vec<String> = nova
        .iter()
        .filter(|r| {
            !r.traceparent
                .as_deref()
                .is_some_and(|t| t.contains(&trace.to_string()))
        })
        .map(|r| {
            format!(
                "{} {}?{}",
                r.method,
                r.path,
                r.query.as_deref().unwrap_or("")
            )
        })
        .collect();
    assert!(
        untraced.is_empty(),
        "{} of {} Nova requests without the report's trace: {untraced:#?}",
        untraced.len(),
        nova.len()
    );
}
