//! A connection counted in the process's budget: [`Tracked`], closed (its
//! reads fail) at its [`Deadline`] (no request within
//! `connections.first_request_timeout`, then idle for
//! `connections.idle_timeout`), counted out when dropped.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::ConnectionBudget;

/// Counts a connection out when it is dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    pub(super) budget: ConnectionBudget,
    pub(super) peer: SocketAddr,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let inner = &self.budget.inner;
        inner.served.lock().expect("served").remove(&self.peer);
        inner.counts.lock().expect("counts").release(self.peer.ip());
    }
}

/// When a connection is closed for saying nothing: before its first
/// request, at `accepted + first_request_timeout`; after it, at its last
/// read plus `idle_timeout`.
#[derive(Debug)]
pub(super) struct Deadline {
    accepted: Instant,
    last_read: Instant,
    first_request_timeout: Duration,
    idle_timeout: Duration,
    served: Arc<AtomicBool>,
}

impl Deadline {
    pub(super) fn new(
        now: Instant,
        first_request_timeout: Duration,
        idle_timeout: Duration,
        served: Arc<AtomicBool>,
    ) -> Self {
        Self {
            accepted: now,
            last_read: now,
            first_request_timeout,
            idle_timeout,
            served,
        }
    }

    /// The instant the connection is closed unless it reads before.
    fn next(&self) -> Instant {
        if self.served.load(Ordering::Relaxed) {
            self.last_read + self.idle_timeout
        } else {
            self.accepted + self.first_request_timeout
        }
    }

    fn why(&self) -> &'static str {
        if self.served.load(Ordering::Relaxed) {
            "idle for connections.idle_timeout"
        } else {
            "no request within connections.first_request_timeout"
        }
    }
}

/// A connection counted in the budget: closed (its reads fail) at its
/// `Deadline`, counted out when dropped.
#[derive(Debug)]
pub struct Tracked<IO> {
    pub(super) io: IO,
    pub(super) deadline: Deadline,
    pub(super) sleep: Option<Pin<Box<Sleep>>>,
    pub(super) ticket: Ticket,
}

impl<IO> Tracked<IO> {
    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.ticket.peer
    }

    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.deadline.last_read = Instant::now();
                }
                return Poll::Ready(result);
            }
            Poll::Pending => {}
        }
        loop {
            let due = this.deadline.next();
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // The deadline may have moved meanwhile (a request served):
                // look again.
                Poll::Ready(()) if this.deadline.next() > due => continue,
                Poll::Ready(()) => {
                    tracing::debug!(peer = %this.ticket.peer, reason = this.deadline.why(), "connection closed");
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        this.deadline.why(),
                    )));
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// tonic reads the peer's address from the stream: the same
/// `TcpConnectInfo` a plain `TcpStream` gives, so the handlers need not
/// know.
impl tonic::transport::server::Connected for Tracked<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::super::ConnectionSettings;
    use super::*;

    #[test]
    fn the_deadline_is_the_first_request_then_idleness() {
        let now = Instant::now();
        let served = Arc::new(AtomicBool::new(false));
        let mut deadline = Deadline::new(
            now,
            Duration::from_secs(10),
            Duration::from_secs(300),
            served.clone(),
        );
        assert_eq!(deadline.next(), now + Duration::from_secs(10));
        // Bytes without a request do not move it (a dripped preface).
        deadline.last_read = now + Duration::from_secs(9);
        assert_eq!(deadline.next(), now + Duration::from_secs(10));
        served.store(true, Ordering::Relaxed);
        assert_eq!(deadline.next(), now + Duration::from_secs(309));
        assert!(deadline.why().contains("idle_timeout"));
    }

    async fn pair(budget: &ConnectionBudget) -> (Tracked<TcpStream>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, peer) = listener.accept().await.unwrap();
        (budget.admit(tcp, peer).unwrap(), client)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_and_counted_out() {
        use tokio::io::AsyncReadExt as _;
        let budget = ConnectionBudget::new(&ConnectionSettings::default(), 1 << 20);
        let (mut tracked, _client) = pair(&budget).await;
        assert_eq!(budget.open(), 1);
        let mut buf = [0u8; 16];
        let err = tracked.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("first_request_timeout"), "{err}");
        drop(tracked);
        assert_eq!(budget.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_served_connection_lives_while_it_talks() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let budget = ConnectionBudget::new(&ConnectionSettings::default(), 1 << 20);
        let (mut tracked, mut client) = pair(&budget).await;
        budget.served(tracked.peer());
        let mut buf = [0u8; 16];
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(200)).await;
            client.write_all(b"ping").await.unwrap();
            assert_eq!(tracked.read(&mut buf).await.unwrap(), 4);
        }
        let err = tracked.read(&mut buf).await.unwrap_err();
        assert!(err.to_string().contains("idle_timeout"), "{err}");
    }
}
