//! [`FlakyProxy`]: a broker a test can take away from one client, or whose
//! network can die under it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A TCP proxy in front of a real broker that the test can switch off and
/// on: switching off cuts every live connection and refuses new ones (they
/// are closed as soon as accepted). This is how tests take a broker away
/// from one client without stopping the broker other tests share.
///
/// It can also stall the live connections ([`FlakyProxy::stall_live`]):
/// they stay open and carry nothing, as a connection whose network died
/// looks to both ends until a timeout or missed heartbeats say so, while
/// new connections are served.
pub struct FlakyProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    hang: Arc<AtomicBool>,
    cut: Arc<Mutex<CancellationToken>>,
    stall: Arc<Mutex<CancellationToken>>,
    accept: JoinHandle<()>,
}

impl FlakyProxy {
    /// Start a proxy to `upstream` (host:port), up or down.
    pub async fn start(upstream: &str, up: bool) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(AtomicBool::new(up));
        let hang = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(Mutex::new(CancellationToken::new()));
        let stall = Arc::new(Mutex::new(CancellationToken::new()));
        let upstream = upstream.to_owned();
        let (state_in, hang_in, cut_in, stall_in) =
            (state.clone(), hang.clone(), cut.clone(), stall.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !state_in.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let token = cut_in.lock().unwrap().clone();
                if hang_in.load(Ordering::SeqCst) {
                    // Held open, never read or written, until cut.
                    tokio::spawn(async move {
                        token.cancelled().await;
                        drop(client);
                    });
                    continue;
                }
                let stalled = stall_in.lock().unwrap().clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    // Biased: once stalled, not one more byte is copied, even
                    // with some ready to go.
                    let stall = tokio::select! {
                        biased;
                        _ = stalled.cancelled() => true,
                        _ = token.cancelled() => false,
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                    };
                    if stall {
                        // Both sockets stay open and nothing is copied until
                        // the proxy is switched off or dropped.
                        token.cancelled().await;
                    }
                });
            }
        });
        Ok(FlakyProxy {
            addr,
            up: state,
            hang,
            cut,
            stall,
            accept,
        })
    }

    /// Switch the proxy on or off.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            let mut cut = self.cut.lock().unwrap();
            cut.cancel();
            *cut = CancellationToken::new();
        }
    }

    /// Take every new connection and carry nothing on it, never answering
    /// (until the proxy is switched off or dropped): with
    /// [`FlakyProxy::stall_live`], a network that died under every open
    /// connection while a new one hangs in its handshake too.
    pub fn hang_new(&self) {
        self.hang.store(true, Ordering::SeqCst);
    }

    /// Serve new connections again after [`FlakyProxy::hang_new`] (those
    /// already taken stay hung).
    pub fn serve_new(&self) {
        self.hang.store(false, Ordering::SeqCst);
    }

    /// Stall every live connection: each stays open and carries nothing
    /// more, in either direction. Connections made afterwards are served.
    pub fn stall_live(&self) {
        let mut stall = self.stall.lock().unwrap();
        stall.cancel();
        *stall = CancellationToken::new();
    }
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut.lock().unwrap().cancel();
    }
}
