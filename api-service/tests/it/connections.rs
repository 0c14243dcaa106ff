//! Connections as a budgeted resource, on the binary as it ships: a
//! stranger holding 2,000 idle connections from one address, with the
//! process's open-file limit set low, leaves the health check and an
//! admin's call answering; its silent connections are then closed. And
//! the files the binary makes are private whatever its umask.

use std::net::SocketAddr;
use std::time::Duration;

use instanceha_proto::v1 as pb;
use tokio::net::{TcpSocket, TcpStream};

use crate::process::ApiProcess;

/// `count` connections to `to` from 127.0.0.2 (another loopback address
/// than the admin's), saying nothing.
async fn stranger(to: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for i in 0..count {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        match tokio::time::timeout(Duration::from_secs(10), socket.connect(to)).await {
            Ok(Ok(stream)) => held.push(stream),
            other => panic!("connection {i} of the stranger: {other:?}"),
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_idle_connections_leave_health_and_admin_answering() {
    // This process holds the stranger's sockets.
    let ours = instanceha_runtime::connections::raise_open_file_limit().unwrap();
    assert!(
        ours >= 3000,
        "the test needs 3,000 files, it may open {ours}"
    );
    let api = ApiProcess::start_with_files(
        "[rest]\nenabled = true\nlisten = \"127.0.0.1:0\"\n[connections]\nfirst_request_timeout = \"2s\"\n",
        512,
    )
    .await;
    let rest = api.rest_addr().await;
    let mut held = stranger(api.addr, 2000).await;
    held.extend(stranger(rest, 500).await);

    let within = Duration::from_secs(10);
    let channel = tokio::time::timeout(within, api.channel())
        .await
        .expect("a connection while the stranger holds his");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = tokio::time::timeout(
        within,
        health.check(tonic_health::pb::HealthCheckRequest::default()),
    )
    .await
    .expect("the health check answers")
    .unwrap()
    .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let mut segments = pb::segment_service_client::SegmentServiceClient::new(channel);
    tokio::time::timeout(
        within,
        segments.list_segments(pb::ListSegmentsRequest::default()),
    )
    .await
    .expect("an admin's call answers")
    .expect("and succeeds");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let reply = tokio::time::timeout(
        within,
        client.get(format!("http://{rest}/healthcheck")).send(),
    )
    .await
    .expect("/healthcheck answers")
    .unwrap();
    assert_eq!(reply.status(), 200);
    assert!(
        api.open_files() < 512,
        "{} files open at a limit of 512",
        api.open_files()
    );

    // The stranger's connections never sent a request: closed at their
    // deadline, their files given back.
    let every = Duration::from_millis(100);
    instanceha_testkit::eventually(
        "fewer than 100 open files",
        Duration::from_secs(30),
        every,
        || async {
            match api.open_files() {
                open if open < 100 => Ok(()),
                open => Err(format!("{open} files still open")),
            }
        },
    )
    .await;
    drop(held);
}

/// The SQLite database and its WAL and shared-memory files, made by the
/// binary under a umask that takes nothing away: 0600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_files_are_private_whatever_the_umask() {
    let api = ApiProcess::start_with_open_umask("").await;
    let mut segments = pb::segment_service_client::SegmentServiceClient::new(api.channel().await);
    segments
        .list_segments(pb::ListSegmentsRequest::default())
        .await
        .unwrap();
    for name in ["api.db", "api.db-wal", "api.db-shm"] {
        let path = api.dir().join(name);
        assert_eq!(
            instanceha_runtime::private::mode_of(&path).unwrap(),
            0o600,
            "{name}"
        );
    }
}
