//! What a fresh clone needs: nothing in the repository depends on one machine. No
//! committed symlink (a `target` link to a CI cache made every other clone unbuildable),
//! and no absolute path of one machine's folders unless it is the default of a variable
//! that overrides it, named on the same line.

use std::process::Command;

fn root() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/..")
}

/// `git ls-files --stage` of the repository: mode, object, stage and path per line.
fn tracked() -> Vec<(String, String)> {
    let output = Command::new("git")
        .args(["ls-files", "--stage", "-z"])
        .current_dir(root())
        .output()
        .expect("git runs (the repository's files are listed with it)");
    assert!(
        output.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("paths are UTF-8")
        .split('\0')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (meta, path) = entry.split_once('\t').expect("mode and path");
            let mode = meta.split(' ').next().unwrap_or_default().to_string();
            (mode, path.to_string())
        })
        .collect()
}

#[test]
fn nothing_committed_is_a_symlink() {
    let links: Vec<String> = tracked()
        .into_iter()
        .filter(|(mode, _)| mode == "120000")
        .map(|(_, path)| path)
        .collect();
    assert!(
        links.is_empty(),
        "committed symlinks point into one machine's folders: {links:?}"
    );
}

#[test]
fn no_path_has_spaces() {
    let spaced: Vec<String> = tracked()
        .into_iter()
        .map(|(_, path)| path)
        .filter(|path| path.contains(' '))
        .collect();
    assert!(spaced.is_empty(), "paths with spaces: {spaced:?}");
}

/// Folders that exist on one machine only (a CI cache, a home or workspace folder).
const MACHINE_FOLDERS: &[&str] = &[
    "/var/cache/",
    "/work/",
    "/root/",
    "/home/",
    "/Users/",
    "/mnt/",
];

/// Whether the line names an environment variable (`PCS_TANSU_ROOT`, `CARGO_TARGET_DIR`)
/// that overrides the path it holds.
fn names_its_variable(line: &str) -> bool {
    line.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .any(|word| {
            word.len() > 3
                && word.contains('_')
                && word.starts_with(|c: char| c.is_ascii_uppercase())
        })
}

/// The machine paths of a text, as `line: text` for each line with one.
fn machine_paths(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            MACHINE_FOLDERS.iter().any(|folder| {
                line.match_indices(folder).any(|(at, _)| {
                    // A path starts the line or follows a separator, not a longer path
                    // (`$root/var/cache/apt` is inside a root file system).
                    let before = line[..at].chars().next_back();
                    !matches!(before, Some(c) if c.is_alphanumeric() || "/_-.$}".contains(c))
                })
            }) && !names_its_variable(line)
        })
        .map(|(number, line)| format!("{}: {}", number + 1, line.trim()))
        .collect()
}

#[test]
fn no_machine_path_is_committed() {
    let mut found = Vec::new();
    for (mode, path) in tracked() {
        // Lock files hold no paths; this file names the folders it looks for.
        if mode == "120000"
            || path.ends_with(".lock")
            || path.ends_with("package-lock.json")
            || path == "suite/tests/repository.rs"
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("{}/{path}", root())) else {
            continue; // binary files (images) hold no paths to read
        };
        for hit in machine_paths(&text) {
            found.push(format!("{path}:{hit}"));
        }
    }
    assert!(
        found.is_empty(),
        "absolute paths of one machine's folders, with no variable on the line that overrides them:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_machine_path_check_tells_a_default_from_a_hard_path() {
    assert_eq!(
        machine_paths("dir=/var/cache/pcs/target"),
        vec!["1: dir=/var/cache/pcs/target"]
    );
    assert!(machine_paths("dir=\"${PCS_DIR:-/var/cache/pcs/x}\"").is_empty());
    assert!(machine_paths("rm -rf \"$root/var/cache/apt/archives\"").is_empty());
    assert_eq!(machine_paths("see /home/me/x").len(), 1);
}
