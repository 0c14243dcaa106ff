//! Booting and deleting servers, flavors and the image proxy: what
//! Masakari's functional suite does on a devstack before it reports a
//! failure (list images and flavors, boot a server with `networks: none` at
//! 2.37, wait for ACTIVE, stop it, delete it).

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Harness, manual_settings, start, two_hosts};

/// The simulator's one image, through Nova's proxy.
async fn image_id(h: &Harness, token: &str) -> String {
    let images = h
        .nova(token, "2.1", Method::GET, "/images/detail", None)
        .await;
    assert_eq!(images.status, 200, "{}", images.text);
    let image = &images.body["images"][0];
    assert_eq!(image["status"], "ACTIVE");
    assert_eq!(image["name"], "cirros-0.6.3-x86_64-disk");
    image["id"].as_str().unwrap().to_owned()
}

fn boot_body(image: &str, flavor: &str) -> Value {
    json!({"server": {
        "name": "masakari_test",
        "imageRef": image,
        "flavorRef": flavor,
        "networks": "none",
        "metadata": {"HA_Enabled": "True"},
    }})
}

#[tokio::test]
async fn flavors_and_images_are_listed_as_nova_does() {
    let h = start(two_hosts(manual_settings())).await;
    let token = h.token("demo", "secret", "demo").await;
    let flavors = h
        .nova(&token, "2.61", Method::GET, "/flavors/detail", None)
        .await;
    assert_eq!(flavors.status, 200, "{}", flavors.text);
    let tiny = &flavors.body["flavors"][0];
    assert_eq!(tiny["name"], "m1.tiny");
    assert_eq!(tiny["swap"], "");
    assert_eq!(tiny["extra_specs"], json!({}));
    let id = tiny["id"].as_str().unwrap();
    let shown = h
        .nova(&token, "2.75", Method::GET, &format!("/flavors/{id}"), None)
        .await;
    assert_eq!(shown.body["flavor"]["swap"], 0);
    let summary = h.nova(&token, "2.1", Method::GET, "/flavors", None).await;
    assert!(summary.body["flavors"][0].get("ram").is_none());
    let missing = h
        .nova(&token, "2.1", Method::GET, "/flavors/nope", None)
        .await;
    assert_eq!(missing.status, 404);

    let image = image_id(&h, &token).await;
    let one = h
        .nova(
            &token,
            "2.1",
            Method::GET,
            &format!("/images/{image}"),
            None,
        )
        .await;
    assert_eq!(one.body["image"]["id"], image.as_str());
    // Nova removed its image proxy at 2.36.
    let removed = h.nova(&token, "2.36", Method::GET, "/images", None).await;
    assert_eq!(removed.status, 404);
}

#[tokio::test]
async fn a_boot_body_is_checked_as_novas_schema() {
    let h = start(two_hosts(manual_settings())).await;
    let token = h.token("demo", "secret", "demo").await;
    let image = image_id(&h, &token).await;

    // From 2.37 `networks` is required.
    let mut without = boot_body(&image, "1");
    without["server"]
        .as_object_mut()
        .unwrap()
        .remove("networks");
    let refused = h
        .nova(&token, "2.37", Method::POST, "/servers", Some(without))
        .await;
    assert_eq!(refused.status, 400);
    assert!(refused.text.contains("'networks' is a required property"));
    let bad_flavor = h
        .nova(
            &token,
            "2.37",
            Method::POST,
            "/servers",
            Some(boot_body(&image, "99")),
        )
        .await;
    assert!(bad_flavor.text.contains("Invalid flavorRef provided."));
    let listed = boot_body(&image, "1");
    let mut with_network = listed.clone();
    with_network["server"]["networks"] = json!([{"uuid": "f00d"}]);
    let no_network = h
        .nova(&token, "2.37", Method::POST, "/servers", Some(with_network))
        .await;
    assert!(no_network.text.contains("Network f00d could not be found."));
}

#[tokio::test]
async fn a_booted_server_builds_runs_stops_and_is_deleted() {
    let h = start(two_hosts(manual_settings())).await;
    let token = h.token("demo", "secret", "demo").await;
    let image = image_id(&h, &token).await;

    let created = h
        .nova(
            &token,
            "2.37",
            Method::POST,
            "/servers",
            Some(boot_body(&image, "1")),
        )
        .await;
    assert_eq!(created.status, 202, "{}", created.text);
    let id = created.body["server"]["id"].as_str().unwrap().to_owned();
    assert!(created.header("location").unwrap().ends_with(&id));
    assert!(created.body["server"]["adminPass"].is_string());

    let building = h.server(&token, "2.37", &id).await;
    assert_eq!(building["status"], "BUILD");
    assert_eq!(building["OS-EXT-STS:task_state"], "scheduling");
    assert_eq!(building["metadata"]["HA_Enabled"], "True");
    // schedule, claim, spawn and finish: 6 simulated seconds.
    h.sim.advance(6.5);
    let admin = h.admin().await;
    let active = h.server(&admin, "2.37", &id).await;
    assert_eq!(active["status"], "ACTIVE", "{active:#}");
    assert!(active["OS-EXT-SRV-ATTR:host"].is_string());
    let actions = h
        .nova(
            &admin,
            "2.37",
            Method::GET,
            &format!("/servers/{id}/os-instance-actions"),
            None,
        )
        .await;
    assert_eq!(actions.body["instanceActions"][0]["action"], "create");

    let stop = h
        .nova(
            &admin,
            "2.37",
            Method::POST,
            &format!("/servers/{id}/action"),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(stop.status, 202, "{}", stop.text);
    h.sim.advance(2.5);
    assert_eq!(h.server(&admin, "2.37", &id).await["status"], "SHUTOFF");

    let deleted = h
        .nova(
            &token,
            "2.37",
            Method::DELETE,
            &format!("/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    let gone = h
        .nova(&token, "2.37", Method::GET, &format!("/servers/{id}"), None)
        .await;
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn a_boot_with_no_valid_host_ends_in_error() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let image = image_id(&h, &admin).await;
    for host in ["compute-01", "compute-02", "compute-03"] {
        h.fail_host(&admin, host).await;
    }
    let created = h
        .nova(
            &admin,
            "2.37",
            Method::POST,
            "/servers",
            Some(boot_body(&image, "1")),
        )
        .await;
    assert_eq!(created.status, 202);
    let id = created.body["server"]["id"].as_str().unwrap().to_owned();
    h.sim.advance(6.5);
    let server = h.server(&admin, "2.37", &id).await;
    assert_eq!(server["status"], "ERROR", "{server:#}");
    assert_eq!(server["fault"]["message"], "No valid host was found. ");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], Value::Null);
}
