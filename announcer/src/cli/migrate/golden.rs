//! Golden tests of `migrate metallb`'s YAML: every input the tests feed it (and the shapes
//! `kubectl get -o yaml` prints) parses to exactly these documents and converts to exactly
//! this output and these warnings, and text that is not YAML fails with exactly this text.
//!
//! Why: the YAML library underneath can change (these were written against serde_yaml before
//! the move to serde-saphyr), and the command's output is applied to clusters and compared in
//! reviews, so it must stay byte for byte what it was. Where the library's own syntax-error
//! text is embedded ([`NOT_YAML`]), only that inner text differs: each such entry notes
//! serde_yaml's text above it.

use serde_json::Value;

use super::{
    Options, convert, parse_documents,
    tests::{FULL, ad_doc, pool_doc},
    to_yaml,
};

/// MetalLB's objects as `kubectl get ipaddresspools,l2advertisements -o yaml` prints them
/// (the input of `migrate -f -` in the docs): a `List`, server-set metadata, the
/// last-applied annotation holding JSON, quoted and block strings.
const KUBECTL_LIST: &str = r#"apiVersion: v1
items:
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"annotations":{},"labels":{"announce":"l2"},"name":"l2-pool","namespace":"metallb-system"},"spec":{"addresses":["10.0.80.0/28","10.0.81.10 - 10.0.81.20"],"avoidBuggyIPs":true,"serviceAllocation":{"namespaces":["apps"]}}}
    creationTimestamp: "2025-01-02T03:04:05Z"
    generation: 1
    labels:
      announce: l2
    name: l2-pool
    namespace: metallb-system
    resourceVersion: "1234"
    uid: 5f0c9a4e-2b1d-4c3e-9f8a-7b6c5d4e3f21
  spec:
    addresses:
    - 10.0.80.0/28
    - 10.0.81.10 - 10.0.81.20
    autoAssign: true
    avoidBuggyIPs: true
    serviceAllocation:
      namespaces:
      - apps
  status:
    assignedIPv4: 1
    assignedIPv6: 0
    availableIPv4: 26
    availableIPv6: 0
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata:
    creationTimestamp: "2025-01-02T03:04:06Z"
    generation: 1
    name: reserved
    namespace: metallb-system
    resourceVersion: "1235"
    uid: 6a1d0b5f-3c2e-4d4f-8a9b-8c7d6e5f4a32
  spec:
    addresses:
    - 10.0.82.0/29
    autoAssign: true
    avoidBuggyIPs: false
- apiVersion: metallb.io/v1beta1
  kind: L2Advertisement
  metadata:
    creationTimestamp: "2025-01-02T03:04:07Z"
    generation: 1
    name: l2
    namespace: metallb-system
    resourceVersion: "1236"
    uid: 7b2e1c6a-4d3f-4e5a-9b0c-9d8e7f6a5b43
  spec:
    ipAddressPoolSelectors:
    - matchLabels:
        announce: l2
    nodeSelectors:
    - matchExpressions:
      - key: node-role.kubernetes.io/control-plane
        operator: DoesNotExist
    interfaces: ['eth1', "bond0"]
kind: List
metadata:
  resourceVersion: ""
"#;

/// Every shape of document the tests above convert, in one stream.
fn every_shape() -> String {
    [
        FULL.to_owned(),
        pool_doc("a", "tier: prod", "  serviceAllocation: {namespaces: [web], \
            namespaceSelectors: [{matchLabels: {team: x}}], serviceSelectors: \
            [{matchLabels: {app: x}}, {matchLabels: {app: y}}], priority: 10}"),
        pool_doc("b", "tier: dev", "  autoAssign: false\n  avoidBuggyIPs: true"),
        ad_doc("x", "  ipAddressPools: [a, gone]\n  nodeSelectors: [{matchLabels: {zone: a}}]\n  interfaces: [eth1, eth0]"),
        ad_doc("y", "  ipAddressPoolSelectors: [{matchLabels: {tier: dev}}]\n  nodeSelectors: [{matchLabels: {zone: b}}]"),
        "---\napiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: r, namespace: \
         metallb-system}\nspec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}\n"
            .to_owned(),
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, namespace: x}\n".to_owned(),
        "---\napiVersion: metallb.io/v1beta1\nkind: ServiceL2Status\nmetadata: {name: s, \
         namespace: metallb-system}\n"
            .to_owned(),
    ]
    .concat()
}

/// Scalars as YAML types them (what a label value or an address reads as).
const SCALARS: &str = "a: yes\nb: on\nc: ~\nd: null\ne: 010\nf: 0x1F\ng: 1e3\nh: .inf\n\
    i: '010'\nj: 1.0\nk: -0\nl: true\nm: 2025-01-02\nn: \"\"\no: 1_000\np: 0o17\n\
    q: |\n  two\n  lines\nr: >\n  folded\n  text\n";

/// Inputs `migrate` must parse, and the streams it must convert.
fn migrate_inputs() -> Vec<String> {
    vec![
        FULL.to_owned(),
        KUBECTL_LIST.to_owned(),
        every_shape(),
        SCALARS.to_owned(),
        "a: 1\na: 2\n".to_owned(),
        "---\n---\nkind: X\n...\n".to_owned(),
        "".to_owned(),
    ]
}

/// What one input of [`migrate_inputs`] parses and converts to: the documents as JSON, the
/// converted pools as `to_yaml` prints them, and the warnings.
type Expected = (&'static str, &'static str, &'static [&'static str]);

const EXPECTED: [Expected; 7] = [
    // FULL
    (
        r#"[{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"labels":{"tier":"prod"},"name":"prod","namespace":"metallb-system"},"spec":{"addresses":["192.168.10.0/24","192.168.9.1 - 192.168.9.5","fc00::/124"],"autoAssign":false,"avoidBuggyIPs":true}},{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"name":"all","namespace":"metallb-system"}}]"#,
        r#"---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: prod
spec:
  addresses:
  - 192.168.10.0/24
  - 192.168.9.1-192.168.9.5
  - fc00::/124
  autoAssign: false
  avoidBuggyIPs: true
"#,
        &[],
    ),
    // KUBECTL_LIST
    (
        r#"[{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"metallb.io/v1beta1\",\"kind\":\"IPAddressPool\",\"metadata\":{\"annotations\":{},\"labels\":{\"announce\":\"l2\"},\"name\":\"l2-pool\",\"namespace\":\"metallb-system\"},\"spec\":{\"addresses\":[\"10.0.80.0/28\",\"10.0.81.10 - 10.0.81.20\"],\"avoidBuggyIPs\":true,\"serviceAllocation\":{\"namespaces\":[\"apps\"]}}}\n"},"creationTimestamp":"2025-01-02T03:04:05Z","generation":1,"labels":{"announce":"l2"},"name":"l2-pool","namespace":"metallb-system","resourceVersion":"1234","uid":"5f0c9a4e-2b1d-4c3e-9f8a-7b6c5d4e3f21"},"spec":{"addresses":["10.0.80.0/28","10.0.81.10 - 10.0.81.20"],"autoAssign":true,"avoidBuggyIPs":true,"serviceAllocation":{"namespaces":["apps"]}},"status":{"assignedIPv4":1,"assignedIPv6":0,"availableIPv4":26,"availableIPv6":0}},{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"creationTimestamp":"2025-01-02T03:04:06Z","generation":1,"name":"reserved","namespace":"metallb-system","resourceVersion":"1235","uid":"6a1d0b5f-3c2e-4d4f-8a9b-8c7d6e5f4a32"},"spec":{"addresses":["10.0.82.0/29"],"autoAssign":true,"avoidBuggyIPs":false}},{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"creationTimestamp":"2025-01-02T03:04:07Z","generation":1,"name":"l2","namespace":"metallb-system","resourceVersion":"1236","uid":"7b2e1c6a-4d3f-4e5a-9b0c-9d8e7f6a5b43"},"spec":{"interfaces":["eth1","bond0"],"ipAddressPoolSelectors":[{"matchLabels":{"announce":"l2"}}],"nodeSelectors":[{"matchExpressions":[{"key":"node-role.kubernetes.io/control-plane","operator":"DoesNotExist"}]}]}}]"#,
        r#"---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: l2-pool
spec:
  addresses:
  - 10.0.80.0/28
  - 10.0.81.10-10.0.81.20
  autoAssign: true
  avoidBuggyIPs: true
  interfaces:
  - bond0
  - eth1
  namespaceSelector:
    matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: In
      values:
      - apps
  nodeSelector:
    matchExpressions:
    - key: node-role.kubernetes.io/control-plane
      operator: DoesNotExist
---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: reserved
spec:
  addresses:
  - 10.0.82.0/29
  autoAssign: false
"#,
        &[
            "IPAddressPool metallb-system/reserved: no L2Advertisement selects it, so MetalLB does not announce its addresses: emitted with autoAssign: false (a Service naming it still gets an address, and announcer announces it)",
        ],
    ),
    // every_shape()
    (
        r#"[{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"labels":{"tier":"prod"},"name":"prod","namespace":"metallb-system"},"spec":{"addresses":["192.168.10.0/24","192.168.9.1 - 192.168.9.5","fc00::/124"],"autoAssign":false,"avoidBuggyIPs":true}},{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"name":"all","namespace":"metallb-system"}},{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"labels":{"tier":"prod"},"name":"a","namespace":"metallb-system"},"spec":{"addresses":["10.0.0.0/28"],"serviceAllocation":{"namespaceSelectors":[{"matchLabels":{"team":"x"}}],"namespaces":["web"],"priority":10,"serviceSelectors":[{"matchLabels":{"app":"x"}},{"matchLabels":{"app":"y"}}]}}},{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"labels":{"tier":"dev"},"name":"b","namespace":"metallb-system"},"spec":{"addresses":["10.0.0.0/28"],"autoAssign":false,"avoidBuggyIPs":true}},{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"name":"x","namespace":"metallb-system"},"spec":{"interfaces":["eth1","eth0"],"ipAddressPools":["a","gone"],"nodeSelectors":[{"matchLabels":{"zone":"a"}}]}},{"apiVersion":"metallb.io/v1beta1","kind":"L2Advertisement","metadata":{"name":"y","namespace":"metallb-system"},"spec":{"ipAddressPoolSelectors":[{"matchLabels":{"tier":"dev"}}],"nodeSelectors":[{"matchLabels":{"zone":"b"}}]}},{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer","metadata":{"name":"r","namespace":"metallb-system"},"spec":{"myASN":64500,"peerASN":64501,"peerAddress":"10.0.0.1"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"config","namespace":"x"}},{"apiVersion":"metallb.io/v1beta1","kind":"ServiceL2Status","metadata":{"name":"s","namespace":"metallb-system"}}]"#,
        r#"---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: a
spec:
  addresses:
  - 10.0.0.0/28
  autoAssign: true
  namespaceSelector:
    matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: In
      values:
      - web
  serviceSelector:
    matchLabels:
      app: x
---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: b
spec:
  addresses:
  - 10.0.0.0/28
  autoAssign: false
  avoidBuggyIPs: true
---
apiVersion: announcer.dev/v1alpha1
kind: AddressPool
metadata:
  labels:
    announcer.dev/migrated-from: metallb
  name: prod
spec:
  addresses:
  - 192.168.10.0/24
  - 192.168.9.1-192.168.9.5
  - fc00::/124
  autoAssign: false
  avoidBuggyIPs: true
"#,
        &[
            "BGPPeer metallb-system/r: not converted: announcer announces on layer 2 only (no BGP); pools that only BGP advertised get autoAssign: false below",
            "ConfigMap x/config: not a MetalLB object; skipped",
            "L2Advertisement metallb-system/x: ipAddressPools names gone, which is not among the IPAddressPools read",
            "IPAddressPool metallb-system/a: serviceAllocation.priority 10 is not expressed: an AddressPool has no priority; name the pool on a Service (announcer.dev/address-pool) where the choice matters",
            "IPAddressPool metallb-system/a: serviceAllocation's namespaces and namespaceSelectors are an OR of 2 selectors, which one label selector cannot say: kept \"kubernetes.io/metadata.name in (web)\", dropped \"team=x\" (a Service in a namespace matching only another one gets nothing from this pool, named or not)",
            "IPAddressPool metallb-system/a: serviceAllocation.serviceSelectors are an OR of 2 selectors, which one label selector cannot say: kept \"app=x\", dropped \"app=y\" (a Service matching only another one gets nothing from this pool, named or not)",
        ],
    ),
    // SCALARS
    (
        r#"[{"a":"yes","b":"on","c":null,"d":null,"e":"010","f":31,"g":1000.0,"h":null,"i":"010","j":1.0,"k":0,"l":true,"m":"2025-01-02","n":"","o":"1_000","p":15,"q":"two\nlines\n","r":"folded text\n"}]"#,
        r#""#,
        &["(no kind) : not a MetalLB object; skipped"],
    ),
    // a duplicate key
    (
        r#"[{"a":2}]"#,
        r#""#,
        &["(no kind) : not a MetalLB object; skipped"],
    ),
    // empty documents
    (
        r#"[{"kind":"X"}]"#,
        r#""#,
        &["X : not a MetalLB object; skipped"],
    ),
    // nothing
    (r#"[]"#, r#""#, &[]),
];

#[test]
fn every_input_parses_to_the_same_documents() {
    for (input, (documents, _, _)) in migrate_inputs().into_iter().zip(EXPECTED) {
        let docs = parse_documents(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
        let want: Vec<Value> = serde_json::from_str(documents).expect("golden JSON");
        assert_eq!(docs, want, "{input}");
    }
}

#[test]
fn every_input_converts_to_the_same_yaml_and_warnings() {
    for (input, (_, yaml, warnings)) in migrate_inputs().into_iter().zip(EXPECTED) {
        let docs = parse_documents(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
        let c = convert(&docs, &Options::default()).expect("converts");
        assert_eq!(to_yaml(&c.pools).expect("prints"), yaml, "{input}");
        assert_eq!(c.warnings, warnings, "{input}");
    }
}

/// Text that is not YAML, and the error's text.
const NOT_YAML: &[(&str, &str)] = &[
    (
        "a: [",
        // serde_yaml: "not YAML: did not find expected node content at line 2 column 1, while parsing a flow node"
        "not YAML: unclosed bracket '[' at line 1 column 4",
    ),
    (
        "a: 'x",
        // serde_yaml: "not YAML: found unexpected end of stream at line 1 column 6, while scanning a quoted scalar at line 1 column 4"
        "not YAML: unclosed quote at line 1 column 4",
    ),
    (
        "a:\n\tb: c\n",
        // serde_yaml: "not YAML: found character that cannot start any token at line 2 column 1, while scanning for the next token"
        "not YAML: tabs disallowed within this context (block indentation) at line 2 column 2",
    ),
    (
        "- a\nb: c\n",
        // serde_yaml: "not YAML: did not find expected '-' indicator at line 2 column 1, while parsing a block collection"
        "not YAML: while parsing a block collection, did not find expected '-' indicator at line 2 column 1",
    ),
    (
        "{a: 1",
        // serde_yaml: "not YAML: did not find expected ',' or '}' at line 2 column 1, while parsing a flow mapping"
        "not YAML: unclosed bracket '{'",
    ),
    (
        "a:\n  b: 1\n c: 2\n",
        // serde_yaml: "not YAML: did not find expected key at line 3 column 2, while parsing a block mapping"
        "not YAML: while parsing a block mapping, did not find expected key at line 3 column 2",
    ),
];

#[test]
fn text_that_is_not_yaml_fails_with_the_same_text() {
    let differ: Vec<String> = NOT_YAML
        .iter()
        .filter_map(|(text, want)| {
            let got = parse_documents(text).expect_err(text).to_string();
            (got != *want).then(|| format!("{text:?}\n  want {want:?}\n  got  {got:?}"))
        })
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
