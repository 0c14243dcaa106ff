//! A TCP proxy between the API and the engine: it can cut every
//! connection and refuse new ones for a while.

use super::*;

pub(super) struct Proxy {
    pub(super) port: u16,
    shared: Arc<ProxyShared>,
}

pub(super) struct ProxyShared {
    target: SocketAddr,
    cut: AtomicBool,
    stop: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    pub(super) fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the proxy binds");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(ProxyShared {
            target,
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if accepting.cut.load(Ordering::SeqCst) {
                    // Refused: closed at once.
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(accepting.target) else {
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = accepting.open.lock().unwrap();
                    open.extend(client.try_clone().ok());
                    open.extend(server.try_clone().ok());
                }
                for (mut from, mut to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, shared }
    }

    /// Closes every connection and refuses new ones.
    pub(super) fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for stream in self.shared.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    pub(super) fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
