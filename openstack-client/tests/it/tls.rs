//! A cloud behind TLS from a private CA, as `clouds.yaml` describes it:
//! the client refuses the unknown CA and says so, trusts it through
//! `cacert` or `OS_CACERT`, takes `verify: false` with a warning, and shows
//! a client certificate (`cert`, `key`) to a cloud that asks for one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openstack_client::clouds::{CloudEntry, load_cloud_from_env};
use openstack_client::retry::RetryPolicy;
use openstack_client::tls::TlsSettings;
use openstack_client::{ClientSettings, Error, OpenStack};
use openstack_sim::scenario::HostSpec;
use openstack_sim::{Scenario, Sim};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA made for the test, and certificates it signed, as PEM files.
struct PrivateCa {
    dir: tempfile::TempDir,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca: CertificateDer<'static>,
}

impl PrivateCa {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "a site's private CA");
        let ca = params.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Self {
            dir,
            issuer: rcgen::Issuer::new(params, key),
            ca: ca.der().clone(),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A certificate for `name` (`name.pem`, `name.key`), and its DER.
    fn sign(&self, name: &str, san: &str) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![san.to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, san);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}.key")), key.serialize_pem()).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (cert.der().clone(), der)
    }

    /// The simulator's TLS: a certificate for 127.0.0.1; with
    /// `client_auth`, clients must show a certificate this CA signed.
    fn server(&self, client_auth: bool) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.sign("server", "127.0.0.1");
        let builder = rustls::ServerConfig::builder();
        let builder = if client_auth {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca.clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(builder.with_single_cert(vec![cert], key).unwrap())
    }
}

async fn sim_behind_tls(ca: &PrivateCa, client_auth: bool) -> Sim {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scenario = Scenario::builder()
        .seed(1)
        .host(HostSpec::new("compute-01"))
        .build()
        .unwrap();
    Sim::start_tls(
        scenario,
        "127.0.0.1:0".parse().unwrap(),
        ca.server(client_auth),
    )
    .await
    .unwrap()
}

/// A `clouds.yaml` with cloud `private` (the simulator's admin) and
/// `extra` under it; the environment that finds it.
fn clouds_yaml(dir: &Path, sim: &Sim, extra: &str) -> BTreeMap<String, String> {
    let path = dir.join("clouds.yaml");
    let mut file = std::fs::File::create(&path).unwrap();
    write!(
        file,
        "clouds:\n  private:\n    auth_type: password\n    auth:\n      auth_url: {}\n      \
         username: admin\n      password: secret\n      project_name: admin\n      \
         user_domain_name: Default\n      project_domain_name: Default\n    \
         region_name: RegionOne\n    interface: public\n{extra}",
        sim.auth_url()
    )
    .unwrap();
    BTreeMap::from([(
        "OS_CLIENT_CONFIG_FILE".to_owned(),
        path.display().to_string(),
    )])
}

/// Logs in and finds Nova as the engine does at start, with the cloud's
/// TLS and then `env`'s.
async fn check(cloud: CloudEntry, env: &BTreeMap<String, String>) -> Result<String, Error> {
    let settings = ClientSettings {
        interfaces: vec!["public".to_owned()],
        tls: cloud.tls.clone().or(TlsSettings::from_env(env)),
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            ..RetryPolicy::default()
        },
        ..ClientSettings::default()
    };
    let client = OpenStack::new(cloud.auth.credentials().unwrap(), None, settings)?;
    let (compute, _) = client.check().await?;
    Ok(compute.url)
}

#[tokio::test]
async fn a_private_ca_is_refused_until_clouds_yaml_or_os_cacert_names_it() {
    let ca = PrivateCa::new();
    let sim = sim_behind_tls(&ca, false).await;
    assert!(sim.auth_url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();

    let env = clouds_yaml(dir.path(), &sim, "");
    let err = check(load_cloud_from_env("private", &env).unwrap(), &env)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(err.contains("cacert in clouds.yaml or OS_CACERT"), "{err}");
    assert!(err.contains(&sim.auth_url()), "{err}");

    let with_cacert = format!("    cacert: {}\n", ca.path("ca.pem").display());
    let env = clouds_yaml(dir.path(), &sim, &with_cacert);
    let compute = check(load_cloud_from_env("private", &env).unwrap(), &env)
        .await
        .unwrap();
    assert_eq!(compute, sim.compute_url());

    let mut env = clouds_yaml(dir.path(), &sim, "");
    env.insert("OS_CACERT".into(), ca.path("ca.pem").display().to_string());
    let compute = check(load_cloud_from_env("private", &env).unwrap(), &env)
        .await
        .unwrap();
    assert!(compute.starts_with("https://"), "{compute}");
}

/// Log lines written while the guard lives (this thread's).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn verify_false_logs_in_and_warns() {
    let ca = PrivateCa::new();
    let sim = sim_behind_tls(&ca, false).await;
    let dir = tempfile::tempdir().unwrap();
    let env = clouds_yaml(dir.path(), &sim, "    verify: false\n");
    let cloud = load_cloud_from_env("private", &env).unwrap();
    assert!(cloud.tls.insecure());

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let compute = check(cloud, &env).await.unwrap();
    drop(guard);
    assert_eq!(compute, sim.compute_url());
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("certificate verification is OFF"),
        "{logs}"
    );
}

#[tokio::test]
async fn a_client_certificate_is_shown_when_the_cloud_asks() {
    let ca = PrivateCa::new();
    let sim = sim_behind_tls(&ca, true).await;
    ca.sign("client", "instanceha-engine");
    let dir = tempfile::tempdir().unwrap();
    let cacert = format!("    cacert: {}\n", ca.path("ca.pem").display());

    let env = clouds_yaml(dir.path(), &sim, &cacert);
    let err = check(load_cloud_from_env("private", &env).unwrap(), &env)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("login as user \"admin\" failed"),
        "{err}"
    );

    let with_cert = format!(
        "{cacert}    cert: {}\n    key: {}\n",
        ca.path("client.pem").display(),
        ca.path("client.key").display()
    );
    let env = clouds_yaml(dir.path(), &sim, &with_cert);
    let compute = check(load_cloud_from_env("private", &env).unwrap(), &env)
        .await
        .unwrap();
    assert_eq!(compute, sim.compute_url());
}
