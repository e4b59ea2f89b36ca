//! YAML as the configuration file ([`super::file`]) and `announcer migrate` read and write it,
//! with serde-saphyr, and its errors in the words they have always had: `path: message at line
//! L column C`.
//!
//! Why a module of its own: the parser's options are chosen once, here, so that YAML reads as
//! it did with serde_yaml (YAML 1.2 booleans; numbers spelt with leading zeros or underscores
//! stay strings; `.inf` and `.nan` become null in a JSON value; a repeated key in a map keeps
//! the last value, a repeated field of a struct is an error); and an error names the key path
//! and the position the same way whichever library found it. The golden tests of both readers
//! hold this to what serde_yaml did; only the parser's own description of a syntax error or of
//! a node of the wrong shape (a list where a section belongs) is worded differently.

use std::fmt;

use serde::{Serialize, de::DeserializeOwned};
use serde_path_to_error::Segment;
use serde_saphyr::{DefaultMessageFormatter, DuplicateKeyPolicy, Location, MessageFormatter as _};

/// YAML that cannot be read: where (the key path, the position) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct YamlError {
    /// The key path of the value concerned (`heartbeat.interval`, `interfaces[1]`); `None` at
    /// the top of the document.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
    /// Line and column (from 1), if known.
    pub position: Option<(u64, u64)>,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.message)?;
        // Line 1 column 1 is the document itself: serde_yaml left it out, and so does this.
        match self.position {
            Some((line, column)) if (line, column) != (1, 1) => {
                write!(f, " at line {line} column {column}")
            }
            _ => Ok(()),
        }
    }
}

impl YamlError {
    /// An error of ours about the value at `path`, at this error's position.
    pub fn with_message(&self, path: Option<String>, message: String) -> Self {
        YamlError {
            path,
            message,
            position: self.position,
        }
    }

    /// `e`, found at `path` (the key path when it happened) while reading `text`.
    fn new(e: &serde_saphyr::Error, path: &[Segment], text: &str) -> Self {
        use serde_saphyr::Error as E;
        let e = e.without_snippet();
        let path = match e {
            // Syntax: about the text, not a value.
            E::ExternalMessage { .. } | E::Eof { .. } => &[][..],
            // Named by its parent, as serde_yaml did.
            E::SerdeUnknownField { .. } => &path[..path.len().saturating_sub(1)],
            _ => path,
        };
        let location = e.location().filter(|l| l.line() > 0);
        YamlError {
            path: path_text(path),
            message: message(e, location.and_then(|l| scalar_at(text, l))),
            position: location.map(|l| (l.line(), l.column())),
        }
    }
}

/// A key path as serde_yaml wrote it (`heartbeat.interval`, `interfaces[1]`); `None` for the
/// document itself.
fn path_text(path: &[Segment]) -> Option<String> {
    let mut out = String::new();
    for (i, segment) in path.iter().enumerate() {
        let key = match segment {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                continue;
            }
            Segment::Map { key } => key.as_str(),
            Segment::Enum { variant } => variant.as_str(),
            Segment::Unknown => "?",
        };
        if i > 0 {
            out.push('.');
        }
        out.push_str(key);
    }
    (!out.is_empty()).then_some(out)
}

/// The scalar `location` points at, as written.
fn scalar_at(text: &str, location: Location) -> Option<&str> {
    let span = location.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    text.get(start..start.checked_add(len)?)
}

/// What a scalar is, in serde's words (`integer `-1``, `string "maybe"`), read as YAML 1.2's
/// core schema reads it (and serde_yaml did: a number with leading zeros is a string).
fn scalar_kind(scalar: &str) -> String {
    let quoted = |q: char| scalar.len() >= 2 && scalar.starts_with(q) && scalar.ends_with(q);
    if quoted('"') || quoted('\'') {
        return format!("string {:?}", &scalar[1..scalar.len() - 1]);
    }
    let digits = scalar.trim_start_matches(['-', '+']);
    let number = !(digits.len() > 1 && digits.starts_with('0'));
    match scalar {
        "~" | "null" | "Null" | "NULL" | "" => "unit value".to_owned(),
        "true" | "True" | "TRUE" => "boolean `true`".to_owned(),
        "false" | "False" | "FALSE" => "boolean `false`".to_owned(),
        _ if number && (scalar.parse::<i64>().is_ok() || scalar.parse::<u64>().is_ok()) => {
            format!("integer `{scalar}`")
        }
        _ if number && scalar.contains(['.', 'e', 'E']) && scalar.parse::<f64>().is_ok() => {
            format!("floating point `{scalar}`")
        }
        _ => format!("string {scalar:?}"),
    }
}

/// What serde's visitor for a primitive type says it expects.
fn expecting(ty: &str) -> &str {
    match ty {
        "bool" => "a boolean",
        "char" => "a character",
        "string" | "str" | "String" => "a string",
        other => other,
    }
}

/// What went wrong, without the position: serde's own wording for what serde reports (an
/// unknown field or variant, a missing field, a value of the wrong type), the text of custom
/// errors (ours) as it is, a scalar of the wrong type as serde_yaml worded it, and
/// serde-saphyr's wording for the rest (syntax, a node of the wrong shape).
fn message(e: &serde_saphyr::Error, scalar: Option<&str>) -> String {
    use serde_saphyr::Error as E;
    let one_of = |names: &[&str]| match names {
        [] => None,
        [a] => Some(format!("`{a}`")),
        [a, b] => Some(format!("`{a}` or `{b}`")),
        _ => Some(format!(
            "one of {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    };
    match e {
        E::Message { msg, .. } => msg.clone(),
        E::InvalidScalar { ty, .. } if let Some(scalar) = scalar => format!(
            "invalid type: {}, expected {}",
            scalar_kind(scalar),
            expecting(ty)
        ),
        E::InvalidBooleanStrict { .. } if let Some(scalar) = scalar => format!(
            "invalid type: {}, expected {}",
            scalar_kind(scalar),
            expecting("bool")
        ),
        E::SerdeUnknownField {
            field, expected, ..
        } => match one_of(expected) {
            Some(names) => format!("unknown field `{field}`, expected {names}"),
            None => format!("unknown field `{field}`, there are no fields"),
        },
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => match one_of(expected) {
            Some(names) => format!("unknown variant `{variant}`, expected {names}"),
            None => format!("unknown variant `{variant}`, there are no variants"),
        },
        E::SerdeMissingField { field, .. } => format!("missing field `{field}`"),
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => format!("invalid type: {unexpected}, expected {expected}"),
        E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!("invalid value: {unexpected}, expected {expected}"),
        E::SerdeInvalidLength { len, expected, .. } => {
            format!("invalid length {len}, expected {expected}")
        }
        other => DefaultMessageFormatter.format_message(other).into_owned(),
    }
}

/// The parser's options: see the module docs.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        with_snippet: false,
    }
}

/// One document as a `T`; an error names the key path it is about.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut path = Vec::new();
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().iter().cloned().collect();
            e.into_inner()
        })
    })
    .map_err(|e| YamlError::new(&e, &path, text))
}

/// Every document of a stream, as JSON values; empty and null documents are skipped.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, YamlError> {
    serde_saphyr::from_multiple_with_options(text, options())
        .map_err(|e| YamlError::new(&e, &[], text))
}

/// `value` as one YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}
