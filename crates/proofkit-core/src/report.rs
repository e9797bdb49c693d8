//! Benchmark reports: a table printed as markdown (the layout of the seed documents) and the
//! same rows as one JSON object `{"bench": ..., "rows": [...]}`; plus [`median`].
#![deny(unsafe_code)]

use serde_json::{Map, Value};

/// One benchmark's results: named columns, rows of JSON values.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub bench: String,
    pub columns: Vec<String>,
    pub rows: Vec<Map<String, Value>>,
    /// Free-form facts printed under the table and included in JSON (`"info"`).
    pub info: Map<String, Value>,
}

impl Report {
    pub fn new(bench: &str, columns: &[&str]) -> Self {
        Report {
            bench: bench.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Adds a row given as (column, value) pairs; columns not listed are shown as "---".
    pub fn push(&mut self, cells: Vec<(&str, Value)>) {
        let mut row = Map::new();
        for (k, v) in cells {
            row.insert(k.to_string(), v);
        }
        self.rows.push(row);
    }

    pub fn note(&mut self, key: &str, value: impl Into<Value>) {
        self.info.insert(key.into(), value.into());
    }

    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("bench".into(), Value::String(self.bench.clone()));
        o.insert(
            "rows".into(),
            Value::Array(self.rows.iter().cloned().map(Value::Object).collect()),
        );
        if !self.info.is_empty() {
            o.insert("info".into(), Value::Object(self.info.clone()));
        }
        Value::Object(o)
    }

    /// Renders the markdown table, right-aligning numbers.
    pub fn to_markdown(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                self.columns
                    .iter()
                    .map(|c| r.get(c).map(render).unwrap_or_else(|| "---".into()))
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                cells
                    .iter()
                    .map(|r| r[i].len())
                    .chain([c.len(), 3])
                    .max()
                    .unwrap_or(3)
            })
            .collect();
        let mut out = String::new();
        out.push('|');
        for (c, w) in self.columns.iter().zip(&widths) {
            out.push_str(&format!(" {c:<w$} |"));
        }
        out.push_str("\n|");
        for (i, w) in widths.iter().enumerate() {
            if i == 0 {
                out.push_str(&format!(" {} |", "-".repeat(*w)));
            } else {
                out.push_str(&format!(" {}: |", "-".repeat(w - 1)));
            }
        }
        out.push('\n');
        for r in &cells {
            out.push('|');
            for (i, (v, w)) in r.iter().zip(&widths).enumerate() {
                if i == 0 {
                    out.push_str(&format!(" {v:<w$} |"));
                } else {
                    out.push_str(&format!(" {v:>w$} |"));
                }
            }
            out.push('\n');
        }
        for (k, v) in &self.info {
            out.push_str(&format!("{k}: {}\n", render(v)));
        }
        out
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.abs() >= 1000.0 {
                    format!("{f:.0}")
                } else if f.abs() >= 10.0 {
                    format!("{f:.1}")
                } else {
                    format!("{f:.3}")
                }
            } else {
                n.to_string()
            }
        }
        Value::Null => "---".into(),
        other => other.to_string(),
    }
}

/// The median of `xs` (mean of the middle two for even lengths); NaN for an empty slice.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn table_and_json_agree() {
        let mut r = Report::new("demo", &["impl", "H/s", "peak_rss_kb"]);
        r.push(vec![
            ("impl", json!("proofkit")),
            ("H/s", json!(512.25)),
            ("peak_rss_kb", json!(1234)),
        ]);
        r.push(vec![("impl", json!("peer"))]);
        let md = r.to_markdown();
        assert!(md.contains("| proofkit |"), "{md}");
        assert!(md.contains("512.2"), "{md}");
        assert!(md.contains("---"), "{md}");
        let j = r.to_json();
        assert_eq!(j["rows"][0]["H/s"], json!(512.25));
        assert_eq!(j["rows"].as_array().unwrap().len(), 2);
    }
}
