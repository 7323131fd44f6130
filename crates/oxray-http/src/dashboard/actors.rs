//! The Actors page: every actor (live ones first), filtered by text and state
//! as the form above the table asks, at most [`MAX_ROWS`] of them, each linking
//! to its worker's log and, while alive, to profiling it.

use super::Dashboard;
use super::render::{MAX_ROWS, Render, Search, ok, page_and_fragment, short_id};
use crate::state::rows::ActorRow;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;

pub(super) fn routes() -> Router<Dashboard> {
    page_and_fragment("/actors", "/ui/actors", page)
}

/// The states the filter offers ("" for any); the template reads them.
const STATES: &[&str] = &["", "ALIVE", "PENDING_CREATION", "RESTARTING", "DEAD"];

/// One row of the table.
struct ActorView {
    id: String,
    short: String,
    class_name: String,
    name: String,
    state: &'static str,
    pid: String,
    node: String,
    node_short: String,
    restarts: i32,
    job_id: String,
    death: String,
}

impl ActorView {
    fn new(a: &ActorRow) -> Self {
        let node = a.node_id.clone().unwrap_or_default();
        Self {
            id: a.actor_id.clone(),
            short: short_id(&a.actor_id),
            class_name: a.class_name.clone(),
            name: a.name.clone(),
            state: a.state,
            pid: a.pid.map(|p| p.to_string()).unwrap_or_default(),
            node_short: short_id(&node),
            node,
            restarts: a.num_restarts,
            job_id: a.job_id.clone(),
            death: a
                .death_cause
                .as_ref()
                .and_then(|c| c["actor_died_error_context"]["error_message"].as_str())
                .unwrap_or("")
                .to_string(),
        }
    }
}

/// The rows the search matched (at most [`MAX_ROWS`]) and how many there were.
struct ActorsTable {
    actors: Vec<ActorView>,
    shown: usize,
    matched: usize,
    total: usize,
}

impl ActorsTable {
    fn new(mut actors: Vec<ActorRow>, search: &Search) -> Self {
        let total = actors.len();
        // Live ones first, then by class.
        actors.sort_by(|a, b| {
            (a.state == "DEAD", &a.class_name, &a.actor_id).cmp(&(b.state == "DEAD", &b.class_name, &b.actor_id))
        });
        let matched: Vec<&ActorRow> = actors
            .iter()
            .filter(|a| search.matches(a.state, &[&a.class_name, &a.name, &a.actor_id, &a.job_id]))
            .collect();
        let views: Vec<ActorView> = matched.iter().take(MAX_ROWS).map(|a| ActorView::new(a)).collect();
        Self { shown: views.len(), matched: matched.len(), total, actors: views }
    }
}

#[derive(Template)]
#[template(path = "actors.html")]
struct ActorsPage {
    title: &'static str,
    here: &'static str,
    query: Search,
    table: ActorsTable,
}

/// The table alone, which htmx refreshes (and the filter's form asks for).
#[derive(Template)]
#[template(path = "actors.html", block = "table")]
struct ActorsFragment {
    table: ActorsTable,
}

async fn page(State(dash): State<Dashboard>, Query(search): Query<Search>, render: Render) -> Response {
    let actors = dash.sources.cluster.as_ref().map(|c| c.actors()).unwrap_or_default();
    let table = ActorsTable::new(actors, &search);
    match render {
        Render::Page => ok(&ActorsPage { title: "Actors", here: "/actors", query: search, table }),
        Render::Fragment => ok(&ActorsFragment { table }),
    }
}
