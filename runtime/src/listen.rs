//! Accepting connections for the gRPC servers, which bind their listeners
//! themselves (to report the port they got, port 0 included).

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

/// The accepted connections, with Nagle's algorithm off (what tonic does
/// for the sockets it binds itself): otherwise a response written in more
/// than one segment waits for the client's delayed ACK, some 40 ms a call.
pub fn without_nagle(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}
