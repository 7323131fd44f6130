//! A State API request's options (`limit`, `detail`, `filter_keys`,
//! `filter_predicates`, `filter_values`, as Ray's `StateApiClient` sends them),
//! the schema of each resource (which columns exist, which filter, which only
//! `detail=true` shows), and applying them to rows as Ray's `do_filter` does.

use serde_json::{Map, Value};

/// Ray's `DEFAULT_LIMIT`.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// Ray's `RAY_MAX_LIMIT_FROM_API_SERVER`.
pub(crate) const MAX_LIMIT: usize = 10_000;

/// The columns of one resource, in Ray's order.
pub(crate) struct Schema {
    pub(crate) name: &'static str,
    /// (column, filterable, detail only)
    pub(crate) columns: &'static [(&'static str, bool, bool)],
}

pub(crate) const NODES: Schema = Schema {
    name: "nodes",
    columns: &[
        ("node_id", true, false),
        ("node_ip", true, false),
        ("is_head_node", true, false),
        ("state", true, false),
        ("state_message", false, false),
        ("node_name", true, false),
        ("resources_total", false, false),
        ("labels", false, false),
        ("start_time_ms", false, true),
        ("end_time_ms", false, true),
    ],
};

pub(crate) const ACTORS: Schema = Schema {
    name: "actors",
    columns: &[
        ("actor_id", true, false),
        ("class_name", true, false),
        ("state", true, false),
        ("job_id", true, false),
        ("name", true, false),
        ("node_id", true, false),
        ("pid", true, false),
        ("ray_namespace", true, false),
        ("serialized_runtime_env", false, true),
        ("required_resources", false, true),
        ("death_cause", false, true),
        ("is_detached", false, true),
        ("placement_group_id", true, true),
        ("repr_name", true, true),
        ("num_restarts", false, true),
        ("num_restarts_due_to_lineage_reconstruction", false, true),
        ("num_restarts_due_to_node_preemption", false, true),
        ("call_site", false, true),
        ("label_selector", false, true),
        ("fallback_strategy", false, true),
    ],
};

pub(crate) const PLACEMENT_GROUPS: Schema = Schema {
    name: "placement_groups",
    columns: &[
        ("placement_group_id", true, false),
        ("name", true, false),
        ("creator_job_id", true, false),
        ("state", true, false),
        ("bundles", false, true),
        ("is_detached", true, true),
        ("stats", false, true),
        ("topology_strategy", false, true),
        ("topology_assignments", false, true),
    ],
};

pub(crate) const JOBS: Schema = Schema {
    name: "jobs",
    columns: &[
        ("type", true, false),
        ("job_id", true, false),
        ("submission_id", true, false),
        ("driver_info", false, false),
        ("status", true, false),
        ("entrypoint", false, false),
        ("message", false, false),
        ("error_type", false, false),
        ("start_time", false, true),
        ("end_time", false, true),
        ("metadata", false, true),
        ("runtime_env", false, true),
        ("driver_agent_http_address", false, true),
        ("driver_node_id", false, true),
        ("driver_exit_code", false, true),
    ],
};

pub(crate) const TASKS: Schema = Schema {
    name: "tasks",
    columns: &[
        ("task_id", true, false),
        ("attempt_number", true, false),
        ("name", true, false),
        ("state", true, false),
        ("job_id", true, false),
        ("actor_id", true, false),
        ("type", true, false),
        ("func_or_class_name", true, false),
        ("parent_task_id", true, false),
        ("node_id", true, false),
        ("worker_id", true, false),
        ("worker_pid", true, false),
        ("error_type", true, false),
        ("language", true, true),
        ("required_resources", false, true),
        ("runtime_env_info", false, true),
        ("placement_group_id", true, true),
        ("events", false, true),
        ("profiling_data", false, true),
        ("creation_time_ms", false, true),
        ("start_time_ms", false, true),
        ("end_time_ms", false, true),
        ("task_log_info", false, true),
        ("error_message", false, true),
        ("is_debugger_paused", true, true),
        ("call_site", false, true),
        ("label_selector", false, true),
        ("fallback_strategy", false, true),
    ],
};

/// Why a State API request's options are refused (a 400, its text the reply's `msg`,
/// in Ray's words where Ray has them).
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    #[error("limit={value:?}: expected a whole number of rows (1 to {MAX_LIMIT})")]
    Limit { value: String },
    #[error("Given limit {limit} exceeds the supported limit {MAX_LIMIT}. Use a lower limit.")]
    LimitTooHigh { limit: usize },
    #[error("detail={value:?}: expected true or false")]
    Detail { value: String },
    #[error("unknown query parameter {name:?} for the State API")]
    UnknownParameter { name: String },
    #[error("filter_keys ({keys}), filter_predicates ({predicates}) and filter_values ({values}) must come in threes")]
    FilterCounts { keys: usize, predicates: usize, values: usize },
    #[error("Unsupported filter predicate {predicate} is given. Available predicates: =, !=")]
    Predicate { predicate: String },
    #[error(
        "The given filter column {column} is not supported for {resource}. Supported filter columns: {supported:?}"
    )]
    FilterColumn { column: String, resource: &'static str, supported: Vec<&'static str> },
    #[error("summary_by={by:?}: expected \"func_name\" or \"task_name\" (\"lineage\" is not supported)")]
    SummaryBy { by: String },
}

/// `=` or `!=`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Predicate {
    Equal,
    NotEqual,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Filter {
    pub(crate) column: String,
    pub(crate) predicate: Predicate,
    pub(crate) value: String,
}

/// What a list request asked for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListOptions {
    pub(crate) limit: usize,
    pub(crate) detail: bool,
    pub(crate) filters: Vec<Filter>,
    /// `summary_by` of a summary request.
    pub(crate) summary_by: Option<String>,
}

/// Ray's `convert_string_to_type(value, bool)`.
fn truthy(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

impl ListOptions {
    /// Parses a request's query string; `Err` says which value is wrong and what was expected.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, QueryError> {
        let mut options = ListOptions { limit: DEFAULT_LIMIT, detail: false, filters: Vec::new(), summary_by: None };
        let (mut keys, mut predicates, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "limit" => {
                    options.limit = value.parse().map_err(|_| QueryError::Limit { value: value.to_string() })?;
                    if options.limit > MAX_LIMIT {
                        return Err(QueryError::LimitTooHigh { limit: options.limit });
                    }
                }
                "detail" => {
                    options.detail = truthy(&value).ok_or_else(|| QueryError::Detail { value: value.to_string() })?
                }
                "filter_keys" => keys.push(value.into_owned()),
                "filter_predicates" => predicates.push(value.into_owned()),
                "filter_values" => values.push(value.into_owned()),
                "summary_by" => options.summary_by = Some(value.into_owned()),
                // Ray's clients also send these; the head answers from memory at once.
                "timeout" | "exclude_driver" | "server_timeout_multiplier" => {}
                other => return Err(QueryError::UnknownParameter { name: other.to_string() }),
            }
        }
        if keys.len() != predicates.len() || keys.len() != values.len() {
            return Err(QueryError::FilterCounts {
                keys: keys.len(),
                predicates: predicates.len(),
                values: values.len(),
            });
        }
        for ((column, predicate), value) in keys.into_iter().zip(predicates).zip(values) {
            let predicate = match predicate.as_str() {
                "=" => Predicate::Equal,
                "!=" => Predicate::NotEqual,
                _ => return Err(QueryError::Predicate { predicate }),
            };
            options.filters.push(Filter { column: column.to_lowercase(), predicate, value });
        }
        Ok(options)
    }
}

/// Whether `datum` equals the filter's text, read as the datum's type (strings
/// compare without case, as in Ray).
fn equals(datum: &Value, text: &str) -> bool {
    match datum {
        Value::String(s) => s.to_lowercase() == text.to_lowercase(),
        Value::Bool(b) => truthy(text) == Some(*b),
        Value::Number(n) => text.trim().parse::<f64>().ok().zip(n.as_f64()).is_some_and(|(a, b)| a == b),
        // Lists and maps are not filterable columns.
        Value::Null | Value::Array(_) | Value::Object(_) => false,
    }
}

impl Schema {
    fn filterable(&self) -> Vec<&'static str> {
        self.columns.iter().filter(|(_, f, _)| *f).map(|(c, _, _)| *c).collect()
    }

    /// Checks that every filter names a column this resource filters on.
    pub(crate) fn check(&self, options: &ListOptions) -> Result<(), QueryError> {
        let filterable = self.filterable();
        for filter in &options.filters {
            if !filterable.contains(&filter.column.as_str()) {
                return Err(QueryError::FilterColumn {
                    column: filter.column.clone(),
                    resource: self.name,
                    supported: filterable,
                });
            }
        }
        Ok(())
    }

    /// The rows that pass every filter, each cut to this schema's columns (the
    /// detail-only ones only when asked for; a missing column is null).
    pub(crate) fn filter(&self, rows: Vec<Value>, options: &ListOptions) -> Vec<Value> {
        rows.into_iter()
            .filter(|row| {
                options.filters.iter().all(|f| {
                    let datum = row.get(&f.column).unwrap_or(&Value::Null);
                    match f.predicate {
                        Predicate::Equal => equals(datum, &f.value),
                        Predicate::NotEqual => !equals(datum, &f.value),
                    }
                })
            })
            .map(|mut row| {
                let mut out = Map::new();
                for (column, _, detail_only) in self.columns {
                    if options.detail || !detail_only {
                        out.insert((*column).to_string(), row.get_mut(*column).map(Value::take).unwrap_or(Value::Null));
                    }
                }
                Value::Object(out)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_come_from_rays_query_parameters() {
        let options = ListOptions::parse(Some(
            "limit=5&timeout=30&detail=True&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE",
        ))
        .unwrap();
        assert_eq!(options.limit, 5);
        assert!(options.detail);
        assert_eq!(
            options.filters,
            vec![Filter { column: "state".into(), predicate: Predicate::Equal, value: "ALIVE".into() }]
        );
        assert_eq!(
            ListOptions::parse(Some("limit=10001")).unwrap_err().to_string(),
            "Given limit 10001 exceeds the supported limit 10000. Use a lower limit."
        );
        assert_eq!(
            ListOptions::parse(Some("limit=x")).unwrap_err().to_string(),
            "limit=\"x\": expected a whole number of rows (1 to 10000)"
        );
        assert!(ListOptions::parse(Some("filter_keys=a&filter_predicates=%3E&filter_values=1")).is_err());
        assert!(ListOptions::parse(Some("filter_keys=a")).unwrap_err().to_string().contains("in threes"));
        assert!(ListOptions::parse(Some("bogus=1")).unwrap_err().to_string().contains("bogus"));
    }

    #[test]
    fn filters_compare_as_ray_does_and_columns_follow_the_schema() {
        let rows = vec![
            json!({"node_id": "a", "state": "ALIVE", "is_head_node": true, "start_time_ms": 5, "extra": 1}),
            json!({"node_id": "b", "state": "DEAD", "is_head_node": false, "start_time_ms": 6}),
        ];
        let alive = ListOptions::parse(Some("filter_keys=state&filter_predicates=%3D&filter_values=alive")).unwrap();
        let out = NODES.filter(rows.clone(), &alive);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["node_id"], "a");
        assert!(out[0].get("extra").is_none(), "columns outside the schema are dropped");
        assert!(out[0].get("start_time_ms").is_none(), "detail columns only with detail=true");
        assert_eq!(out[0]["labels"], Value::Null);
        let not_head =
            ListOptions::parse(Some("detail=1&filter_keys=is_head_node&filter_predicates=!%3D&filter_values=True"))
                .unwrap();
        let out = NODES.filter(rows, &not_head);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["start_time_ms"], 6);
        let unknown = ListOptions::parse(Some("filter_keys=labels&filter_predicates=%3D&filter_values=x")).unwrap();
        assert!(NODES.check(&unknown).unwrap_err().to_string().contains("not supported"));
    }
}
