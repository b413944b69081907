//! The documentation stays navigable and tied to the code: every relative link and
//! anchor resolves, the README stays an entry page, and the contract (`docs/contract.md`)
//! names every case of the catalogue while each of its requirements names at least one
//! case that exists.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use pubsub_conformance::catalogue::catalogue;

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A path for messages: relative to the repository's root.
fn shown(path: &Path) -> String {
    let root = root();
    let root = root.canonicalize().unwrap_or(root);
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// The Markdown files whose links are checked: README.md, docs/**/*.md,
/// thirdparty/README.md and sdk/**/README.md (installed packages left out).
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    collect(
        &root.join("docs"),
        &|p| p.extension().is_some_and(|e| e == "md"),
        &mut files,
    );
    let thirdparty = root.join("thirdparty/README.md");
    if thirdparty.is_file() {
        files.push(thirdparty);
    }
    collect(
        &root.join("sdk"),
        &|p| p.file_name().is_some_and(|n| n == "README.md"),
        &mut files,
    );
    files
}

fn collect(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "node_modules" && !name.starts_with('.') {
                collect(&path, keep, out);
            }
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// The text outside fenced code blocks, with the fenced lines blanked (so line numbers
/// stay those of the file).
fn without_fences(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        match &fence {
            Some(open) => {
                if marker.len() >= open.len() && marker.starts_with(&open[..1]) {
                    fence = None;
                }
            }
            None => {
                if marker.len() >= 3 && (marker.starts_with("```") || marker.starts_with("~~~")) {
                    fence = Some(marker);
                } else {
                    out.push_str(line);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The inline code spans of `text` (their contents), and the text with each span
/// replaced by spaces (newlines kept). A run of backticks with no closing run of the
/// same length is literal text, as in CommonMark.
fn code_spans(text: &str) -> (Vec<String>, String) {
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    let mut prose = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            prose.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // Find a closing run of exactly `run` backticks.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|&&c| c == '`').count();
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                let content: String = chars[i + run..j].iter().collect();
                spans.push(content.replace('\n', " ").trim().to_string());
                for &c in &chars[i..j + run] {
                    prose.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = j + run;
            }
            None => {
                for _ in 0..run {
                    prose.push('`');
                }
                i += run;
            }
        }
    }
    (spans, prose)
}

/// Every inline link or image target `[text](target)` of the prose (code left out),
/// with its line number.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let (_, prose) = code_spans(&without_fences(text));
    let chars: Vec<char> = prose.chars().collect();
    let mut targets = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\n' {
            line += 1;
        }
        if chars[i] == ']' && chars.get(i + 1) == Some(&'(') {
            let start = i + 2;
            let mut depth = 1;
            let mut j = start;
            while j < chars.len() && chars[j] != '\n' {
                match chars[j] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if j < chars.len() && chars[j] == ')' {
                let inside: String = chars[start..j].iter().collect();
                let inside = inside.trim();
                let target = if let Some(rest) = inside.strip_prefix('<') {
                    rest.split('>').next().unwrap_or("").to_string()
                } else {
                    inside.split_whitespace().next().unwrap_or("").to_string()
                };
                targets.push((line, target));
                i = j;
                continue;
            }
        }
        i += 1;
    }
    targets
}

/// GitHub's anchor of a heading: lowercase, spaces to '-', punctuation other than '-'
/// and '_' dropped.
fn slug(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.trim().chars() {
        if c == ' ' {
            out.push('-');
        } else if c.is_alphanumeric() || c == '-' || c == '_' {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...
/// as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in without_fences(text).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(byte) = u8::from_str_radix(hex, 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn every_link_resolves() {
    let root = root();
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f.ends_with("docs/README.md")),
        "docs/README.md, the index of docs/, is missing"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = read(file);
        let dir = file.parent().unwrap_or(&root);
        for (line, target) in link_targets(&text) {
            let lower = target.to_ascii_lowercase();
            if lower.starts_with("http://")
                || lower.starts_with("https://")
                || lower.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let at = format!("{}:{line}: link `{target}`", shown(file));
            if target.is_empty() {
                problems.push(format!("{at}: empty target"));
                continue;
            }
            if target.contains("://") {
                problems.push(format!("{at}: a scheme other than http(s) or mailto"));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else if let Some(from_root) = path.strip_prefix('/') {
                root.join(percent_decode(from_root))
            } else {
                dir.join(percent_decode(path))
            };
            if !resolved.exists() {
                problems.push(format!(
                    "{at}: {} does not exist",
                    resolved
                        .strip_prefix(&root)
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|_| resolved.display().to_string())
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.is_file() && resolved.extension().is_some_and(|e| e == "md") {
                let known = anchors(&read(&resolved));
                if !known.contains(anchor) {
                    problems.push(format!(
                        "{at}: no heading of {} has the anchor #{anchor} (its anchors: {})",
                        shown(&resolved),
                        known.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no relative link found in {} files",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_an_entry_page() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; it is the entry page (at most 200): move details into docs/"
    );
}

/// A requirement of the contract: `- **ID** ... MUST ... Cases: `a.b`, `c.d`.`
struct Item {
    id: String,
    line: usize,
    text: String,
}

/// An item's id: capitals, digits and '-', e.g. `BP-1`.
fn is_item_id(id: &str) -> bool {
    !id.is_empty()
        && id.starts_with(|c: char| c.is_ascii_uppercase())
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-')
}

/// Whether a code span looks like a case id (`family.name`; a feature-pair row's name
/// joins features with `+`).
fn looks_like_case_id(span: &str) -> bool {
    let Some((family, name)) = span.split_once('.') else {
        return false;
    };
    let part = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars().all(|c| c.is_ascii_lowercase() || c == '-')
    };
    part(family) && name.split('+').all(part)
}

/// The contract's items: each starts with `- **ID**` at the start of a line and runs
/// until the next item or heading.
fn contract_items(text: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut current: Option<Item> = None;
    for (n, line) in without_fences(text).lines().enumerate() {
        if line.starts_with('#') {
            items.extend(current.take());
            continue;
        }
        if let Some(rest) = line.strip_prefix("- **") {
            if let Some((id, _)) = rest.split_once("**") {
                if is_item_id(id) {
                    items.extend(current.take());
                    current = Some(Item {
                        id: id.to_string(),
                        line: n + 1,
                        text: line.to_string(),
                    });
                    continue;
                }
            }
        }
        if let Some(item) = current.as_mut() {
            item.text.push('\n');
            item.text.push_str(line);
        }
    }
    items.extend(current);
    items
}

#[test]
fn the_contract_names_every_case_and_every_must_has_one() {
    let text = read(&root().join("docs/contract.md"));
    let cases: BTreeMap<&str, &str> = catalogue().iter().map(|c| (c.id, c.must)).collect();
    let items = contract_items(&text);
    assert!(
        !items.is_empty(),
        "docs/contract.md has no `- **ID** ...` item"
    );

    let mut problems = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut named: BTreeSet<String> = BTreeSet::new();
    for item in &items {
        let at = format!("docs/contract.md:{}: {}", item.line, item.id);
        if let Some(first) = seen.insert(item.id.as_str(), item.line) {
            problems.push(format!("{at}: the id is used already at line {first}"));
        }
        if !item.text.contains("MUST") {
            problems.push(format!("{at}: states no MUST"));
        }
        let (spans, _) = code_spans(&item.text);
        let ids: Vec<String> = spans
            .into_iter()
            .filter(|s| looks_like_case_id(s))
            .collect();
        if ids.is_empty() {
            problems.push(format!("{at}: names no case that checks it"));
        }
        named.extend(ids);
    }

    // Every case id named anywhere in the contract is one of the catalogue's.
    let (spans, _) = code_spans(&without_fences(&text));
    for span in spans.iter().filter(|s| looks_like_case_id(s)) {
        if !cases.contains_key(span.as_str()) {
            problems.push(format!(
                "docs/contract.md names `{span}`, which is no case of the catalogue"
            ));
        }
    }

    for (id, must) in &cases {
        // A partitioned twin is under its case's requirements.
        let base = id.strip_suffix("@partitioned").unwrap_or(id);
        if !named.contains(base) {
            problems.push(format!(
                "case `{id}` is under no requirement of docs/contract.md (its MUST: {must})"
            ));
        }
    }

    assert!(
        problems.is_empty(),
        "{} problem(s) with docs/contract.md ({} items, {} cases):\n{}",
        problems.len(),
        items.len(),
        cases.len(),
        problems.join("\n")
    );
}

mod helpers {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("What ./scripts/test.sh runs"),
            "what-scriptstestsh-runs"
        );
        assert_eq!(
            slug("Certifying a running sidecar (`--sidecar`)"),
            "certifying-a-running-sidecar---sidecar"
        );
        assert_eq!(
            slug("omniqueue 0.3.0 (third-party)"),
            "omniqueue-030-third-party"
        );
        assert_eq!(slug("snake_case stays"), "snake_case-stays");
    }

    #[test]
    fn links_in_code_are_not_links() {
        let text = "see [a](b.md) and `[c](d.md)`\n```\n[e](f.md)\n```\n![g](h.png \"t\")\n";
        let targets: Vec<String> = link_targets(text).into_iter().map(|(_, t)| t).collect();
        assert_eq!(targets, ["b.md", "h.png"]);
    }

    #[test]
    fn items_run_to_the_next_item_or_heading() {
        let text = "# A\n- **X-1** MUST `a.b`.\n  more `c.d`\n- **X-2** MUST.\n## B\ntext `e.f`\n";
        let items = contract_items(text);
        assert_eq!(items.len(), 2);
        assert!(items[0].text.contains("c.d"));
        assert!(!items[1].text.contains("e.f"));
        assert!(looks_like_case_id("bulk-publish.keep-order"));
        assert!(!looks_like_case_id("report.json.x"));
        assert!(!looks_like_case_id("1.0"));
    }
}
