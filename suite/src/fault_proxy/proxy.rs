//! An in-process TCP fault proxy between a component and its broker, with the faults
//! people know from Toxiproxy: cut (close and refuse), black hole (hold every byte),
//! latency with jitter, reset peers, bandwidth limit. It works whatever provisioned
//! the broker, since the component simply connects to the proxy's loopback port; for
//! protocols whose clients connect where the broker tells them (Kafka), it rewrites
//! what the broker advertises so it stays in the path (see [`Wire`]).

use super::wire::{AdvertisedAddress, Wire, MAX_KAFKA_FRAME};
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NetworkFault {
    /// Forwards everything at once.
    Pass,
    /// Closes every connection with a reset and refuses new ones.
    Cut,
    /// Keeps connections open and forwards nothing (bytes wait, as on a link that
    /// drops every packet, and flow once the fault ends).
    BlackHole,
    /// Delays each chunk by `base` plus up to `jitter`, in order.
    Latency { base: Duration, jitter: Duration },
    /// Forwards at most this many bytes per second in each direction.
    Bandwidth { bytes_per_second: u64 },
}

impl NetworkFault {
    /// A short description for the history and the timeline.
    pub fn describe(&self) -> String {
        match self {
            NetworkFault::Pass => "network restored".into(),
            NetworkFault::Cut => "network cut (connections reset, new ones refused)".into(),
            NetworkFault::BlackHole => "network black hole (nothing forwarded)".into(),
            NetworkFault::Latency { base, jitter } => {
                format!("network latency {base:?} + up to {jitter:?} jitter")
            }
            NetworkFault::Bandwidth { bytes_per_second } => {
                format!("bandwidth limited to {bytes_per_second} B/s")
            }
        }
    }
}

/// A running proxy; dropping it closes the listener and every connection.
pub struct FaultProxy {
    address: SocketAddr,
    upstream: String,
    fault: watch::Sender<NetworkFault>,
    /// Bumped to reset every open connection.
    generation: watch::Sender<u64>,
    connections: Arc<AtomicU64>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards bytes to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        Self::start_with(upstream, Wire::Opaque).await
    }

    /// Listens on a free loopback port and forwards to `upstream` (`host:port`),
    /// relaying `wire`'s way.
    pub async fn start_with(upstream: &str, wire: Wire) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let rewrite = match wire {
            Wire::Opaque => None,
            Wire::Kafka => Some(
                AdvertisedAddress::new(upstream, &address.to_string())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            ),
        };
        let (fault, _) = watch::channel(NetworkFault::Pass);
        let (generation, _) = watch::channel(0u64);
        let connections = Arc::new(AtomicU64::new(0));
        let acceptor = tokio::spawn(accept(
            listener,
            upstream.to_string(),
            rewrite,
            fault.subscribe(),
            generation.clone(),
            connections.clone(),
        ));
        Ok(FaultProxy {
            address,
            upstream: upstream.to_string(),
            fault,
            generation,
            connections,
            acceptor,
        })
    }

    /// `127.0.0.1:port`, what the component connects to.
    pub fn endpoint(&self) -> String {
        self.address.to_string()
    }

    /// Where it forwards to.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// Applies `fault` from now on; a cut also resets every open connection.
    pub fn set(&self, fault: NetworkFault) {
        if fault == NetworkFault::Cut {
            self.reset_peers();
        }
        self.fault.send_replace(fault);
    }

    /// The fault in force.
    pub fn current(&self) -> NetworkFault {
        *self.fault.borrow()
    }

    /// Resets every open connection once (new connections pass as the fault says).
    pub fn reset_peers(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}

async fn accept(
    listener: TcpListener,
    upstream: String,
    rewrite: Option<AdvertisedAddress>,
    fault: watch::Receiver<NetworkFault>,
    generation: watch::Sender<u64>,
    connections: Arc<AtomicU64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        if *fault.borrow() == NetworkFault::Cut {
            reset(client);
            continue;
        }
        connections.fetch_add(1, Ordering::SeqCst);
        let upstream = upstream.clone();
        let fault = fault.clone();
        let generation = generation.subscribe();
        let relay = match &rewrite {
            None => Relay::Opaque,
            Some(rewrite) => Relay::Kafka(Arc::new(rewrite.for_connection())),
        };
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                reset(client);
                return;
            };
            let _ = server.set_nodelay(true);
            connect(client, server, relay, fault, generation).await;
        });
    }
}

/// Closes a connection with a reset (zero linger), as a cut link or a crashed peer
/// would.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// How one connection's bytes are relayed.
#[derive(Clone)]
enum Relay {
    Opaque,
    /// Kafka frames; the rewrite is shared by both directions of the connection.
    Kafka(Arc<AdvertisedAddress>),
}

/// Which way a pump copies.
#[derive(Clone, Copy)]
enum Direction {
    ToBroker,
    ToClient,
}

impl Relay {
    /// Reads the next unit to forward into `buffer`: a chunk, or a whole Kafka frame
    /// (size prefix included). `None` at the end of the stream or on an error.
    async fn read(
        &self,
        from: &mut tokio::net::tcp::OwnedReadHalf,
        buffer: &mut Vec<u8>,
    ) -> Option<usize> {
        match self {
            Relay::Opaque => {
                buffer.resize(16 * 1024, 0);
                match from.read(buffer).await {
                    Ok(0) | Err(_) => None,
                    Ok(n) => Some(n),
                }
            }
            Relay::Kafka(_) => {
                let mut prefix = [0u8; 4];
                from.read_exact(&mut prefix).await.ok()?;
                let size = usize::try_from(i32::from_be_bytes(prefix))
                    .ok()
                    .filter(|size| *size <= MAX_KAFKA_FRAME)?;
                buffer.resize(4 + size, 0);
                buffer[..4].copy_from_slice(&prefix);
                from.read_exact(&mut buffer[4..]).await.ok()?;
                Some(4 + size)
            }
        }
    }

    /// What the protocol needs done to a unit before it is forwarded.
    fn inspect(&self, direction: Direction, unit: &mut [u8]) {
        if let Relay::Kafka(rewrite) = self {
            match direction {
                Direction::ToBroker => rewrite.request(unit),
                Direction::ToClient => {
                    rewrite.response(unit);
                }
            }
        }
    }
}

async fn connect(
    client: TcpStream,
    server: TcpStream,
    relay: Relay,
    fault: watch::Receiver<NetworkFault>,
    mut generation: watch::Receiver<u64>,
) {
    let born = *generation.borrow_and_update();
    // A reset (cut, reset peers, proxy dropped) closes both sides with RST.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        relay.clone(),
        Direction::ToBroker,
        fault.clone(),
    );
    let down = pump(server_read, client_write, relay, Direction::ToClient, fault);
    let reset_now = async {
        let _ = generation.wait_for(|g| *g != born).await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = reset_now => {}
    }
    // Whatever ended first, every half is dropped here, which resets both sides.
}

/// Copies one direction, applying the fault in force to every chunk. Returns its
/// halves when the source closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    relay: Relay,
    direction: Direction,
    mut fault: watch::Receiver<NetworkFault>,
) -> (
    tokio::net::tcp::OwnedReadHalf,
    tokio::net::tcp::OwnedWriteHalf,
) {
    let mut buffer = Vec::new();
    loop {
        // A black hole holds everything: nothing is read, so nothing moves.
        if fault
            .wait_for(|f| *f != NetworkFault::BlackHole)
            .await
            .is_err()
        {
            return (from, to);
        }
        let Some(read) = relay.read(&mut from, &mut buffer).await else {
            return (from, to);
        };
        relay.inspect(direction, &mut buffer[..read]);
        let current = *fault.borrow();
        match current {
            NetworkFault::Latency { base, jitter } => {
                let extra = if jitter.is_zero() {
                    Duration::ZERO
                } else {
                    rand::thread_rng().gen_range(Duration::ZERO..jitter)
                };
                tokio::time::sleep(base + extra).await;
            }
            NetworkFault::Bandwidth { bytes_per_second } => {
                let per_byte =
                    Duration::from_secs(1).as_nanos() / u128::from(bytes_per_second.max(1));
                tokio::time::sleep(Duration::from_nanos((per_byte * read as u128) as u64)).await;
            }
            NetworkFault::BlackHole => {
                // Read just before the hole opened: hold it until the hole closes.
                if fault
                    .wait_for(|f| *f != NetworkFault::BlackHole)
                    .await
                    .is_err()
                {
                    return (from, to);
                }
            }
            NetworkFault::Pass | NetworkFault::Cut => {}
        }
        if *fault.borrow() == NetworkFault::Cut {
            return (from, to);
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return (from, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    loop {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if stream.write_all(&buffer[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        (address, task)
    }

    async fn round_trip(stream: &mut TcpStream, wait: Duration) -> Result<Duration, String> {
        let started = tokio::time::Instant::now();
        stream
            .write_all(b"ping")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buffer = [0u8; 4];
        match tokio::time::timeout(wait, stream.read_exact(&mut buffer)).await {
            Ok(Ok(_)) if &buffer == b"ping" => Ok(started.elapsed()),
            Ok(Ok(_)) => Err("garbled".into()),
            Ok(Err(e)) => Err(format!("read: {e}")),
            Err(_) => Err("timed out".into()),
        }
    }

    #[tokio::test]
    async fn passes_then_holds_then_delays_then_cuts_and_refuses() {
        let (upstream, _server) = echo_server().await;
        let proxy = FaultProxy::start(&upstream).await.unwrap();
        let mut stream = TcpStream::connect(proxy.endpoint()).await.unwrap();
        round_trip(&mut stream, Duration::from_secs(1))
            .await
            .unwrap();

        proxy.set(NetworkFault::BlackHole);
        assert_eq!(
            round_trip(&mut stream, Duration::from_millis(300)).await,
            Err("timed out".into())
        );
        proxy.set(NetworkFault::Pass);
        // The held bytes flow once the hole closes.
        let mut buffer = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buffer, b"ping");

        proxy.set(NetworkFault::Latency {
            base: Duration::from_millis(100),
            jitter: Duration::from_millis(20),
        });
        let took = round_trip(&mut stream, Duration::from_secs(2))
            .await
            .unwrap();
        assert!(took >= Duration::from_millis(200), "{took:?}");

        proxy.set(NetworkFault::Cut);
        assert!(round_trip(&mut stream, Duration::from_secs(1))
            .await
            .is_err());
        let refused = async {
            let mut fresh = TcpStream::connect(proxy.endpoint()).await.ok()?;
            round_trip(&mut fresh, Duration::from_millis(500))
                .await
                .ok()
        };
        assert_eq!(refused.await, None, "a cut network refuses new connections");

        proxy.set(NetworkFault::Pass);
        let mut fresh = TcpStream::connect(proxy.endpoint()).await.unwrap();
        round_trip(&mut fresh, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(proxy.connections_accepted() >= 2);
    }

    #[tokio::test]
    async fn reset_peers_breaks_open_connections_only() {
        let (upstream, _server) = echo_server().await;
        let proxy = FaultProxy::start(&upstream).await.unwrap();
        let mut stream = TcpStream::connect(proxy.endpoint()).await.unwrap();
        round_trip(&mut stream, Duration::from_secs(1))
            .await
            .unwrap();
        proxy.reset_peers();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(round_trip(&mut stream, Duration::from_secs(1))
            .await
            .is_err());
        let mut fresh = TcpStream::connect(proxy.endpoint()).await.unwrap();
        round_trip(&mut fresh, Duration::from_secs(1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn bandwidth_limits_throughput() {
        let (upstream, _server) = echo_server().await;
        let proxy = FaultProxy::start(&upstream).await.unwrap();
        proxy.set(NetworkFault::Bandwidth {
            bytes_per_second: 40,
        });
        let mut stream = TcpStream::connect(proxy.endpoint()).await.unwrap();
        // 4 bytes each way at 40 B/s: at least 200 ms.
        let took = round_trip(&mut stream, Duration::from_secs(2))
            .await
            .unwrap();
        assert!(took >= Duration::from_millis(180), "{took:?}");
    }
}
