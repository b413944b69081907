//! The value space of a message, drawn with edge bias along each of its axes: the
//! payload's length (empty, one, around powers of two, the largest the component's
//! declared size leaves room for) and the bytes at both its ends; the content type in
//! the textual forms clients normalise; the number of metadata entries (none, one, the
//! most the component declares); keys and values from every Unicode plane, in the
//! forms clients and brokers commonly normalise (composed and decomposed, compatibility
//! characters, invisible and padding characters, words that read as other types).
//! A failing draw shrinks (proptest's value trees) to a smaller one that still fails.
//!
//! The draws stay inside what the contract allows: no control character in metadata
//! but a tab (the runtime refuses them, `publish.invalid-requests`), no reserved key.
//! A declared size limit and one byte past it are `publish.size-boundary`'s.

use super::{Sample, KEY};
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, ValueTree};
use pubsub_components::{Capabilities, Metadata};
use std::future::Future;

/// How far the draws reach: what the component declares, or the suite's own reach
/// where it declares nothing.
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// The longest payload drawn: a third of the declared maximum message size (the
    /// rest is the envelope's and the metadata's), at most [`Reach::PAYLOAD_CAP`].
    pub payload_bytes: usize,
    /// The most metadata entries drawn, the case's own key and `rawPayload` included.
    pub metadata_entries: usize,
}

impl Reach {
    /// The longest payload drawn where the component declares no maximum size.
    pub const PAYLOAD_CAP: usize = 256 * 1024;
    /// The most metadata entries drawn where the component declares no limit.
    pub const UNDECLARED_ENTRIES: usize = 64;

    /// The reach for a component declaring `caps`.
    pub fn of(caps: &Capabilities) -> Reach {
        Reach {
            payload_bytes: caps
                .max_message_bytes
                .map_or(Self::PAYLOAD_CAP, |max| (max / 3).min(Self::PAYLOAD_CAP)),
            metadata_entries: caps
                .max_metadata_entries
                .unwrap_or(Self::UNDECLARED_ENTRIES)
                .max(2),
        }
    }
}

/// A draw that can shrink.
pub type DrawTree = Box<dyn ValueTree<Value = Drawn>>;

/// One drawn message, before it is tagged with a case key.
#[derive(Debug, Clone)]
pub struct Drawn {
    pub data: Vec<u8>,
    pub content_type: Option<String>,
    /// The app's own entries (the case key and `rawPayload` come on top).
    pub metadata: Metadata,
    pub raw: bool,
}

impl Drawn {
    /// The draw as a sample tagged `key`.
    pub fn sample(&self, key: &str) -> Sample {
        let mut metadata = self.metadata.clone();
        metadata.insert(KEY.into(), key.to_string());
        if self.raw {
            metadata.insert("rawPayload".into(), "true".into());
        }
        Sample {
            key: key.to_string(),
            data: self.data.clone(),
            content_type: self.content_type.clone(),
            metadata,
        }
    }

    /// A short description for a finding: the payload's length and ends, the content
    /// type, and the metadata entries (the first four shown).
    pub fn describe(&self) -> String {
        let ends = match self.data.as_slice() {
            [] => String::new(),
            [only] => format!(" [{only:#04x}]"),
            [first, .., last] => format!(" [{first:#04x} .. {last:#04x}]"),
        };
        let shown: Vec<String> = self
            .metadata
            .iter()
            .take(4)
            .map(|(k, v)| format!("{k:?}: {v:?}"))
            .collect();
        let more = self.metadata.len().saturating_sub(shown.len());
        format!(
            "payload of {} bytes{ends}, content type {:?}{}, {} metadata entries {{{}{}}}",
            self.data.len(),
            self.content_type,
            if self.raw { ", rawPayload" } else { "" },
            self.metadata.len(),
            shown.join(", "),
            if more > 0 {
                format!(", +{more} more")
            } else {
                String::new()
            }
        )
    }
}

/// Bytes that clients and brokers treat specially at a payload's ends: NUL (C
/// strings), the ends of the byte range, a UTF-8 lead byte without its follower, a
/// BOM's first byte, whitespace, JSON's openers.
const EDGE_BYTES: [u8; 10] = [0x00, 0xff, 0x7f, 0x80, 0xef, 0xc3, b'\n', b' ', b'{', b'"'];

/// Pieces of metadata text at the edges of their space.
const EDGE_PIECES: [&str; 30] = [
    " ",
    "  ",
    "\t",
    // Composed and decomposed forms, compatibility characters (NFC and NFKC change
    // them), Hangul jamo.
    "\u{e9}",
    "e\u{301}",
    "\u{212b}",
    "\u{2126}",
    "\u{fb01}",
    "\u{1100}\u{1161}",
    // Invisible and padding characters some layers trim or drop.
    "\u{a0}",
    "\u{200b}",
    "\u{feff}",
    "\u{fffd}",
    // Every plane past the first: emoji and mathematical letters (1), CJK extensions
    // (2, 3), tags (14), private use (15, 16).
    "\u{1f600}",
    "\u{1d400}",
    "\u{20000}",
    "\u{30000}",
    "\u{e0041}",
    "\u{f0000}",
    "\u{10fffd}",
    // Text that reads as another type, or as syntax of some layer.
    "true",
    "True",
    "1.0",
    "007",
    "null",
    "{\"a\":1}",
    "%20",
    "a=b&c",
    "\\",
    "<x/>",
];

/// Content types in the forms clients normalise (case, parameters, suffixes).
const CONTENT_TYPES: [&str; 6] = [
    "application/octet-stream",
    "application/json",
    "text/plain",
    "text/plain; charset=utf-8",
    "Text/Plain",
    "application/x-custom+proto",
];

/// Whether a draw's content type declares JSON.
fn declares_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(pubsub_components::runtime::envelope::declares_json)
}

/// Whether a draw's content type declares text.
fn declares_text(content_type: Option<&str>) -> bool {
    content_type.is_some_and(pubsub_components::runtime::envelope::declares_text)
}

/// A payload length, biased to the edges.
fn length(reach: Reach) -> BoxedStrategy<usize> {
    let top = reach.payload_bytes;
    let mut edges: Vec<usize> = [0, 1, 2, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097]
        .into_iter()
        .chain([top.saturating_sub(1), top])
        .filter(|n| *n <= top)
        .collect();
    edges.sort();
    edges.dedup();
    prop_oneof![
        3 => proptest::sample::select(edges),
        1 => 0..512usize,
    ]
    .boxed()
}

/// A payload: a length, bytes spun from a seed (so that shrinking the length is
/// quick), and often edge bytes at its ends.
fn payload(reach: Reach) -> BoxedStrategy<Vec<u8>> {
    let end = proptest::option::weighted(0.6, proptest::sample::select(EDGE_BYTES.to_vec()));
    (length(reach), any::<u64>(), end.clone(), end)
        .prop_map(|(n, seed, first, last)| {
            let mut data = spun(n, seed);
            if let (Some(byte), Some(slot)) = (first, data.first_mut()) {
                *slot = byte;
            }
            if let (Some(byte), Some(slot)) = (last, data.last_mut()) {
                *slot = byte;
            }
            data
        })
        .boxed()
}

/// `n` bytes from `seed` (xorshift).
fn spun(n: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Metadata text: edge pieces and plain words, none to several.
fn text() -> BoxedStrategy<String> {
    let piece = prop_oneof![
        2 => proptest::sample::select(EDGE_PIECES.to_vec()).prop_map(str::to_string),
        1 => "[a-zA-Z0-9 ]{0,8}",
    ];
    proptest::collection::vec(piece, 0..6)
        .prop_map(|pieces| pieces.concat())
        .boxed()
}

/// Metadata entries, their count biased to none, one and the most allowed. Keys are
/// numbered (so distinct) and end in text of the same space, without whitespace.
fn metadata(reach: Reach) -> BoxedStrategy<Metadata> {
    // The case key and rawPayload take two of the allowed entries.
    let most = reach.metadata_entries - 2;
    let count = prop_oneof![
        1 => Just(0usize),
        1 => Just(1usize.min(most)),
        1 => Just(most),
        2 => 0..=most.min(8),
    ];
    count
        .prop_flat_map(|n| proptest::collection::vec((text(), text()), n))
        .prop_map(|entries| {
            entries
                .into_iter()
                .enumerate()
                .map(|(i, (key, value))| {
                    // No whitespace in keys: a tab is refused there, spaces are a value's.
                    let key: String = key.chars().filter(|c| !c.is_ascii_whitespace()).collect();
                    (format!("app-{i:02}-{key}"), value)
                })
                .collect()
        })
        .boxed()
}

/// Whole messages across their space.
pub fn message(reach: Reach) -> BoxedStrategy<Drawn> {
    (
        payload(reach),
        proptest::option::weighted(
            0.85,
            proptest::sample::select(CONTENT_TYPES.to_vec()).prop_map(str::to_string),
        ),
        metadata(reach),
        any::<bool>(),
    )
        .prop_map(|(mut data, content_type, metadata, raw)| {
            // A payload declared JSON is JSON: the drawn bytes as a JSON string (their
            // invalid UTF-8 replaced, cut so that escaped, six bytes a character at
            // most, it stays within the drawn length).
            if declares_json(content_type.as_deref()) {
                let length = data.len();
                let mut text = String::from_utf8_lossy(&data).into_owned();
                let mut cut = (length.saturating_sub(2) / 6).min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                data = serde_json::to_vec(&text).expect("a string serializes");
            } else if declares_text(content_type.as_deref()) {
                // A payload declared text is text, within the drawn length.
                let length = data.len();
                let mut text = String::from_utf8_lossy(&data).into_owned();
                let mut cut = length.min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                data = text.into_bytes();
            }
            Drawn {
                data,
                content_type,
                metadata,
                raw,
            }
        })
        .boxed()
}

/// Characters of every Unicode plane a value can hold (0, 1, 2, 3, 14, 15, 16), the
/// first two in the forms normalisation changes.
const PLANES: [&str; 8] = [
    "e\u{301}",
    "\u{212b}",
    "\u{1f600}",
    "\u{20000}",
    "\u{30000}",
    "\u{e0041}",
    "\u{f0000}",
    "\u{10fffd}",
];

/// The sweep over the edges of each axis that the first draws of every seed make,
/// whatever else the seed draws: draw `i` ends (and begins) with edge byte `i`, carries
/// the character of plane `i` in a value, and draws 0, 1 and 2 have no, the most and one
/// metadata entries; the even ones of these are raw payloads, the odd ones enveloped. So every edge is reached on every seed, and the seed varies the
/// rest.
fn swept(mut drawn: Drawn, i: usize, reach: Reach) -> Drawn {
    if let Some(&last) = EDGE_BYTES.get(i) {
        // Bytes, not text or JSON, where the sweep sets them.
        let typed = drawn.content_type.as_deref();
        if declares_json(typed) || declares_text(typed) {
            drawn.content_type = Some("application/octet-stream".into());
        }
        match drawn.data.last_mut() {
            Some(slot) => *slot = last,
            None => drawn.data.push(last),
        }
        let first = EDGE_BYTES[(i + 5) % EDGE_BYTES.len()];
        if drawn.data.len() > 1 {
            drawn.data[0] = first;
        }
    }
    // Both envelope modes meet the edges: raw on even draws, enveloped on odd ones.
    if i < EDGE_BYTES.len() {
        drawn.raw = i.is_multiple_of(2);
    }
    let most = reach.metadata_entries - 2;
    match i {
        0 => drawn.metadata.clear(),
        1 => {
            for k in drawn.metadata.len()..most {
                let piece = EDGE_PIECES[k % EDGE_PIECES.len()];
                drawn
                    .metadata
                    .insert(format!("app-more-{k:02}"), piece.to_string());
            }
        }
        2 => {
            let kept = drawn.metadata.pop_first();
            drawn.metadata.clear();
            drawn.metadata.extend(kept);
        }
        _ => {}
    }
    if let Some(character) = PLANES.get(i.wrapping_sub(3)) {
        // In place of an entry where the draw has the most already.
        if drawn.metadata.len() >= most {
            drawn.metadata.pop_last();
        }
        drawn
            .metadata
            .insert("app-plane".into(), format!("plane {character} edge"));
    }
    drawn
}

/// The first `count` value trees drawn from the case seed: the same on every run
/// with the same seed. The first ones sweep the edges of each axis ([`swept`]).
pub fn trees(reach: Reach, seed: u64, count: usize) -> Vec<DrawTree> {
    let mut runner = super::seeded_runner(seed);
    (0..count)
        .map(|i| {
            message(reach)
                .prop_map(move |drawn| swept(drawn, i, reach))
                .boxed()
                .new_tree(&mut runner)
                .expect("the strategy draws")
        })
        .collect()
}

/// The first `count` draws from the case seed as samples `random-0`, `random-1`...
pub fn samples(caps: &Capabilities, seed: u64, count: usize) -> Vec<Sample> {
    trees(Reach::of(caps), seed, count)
        .iter()
        .enumerate()
        .map(|(i, tree)| tree.current().sample(&format!("random-{i}")))
        .collect()
}

/// What shrinking found: the smallest draw that still failed, what was wrong with it,
/// and how many draws were tried.
pub struct Shrunk {
    pub drawn: Drawn,
    pub problems: Vec<String>,
    pub tried: usize,
}

/// Shrinks the failing draw `index` of `seed`: `fails` publishes a draw and says
/// what is wrong with its delivery (`None`: nothing). At most `steps` draws are tried.
/// (The value tree lives on a thread of its own, since it cannot cross an await.)
pub async fn shrink<F, Fut>(
    reach: Reach,
    seed: u64,
    index: usize,
    problems: Vec<String>,
    steps: usize,
    mut fails: F,
) -> Shrunk
where
    F: FnMut(Drawn) -> Fut,
    Fut: Future<Output = Option<Vec<String>>>,
{
    let (candidates_out, mut candidates) = tokio::sync::mpsc::channel::<Drawn>(1);
    let (verdicts, verdicts_in) = std::sync::mpsc::channel::<bool>();
    let (first_out, first) = tokio::sync::oneshot::channel::<Drawn>();
    let worker = std::thread::spawn(move || {
        let Some(mut tree) = trees(reach, seed, index + 1).pop() else {
            return;
        };
        let _ = first_out.send(tree.current());
        let mut more = tree.simplify();
        while more {
            if candidates_out.blocking_send(tree.current()).is_err() {
                return;
            }
            let Ok(failed) = verdicts_in.recv() else {
                return;
            };
            more = if failed {
                tree.simplify()
            } else {
                tree.complicate()
            };
        }
    });
    let mut shrunk = Shrunk {
        drawn: first.await.expect("the draw is made again from its seed"),
        problems,
        tried: 0,
    };
    while shrunk.tried < steps {
        let Some(candidate) = candidates.recv().await else {
            break;
        };
        shrunk.tried += 1;
        let failed = match fails(candidate.clone()).await {
            Some(problems) => {
                shrunk.drawn = candidate;
                shrunk.problems = problems;
                true
            }
            None => false,
        };
        if verdicts.send(failed).is_err() {
            break;
        }
    }
    drop((candidates, verdicts));
    let _ = worker.join();
    shrunk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_reach_every_axis_edge() {
        let caps = Capabilities {
            max_message_bytes: Some(3 * 5000),
            max_metadata_entries: Some(20),
            ..Capabilities::default()
        };
        let reach = Reach::of(&caps);
        let drawn: Vec<Drawn> = trees(reach, 7, 400).iter().map(|t| t.current()).collect();
        let lengths: Vec<usize> = drawn.iter().map(|d| d.data.len()).collect();
        for edge in [0, 1, 4096, 5000] {
            assert!(lengths.contains(&edge), "no payload of {edge} bytes drawn");
        }
        assert!(
            lengths.iter().all(|n| *n <= 5000),
            "a payload past the reach"
        );
        assert!(drawn.iter().any(|d| d.data.last() == Some(&0)));
        assert!(drawn.iter().any(|d| d.metadata.len() == 18));
        assert!(drawn.iter().all(|d| d.metadata.len() <= 18));
        let text: String = drawn
            .iter()
            .flat_map(|d| d.metadata.values())
            .cloned()
            .collect();
        for plane in [1u32, 2, 3, 14, 15, 16] {
            assert!(
                text.chars().any(|c| c as u32 >> 16 == plane),
                "no character of plane {plane} drawn"
            );
        }
        assert!(text.contains("e\u{301}") && text.contains('\u{212b}'));
        assert!(drawn
            .iter()
            .flat_map(|d| d.metadata.iter())
            .all(|(k, v)| !k.chars().any(char::is_control)
                && !v.chars().any(|c| c.is_control() && c != '\t')));
    }

    #[test]
    fn every_seed_sweeps_every_edge_in_its_first_draws() {
        let reach = Reach::of(&Capabilities::default());
        for seed in 0..20 {
            let drawn: Vec<Drawn> = trees(reach, seed, 11).iter().map(|t| t.current()).collect();
            assert!(
                drawn.iter().any(|d| d.data.last() == Some(&0)),
                "seed {seed}"
            );
            assert!(drawn.iter().any(|d| d.metadata.is_empty()), "seed {seed}");
            assert!(
                drawn
                    .iter()
                    .any(|d| d.metadata.len() == Reach::UNDECLARED_ENTRIES - 2),
                "seed {seed}"
            );
            for plane in PLANES {
                assert!(
                    drawn
                        .iter()
                        .any(|d| d.metadata.values().any(|v| v.contains(plane))),
                    "seed {seed}: no value with {plane:?}"
                );
            }
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_values() {
        let reach = Reach::of(&Capabilities::default());
        let a: Vec<String> = trees(reach, 3, 20)
            .iter()
            .map(|t| t.current().describe())
            .collect();
        let b: Vec<String> = trees(reach, 3, 20)
            .iter()
            .map(|t| t.current().describe())
            .collect();
        assert_eq!(a, b);
    }

    #[tokio::test]
    async fn shrinking_keeps_a_draw_that_still_fails() {
        let reach = Reach::of(&Capabilities::default());
        // Fails whenever the payload ends in NUL: shrinks to a short such payload.
        let index = trees(reach, 11, 400)
            .iter()
            .position(|t| t.current().data.len() > 100 && t.current().data.last() == Some(&0))
            .expect("a long draw ending in NUL");
        let shrunk = shrink(
            reach,
            11,
            index,
            vec!["ends in NUL".into()],
            200,
            |d| async move { (d.data.last() == Some(&0)).then(|| vec!["ends in NUL".to_string()]) },
        )
        .await;
        assert_eq!(shrunk.drawn.data.last(), Some(&0));
        assert!(
            shrunk.drawn.data.len() < 100,
            "shrunk to {} bytes",
            shrunk.drawn.data.len()
        );
    }
}
