//! The REST listener over TLS, with the gRPC API's `[tls]` settings and a
//! CA generated for the test: https works for a client trusting the CA,
//! plain HTTP does not, and with a client CA only callers with a
//! certificate it signed get through.

use std::net::SocketAddr;
use std::path::Path;

use instanceha_testkit::pki::Pki;

use crate::backends::Backend;
use crate::helpers::spawn_app_with;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A client trusting the test CA, reaching `localhost` at `addr`, with
/// the client certificate if `identity`.
fn https_client(pki: &Pki, addr: SocketAddr, identity: bool) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&read(&pki.path("ca.pem"))).unwrap())
        .resolve("localhost", addr);
    if identity {
        let mut pem = read(&pki.path("client.pem"));
        pem.extend(read(&pki.path("client.key")));
        client = client.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    client.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_api_serves_tls_and_refuses_plain_http() {
    let pki = Pki::new("masakari-monitors");
    let Some(app) = spawn_app_with(Backend::Sqlite, |s| s.tls = pki.server(false)).await else {
        return;
    };
    let addr = app.rest.expect("the REST API is on");
    let url = format!("https://localhost:{}/v1/segments", addr.port());
    let reply = https_client(&pki, addr, false)
        .get(&url)
        .send()
        .await
        .expect("an https call");
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.version(), reqwest::Version::HTTP_2, "h2 by ALPN");
    let body: serde_json::Value = reply.json().await.unwrap();
    assert!(body["segments"].is_array(), "{body}");

    // Plain HTTP gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{addr}/v1/segments"))
        .timeout(std::time::Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // Nor does a client that does not trust the CA.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let untrusting = reqwest::Client::builder()
        .resolve("localhost", addr)
        .build()
        .unwrap()
        .get(&url)
        .send()
        .await;
    assert!(untrusting.is_err(), "{untrusting:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_api_with_a_client_ca_needs_a_client_certificate() {
    let pki = Pki::new("masakari-monitors");
    let Some(app) = spawn_app_with(Backend::Sqlite, |s| s.tls = pki.server(true)).await else {
        return;
    };
    let addr = app.rest.expect("the REST API is on");
    let url = format!("https://localhost:{}/healthcheck", addr.port());
    let reply = https_client(&pki, addr, true)
        .get(&url)
        .send()
        .await
        .expect("an https call with a client certificate");
    assert_eq!(reply.status(), 200);
    let refused = https_client(&pki, addr, false).get(&url).send().await;
    assert!(
        refused.is_err(),
        "answered without a client certificate: {refused:?}"
    );
}
