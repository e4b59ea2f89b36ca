//! The layering rule, checked over a crate's source: every `crate::`, `super::` and `self::`
//! path under its `src/` (imports and inline paths alike, comments and strings skipped) is
//! resolved to the module it names, and
//!
//! * a top-level module may only name the layers its [`Rules::allowed`] row lists (for
//!   `announcer`, data plane ← protocols ← `/state` ← agent ← CLI), and some layers only the
//!   entry points [`Rules::entry_points`] names (the CLI only the agent's `run`, error and
//!   flags);
//! * within every directory, the sibling modules' references form no cycle (a child naming
//!   its parent, or the parent its child, is not a cycle: that is how `mod.rs` and its
//!   children share types).
//!
//! Checked for `announcer/src` ([`ANNOUNCER`]) and `tests/src` ([`TESTS_SRC`]). Why in xtask
//! and not in each crate: one checker, one place for every crate's rule table, and a test of
//! the checker itself that does not depend on either crate building.
//!
//! A failure names the file and line of each offending path.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// One crate's layering rules.
struct Rules {
    /// The crate's `src/`, relative to the workspace root.
    src: &'static str,
    /// Which top-level modules each top-level module may name (besides itself).
    allowed: &'static [(&'static str, &'static [&'static str])],
    /// (layer, used layer, names): `layer` may name only these items of `used layer`.
    entry_points: &'static [(&'static str, &'static str, &'static [&'static str])],
    /// Crate-root names that are not modules of the crate, and the layer each belongs to.
    root_aliases: &'static [(&'static str, &'static str)],
    /// Files under `src/` that are crates of their own (their `crate` is not this one).
    other_crates: fn(&Path) -> bool,
    /// The order of the layers, for the messages.
    order: &'static str,
}

/// `announcer`: the data plane, the protocols and rules, `/state`, the agent, the CLI.
const ANNOUNCER: Rules = Rules {
    src: "announcer/src",
    allowed: &[
        ("dataplane", &["ebpf"]),
        ("election", &["ebpf"]),
        ("heartbeat", &["election", "ebpf"]),
        ("ipam", &[]),
        ("placement", &["dataplane", "election", "ipam", "ebpf"]),
        ("withdraw", &["election"]),
        ("state", &["election", "ebpf"]),
        (
            "agent",
            &[
                "dataplane",
                "election",
                "heartbeat",
                "ipam",
                "placement",
                "state",
                "withdraw",
                "ebpf",
            ],
        ),
        // The allocator (`announcer allocator`): the rules of `ipam`, and of the agent only
        // its shutdown signal and its API client.
        ("allocator", &["ipam", "agent"]),
        // The withdrawal controller (`announcer withdrawer`): the rules of `withdraw`, the
        // Announced condition of `state`, and of the agent only its shutdown signal and its
        // API helpers (the client, the node Lease names).
        ("withdrawer", &["withdraw", "election", "state", "agent"]),
        (
            "cli",
            &[
                "dataplane",
                "ipam",
                "placement",
                "state",
                "agent",
                "allocator",
                "withdrawer",
                "ebpf",
            ],
        ),
    ],
    // What the CLI may name in `agent`: its entry point, its error and its flags; what the
    // allocator may name there: the shutdown signal and the client.
    entry_points: &[
        ("cli", "agent", &["run", "AgentError", "config"]),
        ("allocator", "agent", &["shutdown", "kube"]),
        ("withdrawer", "agent", &["shutdown", "kube"]),
    ],
    // The shared wire and map types of `announcer-ebpf`, re-exported at the crate root.
    root_aliases: &[("maps", "ebpf"), ("wire", "ebpf")],
    other_crates: |rel| rel == Path::new("main.rs"),
    order: "data plane ← protocols ← state ← agent ← allocator, withdrawer ← CLI",
};

/// The building blocks of `tests/src`: what every world and benchmark may use.
const TEST_BLOCKS: [&str; 7] = [
    "programs", "netns", "tools", "cli", "frames", "model", "testrun",
];

/// The building blocks and the in-process API server: what the test worlds may use.
const TEST_BELOW_ENV: [&str; 8] = and(TEST_BLOCKS, "apiserver");

/// The test worlds and everything below them: what the simulator and the plots may use.
const TEST_BELOW_TOP: [&str; 9] = and(TEST_BELOW_ENV, "env");

/// The plots and everything below them: what the benchmarks may use (they draw their results).
const TEST_BELOW_BENCH: [&str; 10] = and(TEST_BELOW_TOP, "plot");

/// `below` and `next`: the layers a layer above `next` may use (`M` is `N + 1`, or the
/// constant does not compile).
const fn and<const N: usize, const M: usize>(
    below: [&'static str; N],
    next: &'static str,
) -> [&'static str; M] {
    let mut out = [next; M];
    let mut i = 0;
    while i < N {
        out[i] = below[i];
        i += 1;
    }
    out
}

/// `announcer-tests` (`tests/src`): building blocks ← the in-process API server ← the test
/// worlds ← the simulator and the plots ← the benchmarks.
const TESTS_SRC: Rules = Rules {
    src: "tests/src",
    allowed: &[
        // Building blocks, bottom up.
        ("programs", &[]),
        ("netns", &["programs"]),
        ("tools", &["programs", "netns"]),
        ("cli", &["programs", "netns"]),
        ("frames", &[]),
        ("model", &[]),
        ("testrun", &["frames", "model"]),
        ("apiserver", &TEST_BLOCKS),
        ("env", &TEST_BELOW_ENV),
        ("sim", &TEST_BELOW_TOP),
        ("plot", &TEST_BELOW_TOP),
        ("bench", &TEST_BELOW_BENCH),
    ],
    entry_points: &[],
    root_aliases: &[],
    // `bin/`: the benchmarks, the demo and the soak run, each a crate of its own.
    other_crates: |rel| rel == Path::new("main.rs") || rel.starts_with("bin"),
    order: "building blocks ← apiserver ← env ← sim, plot ← bench",
};

/// One path in the source, resolved.
#[derive(Clone, Debug)]
struct Reference {
    /// The file it is written in, relative to `src/`.
    file: PathBuf,
    line: usize,
    /// The module it is written in (file module plus inline `mod`s).
    from: Vec<String>,
    /// The absolute path it names.
    to: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of `src` with their line numbers: comments, string and char literals dropped.
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if i >= c.len() {
                    break;
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if (ch == 'r' || (ch == 'b' && at(i + 1) == 'r'))
            && matches!(at(i + 1 + usize::from(ch == 'b')), '"' | '#')
        {
            // Raw string: r"…", r#"…"#, br"…".
            i += 1 + usize::from(ch == 'b');
            let mut hashes = 0;
            while at(i) == '#' {
                hashes += 1;
                i += 1;
            }
            if at(i) != '"' {
                continue; // `r#ident`, not a string.
            }
            i += 1;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                    i += 1 + hashes;
                    break;
                }
                line += usize::from(c[i] == '\n');
                i += 1;
            }
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            i += 1 + usize::from(ch == 'b');
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                line += usize::from(at(i) == '\n');
                i += 1;
            }
            i += 1;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The module path of a file under `src/` (`agent/kube/watch.rs` → `agent::kube::watch`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// Resolves `path` (segments after the first) written in module `base`, whose first segment
/// is `crate`, `self` or `super`.
fn resolve(base: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut abs: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => base.to_vec(),
        _ => return None,
    };
    let mut rest = path;
    if rest[0] == "crate" || rest[0] == "self" {
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        abs.pop()?;
        rest = &rest[1..];
    }
    abs.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(abs)
}

/// Every `crate::`/`self::`/`super::` path in one file, expanding `use` groups.
fn references(rel: &Path, src: &str) -> Vec<Reference> {
    let toks = tokens(src);
    let file_module = module_of(rel);
    let mut out = Vec::new();
    // Inline modules: (name, brace depth at which they close).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let here = || {
            let mut m = file_module.clone();
            m.extend(inline.iter().map(|(n, _)| n.clone()));
            m
        };
        match &toks[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Punct('{'), _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Tok::Ident(first)
                if matches!(first.as_str(), "crate" | "self" | "super")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep)
                    && (i == 0 || toks[i - 1].0 != Tok::PathSep) =>
            {
                let base = here();
                let mut paths = Vec::new();
                let end = path_tree(&toks, i, Vec::new(), &mut paths);
                for (segs, line) in paths {
                    if let Some(to) = resolve(&base, &segs) {
                        out.push(Reference {
                            file: rel.to_owned(),
                            line,
                            from: base.clone(),
                            to,
                        });
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Reads the path (or `use` tree) starting at `toks[i]` with `prefix` before it; pushes each
/// leaf path with its line; returns the index after it.
fn path_tree(
    toks: &[(Tok, usize)],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, usize)>,
) -> usize {
    let line = toks.get(i).map_or(0, |t| t.1);
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                i += 1;
                break;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        Some(Tok::Punct('}')) | None => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        _ => i = path_tree(toks, i, prefix.clone(), out),
                    }
                }
            }
            _ => break,
        }
        if toks.get(i).map(|t| &t.0) == Some(&Tok::PathSep) {
            i += 1;
        } else {
            break;
        }
    }
    // `as alias`: the alias is not part of the path.
    if let Some(Tok::Ident(kw)) = toks.get(i).map(|t| &t.0)
        && kw == "as"
    {
        i += 2;
    }
    if !prefix.is_empty() {
        out.push((prefix, line));
    }
    i
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every reference in `rules.src`, and the set of module paths that are files.
fn scan(rules: &Rules) -> (Vec<Reference>, BTreeSet<Vec<String>>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .join(rules.src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut refs = Vec::new();
    let mut modules = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src/").to_owned();
        if (rules.other_crates)(&rel) {
            continue; // A binary: its `crate` is not this one.
        }
        modules.insert(module_of(&rel));
        let text = std::fs::read_to_string(&f).expect("readable source");
        refs.extend(references(&rel, &text));
    }
    (refs, modules)
}

impl Rules {
    /// The layer a crate-root name belongs to.
    fn layer<'a>(&self, top: &'a str) -> &'a str {
        self.root_aliases
            .iter()
            .find(|(name, _)| *name == top)
            .map_or(top, |(_, layer)| layer)
    }
}

/// The violations of `rules` among `refs`.
fn layering_violations(refs: &[Reference], rules: &Rules) -> Vec<String> {
    let mut bad = Vec::new();
    for r in refs {
        let (Some(from), Some(to)) = (r.from.first(), r.to.first()) else {
            continue;
        };
        let (from_layer, to_layer) = (rules.layer(from), rules.layer(to));
        if from_layer == to_layer {
            continue;
        }
        let Some((_, allowed)) = rules.allowed.iter().find(|(m, _)| *m == from_layer) else {
            bad.push(format!(
                "{}:{}: module `{from}` is in no layer: add it to the rules of {} in \
                 xtask/src/layers.rs",
                r.file.display(),
                r.line,
                rules.src
            ));
            continue;
        };
        let path = format!("crate::{}", r.to.join("::"));
        let entry_points = rules
            .entry_points
            .iter()
            .find(|(l, used, _)| *l == from_layer && *used == to_layer)
            .map(|(_, _, names)| *names);
        if !allowed.contains(&to_layer) {
            bad.push(format!(
                "{}:{}: `{path}`: `{from_layer}` may only use {allowed:?} ({})",
                r.file.display(),
                r.line,
                rules.order
            ));
        } else if let Some(names) = entry_points
            && !r.to.get(1).is_some_and(|s| names.contains(&s.as_str()))
        {
            bad.push(format!(
                "{}:{}: `{path}`: `{from_layer}` may only use the {to_layer}'s {names:?}, \
                 not its internals",
                r.file.display(),
                r.line
            ));
        }
    }
    bad
}

/// The cycles among sibling modules, each with the references that make it.
fn sibling_cycles(refs: &[Reference], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    // parent → (child → child it names → where).
    type Graph = BTreeMap<String, BTreeMap<String, Vec<String>>>;
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for r in refs {
        // The longest module prefix of the target: a file, or a module re-exported by one.
        let mut to = r.to.clone();
        while !to.is_empty() && !modules.contains(&to) {
            to.pop();
        }
        let common = r.from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        let (Some(a), Some(b)) = (r.from.get(common), to.get(common)) else {
            continue; // One contains the other.
        };
        graphs
            .entry(r.from[..common].to_vec())
            .or_default()
            .entry(a.clone())
            .or_default()
            .entry(b.clone())
            .or_default()
            .push(format!("{}:{}", r.file.display(), r.line));
    }
    let mut bad = Vec::new();
    for (parent, g) in &graphs {
        if let Some(cycle) = find_cycle(g) {
            let mut msg = format!(
                "modules under `crate::{}` name each other in a cycle:",
                parent.join("::")
            );
            for w in cycle.windows(2) {
                let at: BTreeSet<&String> = g[&w[0]][&w[1]].iter().collect();
                let shown: Vec<&str> = at.iter().take(3).map(|s| s.as_str()).collect();
                let more = at.len().saturating_sub(shown.len());
                let _ = write!(msg, "\n  {} → {} at {}", w[0], w[1], shown.join(", "));
                if more > 0 {
                    let _ = write!(msg, " and {more} more");
                }
            }
            bad.push(msg);
        }
    }
    bad
}

/// A cycle in `g` (its first node repeated at the end), if there is one.
fn find_cycle(g: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|s| s == n) {
            let mut c = stack[pos..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_owned());
        for next in g.get(n).into_iter().flat_map(|m| m.keys()) {
            if let Some(c) = visit(next, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

/// Asserts that the crate `rules` describes breaks none of them.
fn assert_downward_only(rules: &Rules) {
    let (refs, _) = scan(rules);
    assert!(
        refs.len() > 100,
        "the scan found only {} paths: is it reading {}?",
        refs.len(),
        rules.src
    );
    let bad = layering_violations(&refs, rules);
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

/// Asserts that no sibling modules of the crate `rules` describes name each other in a cycle.
fn assert_no_cycle(rules: &Rules) {
    let (refs, modules) = scan(rules);
    let bad = sibling_cycles(&refs, &modules);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn layers_depend_downward_only() {
    assert_downward_only(&ANNOUNCER);
}

#[test]
fn sibling_modules_form_no_cycle() {
    assert_no_cycle(&ANNOUNCER);
}

#[test]
fn tests_src_layers_depend_downward_only() {
    assert_downward_only(&TESTS_SRC);
}

#[test]
fn tests_src_sibling_modules_form_no_cycle() {
    assert_no_cycle(&TESTS_SRC);
}

#[test]
fn the_checker_sees_grouped_relative_and_inline_paths() {
    let src = r#"
        use crate::{dataplane::Vip, agent::{http, kube::watch as w}};
        // use crate::cli; (a comment)
        fn f() { let s = "crate::cli::x"; crate::cli::run(); }
        mod inner { use super::super::agent::Thing; }
    "#;
    let refs = references(Path::new("state.rs"), src);
    let to: Vec<String> = refs.iter().map(|r| r.to.join("::")).collect();
    assert_eq!(
        to,
        [
            "dataplane::Vip",
            "agent::http",
            "agent::kube::watch",
            "cli::run",
            "agent::Thing"
        ]
    );
    assert_eq!(refs[3].line, 4);
    let bad = layering_violations(&refs, &ANNOUNCER);
    assert_eq!(bad.len(), 5, "{bad:#?}");
    assert!(
        bad[0].starts_with("state.rs:2: `crate::dataplane::Vip`"),
        "{}",
        bad[0]
    );
}

#[test]
fn the_checker_finds_a_cycle_between_siblings() {
    let files = [
        ("agent/a.rs", "use super::b::X;"),
        ("agent/b.rs", "fn f() { crate::agent::a::y(); }"),
        ("agent/c.rs", "use super::a::X;"),
    ];
    let mut refs = Vec::new();
    let mut modules = BTreeSet::new();
    for (f, src) in files {
        modules.insert(module_of(Path::new(f)));
        refs.extend(references(Path::new(f), src));
    }
    let bad = sibling_cycles(&refs, &modules);
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert!(
        bad[0].contains("a → b at agent/a.rs:1") && bad[0].contains("b → a at agent/b.rs:1"),
        "{}",
        bad[0]
    );
}
