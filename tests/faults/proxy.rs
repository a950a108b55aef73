//! A TCP proxy on a free loopback port that forwards to a target port and can blackhole the
//! link. While blackholed, bytes are neither forwarded nor answered and new connections are
//! held, but every socket stays open: a network partition, not a closed socket.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

pub struct Proxy {
    pub port: u16,
    hole: watch::Sender<bool>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

/// Waits until the link is not blackholed.
async fn open(hole: &mut watch::Receiver<bool>) {
    let _ = hole.wait_for(|h| !*h).await;
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut hole: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        open(&mut hole).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Bytes read just as the partition began are held until it heals.
        open(&mut hole).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let (hole, rx) = watch::channel(false);
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let t = tasks.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut hole = rx.clone();
                let t2 = t.clone();
                let conn = tokio::spawn(async move {
                    open(&mut hole).await;
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    let a = tokio::spawn(pump(ri, wo, hole.clone()));
                    let b = tokio::spawn(pump(ro, wi, hole));
                    t2.lock()
                        .unwrap()
                        .extend([a.abort_handle(), b.abort_handle()]);
                });
                t.lock().unwrap().push(conn.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Self { port, hole, tasks }
    }

    /// Starts or ends the partition.
    pub fn blackhole(&self, on: bool) {
        let _ = self.hole.send(on);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}
