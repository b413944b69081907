//! Ports for the brokers the suite starts itself: free ports outside the kernel's
//! ephemeral range.
//!
//! A port the kernel hands out for `bind(0)` is an ephemeral one, and it is free only
//! until the broker binds it. In between, any outgoing connection on the machine may
//! take it as its local port; a readiness probe connecting to it may even connect to
//! itself (TCP's simultaneous open on loopback), so the probe "succeeds" and the
//! broker then fails to bind (seen: "Could not create server TCP listening socket
//! 127.0.0.1:46295: bind: Address already in use"). Ports below the ephemeral range
//! are never picked for outgoing connections, so neither can happen there.

use rand::Rng;
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::ops::RangeInclusive;
use std::sync::Mutex;

/// The lowest port handed out: above the well-known and the usual service ports.
const LOWEST: u16 = 10_000;

/// Ports this process handed out already (a broker's port and its auxiliary port are
/// picked one after the other, before either is bound).
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The kernel's ephemeral range (`net.ipv4.ip_local_port_range`), or Linux's default.
fn ephemeral_range() -> RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some(bounds.next()??..=bounds.next()??)
        })
        .unwrap_or(32_768..=60_999)
}

/// The ports to pick from: below the ephemeral range, or above it when it starts too
/// low to leave room below.
fn candidates(ephemeral: &RangeInclusive<u16>) -> Option<RangeInclusive<u16>> {
    if *ephemeral.start() > LOWEST + 1_000 {
        Some(LOWEST..=ephemeral.start() - 1)
    } else if *ephemeral.end() < u16::MAX - 1_000 {
        Some(ephemeral.end() + 1..=u16::MAX)
    } else {
        None
    }
}

/// A free port for a broker to listen on: outside the ephemeral range (see the
/// module's note), free on every address, and not handed out by this process before.
/// Falls back to a kernel-picked port only when the ephemeral range leaves no room.
pub fn free_port() -> std::io::Result<u16> {
    let Some(range) = candidates(&ephemeral_range()) else {
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    };
    let (first, count) = (*range.start(), u32::from(range.end() - range.start()) + 1);
    // A random start, so that test processes starting brokers at once rarely meet.
    let offset = rand::thread_rng().gen_range(0..count);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    for step in 0..count {
        let port = first + ((offset + step) % count) as u16;
        if !handed_out.contains(&port) && TcpListener::bind(("0.0.0.0", port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port in {}..={}", range.start(), range.end()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_never_ephemeral() {
        let ephemeral = ephemeral_range();
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let port = free_port().unwrap();
            assert!(!ephemeral.contains(&port), "{port} is in {ephemeral:?}");
            assert!(seen.insert(port), "{port} handed out twice");
            TcpListener::bind(("127.0.0.1", port)).expect("a free port binds");
        }
    }

    #[test]
    fn the_range_leaves_the_ephemeral_one_alone() {
        assert_eq!(candidates(&(32_768..=60_999)), Some(10_000..=32_767));
        assert_eq!(candidates(&(1_024..=50_000)), Some(50_001..=65_535));
        assert_eq!(candidates(&(1_024..=65_535)), None);
    }
}
