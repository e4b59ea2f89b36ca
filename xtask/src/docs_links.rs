//! The docs' link check: every relative link in `README.md` and `docs/**/*.md` must lead
//! somewhere.
//!
//! Why a test: the docs move (issue 24 moved the testing and benchmark chapters out of the
//! README, and every measured figure into `docs/benchmarks.md`), and each move breaks links that
//! nobody follows until a reader does. So a link to a file must name a file or directory that
//! exists, and a `#fragment` must match a heading's anchor in the target (or in the same file),
//! computed the way GitHub computes it. Web and mail links are not followed: the suite runs
//! offline.
//!
//! The Markdown is read with pulldown-cmark, so links inside code blocks and inline code are not
//! links, and reference-style links are resolved as a renderer would.

#![cfg(test)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Component, Path, PathBuf},
};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The Markdown extensions GitHub renders, so that tables and footnotes parse as on GitHub.
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
}

/// One link as written: where it is and where it points.
#[derive(Debug)]
struct Link {
    line: usize,
    dest: String,
}

/// The links (and images) of one Markdown text, with their line numbers.
fn links(text: &str) -> Vec<Link> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    Parser::new_ext(text, options())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => Some(Link {
                line: line_of(range.start),
                dest: dest_url.into_string(),
            }),
            _ => None,
        })
        .collect()
}

/// GitHub's anchor for a heading's text: lower case; letters, digits, `-` and `_` kept, every
/// space turned into `-`, everything else (punctuation, symbols) dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of one Markdown text's headings. A repeated heading gets `-1`, `-2`, ... as on
/// GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                found.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    found
}

/// Joins `rel` to the directory of `from` and folds `.` and `..` without touching the disk, so
/// that in-memory samples resolve like files. A link starting with `/` is from the repository
/// root, as GitHub reads it.
fn resolve(from: &Path, rel: &str) -> PathBuf {
    let start = if rel.starts_with('/') {
        PathBuf::new()
    } else {
        from.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let mut out = PathBuf::new();
    for part in start.join(rel.trim_start_matches('/')).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Checks every relative link of `docs` (path from the repository root → Markdown text).
/// `exists` answers for targets that are not among `docs` (pictures, directories, sources).
/// Returns one line per broken link, `file:line: link: why`.
fn broken_links(docs: &BTreeMap<PathBuf, String>, exists: impl Fn(&Path) -> bool) -> Vec<String> {
    let anchors: BTreeMap<&Path, BTreeSet<String>> = docs
        .iter()
        .map(|(path, text)| (path.as_path(), anchors(text)))
        .collect();
    let mut broken = Vec::new();
    for (path, text) in docs {
        for link in links(text) {
            let dest = link.dest.as_str();
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|s| dest.starts_with(s))
            {
                continue;
            }
            let (file, fragment) = match dest.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (dest, None),
            };
            let target = if file.is_empty() {
                path.clone()
            } else {
                resolve(path, file)
            };
            let mut problem = None;
            if !docs.contains_key(&target) && !exists(&target) {
                problem = Some(format!("no such file {}", target.display()));
            } else if let Some(fragment) = fragment {
                match anchors.get(target.as_path()) {
                    Some(known) if known.contains(fragment) => {}
                    Some(_) => {
                        problem = Some(format!(
                            "no heading with anchor #{fragment} in {}",
                            target.display()
                        ))
                    }
                    None => {
                        problem = Some(format!(
                            "{} is not a Markdown page, so #{fragment} names nothing",
                            target.display()
                        ))
                    }
                }
            }
            if let Some(why) = problem {
                broken.push(format!("{}:{}: ({dest}): {why}", path.display(), link.line));
            }
        }
    }
    broken
}

/// `README.md` and every `.md` under `docs/`, relative to the repository root.
fn markdown_pages(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("reading {}: {e}", root.join(dir).display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            let rel = entry
                .strip_prefix(root)
                .expect("under the root")
                .to_path_buf();
            if entry.is_dir() {
                walk(root, &rel, out);
            } else if entry.extension().is_some_and(|e| e == "md") {
                out.push(rel);
            }
        }
    }
    let mut pages = vec![PathBuf::from("README.md")];
    walk(root, Path::new("docs"), &mut pages);
    pages
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_pages(root: &Path) -> BTreeMap<PathBuf, String> {
    markdown_pages(root)
        .into_iter()
        .map(|page| {
            let text = fs::read_to_string(root.join(&page))
                .unwrap_or_else(|e| panic!("reading {}: {e}", page.display()));
            (page, text)
        })
        .collect()
}

fn sample(pages: &[(&str, &str)]) -> BTreeMap<PathBuf, String> {
    pages
        .iter()
        .map(|(path, text)| (PathBuf::from(path), text.to_string()))
        .collect()
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repository_root();
    let broken = broken_links(&read_pages(&root), |target| root.join(target).exists());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_check_reads_the_readme_and_every_page_under_docs() {
    let pages = markdown_pages(&repository_root());
    assert!(pages.contains(&PathBuf::from("README.md")), "{pages:?}");
    assert!(
        pages.contains(&PathBuf::from("docs/README.md")),
        "{pages:?}"
    );
    assert!(
        pages.contains(&PathBuf::from("docs/benchmarks.md")),
        "{pages:?}"
    );
}

#[test]
fn a_link_to_a_missing_file_is_reported_with_its_line() {
    let docs = sample(&[
        (
            "README.md",
            "# Top\n\nSee [install](docs/install.md) and [gone](docs/gone.md).\n",
        ),
        ("docs/install.md", "# Install\n"),
    ]);
    let broken = broken_links(&docs, |_| false);
    assert_eq!(
        broken,
        ["README.md:3: (docs/gone.md): no such file docs/gone.md"]
    );
}

#[test]
fn a_link_to_a_missing_anchor_is_reported_in_another_page_and_in_the_same_page() {
    let docs = sample(&[
        (
            "docs/a.md",
            "# A\n\n## Heartbeat keys: one per node\n\n[ok](b.md#the-testbed) [bad](b.md#benchmarks)\n\
             [ok](#heartbeat-keys-one-per-node) [bad](#heartbeat-keys)\n",
        ),
        ("docs/b.md", "# B\n\n### The testbed\n"),
    ]);
    let broken = broken_links(&docs, |_| false);
    assert_eq!(
        broken,
        [
            "docs/a.md:5: (b.md#benchmarks): no heading with anchor #benchmarks in docs/b.md",
            "docs/a.md:6: (#heartbeat-keys): no heading with anchor #heartbeat-keys in docs/a.md",
        ]
    );
}

#[test]
fn a_fragment_on_a_file_that_is_not_markdown_is_reported() {
    let docs = sample(&[(
        "README.md",
        "![plot](docs/plot.svg) [x](docs/plot.svg#top)\n",
    )]);
    let broken = broken_links(&docs, |target| target == Path::new("docs/plot.svg"));
    assert_eq!(
        broken,
        [
            "README.md:1: (docs/plot.svg#top): docs/plot.svg is not a Markdown page, so #top names nothing"
        ]
    );
}

#[test]
fn links_in_code_and_links_to_the_web_are_not_checked() {
    let docs = sample(&[(
        "README.md",
        "[web](https://example.com/x.md) [mail](mailto:a@b.c)\n\n`[code](gone.md)`\n\n```text\n[block](gone.md)\n```\n",
    )]);
    assert!(broken_links(&docs, |_| false).is_empty());
}

#[test]
fn anchors_are_computed_the_way_github_computes_them() {
    let text = "# Heartbeat keys: one per node\n## The admission policy: each agent writes only its own node's Lease\n\
                ### `announcer status`: one node's view\n## kube-proxy in IPVS mode: strictARP\n\
                ## Run at 75 ms, 2026-12-02\n## Notes\n## Notes\n";
    let found = anchors(text);
    for expected in [
        "heartbeat-keys-one-per-node",
        "the-admission-policy-each-agent-writes-only-its-own-nodes-lease",
        "announcer-status-one-nodes-view",
        "kube-proxy-in-ipvs-mode-strictarp",
        "run-at-75-ms-2026-12-02",
        "notes",
        "notes-1",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
}

#[test]
fn relative_links_resolve_against_the_linking_page_and_leading_slashes_against_the_root() {
    assert_eq!(
        resolve(Path::new("docs/a.md"), "../README.md"),
        Path::new("README.md")
    );
    assert_eq!(
        resolve(Path::new("docs/a.md"), "./b.md"),
        Path::new("docs/b.md")
    );
    assert_eq!(
        resolve(Path::new("docs/a.md"), "/deploy/"),
        Path::new("deploy")
    );
    assert_eq!(
        resolve(Path::new("README.md"), "docs/b.md"),
        Path::new("docs/b.md")
    );
}
