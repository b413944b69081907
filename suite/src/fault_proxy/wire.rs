//! What the fault proxy must know of a protocol to stay in the path. Most clients
//! connect only to the address they were given, so bytes are relayed as they come.
//! A Kafka client asks the broker where its brokers and coordinators are (Metadata,
//! FindCoordinator, DescribeCluster) and connects there: the proxy reads Kafka's
//! frames and rewrites the broker's advertised address in those replies to its own,
//! so every connection the client opens goes through it.

use std::collections::HashMap;
use std::sync::Mutex;

/// How the proxy relays a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// Bytes as they come, in chunks.
    #[default]
    Opaque,
    /// Kafka's size-prefixed frames, with advertised addresses rewritten.
    Kafka,
}

/// The largest Kafka frame the proxy relays (librdkafka's `receive.message.max.bytes`
/// upper bound); a larger size prefix means the stream is not Kafka's.
pub const MAX_KAFKA_FRAME: usize = 1 << 30;

/// Kafka request api keys whose responses carry broker addresses: Metadata (3),
/// FindCoordinator (10), DescribeCluster (60).
const ADDRESS_APIS: [i16; 3] = [3, 10, 60];

/// Rewrites the upstream broker's advertised address to the proxy's in the replies
/// that carry it, for one client connection.
pub struct AdvertisedAddress {
    /// The upstream's host bytes followed by its port as a big-endian i32: how a host
    /// string and the port after it look on the wire, whatever the string's length
    /// prefix (INT16 in classic versions, an unsigned varint in flexible ones).
    upstream: Vec<u8>,
    /// The same for the proxy: equal in length, so a reply is rewritten in place.
    proxy: Vec<u8>,
    /// Correlation ids of address-carrying requests whose replies are due.
    pending: Mutex<HashMap<i32, i16>>,
}

fn host_and_port(endpoint: &str) -> Result<(&str, i32), String> {
    let (host, port) = endpoint
        .rsplit_once(':')
        .ok_or_else(|| format!("'{endpoint}' is not host:port"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("'{endpoint}' has no valid port"))?;
    Ok((host, i32::from(port)))
}

fn pattern(host: &str, port: i32) -> Vec<u8> {
    [host.as_bytes(), &port.to_be_bytes()].concat()
}

impl AdvertisedAddress {
    /// Rewrites `upstream` (as the broker advertises itself, `host:port`) to `proxy`.
    /// The hosts must be of the same length (both `127.0.0.1` for brokers the suite
    /// runs), so replies keep their size.
    pub fn new(upstream: &str, proxy: &str) -> Result<Self, String> {
        let (upstream_host, upstream_port) = host_and_port(upstream)?;
        let (proxy_host, proxy_port) = host_and_port(proxy)?;
        if upstream_host.len() != proxy_host.len() {
            return Err(format!(
                "the Kafka-aware proxy rewrites advertised addresses in place: the broker's host '{upstream_host}' and the proxy's '{proxy_host}' differ in length (run the broker on 127.0.0.1)"
            ));
        }
        Ok(AdvertisedAddress {
            upstream: pattern(upstream_host, upstream_port),
            proxy: pattern(proxy_host, proxy_port),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// The same rewrite for another client connection, with no reply due yet.
    pub fn for_connection(&self) -> Self {
        AdvertisedAddress {
            upstream: self.upstream.clone(),
            proxy: self.proxy.clone(),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a request frame (size prefix included) from the client.
    pub fn request(&self, frame: &[u8]) {
        // size i32, api_key i16, api_version i16, correlation_id i32.
        let Some(header) = frame.get(4..12) else {
            return;
        };
        let api_key = i16::from_be_bytes([header[0], header[1]]);
        if ADDRESS_APIS.contains(&api_key) {
            let correlation = i32::from_be_bytes([header[4], header[5], header[6], header[7]]);
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(correlation, api_key);
        }
    }

    /// Rewrites a response frame (size prefix included) from the broker when it
    /// answers an address-carrying request; returns how many addresses it rewrote.
    pub fn response(&self, frame: &mut [u8]) -> usize {
        let Some(correlation) = frame
            .get(4..8)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return 0;
        };
        let answers = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&correlation);
        if answers.is_none() {
            return 0;
        }
        let mut rewritten = 0;
        let mut at = 8;
        while let Some(found) = frame[at..]
            .windows(self.upstream.len())
            .position(|w| w == self.upstream.as_slice())
        {
            let start = at + found;
            frame[start..start + self.proxy.len()].copy_from_slice(&self.proxy);
            rewritten += 1;
            at = start + self.proxy.len();
        }
        rewritten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        [&(body.len() as i32).to_be_bytes()[..], body].concat()
    }

    /// A request header: api key, version, correlation id, client id "rdkafka".
    fn request(api_key: i16, correlation: i32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&api_key.to_be_bytes());
        body.extend_from_slice(&12i16.to_be_bytes());
        body.extend_from_slice(&correlation.to_be_bytes());
        body.extend_from_slice(&7i16.to_be_bytes());
        body.extend_from_slice(b"rdkafka");
        frame(&body)
    }

    /// A Metadata v12 (flexible) reply with one broker at `host:port`.
    fn metadata_reply(correlation: i32, host: &str, port: i32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&correlation.to_be_bytes());
        body.push(0); // header tagged fields
        body.extend_from_slice(&0i32.to_be_bytes()); // throttle
        body.push(2); // one broker (compact array: n + 1)
        body.extend_from_slice(&1i32.to_be_bytes()); // node id
        body.push(host.len() as u8 + 1); // compact string length
        body.extend_from_slice(host.as_bytes());
        body.extend_from_slice(&port.to_be_bytes());
        body.push(0); // null rack
        body.push(0); // tagged fields
        frame(&body)
    }

    #[test]
    fn address_replies_are_rewritten_to_the_proxy_and_nothing_else_is() {
        let rewrite = AdvertisedAddress::new("127.0.0.1:40001", "127.0.0.1:50002").unwrap();
        rewrite.request(&request(3, 7));
        let mut reply = metadata_reply(7, "127.0.0.1", 40001);
        assert_eq!(rewrite.response(&mut reply), 1);
        assert_eq!(reply, metadata_reply(7, "127.0.0.1", 50002));

        // A fetched record that happens to hold the same bytes is left alone: its
        // request (Fetch, key 1) carries no address.
        rewrite.request(&request(1, 8));
        let mut fetched = metadata_reply(8, "127.0.0.1", 40001);
        assert_eq!(rewrite.response(&mut fetched), 0);
        assert_eq!(fetched, metadata_reply(8, "127.0.0.1", 40001));

        // A reply is rewritten once: its correlation id is forgotten after it.
        let mut again = metadata_reply(7, "127.0.0.1", 40001);
        assert_eq!(rewrite.response(&mut again), 0);
    }

    #[test]
    fn coordinator_replies_and_other_ports_and_short_frames() {
        let rewrite = AdvertisedAddress::new("127.0.0.1:40001", "127.0.0.1:50002").unwrap();
        rewrite.request(&request(10, 1));
        let mut other_port = metadata_reply(1, "127.0.0.1", 40002);
        assert_eq!(
            rewrite.response(&mut other_port),
            0,
            "another broker's port"
        );
        rewrite.request(&request(60, 2));
        let mut two = [
            metadata_reply(2, "127.0.0.1", 40001),
            b"127.0.0.1".to_vec(),
            40001i32.to_be_bytes().to_vec(),
        ]
        .concat();
        assert_eq!(rewrite.response(&mut two), 2);
        rewrite.request(&[0, 0, 0, 2, 0, 3]);
        assert_eq!(rewrite.response(&mut [0, 0, 0, 1]), 0);
    }

    #[test]
    fn hosts_of_different_length_or_bad_endpoints_are_refused_with_the_reason() {
        let error = AdvertisedAddress::new("kafka-0.internal:9092", "127.0.0.1:5000")
            .err()
            .unwrap();
        assert!(error.contains("'kafka-0.internal'"), "{error}");
        let error = AdvertisedAddress::new("127.0.0.1", "127.0.0.1:5000")
            .err()
            .unwrap();
        assert!(error.contains("not host:port"), "{error}");
    }
}
