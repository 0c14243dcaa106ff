//! Nova admin APIs: os-services (2.53 and legacy), hypervisors, aggregates, migrations, server
//! stop/start/lock/reset and external events.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{manual_settings, start, two_hosts};

#[tokio::test]
async fn services_list_filters_and_version_fields() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let a = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            "/os-services?binary=nova-compute&host=compute-01",
            None,
        )
        .await;
    let services = a.body["services"].as_array().unwrap();
    assert_eq!(services.len(), 1);
    let s = &services[0];
    assert_eq!(s["state"], "up");
    assert_eq!(s["status"], "enabled");
    assert_eq!(s["forced_down"], false);
    assert_eq!(s["id"].as_str().unwrap().len(), 36);
    let all = h
        .nova(&admin, "2.1", Method::GET, "/os-services", None)
        .await;
    let all = all.body["services"].as_array().unwrap();
    assert_eq!(all.len(), 5, "scheduler, conductor and three computes");
    assert!(all[0]["id"].is_u64());
    assert!(all[0].get("forced_down").is_none(), "forced_down from 2.11");
    assert_eq!(
        h.nova(&admin, "2.75", Method::GET, "/os-services?zone=nova", None)
            .await
            .status,
        400
    );
    assert_eq!(
        h.nova(&admin, "2.74", Method::GET, "/os-services?zone=nova", None)
            .await
            .status,
        200
    );
    let reader = h.token("reader", "secret", "demo").await;
    assert_eq!(
        h.nova(&reader, "2.53", Method::GET, "/os-services", None)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn service_updates_follow_the_2_53_rules() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let uuid = h
        .sim
        .snapshot()
        .host("compute-01")
        .unwrap()
        .host
        .service_uuid
        .clone();
    let put = |body: serde_json::Value, id: String| {
        let h = &h;
        let admin = admin.clone();
        async move {
            h.nova(
                &admin,
                "2.53",
                Method::PUT,
                &format!("/os-services/{id}"),
                Some(body),
            )
            .await
        }
    };
    assert_eq!(
        put(json!({"status": "disabled"}), "not-a-uuid".into())
            .await
            .status,
        400
    );
    assert_eq!(put(json!({}), uuid.clone()).await.status, 400);
    assert_eq!(
        put(
            json!({"status": "enabled", "disabled_reason": "x"}),
            uuid.clone()
        )
        .await
        .status,
        400
    );
    assert_eq!(
        put(json!({"status": "off"}), uuid.clone()).await.status,
        400
    );
    assert_eq!(
        put(
            json!({"status": "disabled", "disabled_reason": ""}),
            uuid.clone()
        )
        .await
        .status,
        400
    );
    assert_eq!(
        put(
            json!({"status": "disabled", "disabled_reason": "x".repeat(256)}),
            uuid.clone()
        )
        .await
        .status,
        400
    );
    assert_eq!(
        put(json!({"host": "compute-01"}), uuid.clone())
            .await
            .status,
        400
    );
    assert_eq!(
        put(
            json!({"forced_down": true}),
            "00000000-0000-0000-0000-000000000000".into()
        )
        .await
        .status,
        404
    );
    let conductor = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            "/os-services?binary=nova-conductor",
            None,
        )
        .await;
    let conductor_id = conductor.body["services"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        put(json!({"forced_down": true}), conductor_id).await.status,
        400,
        "only nova-compute"
    );
    let a = put(json!({"status": "disabled", "disabled_reason": "Masakari detected host failed.", "forced_down": true}), uuid.clone()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["service"]["status"], "disabled");
    assert_eq!(
        a.body["service"]["disabled_reason"],
        "Masakari detected host failed."
    );
    assert_eq!(a.body["service"]["forced_down"], true);
    assert_eq!(a.body["service"]["state"], "down");

    // an evacuation done from this host blocks forced_down:false until the host restarts
    h.sim.power_off("compute-01").unwrap();
    assert_eq!(
        h.evacuate(&admin, "2.53", &h.id_of("web-1"), json!({}))
            .await
            .status,
        200
    );
    h.sim.advance(30.0);
    let a = put(json!({"forced_down": false}), uuid.clone()).await;
    assert_eq!(a.status, 400, "{}", a.text);
    h.sim.power_on("compute-01").unwrap();
    h.sim.advance(11.0);
    let m = h
        .nova(
            &admin,
            "2.59",
            Method::GET,
            "/os-migrations?source_compute=compute-01",
            None,
        )
        .await;
    assert_eq!(m.body["migrations"][0]["status"], "completed");
    let a = put(json!({"forced_down": false, "status": "enabled"}), uuid).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["service"]["state"], "up");
    assert!(a.body["service"]["disabled_reason"].is_null());
}

#[tokio::test]
async fn legacy_service_updates_before_2_53() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let body =
        json!({"host": "compute-01", "binary": "nova-compute", "disabled_reason": "maintenance"});
    let a = h
        .nova(
            &admin,
            "2.11",
            Method::PUT,
            "/os-services/disable-log-reason",
            Some(body),
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["service"]["status"], "disabled");
    assert_eq!(a.body["service"]["disabled_reason"], "maintenance");
    let a = h
        .nova(
            &admin,
            "2.11",
            Method::PUT,
            "/os-services/force-down",
            Some(json!({"host": "compute-01", "binary": "nova-compute", "forced_down": true})),
        )
        .await;
    assert_eq!(a.body["service"]["forced_down"], true);
    let too_old = h
        .nova(
            &admin,
            "2.10",
            Method::PUT,
            "/os-services/force-down",
            Some(json!({"host": "compute-01", "binary": "nova-compute", "forced_down": true})),
        )
        .await;
    assert_eq!(too_old.status, 404);
    let a = h
        .nova(
            &admin,
            "2.1",
            Method::PUT,
            "/os-services/enable",
            Some(json!({"host": "compute-01", "binary": "nova-compute"})),
        )
        .await;
    assert_eq!(a.body["service"]["status"], "enabled");
    let s = h.sim.snapshot();
    assert!(s.host("compute-01").unwrap().host.enabled);
    assert!(s.host("compute-01").unwrap().host.forced_down);
}

#[tokio::test]
async fn hypervisors_with_servers_patterns_and_paging() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let a = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            "/os-hypervisors?hypervisor_hostname_pattern=compute-01&with_servers=true",
            None,
        )
        .await;
    let hv = &a.body["hypervisors"][0];
    assert_eq!(hv["hypervisor_hostname"], "compute-01.example.org");
    assert_eq!(hv["state"], "up");
    assert_eq!(hv["servers"].as_array().unwrap().len(), 6);
    let empty = h
        .nova(
            &admin,
            "2.75",
            Method::GET,
            "/os-hypervisors?hypervisor_hostname_pattern=compute-03&with_servers=true",
            None,
        )
        .await;
    assert_eq!(empty.body["hypervisors"][0]["servers"], json!([]));
    let pre = h
        .nova(
            &admin,
            "2.74",
            Method::GET,
            "/os-hypervisors?hypervisor_hostname_pattern=compute-03&with_servers=true",
            None,
        )
        .await;
    assert!(pre.body["hypervisors"][0].get("servers").is_none());
    let detail = h
        .nova(&admin, "2.88", Method::GET, "/os-hypervisors/detail", None)
        .await;
    let d = &detail.body["hypervisors"][0];
    assert_eq!(d["service"]["host"], "compute-01");
    assert!(d.get("vcpus").is_none(), "statistics removed in 2.88");
    assert!(d.get("uptime").is_some());
    let old = h
        .nova(
            &admin,
            "2.33",
            Method::GET,
            "/os-hypervisors/detail?limit=2",
            None,
        )
        .await;
    assert_eq!(old.body["hypervisors"].as_array().unwrap().len(), 2);
    assert!(old.body["hypervisors"][0]["vcpus"].is_u64());
    let next = old.body["hypervisors_links"][0]["href"].as_str().unwrap();
    let rest = h
        .nova(
            &admin,
            "2.33",
            Method::GET,
            next.split("/compute/v2.1").nth(1).unwrap(),
            None,
        )
        .await;
    assert_eq!(rest.body["hypervisors"].as_array().unwrap().len(), 1);
    let id = detail.body["hypervisors"][1]["id"].as_str().unwrap();
    let one = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            &format!("/os-hypervisors/{id}"),
            None,
        )
        .await;
    assert_eq!(
        one.body["hypervisor"]["hypervisor_hostname"],
        "compute-02.example.org"
    );
    h.sim.power_off("compute-02").unwrap();
    h.sim.advance(61.0);
    let one = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            &format!("/os-hypervisors/{id}"),
            None,
        )
        .await;
    assert_eq!(one.body["hypervisor"]["state"], "down");
}

#[tokio::test]
async fn aggregates_list_and_add_host() {
    let scenario = openstack_sim::Scenario::small();
    let h = start(scenario).await;
    let admin = h.admin().await;
    let a = h
        .nova(&admin, "2.41", Method::GET, "/os-aggregates", None)
        .await;
    let aggs = a.body["aggregates"].as_array().unwrap();
    let reserved = aggs.iter().find(|a| a["name"] == "ha-reserved").unwrap();
    assert_eq!(reserved["hosts"], json!(["compute-03"]));
    assert!(reserved["uuid"].is_string());
    let id = reserved["id"].as_u64().unwrap();
    let path = format!("/os-aggregates/{id}/action");
    let add = h
        .nova(
            &admin,
            "2.41",
            Method::POST,
            &path,
            Some(json!({"add_host": {"host": "compute-02"}})),
        )
        .await;
    assert_eq!(add.status, 200);
    assert_eq!(
        add.body["aggregate"]["hosts"],
        json!(["compute-03", "compute-02"])
    );
    let again = h
        .nova(
            &admin,
            "2.41",
            Method::POST,
            &path,
            Some(json!({"add_host": {"host": "compute-02"}})),
        )
        .await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body["conflictingRequest"]["code"], 409);
    let no_host = h
        .nova(
            &admin,
            "2.41",
            Method::POST,
            &path,
            Some(json!({"add_host": {"host": "nope"}})),
        )
        .await;
    assert_eq!(no_host.status, 404);
    let no_agg = h
        .nova(
            &admin,
            "2.41",
            Method::POST,
            "/os-aggregates/99/action",
            Some(json!({"add_host": {"host": "compute-02"}})),
        )
        .await;
    assert_eq!(no_agg.status, 404);
    let bad_id = h
        .nova(
            &admin,
            "2.41",
            Method::POST,
            "/os-aggregates/abc/action",
            Some(json!({"add_host": {"host": "compute-02"}})),
        )
        .await;
    assert_eq!(bad_id.status, 400);
    let member = h.token("demo", "secret", "demo").await;
    assert_eq!(
        h.nova(&member, "2.41", Method::GET, "/os-aggregates", None)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn migrations_filter_sort_page_and_show_owners() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let names = ["web-1", "app-1", "batch-1"];
    for name in names {
        assert_eq!(
            h.evacuate(&admin, "2.53", &h.id_of(name), json!({}))
                .await
                .status,
            200
        );
        h.sim.advance(1.0);
    }
    h.sim.advance(30.0);
    let a = h
        .nova(&admin, "2.59", Method::GET, "/os-migrations?limit=2", None)
        .await;
    let page = a.body["migrations"].as_array().unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(
        page[0]["instance_uuid"],
        h.id_of("batch-1").as_str(),
        "newest first"
    );
    assert!(page[0]["uuid"].is_string());
    assert!(page[0].get("user_id").is_none(), "owners from 2.80");
    let next = a.body["migrations_links"][0]["href"].as_str().unwrap();
    let rest = h
        .nova(
            &admin,
            "2.59",
            Method::GET,
            next.split("/compute/v2.1").nth(1).unwrap(),
            None,
        )
        .await;
    assert_eq!(rest.body["migrations"].as_array().unwrap().len(), 1);
    assert_eq!(
        rest.body["migrations"][0]["instance_uuid"],
        h.id_of("web-1").as_str()
    );
    let old = h
        .nova(&admin, "2.1", Method::GET, "/os-migrations", None)
        .await;
    assert_eq!(
        old.body["migrations"][0]["instance_uuid"],
        h.id_of("web-1").as_str(),
        "id order before 2.59"
    );
    assert!(old.body["migrations"][0].get("migration_type").is_none());
    let bad = h
        .nova(
            &admin,
            "2.59",
            Method::GET,
            "/os-migrations?marker=nope",
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    let owners = h
        .nova(
            &admin,
            "2.80",
            Method::GET,
            "/os-migrations?user_id=nobody",
            None,
        )
        .await;
    assert_eq!(owners.body["migrations"].as_array().unwrap().len(), 0);
    let by_host = h
        .nova(
            &admin,
            "2.80",
            Method::GET,
            "/os-migrations?host=compute-01&status=done&migration_type=evacuation",
            None,
        )
        .await;
    assert_eq!(by_host.body["migrations"].as_array().unwrap().len(), 3);
    assert!(by_host.body["migrations"][0]["project_id"].is_string());
    let reader = h.token("reader", "secret", "demo").await;
    assert_eq!(
        h.nova(&reader, "2.80", Method::GET, "/os-migrations", None)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn stop_start_lock_and_reset_state() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let web = h.id_of("web-1");
    let act = |body: serde_json::Value, token: String, version: &'static str| {
        let h = &h;
        let web = web.clone();
        async move {
            h.nova(
                &token,
                version,
                Method::POST,
                &format!("/servers/{web}/action"),
                Some(body),
            )
            .await
        }
    };
    assert_eq!(
        act(json!({"os-start": null}), admin.clone(), "2.1")
            .await
            .status,
        409,
        "not stopped"
    );
    let stopped = act(json!({"os-stop": null}), admin.clone(), "2.1").await;
    assert_eq!(stopped.status, 202);
    assert_eq!(
        (stopped.header("content-type"), stopped.text.as_str()),
        (Some("application/json"), ""),
        "an empty answer, typed JSON as Nova types it"
    );
    let s = h.server(&admin, "2.1", &web).await;
    assert_eq!(
        (s["status"].as_str(), s["OS-EXT-STS:task_state"].as_str()),
        (Some("ACTIVE"), Some("powering-off"))
    );
    assert_eq!(
        act(json!({"os-stop": null}), admin.clone(), "2.1")
            .await
            .status,
        409,
        "task in progress"
    );
    h.sim.advance(2.5);
    assert_eq!(h.server(&admin, "2.1", &web).await["status"], "SHUTOFF");
    assert_eq!(
        act(json!({"os-start": null}), admin.clone(), "2.1")
            .await
            .status,
        202
    );
    h.sim.advance(2.5);
    assert_eq!(h.server(&admin, "2.1", &web).await["status"], "ACTIVE");

    assert_eq!(
        act(
            json!({"lock": {"locked_reason": ""}}),
            admin.clone(),
            "2.73"
        )
        .await
        .status,
        400
    );
    assert_eq!(
        act(
            json!({"lock": {"locked_reason": "x", "other": 1}}),
            admin.clone(),
            "2.73"
        )
        .await
        .status,
        400
    );
    assert_eq!(
        act(
            json!({"lock": {"locked_reason": "ha"}}),
            admin.clone(),
            "2.73"
        )
        .await
        .status,
        202
    );
    let s = h.server(&admin, "2.73", &web).await;
    assert_eq!(
        (s["locked"].as_bool(), s["locked_reason"].as_str()),
        (Some(true), Some("ha"))
    );
    let member = h.token("demo", "secret", "demo").await;
    let a = act(json!({"os-stop": null}), member.clone(), "2.1").await;
    assert_eq!(a.status, 409, "locked for a non-admin");
    assert_eq!(
        act(json!({"unlock": null}), member.clone(), "2.1")
            .await
            .status,
        403,
        "an admin's lock"
    );
    let reader = h.token("reader", "secret", "demo").await;
    assert_eq!(
        act(json!({"lock": null}), reader.clone(), "2.1")
            .await
            .status,
        403
    );
    assert_eq!(
        act(json!({"unlock": null}), admin.clone(), "2.73")
            .await
            .status,
        202
    );
    assert_eq!(
        h.server(&admin, "2.73", &web).await["locked_reason"],
        serde_json::Value::Null
    );

    assert_eq!(
        act(
            json!({"os-resetState": {"state": "error"}}),
            member.clone(),
            "2.1"
        )
        .await
        .status,
        403
    );
    assert_eq!(
        act(
            json!({"os-resetState": {"state": "stopped"}}),
            admin.clone(),
            "2.1"
        )
        .await
        .status,
        400
    );
    assert_eq!(
        act(
            json!({"os-resetState": {"state": "error"}}),
            admin.clone(),
            "2.1"
        )
        .await
        .status,
        202
    );
    assert_eq!(h.server(&admin, "2.1", &web).await["status"], "ERROR");
    assert_eq!(
        act(json!({"dance": null}), admin.clone(), "2.1")
            .await
            .status,
        400
    );
    let actions = h
        .nova(
            &admin,
            "2.58",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions"),
            None,
        )
        .await;
    let names: Vec<&str> = actions.body["instanceActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    // A server the scenario starts with was built as Nova builds one: its
    // oldest action is `create`.
    assert_eq!(names, ["unlock", "lock", "start", "stop", "create"]);
    assert!(actions.body["instanceActions"][0]["updated_at"].is_string());
    // Nova's API locks and unlocks itself: one `api_<action>` event,
    // finished at once.
    for (i, event) in [(0, "api_unlock"), (1, "api_lock")] {
        let request_id = actions.body["instanceActions"][i]["request_id"]
            .as_str()
            .unwrap();
        let detail = h
            .nova(
                &admin,
                "2.84",
                Method::GET,
                &format!("/servers/{web}/os-instance-actions/{request_id}"),
                None,
            )
            .await;
        let events = &detail.body["instanceAction"]["events"];
        assert_eq!(events.as_array().unwrap().len(), 1, "{events}");
        assert_eq!(events[0]["event"], event);
        assert_eq!(events[0]["result"], "Success");
        assert!(events[0]["finish_time"].is_string(), "{events}");
    }
    let create = actions.body["instanceActions"][4]["request_id"]
        .as_str()
        .unwrap();
    let detail = h
        .nova(
            &admin,
            "2.84",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions/{create}"),
            None,
        )
        .await;
    let events = &detail.body["instanceAction"]["events"];
    assert_eq!(events[0]["event"], "compute__do_build_and_run_instance");
    assert_eq!(events[0]["host"], "compute-01");
    assert_eq!(events[0]["result"], "Success");
    let page = h
        .nova(
            &admin,
            "2.58",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions?limit=3"),
            None,
        )
        .await;
    assert_eq!(page.body["instanceActions"].as_array().unwrap().len(), 3);
    let next = page.body["links"][0]["href"]
        .as_str()
        .unwrap()
        .split("/compute/v2.1")
        .nth(1)
        .unwrap()
        .to_string();
    let rest = h.nova(&admin, "2.58", Method::GET, &next, None).await;
    assert_eq!(rest.body["instanceActions"][0]["action"], "stop");
    assert!(rest.body.get("links").is_none());
    let bad = h
        .nova(
            &admin,
            "2.58",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions?marker=req-nope"),
            None,
        )
        .await;
    assert_eq!(bad.status, 400);

    // a stop on a dead compute never finishes until the compute comes back
    h.sim.power_off("compute-02").unwrap();
    let own = h.id_of("own-1");
    assert_eq!(
        h.nova(
            &admin,
            "2.1",
            Method::POST,
            &format!("/servers/{own}/action"),
            Some(json!({"os-stop": null}))
        )
        .await
        .status,
        202
    );
    h.sim.advance(100.0);
    assert_eq!(
        h.server(&admin, "2.1", &own).await["OS-EXT-STS:task_state"],
        "powering-off"
    );
    h.sim.power_on("compute-02").unwrap();
    h.sim.advance(11.0);
    assert_eq!(h.server(&admin, "2.1", &own).await["status"], "SHUTOFF");
}

#[tokio::test]
async fn external_events_are_accepted_and_echoed() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let web = h.id_of("web-1");
    let body = json!({"events": [
        {"name": "network-changed", "server_uuid": web},
        {"name": "network-vif-plugged", "server_uuid": "00000000-0000-0000-0000-000000000000", "status": "failed"}]});
    let a = h
        .nova(
            &admin,
            "2.76",
            Method::POST,
            "/os-server-external-events",
            Some(body),
        )
        .await;
    assert_eq!(a.status, 207);
    assert_eq!(a.body["events"][0]["code"], 200);
    assert_eq!(a.body["events"][0]["status"], "completed");
    assert_eq!(a.body["events"][1]["code"], 404);
    let ok = h
        .nova(&admin, "2.76", Method::POST, "/os-server-external-events", Some(json!({"events": [{"name": "power-update", "server_uuid": web, "tag": "POWER_OFF"}]})))
        .await;
    assert_eq!(ok.status, 200);
    let too_old = h
        .nova(
            &admin,
            "2.75",
            Method::POST,
            "/os-server-external-events",
            Some(json!({"events": [{"name": "power-update", "server_uuid": web}]})),
        )
        .await;
    assert_eq!(too_old.status, 400);
    let member = h.token("demo", "secret", "demo").await;
    let denied = h
        .nova(
            &member,
            "2.76",
            Method::POST,
            "/os-server-external-events",
            Some(json!({"events": [{"name": "network-changed", "server_uuid": web}]})),
        )
        .await;
    assert_eq!(denied.status, 403);
}
