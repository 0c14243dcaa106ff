//! Nova servers: microversion negotiation, auth errors, per-version fields, paging and filters.

use openstack_sim::Scenario;
use openstack_sim::scenario::{HostGroupSpec, InstanceGroupSpec};
use reqwest::Method;

use crate::helpers::{manual_settings, start, two_hosts};

#[tokio::test]
async fn microversions_are_negotiated_echoed_and_refused() {
    let h = start(two_hosts(manual_settings())).await;
    let token = h.admin().await;
    let a = h
        .send(
            Method::GET,
            "/compute/v2.1/servers",
            &[("X-Auth-Token", &token)],
            None,
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("openstack-api-version"), Some("compute 2.1"));
    assert_eq!(a.header("x-openstack-nova-api-version"), Some("2.1"));
    assert_eq!(
        a.header("vary"),
        Some("OpenStack-API-Version, X-OpenStack-Nova-API-Version")
    );
    assert!(
        a.header("x-compute-request-id")
            .unwrap()
            .starts_with("req-")
    );
    // Nova's request-id middleware sends both, whatever the microversion.
    assert_eq!(
        a.header("x-openstack-request-id"),
        a.header("x-compute-request-id")
    );
    // The v2.1 version document is answered at 2.1, with the same headers;
    // the list of versions only links to each.
    let doc = h.send(Method::GET, "/compute/v2.1", &[], None).await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.header("openstack-api-version"), Some("compute 2.1"));
    assert_eq!(doc.header("x-openstack-nova-api-version"), Some("2.1"));
    assert!(doc.header("vary").is_some());
    assert!(
        doc.header("x-openstack-request-id")
            .unwrap()
            .starts_with("req-")
    );
    assert_eq!(doc.body["version"]["version"], "2.104");
    let list = h.send(Method::GET, "/compute/", &[], None).await;
    assert_eq!(list.body["versions"][0]["status"], "DEPRECATED");
    assert!(list.body["versions"][1].get("media-types").is_none());
    assert_eq!(
        list.body["versions"][1]["links"].as_array().unwrap().len(),
        1,
        "{}",
        list.text
    );
    let a = h
        .nova(&token, "latest", Method::GET, "/servers", None)
        .await;
    assert_eq!(a.header("openstack-api-version"), Some("compute 2.104"));
    let legacy = h
        .send(
            Method::GET,
            "/compute/v2.1/servers",
            &[
                ("X-Auth-Token", &token),
                ("X-OpenStack-Nova-API-Version", "2.11"),
            ],
            None,
        )
        .await;
    assert_eq!(legacy.header("x-openstack-nova-api-version"), Some("2.11"));
    for (version, status) in [
        ("2.105", 406),
        ("3.0", 406),
        ("2.0", 406),
        ("2.x", 400),
        ("two", 400),
    ] {
        let a = h.nova(&token, version, Method::GET, "/servers", None).await;
        assert_eq!(a.status, status, "{version}");
        let fault = if status == 406 {
            "computeFault"
        } else {
            "badRequest"
        };
        assert_eq!(a.body[fault]["code"], status);
    }
}

#[tokio::test]
async fn missing_or_bad_token_is_401_in_nova_envelope() {
    let h = start(two_hosts(manual_settings())).await;
    let a = h
        .send(Method::GET, "/compute/v2.1/servers/detail", &[], None)
        .await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.body["unauthorized"]["message"],
        "The request you have made requires authentication."
    );
    assert!(a.header("www-authenticate").unwrap().contains("/identity"));
    let a = h
        .send(
            Method::GET,
            "/compute/v2.1/servers/detail",
            &[("X-Auth-Token", "gAAAAABbogus")],
            None,
        )
        .await;
    assert_eq!(a.status, 401);
    let token = h.admin().await;
    let bad_service = h
        .send(
            Method::GET,
            "/compute/v2.1/servers",
            &[("X-Auth-Token", &token), ("X-Service-Token", "bogus")],
            None,
        )
        .await;
    assert_eq!(bad_service.status, 401);
}

#[tokio::test]
async fn fields_appear_by_microversion_and_role() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let id = h.id_of("app-1");
    let v21 = h.server(&admin, "2.1", &id).await;
    assert!(v21.get("locked").is_none());
    assert!(v21.get("host_status").is_none());
    assert!(v21.get("locked_reason").is_none());
    assert_eq!(v21["OS-EXT-SRV-ATTR:host"], "compute-01");
    assert_eq!(
        v21["OS-EXT-SRV-ATTR:hypervisor_hostname"],
        "compute-01.example.org"
    );
    assert!(
        v21["os-extended-volumes:volumes_attached"][0]
            .get("delete_on_termination")
            .is_none()
    );
    assert_eq!(v21["image"], "", "booted from volume");
    assert!(v21["flavor"].get("id").is_some());
    let v23 = h.server(&admin, "2.3", &id).await;
    assert_eq!(
        v23["os-extended-volumes:volumes_attached"][0]["delete_on_termination"],
        false
    );
    let v29 = h.server(&admin, "2.9", &id).await;
    assert_eq!(v29["locked"], false);
    assert!(v29.get("host_status").is_none());
    let v216 = h.server(&admin, "2.16", &id).await;
    assert_eq!(v216["host_status"], "UP");
    assert!(v216.get("server_groups").is_none());
    let v273 = h.server(&admin, "2.73", &id).await;
    assert!(v273.get("locked_reason").is_some());
    // 2.71: a server shown alone (not in a list) names its server groups.
    assert!(v273["server_groups"].as_array().unwrap().is_empty());
    let listed = h
        .nova(
            &admin,
            "2.73",
            Method::GET,
            "/servers/detail?all_tenants=1",
            None,
        )
        .await;
    assert!(
        listed.body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.get("server_groups").is_none())
    );
    assert_eq!(v273["flavor"]["original_name"], "m1.small");
    assert_eq!(v273["status"], "ACTIVE");
    assert!(v273.get("fault").is_none());

    let broken = h.server(&admin, "2.73", &h.id_of("broken-1")).await;
    assert_eq!(broken["status"], "ERROR");
    assert_eq!(broken["fault"]["code"], 500);
    let stopped = h.server(&admin, "2.73", &h.id_of("batch-1")).await;
    assert_eq!(stopped["status"], "SHUTOFF");
    assert_eq!(stopped["OS-EXT-STS:power_state"], 4);

    let member = h.token("demo", "secret", "demo").await;
    let as_member = h.server(&member, "2.73", &id).await;
    assert!(as_member.get("OS-EXT-SRV-ATTR:host").is_none());
    assert!(as_member.get("host_status").is_none());
    assert_eq!(as_member["OS-EXT-STS:vm_state"], "active");
    let missing = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/00000000-0000-0000-0000-000000000000",
            None,
        )
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.body["itemNotFound"]["message"],
        "Instance 00000000-0000-0000-0000-000000000000 could not be found."
    );
    let other_project = h
        .nova(
            &member,
            "2.1",
            Method::GET,
            &format!("/servers/{}", h.id_of("own-1")),
            None,
        )
        .await;
    assert_eq!(other_project.status, 404);
}

#[tokio::test]
async fn host_status_follows_heartbeat_force_down_and_disable() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let id = h.id_of("web-1");
    h.sim.power_off("compute-01").unwrap();
    assert_eq!(h.server(&admin, "2.16", &id).await["host_status"], "UP");
    h.sim.advance(61.0);
    assert_eq!(
        h.server(&admin, "2.16", &id).await["host_status"],
        "UNKNOWN"
    );
    let uuid = h
        .sim
        .snapshot()
        .host("compute-01")
        .unwrap()
        .host
        .service_uuid
        .clone();
    let a = h
        .nova(
            &admin,
            "2.53",
            Method::PUT,
            &format!("/os-services/{uuid}"),
            Some(serde_json::json!({"status": "disabled", "disabled_reason": "failed"})),
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(
        h.server(&admin, "2.16", &id).await["host_status"],
        "MAINTENANCE"
    );
    h.nova(
        &admin,
        "2.53",
        Method::PUT,
        &format!("/os-services/{uuid}"),
        Some(serde_json::json!({"forced_down": true})),
    )
    .await;
    assert_eq!(h.server(&admin, "2.16", &id).await["host_status"], "DOWN");
}

fn many(per_host: usize, max_limit: usize) -> Scenario {
    let mut settings = manual_settings();
    settings.max_limit = max_limit;
    Scenario::builder()
        .settings(settings)
        .host_group(HostGroupSpec {
            count: 2,
            ..HostGroupSpec::default()
        })
        .instance_group(InstanceGroupSpec {
            host: "compute-0*".into(),
            count: per_host,
            ..InstanceGroupSpec::default()
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn paging_walks_every_page_with_servers_links() {
    let h = start(many(23, 1000)).await;
    let admin = h.admin().await;
    let mut seen = Vec::new();
    let mut path = "/servers/detail?all_tenants=1&host=compute-01&limit=5".to_string();
    let mut pages = 0;
    loop {
        let a = h.nova(&admin, "2.73", Method::GET, &path, None).await;
        assert_eq!(a.status, 200, "{}", a.text);
        pages += 1;
        let servers = a.body["servers"].as_array().unwrap().clone();
        assert!(
            servers
                .iter()
                .all(|s| s["OS-EXT-SRV-ATTR:host"] == "compute-01")
        );
        seen.extend(
            servers
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string()),
        );
        match a.body.get("servers_links") {
            Some(links) => {
                assert_eq!(servers.len(), 5, "a link only on a full page");
                let href = links[0]["href"].as_str().unwrap();
                assert_eq!(links[0]["rel"], "next");
                assert!(href.contains(&format!("marker={}", servers[4]["id"].as_str().unwrap())));
                path = href.split("/compute/v2.1").nth(1).unwrap().to_string();
            }
            None => break,
        }
    }
    assert_eq!(pages, 5);
    assert_eq!(seen.len(), 23);
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 23);
    // newest first: created timestamps never increase along the walk
    let snapshot = h.sim.snapshot();
    let created: Vec<_> = seen
        .iter()
        .map(|id| snapshot.instance(id).unwrap().created)
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]));

    let exact = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=1&host=compute-02&limit=23",
            None,
        )
        .await;
    assert_eq!(exact.body["servers"].as_array().unwrap().len(), 23);
    let last_page = exact.body["servers_links"][0]["href"]
        .as_str()
        .unwrap()
        .split("/compute/v2.1")
        .nth(1)
        .unwrap()
        .to_string();
    let empty = h.nova(&admin, "2.1", Method::GET, &last_page, None).await;
    assert_eq!(
        empty.body["servers"].as_array().unwrap().len(),
        0,
        "a full last page leads to an empty one"
    );
    assert!(empty.body.get("servers_links").is_none());

    let bad = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=1&marker=nope",
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["badRequest"]["message"], "marker [nope] not found");
    for limit in ["-1", "x"] {
        let a = h
            .nova(
                &admin,
                "2.1",
                Method::GET,
                &format!("/servers/detail?limit={limit}"),
                None,
            )
            .await;
        assert_eq!(a.status, 400, "limit {limit}");
    }
    let summary = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers?all_tenants=1&limit=3",
            None,
        )
        .await;
    let first = &summary.body["servers"][0];
    assert_eq!(
        first.as_object().unwrap().len(),
        3,
        "summary: id, name, links"
    );
    assert!(
        summary.body["servers_links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("/compute/v2.1/servers?")
    );
}

#[tokio::test]
async fn max_limit_caps_the_page() {
    let h = start(many(12, 10)).await;
    let admin = h.admin().await;
    let a = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=true&limit=50",
            None,
        )
        .await;
    assert_eq!(a.body["servers"].as_array().unwrap().len(), 10);
    assert!(a.body.get("servers_links").is_some());
    let a = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=true",
            None,
        )
        .await;
    assert_eq!(a.body["servers"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn all_tenants_is_admin_only_and_host_is_ignored_for_others() {
    let h = start(two_hosts(manual_settings())).await;
    let reader = h.token("reader", "secret", "demo").await;
    let a = h
        .nova(
            &reader,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=1",
            None,
        )
        .await;
    assert_eq!(a.status, 403);
    assert!(
        a.body["forbidden"]["message"]
            .as_str()
            .unwrap()
            .contains("get_all_tenants")
    );
    let a = h
        .nova(
            &reader,
            "2.1",
            Method::GET,
            "/servers/detail?host=compute-02",
            None,
        )
        .await;
    assert_eq!(a.status, 200);
    let names: Vec<&str> = a.body["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        6,
        "every demo server, host filter ignored: {names:?}"
    );
    assert!(!names.contains(&"own-1"));
    let admin = h.admin().await;
    let own = h
        .nova(&admin, "2.1", Method::GET, "/servers/detail", None)
        .await;
    assert_eq!(
        own.body["servers"].as_array().unwrap().len(),
        1,
        "admin without all_tenants sees its project"
    );
    let all = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants",
            None,
        )
        .await;
    assert_eq!(
        all.body["servers"].as_array().unwrap().len(),
        7,
        "an empty all_tenants means true"
    );
    let bad = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=maybe",
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    let node = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=1&node=compute-02.example.org",
            None,
        )
        .await;
    assert_eq!(node.body["servers"].as_array().unwrap().len(), 1);
    let by_status = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            "/servers/detail?all_tenants=1&status=SHUTOFF",
            None,
        )
        .await;
    assert_eq!(by_status.body["servers"][0]["name"], "batch-1");
}

/// Nova reads `name` (and its alias `display_name`) and `node` as regular
/// expressions searched anywhere in the value (PostgreSQL's `~`), case
/// sensitive; its schema refuses an empty or uncompilable one.
#[tokio::test]
async fn name_and_node_filters_are_regular_expressions() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let names = |query: &'static str| {
        let (h, admin) = (&h, admin.clone());
        async move {
            let a = h
                .nova(
                    &admin,
                    "2.1",
                    Method::GET,
                    &format!("/servers/detail?all_tenants=1&{query}"),
                    None,
                )
                .await;
            assert_eq!(a.status, 200, "{query}: {}", a.text);
            let mut names: Vec<String> = a.body["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_owned())
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        names("name=web").await,
        ["web-1"],
        "a plain word still matches anywhere"
    );
    assert_eq!(names("name=%5Eb").await, ["batch-1", "broken-1"], "^b");
    assert_eq!(
        names("name=(web%7Cdb)-1%24").await,
        ["db-1", "web-1"],
        "(web|db)-1$"
    );
    assert_eq!(names("name=a.p").await, ["app-1"]);
    assert_eq!(names("name=.").await.len(), 7);
    assert!(names("name=WEB").await.is_empty(), "case sensitive");
    assert!(
        names("name=b.*-2").await.is_empty(),
        "a substring filter would not read the dot and star"
    );
    assert_eq!(names("display_name=%5Edb").await, ["db-1"]);
    assert_eq!(
        names("node=%5Ecompute-0%5B23%5D").await,
        ["own-1"],
        "^compute-0[23]"
    );
    for refused in ["name=(", "name=", "name=a%5B", "node=*"] {
        let a = h
            .nova(
                &admin,
                "2.1",
                Method::GET,
                &format!("/servers/detail?all_tenants=1&{refused}"),
                None,
            )
            .await;
        assert_eq!(a.status, 400, "{refused}: {}", a.text);
        assert!(
            a.body["badRequest"]["message"]
                .as_str()
                .unwrap()
                .contains("is not a 'regex'"),
            "{}",
            a.text
        );
    }
}
