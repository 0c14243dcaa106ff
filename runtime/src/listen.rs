//! Accepting connections, every one within the process's
//! [`ConnectionBudget`] and with Nagle's algorithm off (what tonic does
//! for the sockets it binds itself: otherwise a response written in more
//! than one segment waits for the client's delayed ACK, some 40 ms a
//! call): for the gRPC servers ([`ConnectionBudget::incoming`]), which
//! bind their listeners themselves (to report the port they got, port 0
//! included), and for axum's, in plaintext ([`PlainListener`]) or over TLS
//! ([`TlsListener`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::connections::{ConnectionBudget, Tracked};

/// How long a client may take over its TLS handshake (within its
/// `connections.first_request_timeout` too).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An axum listener in plaintext: the budget's accepted connections.
pub struct PlainListener {
    local_addr: SocketAddr,
    accepted: mpsc::Receiver<(Tracked<TcpStream>, SocketAddr)>,
}

impl PlainListener {
    pub fn new(listener: TcpListener, budget: &ConnectionBudget) -> std::io::Result<Self> {
        Ok(Self {
            local_addr: listener.local_addr()?,
            accepted: budget.accept(listener),
        })
    }
}

impl axum::serve::Listener for PlainListener {
    type Io = Tracked<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accepting task ends only once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// An axum listener that serves TLS: the budget's connections, their
/// handshakes run in tasks of their own, so that a slow or plaintext
/// client delays nobody; a failed handshake is logged (debug) and dropped.
/// Accepting stops when the listener is dropped.
pub struct TlsListener {
    local_addr: SocketAddr,
    handshaken: mpsc::Receiver<(TlsStream<Tracked<TcpStream>>, SocketAddr)>,
}

impl TlsListener {
    pub fn new(
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
        budget: &ConnectionBudget,
    ) -> std::io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (done, handshaken) = mpsc::channel(64);
        let accepted = budget.accept(listener);
        tokio::spawn(handshake(accepted, TlsAcceptor::from(config), done));
        Ok(Self {
            local_addr,
            handshaken,
        })
    }
}

async fn handshake(
    mut accepted: mpsc::Receiver<(Tracked<TcpStream>, SocketAddr)>,
    acceptor: TlsAcceptor,
    done: mpsc::Sender<(TlsStream<Tracked<TcpStream>>, SocketAddr)>,
) {
    loop {
        let next = tokio::select! {
            () = done.closed() => return,
            next = accepted.recv() => next,
        };
        let Some((tcp, peer)) = next else { return };
        let acceptor = acceptor.clone();
        let done = done.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    let _ = done.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
                Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Tracked<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accepting task ends only once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
